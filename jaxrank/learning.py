"""Learning judge calibrations (and any expert parameters) from data with optax.

Two objectives, both over a padded batch of contexts ``[C, R]`` in one
vectorised expression (no Python loop over contexts), minimised by :func:`fit`
(an optax optimiser, every step inside one compiled ``lax.scan``):

**(a) Unsupervised: the marginal likelihood of the judge outputs**
(:func:`marginal_nll`). The calibrated logit margin ``y_k = f_j(x_k)``,
``x_k = logit p_k`` (:mod:`jaxrank.calibration`), is modelled as a Gaussian
expert on the score difference (PoE eq. 4) with a Gaussian prior on the scores:

    y_k = s_{i_k} - s_{j_k} + e_k,   e_k ~ N(0, sigma^2 / w_k),   s ~ N(0, tau^2 I).

Marginally ``y ~ N(0, Sigma)``, ``Sigma = sigma^2 D^-1 + tau^2 W W^T`` (``W`` the
``[R, N]`` incidence matrix, ``D = diag(w)`` over live comparisons), and the
density of the judge's raw margins ``x`` is, by the change of variables ``y = f(x)``,

    -log p(x) = 1/2 y^T Sigma^-1 y + 1/2 log det Sigma + R/2 log 2 pi - sum_k log f'(x_k)       (E1)

evaluated in item space (``N x N``, never ``R x R``) by Woodbury and the
matrix-determinant lemma with ``L = W^T D W`` (the weighted Laplacian) and
``M = I / tau^2 + L / sigma^2``, ``b = W^T D y``:

    y^T Sigma^-1 y = y^T D y / sigma^2 - b^T M^-1 b / sigma^4,
    log det Sigma = sum_k log(sigma^2 / w_k) + 2 N log tau + log det M.                       (E2)

This is the evidence of PoE-g (PoE eq. 7-8 with a proper score prior; its
posterior mean ``M^-1 b / sigma^2`` tends to PoE-g as ``tau -> inf``). ``sigma`` is
fixed (1 by default: it sets the units of ``f``), ``tau`` is learnt
(:class:`EvidenceParams`). The Jacobian term makes the loss a density of the
judge's own outputs, so the scale of ``f`` is identified when the judge's logits
do not fit a score vector exactly (a residual ``y^T D y - b^T L^+ b > 0`` in some
context): a noisier judge gets a smaller slope (less pull on the scores in a
product of judges). On noise-free logits from a design with cycles (a residual of
0) the loss falls without bound as the slope grows.

**(b) Supervised: agreement with human scores** (:func:`ranking_loss`): the
scores of any differentiable scorer on the calibrated comparisons against the
human order, by the pairwise logistic loss (RankNet) or a soft Spearman, both on
per-context standardised scores ``z = (s - mean s) / std s``:

    pairwise:  mean over pairs h_a > h_b of  log(1 + exp(-(z_a - z_b) / T))                 (L1)
    spearman:  -pearson(soft_rank(z), rank(h)),  soft_rank_a = 1/2 + sum_b sigmoid((z_a - z_b) / T)   (L2)

averaged over contexts. The scorer is a function ``score_fn(params, c, judge)``
(:func:`calibrated` wraps any ``scorer(c)``, e.g. :func:`jaxrank.poe_gaussian` or
:func:`jaxrank.poe_bradley_terry`, both differentiable in ``p``), so a scorer with
its own learnable parameters plugs in by taking them inside ``params``.

**(c) A general expert's parameters** (:func:`expert_scores`): the scores of the
product of any :class:`jaxrank.Expert` (PoE eq. 2-3) as a function of its
parameters ``theta``, shared by every context (and optionally of a calibration
applied first),

    s*(theta) = argmax_s sum_k w_k log q(s_{i_k} - s_{j_k} | f_j(p_k), theta),              (E3)

differentiable in ``theta`` by implicit differentiation at the optimum
(:func:`jaxrank.fit_poe`), so ``ranking_loss(..., score_fn=expert_scores(solver))``
fits ``theta`` across many contexts at once with :func:`fit`.
"""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrank import _validate, metrics
from jaxrank.calibration import (Calibration, MonotoneSpline, TemperatureBias, _check_judge_ids, calibrate,
                                 calibrate_logits, log_derivative, logit)
