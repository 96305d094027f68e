"""Uncertainty of scores: the Laplace approximation of soft Bradley-Terry (PoE App. A.5).

At the maximum ``s*`` of the soft-BT likelihood, the posterior over scores is
approximated by ``N(s*, H^+)`` with ``H`` the Hessian of the negative
log-likelihood: a Laplacian weighted by ``w_k q_k (1 - q_k)``,
``q_k = sigmoid(s*_i - s*_j - gamma)`` (METHODS.md §4). When ``gamma`` is
learnt jointly, the score block of the joint covariance is used (the Schur
complement ``H_ss - h h^T / h_gg`` is the marginal precision of ``s``). Where the
comparisons do not identify ``gamma`` (``soft_bt``: it is then held at its
prior mean 0), ``h = 0`` and the posterior is conditional on ``gamma = 0``.

The Gaussian-expert posterior (PoE eq. 7-8) is :func:`jaxrank.poe_gaussian_posterior`;
both return a :class:`jaxrank.GaussianPosterior`. :func:`laplace_posterior` with a
:class:`jaxrank.ProductOfExpertsSolver` gives the same approximation for any expert:
the precision is the Hessian ``W^T diag(c) W`` weighted by the curvatures
``c_k = -w_k d^2 log q / dd^2`` at the optimum (:mod:`jaxrank.scoring.poe`).

**Items in no comparison** (only in weight-0 rows, or in a context whose rows all
weigh 0) have no evidence. With a score prior ``N(0, 1/lambda)`` (``score_prior =
lambda > 0``) their posterior is exactly the prior: mean 0, variance ``1/lambda``,
and no covariance with any other item. Without one their score is unidentified:
mean 0 and variance 0, as for a padded item, which is not certainty. A real item
whose precision row has no off-diagonal entry (or whose variance is 0) is such an
item to :func:`rank_intervals` (its interval is ``[1, n]``),
:func:`ranking_confidence` (left out) and, without a prior, :func:`score_intervals`
(``(-inf, inf)``); ``Comparisons.games() == 0`` tells them apart before any fit.

**Disconnected pools**: each connected component is centred on its own, and the
data fix no offset between components; :func:`rank_intervals` and
:func:`ranking_confidence` rank them on one scale all the same and warn
(:class:`DisconnectedRankingWarning`) on concrete input.
"""

from __future__ import annotations

import functools
import warnings
from statistics import NormalDist
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _batching, _deprecation, _graph, _sparse_inverse, _validate, metrics
from jaxrank.bootstrap import _key      # an int seed or a key, read as the bootstrap reads it
from jaxrank.comparisons import Comparisons
from jaxrank.scoring import existence, poe, soft_bt
from jaxrank.scoring.gaussian import GaussianPosterior, MarginalPosterior
from jaxrank.scoring.soft_bt import SoftBTSolution
from jaxrank.scoring.solver import BradleyTerrySolver, ProductOfExpertsSolver

__all__ = ["laplace_bradley_terry", "laplace_posterior", "LaplaceFit", "posterior_samples", "score_intervals",
           "rank_intervals", "RankIntervals", "ranking_confidence", "DisconnectedRankingWarning"]


def _projector_scale(h, n):
    """The mean diagonal of the precision's score block (at least 1e-30)."""
    return jnp.maximum(jnp.trace(h[:n, :n]) / n, 1e-30)


DENSE_COVARIANCE_MAX_ITEMS = _sparse_inverse.DENSE_COVARIANCE_MAX_ITEMS
"""``covariance="auto"`` keeps the dense ``[N, N]`` covariance up to this many items (16 MB in float32,
an ``O(N^3)`` factorisation of a second or so), or on a dense pool (``_graph.use_dense``); above, it
estimates the marginal variances by the sparse method (``O(N + R)``)."""

NUM_PROBES = _sparse_inverse.NUM_PROBES
"""Hutchinson probes of the sparse marginal variances (``covariance="diagonal"``)."""


class LaplaceFit(NamedTuple):
    """Result of :func:`laplace_posterior`: the fitted solution and the Laplace posterior at it.

    Attributes:
        solution: the :class:`jaxrank.SoftBTSolution` (scores, ``gamma``,
            iterations, convergence, result code).
        posterior: the :class:`jaxrank.GaussianPosterior` at ``solution``, or
            with ``covariance="diagonal"`` a :class:`jaxrank.MarginalPosterior`.
    """

    solution: SoftBTSolution
    posterior: GaussianPosterior | MarginalPosterior


