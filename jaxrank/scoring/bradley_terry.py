"""Bradley-Terry on hard decisions (PoE eq. 1-2): Zermelo/MM and Newman (2023).

``P(i beats j) = r_i / (r_i + r_j) = sigmoid(s_i - s_j)`` with ``s = log r``.
Decisions are ``1[p > 0.5]`` (a tie ``p = 0.5`` is half a win each). As in the
PoE paper, every comparison also carries a prior of ``prior`` virtual wins for
each of its two items (default ``1 / (N - 1)``, ``N`` the number of items that
take part in at least one comparison),
so an item that wins (or loses) all its games keeps a finite score.

With ``a_k = w_k (y_k + prior)`` the wins of ``i_k`` over ``j_k`` and
``b_k = w_k (1 - y_k + prior)`` those of ``j_k`` over ``i_k``:

* Zermelo / MM (Hunter 2004):
  ``r_n <- W_n / sum_{k touching n} (a_k + b_k) / (r_i + r_j)``
* Newman (2023, eq. 13):
  ``r_n <- [sum_k won_{n,k} r_other / (r_i + r_j)] / [sum_k lost_{n,k} / (r_i + r_j)]``

Both share the maximum-likelihood fixed point; Newman's converges in far fewer
iterations, but both can stop (the papers' rule, below) well away from it on a nearly
separable pool: use ``method="newton"`` (the default) there. Newton reaches the same fixed point in a
handful of Newton steps: with the prior, the hard-decision likelihood
``sum_k a_k log sigmoid(d_k) + b_k log sigmoid(-d_k)`` is exactly the soft
Bradley-Terry likelihood (PoE eq. 3) of the smoothed probabilities
``p'_k = (y_k + prior) / (1 + 2 prior)`` with weights ``w_k (1 + 2 prior)``,
so it runs :func:`jaxrank.fit_poe_bradley_terry`'s compiled solver (one
program for both scorers: the second one never compiles). On a large sparse
pool (``_graph.CG_MIN_ITEMS`` items or more) Newton starts from a few of
Newman's updates (``soft_bt.solve(..., start="mm")``): an item whose decisions
all go one way sits far out, where one Newman update puts it near its optimum
and Newton alone moves it about one log-unit per step; there every accepted
Newton step is followed by one saturation step per group of linked items
(``_mm.saturation_step``, kept where it lowers the objective), which places a
group held loosely between far wins and far losses, the Newton system is damped
and clipped per item, and the CG solves are loose while the gradient is large
(``_soft_bt_sparse.SWEEP_NOTE``: 100,000 separable items converge in 35 steps). An item whose log-step changes
sign between iterations takes half a step (this breaks the period-2 cycles Newman's update can fall into on
tiny, nearly separable components, and does not move the fixed point). Scores are normalised to unit geometric
mean (log-scores centred) per connected component after each step; the loop stops when
``max |r - r_old| / max(1, r) < tol`` (the papers' rule ``max |r - r_old| < tol``
for ``r <= 1``, relative above, so a float32 tolerance stays attainable for
strong items) or after ``max_iter`` steps. That rule bounds the step, not the distance to the fixed point: on a
nearly separable pool weak items (``r << 1``) move by far less than ``tol`` and MM crawls, so Newman stopped 1.3
log-units from the fixed point (Zermelo 3.1) on two 300-item components. ``converged`` therefore also requires
the fixed point: every item's own Newton step (``|gradient| / curvature`` of the log-likelihood in its
log-strength, the others held) below ``FIXED_POINT_TOL`` = 0.05 log-units, checked once after the loop.

**Ties.** With Newton (small and dense pools), scores that only the solve's float32 rounding sets apart come
back exactly tied (``soft_bt._tied``, issue 32): in a complete balanced design two items with equal wins have
the same estimate, and a rank statistic then ranks them as the win ratio does, whatever the batch shape.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrank import _batching, _graph, _validate
from jaxrank.comparisons import Comparisons
from jaxrank.scoring import _mm, soft_bt
from jaxrank.scoring.solver import BradleyTerrySolver
from jaxrank.scoring.counting import decisions

__all__ = ["bradley_terry", "fit_bradley_terry", "BradleyTerrySolution"]


class BradleyTerrySolution(NamedTuple):
    """Result of :func:`fit_bradley_terry`.

    Attributes:
        scores: ``[..., N]`` log-strengths, centred per connected component.
        iterations: ``[...]`` iterations used per context (Newton: likelihood
            evaluations after the least-squares start).
        converged: ``[...]`` whether the fixed point was reached. Newman/Zermelo: the
            papers' rule ``max |r - r_old| / max(1, r) < tol`` was met *and* every item's
            Newton step with the others held is below ``FIXED_POINT_TOL`` (0.05 log-units);
            MM can meet the papers' rule far from the fixed point (weak items on a nearly
            separable pool), which then reads ``False``. Newton: a step below ``tol``.
    """

    scores: jax.Array
    iterations: jax.Array
    converged: jax.Array


class _Problem(NamedTuple):
    e: _graph.Edges
    a: jax.Array      # wins of i over j per edge (with the prior)
    b: jax.Array      # wins of j over i per edge
    live: jax.Array   # [N] items in at least one comparison
    labels: jax.Array  # [N] connected-component label of every item
    sizes: jax.Array   # [N] size of every item's component


def _prepare(c: Comparisons, prior):
    dt = c.p.dtype
    y = decisions(c.p)
    live = _graph.item_sums(c, c.weight, c.weight) > 0
    n_real = jnp.sum(live & c.item_mask)
    if prior is None:
        pr = 1.0 / jnp.maximum(n_real - 1, 1).astype(dt)
    else:
        pr = jnp.asarray(prior, dt)
    e = _graph.edges(c)
    a, b = _graph.reduce(e, c.weight * (y + pr), c.weight * (1 - y + pr))
    labels = _graph.components(c, e=e, w=a + b)
    return _Problem(e, a, b, live, labels, _graph.component_sizes(labels, dt))


def _centre(pr: _Problem, s):
    """``s - P s``: each component centred, by segment sums (no ``[N, N]`` projector)."""
    return s - _graph.component_mean(s, pr.labels, pr.sizes)


def _update(pr: _Problem, s, method):
    """One Zermelo/MM or Newman update of the log-strengths ``s`` (centred per component)."""
    e, a, b = pr.e, pr.a, pr.b
    if method == "newman":
        return _centre(pr, _mm.newman_update(e, a, b, s, pr.live))
    r = jnp.exp(s)
    inv = 1.0 / (_graph.head(e, r) + _graph.tail(e, r))
    num = _graph.item_sums(e, a, b)
    den = _graph.item_sums(e, (a + b) * inv, (a + b) * inv)
    s = jnp.log(jnp.where(pr.live, num / jnp.where(pr.live, den, 1), 1))
    return _centre(pr, s)


def _step(pr: _Problem, state, method, tol):
    s, prev_step, it, _ = state
    delta = _update(pr, s, method) - s
    # Newman's iteration can fall into a period-2 cycle on tiny, nearly separable
    # components; halving an item's step when its direction flips breaks the
    # cycle and leaves the fixed point unchanged.
    delta = jnp.where(delta * prev_step < 0, 0.5 * delta, delta)
    s_new = s + delta
    s_new = _centre(pr, s_new)
    r, r_new = jnp.exp(s), jnp.exp(s_new)
    return s_new, delta, it + 1, jnp.max(jnp.abs(r_new - r) / jnp.maximum(r_new, 1)) < tol


def _fit_flat(c: Comparisons, prior, method, tol, max_iter):
    """Fit a batch ``[B]`` of contexts (``_batching.while_per_context``)."""
    pr = jax.vmap(functools.partial(_prepare, prior=prior))(c)
    z = jnp.zeros(c.item_mask.shape, c.p.dtype)
    b = z.shape[0]
    state = (z, z, jnp.zeros(b, jnp.int32), jnp.zeros(b, bool))
    cont = lambda st: (~st[3]) & (st[2] < max_iter)
    step = functools.partial(_step, method=method, tol=tol)
    s, _, it, done = _batching.while_per_context(cont, step, pr, state)
    s = jax.vmap(_centre)(pr, jnp.where(c.item_mask & pr.live, s, 0))
    return BradleyTerrySolution(s, it, done & (jax.vmap(_newton_distance)(pr, s) < FIXED_POINT_TOL))


FIXED_POINT_TOL = 0.05
"""Newman/Zermelo's ``converged`` also needs :func:`_newton_distance` below this (log-units).

