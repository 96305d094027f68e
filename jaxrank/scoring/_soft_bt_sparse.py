"""Hard Bradley-Terry on large sparse pools: the matrix-free Newton direction and the measures for separable pools.

Private to the scoring package; used by the Newton loop (:mod:`jaxrank.scoring._soft_bt_newton`). The Newton
direction by Jacobi-preconditioned conjugate gradients (:func:`_direction_cg`, every soft-BT fit on a large
sparse pool, ``_graph.use_cg``), with hard BT's compacted operator over the edges that carry curvature
(:data:`HOT_NOTE`); hard BT's start (``start_kind="mm"``: :data:`MM_START_SWEEPS` Newman updates, then the
rank-scaled start of :func:`_rank_start`, :data:`RANK_NOTE`) and the settings of its saturation sweeps
(:data:`SWEEP_NOTE`), which :func:`jaxrank.scoring._soft_bt_newton._pass` reads from here (issue 33).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrank import _graph
from jaxrank.scoring import _mm
from jaxrank.scoring._soft_bt_objective import _grad_from, _nll_p, _residual


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

    def matvec(u, e=e, h=h, pmean=pmean):
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
        simple, big = _one_component(size)

        def on_hot():
            idx = _first_true(on, k)
            valid = jnp.arange(k) < count
            h_hot = jnp.where(valid, h[idx], 0)
            # the unused slots: self-pairs of weight 0 spread over the items, not k - count edges onto one item
            # (bradley_terry.PAD_SPREAD_NOTE)
            spread = (jnp.arange(k) % n).astype(e.i.dtype)
            hot_e = _graph.Edges(jnp.where(valid, e.i[idx], spread), jnp.where(valid, e.j[idx], spread), n, False)
            masked = functools.partial(_masked_mean, big=big)
            return cg(functools.partial(matvec, e=hot_e, h=h_hot, pmean=masked if MASKED_MEAN else pmean))

        fits = (count <= k) & simple if MASKED_MEAN else count <= k
        x = jax.lax.cond(fits, on_hot, lambda: cg(matvec))
    else:
        x = cg(matvec)
    x = x.at[:n].add(-pmean(x[:n]))
    return x, g, diag, scale, jnp.sum(deg), tol


def _first_true(on, k):
    """``[k]`` indices of the first ``k`` true entries of ``on``, ascending, 0 after them: ``jnp.nonzero(on, size=k,
    fill_value=0)[0]`` with the running count as ``jaxrank._multinomial`` forms it (blocks of 128 summed by a product
    with a triangular matrix, the block totals by ``cumsum``), where ``nonzero``'s cumulative sum is one reduce-window.

    On 65,536 edges 0.55-0.65 ms against ``nonzero``'s 0.82-1.15 ms a call (min and median of 31, load 6.5); the
    compiled fit about 0.94 of ``nonzero``'s (issue 33 part f). A parallel prefix sum (``lax.associative_scan``,
    0.91 of ``nonzero``'s in the fit) raised the first call's peak RSS by 30-45 MB (5,000 separable items: 505-520 MB
    against 466-475 MB; this form 472-491).
    """
    size, blk = on.shape[0], 128
    x = jnp.pad(on.astype(jnp.float32), (0, (-size) % blk)).reshape(-1, blk)
    within = (x @ jnp.triu(jnp.ones((blk, blk), jnp.float32))).astype(jnp.int32)   # exact: at most 128
    before = jnp.cumsum(within[:, -1]) - within[:, -1]                              # int32: exact for any R
    pos = (within + before[:, None]).reshape(-1)[:size] - 1
    put = jnp.where(on, pos, k)
    return jnp.zeros(k, jnp.int32).at[put].set(jnp.arange(size, dtype=jnp.int32), mode="drop")


def _one_component(size):
    """``(simple, big)`` from the component size of every item: ``simple`` where one component has the largest
    size and every other item is alone in its own (a connected pool, or one with items in no comparison), ``big``
    that component's items (:data:`MASKED_NOTE`)."""
    largest = jnp.max(size)
    big = size == largest
    return jnp.all(big | (size == 1)) & (jnp.sum(big) == largest), big


def _masked_mean(v, big):
    """``P v`` (:func:`jaxrank._graph.component_mean`) where :func:`_one_component` is ``simple``: the mean of
    ``v`` over ``big`` on its items, ``v`` itself on the single items (:data:`MASKED_NOTE`)."""
    return jnp.where(big, jnp.sum(jnp.where(big, v, 0)) / jnp.sum(big), v)


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
    # an edge of non-zero weight joins two items of one component, so ``W (alpha[labels] u) = alpha[lab_e] du``
    # and the slope is one sum over the edges by their component (a zero-weight edge has no residual)
    # (sparse edge space only; the dense space, [n, n] pairs, keeps the incidence form)
    lab_e = None if pr.e.dense else labels[pr.e.i]

    def slope(alpha):   # per component label
        if pr.e.dense:
            r = _residual(_graph.incidence(pr.e, alpha[labels] * u), pr)[0]
            sums = _graph.item_sums(pr.e, r * du, jnp.zeros_like(r))
            return jax.ops.segment_sum(sums, labels, n) + prior * alpha * uu
        r = _residual(alpha[lab_e] * du, pr)[0]
        # summed into the edges' first items, then by component: a scatter of every edge onto its component's label
        # is one chain of dependent adds where one component holds the pool (0.24 ms against 0.06 ms on 65,536 edges)
        return jax.ops.segment_sum(jax.ops.segment_sum(r * du, pr.e.i, n), labels, n) + prior * alpha * uu

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
(``jnp.nonzero(size=...)``, as :func:`_first_true`), where they fit; otherwise, and under ``vmap`` (batches: ``lax.cond`` would run both
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

MASKED_MEAN = True
"""The compacted CG operator applies the per-component projector as one component's masked mean (:data:`MASKED_NOTE`)."""

MASKED_NOTE = None
"""The per-component projector ``P`` in hard BT's compacted CG operator (issue 33, part e).

``P v`` (each item's component mean, :func:`jaxrank._graph.component_mean`) is a scatter-add over the items and
a gather per CG iteration, about as dear as the compacted matvec itself (0.031-0.040 ms against 0.053-0.056 ms on
5,000 items). Where one component holds every item that has a comparison (:func:`_one_component`; the pool is
connected, possibly with items in none), ``P v`` is exactly that component's mean on its items and ``v`` on the
single items (:func:`_masked_mean`): one reduction. Otherwise (several components of two or more items) the
compacted operator keeps the general ``P``. Measured with the other two changes of part e (the objective after a
kept saturation step from its summed change, ``_soft_bt_newton.SWEEP_OBJECTIVE``, and the rank scale's slope as
one sum over the edges by component): ``benchmarks/results/memory_scale.notes.md``, issue 33 part e."""