def _fit_one(c, theta, solver):
    general = isinstance(solver, ProductOfExpertsSolver)
    return poe.solve_context(c, solver, theta) if general else soft_bt.solve_context(c, solver)


def _laplace_one(c, theta, solver):
    general = isinstance(solver, ProductOfExpertsSolver)
    sol = _fit_one(c, theta, solver)
    n = c.num_items
    proj = _graph.component_projector(_graph.components(c), c.p.dtype)
    h = poe.hessian(c, sol, solver, proj, theta) if general else soft_bt.hessian(c, sol, solver, proj)
    if h.shape[0] > n:   # learnt parameters (gamma): the marginal precision of s, a Schur complement
        hsg, hgg = h[:n, n:], h[n:, n:]
        h = h[:n, :n] - hsg @ jnp.linalg.solve(hgg, hsg.T)
    eye = jnp.eye(n, dtype=h.dtype)
    # (H + lambda I + a P)^{-1} = (H + lambda I)^+ on centred scores + P / (a + lambda): the
    # covariance of the centred scores (with or without a score prior lambda) after subtracting
    # P / (a + lambda). a = the mean diagonal of H keeps both terms on H's scale, so the
    # subtraction loses no float32 precision when H is large (millions of comparisons).
    a = _projector_scale(h, n)
    cov = _graph.psd_solve(h + (a - 1) * proj, eye) - proj / (a + solver.score_prior)
    # An item alone in its component (padded, or in no comparison) has a centred score of
    # exactly 0: zero its row and column (the subtraction leaves rounding there). A real one
    # in no comparison has no evidence: under a score prior its posterior is the prior, 1/lambda.
    alone = jnp.diagonal(proj) >= 1
    cov = jnp.where(alone[:, None] | alone[None, :], 0, cov)
    cov = cov + jnp.diag(_prior_variance(alone & c.item_mask, solver, cov.dtype))
    return LaplaceFit(sol, GaussianPosterior(sol.scores, 0.5 * (cov + cov.T), h - proj, c.item_mask))


def _prior_variance(unjudged, solver, dtype):
    """``1/lambda`` for the real items in no comparison under a score prior ``lambda > 0``, else 0."""
    if solver.score_prior > 0:
        return jnp.where(unjudged, 1 / solver.score_prior, 0).astype(dtype)
    return jnp.zeros(unjudged.shape, dtype)


def _laplace_diagonal_one(c, theta, key, solver, num_probes):
    """The fit and its marginal variances by :func:`jaxrank._sparse_inverse.marginal_variances`, ``O(N + R)``."""
    sol = _fit_one(c, theta, solver)
    labels = _graph.components(c, e=_graph.edges(c, dense=False), w=c.weight)
    if isinstance(solver, ProductOfExpertsSolver):
        terms = poe.precision_terms(c, sol, solver, labels, theta)
    else:
        terms = soft_bt.precision_terms(c, sol, solver, labels)
    var = _sparse_inverse.marginal_variances(terms, key, num_probes)
    alone = (_graph.component_sizes(labels, var.dtype) <= 1) & c.item_mask
    var = jnp.where(c.item_mask, var, 0) + _prior_variance(alone, solver, var.dtype)
    return LaplaceFit(sol, MarginalPosterior(sol.scores, var))


@functools.partial(jax.jit, static_argnames=("solver",))
def _laplace(c, theta, solver):
    return _batching.batched(_laplace_one, c, theta=theta, solver=solver)


@functools.partial(jax.jit, static_argnames=("solver", "num_probes"))
def _laplace_diagonal(c, theta, key, solver, num_probes):
    return _batching.batched(_laplace_diagonal_one, c, theta=theta, key=key, solver=solver, num_probes=num_probes)


def dense_covariance(num_items: int, num_comparisons: int) -> bool:
    """Whether ``covariance="auto"`` forms the dense covariance for these (static) sizes."""
    return _sparse_inverse.dense_covariance(num_items, num_comparisons)