from jaxrank.comparisons import Comparisons
from jaxrank._ranking_losses import (_check_labels, _label_pairs, _nan_labels, pairwise_logistic_loss,
                                     soft_spearman)
from jaxrank.scoring.experts import Expert
from jaxrank.scoring.gaussian import poe_gaussian
from jaxrank.scoring.poe import fit_poe
from jaxrank.scoring.solver import ProductOfExpertsSolver

__all__ = ["EvidenceParams", "FitResult", "gaussian_evidence_nll", "marginal_nll", "calibrated",
           "pairwise_logistic_loss", "soft_spearman", "ranking_loss", "fit", "make_step", "heldout_spearman",
           "split_contexts", "CALIBRATED_POE_GAUSSIAN", "logdet_and_quadratic", "ExpertParams", "expert_scores"]


class EvidenceParams(NamedTuple):
    """Parameters of the unsupervised objective (E1).

    Attributes:
        calibration: the judges' calibration (:mod:`jaxrank.calibration`).
        log_prior_scale: scalar ``log tau``, the prior scale of the scores.
    """

    calibration: Any
    log_prior_scale: jax.Array


class FitResult(NamedTuple):
    """Output of :func:`fit`: the final parameters and the loss before every step ``[steps]``."""

    params: Any
    losses: jax.Array


def _incidence(c: Comparisons):
    """``[..., R, N]`` rows ``e_i - e_j`` of the incidence matrix ``W``."""
    return (jax.nn.one_hot(c.i, c.num_items, dtype=c.p.dtype) - jax.nn.one_hot(c.j, c.num_items, dtype=c.p.dtype))


@jax.custom_vjp
def logdet_and_quadratic(m, b) -> tuple[jax.Array, jax.Array]:
    """``(log det M, b^T M^-1 b)`` of symmetric positive-definite ``m [..., K, K]`` and ``b [..., K]``, by one Cholesky.

    Its gradient is analytic (``d log det M = M^-1``, ``d(b^T M^-1 b) = -u u^T dM + 2 u^T db``,
    ``u = M^-1 b``), from the same factor: autodiff through ``jnp.linalg.cholesky`` is
    two to three orders of magnitude slower on CPU from ``K`` of about 32. Reverse mode only
    (``jax.grad``, ``jax.vjp``; a ``custom_vjp``).
    """
    return _logdet_quadratic_fwd(m, b)[0]


def _logdet_quadratic_fwd(m, b):
    cf = jax.scipy.linalg.cho_factor(m, lower=True)
    u = jax.scipy.linalg.cho_solve(cf, b[..., None])[..., 0]
    logdet = 2 * jnp.sum(jnp.log(jnp.diagonal(cf[0], axis1=-2, axis2=-1)), -1)
    return (logdet, jnp.sum(b * u, -1)), (cf[0], u)


def _logdet_quadratic_bwd(res, ct):
    chol, u = res
    g_logdet, g_quad = ct
    eye = jnp.broadcast_to(jnp.eye(chol.shape[-1], dtype=chol.dtype), chol.shape)
    inv = jax.scipy.linalg.cho_solve((chol, True), eye)
    inv = 0.5 * (inv + jnp.swapaxes(inv, -1, -2))
    dm = g_logdet[..., None, None] * inv - g_quad[..., None, None] * u[..., :, None] * u[..., None, :]
    return dm, 2 * g_quad[..., None] * u


logdet_and_quadratic.defvjp(_logdet_quadratic_fwd, _logdet_quadratic_bwd)


