"""Product of soft Bradley-Terry experts with a positional-bias parameter (PoE §3.2, App. A.9).

The negative log-likelihood of scores ``s`` and bias ``gamma`` is

    f(s, gamma) = - sum_k w_k [p_k log sigmoid(d_k) + (1 - p_k) log sigmoid(-d_k)],
    d_k = s_{i_k} - s_{j_k} - gamma                                   (PoE eq. 3)

a convex function whose gradient and Hessian are

    grad_s = W^T D (q - p),   grad_gamma = -1^T D (q - p),   q = sigmoid(d),
    H_ss = W^T D Q W  (a Laplacian weighted by w q (1 - q); METHODS.md §4),
    H_s,gamma = -W^T D Q 1,   H_gamma,gamma = 1^T D Q 1.

``gamma`` is 0 (``debias=False``), the mean-probability value
``log((1 - mean p) / mean p)`` (``debias=True`` or ``"mean"``; METHODS.md §3,
PoE App. A.9), or learnt jointly with ``s`` (``debias="learn"``; one ``gamma``
shared by every component, with a weak Gaussian prior of precision
``gamma_prior``). Where the comparisons do not identify ``gamma`` (decided exactly,
``_graph.bias_identified``) the MAP is the prior's mean and ``gamma`` is held at 0,
so the fit stays continuous in ``p`` (issue 14).

Each context is solved to tight tolerance by Newton's method on the exact
Laplacian-structured Hessian (anchored per connected component like PoE-g;
factorised by Cholesky, or for large sparse pools, ``_graph.CG_MIN_ITEMS`` items
and more, applied matrix-free in Jacobi-preconditioned conjugate gradients, so
a Newton step costs a few dozen passes over the comparisons instead of an
``O(N^3)`` factorisation), with an Armijo backtracking line search that tries the full step first,
started from the least-squares fit of the logits polished by two of Newman's
updates (``_soft_bt_newton.POLISH_SWEEPS``). Line search and Newton steps
share one flat ``lax.while_loop`` with per-context state (contexts of a batch
converge independently), and every setting but ``debias`` is a traced value:
one small compiled program serves every setting, and hard Bradley-Terry
(:func:`jaxrank.bradley_terry`) too. Small, dense contexts work on ``[N, N]`` aggregated edges
(``_graph.edges``), so an iteration does no gather or scatter. Gradients
with respect to ``p`` and ``weight`` use implicit differentiation through the
optimality condition ``grad f(x*) = 0`` (one extra linear solve), never
unrolling the iterations.

``p`` is clipped to ``[eps, 1 - eps]``: with ``p`` exactly 0 or 1 on every
comparison of an item the maximum-likelihood score would be infinite; the clip
keeps it finite (and the largest or smallest) and is otherwise inactive.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _batching, _graph, _sparse_inverse, _validate
from jaxrank.comparisons import Comparisons
from jaxrank.scoring import existence
from jaxrank.scoring import _soft_bt_newton, _ties
from jaxrank.scoring._soft_bt_newton import _argmin
from jaxrank.scoring._soft_bt_objective import _diffs, _fixed_gamma, _grad_p, _hessian, _problem, _residual
from jaxrank.scoring.solver import WEIGHT_SCALE_RANGE, BradleyTerrySolver, _traced_weight_scale

__all__ = ["poe_bradley_terry", "fit_poe_bradley_terry", "SoftBTSolution", "solve", "solve_context", "hessian",
           "solution_vector", "precision_terms"]



class SoftBTSolution(NamedTuple):
    """Result of :func:`fit_poe_bradley_terry`.

    Attributes:
        scores: ``[..., N]`` scores, centred per connected component.
        gamma: ``[...]`` positional-bias parameter used or learnt.
        iterations: ``[...]`` passes of the Newton loop from the start: Newton
            directions computed (the last one applied when it predicts
            convergence; for one context with dense Newton systems, also when a
            chord step with the same factorisation confirms it,
            ``_soft_bt_newton.CHORD_MARGIN``), plus any line-search halvings; at
            most ``max_iter``.
        converged: ``[...]`` whether the last Newton step was below ``tol``
            (max-norm), or predicted the error after it below ``tol`` (``|step|^2 / |previous
            step| < tol``, the contraction-rate estimate), or every gradient entry reached its float rounding level
            (``64 eps`` times the sum of the magnitudes of its terms).
        grad_norm: ``[...]`` max-norm of the log-likelihood gradient at the solution.
        result: ``[...]`` int32 :data:`jaxrank.scoring.RESULTS` code of each context
            (``successful``, ``max_steps_reached``, ``line_search_failed``).
    """

    scores: jax.Array
    gamma: jax.Array
    iterations: jax.Array
    converged: jax.Array
    grad_norm: jax.Array
    result: jax.Array




def _tied(c, pr, labels, x, s, mode, st):
    """The centred scores ``s`` of one context's solution ``x`` (its problem ``pr``, score prior in ``st``) with
    every group that the solve cannot tell apart tied exactly (``_ties.tie_scores``; issue 32): dense Newton
    systems only, large sparse pools (conjugate gradients) keep their scores as solved, as PoE-g's do. Items in
    no comparison keep their exact score.

    Scores equal at the optimum share the solve's convergence error (every operation of the loop treats
    exchangeable items alike), so only rounding sets them apart: two responses with equal wins in a complete
    balanced design came out of a float32 solve up to ~1e-7 apart, differently per batch shape. The tolerance
    is therefore the rounding of the last Newton step, not its convergence error (hard BT's ``tol`` 1e-3 leaves
    ~1e-4, which would tie distinct football teams). For two exchangeable items ``a``, ``b`` (swapping them
    leaves the problem unchanged) ``e_a - e_b`` is an eigenvector of the Hessian ``H``, with eigenvalue
    ``H_aa - H_ab >= H_aa`` (``H_ab <= 0``: a Laplacian), so a gradient error ``delta g`` splits their Newton step
    by ``(delta g_a - delta g_b) / (H_aa - H_ab)``, at most ``rho_a + rho_b`` with ``rho_n = eps sum_k |terms_{n,k}|
    / H_nn`` (each gradient entry's rounding, as the loop's rounding test, ``_soft_bt_newton._pass``, scaled by
    the item's curvature, floored as in the loop). Neighbours are tied at most
    ``TIE_SAFETY (rho_a + rho_b + eps max |s|)`` (one rounding of the largest score: ``_ties.rounding_floor``'s
    default) and at most ``TIE_CAP max(1, max |s|)`` apart:
    ``O(N + R)``, no factorisation.
    """
    if _graph.sizes_use_cg(c.num_items, c.i.shape[-1]):
        return s
    n, dt = c.num_items, x.dtype
    x0 = jax.lax.stop_gradient(x)
    floor = 1e-6 if dt == jnp.float32 else 1e-12      # the Newton loop's curvature floor (dense path)
    d = _diffs(x0, pr, mode)
    _, mag, qq = _residual(d, pr)
    h = pr.w * jnp.maximum(qq, floor)
    scale, curv = (_graph.item_sums(pr.e, m, m) for m in (mag, h))
    live = c.item_mask & (_graph.item_sums(pr.e, pr.w, pr.w) > 0)
    rho = jnp.finfo(dt).eps * (scale + st.score_prior * jnp.abs(x0[:n])) / jnp.maximum(curv + st.score_prior,
                                                                                        jnp.finfo(dt).tiny)
    cap = TIE_CAP * jnp.maximum(1, jnp.max(jnp.abs(jax.lax.stop_gradient(s))))
    return _ties.tie_scores(s, live, _ties.TIE_SAFETY * _ties.rounding_floor(s), _ties.TIE_SAFETY * rho, cap)


TIE_CAP = 1e-4
"""Scores further apart than ``TIE_CAP max(1, max |s|)`` are never tied (:func:`_tied`): float32 rounding splits
exact ties by ~1e-7 relative."""


def _finish(c, labels, x, it, done, result, prior, mode, st):
    n = c.num_items
    st = st._replace(score_prior=prior)
    s, g = (x[:n], x[n]) if mode == "learn" else (x, _fixed_gamma(c, mode, st.eps))
    s = _graph.centre_per_component(jnp.where(c.item_mask, s, 0), labels)
    pr = _problem(c, mode, st.eps)
    s = _tied(c, pr, labels, x, s, mode, st)
    gn = jnp.max(jnp.abs(_grad_p(jax.lax.stop_gradient(x), pr, mode, st)))
    return SoftBTSolution(s, g, it, done, gn, result)


def _fit_flat(c, mode, st, check=False, start_kind="least_squares", host=None, start_x=None):
    """``(solution, finite)`` for a batch ``[B]``; ``finite[b]``: context ``b``'s ML scores are finite.

    With ``check`` (``eps = 0`` and no score prior), a context whose win graph
    is not strongly connected within its components (``existence.finite_ml``,
    tested before the first Newton step) is fitted with the score prior
    ``existence.AUTO_SCORE_PRIOR`` instead; without it every context is taken
    to be finite (``eps > 0`` or a prior guarantees it). ``host``: the
    component labels ``[B, N]`` and ``finite`` ``[B]`` found on the host
    (``existence.host_check``), used instead of the device's. ``start_x``: ``[B, n]`` label-free
    least-squares starts (:func:`_ls_start`) in place of the usual start.
    """
    if host is None:
        labels = jax.vmap(_graph.components)(c)
    else:
        labels = host[0]
    # traced weights too (solve_context, laplace_posterior, a user's jit): the same division as _weight_scale
    scale = _traced_weight_scale(c.weight)
    c = dataclasses.replace(c, weight=c.weight / scale)
    st = st._replace(score_prior=st.score_prior / scale, gamma_prior=st.gamma_prior / scale)
    prior = jnp.broadcast_to(st.score_prior, labels.shape[:1])
    finite = jnp.ones(labels.shape[:1], bool)
    if check:
        if host is None:
            finite = jax.vmap(existence.finite_ml, in_axes=(0, 0, None))(c, labels, st.eps)
        else:
            finite = host[1]
        prior = jnp.where(finite, prior, jnp.asarray(existence.AUTO_SCORE_PRIOR, prior.dtype))
    x, it, done, result = _argmin(c, labels, prior, st, mode, start_kind, start_x)
    sol = jax.vmap(functools.partial(_finish, mode=mode, st=st))(c, labels, x, it, done, result, prior)
    return sol._replace(grad_norm=sol.grad_norm * scale), finite



CHUNK = 32
"""Contexts are solved in chunks of this many, one after another (``_batching.map_chunks``): a
chunk iterates only as long as its own slowest context needs and stays in cache (measured
1.6x faster than one batch of 10,000 contexts of 16 items; chunks of 128 or 512 were 5-15%
slower than 32)."""


@functools.partial(jax.jit, static_argnames=("mode", "check", "start_kind"))
def _fit(c, st, mode, check=False, start_kind="least_squares", host=None, start_x=None):
    flat, shape = _batching.flatten_batch(c)
    out = _batching.map_chunks(lambda t: _fit_flat(t[0], mode, st, check, start_kind, t[1], t[2]),
                               (flat, host, start_x), CHUNK)
    return _batching.unflatten_batch(out, shape)


@functools.partial(jax.jit, static_argnames=("mode",))
def _ls_start(c, st, mode):
    """``[B, n]`` label-free least-squares starts (``_soft_bt_newton._ridge_start``) of ``c`` (any batch shape)."""
    flat, _ = _batching.flatten_batch(c)
    pr = jax.vmap(functools.partial(_problem, mode=mode, eps=st.eps))(flat)
    return jax.vmap(functools.partial(_soft_bt_newton._ridge_start, mode=mode, st=st))(pr)


def _below():
    """Item counts where this solver switches path, beyond ``_batching.item_thresholds``: chord steps and the
    overlapped start (read now: tests move them)."""
    return (_soft_bt_newton.CHORD_MIN_ITEMS, OVERLAP_MIN_ITEMS)


def _fit_call(c, st, mode, check=False, start_kind="least_squares", host=None, start_x=None):
    """:func:`_fit` through ``_batching.call`` (its traced program kept on disk while the persistent cache is on)."""
    sol, finite = _batching.call(_unpacked_fit(mode, check, start_kind), f"soft_bt.fit-{mode}-{check}-{start_kind}",
                                 c, st, host, start_x, options=_batching.compiler_options(c.num_items, c.i.size))
    return SoftBTSolution(*sol), finite


@functools.lru_cache(maxsize=None)
def _unpacked_fit(mode, check, start_kind):
    """:func:`_fit` for these settings, its solution as a plain tuple (what an exported program may return)."""
    def fn(c, st, host, start_x):
        sol, finite = _fit(c, st, mode, check, start_kind, host, start_x)
        return tuple(sol), finite
    return fn


def _ls_start_call(c, st, mode):
    """:func:`_ls_start` through ``_batching.call``."""
    return _batching.call(lambda cc, s: (_ls_start(cc, s, mode),), f"soft_bt.ls_start-{mode}", c, st,
                          options=_batching.compiler_options(c.num_items, c.i.size))[0]


def _single_concrete(c):
    """``c`` is one context (any batch shape of size 1) of concrete values: its existence check runs on the host."""
    return math.prod(c.batch_shape) == 1 and not any(isinstance(x, jax.core.Tracer)
                                                      for x in (c.i, c.j, c.p, c.weight))


def _host_check(c, eps):
    """``existence.host_check`` (without its report) of a single concrete context: ``(_fit's host`` (batch axis
    1)``, the check, the flat host arrays)``."""
    flat = [np.asarray(x).reshape(-1) for x in (c.i, c.j, c.p, c.weight)]
    hc = existence.host_check(*flat, c.num_items, eps, report=False)
    return (hc.labels[None], np.asarray([hc.finite])), hc, flat


OVERLAP_MIN_ITEMS = 128
"""One concrete context of at least this many items overlaps its least-squares start with the host's
existence check (:func:`_fit_checked_on_host`); below, the start is cheap and its own program's
compilation (~0.1 s) would not be repaid."""


def _fit_checked_on_host(c, st, solver, start):
    """``(solution, finite, report)`` of one concrete context whose existence check runs on the host.

    With dense Newton systems the label-free least-squares start (``_soft_bt_newton._ridge_start``) is
    dispatched first and computes on the device while the host checks (JAX dispatches asynchronously), and
    the warning's report is made while the fit computes.
    """
    overlap = (start == "least_squares" and c.num_items >= OVERLAP_MIN_ITEMS
               and not _graph.sizes_use_cg(c.num_items, c.i.shape[-1]))
    with _batching.single_threaded_lapack() if c.num_items >= _batching.BLAS_SINGLE_THREAD_MIN_ITEMS \
            else contextlib.nullcontext():
        start_x = _ls_start_call(c, st, solver.mode) if overlap else None
        host, hc, (i, j, _, w) = _host_check(c, float(solver.eps))
        out = _fit_call(c, st, solver.mode, True, start, host, start_x)
        report = None if hc.finite else existence.check_report(i, w, j, c.num_items, hc)   # while it computes
        sol, finite = jax.block_until_ready(out)
    return sol, finite, report




def _weight_scale(c: Comparisons):
    """The mean positive weight of a concrete batch when it lies outside :data:`WEIGHT_SCALE_RANGE`, else ``None``.

    Scaling every weight by ``s`` scales the log-likelihood by ``s``; with both priors divided by ``s`` too the
    maximum is the same point, so the fit divides ``s`` out: float32 Newton steps, line search and convergence
    tests then work on the scale they are tuned for (weights near 1e7 made the line search fail with NaN scores,
    near 1e-8 the fit stopped early, 1e-10 gave NaN). Within the range nothing changes, bit for bit. The score
    prior that a context without finite ML scores gets (``existence.AUTO_SCORE_PRIOR``) then applies per unit of
    the divided weights.
    """
    w = np.asarray(c.weight)
    live = w[w > 0]
    if live.size == 0:
        return None
    m = float(np.mean(live, dtype=np.float64))
    return None if WEIGHT_SCALE_RANGE[0] <= m <= WEIGHT_SCALE_RANGE[1] else np.asarray(m, w.dtype)


def solve(c: Comparisons, solver: BradleyTerrySolver, *, check: bool | None = None,
          start: str = "least_squares") -> SoftBTSolution:
    """Fit soft Bradley-Terry to ``c`` (any batch shape) with ``solver``; the entry point of the whole family.

    Settings are traced: one compiled program serves every setting, and hard
    Bradley-Terry (:func:`jaxrank.bradley_terry`) too. At the top level a
    problem of more than a few dozen items is solved with single-threaded
    LAPACK and blocked on (``_batching.run_single_threaded_lapack``).

    Args:
        c: comparisons, any batch shape.
        solver: the settings.
        check: test every context for finite ML scores first and fit those
            without with the score prior ``existence.AUTO_SCORE_PRIOR``, warning
            at the top level (:mod:`jaxrank.scoring.existence`); default
            ``solver.checks_existence``.
        start: ``"least_squares"`` (the fit of the logits, one Laplacian solve) or
            ``"mm"`` (``_soft_bt_sparse.MM_START_SWEEPS``, 20, of Newman's updates, only without a
            positional bias: what hard decisions on a large sparse pool need, where
            Newton alone moves an item with saturated comparisons by about one
            log-unit per step).

    Returns:
        :class:`SoftBTSolution`; with ``solver.throw`` an unsuccessful concrete
        result raises :class:`~jaxrank.scoring.solver.SolverError`.
    """
    _validate.comparisons("c", c)
    if not isinstance(solver, BradleyTerrySolver):
        raise ValueError(f"solver must be a BradleyTerrySolver, got {type(solver).__name__}")
    check = solver.checks_existence if check is None else bool(check)
    st = solver.settings(c.p.dtype)
    if start not in ("least_squares", "mm"):
        raise ValueError(f"start must be 'least_squares' or 'mm', got {start!r}")
    if start == "mm" and solver.mode != "off":
        raise ValueError(f"start='mm' needs a solver without a positional bias, got debias={solver.debias!r}")
    # a concrete pool runs on its bucket's shapes (``_batching.bucket_sizes``: one program per bucket); the
    # chord steps and the overlapped start switch on at 128 items, so no bucket crosses that size
    num_items, concrete = c.num_items, _batching.is_concrete(c)
    scale = _weight_scale(c) if concrete else None
    if scale is not None:          # the same optimum, the objective on float32's scale (see _weight_scale)
        c = dataclasses.replace(c, weight=c.weight / scale)
        st = st._replace(score_prior=st.score_prior / scale, gamma_prior=st.gamma_prior / scale)
    if concrete:
        c = _batching.pad(c, *_batching.bucket_sizes(num_items, c.i.shape[-1], below=_below()))
    if check and _single_concrete(c):
        sol, finite, report = _fit_checked_on_host(c, st, solver, start)
    else:
        sol, finite = _batching.run_single_threaded_lapack(_fit_call, c, st, solver.mode, check, start,
                                                           num_items=c.num_items)
        report = None
    if concrete:
        sol = _batching.unpad(sol, num_items, len(c.batch_shape))
    if scale is not None:
        sol = sol._replace(grad_norm=sol.grad_norm * scale)
    if check and not isinstance(finite, jax.core.Tracer):
        existence.warn_if_infinite(c, np.asarray(finite), solver.eps, report=report)
    solver.check(sol.result)
    return sol


def solve_context(c: Comparisons, solver: BradleyTerrySolver) -> SoftBTSolution:
    """:class:`SoftBTSolution` of one context (unbatched ``c``), traceable: for use inside ``jit`` and ``vmap``.

    No existence check and no ``throw`` (read ``result``); otherwise as :func:`solve`.
    """
    st = solver.settings(c.p.dtype)
    flat = jax.tree.map(lambda x: x[None], c)
    return jax.tree.map(lambda x: x[0], _fit_flat(flat, solver.mode, st)[0])


def solution_vector(sol: SoftBTSolution, solver: BradleyTerrySolver) -> jax.Array:
    """The solver's unknowns ``x`` of one context: ``s``, or ``[s, gamma]`` when ``gamma`` is learnt."""
    return jnp.concatenate([sol.scores, sol.gamma[None]]) if solver.mode == "learn" else sol.scores