def laplace_posterior(c: Comparisons, solver: BradleyTerrySolver | ProductOfExpertsSolver | None = None, *,
                      theta=None, covariance: str = "dense", key=None,
                      num_probes: int = NUM_PROBES) -> LaplaceFit:
    """Fit soft Bradley-Terry with ``solver`` and its Laplace posterior, in one pass (PoE App. A.5).

    Traceable: callable inside ``jax.jit`` on one context or a batch. Callers
    that need both the fit (``gamma``, convergence) and the standard errors
    fit once.

    Args:
        c: comparisons, any batch shape.
        solver: a :class:`jaxrank.BradleyTerrySolver` (default: its defaults).
            No existence test is made (``eps = 0`` with no score prior gives
            infinite scores where :func:`jaxrank.fit_poe_bradley_terry` would
            warn); with ``throw`` a concrete unsuccessful result raises. Or a
            :class:`jaxrank.ProductOfExpertsSolver`: any expert, the precision
            weighted by its curvatures at the optimum (learnt parameters
            marginalised by their Schur complement, as ``gamma`` above).
        theta: the expert's parameters (``ProductOfExpertsSolver`` only).
        covariance: ``"dense"``: the full ``[N, N]`` covariance ``H^+`` (a
            :class:`jaxrank.GaussianPosterior`; ``O(N^2)`` memory, ``O(N^3)``
            time). ``"diagonal"``: only the marginal variances ``diag(H^+)``, a
            :class:`jaxrank.MarginalPosterior` in ``O(N + R)`` memory, estimated
            by Hutchinson's estimator ``mean_k z_k * (H^+ z_k)`` over
            ``num_probes`` Rademacher probes, each a conjugate-gradient solve
            (``jaxrank._sparse_inverse``): unbiased, relative error of a
            variance about ``1 / sqrt(d K)`` for ``d`` comparisons per item and
            ``K`` probes (measured within 6% at ``d = 20, K = 64`` on random
            pools; a standard error within half that). ``"auto"``: dense up to
            :data:`DENSE_COVARIANCE_MAX_ITEMS` items or on a dense pool,
            diagonal above.
        key: ``jax.random`` key of the probes, or an int seed (``"diagonal"``; default ``key(0)``: reproducible).
        num_probes: Hutchinson probes (``"diagonal"``), rounded up to a multiple of 16.

    Returns:
        :class:`LaplaceFit` ``(solution, posterior)``.
    """
    solver = BradleyTerrySolver() if solver is None else solver
    if not isinstance(solver, (BradleyTerrySolver, ProductOfExpertsSolver)):
        raise ValueError(f"solver must be a BradleyTerrySolver or ProductOfExpertsSolver, got {type(solver).__name__}")
    if theta is not None and not isinstance(solver, ProductOfExpertsSolver):
        raise ValueError("theta is a parameter of a ProductOfExpertsSolver's expert; got a BradleyTerrySolver")
    covariance = _sparse_inverse.covariance_form(covariance, c.num_items, c.i.shape[-1])
    num_probes = _validate.integer("num_probes", num_probes, low=1)
    if isinstance(solver, ProductOfExpertsSolver):
        theta = solver.theta(theta, c.p.dtype)
    if covariance == "dense":
        fit = _laplace(c, theta, solver)
    else:
        fit = _laplace_diagonal(c, theta, jax.random.key(0) if key is None else _key(key), solver, num_probes)
    solver.check(fit.solution.result)
    return fit