def gaussian_evidence_nll(c: Comparisons, y, log_prior_scale, noise_scale=1.0) -> jax.Array:
    """``-log N(y; 0, Sigma)`` per context, eq. (E1) without the Jacobian, evaluated by (E2).

    Args:
        c: comparisons ``[..., R]`` (weights: precision multipliers; weight 0 is padding and drops out).
        y: ``[..., R]`` the Gaussian experts' means (e.g. calibrated logit margins).
        log_prior_scale: ``log tau`` (scalar or broadcastable to the batch).
        noise_scale: ``sigma``.

    Returns:
        ``[...]`` negative log evidence of every context.
    """
    w = c.weight
    live = w > 0
    y = jnp.where(live, y, 0)
    e = _incidence(c)
    lap = jnp.einsum("...rn,...r,...rm->...nm", e, w, e)
    b = jnp.einsum("...rn,...r->...n", e, w * y)
    s2 = jnp.asarray(noise_scale, y.dtype) ** 2
    log_tau = jnp.asarray(log_prior_scale, y.dtype)
    eye = jnp.eye(c.num_items, dtype=y.dtype)
    m = eye * jnp.exp(-2 * log_tau)[..., None, None] + lap / s2
    logdet_m, bmb = logdet_and_quadratic(m, b)
    quad = jnp.sum(w * y * y, -1) / s2 - bmb / s2 ** 2
    logdet = (jnp.sum(jnp.where(live, jnp.log(s2) - jnp.log(jnp.where(live, w, 1)), 0), -1)
              + 2 * c.num_items * log_tau + logdet_m)
    n_live = jnp.sum(live, -1).astype(y.dtype)
    return 0.5 * quad + 0.5 * logdet + 0.5 * n_live * math.log(2 * math.pi)


def marginal_nll(params: EvidenceParams, c: Comparisons, judge=None, *, noise_scale=1.0, eps=1e-6) -> jax.Array:
    """The unsupervised loss (E1): negative log-likelihood of the judge outputs per live comparison.

    ``sum over contexts of -log p(x)`` (Gaussian evidence of the calibrated margins
    plus the log-Jacobian of the calibration), divided by the number of live
    comparisons so that step sizes do not depend on the batch size.

    Args:
        params: :class:`EvidenceParams`.
        c: comparisons ``[..., R]``.
        judge: ``[..., R]`` integer judge ids (default 0).
        noise_scale: ``sigma``, the fixed expert noise in calibrated logit units.
        eps: ``p`` is clipped to ``[eps, 1 - eps]`` before the logit.

    Returns:
        Scalar loss.

    Raises:
        ValueError: ``params`` not :class:`EvidenceParams`, ``c`` not comparisons, ``noise_scale`` not a finite
            number > 0, ``eps`` outside ``(0, 0.5)`` (naming the argument).
    """
    if not isinstance(params, EvidenceParams):
        raise ValueError(f"params must be a learning.EvidenceParams(calibration, log_prior_scale), got "
                         f"{type(params).__name__} (wrap a calibration: EvidenceParams(calibration, jnp.zeros(())))")
    _validate.comparisons("c", c)
    _validate.number("noise_scale", noise_scale, low=0.0, low_open=True)
    _validate.number("eps", eps, low=0.0, high=0.5, low_open=True, high_open=True)
    x = logit(c.p, eps)
    y = calibrate_logits(params.calibration, x, judge)
    live = c.weight > 0
    jac = jnp.sum(jnp.where(live, log_derivative(params.calibration, x, judge), 0))
    nll = jnp.sum(gaussian_evidence_nll(c, y, params.log_prior_scale, noise_scale)) - jac
    return nll / jnp.maximum(jnp.sum(live), 1)


def calibrated(scorer: Callable[[Comparisons], jax.Array]) -> Callable:
    """``score_fn(calibration, c, judge) = scorer(calibrate(calibration, c, judge))``: a scorer of calibrated comparisons.

    ``scorer`` must be differentiable in ``p`` (:func:`jaxrank.poe_gaussian`,
    :func:`jaxrank.poe_bradley_terry`, or any ``Comparisons -> [..., N]`` function).
    """
    def score_fn(params: Calibration, c: Comparisons, judge=None):
        return scorer(calibrate(params, c, judge))
    score_fn.__name__ = f"calibrated_{getattr(scorer, '__name__', 'scorer')}"
    return score_fn


CALIBRATED_POE_GAUSSIAN = calibrated(poe_gaussian)
"""PoE-g (:func:`jaxrank.poe_gaussian`) of calibrated comparisons: the default ``score_fn``."""


