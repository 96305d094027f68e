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
started from the least-squares fit of the logits. Line search and Newton steps
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

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _batching, _graph, _sparse_inverse, _validate
from jaxrank.comparisons import Comparisons
from jaxrank.scoring import _mm, existence
from jaxrank.scoring.solver import RESULTS, BradleyTerrySolver

__all__ = ["poe_bradley_terry", "fit_poe_bradley_terry", "SoftBTSolution", "solve", "solve_context", "hessian",
           "solution_vector", "precision_terms"]

_STEPS = 30  # a step halved 30 times without sufficient decrease ends the solve, unconverged


class SoftBTSolution(NamedTuple):
    """Result of :func:`fit_poe_bradley_terry`.

    Attributes:
        scores: ``[..., N]`` scores, centred per connected component.
        gamma: ``[...]`` positional-bias parameter used or learnt.
        iterations: ``[...]`` Newton steps from the least-squares start (plus
            any line-search halvings).
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


def _fixed_gamma(c, mode, eps):
    if mode == "mean":
        pbar = jnp.sum(c.weight * c.p) / jnp.maximum(jnp.sum(c.weight), 1e-30)
        pbar = jnp.clip(pbar, eps, 1 - eps)
        return jnp.log1p(-pbar) - jnp.log(pbar)
    return jnp.zeros((), c.p.dtype)


class _Problem(NamedTuple):
    """One context's likelihood data in its edge space (``_graph.edges``)."""

    e: _graph.Edges
    w: jax.Array      # summed comparison weights per edge
    wp: jax.Array     # summed w * clip(p) per edge
    wl: jax.Array     # summed w * (1 - clip(p)) per edge (not w - wp: exact when p is near 1)
    gamma: jax.Array  # the fixed gamma (unused when learnt)
    free: jax.Array   # 1 where a learnt gamma is identified by the comparisons, else 0 (gamma held at 0)


def _problem(c, mode, eps):
    e = _graph.edges(c)
    pc = jnp.clip(c.p, eps, 1 - eps)
    w, wp, wl = _graph.reduce(e, c.weight, c.weight * pc, c.weight * (1 - pc))
    free = jnp.ones((), c.p.dtype)
    if mode == "learn":
        # Where no comparison pins gamma down, the likelihood is flat along (s + t phi, gamma + t)
        # and only the weak prior picks gamma = 0: below float32's resolution, so gamma would land
        # wherever the iteration stopped. Decide that exactly from the graph and hold gamma at 0.
        on = jax.lax.stop_gradient(w)
        labels = _graph.components(c, e=e, w=on)
        free = _graph.bias_identified(e, on, labels).astype(c.p.dtype)
    return _Problem(e, w, wp, wl, _fixed_gamma(c, mode, eps), free)


def _residual(d, pr):
    """Edge residuals ``r = w sigmoid(d) - w p`` and the magnitude of their two terms.

    Where the edge's ``p`` is above 1/2 the residual is computed as
    ``w (1 - p) - w sigmoid(-d)``: both terms are small near saturation, so the
    difference keeps its digits (``w sigmoid(d) - w p`` would cancel two numbers
    close to ``w`` and lose them in float32).
    """
    hi = pr.wp > pr.wl
    qa, qb = jax.nn.sigmoid(d), jax.nn.sigmoid(-d)
    r = jnp.where(hi, pr.wl - pr.w * qb, pr.w * qa - pr.wp)
    mag = jnp.where(hi, pr.wl + pr.w * qb, pr.w * qa + pr.wp)
    return r, mag, qa * qb


def _split(x, pr, mode):
    n = pr.e.num_items
    if mode == "learn":
        return x[:n], x[n]
    return x, pr.gamma