def laplace_bradley_terry(c: Comparisons, *, debias=False, eps=1e-6, gamma_prior=1e-6, score_prior=0.0,
                          tol=None, max_iter=100) -> GaussianPosterior:
    """Laplace approximation of the soft-BT PoE posterior (PoE App. A.5).

    Args:
        c: comparisons, any batch shape.
        debias: as in :func:`jaxrank.poe_bradley_terry`.
        eps, gamma_prior, score_prior, tol, max_iter: solver settings, as in
            :func:`jaxrank.fit_poe_bradley_terry` (the fields of
            :class:`jaxrank.BradleyTerrySolver`).

    Returns:
        :class:`jaxrank.GaussianPosterior` with ``mean = s*``, ``precision = H``
        (the weighted Laplacian, singular along per-component constants) and
        ``covariance = H^+`` (the covariance of the centred scores; an item in no
        comparison has variance ``1/score_prior``, or 0 without a prior: see the
        module docstring);
        ``.stderr`` gives every score's standard error. :func:`laplace_posterior`
        returns the fitted solution beside it.

    With ``eps=0`` and no score prior (maximum likelihood), concrete
    comparisons are tested for finite ML scores first, as by
    :func:`jaxrank.fit_poe_bradley_terry` (:mod:`jaxrank.scoring.existence`): a
    context without them is fitted, and its posterior taken, as the MAP under
    the score prior ``existence.AUTO_SCORE_PRIOR``, with a
    ``NotStronglyConnectedWarning`` naming its items. Traced comparisons are not
    tested (as :func:`laplace_posterior`).
    """
    solver = BradleyTerrySolver(debias=debias, eps=eps, gamma_prior=gamma_prior, score_prior=score_prior, tol=tol,
                                max_iter=max_iter)
    post = laplace_posterior(c, solver).posterior
    if not (solver.checks_existence and _batching.is_concrete(c)):
        return post
    finite = np.asarray(_finite_ml(c))
    if finite.all():
        return post
    auto = BradleyTerrySolver(debias=debias, eps=eps, gamma_prior=gamma_prior, score_prior=existence.AUTO_SCORE_PRIOR,
                              tol=tol, max_iter=max_iter)
    fallback = laplace_posterior(c, auto).posterior
    pick = lambda a, b: jnp.where(jnp.asarray(finite).reshape(finite.shape + (1,) * (a.ndim - finite.ndim)), a, b)
    existence.warn_if_infinite(c, finite, solver.eps, caller="laplace_bradley_terry")
    return GaussianPosterior(*(None if a is None else pick(a, b) for a, b in zip(post, fallback)))


@jax.jit
def _finite_ml(c):
    """``[...]`` whether every context of ``c`` has finite maximum-likelihood scores (``eps = 0``)."""
    f = functools.partial(existence.finite_ml, eps=0.0)
    for _ in c.batch_shape:
        f = jax.vmap(f)
    return f(c, c.components())


# ====================================================================== intervals and ranks
def _check_level(level):
    _validate.number("level", level, low=0.0, high=1.0, low_open=True, high_open=True)
    return float(level)


def _check_posterior(post):
    if isinstance(post, MarginalPosterior):
        raise ValueError("post holds marginal variances only (laplace_posterior(..., covariance='diagonal')); "
                         "this needs the joint covariance: use covariance='dense'")
    if not isinstance(post, GaussianPosterior):
        raise ValueError(f"post must be a GaussianPosterior (from laplace_bradley_terry or poe_gaussian_posterior), "
                         f"got {type(post).__name__}")


def score_intervals(post: GaussianPosterior, *, level: float = 0.95) -> tuple[jax.Array, jax.Array]:
    """Equal-tailed marginal intervals ``mean -/+ z sd`` of every score (Gaussian posterior).

    Args:
        post: a posterior from :func:`laplace_bradley_terry` (PoE App. A.5) or
            :func:`jaxrank.poe_gaussian_posterior` (PoE eq. 7-8).
        level: nominal coverage, e.g. 0.95 (``z = 1.96``).

    Returns:
        ``(lower, upper)``, each ``[..., N]`` (centred scores, as ``post.mean``).
        A real item in no comparison without a score prior (variance 0, module
        docstring) has an unidentified score: its interval is ``(-inf, inf)``,
        not ``[0, 0]`` (a :class:`jaxrank.GaussianPosterior` tells it from a
        padded item by its precision and ``item_mask``; a
        :class:`jaxrank.MarginalPosterior` holds no such record, and its
        variance-0 items keep ``[0, 0]``: check ``Comparisons.games() == 0``).
        Under a score prior the interval is the prior's.
    """
    if not isinstance(post, MarginalPosterior):
        _check_posterior(post)
    z = NormalDist().inv_cdf(0.5 + _check_level(level) / 2)
    half = z * post.stderr
    if isinstance(post, GaussianPosterior):
        cov = post.covariance
        unidentified = _unjudged(cov, post.precision, _mask(post, None)) \
            & (jnp.diagonal(cov, axis1=-2, axis2=-1) <= 0)
        half = jnp.where(unidentified, jnp.inf, half)
    return post.mean - half, post.mean + half