The papers' rule stops MM on a small *step*, which on a nearly separable pool (weak items, ``r << 1``, whose
comparisons are saturated) is also where MM crawls: on two 300-item components (1,200 comparisons each) Newman
stopped 1.3 log-units from the fixed point (66 rank changes) and Zermelo 3.1 (417), their distances 0.87 and 4.2;
Newton's float32 solution there is at 0.005, and MM on a dense 30-item pool at 2e-4 (Newman), 5e-3 (Zermelo)."""


def _newton_distance(pr: _Problem, s):
    """``max_n |g_n| / H_nn`` over live items: the longest of the per-item Newton steps in log-strength
    (each item moved to its optimum with the others held), ``g`` the log-likelihood's gradient and ``H_nn``
    its curvature (the Hessian's diagonal). Unlike the gradient relative to the item's comparison weight, it
    stays large for an item whose comparisons are saturated (a small gradient but a smaller curvature)."""
    e, a, b = pr.e, pr.a, pr.b
    d = _graph.head(e, s) - _graph.tail(e, s)
    up, down = jax.nn.sigmoid(-d), jax.nn.sigmoid(d)
    g = _graph.item_sums(e, a * up - b * down, b * down - a * up)
    h = (a + b) * up * down
    curv = _graph.item_sums(e, h, h)
    dist = jnp.abs(g) / jnp.maximum(curv, jnp.finfo(s.dtype).tiny)
    return jnp.max(jnp.where(pr.live, dist, 0), initial=0.0)