class ExpertParams(NamedTuple):
    """Parameters of :func:`expert_scores` learnt jointly: a calibration applied first, then the expert's ``theta``.

    Attributes:
        calibration: the judges' calibration (:mod:`jaxrank.calibration`), or ``None`` for none.
        theta: dict ``name -> value`` of the expert parameters learnt (a subset of the
            expert's keys; the others keep the expert's defaults).
    """

    calibration: Any
    theta: Any


def expert_scores(solver: ProductOfExpertsSolver | Expert) -> Callable:
    """``score_fn(params, c, judge)``: scores of the product of a general expert as a function of its ``theta``, eq. (E3).

    ``params`` is either a dict ``theta`` (the expert's parameters, shared by every
    context; missing keys keep the expert's defaults) or an :class:`ExpertParams`
    ``(calibration, theta)``, which first calibrates ``p`` per judge (eq. (1) of
    :mod:`jaxrank.calibration`) and then solves with ``theta``. The scores are
    ``jaxrank.fit_poe(c, solver, theta).scores``, differentiable in ``theta``
    (and the calibration) by implicit differentiation, with no recompilation for new
    values. Use it with :func:`ranking_loss` and :func:`fit`::

        score_fn = learning.expert_scores(jr.scoring.experts.soft_bradley_terry())
        loss = functools.partial(learning.ranking_loss, score_fn=score_fn)
        res = learning.fit(loss, {"gamma": jnp.zeros(())}, c, judge, labels, mask)

    A parameter the expert sets per context (``from_context``, e.g. ``debias="mean"``)
    or fits with the scores (``learnt``) gets no gradient from the scores: learn a
    positional bias with ``debias="none"``. Constrained parameters (``kappa >= 0``)
    are learnt through a wrapper, e.g. ``lambda q, c, j: score_fn({"kappa": jnp.exp(q)}, c, j)``.
    Only the order of the scores matters to :func:`ranking_loss` (standardised per
    context), so a parameter that only rescales them (a temperature) is not identified by it.
    Inside :func:`fit` a solve cannot raise: check ``jaxrank.fit_poe(...).result``
    at the learnt ``theta`` afterwards.

    Args:
        solver: a :class:`jaxrank.ProductOfExpertsSolver` (its settings), or an
            :class:`jaxrank.Expert` (solved with the default settings).

    Returns:
        ``score_fn(params, c, judge) -> [..., N]`` scores.

    Raises:
        ValueError: ``solver`` neither; at call, ``params`` neither a dict nor an :class:`ExpertParams`.
    """
    if isinstance(solver, Expert):
        solver = ProductOfExpertsSolver(solver)
    if not isinstance(solver, ProductOfExpertsSolver):
        raise ValueError(f"solver must be a jaxrank.ProductOfExpertsSolver or Expert, got {type(solver).__name__}")

    def score_fn(params, c: Comparisons, judge=None):
        if isinstance(params, ExpertParams):
            if params.calibration is not None:
                c = calibrate(params.calibration, c, judge)
            theta = params.theta
        else:
            theta = params
        if not isinstance(theta, dict):
            raise ValueError("params must be a dict theta or learning.ExpertParams(calibration, theta), "
                             f"got theta of type {type(theta).__name__}")
        return fit_poe(c, solver, theta).scores

    score_fn.__name__ = f"expert_scores_{solver.expert.name}"
    return score_fn