@functools.partial(jax.jit, static_argnames=("num_samples",))
def _samples(mean, cov, key, num_samples):
    lam, u = jnp.linalg.eigh(0.5 * (cov + jnp.swapaxes(cov, -1, -2)))
    # the null space (per-component shifts, padded items) is exactly 0 up to rounding: drop it
    tiny = cov.shape[-1] * jnp.finfo(cov.dtype).eps * jnp.max(jnp.abs(lam), axis=-1, keepdims=True)
    root = u * jnp.sqrt(jnp.where(lam > 10 * tiny, lam, 0))[..., None, :]
    z = jax.random.normal(key, (num_samples,) + mean.shape, mean.dtype)
    return mean + jnp.einsum("...ij,s...j->s...i", root, z)


def posterior_samples(post: GaussianPosterior, *, key, num_samples: int) -> jax.Array:
    """Draw scores from the Gaussian posterior ``N(mean, covariance)`` in one batched call.

    The covariance is singular along per-component shifts (the scores are
    centred), so samples are drawn as ``mean + U sqrt(Lambda) z`` from its
    eigendecomposition; every sample is centred like ``mean``.

    Args:
        post: a :class:`jaxrank.GaussianPosterior`, any batch shape.
        key: a ``jax.random`` key, or an int seed (``jax.random.key(seed)``).
        num_samples: static number of draws.

    Returns:
        ``[num_samples, ..., N]`` samples.
    """
    _check_posterior(post)
    num_samples = _validate.integer("num_samples", num_samples, low=1)
    return _samples(post.mean, post.covariance, _key(key), num_samples)


def _ranks(s, mask):
    """Rank 1 = best (highest score) among the real items; 0 for padded items."""
    higher = (s[..., None, :] > s[..., :, None]) & mask[..., None, :]
    return jnp.where(mask, 1 + jnp.sum(higher, axis=-1), 0).astype(jnp.int32)


class RankIntervals(NamedTuple):
    """Rank uncertainty from posterior samples (rank 1 = best; 0 for padded items).

    Attributes:
        lower: int ``[..., N]``, the ``(1 - level) / 2`` quantile of the rank (best end).
        upper: int ``[..., N]``, the ``(1 + level) / 2`` quantile (worst end).
        median: ``[..., N]`` median rank.
        mean: ``[..., N]`` expected rank.
        rank: int ``[..., N]`` rank of the posterior mean.
    """

    lower: jax.Array
    upper: jax.Array
    median: jax.Array
    mean: jax.Array
    rank: jax.Array


def _unjudged(cov, prec, mask):
    """Real items in no comparison (module docstring): variance 0, or no off-diagonal precision entry."""
    n = cov.shape[-1]
    var = jnp.diagonal(cov, axis1=-2, axis2=-1)
    coupled = jnp.any((prec != 0) & ~jnp.eye(n, dtype=bool), axis=-1)
    return mask & ((var <= 0) | ~coupled)


@functools.partial(jax.jit, static_argnames=("num_samples", "level"))
def _rank_intervals(mean, cov, prec, mask, key, num_samples, level):
    s = _samples(mean, cov, key, num_samples)
    r = _ranks(s, mask)
    lo = jnp.quantile(r, (1 - level) / 2, axis=0, method="lower")
    hi = jnp.quantile(r, (1 + level) / 2, axis=0, method="higher")
    med = jnp.quantile(r.astype(mean.dtype), 0.5, axis=0)
    avg = jnp.mean(r.astype(mean.dtype), axis=0)
    # a real item in no comparison (the data say nothing of its score; a prior, if any, is no evidence) can take
    # any rank: the interval [1, n], and the median and mean of a uniform rank, (n + 1) / 2
    n_real = jnp.sum(mask, axis=-1, keepdims=True)
    unjudged = _unjudged(cov, prec, mask)
    middle = ((n_real + 1) / 2).astype(mean.dtype)
    return RankIntervals(jnp.where(unjudged, 1, lo).astype(jnp.int32),
                         jnp.where(unjudged, n_real, hi).astype(jnp.int32),
                         jnp.where(unjudged, middle, med), jnp.where(unjudged, middle, avg), _ranks(mean, mask))