def _live_items(c):
    """``[..., N]``: items in at least one comparison of non-zero weight.

    A comparison of ``[..., R, N]`` (no scatter) where the pool is dense
    (``_graph.use_dense``); scatter-adds over the comparisons, ``O(N + R)``, where it is sparse.
    """
    n = c.num_items
    if not _graph.use_dense(n, c.i.shape[-1]):
        return _batching.batched(lambda cc: _graph.item_sums(cc, cc.weight, cc.weight) > 0, c)
    k = jnp.arange(n, dtype=c.i.dtype)
    touch = ((c.i[..., :, None] == k) | (c.j[..., :, None] == k)) & (c.weight > 0)[..., :, None]
    return jnp.any(touch, axis=-2)


@jax.jit
def _smoothed(c, prior):
    """The soft-BT problem whose optimum is hard BT's fixed point (module docstring)."""
    dt = c.p.dtype
    if prior is None:
        n_real = jnp.sum(_live_items(c) & c.item_mask, axis=-1)
        pr = (1.0 / jnp.maximum(n_real - 1, 1).astype(dt))[..., None]
    else:
        pr = jnp.asarray(prior, dt)
    y = decisions(c.p)
    i, j = c.i, c.j
    if not _graph.use_dense(c.num_items, c.i.shape[-1]):   # sparse edge space: PAD_SPREAD_NOTE
        spread = (jnp.arange(c.i.shape[-1]) % c.num_items).astype(c.i.dtype)
        off = c.weight == 0
        i, j = jnp.where(off, spread, i), jnp.where(off, spread, j)
    return Comparisons(i=i, j=j, p=(y + pr) / (1 + 2 * pr), weight=c.weight * (1 + 2 * pr),
                       item_mask=c.item_mask, num_items=c.num_items)


PAD_SPREAD_NOTE = None
"""Comparisons of weight 0 (a bucket's padding, ``_batching.pad``: ``0 vs 0``) become self-pairs ``k vs k`` of item
``k mod N`` in hard BT's smoothed problem (sparse edge space only; the dense space keeps them).

A comparison of weight 0 adds exactly 0 to every sum, so the scores are bit-identical; but thousands of them on one
item make every scatter-add of the fit (Newman's updates, the saturation step, the gradient) a chain of dependent
adds into one address: on the 5,000-item separable pool padded to 5,120 items and 65,536 comparisons, 20 Newman
updates took 19.7 ms with the padding on item 0 against 11.1 ms spread (9.6 ms unpadded), the compiled fit 152 ms
against 100 ms (min of 11, load 7; issue 33 part f, ``benchmarks/results/memory_scale.notes.md``)."""


def _arrays(c):
    """The arrays of ``c`` as a tuple (what an exported program may return)."""
    return c.i, c.j, c.p, c.weight, c.item_mask


