"""Product of Gaussian experts, closed form (PoE eq. 4-12, App. A.3-A.4, A.8).

Expert ``k`` says ``s_i - s_j ~ N(mu_k, sigma^2)`` with the linear-Gaussian mean
``mu_k = alpha (p_k - beta)`` (PoE eq. 11). With ``W`` the ``[R, N]`` incidence
matrix and ``D = diag(w)`` the comparison weights, the posterior mean solves the
normal equations

    (W^T D W) s* = alpha W^T D (p - beta)                     (PoE eq. 7, 11)

and the covariance is ``sigma^2 (W^T D W)^+`` (PoE eq. 8). ``W^T D W`` is the
comparison graph's weighted Laplacian. The paper makes it invertible with an
anchor row ``e_1``; we add instead the projector ``P`` onto per-component
constants (see ``_graph.component_projector``), which returns the same scores
up to a shift on a connected graph, centred to mean 0, and handles
disconnected graphs by centring every connected component on its own.

On a large sparse pool (``_graph.use_cg``: the sparse edge space and at least
``_graph.CG_MIN_ITEMS`` items) :func:`poe_gaussian` solves eq. 11 by conjugate
gradients with ``O(N + R)`` memory and never forms the Laplacian;
:func:`poe_gaussian_posterior` (the covariance, eq. 8) is dense ``[N, N]`` by
nature and always takes the Cholesky path.

**Ties.** Scores equal in exact arithmetic (common with hard decisions,
PoE-g-hard: two candidates with the same wins against the same opponents) come
out of a float32 Cholesky solve a few ulps apart, and apart differently for
different batch shapes (the batched efficiency sweep and the same problem
solved alone ranked such candidates differently: Spearman 43.0 against 47.0 on
a TopicalChat slice). The dense path therefore returns two scores closer than
their own estimated forward errors plus one rounding of the largest score
(:func:`solve_precision`) as exact ties at their mean (:func:`tie_scores`,
shared with Bradley-Terry: ``_ties``): a rank statistic with average ranks then sees
the ties the equations have, whichever path solved them. The CG path (large
pools, solved to ``CG_TOL``) returns its scores as solved.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _batching, _graph, _sparse_inverse, _validate
from jaxrank.comparisons import Comparisons
from jaxrank.scoring import _ties
from jaxrank.scoring._ties import TIE_SAFETY, tie_scores  # noqa: F401  (their home before issue 32's BT ties)
from jaxrank.scoring.counting import decisions

__all__ = ["poe_gaussian", "poe_gaussian_posterior", "GaussianPosterior", "MarginalPosterior"]


class GaussianPosterior(NamedTuple):
    """A Gaussian over scores: ``N(mean, covariance)``.

    Attributes:
        mean: ``[..., N]`` scores, centred per connected component.
        covariance: ``[..., N, N]`` covariance of the centred scores (the
            pseudo-inverse of the precision); rows of padded items are 0, and those of an item in no
            comparison are 0 without a score prior and ``1/score_prior`` on its diagonal under one
            (:func:`jaxrank.uncertainty.laplace_posterior`).
        precision: ``[..., N, N]`` precision (a weighted Laplacian; singular
            along per-component constants).
        item_mask: bool ``[..., N]`` of the real items (``False`` for padding of a
            batch, :func:`jaxrank.stack_contexts`), or ``None`` (all real): the
            default ``where`` of :func:`jaxrank.rank_intervals` and
            :func:`jaxrank.ranking_confidence`.
    """

    mean: jax.Array
    covariance: jax.Array
    precision: jax.Array
    item_mask: jax.Array | None = None

    @property
    def stderr(self) -> jax.Array:
        """``[..., N]`` marginal standard deviation of every score."""
        return jnp.sqrt(jnp.clip(jnp.diagonal(self.covariance, axis1=-2, axis2=-1), 0))


class MarginalPosterior(NamedTuple):
    """The marginals of a Gaussian over scores, without its ``[N, N]`` covariance (``O(N)``).

    What :func:`jaxrank.laplace_posterior` returns with ``covariance="diagonal"``
    (the variances estimated by a sparse method; see its docstring for the accuracy).

    Attributes:
        mean: ``[..., N]`` scores, centred per connected component.
        variance: ``[..., N]`` marginal variance of every centred score (0 for padded items; for an item in no
            comparison 0 without a score prior, ``1/score_prior`` under one).
    """

    mean: jax.Array
    variance: jax.Array

    @property
    def stderr(self) -> jax.Array:
        """``[..., N]`` marginal standard deviation of every score."""
        return jnp.sqrt(jnp.clip(self.variance, 0))


def _targets(c: Comparisons, debias, hard):
    # ``debias`` and ``hard`` are traced booleans: every variant runs one compiled program.
    x = jnp.where(hard, decisions(c.p), c.p)
    mean = jnp.sum(c.weight * x) / jnp.maximum(jnp.sum(c.weight), 1e-30)
    return x - jnp.where(debias, mean, 0.5).astype(x.dtype)


def residual_variance(c, scores, judged, labels, *, debias, hard):
    """``sigma^2-hat = sum_k w_k r_k^2 / (R - N + C)``: PoE-g's expert variance estimated from its residuals.

    :func:`jaxrank.poe_gaussian_posterior` returns the covariance ``(W^T D W)^+`` in units of the experts'
    variance ``sigma^2`` (taken as 1); ``jaxrank rank`` multiplies it by this estimate, the weighted
    least-squares residual variance, so that the printed s.e. is in the units of the scores (on p-scale
    targets sigma is near 0.1-0.3, and sigma = 1 made the s.e. several times too large).

    ``r_k = y_k - (s_i - s_j)`` with ``y_k`` PoE-g's target (``p - 0.5``, ``p - mean p`` when debiased, the
    decisions for ``hard``), ``R`` the comparisons of weight > 0, ``N`` the judged items, ``C`` their connected
    components (``N - C`` free scores) and one more degree of freedom taken by a fitted ``beta = mean p``.

    Args:
        c: the comparisons PoE-g was fitted on (``[..., R]``).
        scores: ``[..., N]`` its posterior mean.
        judged: bool ``[..., N]``, the real items in some comparison of weight > 0.
        labels: ``[..., N]`` component labels (:meth:`jaxrank.Comparisons.components`: the smallest index).
        debias: whether ``beta = mean p`` was fitted; hard: whether the targets are the decisions.

    Returns:
        ``[...]`` the estimate, NaN where the degrees of freedom ``R - N + C (- 1)`` are not positive
        (as many free parameters as comparisons: no residual to estimate sigma from).
    """
    y = _targets(c, debias, hard)
    d = jnp.take_along_axis(scores, c.i, axis=-1) - jnp.take_along_axis(scores, c.j, axis=-1)
    live = c.weight > 0
    rss = jnp.sum(jnp.where(live, c.weight * (y - d) ** 2, 0), axis=-1)
    roots = judged & (labels == jnp.arange(labels.shape[-1]))
    dof = jnp.sum(live, axis=-1) - jnp.sum(judged, axis=-1) + jnp.sum(roots, axis=-1) - int(debias)
    return jnp.where(dof > 0, rss / jnp.maximum(dof, 1), jnp.nan)


CG_TOL = 1e-6
"""Relative residual at which the conjugate-gradient solve of a large sparse pool stops."""


def _solve_cg(e, w, rhs, labels, k):
    """``(L + k P)^{-1} rhs`` by Jacobi-preconditioned conjugate gradients, ``O(N + R)`` memory.

    ``L v = W^T D W v`` is a gather and a scatter-add over the comparisons and
    ``P v`` a segment mean (``_graph.component_mean``): no ``[N, N]`` array.
    """
    sizes = _graph.component_sizes(labels, rhs.dtype)
    matvec = lambda v: _graph.incidence_t(e, w * _graph.incidence(e, v)) + k * _graph.component_mean(v, labels, sizes)
    deg = _graph.item_sums(e, w, w)
    diag = deg + k / sizes
    # at most one iteration per item in a comparison, plus one: padded items (a bucket) never add one
    s, _ = jax.scipy.sparse.linalg.cg(matvec, rhs, tol=CG_TOL, maxiter=jnp.sum(deg > 0) + 1,
                                      M=lambda v: v / diag)
    return s


def solve_precision(cf, a, b, s):
    """``(tol, item_tol)``: how far apart two scores of ``s = a^{-1} b``, solved through the Cholesky factor
    ``cf``, may be and still be tied (:func:`tie_scores`: ``tol + item_tol_a + item_tol_b``).

    ``_ties.tolerance(delta, s)``: ``tol = TIE_SAFETY eps max_i |s_i|`` (one rounding of the largest score,
    Bradley-Terry's floor) and ``item_tol = TIE_SAFETY |delta|``, with ``delta = a^{-1} (b - a s)`` the
    correction one step of iterative refinement would make (the a-posteriori estimate of each score's forward
    error, as LAPACK's ``xPORFS`` forms it; it carries the condition number of ``a``). Each pair is judged by
    its own two scores' errors, not by the largest error of all items. No gradient flows through it.
    """
    s0 = jax.lax.stop_gradient(s)
    r = jax.lax.stop_gradient(b - a @ s0)
    delta = jax.scipy.linalg.cho_solve((jax.lax.stop_gradient(cf[0]), cf[1]), r[:, None])[:, 0]
    return _ties.tolerance(delta, s)


def _scale(trace, num_items):
    """``k = trace(L) / N``, the Laplacian's mean diagonal (1 without comparisons): the projector's weight on L's
    own scale, so that scaling every weight by a constant scales ``L + k P`` and leaves the scores as they are
    (a fixed floor of 1 lost L to rounding beside ``P`` for weights near 1e-8, and gave NaN near 1e-10)."""
    return jnp.where(trace > 0, trace / num_items, 1.0)


def _solve_one(c: Comparisons, debias, hard, alpha, with_cov):
    y = alpha * _targets(c, debias, hard)
    e = _graph.edges(c)
    w, wy = _graph.reduce(e, c.weight, c.weight * y)
    if not with_cov and _graph.use_cg(e):   # large sparse pool: eq. 11 by CG, no [N, N] Laplacian
        labels = _graph.components(c, e=e, w=w)
        k = _scale(2 * jnp.sum(w), c.num_items)               # trace(L) / N, as below
        return _solve_cg(e, w, _graph.incidence_t(e, wy), labels, k)
    lap = _graph.laplacian(e, w)
    proj = _graph.component_projector(_graph.components(c, e=e, w=w), lap.dtype)
    # (L + k P)^{-1} = L^+ + P / k; k on L's scale keeps float32 precision whatever the weights' scale.
    k = _scale(jnp.trace(lap), c.num_items)
    a = lap + k * proj
    cf = jax.scipy.linalg.cho_factor(a, lower=True)
    b = _graph.incidence_t(e, wy)
    s = jax.scipy.linalg.cho_solve(cf, b[:, None])[:, 0]
    alone = jnp.diagonal(proj) >= 1                 # padded or in no comparison: its score stays exactly 0
    s = tie_scores(s, c.item_mask & ~alone, *solve_precision(cf, a, b, s))
    if not with_cov:
        return s
    eye = jnp.eye(c.num_items, dtype=lap.dtype)
    cov = jax.scipy.linalg.cho_solve(cf, eye) - proj / k
    cov = jnp.where(alone[:, None] | alone[None, :], 0, cov)
    return GaussianPosterior(s, 0.5 * (cov + cov.T), lap, c.item_mask)


def _check_debias(debias):
    if debias not in (False, True, "mean") or isinstance(debias, (int, float)) and not isinstance(debias, bool):
        raise ValueError(f"debias must be False, True or 'mean' for poe_gaussian; got {debias!r}")
    return bool(debias)


def _check(c, hard, alpha):
    """The checks of :func:`poe_gaussian`'s options (``ValueError`` naming the argument)."""
    _validate.comparisons("c", c)
    if not isinstance(hard, (bool, np.bool_)):
        raise ValueError(f"hard must be True or False, got {hard!r}")
    _validate.number("alpha", alpha, low=0.0, low_open=True)   # 0 zeroes the scores, < 0 flips them
    return bool(hard)


@functools.partial(jax.jit, static_argnames=("with_cov",))
def _solve(c, debias, hard, alpha, with_cov):
    return _batching.batched(_solve_one, c, debias=debias, hard=hard, alpha=alpha, with_cov=with_cov)


def _solve_bucketed(c, debias, hard, alpha, with_cov):
    """:func:`_solve` on ``c`` padded to its bucket (``_batching.bucketed``: one program per bucket)."""
    def fn(cc, d, h, a):
        out = _solve(cc, d, h, a, with_cov)
        return tuple(out) if with_cov else (out,)

    a = alpha if isinstance(alpha, jax.Array) else np.asarray(alpha, c.p.dtype)
    out = _batching.bucketed(fn, f"poe_gaussian-{with_cov}", c, np.asarray(debias), np.asarray(hard), a)
    return GaussianPosterior(*out) if with_cov else out[0]


def poe_gaussian(c: Comparisons, *, debias=False, hard=False, alpha=1.0) -> jax.Array:
    """PoE with Gaussian experts (PoE-g), closed form (PoE eq. 11).

    ``s* = alpha (W^T D W)^+ W^T D (p - beta)``, ``beta = 0.5``, or
    ``beta = mean(p)`` when debiased (PoE eq. 12, App. A.8). With
    ``hard=True`` the decisions ``1[p > 0.5]`` replace ``p`` (PoE-g-hard).
    Differentiable in ``p`` and ``weight`` (a linear solve).

    Args:
        c: comparisons, any batch shape.
        debias: ``False``, or ``True``/``"mean"`` for ``beta = weighted mean of p``.
        hard: use hard decisions.
        alpha: scale ``> 0`` of the linear mean (only rescales the scores).

    Returns:
        ``[..., N]`` scores, centred per connected component; items in no
        comparison and padded items get 0.

    Raises:
        ValueError: a bad ``c``, ``debias``, ``hard`` or ``alpha`` (not a finite number > 0).
    """
    return _solve_bucketed(c, _check_debias(debias), _check(c, hard, alpha), alpha, False)


def _marginals_one(c: Comparisons, key, debias, hard, alpha, num_probes):
    """PoE-g's mean and marginal variances ``diag((W^T D W)^+)`` of one context, ``O(N + R)`` memory."""
    s = _solve_one(c, debias, hard, alpha, False)          # CG on a large sparse pool (no [N, N] array)
    e = _graph.edges(c, dense=False)
    labels = _graph.components(c, e=e, w=c.weight)
    dt = c.p.dtype
    terms = _sparse_inverse.PrecisionTerms(e, c.weight, jnp.zeros((c.num_items, 0), dt), jnp.zeros((0, 0), dt),
                                           jnp.zeros((), dt), labels)
    var = _sparse_inverse.marginal_variances(terms, key, num_probes)
    return MarginalPosterior(s, jnp.where(c.item_mask, var, 0))


@functools.partial(jax.jit, static_argnames=("num_probes",))
def _solve_marginals(c, key, debias, hard, alpha, num_probes):
    return _batching.batched(_marginals_one, c, key=key, debias=debias, hard=hard, alpha=alpha,
                             num_probes=num_probes)


def poe_gaussian_posterior(c: Comparisons, *, debias=False, hard=False, alpha=1.0, covariance: str = "dense",
                           key=None, num_probes: int = _sparse_inverse.NUM_PROBES):
    """The Gaussian posterior of PoE-g: mean (PoE eq. 7) and covariance ``(W^T D W)^+`` (PoE eq. 8).

    The covariance is in units of the experts' variance ``sigma^2`` (taken as 1);
    it does not depend on ``p``, only on which comparisons were made and their
    weights ``D``.

    Args:
        c, debias, hard, alpha: as :func:`poe_gaussian`.
        covariance: ``"dense"``: the full ``[N, N]`` covariance (a
            :class:`GaussianPosterior`, ``O(N^2)`` memory). ``"diagonal"``:
            only the marginal variances ``diag((W^T D W)^+)``, a
            :class:`MarginalPosterior` in ``O(N + R)`` memory, by Hutchinson's
            estimator over ``num_probes`` Rademacher probes, each one
            conjugate-gradient solve (as :func:`jaxrank.laplace_posterior`:
            relative error of a variance about ``1 / sqrt(d K)`` for ``d``
            comparisons per item and ``K`` probes). ``"auto"``: dense up to
            :data:`jaxrank.uncertainty.DENSE_COVARIANCE_MAX_ITEMS` items or on
            a dense pool, diagonal above.
        key: ``jax.random`` key of the probes (``"diagonal"``; default ``key(0)``: reproducible).
        num_probes: Hutchinson probes (``"diagonal"``), rounded up to a multiple of 16.

    Raises:
        ValueError: as :func:`poe_gaussian`, a bad ``covariance`` or ``num_probes``.
    """
    debias, hard = _check_debias(debias), _check(c, hard, alpha)
    form = _sparse_inverse.covariance_form(covariance, c.num_items, c.i.shape[-1])
    num_probes = _validate.integer("num_probes", num_probes, low=1)
    if form == "dense":
        return _solve_bucketed(c, debias, hard, alpha, True)
    return _solve_marginals(c, jax.random.key(0) if key is None else key, debias, hard, alpha, num_probes)