def _mask(post, where):
    """``where``, else the posterior's ``item_mask``, else every item, as bool ``post.mean.shape``."""
    if where is None:
        where = getattr(post, "item_mask", None)
    if where is None:
        return jnp.ones(post.mean.shape, bool)
    return jnp.broadcast_to(jnp.asarray(where, bool), post.mean.shape)


def rank_intervals(post: GaussianPosterior, *, key, num_samples: int = 2000, level: float = 0.95,
                   where=None, item_mask=_deprecation.UNSET) -> RankIntervals:
    """Rank intervals by sampling the Gaussian posterior (PoE App. A.5; METHODS.md §4).

    Draws ``num_samples`` score vectors from ``N(mean, covariance)`` in one
    vmapped call, ranks each (1 = best), and takes equal-tailed quantiles of
    every item's rank (``"lower"``/``"higher"`` interpolation, so the integer
    interval has at least the nominal coverage under the posterior).

    Args:
        post: a :class:`jaxrank.GaussianPosterior`, any batch shape.
        key: a ``jax.random`` key, or an int seed (``jax.random.key(seed)``).
        num_samples: static number of draws.
        level: nominal coverage.
        where: optional bool ``[..., N]`` of real items (padded ones get rank 0);
            default ``post.item_mask`` (the padding of a batch), else every item.
        item_mask: deprecated old name of ``where``.

    Returns:
        :class:`RankIntervals`. A real item in no comparison (module docstring:
        variance 0, unidentified, or the score prior's alone) gets the interval
        ``[1, n]`` over the ``n`` real items and median and mean rank ``(n + 1) / 2``;
        ``rank`` ranks its mean, 0, among the others, and the others' draws count it
        where it falls (at 0 without a prior, at its prior draws with one).

    Items in different connected components are ranked on one scale although
    the data fix no offset between components (each is centred on its own):
    their relative ranks reflect the centring, not evidence. A concrete
    posterior whose judged items form several components warns
    (``DisconnectedRankingWarning``, naming them).
    """
    _check_posterior(post)
    level = _check_level(level)
    num_samples = _validate.integer("num_samples", num_samples, low=1)
    where = _deprecation.renamed_keyword("rank_intervals", "item_mask", "where", item_mask, where)
    mask = _mask(post, where)
    key = _key(key)
    _warn_disconnected("rank_intervals", post, mask)
    return _rank_intervals(post.mean, post.covariance, post.precision, mask, key, num_samples, level)


class DisconnectedRankingWarning(UserWarning):
    """Ranks or a ranking's confidence compare items of different connected components (no common scale)."""


def _warn_disconnected(caller, post, mask, show=4):
    """Warn when the judged items of some concrete context form more than one connected component."""
    if not _batching.is_concrete(post.precision, mask):
        return
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components
    prec = np.asarray(post.precision)
    judged = np.asarray(mask) & ~np.asarray(_unjudged(post.covariance, post.precision, mask))
    n = prec.shape[-1]
    prec, judged = prec.reshape(-1, n, n), judged.reshape(-1, n)
    for b in range(prec.shape[0]):
        idx = np.flatnonzero(judged[b])
        if len(idx) < 2:
            continue
        adj = (prec[b][np.ix_(idx, idx)] != 0)
        k, labels = connected_components(csr_matrix(adj), directed=False)
        if k > 1:
            comps = [idx[labels == t].tolist() for t in range(k)]
            listed = "; ".join(str(x) for x in comps[:show]) + ("; ..." if k > show else "")
            ctx = f" in context {np.unravel_index(b, post.mean.shape[:-1])}" if post.mean.ndim > 1 else ""
            warnings.warn(
                f"{caller}: the judged items{ctx} form {k} connected components ({listed}); each is centred on its "
                f"own and the data fix no offset between them, so ranks across components reflect that centring, "
                f"not evidence. Rank each component on its own (Comparisons.components()) or connect them.",
                DisconnectedRankingWarning, stacklevel=3)
            return