def _nll_d(x, d, pr, mode, st):
    """The objective at ``x`` given its edge differences ``d = s_i - s_j - gamma``."""
    s, g = _split(x, pr, mode)
    # sum_k w [p log sig(d) + (1 - p) log sig(-d)] = sum_k [w log sig(d) - (w - w p) d]
    f = -jnp.sum(pr.w * jax.nn.log_sigmoid(d) - (pr.w - pr.wp) * d) + 0.5 * st.score_prior * jnp.sum(s**2)
    if mode == "learn":
        f = f + 0.5 * st.gamma_prior * g**2
    return f


def _diffs(x, pr, mode):
    s, g = _split(x, pr, mode)
    return _graph.incidence(pr.e, s) - pr.free * g


def _nll_p(x, pr, mode, st):
    return _nll_d(x, _diffs(x, pr, mode), pr, mode, st)


def _grad_from(x, wt_r, sum_r, mode, st):
    """Gradient from ``W^T r`` and ``1^T r`` of the edge residuals ``r = w q - w p``:
    ``[W^T r + lambda s, -1^T r + lambda_g gamma]``."""
    n = wt_r.shape[0]
    gs = wt_r + st.score_prior * x[:n]
    if mode == "learn":
        return jnp.concatenate([gs, (-sum_r + st.gamma_prior * x[n])[None]])
    return gs


def _hessian_from(lap, wt_h, sum_h, mode, st, proj):
    """``[[L(h) + lambda I + P, -W^T h], [-h^T W, 1^T h + lambda_g]]`` (the last row/column if learnt).

    ``P`` (the per-component projector) acts only on per-component constants,
    along which the gradient is always 0 (and the scores stay centred), so it
    never changes a Newton step or the implicit derivative; it only makes the
    system definite.
    """
    n = lap.shape[0]
    hss = lap + proj + st.score_prior * jnp.eye(n, dtype=lap.dtype)
    if mode != "learn":
        return hss
    hsg = -wt_h
    hgg = sum_h + st.gamma_prior
    top = jnp.concatenate([hss, hsg[:, None]], axis=1)
    bottom = jnp.concatenate([hsg, hgg[None]])[None, :]
    return jnp.concatenate([top, bottom], axis=0)


def _grad_r(x, r, pr, mode, st):
    return _grad_from(x, _graph.incidence_t(pr.e, r), pr.free * jnp.sum(r), mode, st)


def _grad_p(x, pr, mode, st):
    return _grad_r(x, _residual(_diffs(x, pr, mode), pr)[0], pr, mode, st)


def _hessian_h(h, pr, mode, st, proj):
    wt_h = pr.free * _graph.incidence_t(pr.e, h) if mode == "learn" else None
    return _hessian_from(_graph.laplacian(pr.e, h), wt_h, pr.free * jnp.sum(h), mode, st, proj)


def _hessian_p(x, pr, mode, st, proj, floor=1e-12):
    q = jax.nn.sigmoid(_diffs(x, pr, mode))
    return _hessian_h(pr.w * jnp.maximum(q * (1 - q), floor), pr, mode, st, proj)


def _nll(x, c, mode, st):
    """Negative log-likelihood (PoE eq. 3) of ``x = s`` or ``x = [s, gamma]`` for one context."""
    return _nll_p(x, _problem(c, mode, st.eps), mode, st)


def _grad(x, c, mode, st):
    """Gradient of :func:`_nll` in ``x``."""
    return _grad_p(x, _problem(c, mode, st.eps), mode, st)


def _hessian(x, c, mode, st, proj):
    """Hessian of :func:`_nll` in ``x`` plus ``proj`` on the score block."""
    return _hessian_p(x, _problem(c, mode, st.eps), mode, st, proj)


class _State(NamedTuple):
    x: jax.Array          # the current (accepted) point
    f: jax.Array          # objective at x (+inf before the start is accepted)
    delta: jax.Array      # search direction from x
    slope: jax.Array      # directional derivative along delta
    t: jax.Array          # step length to try next
    it: jax.Array         # loop passes so far
    stop: jax.Array
    converged: jax.Array


