"""The soft Bradley-Terry likelihood (PoE eq. 3) and the Newton loop that maximises it, for one context.

Private to the scoring package (:mod:`jaxrank.scoring.poe` shares its loop state
:class:`_State`); :mod:`jaxrank.scoring.soft_bt` holds the public API and the
method's description (its module docstring): the edge-space problem
(:class:`_Problem`), the objective, gradient and Hessian, one Newton pass with
backtracking (:func:`_pass`; dense Cholesky or matrix-free conjugate gradients
on large sparse pools, :func:`_direction_cg`), the loop over a batch of
contexts (:func:`_newton`) and its implicit derivative (:func:`_argmin`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _batching, _graph
from jaxrank.scoring import _mm
from jaxrank.scoring.solver import RESULTS

_STEPS = 30  # a step halved 30 times without sufficient decrease ends the solve, unconverged


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
    # -sum_k [w p log sig(d) + w (1 - p) log sig(-d)] = sum_k [w softplus(-|d|) + (w (1 - p) d if d >= 0 else
    # -w p d)]: every term >= 0, so the sum keeps float32's relative accuracy and the line search's
    # allowance of 16 eps |f| covers its rounding. (The form w softplus(-d) + w (1 - p) d cancels two terms
    # of size w |d| where d < 0: near a nearly separable optimum its rounding, ~1e-6, hid decreases of 1e-8,
    # the full Newton step was rejected pass after pass and the error halved every two passes.)
    f = (jnp.sum(pr.w * jax.nn.softplus(-jnp.abs(d)) + jnp.where(d >= 0, pr.wl * d, -pr.wp * d))
         + 0.5 * st.score_prior * jnp.sum(s**2))
    if mode == "learn":
        f = f + 0.5 * st.gamma_prior * g**2
    return f


def _nll_change(x, d, step, d_new, pr, mode, st):
    """``(f(x + step) - f(x), sum of the magnitudes of its terms)`` from per-edge changes, for edge
    differences ``d`` at ``x`` and ``d_new`` at ``x + step`` (score prior only; ``mode`` ``"off"``).

    ``f`` is ``sum_k w softplus(-d) + (1 - p) w d`` (:func:`_nll_d`); each edge's change is
    ``w [softplus(-d_new) - softplus(-d)] + w (1 - p) (d_new - d)`` with ``d_new - d`` from ``step``
    itself, and ``softplus(u') - softplus(u) = (u' - u) + softplus(-u') - softplus(-u)`` where both
    are positive, so no term subtracts two large numbers: the change of a loosely held item
    (~1e-7) is resolved where ``f`` itself (~1e3) is only known to ~1e-4 in float32.
    """
    dd = _diffs(step, pr, mode)        # linear in x: the exact change of each edge's difference
    u, u_new = -d, -d_new
    both = jnp.minimum(u, u_new) > 0
    sp = jnp.where(both, -dd + jax.nn.softplus(-u_new) - jax.nn.softplus(-u),
                   jax.nn.softplus(u_new) - jax.nn.softplus(u))
    # the slope's coefficient as the gradient has it (:func:`_residual`: ``w (1 - p)`` where ``p > 1/2``,
    # else ``w - w p``), so the change's derivative is exactly the gradient's (w - w p alone is off by
    # its rounding, ~1e-7 per edge, which summed over 10^5 edges outweighed the changes it judges)
    coef = jnp.where(pr.wp > pr.wl, pr.wl, pr.w - pr.wp)
    terms = pr.w * sp + coef * dd
    s, s_new = _split(x, pr, mode)[0], _split(x + step, pr, mode)[0]
    from_prior = 0.5 * st.score_prior * jnp.sum((s_new - s) * (s_new + s))
    return jnp.sum(terms) + from_prior, jnp.sum(jnp.abs(terms)) + jnp.abs(from_prior)


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
    """Per-context state of a Newton loop with backtracking (this module's and :mod:`jaxrank.scoring.poe`'s)."""

    x: jax.Array          # the current (accepted) point
    f: jax.Array          # objective at x (+inf before the start is accepted)
    delta: jax.Array      # search direction from x
    slope: jax.Array      # directional derivative along delta
    t: jax.Array          # step length to try next
    it: jax.Array         # loop passes so far
    stop: jax.Array
    converged: jax.Array
    damped: jax.Array | None = None   # general PoE: the Hessian at x was indefinite and damped (soft BT: None)


def _direction(y, h, r, mag, pr, labels, proj, mode, st, loose=False, hot=False):
    """The Newton direction at ``y`` for edge curvatures ``h`` and residuals ``r``: ``(new, g, diag(H), rounding
    scale, trace(L), factor, eta)``; dense Cholesky (``eta = 0``: solved exactly), or conjugate gradients on large
    sparse pools (:func:`_direction_cg`: no factor, ``eta`` its relative residual target)."""
    n = pr.e.num_items
    if _graph.use_cg(pr.e):
        x, g, diag, scale, trace, eta = _direction_cg(y, h, r, mag, pr, mode, st, labels, loose, hot)
        return x, g, diag, scale, trace, None, eta
    # the terms' magnitudes summed per item too: the scale of each gradient entry's rounding error
    lap, wt_h, wt_r, scale = _graph.laplacian_and_incidence_t(pr.e, h, r, mag)
    g = _grad_from(y, wt_r, pr.free * jnp.sum(r), mode, st)
    if proj is None:
        proj = _graph.component_projector(labels, h.dtype)
    # ``.T`` of an exactly symmetric matrix: the same values, but LAPACK's column-major layout is then a
    # bitcast of the row-major sums (no transposing copy of [N, N] per pass: 0.08 -> 0.0x ms at 337 items).
    hess = _hessian_from(lap, pr.free * wt_h, pr.free * jnp.sum(h), mode, st, proj).T
    # The gradient sums to 0 over every connected component; in float32 it does so only to
    # the rounding of the busiest items, and that residue, solved against the flattest
    # direction of a rarely compared item, kicks it by ~1e-3 every pass: project it out.
    pmean = _graph.component_mean(g[:n], labels, _graph.component_sizes(labels, h.dtype))
    g_c = g.at[:n].add(-pmean)
    factor = _graph.psd_factor(hess)
    return (-_graph.factor_solve(factor, g_c), g, jnp.diagonal(hess), scale, 2 * jnp.sum(h), factor,
            jnp.zeros((), h.dtype))


def _pass(ops, state: _State, mode, st, sweep=False, chord=False, hot=False) -> _State:
    """One pass of Newton's method with backtracking for one context (see :func:`_newton`).

    With ``sweep`` (hard decisions on large sparse pools, ``start_kind="mm"``): an accepted point
    also takes one saturation step per group of linked items (``_mm.saturation_step``), kept where
    it lowers the objective; the Newton system has a per-item damping term and a lower curvature
    floor, its direction is clipped per item, and the conjugate-gradient solves are loose (relative
    residual 0.1) while the gradient is large (:data:`SWEEP_NOTE`)."""
    pr, labels, prior, proj = ops
    st = st._replace(score_prior=prior)   # this context's score prior (``_fit_flat``)
    dt = pr.w.dtype
    # keeps the Newton system well conditioned when q saturates (lower with sweeps: SWEEP_FLOOR)
    floor = SWEEP_FLOOR if sweep else (1e-6 if dt == jnp.float32 else 1e-12)
    x, f, delta, slope, t, it = state[:6]
    y = x + t * delta
    d = _diffs(y, pr, mode)
    fy = _nll_d(y, d, pr, mode, st)
    eps = jnp.finfo(dt).eps
    ok = (fy <= f + 1e-4 * t * slope + 16 * eps * jnp.abs(f)) | (it == 0)   # pass 0: the start
    if sweep:
        groups = None   # per item in the dense edge space (forced there only by tests), else per linked group
        if not pr.e.dense:
            groups = _graph.merge_labels(pr.e, jnp.abs(d) < GROUP_LINK, GROUP_SWEEPS)
        y2 = y + _mm.saturation_step(pr.e, pr.wp, pr.wl, y, st.score_prior, groups)
        y2 = y2 - _graph.component_mean(y2, labels, _graph.component_sizes(labels, dt))
        d2 = _diffs(y2, pr, mode)
        # kept only where it lowers the objective beyond the rounding of the change, summed from the
        # edges' changes (_nll_change: f's own rounding, ~eps |f|, hides these moves; within it an
        # inexact group step and the Newton step could undo each other pass after pass)
        change, size = _nll_change(y, d, y2 - y, d2, pr, mode, st)
        use = ok & (change < -16 * eps * size)
        y, d, fy = jnp.where(use, y2, y), jnp.where(use, d2, d), jnp.where(use, _nll_d(y2, d2, pr, mode, st), fy)
    r, mag, qq = _residual(d, pr)
    h = pr.w * jnp.maximum(qq, floor)
    n = pr.e.num_items
    new, g, diag, scale, trace, factor, eta = _direction(y, h, r, mag, pr, labels, proj, mode, st, loose=sweep,
                                                         hot=hot)
    if sweep:   # no item moves more than DIRECTION_CLIP log-units along one direction (kept if still descent)
        clipped = jnp.clip(new, -DIRECTION_CLIP, DIRECTION_CLIP)
        new = jnp.where(jnp.dot(g, clipped) < 0, clipped, new)
    new_slope = jnp.dot(g, new)
    # Fall back to a diagonally scaled gradient step if the Newton direction is not a
    # finite descent direction (rounding in a nearly singular system).
    bad = ~(jnp.all(jnp.isfinite(new)) & (new_slope < 0))
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
    # it saves the confirming pass, whose step quadratic convergence makes far smaller still. The estimate
    # needs ``new`` itself to be accurate: a CG direction solved only to a relative residual ``eta``
    # (inexact Newton) may miss the system's slowest modes by far more (a near-chain of 560 items, eta 5.5e-3:
    # |new| 1.9e-3 where the exact step is 1.0e-2, and the fit stopped 2.5e-3 off), so it is trusted only
    # where the solve's inexactness is below the observed contraction, ``eta <= theta`` (Dembo, Eisenstat &
    # Steihaug 1982: the error contracts by ``O(eta) + O(|e|)``); otherwise the next pass confirms.
    step, last = jnp.max(jnp.abs(new), initial=0.0), jnp.max(jnp.abs(delta), initial=0.0)
    predicted = ((it >= 1) & (t == 1) & ~bad & (2 * step <= last) & (step * step <= st.tol * last)
                 & (eta * last <= step))
    if sweep:   # where the sweep moved y after the last step, the contraction estimate does not apply
        predicted = predicted & ~use
    small = (step < st.tol) | predicted | (-new_slope <= st.tol**2 * curv)
    sc, gm = _split(y, pr, mode)
    scale = scale + st.score_prior * jnp.abs(sc)
    if mode == "learn":
        scale = jnp.concatenate([scale, (jnp.sum(mag) + st.gamma_prior * jnp.abs(gm))[None]])
    rounding = jnp.all(jnp.abs(g) <= 64 * jnp.finfo(dt).eps * scale)    # every entry at its rounding level
    converged = ok & (small | rounding)
    # Converged by rounding alone (every gradient entry at float32's noise, the step not small): a very
    # flat mode can still be far off (a near-chain of 560 items with a learnt bias: 2.5e-3, its gradient
    # 1e-5), and the Newton step from y, computed anyway, is what resolves it: it is taken as a small one is.
    take = converged & ~bad
    if chord:
        # Where y + new is predicted close but not yet within tol, a chord step there with this pass's
        # factor (no Hessian assembled or factorised) often confirms it, saving the confirming pass.
        # Newton's quadratic rate predicts the chord step's length as |new|^3 / |delta|^2: try it where that
        # would meet the contraction test below with CHORD_MARGIN to spare
        pred = step**3 / jnp.maximum(last, jnp.finfo(dt).tiny) ** 2
        near = (ok & ~converged & ~bad & (it >= 1) & (t == 1) & (CHORD_MARGIN * pred <= step)
                & (CHORD_MARGIN * pred * pred <= st.tol * step))
        corr = jax.lax.cond(near, lambda: _chord_step(y + new, factor, pr, labels, mode, st),
                            lambda: jnp.zeros_like(new))
        c_step = jnp.max(jnp.abs(corr), initial=0.0)
        confirmed = near & jnp.all(jnp.isfinite(corr)) & (
            (c_step < st.tol) | ((2 * c_step <= step) & (c_step * c_step <= st.tol * step)))
        converged = converged | confirmed
        y = y + jnp.where(confirmed, new + corr, 0)
    y = y + jnp.where(take, new, 0)
    t_next = jnp.where(ok, jnp.ones_like(t), 0.5 * t)
    failed = ~ok & (t_next < 0.5**_STEPS)   # reported unconverged, never as converged
    return _State(jnp.where(ok, y, x), jnp.where(ok, fy, f),
                  jnp.where(ok, new, delta), jnp.where(ok, new_slope, slope), t_next, it + 1,
                  converged | failed, converged)


def _chord_step(y, factor, pr, labels, mode, st):
    """The chord (simplified Newton) step at ``y``: ``-H0^{-1} (g(y) - P g(y))`` with the Cholesky ``factor`` of
    an earlier Hessian ``H0`` (dense path, :data:`CHORD_MARGIN`)."""
    n = pr.e.num_items
    g = _grad_p(y, pr, mode, st)
    g_c = g.at[:n].add(-_graph.component_mean(g[:n], labels, _graph.component_sizes(labels, g.dtype)))
    return -_graph.factor_solve(factor, g_c)


def _direction_cg(y, h, r, mag, pr, mode, st, labels, loose=False, hot=False):
    """The Newton direction by Jacobi-preconditioned conjugate gradients (``_graph.use_cg``), inexact:
    relative residual ``clip(|g|, max(1e-5, tol), 1e-2)`` (float32; ``max(1e-10, tol)`` floor in float64).

    Solves ``H x = -(g - P g)`` with ``H`` of :func:`_hessian_from` applied as
    ``W^T (h * (W v)) + P v + lambda v`` (plus the ``gamma`` row and column when
    learnt), never formed. Returns ``(x, g, diag(H), rounding scale, trace(L), eta)``, ``eta`` the relative
    residual the solve was asked for.
    """
    e, n = pr.e, pr.e.num_items
    deg, wt_h, wt_r, scale = _graph.item_sums_many(e, (h, h, r, mag), (h, -h, -r, mag))
    wt_h, sum_h = pr.free * wt_h, pr.free * jnp.sum(h)
    g = _grad_from(y, wt_r, pr.free * jnp.sum(r), mode, st)
    size = _graph.component_sizes(labels, deg.dtype)
    pmean = functools.partial(_graph.component_mean, labels=labels, sizes=size)

    def matvec(u, e=e, h=h):
        v = u[:n]
        top = _graph.incidence_t(e, h * _graph.incidence(e, v)) + pmean(v) + st.score_prior * v
        if damp is not None:
            top = top + damp * v
        if mode != "learn":
            return top
        t = u[n]
        return jnp.concatenate([top - wt_h * t, (-jnp.dot(wt_h, v) + (sum_h + st.gamma_prior) * t)[None]])

    diag = deg + 1 / size + st.score_prior
    g_c = g.at[:n].add(-pmean(g[:n]))
    if loose:   # per-item damping: no item's Newton move much beyond ITEM_TRUST log-units (SWEEP_NOTE)
        damp = jnp.maximum(jnp.abs(g_c[:n]) / ITEM_TRUST - diag, 0)
        diag = diag + damp
    else:
        damp = None
    if mode == "learn":
        diag = jnp.concatenate([diag, (sum_h + st.gamma_prior)[None]])
    # Inexact Newton (Dembo, Eisenstat & Steihaug 1982): a relative CG residual eta = O(|g|) keeps
    # Newton's quadratic rate; far from the optimum a loose solve is as good a step and much cheaper.
    # The floor: float32's (1e-5) or float64's (1e-10) reach, or the solver's own tol where that is
    # looser (a step solved to relative accuracy tol is exact enough for a loop that stops at
    # steps below tol): hard BT (tol 1e-3) on 5,000 separable items, 507 -> 429 CG iterations.
    floor = jnp.maximum(1e-5 if h.dtype == jnp.float32 else 1e-10, st.tol)
    if loose:   # hard BT on a large sparse pool: its last solves to LOOSE_FLOOR (HOT_NOTE)
        floor = jnp.maximum(floor, LOOSE_FLOOR)
    gn = jnp.linalg.norm(g_c)
    tol = jnp.clip(gn, floor, 1e-2)
    if loose:   # far from the optimum (|g| > 1e-2) a relative residual of 0.1 is step enough (SWEEP_NOTE)
        tol = jnp.where(gn > 1e-2, 0.1, tol)
    # at most one iteration per item in a comparison, plus one (traced: items padded to a bucket, or in no
    # comparison, keep a zero right-hand side and never need one; a padded pool iterates as its own size)
    cg = lambda mv: jax.scipy.sparse.linalg.cg(mv, -g_c, tol=tol, maxiter=jnp.sum(deg > 0) + 1,
                                                M=lambda u: u / diag)[0]
    if hot and not e.dense and mode != "learn":
        # the CG operator over the edges that carry curvature only, where they are few (HOT_NOTE)
        k = max(1, int(HOT_SHARE * e.i.shape[0]))
        on = h > HOT_RELATIVE * jnp.minimum(deg[e.i], deg[e.j])
        count = jnp.sum(on)

        def on_hot():
            idx = jnp.nonzero(on, size=k, fill_value=0)[0]
            h_hot = jnp.where(jnp.arange(k) < count, h[idx], 0)
            return cg(functools.partial(matvec, e=_graph.Edges(e.i[idx], e.j[idx], n, False), h=h_hot))

        x = jax.lax.cond(count <= k, on_hot, lambda: cg(matvec))
    else:
        x = cg(matvec)
    x = x.at[:n].add(-pmean(x[:n]))
    return x, g, diag, scale, jnp.sum(deg), tol


def _pass_operands(pr, labels, prior):
    """Per-context constants of the loop: the problem, component labels and the score prior.

    (The dense path's ``[N, N]`` component projector is formed inside each pass from the labels:
    it fuses into the Hessian's assembly, where a stored one was one more ``[N, N]`` read per pass.)"""
    return pr, labels, prior, None


def _logit_residuals(pr):
    """``-w (logit(clip(p, 0.01, 0.99)) + gamma)`` per edge: the residuals at 0 of the start's least-squares fit."""
    pbar = jnp.clip(pr.wp / jnp.where(pr.w > 0, pr.w, 1), 0.01, 0.99)
    return -pr.w * jnp.where(pr.w > 0, jnp.log(pbar) - jnp.log1p(-pbar) + pr.gamma, 0)


def _least_squares_start(ops, mode, st):
    """The least-squares fit of ``s_i - s_j - gamma`` to the edges' mean logits, then
    :data:`POLISH_SWEEPS` of Newman's updates (one context; :func:`_newton`).

    The fit is one Laplacian solve with the Hessian weights ``w`` and residuals
    ``-w logit(p)`` (soft BT matches those logits wherever the graph lets it).
    Each edge's mean probability is clipped to ``[0.01, 0.99]`` (logits within
    ``+-4.6``): finite with ``eps = 0``, and an edge of one decisive comparison
    (hard outcomes) does not start the fit at ``+-14``, far out where Newton
    crawls (measured: 6 steps instead of 100+ on the football results; 1e-3 or
    a half-win smoothing were slower on soft probabilities).
    """
    pr, labels, prior, proj = ops
    st = st._replace(score_prior=prior)
    r = _logit_residuals(pr)
    n = pr.e.num_items
    x0 = jnp.zeros(n + (mode == "learn"), pr.w.dtype)
    x = _direction(x0, pr.w, r, jnp.abs(r), pr, labels, proj, mode, st)[0]
    s, g = _split(x, pr, mode)
    s = _mm.newman_polish(pr.e, pr.wp, pr.wl, s, pr.free * g, prior, labels, POLISH_SWEEPS, POLISH_CAP)
    return jnp.concatenate([s, x[n:]])


def _ridge_start(pr, mode, st):
    """The least-squares fit of the logits of :func:`_least_squares_start` without component labels or score
    prior, so it can run before they are known (``soft_bt.solve`` overlaps it with the host's existence
    check): ``(L(w) + RIDGE_SCALE mean(w) I) x = W^T (w logit p)`` (and the ``gamma`` row when learnt).

    Dense Newton systems only. The ridge only shrinks the fit's slowest modes by ``RIDGE_SCALE`` relative to
    an item's typical weight and stands in for the projector on per-component constants, which the start
    then removes (:func:`_polished_start`)."""
    r = _logit_residuals(pr)
    n = pr.e.num_items
    lap, wt_h, wt_r, _ = _graph.laplacian_and_incidence_t(pr.e, pr.w, r, jnp.abs(r))
    st0 = st._replace(score_prior=jnp.zeros_like(st.score_prior))
    g = _grad_from(jnp.zeros(n + (mode == "learn"), pr.w.dtype), wt_r, pr.free * jnp.sum(r), mode, st0)
    ridge = RIDGE_SCALE * jnp.maximum(2 * jnp.sum(pr.w) / n, jnp.finfo(pr.w.dtype).tiny)
    hess = _hessian_from(lap, pr.free * wt_h, pr.free * jnp.sum(pr.w), mode, st0, ridge * jnp.eye(n, dtype=lap.dtype))
    return -_graph.psd_solve(hess.T, g)


RIDGE_SCALE = 1e-4
"""The ridge of :func:`_ridge_start` relative to the mean item weight ``2 sum(w) / N``."""


def _polished_start(ops, x, mode, st):
    """A start ``x`` from :func:`_ridge_start`: centred per connected component, then :data:`POLISH_SWEEPS` of
    Newman's updates (as :func:`_least_squares_start`)."""
    pr, labels, prior, _ = ops
    n = pr.e.num_items
    s, g = _split(x, pr, mode)
    s = _graph.centre_per_component(s, labels)
    s = _mm.newman_polish(pr.e, pr.wp, pr.wl, s, pr.free * g, prior, labels, POLISH_SWEEPS, POLISH_CAP)
    return jnp.concatenate([s, x[n:]])


POLISH_SWEEPS = 2
"""Newman updates after the least-squares start, each item's log-step clipped to ``+-POLISH_CAP``.

The least-squares fit of the logits spreads the scores too far where edges carry few comparisons
(on the football results its scores are about 4/3 of the optimum's); a few updates, each one pass
over the comparisons, pull every item towards its optimum given the others and save about one
Newton step (one factorisation) in most problems. Offline in float64, Newton steps summed over 5
random draws each, plain start -> 2 -> 4 updates: 16 items, all pairs, soft 15 -> 10 -> 10, noisy
LLM-like 26 -> 18 -> 11; 8 items LLM-like 21 -> 16 -> 12; 300 sparse items soft 13 -> 10 -> 10,
LLM-like 40 -> 26 -> 20; football 5 -> 4 -> 4 on all 337 teams and on the strongly connected 316
(a Newton step there is a 337 x 337 Cholesky, ~0.4 ms; an update ~0.05 ms). In jaxrank (float32,
``benchmarks`` A/B in one process): 10,000 contexts of 16 items with 48 LLM-like comparisons each,
PoE-BT 162 -> 106 ms (2 updates) -> 103 ms (4), mean Newton steps 4.2 -> 2.0 -> 1.5; 1,000 sparse
items with noisy probabilities 1.8 -> 1.6 -> 1.4 ms; 8 updates were slower (110 ms, 1.7 ms). Kept at 2:
with 4, a 560-item near-chain (comparisons only between neighbours at most 3 apart) with a learnt
bias stopped one step early at float32's rounding level with its slowest mode 1.7e-3 off the float64
optimum (``tests/test_scorers.py``); with 2 it ends 1.2e-6 off."""

POLISH_CAP = 2.0
"""Largest log-step of one item in :data:`POLISH_SWEEPS`: an item that never lost (or never won) has an
infinite Newman step under a score prior alone. A cap of 2 kept football's 337 teams at 4 Newton
steps (4 and uncapped: 5 steps or divergence there); 0.5 and 1 did worse on the noisy problems."""


def _newton(c, labels, prior, mode, st, start_kind="least_squares", start_x=None):
    """Newton's method with backtracking on a batch ``[B]`` of contexts.

    Per context, every pass of the loop evaluates the trial point
    ``y = x + t delta`` once: the objective (Armijo test), and from the same
    ``sigmoid(d)`` the gradient and Hessian, hence the Newton direction from
    ``y`` (used only if ``y`` is accepted; a rejected ``y`` halves ``t``).
    The start, before the loop, is the least-squares fit of the logits polished by
    :data:`POLISH_SWEEPS` of Newman's updates (:func:`_least_squares_start`) or, with
    ``start_kind="mm"`` (mode ``"off"`` only), :data:`MM_START_SWEEPS` of
    Newman's updates from 0 (:mod:`jaxrank.scoring._mm`); pass 0 accepts it
    unconditionally and takes the first Newton direction there. No nested loop
    and one copy of the likelihood code in the loop keep the compiled program
    small; ``_batching.while_per_context`` keeps per-context state (contexts
    converge independently).
    """
    pr = jax.vmap(functools.partial(_problem, mode=mode, eps=st.eps))(c)
    ops = jax.vmap(_pass_operands)(pr, labels, prior)
    b, n = labels.shape[0], c.num_items + (mode == "learn")
    dt = c.p.dtype
    z = jnp.zeros((b, n), dt)
    zb = jnp.zeros(b, dt)
    if start_x is not None:       # the label-free least-squares fit, computed earlier (_ridge_start)
        x0 = jax.vmap(functools.partial(_polished_start, mode=mode, st=st))(ops, start_x)
    elif start_kind == "mm":
        sweeps = lambda p, lab: _mm.newman_sweeps(p.e, p.wp, p.wl, lab, _graph.component_sizes(lab, dt),
                                                  MM_START_SWEEPS)
        x0 = _rank_start(pr, jax.vmap(sweeps)(pr, labels), labels, prior, mode, st)
    else:
        x0 = jax.vmap(functools.partial(_least_squares_start, mode=mode, st=st))(ops)
    init = _State(x0, jnp.full(b, jnp.inf, dt), z, zb, jnp.ones(b, dt), jnp.zeros(b, jnp.int32),
                  jnp.zeros(b, bool), jnp.zeros(b, bool))
    cont = lambda s: ~s.stop & (s.it < st.max_iter)       # at most max_iter passes (Newton directions)
    # chord steps only for one context (its loop is not vmapped: ``_batching.while_per_context``) with dense
    # Newton systems; under vmap both branches of their ``lax.cond`` would run in every pass
    chord = (b == 1 and start_kind != "mm" and c.num_items >= CHORD_MIN_ITEMS
             and not _graph.sizes_use_cg(c.num_items, c.i.shape[-1]))
    # the hot-edge CG operator only for one context (its lax.cond runs one branch: HOT_NOTE)
    step = functools.partial(_pass, mode=mode, st=st, sweep=start_kind == "mm", chord=chord,
                             hot=b == 1 and start_kind == "mm" and HOT_SHARE > 0)
    out = _batching.while_per_context(cont, step, ops, init,
                                      compact=COMPACT)
    result = jnp.where(out.converged, RESULTS.successful,
                       jnp.where(out.stop, RESULTS.line_search_failed, RESULTS.max_steps_reached))
    return out.x, out.it, out.converged, result.astype(jnp.int32)


def _rank_scaled(pr, s, labels, prior):
    """``alpha_c u``: the within-component ranks ``u`` of ``s`` (centred), scaled per component ``c`` by the
    ``alpha_c`` that minimises the objective along ``u`` (one context; :func:`_rank_start`).

    ``f(alpha u)`` is convex in ``alpha``; its slope ``sum_k r_k(alpha) (u_i - u_j) + lambda alpha |u|^2``
    (``r`` the edge residuals, :func:`_residual`) is bisected in ``log alpha`` (:data:`RANK_BISECTIONS`),
    between ``1e-2`` and ``1e4`` log-units per rank over the component's size.
    """
    n, dt = pr.e.num_items, s.dtype
    order = jnp.lexsort((s, labels))               # by component, then by score
    pos = jnp.arange(n)
    lab = labels[order]
    first = jax.ops.segment_min(pos, lab, n)[lab]   # where each component's run starts
    sizes = _graph.component_sizes(labels, dt)
    u = jnp.zeros(n, dt).at[order].set((pos - first).astype(dt))
    u = u - _graph.component_mean(u, labels, sizes)
    du = _graph.incidence(pr.e, u)
    uu = jax.ops.segment_sum(u * u, labels, n)

    def slope(alpha):   # per component label
        r = _residual(_graph.incidence(pr.e, alpha[labels] * u), pr)[0]
        return jax.ops.segment_sum(_graph.item_sums(pr.e, r * du, jnp.zeros_like(r)), labels, n) + prior * alpha * uu

    def body(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        up = slope(jnp.exp(mid)) > 0
        return jnp.where(up, lo, mid), jnp.where(up, mid, hi)

    unit = -jnp.log(jnp.maximum(sizes, 1))
    lo, hi = jax.lax.fori_loop(0, RANK_BISECTIONS, body, (unit + jnp.log(1e-2), unit + jnp.log(1e4)))
    return jnp.exp(0.5 * (lo + hi))[labels] * u


def _rank_start(pr, x, labels, prior, mode, st):
    """The start of hard BT on a large sparse pool (``start_kind="mm"``): Newman's updates ``x`` ``[B, n]``,
    or where their order is nearly consistent with the decisions (misordered weight
    ``sum_k [d_k > 0] w_k (1 - p_k) + [d_k <= 0] w_k p_k`` below :data:`RANK_GATE` of ``sum_k w_k``) their
    rank-scaled form (:func:`_rank_scaled`) polished by :data:`RANK_POLISH` Newman updates, where the
    rank-scaled form has the lower objective. Computed only when some context of the batch passes the gate
    (``lax.cond``); see :data:`RANK_NOTE`."""
    def misordered(p, xx):
        d = _graph.incidence(p.e, xx)
        return jnp.sum(jnp.where(d > 0, p.wl, p.wp)) / jnp.maximum(jnp.sum(p.w), jnp.finfo(p.w.dtype).tiny)

    gate = jax.vmap(misordered)(pr, x) < RANK_GATE

    def ranked():
        y = jax.vmap(_rank_scaled)(pr, x, labels, prior)
        f = jax.vmap(lambda p, xx, pri: _nll_p(xx, p, mode, st._replace(score_prior=pri)))
        better = gate & (f(pr, y, prior) < f(pr, x, prior))
        z = jax.vmap(lambda p, yy, lab, pri: _mm.newman_polish(p.e, p.wp, p.wl, yy, 0.0, pri, lab, RANK_POLISH,
                                                               jnp.inf))(pr, y, labels, prior)
        return jnp.where(better[:, None], z, x)

    return jax.lax.cond(jnp.any(gate), ranked, lambda: x)


RANK_GATE = 0.02
"""Largest misordered share of the decisions' weight at Newman's start for which :func:`_rank_start` tries the
rank-scaled start (separable pool of 5,000 items: 7e-4; the noisy LLM-like pool on the same pairs: 0.22)."""

RANK_BISECTIONS = 12
"""Bisections of :func:`_rank_scaled`'s ``log alpha`` (bracket ``log 1e6`` wide: ``alpha`` to 0.3%)."""

RANK_POLISH = 20
"""Newman updates (uncapped) after the rank-scaled start (:data:`RANK_NOTE`)."""

RANK_NOTE = None
"""Why hard BT on a nearly separable pool starts from ranks (issue 33).

With every decision following one order, the fixed point is set by the ``1/(N-1)`` prior alone and the
scores spread nearly linearly in rank (5,000 items: over 143 log-units). Newman's 20 updates from 0 reach
only about half that spread (max error 44 log-units), and the clipped Newton directions
(:data:`DIRECTION_CLIP`) then close it 8 units a step: steps 1-5 of the 14. The ranks of that start,
scaled by the ``alpha`` that minimises the objective along them, and 20 more Newman updates leave a max error
of 10.5 (458 items off by more than 1): 10 Newton steps (``benchmarks/memory_scale.py --bt-vs-poe 5000``).
Tried and worse on the same pool: the scaled ranks alone (15 steps: some items start far off locally) or
with 5 or 10 updates (11 steps); the best single scale of Newman's start itself (max error 22); the
rank-scaled start on the noisy pool (objective 23,730 against Newman's 23,078: the gate keeps Newman's)."""


MM_START_SWEEPS = 20
"""Newman updates before Newton with ``start_kind="mm"`` (hard Bradley-Terry on large sparse pools).

Measured on 5,000 items, 50,000 hard decisions (``benchmarks/memory_scale.py --bt-vs-poe 5000``):
noisy, LLM-like decisions 9 Newton steps from the least-squares start, 1 after these updates
(0.029 s -> 0.010 s); decisions that all follow one latent order 22 -> 14 steps. More sweeps
cost more than they save: 60 or 150 left the separable pool at 9 Newton steps but took 1.2x and
1.7x as long, and the noisy pool 2x and 4x (a sweep costs about 0.3 ms there)."""


SWEEP_NOTE = None
"""Hard Bradley-Terry on a large sparse pool (``start_kind="mm"``, :func:`_pass` with ``sweep``).

Decisions that all follow one order spread the scores over 100+ log-units: most comparisons are
saturated, and whole groups of items are held only by the exponential tails of comparisons 15-20
log-units away, where the objective changes by less than its float32 rounding. Four measures:

* after every accepted Newton step, one saturation step (``_mm.saturation_step``) per group of
  items linked by comparisons with ``|d| < GROUP_LINK`` (``GROUP_SWEEPS`` sweeps of label
  propagation, ``_graph.merge_labels``): the exact root of Newman's equation for the group's
  translation wherever its outside comparisons are saturated, kept only where the objective,
  summed from the edges' changes (:func:`_nll_change`), drops beyond its rounding;
* a per-item Levenberg-Marquardt term ``mu_n = max(|g_n| / ITEM_TRUST - H_nn, 0)`` in the CG system
  (``H + diag(mu)`` is still positive definite, so the step is a descent direction; ``mu`` vanishes
  with the gradient, leaving Newton's quadratic convergence), and the direction clipped to
  ``+-DIRECTION_CLIP`` per item where it stays a descent direction: a group whose curvature is
  nearly 0 otherwise asked for moves of hundreds of log-units, each costing several halvings;
* a curvature floor ``SWEEP_FLOOR`` (1e-8) instead of 1e-6: the latter overstated a loosely held
  group's curvature ~10x, so Newton moved it a tenth of the way per step;
* loose CG solves (relative residual 0.1 while ``|g| > 1e-2``).

Measured on ``benchmarks/memory_scale.py``'s separable pools (R = 10 N, steady state, load ~1):
before (per-item Newton steps on ``log A_n - log B_n``, summed as sigmoids, floor 1e-6), 5,000 items
8 steps and 20,000, 50,000 and 100,000 items unconverged after 100 steps (an item sent from -4 to
-5,488 by a Newton step on a flat ``log A_n - log B_n``, then pulled back ~50 a step); after, 14, 20,
25 and 35 steps, 0.07, 0.43, 1.3 and 4.4 s. Tried and worse: 2 or 6 label sweeps, link 10 or 18,
floor 1e-6, 1e-10 or 1e-14 (CG far slower), clip 4, 6, 16 or 32, no per-item term, and the Armijo
test on the summed changes (rejects Newton steps whose slope is below the gradient's rounding)."""

SWEEP_FLOOR = 1e-8
"""Curvature floor ``w max(q (1 - q), SWEEP_FLOOR)`` of the Newton system with sweeps (:data:`SWEEP_NOTE`)."""

GROUP_LINK = 8.0
"""Comparisons with ``|s_i - s_j| < GROUP_LINK`` link items into one group of the saturation step.

14 with Newman's start alone (:data:`SWEEP_NOTE`); from the rank-scaled start (:data:`RANK_NOTE`) 8 is
better: separable pools of 5,000 items 10 -> 5 Newton steps, 20,000 items 13 -> 10 (6: 6 steps, 7: 5,
10: 8, 12: 10 at 5,000 items)."""

GROUP_SWEEPS = 3
"""Label-propagation sweeps that form the groups (a larger component is split into several groups)."""

ITEM_TRUST = 8.0
"""Scale of the per-item Levenberg-Marquardt term of the Newton system with sweeps (:data:`SWEEP_NOTE`)."""

DIRECTION_CLIP = 8.0
"""Largest move of one item along a Newton direction with sweeps, where clipping keeps it a descent direction."""


HOT_NOTE = None
"""The CG solves of hard BT on one large sparse context (issue 33: hard BT within 2x of PoE-BT).

On a nearly separable pool most comparisons are saturated: at the 5,000-item separable pool's optimum 77% of the
edges carry a curvature ``h_k`` below ``1e-3`` of both their items' curvature ``sum_k h_k`` (20,000 items: 81%).
Each CG iteration is one gather and one scatter-add over the edges, so the Newton system's operator keeps only the
others (``h_k > HOT_RELATIVE min(deg_i, deg_j)``), compacted to a static ``HOT_SHARE`` of the edges
(``jnp.nonzero(size=...)``), where they fit; otherwise, and under ``vmap`` (batches: ``lax.cond`` would run both
branches), every edge. The dropped curvature is below ``HOT_RELATIVE`` of an item's per edge, so the direction
is a slightly perturbed Newton direction (the gradient, hence the fixed point, stays exact); the relative
threshold matters: an absolute one (``h_k > 1e-7 w_k``) dropped every edge of the items held only by the tails of
far-away comparisons, and the 20,000-item separable pool took 88 Newton steps instead of 10.
The tight solves of such a fit stop at relative residual ``LOOSE_FLOOR`` (1e-2) instead of ``tol`` (1e-3):
Jacobi-PCG needed 52 and 54 iterations for the last two Newton steps, 42 and 40 at 1e-2; the steps (5 and 10 on
5,000 and 20,000 separable items) and the float64 gradient at the result (1.1e-6, 1.6e-6) are unchanged.

Profiled (``benchmarks/memory_scale.py --bt-vs-poe 5000``, separable): Jacobi-PCG iterations per Newton step
14, 15, 16, 52, 54; about 0.3 ms each (one matvec 0.16 ms on an idle core); the start (20 Newman updates, the
rank scale's 12 bisections and 20 polish updates) about 20-27 ms; PoE-BT's whole fit 9-14 ms. The Jacobi-scaled
Hessian at the optimum: no isolated small eigenvalues, a continuum from 0.03 (0.017 and the constant mode below
it), with eigenvectors localised on items at the two ends of the ranking, not smooth in rank, so an additive
two-level preconditioner over 64 blocks of consecutive ranks (Galerkin coarse system, Cholesky per pass) was worse
(loose solves 14 -> 20 iterations, tight 52, 54 -> 56, 65, 54 and one more Newton step); not kept."""

HOT_SHARE = 0.3
"""Static share of the edges the compacted CG operator holds (:data:`HOT_NOTE`); 0 turns it off."""

HOT_RELATIVE = 1e-3
"""An edge stays in the CG operator where ``h_k > HOT_RELATIVE min(deg_i, deg_j)`` (:data:`HOT_NOTE`)."""

LOOSE_FLOOR = 1e-2
"""Tightest relative CG residual of hard BT's Newton solves on large sparse pools (:data:`HOT_NOTE`)."""


CHORD_MARGIN = 4.0
"""A single context's dense Newton pass also takes a chord step from ``y + new`` with the factor it
has just computed (no second Hessian assembled or factorised) where Newton's quadratic rate predicts
that step's length, ``|new|^3 / |delta|^2`` (max-norms of this direction and the last step), to pass
the stopping rule's contraction test (``2 |chord| <= |new|`` and ``|chord|^2 <= tol |new|``) with this
factor to spare. If the chord step then passes the test (or is below ``tol``), the solve stops at
``y + new + chord``: one gradient and two triangular solves instead of the last, confirming pass.
On all 337 football teams (``benchmarks/football_bt.py``) 4 passes -> 3, 2.70 -> 2.43 ms for the
compiled fit; the scores move by at most 4e-6."""

CHORD_MIN_ITEMS = 128
"""Chord steps (:data:`CHORD_MARGIN`) only from this many items: their branch costs about 0.2 s more
compilation of a single context's program (measured on 50 items: first call 1.33 -> 1.51 s), repaid
only where a factorisation is dear (337 items: 0.27 ms a call; 50 items: 0.025 ms)."""

COMPACT = False
"""Finish the slowest contexts of a batch in a compacted sub-batch (``_batching.while_per_context``).

Off: Newton needs few passes (mean 5, at most 9 on the PoE protocol), so the
second compiled loop costs more compilation (about 1-2 s) than it saves per
call (about 0.05 s of 0.25 s on 10,000 contexts)."""


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _argmin(c, labels, prior, st, mode, start_kind, start_x=None):
    return _newton(c, labels, prior, mode, st, start_kind, start_x)


def _argmin_fwd(c, labels, prior, st, mode, start_kind, start_x=None):
    out = _newton(c, labels, prior, mode, st, start_kind, start_x)
    return out, (c, labels, prior, st, out[0], start_x)


def _argmin_bwd(mode, start_kind, res, ct):
    # Implicit function theorem on grad f(x*, c) = 0:  dx* = -(H + P)^{-1} d_c grad f.
    def one(c, labels, prior, x, ctx):
        stc = st._replace(score_prior=prior)
        proj = _graph.component_projector(labels, x.dtype)
        u = _graph.psd_solve(_hessian(x, c, mode, stc, proj), ctx)
        _, vjp = jax.vjp(lambda cc: _grad(x, cc, mode, stc), c)
        return vjp(-u)[0]

    c, labels, prior, st, x, start_x = res
    zero = lambda a: (jnp.zeros_like(a) if jnp.issubdtype(a.dtype, jnp.inexact)
                      else np.zeros(a.shape, jax.dtypes.float0))
    # the start does not move the optimum: no cotangent for it
    return (jax.vmap(one)(c, labels, prior, x, ct[0]), zero(labels), jnp.zeros_like(prior),
            jax.tree.map(zero, st), None if start_x is None else jnp.zeros_like(start_x))


_argmin.defvjp(_argmin_fwd, _argmin_bwd)