def _adjacent_confidence(mean, cov, mask):
    """Mean over adjacent pairs of the posterior-mean ranking of ``P(correct order)``."""
    n = mean.shape[-1]
    order = jnp.argsort(jnp.where(mask, -mean, jnp.inf))
    a, b = order[:-1], order[1:]
    var = cov[a, a] + cov[b, b] - 2 * cov[a, b]
    diff = mean[a] - mean[b]
    z = jnp.where(var > 0, diff / jnp.sqrt(jnp.where(var > 0, var, 1.0)), jnp.where(diff > 0, jnp.inf, 0.0))
    prob = jax.scipy.stats.norm.cdf(z)
    n_real = jnp.sum(mask)
    ok = jnp.arange(n - 1) < n_real - 1
    return jnp.where(n_real >= 2, jnp.sum(jnp.where(ok, prob, 0)) / jnp.maximum(jnp.sum(ok), 1), jnp.nan)


@functools.partial(jax.jit, static_argnames=("rule", "num_samples"))
def _confidence(mean, cov, prec, mask, key, rule, num_samples):
    mask = mask & ~_unjudged(cov, prec, mask)      # items in no comparison: their mean is no evidence
    if rule == "adjacent":
        f = _adjacent_confidence
        for _ in range(mean.ndim - 1):
            f = jax.vmap(f)
        return f(mean, cov, mask)
    s = _samples(mean, cov, key, num_samples)
    rho = metrics.spearman(s, jnp.broadcast_to(mean, s.shape), where=jnp.broadcast_to(mask, s.shape))
    # all means tied: the mean ranking orders nothing (Spearman against a constant is undefined): 0
    lo = jnp.min(jnp.where(mask, mean, jnp.inf), axis=-1)
    hi = jnp.max(jnp.where(mask, mean, -jnp.inf), axis=-1)
    tied = (jnp.sum(mask, axis=-1) >= 2) & (lo == hi)
    return jnp.where(tied, 0, jnp.nanmean(rho, axis=0))


def ranking_confidence(post: GaussianPosterior, *, rule: str = "spearman", key=None, num_samples: int = 256,
                       where=None, item_mask=_deprecation.UNSET) -> jax.Array:
    """How certain the posterior is of the ranking of its mean.

    Args:
        post: a :class:`jaxrank.GaussianPosterior`, any batch shape.
        rule: ``"spearman"``: the expected Spearman correlation between the
            posterior-mean ranking and the true one, ``E_{s ~ N(mean, cov)}
            rho(s, mean)``, a Monte Carlo average over ``num_samples`` draws
            (needs ``key``); on the scale of the papers' metric (METHODS.md §7).
            ``"adjacent"``: the mean over the ``n - 1`` adjacent pairs ``(a, b)`` of
            the mean ranking of ``P(s_a > s_b) = Phi((m_a - m_b) / sd(s_a - s_b))``
            (closed form, no sampling).
        key: a ``jax.random`` key, or an int seed (``"spearman"`` only).
        num_samples: draws for ``"spearman"``.
        where: optional bool ``[..., N]`` of real items; default
            ``post.item_mask`` (the padding of a batch), else every item.
        item_mask: deprecated old name of ``where``.

    Items in no comparison (module docstring) are left out: the confidence is that
    of the ranking of the judged items. Counted at their mean, they would agree with
    the mean ranking in every draw (variance 0) and raise it. A caller that needs
    every item ranked checks for them (``Comparisons.games() == 0``). Judged items
    in several connected components are ranked on one scale whose offsets between
    components the data do not fix; a concrete posterior warns
    (``DisconnectedRankingWarning``, as :func:`rank_intervals`).

    Returns:
        ``[...]`` confidence in ``[-1, 1]`` (``"spearman"``) or ``[0.5, 1]`` (``"adjacent"``);
        NaN for a context with fewer than two judged items. When every judged item's
        mean is tied the mean ranking orders nothing: ``"spearman"`` gives 0 (its
        correlation with a constant ranking is undefined), ``"adjacent"`` 0.5.
    """
    _check_posterior(post)
    if rule not in ("spearman", "adjacent"):
        raise ValueError(f"rule must be 'spearman' or 'adjacent', got {rule!r}")
    if rule == "spearman" and key is None:
        raise ValueError("rule='spearman' samples the posterior: pass key=")
    num_samples = _validate.integer("num_samples", num_samples, low=1)
    where = _deprecation.renamed_keyword("ranking_confidence", "item_mask", "where", item_mask, where)
    mask = _mask(post, where)
    key = jax.random.key(0) if key is None else _key(key)
    _warn_disconnected("ranking_confidence", post, mask)
    return _confidence(post.mean, post.covariance, post.precision, mask, key, rule, num_samples)