def _pass(ops, state: _State, mode, st, start_kind="least_squares") -> _State:
    """One pass of Newton's method with backtracking for one context (see :func:`_newton`)."""
    pr, labels, r_start, prior, proj = ops
    st = st._replace(score_prior=prior)   # this context's score prior (``_fit_flat``)
    dt = pr.w.dtype
    floor = 1e-6 if dt == jnp.float32 else 1e-12   # keeps the Newton system well conditioned when q saturates
    x, f, delta, slope, t, it = state[:6]
    least_squares = start_kind == "least_squares"
    start = (it == 0) & least_squares       # pass 0 is the least-squares solve (else: Newton from x)
    y = x + t * delta
    d = _diffs(y, pr, mode)
    fy = _nll_d(y, d, pr, mode, st)
    ok = (fy <= f + 1e-4 * t * slope + 16 * jnp.finfo(dt).eps * jnp.abs(f)) | (it <= (1 if least_squares else 0))
    r, mag, qq = _residual(d, pr)
    r = jnp.where(start, r_start, r)
    h = jnp.where(start, pr.w, pr.w * jnp.maximum(qq, floor))
    n = pr.e.num_items
    if _graph.use_cg(pr.e):
        new, g, diag, scale, trace = _direction_cg(y, h, r, mag, pr, mode, st, labels)
    else:
        # the terms' magnitudes summed per item too: the scale of each gradient entry's rounding error
        lap, wt_h, wt_r, scale = _graph.laplacian_and_incidence_t(pr.e, h, r, mag)
        g = _grad_from(y, wt_r, pr.free * jnp.sum(r), mode, st)
        hess = _hessian_from(lap, pr.free * wt_h, pr.free * jnp.sum(h), mode, st, proj)
        # The gradient sums to 0 over every connected component; in float32 it does so only to
        # the rounding of the busiest items, and that residue, solved against the flattest
        # direction of a rarely compared item, kicks it by ~1e-3 every pass: project it out.
        pmean = _graph.component_mean(g[:n], labels, _graph.component_sizes(labels, dt))
        g_c = g.at[:n].add(-pmean)
        new = -_graph.psd_solve(hess, g_c)
        diag, trace = jnp.diagonal(hess), 2 * jnp.sum(h)
    new_slope = jnp.dot(g, new)
    # Fall back to a diagonally scaled gradient step if the Newton direction is not a
    # finite descent direction (rounding in a nearly singular system).
    bad = ~(jnp.all(jnp.isfinite(new)) & (new_slope < 0)) & ~start
    safe = -g / (jnp.abs(diag) + 1.0)
    new = jnp.where(bad, safe, new)
    new_slope = jnp.where(bad, jnp.dot(g, safe), new_slope)
    # Converged at an accepted y when the Newton step from y is below tol (taken without
    # a line search: Newton converges quadratically, so y + step is closer still) or the
    # gradient at y is at rounding level.
    # Small: below tol in max-norm, or in the norm of the Hessian relative to its mean
    # curvature (Newton decrement); the latter lets an item with a handful of saturated
    # comparisons stop at float32's noise floor along its nearly flat direction, where its
    # score is anyway undetermined to far more than tol.
    curv = jnp.maximum(trace / n, jnp.finfo(dt).tiny)
    # Or predicted small: after a full step ``delta`` the contraction rate ``theta = |new| / |delta|``
    # estimates the error left after taking ``new`` as ``theta |new|`` (Deuflhard's estimate, as in
    # Hairer & Wanner's stopping rule for Newton's method, IV.8); below ``tol`` (with ``theta <= 1/2``)
    # it saves the confirming pass, whose step quadratic convergence makes far smaller still.
    step, last = jnp.max(jnp.abs(new), initial=0.0), jnp.max(jnp.abs(delta), initial=0.0)
    predicted = (it >= 2) & (t == 1) & ~bad & (2 * step <= last) & (step * step <= st.tol * last)
    small = (step < st.tol) | predicted | (-new_slope <= st.tol**2 * curv)
    sc, gm = _split(y, pr, mode)
    scale = scale + st.score_prior * jnp.abs(sc)
    if mode == "learn":
        scale = jnp.concatenate([scale, (jnp.sum(mag) + st.gamma_prior * jnp.abs(gm))[None]])
    rounding = jnp.all(jnp.abs(g) <= 64 * jnp.finfo(dt).eps * scale)    # every entry at its rounding level
    converged = ok & (it >= 1) & (small | rounding)
    y = y + jnp.where(converged & small & ~bad, new, 0)
    t_next = jnp.where(ok, jnp.ones_like(t), 0.5 * t)
    failed = ~ok & (t_next < 0.5**_STEPS)   # reported unconverged, never as converged
    return _State(jnp.where(ok, y, x), jnp.where(start, jnp.inf, jnp.where(ok, fy, f)),
                  jnp.where(ok, new, delta), jnp.where(ok, new_slope, slope), t_next, it + 1,
                  converged | failed, converged)


