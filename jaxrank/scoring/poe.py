"""The general Product-of-Experts solver: scores from any expert's log-density (PoE eq. 2-3).

With an :class:`~jaxrank.scoring.experts.Expert` ``log q(d | p, theta)`` and the
comparisons' weights ``w_k``, the scores (and any learnt parameters ``phi`` of
``theta``) minimise, per context,

    F(s, phi) = - sum_k w_k log q(s_{i_k} - s_{j_k} | p_k, theta(phi))
                + lambda/2 |s|^2 + lambda_theta/2 |phi - phi_0|^2           (PoE eq. 2-3)

Its gradient and Hessian have the structure of every PoE likelihood: with
``g_k = d log q / dd`` and the curvature ``c_k = -w_k d^2 log q / dd^2`` of each
comparison (both from autodiff of the expert, elementwise),

    grad_s F = -W^T (w g) + lambda s,       H_ss = W^T diag(c) W + lambda I,

``W^T diag(c) W`` the comparison graph's Laplacian weighted by ``c`` (METHODS.md §4),
plus the rows and columns of ``phi`` (``H_s,phi = -W^T (w d^2 log q / dd dphi)``,
``H_phi,phi = -sum_k w_k d^2 log q / dphi^2 + lambda_theta I``).

Newton's method (``method="newton"``) solves with this Hessian, anchored per
connected component by the projector ``P`` (``_graph.component_projector``),
factorised by Cholesky, or for sparse pools of ``_graph.CG_MIN_ITEMS`` items and
more applied matrix-free in Jacobi-preconditioned conjugate gradients; an Armijo
backtracking line search tries the full step first. Pass 0 is the weighted
least-squares fit of the differences to ``expert.start`` (if given); for an
expert declared ``quadratic`` (Gaussian in ``d``) without learnt parameters one
exact Newton step from ``s = 0`` is the whole solve. With learnt parameters the
dense step eliminates them by their Schur complement in residual form
(``_poe_algebra.direction_dense``: a bias that only its prior fixes, as on a tree
of comparisons, is not lost to float32's cancellation) and Newton iterates. The
anchor ``P`` is scaled to the mean curvature (``_poe_algebra.projector_scale``). Every
context of a batch iterates independently in one flat ``lax.while_loop``
(``_batching.while_per_context``), chunks of :data:`CHUNK` contexts one after
another.

**Non-concave experts.** Where a comparison's curvature ``c_k`` is negative,
the Newton system uses ``max(c_k, floor w_k)`` instead (a damped step, still a
descent direction; the line search keeps every step an ascent of the
log-likelihood). At the point reached, if any curvature was negative, the true
Hessian is factorised: if it is not positive definite the point is not a
maximum, and the context's result is ``RESULTS.nonconcave`` (never reported as
successful). With only non-negative curvatures the Hessian is a Laplacian and
positive semi-definite, so no check is needed.

``method="lbfgs"`` runs ``optax.lbfgs`` (zoom line search) per context instead,
for experts whose curvature is not worth computing; it stops when the gradient's
max-norm falls below ``tol`` times the mean weighted degree.

Gradients with respect to ``p``, ``weight`` and ``theta`` use implicit
differentiation of the optimality condition ``grad F(x*) = 0`` (one linear solve
with the true Hessian per context; the iterations are never unrolled).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _batching, _graph, _sparse_inverse
from jaxrank.comparisons import Comparisons
from jaxrank.scoring import _poe_algebra as alg
from jaxrank.scoring._soft_bt_newton import _State
from jaxrank.scoring.experts import Expert
from jaxrank.scoring.solver import RESULTS, ProductOfExpertsSolver, _traced_weight_scale

__all__ = ["PoESolution", "solve", "fit_poe", "solve_context", "hessian", "solution_vector", "poe_scores",
           "CHUNK", "precision_terms"]

def _curvature_floor(dt):
    """The Newton system's floor on a comparison's curvature, per unit weight (``max(c_k, floor w_k)``)."""
    return 1e-6 if dt == jnp.float32 else 1e-12


def _halvings(dt):
    """Line-search halvings before a solve ends unconverged: ``log2(1 / floor) + 10`` for the dtype's floor.

    Where a comparison's curvature is 0 (Huber's linear tails) the system takes the floor, and the Newton step
    is up to ``1 / floor`` times too long: the line search must be able to halve it back to size (30 halvings,
    enough in float32, left float64's 1e-12 floor steps ~1e3 times too long: line_search_failed).
    """
    return int(np.ceil(np.log2(1 / _curvature_floor(dt)))) + 10

CHUNK = 32
"""Contexts are solved in chunks of this many, one after another (``_batching.map_chunks``), as soft BT."""


class PoESolution(NamedTuple):
    """Result of :func:`solve`.

    Attributes:
        scores: ``[..., N]`` scores, centred per connected component (0 for padded items).
        theta: dict of the parameters each context used, every entry with the
            leading axes ``[...]`` (learnt ones fitted, ``from_context`` ones set per context).
        iterations: ``[...]`` solver passes (Newton steps and line-search halvings,
            or L-BFGS steps).
        converged: ``[...]`` whether the stopping test passed.
        grad_norm: ``[...]`` max-norm of the objective's gradient at the solution.
        result: ``[...]`` int32 :data:`jaxrank.scoring.RESULTS` code per context.
    """

    scores: jax.Array
    theta: dict
    iterations: jax.Array
    converged: jax.Array
    grad_norm: jax.Array
    result: jax.Array


def _pass(ops: alg.Ops, state: _State, gs0, expert: Expert, st) -> _State:
    """One pass of damped Newton with backtracking for one context: evaluate ``y = x + t delta`` once."""
    dt = ops.p.dtype
    floor = _curvature_floor(dt)
    x, f, delta, slope, t, it = state[:6]
    n, m = ops.e.num_items, len(expert.learnt)
    start = it == 0
    y = x + t * delta
    loc = alg.local_derivatives(y, ops, expert)
    fy = alg.objective_from(y, loc, ops, expert, st)
    ok = (fy <= f + 1e-4 * t * slope + 16 * jnp.finfo(dt).eps * jnp.abs(f)) | (it <= 1)
    true_curv = -loc.h[:, 0, 0]
    w = jnp.where(ops.w > 0, ops.w, 0)
    negative = jnp.any(true_curv < 0)
    curv = jnp.maximum(true_curv, floor * w)
    # The rounding level of each gradient entry: float eps times the magnitude of its terms, each
    # term's magnitude taken as |g_k| + |h_k| (|d_k| + 1) (the error of g_k from the rounding of
    # d_k). It must not overstate: a saturated comparison's g_k is tiny and exact (soft BT written
    # as p log sigmoid(d) + (1 - p) log sigmoid(-d) differentiates without cancellation), and a
    # larger level would stop an item with only saturated comparisons far from its optimum.
    mag = jnp.abs(loc.g) + jnp.abs(loc.h[:, :, 0]) * (jnp.abs(loc.d)[:, None] + 1)
    wt_g, mag_s = _graph.item_sums_many(ops.e, (loc.g[:, 0], mag[:, 0]), (-loc.g[:, 0], mag[:, 0]))
    scale = jnp.concatenate([mag_s + ops.prior * jnp.abs(y[:n]),
                             jnp.sum(mag[:, 1:], axis=0) + st.theta_prior * jnp.abs(y[n:])])
    g = alg.gradient(y, loc, ops, expert, st, wt_g)
    # Pass 0: the weighted least-squares fit of the differences to expert.start (Hessian L(w)).
    g = jnp.where(start, jnp.concatenate([gs0, jnp.zeros(m, dt)]), g)
    curv = jnp.where(start, w, curv)
    loc_sys = loc._replace(h=jnp.where(start, 0.0, loc.h)) if m else loc
    g_c = alg.centre_scores(g, ops)
    if _graph.use_cg(ops.e):
        new, diag = alg.direction_cg(g_c, curv, loc_sys, ops, st)
        indefinite = jnp.zeros((), bool)
    else:
        new, diag = alg.direction_dense(g_c, curv, loc_sys, ops, st)
        indefinite = ~jnp.all(jnp.isfinite(new))
    new_slope = jnp.dot(g, new)
    # A Newton direction that is not a finite descent direction (an indefinite learnt-parameter
    # block, or rounding in a nearly singular system): a diagonally scaled gradient step instead.
    bad = ~(jnp.all(jnp.isfinite(new)) & (new_slope < 0)) & ~start
    safe = -g / (jnp.abs(diag) + 1.0)
    new = jnp.where(bad, safe, new)
    new_slope = jnp.where(bad, jnp.dot(g, safe), new_slope)
    trace = jnp.sum(2 * curv)
    curv_mean = jnp.maximum(trace / n, jnp.finfo(dt).tiny)
    small = (jnp.max(jnp.abs(new), initial=0.0) < st.tol) | (-new_slope <= st.tol**2 * curv_mean)
    # Or every gradient entry at its rounding level. As soft BT (``_soft_bt_newton._pass``), the Newton step
    # from y, computed anyway, is then taken as a small one is: the level bounds the gradient's noise loosely
    # (64 ulps of every term), and a stop there without the step left soft BT's expert 2e-5 off SciPy's
    # optimum. Where a curvature is negative the direction comes from the floored system, no Newton step
    # (a Cauchy expert stopped 8e-5 off, its step 8x tol): there only a small step stops.
    rounding = jnp.all(jnp.abs(g) <= 64 * jnp.finfo(dt).eps * scale) & ~negative
    converged = ok & (it >= 1) & (small | rounding)
    y = y + jnp.where(converged & ~bad, new, 0)
    t_next = jnp.where(ok, jnp.ones_like(t), 0.5 * t)
    failed = ~ok & (t_next < 0.5**_halvings(dt))
    damped = (negative | indefinite | bad) & ~start
    return _State(jnp.where(ok, y, x), jnp.where(start, jnp.inf, jnp.where(ok, fy, f)),
                  jnp.where(ok, new, delta), jnp.where(ok, new_slope, slope), t_next, it + 1,
                  converged | failed, converged, jnp.where(ok, damped, state.damped))


def _newton(ops: alg.Ops, expert: Expert, st):
    """Damped Newton with backtracking on a batch ``[B]`` of contexts (per-context stopping)."""
    gs0 = jax.vmap(functools.partial(alg.start_gradient, expert=expert))(ops)
    b, n = ops.p.shape[0], ops.e.num_items + len(expert.learnt)
    dt = ops.p.dtype
    phi = jax.vmap(functools.partial(alg.phi0, expert=expert))(ops)
    x0 = jnp.concatenate([jnp.zeros((b, ops.e.num_items), dt), phi], axis=1)
    z, zb = jnp.zeros((b, n), dt), jnp.zeros(b, dt)
    no = jnp.zeros(b, bool)
    init = _State(x0, jnp.full(b, jnp.inf, dt), z, zb, jnp.ones(b, dt), jnp.zeros(b, jnp.int32), no, no, no)
    cont = lambda s: ~s.stop & (s.it <= st.max_iter)
    step = lambda o, s: _pass(o[0], s, o[1], expert, st)
    out = _batching.while_per_context(cont, step, (ops, gs0), init, compact=False)
    result = jnp.where(out.converged, RESULTS.successful,
                       jnp.where(out.stop, RESULTS.line_search_failed, RESULTS.max_steps_reached))
    return out.x, jnp.maximum(out.it - 1, 0), out.converged, result.astype(jnp.int32), out.damped


def _quadratic_one(ops: alg.Ops, expert: Expert, st):
    """One exact Newton step from ``s = 0`` for an expert quadratic in ``d`` (``expert.quadratic``)."""
    n = ops.e.num_items
    x0 = jnp.concatenate([jnp.zeros(n, ops.p.dtype), alg.phi0(ops, expert)])
    loc = alg.local_derivatives(x0, ops, expert)
    g = alg.gradient(x0, loc, ops, expert, st)
    g = alg.centre_scores(g, ops)
    curv = -loc.h[:, 0, 0]
    if _graph.use_cg(ops.e):
        new, _ = alg.direction_cg(g, curv, loc, ops, st)
    else:
        new = alg.direction_dense(g, curv, loc, ops, st)[0]
    ok = jnp.all(jnp.isfinite(new))
    x = jnp.where(ok, x0 + new, x0)
    result = jnp.where(ok, RESULTS.successful, RESULTS.line_search_failed).astype(jnp.int32)
    return x, jnp.ones((), jnp.int32), ok, result, jnp.any(curv < 0) | ~ok


def _lbfgs_one(ops: alg.Ops, expert: Expert, st):
    """``optax.lbfgs`` on one context, from the least-squares start (dense) or ``x = 0``."""
    n, m = ops.e.num_items, len(expert.learnt)
    dt = ops.p.dtype
    w = jnp.where(ops.w > 0, ops.w, 0)
    x0 = jnp.concatenate([jnp.zeros(n, dt), alg.phi0(ops, expert)])
    if expert.start is not None and not _graph.use_cg(ops.e):
        proj = _graph.component_projector(ops.labels, dt)
        lap = _graph.laplacian(ops.e, w) + proj + ops.prior * jnp.eye(n, dtype=dt)
        rhs = _graph.incidence_t(ops.e, w * alg.start_differences(ops, expert))
        x0 = x0.at[:n].set(_graph.psd_solve(lap, rhs))
    fun = lambda x: alg.objective(x, ops, expert, st)
    import optax  # deferred: its import takes ~0.5 s, and only method="lbfgs" needs it

    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(fun)
    gtol = st.tol * jnp.maximum(2 * jnp.sum(w) / n, jnp.finfo(dt).tiny)

    def gnorm(g):
        return jnp.max(jnp.abs(alg.centre_scores(g, ops)))

    def body(carry):
        x, state, it, _ = carry
        value, g = value_and_grad(x, state=state)
        updates, state = opt.update(g, state, x, value=value, grad=g, value_fn=fun)
        x = optax.apply_updates(x, updates)
        return x, state, it + 1, gnorm(jax.grad(fun)(x))

    init = (x0, opt.init(x0), jnp.zeros((), jnp.int32), gnorm(jax.grad(fun)(x0)))
    x, _, it, gn = jax.lax.while_loop(lambda c: (c[3] > gtol) & (c[2] < st.max_iter), body, init)
    converged = gn <= gtol
    result = jnp.where(converged, RESULTS.successful, RESULTS.max_steps_reached).astype(jnp.int32)
    loc = alg.local_derivatives(x, ops, expert)
    return x, it, converged, result, jnp.any(-loc.h[:, 0, 0] < 0) | (m > 0)


def _solve_ops(ops: alg.Ops, expert: Expert, method: str, st):
    if method == "lbfgs":
        x, it, conv, result, damped = jax.vmap(functools.partial(_lbfgs_one, expert=expert, st=st))(ops)
    elif expert.quadratic and not expert.learnt:
        x, it, conv, result, damped = jax.vmap(functools.partial(_quadratic_one, expert=expert, st=st))(ops)
    else:
        x, it, conv, result, damped = _newton(ops, expert, st)
    # Where negative curvature was met at the end, test the true Hessian (only if some context needs it).
    check = lambda: jax.vmap(functools.partial(alg.is_maximum, expert=expert, st=st))(x, ops)
    is_max = jax.lax.cond(jnp.any(damped), check, lambda: jnp.ones(damped.shape, bool))
    nonconcave = damped & ~is_max
    result = jnp.where(nonconcave, RESULTS.nonconcave, result).astype(jnp.int32)
    return x, it, conv & ~nonconcave, result


def _context_ops(c, theta, labels, prior, expert):
    make = functools.partial(alg.make_ops, expert=expert)
    return jax.vmap(make, in_axes=(0, None, 0, 0))(c, theta, labels, prior)


def _argmin_impl(c, theta, labels, prior, st, expert, method):
    return _solve_ops(_context_ops(c, theta, labels, prior, expert), expert, method, st)


_argmin = jax.custom_vjp(_argmin_impl, nondiff_argnums=(5, 6))


def _argmin_fwd(c, theta, labels, prior, st, expert, method):
    out = _argmin_impl(c, theta, labels, prior, st, expert, method)
    return out, (c, theta, labels, prior, st, out[0])


def _argmin_bwd(expert, method, res, ct):
    # Implicit function theorem on grad F(x*; c, theta) = 0:  dx* = -H^{-1} d_(c, theta) grad F.
    c, theta, labels, prior, st, x = res

    def one(cc, lab, pr, xx, ctx):
        u = alg.solve_true_hessian(xx, alg.make_ops(cc, theta, lab, pr, expert), expert, st, ctx)
        grad_at = lambda c2, th2: jax.grad(alg.objective)(xx, alg.make_ops(c2, th2, lab, pr, expert),
                                                          expert, st)
        _, vjp = jax.vjp(grad_at, cc, theta)
        return vjp(-u)

    dc, dtheta = jax.vmap(one)(c, labels, prior, x, ct[0])
    dtheta = jax.tree.map(lambda a: jnp.sum(a, axis=0), dtheta)
    zero = lambda a: (jnp.zeros_like(a) if jnp.issubdtype(a.dtype, jnp.inexact)
                      else np.zeros(a.shape, jax.dtypes.float0))
    return (dc, dtheta, zero(labels), jnp.zeros_like(prior), jax.tree.map(zero, st))


_argmin.defvjp(_argmin_fwd, _argmin_bwd)


def _fit_flat(c, theta, st, expert, method):
    labels = jax.vmap(_graph.components)(c)
    # weights far from 1 divided out with both priors (the same optimum; solver.WEIGHT_SCALE_RANGE)
    scale = _traced_weight_scale(c.weight)
    c = dataclasses.replace(c, weight=c.weight / scale)
    st = st._replace(score_prior=st.score_prior / scale, theta_prior=st.theta_prior / scale)
    prior = jnp.broadcast_to(st.score_prior, labels.shape[:1])
    x, it, conv, result = _argmin(c, theta, labels, prior, st, expert, method)
    ops = _context_ops(c, theta, labels, prior, expert)
    n = c.num_items

    def finish(o, cc, xx):
        s = _graph.centre_per_component(jnp.where(cc.item_mask, xx[:n], 0), o.labels)
        gn = jnp.max(jnp.abs(jax.grad(alg.objective)(jax.lax.stop_gradient(xx), o, expert, st)))
        return s, alg.theta_at(xx, o, expert), gn

    s, th, gn = jax.vmap(finish)(ops, c, x)
    return PoESolution(s, th, it, conv, gn * scale, result)


@functools.partial(jax.jit, static_argnames=("expert", "method"))
def _fit(c, theta, st, expert, method):
    flat, shape = _batching.flatten_batch(c)
    out = _batching.map_chunks(lambda cc: _fit_flat(cc, theta, st, expert, method), flat, CHUNK)
    return _batching.unflatten_batch(out, shape)


def _check_comparisons(c):
    if not isinstance(c, Comparisons):
        raise ValueError(f"c must be a jaxrank.Comparisons, got {type(c).__name__}")


def _pad_theta(theta, r, size):
    """``theta`` with every entry of shape ``[r]`` (one value per comparison) padded to ``[size]`` (last value)."""
    if size == r:
        return theta
    pad = lambda v: jnp.pad(v, (0, size - r), mode="edge") if np.shape(v) == (r,) and r > 0 else v
    return {k: pad(v) for k, v in theta.items()}


def solve(c: Comparisons, solver: ProductOfExpertsSolver, theta: Mapping | None = None) -> PoESolution:
    """Maximise the product of ``solver.expert`` over every context of ``c`` (PoE eq. 2-3).

    One compiled program per expert, method, dtype and shape: ``theta`` and the
    numeric settings are traced, so new values never recompile. Differentiable in
    ``c.p``, ``c.weight`` and ``theta`` by implicit differentiation.

    Args:
        c: comparisons, any batch shape.
        solver: a :class:`jaxrank.ProductOfExpertsSolver`.
        theta: parameters overriding the expert's defaults (shared by every context).

    Returns:
        :class:`PoESolution`; with ``solver.throw`` an unsuccessful concrete result
        raises :class:`jaxrank.SolverError`.

    Raises:
        ValueError: ``solver`` not a :class:`ProductOfExpertsSolver`, or ``theta``
            with unknown keys.
    """
    _check_comparisons(c)
    if not isinstance(solver, ProductOfExpertsSolver):
        raise ValueError(f"solver must be a ProductOfExpertsSolver, got {type(solver).__name__}")
    r = c.num_comparisons
    th = solver.theta(theta, c.p.dtype, r)
    # padded to its bucket (``_batching.bucketed``), never kept on disk: an expert has no name that is the same
    # in every process; a per-comparison theta entry [R] padded with the comparisons (its last value repeated,
    # on rows of weight 0)
    fit = lambda cc, t, s: tuple(_fit(cc, _pad_theta(t, r, cc.num_comparisons), s, solver.expert, solver.method))
    sol = PoESolution(*_batching.run_single_threaded_lapack(_batching.bucketed, fit, None, c, th,
                                                            solver.settings(c.p.dtype), num_items=c.num_items))
    solver.check(sol.result)
    return sol


fit_poe = solve
"""The public name of :func:`solve` (``jaxrank.fit_poe(c, solver, theta)``)."""


def solve_context(c: Comparisons, solver: ProductOfExpertsSolver, theta: Mapping | None = None) -> PoESolution:
    """:class:`PoESolution` of one context (unbatched ``c``), traceable (inside ``jit``/``vmap``); no ``throw``.

    Raises:
        ValueError: ``c`` not a :class:`~jaxrank.Comparisons` of one context (batch shape ``()``; for a batch
            use :func:`solve`), ``solver`` not a :class:`ProductOfExpertsSolver`, or ``theta`` invalid.
    """
    _check_comparisons(c)
    if c.batch_shape != ():
        raise ValueError(f"c must be one context (batch shape ()) for solve_context, got batch shape "
                         f"{c.batch_shape}; solve (fit_poe) takes a batch")
    if not isinstance(solver, ProductOfExpertsSolver):
        raise ValueError(f"solver must be a ProductOfExpertsSolver, got {type(solver).__name__}")
    th = solver.theta(theta, c.p.dtype, c.num_comparisons)
    flat = jax.tree.map(lambda x: x[None], c)
    out = _fit_flat(flat, th, solver.settings(c.p.dtype), solver.expert, solver.method)
    return jax.tree.map(lambda x: x[0], out)


def solution_vector(sol: PoESolution, solver: ProductOfExpertsSolver) -> jax.Array:
    """The unknowns ``x = [s, phi]`` of one context (``phi``: the learnt parameters, in ``expert.learnt`` order)."""
    phi = [jnp.reshape(sol.theta[k], (1,)) for k in solver.expert.learnt]
    return jnp.concatenate([sol.scores] + phi)


def hessian(c: Comparisons, sol: PoESolution, solver: ProductOfExpertsSolver, proj: jax.Array,
            theta: Mapping | None = None) -> jax.Array:
    """The Hessian of ``F`` (the negative log-posterior) of one context at ``sol``, ``proj`` added to the score block.

    ``[[W^T diag(c) W + lambda I + proj, H_s,phi], [H_phi,s, H_phi,phi]]``, ``c_k``
    the true curvatures ``-w_k d^2 log q / dd^2`` (not damped).
    """
    th = solver.theta(theta, c.p.dtype)
    st = solver.settings(c.p.dtype)
    labels = jnp.argmax(proj > 0, axis=1).astype(jnp.int32)
    ops = alg.make_ops(c, th, labels, jnp.asarray(st.score_prior), solver.expert)
    return alg.true_hessian(solution_vector(sol, solver), ops, solver.expert, st)


def precision_terms(c: Comparisons, sol: PoESolution, solver: ProductOfExpertsSolver, labels: jax.Array,
                    theta: Mapping | None = None) -> _sparse_inverse.PrecisionTerms:
    """:func:`hessian` at ``sol`` as ``O(N + R)`` terms, never ``[N, N]`` (one context; ``labels`` its components).

    The curvatures ``c_k = -w_k d^2 log q / dd^2`` per comparison, the learnt
    parameters' cross block ``H_s,phi = -W^T (w d^2 log q / dd dphi)`` and their
    block ``H_phi,phi`` (the module docstring's equation).
    """
    th = solver.theta(theta, c.p.dtype)
    st = solver.settings(c.p.dtype)
    ops = alg.make_ops(c, th, labels, jnp.asarray(st.score_prior), solver.expert)
    x = solution_vector(sol, solver)
    loc = alg.local_derivatives(x, ops, solver.expert)
    m = len(solver.expert.learnt)
    dt = c.p.dtype
    cross = jnp.stack([-_graph.incidence_t(ops.e, loc.h[:, 0, 1 + a]) for a in range(m)], axis=1) if m else \
        jnp.zeros((c.num_items, 0), dt)
    corner = -jnp.sum(loc.h[:, 1:, 1:], axis=0) + st.theta_prior * jnp.eye(m, dtype=dt)
    return _sparse_inverse.PrecisionTerms(ops.e, -loc.h[:, 0, 0], cross, corner, jnp.asarray(st.score_prior, dt),
                                          labels)


def poe_scores(c: Comparisons, expert: Expert, theta: Mapping | None = None, **settings) -> jax.Array:
    """Scores of the product of ``expert`` (PoE eq. 2-3): ``solve(c, ProductOfExpertsSolver(expert, **kw)).scores``.

    Returns:
        ``[..., N]`` scores, centred per connected component (0 for padded items).
    """
    return solve(c, ProductOfExpertsSolver(expert, **settings), theta).scores