def ranking_loss(params, c: Comparisons, judge, labels, mask, *, score_fn: Callable | None = None, kind: str = "pairwise",
                 temperature: float | None = None) -> jax.Array:
    """The supervised loss: (L1) or ``-(L2)`` of ``score_fn(params, c, judge)`` against human scores, mean over contexts.

    Args:
        params: the learnt parameters (a calibration, or any pytree ``score_fn`` reads).
        c: comparisons ``[C, R]`` of the labelled contexts; ``judge`` their judge ids.
        labels, mask: ``[C, N]`` human scores and real candidates.
        score_fn: ``(params, c, judge) -> [C, N]`` scores, differentiable in ``params``
            (default :data:`CALIBRATED_POE_GAUSSIAN`).
        kind: ``"pairwise"`` (L1) or ``"spearman"`` (L2).
        temperature: ``T`` (default 1 for ``"pairwise"``, 0.1 for ``"spearman"``).

    Returns:
        Scalar; contexts whose human scores are constant (from ``labels`` and ``mask`` alone) are skipped, and
        for ``"spearman"`` contexts whose finite scores are constant (the correlation is undefined). A NaN or
        infinite score of a real item (a diverged fit, a NaN ``p``) makes the loss NaN, never a number; so does
        a NaN label under ``mask`` when ``labels`` is traced (inside ``jit``, or :func:`fit`'s compiled steps,
        where it cannot be inspected; :func:`fit` checks its concrete data first).

    Raises:
        ValueError: a bad ``kind``; ``labels`` or ``mask`` not of the scores' shape ``[C, N]``, ``mask`` not bool,
            ``temperature`` not a finite number > 0, a NaN in concrete ``labels`` where ``mask`` is True (naming
            the argument: mask missing human scores out).
    """
    if kind not in ("pairwise", "spearman"):
        raise ValueError(f"kind must be 'pairwise' or 'spearman', got {kind!r}")
    if temperature is not None:
        _validate.number("temperature", temperature, low=0.0, low_open=True)
    scores = (score_fn or CALIBRATED_POE_GAUSSIAN)(params, c, judge)
    if kind == "pairwise":
        per = pairwise_logistic_loss(scores, labels, mask, temperature=1.0 if temperature is None else temperature)
    elif kind == "spearman":
        per = -soft_spearman(scores, labels, mask, temperature=0.1 if temperature is None else temperature)
    else:
        raise ValueError(f"kind must be 'pairwise' or 'spearman', got {kind!r}")
    # constancy from the human side only: a NaN from the scores must propagate (never read as "constant labels")
    nan_label = _nan_labels(labels, mask)
    finite = jnp.all(jnp.isfinite(scores) | ~mask, -1)
    flat = finite & ~nan_label & jnp.isnan(per)          # spearman of constant finite scores: undefined
    ok = ((_label_pairs(labels, mask) > 0) | nan_label) & ~flat
    return jnp.sum(jnp.where(ok, per, 0)) / jnp.maximum(jnp.sum(ok), 1)


DEFAULT_OPTIMIZER = optax.adam(0.05)
"""The optimiser of :func:`fit` and :func:`make_step` when none is given: one object, so that repeated fits of one
shape reuse one compiled program (a fresh ``optax.adam(0.05)`` per call is a new static argument: a retrace)."""


@functools.lru_cache(maxsize=64)
def _extra_args(optimizer):
    return optax.with_extra_args_support(optimizer)   # one wrapper per optimiser object: fit's static argument


def _with_extra_args(optimizer):
    if optimizer is None:
        optimizer = DEFAULT_OPTIMIZER
    if not isinstance(optimizer, optax.GradientTransformation):
        raise ValueError(f"optimizer must be an optax GradientTransformation, got {type(optimizer).__name__}")
    return _extra_args(optimizer)


def make_step(loss_fn: Callable, optimizer=None) -> tuple[Callable, Callable]:
    """``(init, step)`` of one optax step on ``loss_fn(params, *args)``; ``step`` is jitted once per shape.

    ``init(params) -> state``; ``step(params, state, *args) -> (params, state, loss)``,
    ``loss`` before the step. Works with first-order optimisers (``optax.adam``) and
    with ``optax.lbfgs`` (it receives ``value``, ``grad`` and ``value_fn``).
    """
    opt = _with_extra_args(optimizer)

    @jax.jit
    def step(params, state, *args):
        value_fn = lambda q: loss_fn(q, *args)
        value, grad = jax.value_and_grad(value_fn)(params)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=value_fn)
        return optax.apply_updates(params, updates), state, value

    return opt.init, step


@functools.partial(jax.jit, static_argnames=("loss_fn", "optimizer", "steps"))
def _fit(params, args, loss_fn, optimizer, steps):
    def value_fn(q):
        return loss_fn(q, *args)

    def body(carry, _):
        q, state = carry
        value, grad = jax.value_and_grad(value_fn)(q)
        updates, state = optimizer.update(grad, state, q, value=value, grad=grad, value_fn=value_fn)
        return (optax.apply_updates(q, updates), state), value

    (params, _), losses = jax.lax.scan(body, (params, optimizer.init(params)), None, length=steps)
    return FitResult(params, losses)