def hessian(c: Comparisons, sol: SoftBTSolution, solver: BradleyTerrySolver, proj: jax.Array) -> jax.Array:
    """Hessian of the negative log-likelihood (PoE eq. 3) of one context at ``sol``, plus ``proj`` on the score block.

    ``[[L(h) + lambda I + P, -W^T h], [-h^T W, 1^T h + lambda_g]]`` with
    ``h = w q (1 - q)`` (the last row and column only when ``gamma`` is learnt).
    """
    return _hessian(solution_vector(sol, solver), c, solver.mode, solver.settings(c.p.dtype), proj)


def precision_terms(c: Comparisons, sol: SoftBTSolution, solver: BradleyTerrySolver,
                    labels: jax.Array) -> _sparse_inverse.PrecisionTerms:
    """The Hessian of :func:`hessian` at ``sol`` as ``O(N + R)`` terms, never ``[N, N]`` (one context).

    ``h_k = w_k q_k (1 - q_k)`` per comparison (sparse edge space), and when
    ``gamma`` is learnt its cross block ``-W^T h`` and corner ``1^T h + lambda_g``
    (0 and ``lambda_g`` where the comparisons do not identify ``gamma``).
    """
    mode, st = solver.mode, solver.settings(c.p.dtype)
    dt = c.p.dtype
    e = _graph.edges(c, dense=False)
    free = _problem(c, mode, st.eps).free if mode == "learn" else jnp.zeros((), dt)
    q = jax.nn.sigmoid(_graph.incidence(e, sol.scores) - free * sol.gamma)
    floor = 1e-12
    h = c.weight * jnp.maximum(q * (1 - q), floor)
    if mode == "learn":
        cross = (-free * _graph.incidence_t(e, h))[:, None]
        corner = (free * jnp.sum(h) + st.gamma_prior)[None, None]
    else:
        cross, corner = jnp.zeros((c.num_items, 0), dt), jnp.zeros((0, 0), dt)
    return _sparse_inverse.PrecisionTerms(e, h, cross, corner, jnp.asarray(st.score_prior, dt), labels)