def _direction_cg(y, h, r, mag, pr, mode, st, labels):
    """The Newton direction by Jacobi-preconditioned conjugate gradients (``_graph.use_cg``), inexact:
    relative residual ``clip(|g|, 1e-5, 1e-2)`` (float32; ``1e-10`` floor in float64).

    Solves ``H x = -(g - P g)`` with ``H`` of :func:`_hessian_from` applied as
    ``W^T (h * (W v)) + P v + lambda v`` (plus the ``gamma`` row and column when
    learnt), never formed. Returns ``(x, g, diag(H), rounding scale, trace(L))``.
    """
    e, n = pr.e, pr.e.num_items
    deg, wt_h, wt_r, scale = _graph.item_sums_many(e, (h, h, r, mag), (h, -h, -r, mag))
    wt_h, sum_h = pr.free * wt_h, pr.free * jnp.sum(h)
    g = _grad_from(y, wt_r, pr.free * jnp.sum(r), mode, st)
    size = _graph.component_sizes(labels, deg.dtype)
    pmean = functools.partial(_graph.component_mean, labels=labels, sizes=size)

    def matvec(u):
        v = u[:n]
        top = _graph.incidence_t(e, h * _graph.incidence(e, v)) + pmean(v) + st.score_prior * v
        if mode != "learn":
            return top
        t = u[n]
        return jnp.concatenate([top - wt_h * t, (-jnp.dot(wt_h, v) + (sum_h + st.gamma_prior) * t)[None]])

    diag = deg + 1 / size + st.score_prior
    if mode == "learn":
        diag = jnp.concatenate([diag, (sum_h + st.gamma_prior)[None]])
    g_c = g.at[:n].add(-pmean(g[:n]))
    # Inexact Newton (Dembo, Eisenstat & Steihaug 1982): a relative CG residual eta = O(|g|) keeps
    # Newton's quadratic rate; far from the optimum a loose solve is as good a step and much cheaper.
    floor = 1e-5 if h.dtype == jnp.float32 else 1e-10
    tol = jnp.clip(jnp.linalg.norm(g_c), floor, 1e-2)
    x, _ = jax.scipy.sparse.linalg.cg(matvec, -g_c, tol=tol, maxiter=n + 1, M=lambda u: u / diag)
    x = x.at[:n].add(-pmean(x[:n]))
    return x, g, diag, scale, jnp.sum(deg)


def _pass_operands(pr, labels, prior):
    """Per-context constants of the loop: component labels, the start's residuals, the score prior and,
    beside a dense Laplacian, the ``[N, N]`` component projector (formed once, not every pass)."""
    # Each edge's mean probability clipped to [0.01, 0.99] (logits within +-4.6): finite with
    # eps = 0, and an edge of one decisive comparison (hard outcomes) does not start the
    # fit at +-14, far out where Newton crawls (measured: 6 steps instead of 100+ on the
    # football results; 1e-3 or a half-win smoothing were slower on soft probabilities).
    pbar = jnp.clip(pr.wp / jnp.where(pr.w > 0, pr.w, 1), 0.01, 0.99)
    r_start = -pr.w * jnp.where(pr.w > 0, jnp.log(pbar) - jnp.log1p(-pbar) + pr.gamma, 0)
    proj = None if _graph.use_cg(pr.e) else _graph.component_projector(labels, pr.w.dtype)
    return pr, labels, r_start, prior, proj