def fit(loss_fn: Callable, params, *args, optimizer=None, steps: int = 200) -> FitResult:
    """Minimise ``loss_fn(params, *args)`` with an optax optimiser: ``steps`` steps in one compiled ``lax.scan``.

    The data ``args`` (e.g. ``c, judge, labels, mask``) are traced arguments, so a
    second fit of the same shapes with the same ``loss_fn`` and optimiser object
    reuses the compiled program.

    Args:
        loss_fn: scalar loss, differentiable in ``params`` (e.g. :func:`marginal_nll`, or
            ``functools.partial(ranking_loss, score_fn=...)``); a hashable function.
        params: initial parameters (any pytree of float arrays).
        *args: the data, passed on to ``loss_fn``.
        optimizer: an optax ``GradientTransformation`` (default :data:`DEFAULT_OPTIMIZER`,
            ``optax.adam(0.05)``); ``optax.lbfgs()`` works too. Pass one object to every fit: a new
            optimiser object compiles a new program.
        steps: number of optimiser steps.

    Returns:
        :class:`FitResult`.

    Raises:
        ValueError: ``steps`` not a positive int, ``optimizer`` not an optax transformation; for
            :func:`marginal_nll` and :func:`ranking_loss` (or ``functools.partial`` of them), judge ids outside
            the calibration's ``[0, J)`` and a NaN label where ``mask`` is True, checked on the concrete data
            before compiling (inside the compiled steps the data are traced and cannot be inspected; data
            traced already, a ``fit`` inside a caller's ``jit``, stay unchecked, as under :func:`make_step`).
    """
    if not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    opt = _with_extra_args(optimizer)
    _check_data(loss_fn, params, args)
    return _fit(params, args, loss_fn, opt, int(steps))


def _check_data(loss_fn, params, args) -> None:
    """The checks of concrete data that :func:`marginal_nll` and :func:`ranking_loss` (or partials of them) make
    outside a trace, run before :func:`fit` traces its data: the calibration's judge ids, NaN labels under
    ``mask``. Other losses are not inspected; the call itself reports bad arguments."""
    fn, front, kw = loss_fn, (), {}
    while isinstance(fn, functools.partial):
        front, kw, fn = fn.args + front, {**fn.keywords, **kw}, fn.func
    if fn not in (marginal_nll, ranking_loss):
        return
    try:
        a = inspect.signature(fn).bind(*front, params, *args, **kw).arguments
    except TypeError:
        return
    p = a["params"]
    cal = p.calibration if isinstance(p, (EvidenceParams, ExpertParams)) else p
    if isinstance(cal, (TemperatureBias, MonotoneSpline)):
        _check_judge_ids(cal, a.get("judge"))
    if fn is ranking_loss:
        _check_labels(a.get("labels"), a.get("mask"))


def heldout_spearman(score_fn: Callable, params, c: Comparisons, judge, labels, mask) -> jax.Array:
    """Per-context Spearman of ``score_fn(params, c, judge)`` with the human scores ``[C]`` (NaN: constant side).

    The evaluation of a fit on held-out contexts (METHODS.md §7); average with
    :func:`jaxrank.metrics.context_mean`.
    """
    return metrics.spearman(score_fn(params, c, judge), labels, where=mask)


def split_contexts(num_contexts: int, test_fraction: float = 0.5, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A random split of context indices into ``(train, test)`` (sorted index arrays).

    Raises:
        ValueError: fewer than 2 contexts or ``test_fraction`` outside ``(0, 1)``.
    """
    if not isinstance(num_contexts, (int, np.integer)) or num_contexts < 2:
        raise ValueError(f"num_contexts must be an int >= 2, got {num_contexts!r}")
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    perm = np.random.default_rng(seed).permutation(num_contexts)
    n_test = min(num_contexts - 1, max(1, round(test_fraction * num_contexts)))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])

