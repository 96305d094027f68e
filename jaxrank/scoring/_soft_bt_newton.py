"""The Newton loop that maximises the soft Bradley-Terry likelihood (PoE eq. 3), for a batch of contexts.

Private to the scoring package (:mod:`jaxrank.scoring.poe` shares its loop state
:class:`_State`); :mod:`jaxrank.scoring.soft_bt` holds the public API and the
method's description (its module docstring). The objective, gradient and Hessian
are :mod:`jaxrank.scoring._soft_bt_objective`; the conjugate-gradient direction and
hard BT's measures on large sparse pools :mod:`jaxrank.scoring._soft_bt_sparse`
(read through the module, so a test may set its constants). Here: one Newton pass
with backtracking (:func:`_pass`; dense Cholesky, or conjugate gradients on large
sparse pools), the starts (least squares of the logits, polished), the loop over a
batch of contexts (:func:`_newton`) and its implicit derivative (:func:`_argmin`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _batching, _graph
from jaxrank.scoring import _mm, _soft_bt_sparse as _sparse
# _problem, _diffs, _nll_d are also read here by tests
from jaxrank.scoring._soft_bt_objective import (_diffs, _grad, _grad_from, _grad_p, _hessian, _hessian_from,
                                                _nll_change, _nll_d, _problem, _residual, _split)
from jaxrank.scoring.solver import RESULTS

_STEPS = 30  # a step halved 30 times without sufficient decrease ends the solve, unconverged


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
        x, g, diag, scale, trace, eta = _sparse._direction_cg(y, h, r, mag, pr, mode, st, labels, loose, hot)
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
    residual 0.1) while the gradient is large (``_soft_bt_sparse.SWEEP_NOTE``)."""
    pr, labels, prior, proj = ops
    st = st._replace(score_prior=prior)   # this context's score prior (``_fit_flat``)
    dt = pr.w.dtype
    # keeps the Newton system well conditioned when q saturates (lower with sweeps: SWEEP_FLOOR)
    floor = _sparse.SWEEP_FLOOR if sweep else (1e-6 if dt == jnp.float32 else 1e-12)
    x, f, delta, slope, t, it = state[:6]
    y = x + t * delta
    d = _diffs(y, pr, mode)
    fy = _nll_d(y, d, pr, mode, st)
    eps = jnp.finfo(dt).eps
    ok = (fy <= f + 1e-4 * t * slope + 16 * eps * jnp.abs(f)) | (it == 0)   # pass 0: the start
    if sweep:
        groups = None   # per item in the dense edge space (forced there only by tests), else per linked group
        if not pr.e.dense:
            groups = _graph.merge_labels(pr.e, jnp.abs(d) < _sparse.GROUP_LINK, _sparse.GROUP_SWEEPS)
        y2 = y + _mm.saturation_step(pr.e, pr.wp, pr.wl, y, st.score_prior, groups)
        y2 = y2 - _graph.component_mean(y2, labels, _graph.component_sizes(labels, dt))
        d2 = _diffs(y2, pr, mode)
        # kept only where it lowers the objective beyond the rounding of the change, summed from the
        # edges' changes (_nll_change: f's own rounding, ~eps |f|, hides these moves; within it an
        # inexact group step and the Newton step could undo each other pass after pass)
        change, size = _nll_change(y, d, y2 - y, d2, pr, mode, st)
        use = ok & (change < -16 * eps * size)
        # the objective there from the summed change (SWEEP_OBJECTIVE): no second pass over the edges
        f2 = fy + change if SWEEP_OBJECTIVE else _nll_d(y2, d2, pr, mode, st)
        y, d, fy = jnp.where(use, y2, y), jnp.where(use, d2, d), jnp.where(use, f2, fy)
    r, mag, qq = _residual(d, pr)
    h = pr.w * jnp.maximum(qq, floor)
    n = pr.e.num_items
    new, g, diag, scale, trace, factor, eta = _direction(y, h, r, mag, pr, labels, proj, mode, st, loose=sweep,
                                                         hot=hot)
    if sweep:   # no item moves more than DIRECTION_CLIP log-units along one direction (kept if still descent)
        clipped = jnp.clip(new, -_sparse.DIRECTION_CLIP, _sparse.DIRECTION_CLIP)
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
    ``start_kind="mm"`` (mode ``"off"`` only), ``_soft_bt_sparse.MM_START_SWEEPS`` of
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
                                                  _sparse.MM_START_SWEEPS)
        x0 = _sparse._rank_start(pr, jax.vmap(sweeps)(pr, labels), labels, prior, mode, st)
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
                             hot=b == 1 and start_kind == "mm" and _sparse.HOT_SHARE > 0)
    out = _batching.while_per_context(cont, step, ops, init,
                                      compact=COMPACT)
    result = jnp.where(out.converged, RESULTS.successful,
                       jnp.where(out.stop, RESULTS.line_search_failed, RESULTS.max_steps_reached))
    return out.x, out.it, out.converged, result.astype(jnp.int32)


SWEEP_OBJECTIVE = True
"""With sweeps (:func:`_pass`), the objective at a kept saturation step is ``f(y) + change``, the change summed
from the edges' changes (:func:`_nll_change`, more accurate than ``f`` itself), instead of one more objective over
every edge (issue 33, part e; ``benchmarks/results/memory_scale.notes.md``)."""


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