def _fit_newton(c, prior, tol, max_iter):
    solver = BradleyTerrySolver(eps=0.0, tol=tol, max_iter=max_iter)
    # The smoothing keeps every score finite. On a large sparse pool Newman's updates start Newton
    # (items whose decisions are all one way sit far out, where Newton alone moves ~1 log-unit a step).
    start = "mm" if c.num_items >= _graph.CG_MIN_ITEMS else "least_squares"
    num_items, concrete = c.num_items, _batching.is_concrete(c)
    if concrete:   # smoothed on the bucket's shapes that soft_bt.solve pads to (``_batching.bucket_sizes``)
        c = _batching.pad(c, *_batching.bucket_sizes(num_items, c.i.shape[-1], below=soft_bt._below()))
    smooth = _batching.call(lambda cc: _arrays(_smoothed(cc, prior)), f"bt.smoothed-{prior!r}", c,
                            options=_batching.compiler_options(c.num_items, c.i.size))
    smooth = Comparisons(*smooth, num_items=c.num_items)
    sol = soft_bt.solve(smooth, solver, check=False, start=start)
    if concrete:
        sol = _batching.unpad(sol, num_items, len(c.batch_shape))
    return BradleyTerrySolution(sol.scores, sol.iterations, sol.converged)


def _check(prior, method, tol, max_iter):
    if method not in ("newton", "newman", "zermelo"):
        raise ValueError(f"method must be 'newton', 'newman' or 'zermelo', got {method!r}")
    if prior is not None:
        _validate.number("prior", prior, low=0.0, low_open=True)
    _validate.number("tol", tol, low=0.0, low_open=True)
    _validate.integer("max_iter", max_iter, low=1)


@functools.partial(jax.jit, static_argnames=("prior", "method", "tol", "max_iter"))
def _fit(c, prior, method, tol, max_iter):
    flat, shape = _batching.flatten_batch(c)
    return _batching.unflatten_batch(_fit_flat(flat, prior, method, tol, max_iter), shape)


def fit_bradley_terry(c: Comparisons, *, prior=None, method="newton", tol=1e-3,
                      max_iter=None) -> BradleyTerrySolution:
    """Fit hard-decision Bradley-Terry and report convergence.

    Args:
        c: comparisons, any batch shape (decisions ``1[p > 0.5]``).
        prior: virtual wins per item per comparison (default ``1/(N-1)``, PoE §4).
        method: ``"newton"`` (default; the soft-BT solver on smoothed decisions),
            ``"newman"`` or ``"zermelo"`` (the papers' MM iteration); all three
            share the fixed point.
        tol: Newman/Zermelo stop at ``max |r - r_old| / max(1, r) < tol``
            (papers: 1e-3), which bounds the step, not the error (``converged``
            checks the fixed point separately); Newton stops when its step's
            max-norm in log-strength is below ``tol``. On a well-conditioned pool
            Newton's convergence is quadratic and the error then about ``tol^2``;
            on an ill-conditioned one (nearly separable, a weak chain of links) it
            can be far larger (float64, ``tol=1e-3``: 0.02 log-units seen), and in
            float32 the solve's rounding bounds the accuracy whatever ``tol``: a
            fit can read ``converged`` with its gradient at float32's rounding and
            its scores about a log-unit off (use float64 data for such pools).
        max_iter: iteration cap (default 100 Newton steps, 10,000 MM iterations).

    Returns:
        :class:`BradleyTerrySolution`.
    """
    _validate.comparisons("c", c)
    if max_iter is None:
        max_iter = 100 if method == "newton" else 10_000
    _check(prior, method, tol, max_iter)
    if method == "newton":
        return _fit_newton(c, None if prior is None else float(prior), float(tol), int(max_iter))
    fit = lambda cc: tuple(_fit(cc, prior, method, float(tol), int(max_iter)))
    return BradleyTerrySolution(*_batching.bucketed(fit, f"bt.{method}-{prior!r}-{float(tol)!r}-{int(max_iter)}", c))


def bradley_terry(c: Comparisons, *, prior=None, method="newton", tol=1e-3, max_iter=None) -> jax.Array:
    """Bradley-Terry log-strengths from hard decisions (PoE eq. 1-2); see :func:`fit_bradley_terry`.

    Returns:
        ``[..., N]`` scores centred per connected component; items in no
        comparison and padded items get 0.
    """
    return fit_bradley_terry(c, prior=prior, method=method, tol=tol, max_iter=max_iter).scores