def _newton(c, labels, prior, mode, st, start_kind="least_squares"):
    """Newton's method with backtracking on a batch ``[B]`` of contexts.

    Per context, every pass of the loop evaluates the trial point
    ``y = x + t delta`` once: the objective (Armijo test), and from the same
    ``sigmoid(d)`` the gradient and Hessian, hence the Newton direction from
    ``y`` (used only if ``y`` is accepted; a rejected ``y`` halves ``t``).
    Pass 0 is the start: with the Hessian weights ``w`` and residuals
    ``-w logit(p)`` the same linear solve gives the least-squares fit of
    ``s_i - s_j - gamma`` to the edges' mean logits (one Laplacian solve; soft
    BT matches those logits wherever the graph lets it), which pass 1 accepts
    unconditionally. With ``start_kind="mm"`` (mode ``"off"`` only) the start is
    instead :data:`MM_START_SWEEPS` of Newman's updates (:mod:`jaxrank.scoring._mm`)
    and pass 0 is already a Newton step from there. No nested loop and one copy of the likelihood code keep
    the compiled program small; ``_batching.while_per_context`` keeps per-context
    state (contexts converge independently).
    """
    pr = jax.vmap(functools.partial(_problem, mode=mode, eps=st.eps))(c)
    ops = jax.vmap(_pass_operands)(pr, labels, prior)
    b, n = labels.shape[0], c.num_items + (mode == "learn")
    dt = c.p.dtype
    z = jnp.zeros((b, n), dt)
    zb = jnp.zeros(b, dt)
    x0 = z
    if start_kind == "mm":
        sweeps = lambda p, lab: _mm.newman_sweeps(p.e, p.wp, p.wl, lab, _graph.component_sizes(lab, dt),
                                                  MM_START_SWEEPS)
        x0 = jax.vmap(sweeps)(pr, labels)
    init = _State(x0, jnp.full(b, jnp.inf, dt), z, zb, jnp.ones(b, dt), jnp.zeros(b, jnp.int32),
                  jnp.zeros(b, bool), jnp.zeros(b, bool))
    cont = lambda s: ~s.stop & (s.it <= st.max_iter)
    out = _batching.while_per_context(cont, functools.partial(_pass, mode=mode, st=st, start_kind=start_kind),
                                      ops, init,
                                   compact=COMPACT)
    result = jnp.where(out.converged, RESULTS.successful,
                       jnp.where(out.stop, RESULTS.line_search_failed, RESULTS.max_steps_reached))
    return out.x, jnp.maximum(out.it - 1, 0), out.converged, result.astype(jnp.int32)


MM_START_SWEEPS = 20
"""Newman updates before Newton with ``start_kind="mm"`` (hard Bradley-Terry on large sparse pools).

Measured on 5,000 items, 50,000 hard decisions (``benchmarks/memory_scale.py --bt-vs-poe 5000``):
noisy, LLM-like decisions 9 Newton steps from the least-squares start, 1 after these updates
(0.029 s -> 0.010 s); decisions that all follow one latent order 22 -> 14 steps. More sweeps
cost more than they save: 60 or 150 left the separable pool at 9 Newton steps but took 1.2x and
1.7x as long, and the noisy pool 2x and 4x (a sweep costs about 0.3 ms there)."""


COMPACT = False
"""Finish the slowest contexts of a batch in a compacted sub-batch (``_batching.while_per_context``).

Off: Newton needs few passes (mean 5, at most 9 on the PoE protocol), so the
second compiled loop costs more compilation (about 1-2 s) than it saves per
call (about 0.05 s of 0.25 s on 10,000 contexts)."""


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _argmin(c, labels, prior, st, mode, start_kind):
    return _newton(c, labels, prior, mode, st, start_kind)