def fit_poe_bradley_terry(c: Comparisons, *, debias=False, eps=1e-6, gamma_prior=1e-6, score_prior=0.0,
                          tol=None, max_iter=100) -> SoftBTSolution:
    """Maximise the soft Bradley-Terry PoE likelihood; report convergence.

    Args:
        c: comparisons, any batch shape.
        debias: ``False`` (``gamma = 0``), ``True``/``"mean"`` (``gamma`` from
            the mean probability, PoE App. A.9) or ``"learn"`` (fit ``gamma``).
        eps: probabilities are clipped to ``[eps, 1 - eps]``.
        gamma_prior: precision of the weak ``N(0, 1/gamma_prior)`` prior on a learnt gamma.
        score_prior: precision ``lambda`` of an optional ``N(0, 1/lambda)`` prior
            on every score (MAP instead of maximum likelihood; 0 = off). Use it
            for hard 0/1 outcomes, where an undefeated item's ML score is infinite.
        tol: stop when the Newton step's max-norm is below ``tol`` (default
            ``1e-5`` in float32, ``1e-10`` in float64).
        max_iter: Newton iteration cap.

    Returns:
        :class:`SoftBTSolution`.

    With ``eps=0`` and ``score_prior=0`` (maximum likelihood of counts or hard
    outcomes) the ML scores are finite only if every component's win graph is
    strongly connected (:mod:`jaxrank.scoring.existence`). This is tested per
    context before the first Newton step; a context that fails gets the MAP
    under an ``N(0, 100)`` score prior (``score_prior =
    existence.AUTO_SCORE_PRIOR = 0.01``) and a
    :class:`~jaxrank.scoring.existence.NotStronglyConnectedWarning` names its
    items without a finite score (the warning needs concrete values: inside a
    caller's ``jax.jit`` the prior is applied silently).
    """
    solver = BradleyTerrySolver(debias=debias, eps=eps, gamma_prior=gamma_prior, score_prior=score_prior, tol=tol,
                                max_iter=max_iter)
    return solve(c, solver)


def poe_bradley_terry(c: Comparisons, *, debias=False, eps=1e-6, score_prior=0.0, tol=None,
                      max_iter=100) -> jax.Array:
    """PoE with soft Bradley-Terry experts (PoE-BT, PoE §3.2); see :func:`fit_poe_bradley_terry`.

    Returns:
        ``[..., N]`` scores centred per connected component; items in no
        comparison and padded items get 0. Differentiable in ``p`` and
        ``weight`` by implicit differentiation.
    """
    return fit_poe_bradley_terry(c, debias=debias, eps=eps, score_prior=score_prior, tol=tol,
                                 max_iter=max_iter).scores