def _argmin_fwd(c, labels, prior, st, mode, start_kind):
    out = _newton(c, labels, prior, mode, st, start_kind)
    return out, (c, labels, prior, st, out[0])


def _argmin_bwd(mode, start_kind, res, ct):
    # Implicit function theorem on grad f(x*, c) = 0:  dx* = -(H + P)^{-1} d_c grad f.
    def one(c, labels, prior, x, ctx):
        stc = st._replace(score_prior=prior)
        proj = _graph.component_projector(labels, x.dtype)
        u = _graph.psd_solve(_hessian(x, c, mode, stc, proj), ctx)
        _, vjp = jax.vjp(lambda cc: _grad(x, cc, mode, stc), c)
        return vjp(-u)[0]

    c, labels, prior, st, x = res
    zero = lambda a: (jnp.zeros_like(a) if jnp.issubdtype(a.dtype, jnp.inexact)
                      else np.zeros(a.shape, jax.dtypes.float0))
    return (jax.vmap(one)(c, labels, prior, x, ct[0]), zero(labels), jnp.zeros_like(prior),
            jax.tree.map(zero, st))


_argmin.defvjp(_argmin_fwd, _argmin_bwd)


def _finish(c, labels, x, it, done, result, prior, mode, st):
    n = c.num_items
    st = st._replace(score_prior=prior)
    s, g = (x[:n], x[n]) if mode == "learn" else (x, _fixed_gamma(c, mode, st.eps))
    s = _graph.centre_per_component(jnp.where(c.item_mask, s, 0), labels)
    gn = jnp.max(jnp.abs(_grad(jax.lax.stop_gradient(x), c, mode, st)))
    return SoftBTSolution(s, g, it, done, gn, result)


def _fit_flat(c, mode, st, check=False, start_kind="least_squares"):
    """``(solution, finite)`` for a batch ``[B]``; ``finite[b]``: context ``b``'s ML scores are finite.

    With ``check`` (``eps = 0`` and no score prior), a context whose win graph
    is not strongly connected within its components (``existence.finite_ml``,
    tested before the first Newton step) is fitted with the score prior
    ``existence.AUTO_SCORE_PRIOR`` instead; without it every context is taken
    to be finite (``eps > 0`` or a prior guarantees it).
    """
    labels = jax.vmap(_graph.components)(c)
    prior = jnp.broadcast_to(st.score_prior, labels.shape[:1])
    finite = jnp.ones(labels.shape[:1], bool)
    if check:
        finite = jax.vmap(existence.finite_ml, in_axes=(0, 0, None))(c, labels, st.eps)
        prior = jnp.where(finite, prior, jnp.asarray(existence.AUTO_SCORE_PRIOR, prior.dtype))
    x, it, done, result = _argmin(c, labels, prior, st, mode, start_kind)
    sol = jax.vmap(functools.partial(_finish, mode=mode, st=st))(c, labels, x, it, done, result, prior)
    return sol, finite


CHUNK = 32
"""Contexts are solved in chunks of this many, one after another (``_batching.map_chunks``): a
chunk iterates only as long as its own slowest context needs and stays in cache (measured
1.6x faster than one batch of 10,000 contexts of 16 items; chunks of 128 or 512 were 5-15%
slower than 32)."""


@functools.partial(jax.jit, static_argnames=("mode", "check", "start_kind"))
def _fit(c, st, mode, check=False, start_kind="least_squares"):
    flat, shape = _batching.flatten_batch(c)
    out = _batching.map_chunks(lambda cc: _fit_flat(cc, mode, st, check, start_kind), flat, CHUNK)
    return _batching.unflatten_batch(out, shape)


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
            ``"mm"`` (:data:`MM_START_SWEEPS` of Newman's updates, only without a
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
    sol, finite = _batching.run_single_threaded_lapack(_fit, c, st, solver.mode, check, start,
                                                       num_items=c.num_items)
    if check and not isinstance(finite, jax.core.Tracer):
        existence.warn_if_infinite(c, np.asarray(finite), solver.eps)
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
