"""Maximum-likelihood ranking (llm-comparative-assessment App. B, eq. 11-13).

Find the ranking ``r`` that maximises

    log L(r) = sum_k w_k [z_k log p_k + (1 - z_k) log(1 - p_k)],  z_k = 1[i_k ranked above j_k]

(an NP-hard, feedback-arc-set-like problem). We approximate it by local search
from a PoE start: with ``G[a, b]`` the log-likelihood gained by ranking ``a``
above ``b``, ``log L(order) = sum_{t < u} G[order_t, order_u]``; each step takes
the best single *insertion* move (remove one item and re-insert it at another
position; adjacent swaps are a special case), whose gains for all ``N^2`` moves
come from two cumulative sums. The loop stops when no move gains more than
``tol``; the log-likelihood strictly increases, so it terminates.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _batching, _graph, _validate
from jaxrank.comparisons import Comparisons
from jaxrank.scoring.gaussian import poe_gaussian

__all__ = ["max_likelihood_ranking"]


def _gain_matrix(c, eps):
    p = jnp.clip(c.p, eps, 1 - eps)
    la, lb = _graph.reduce(_graph.edges(c, dense=True), c.weight * jnp.log(p), c.weight * jnp.log1p(-p))
    return la + lb.T


def _local_search_one(c, init, eps, tol, max_moves):
    n = c.num_items
    g = _gain_matrix(c, eps)
    flip = g.T - g                       # flip[a, b]: gain of putting b above a (a currently above)
    active = c.item_mask & (_graph.item_sums(c, c.weight, c.weight) > 0)
    n_real = jnp.sum(active)
    order0 = jnp.argsort(jnp.where(active, -init, jnp.inf))   # best first; padded and unjudged last
    idx = jnp.arange(n)
    upper = idx[None, :] > idx[:, None]

    def gains(order):
        fo = flip[order][:, order]       # fo[t, v] = flip[order_t, order_v]
        fwd = jnp.cumsum(jnp.where(upper, fo, 0), axis=1)          # move t down to u > t
        back_terms = jnp.where(upper, fo, 0).T                     # [t, v] = fo[v, t] for v < t
        bwd = jnp.flip(jnp.cumsum(jnp.flip(back_terms, 1), axis=1), 1)  # move t up to u < t
        gain = jnp.where(upper, fwd, jnp.where(upper.T, bwd, -jnp.inf))
        valid = (idx[:, None] < n_real) & (idx[None, :] < n_real)
        return jnp.where(valid, gain, -jnp.inf)

    def move(order, t, u):
        src_f = jnp.where((idx >= t) & (idx < u), idx + 1, idx)
        src_b = jnp.where((idx > u) & (idx <= t), idx - 1, idx)
        src = jnp.where(idx == u, t, jnp.where(u > t, src_f, src_b))
        return order[src]

    def cond(state):
        _, best, it = state
        return (best > tol) & (it < max_moves)

    def body(state):
        order, _, it = state
        gm = gains(order)
        k = jnp.argmax(gm)
        t, u = k // n, k % n
        best = gm.reshape(-1)[k]
        order = jnp.where(best > tol, move(order, t, u), order)
        return order, best, it + 1

    order, _, _ = jax.lax.while_loop(cond, body, (order0, jnp.asarray(jnp.inf, g.dtype), jnp.int32(0)))
    pos = jnp.zeros(n, jnp.int32).at[order].set(idx.astype(jnp.int32))
    centre = 0.5 * (n_real - 1).astype(g.dtype)
    return jnp.where(active, centre - pos.astype(g.dtype), 0)


@jax.jit
def _search(c, init, eps, tol, max_moves):
    # eps, tol and max_moves are traced: one program serves every setting (max_moves defaults to N^2)
    return _batching.batched(_local_search_one, c, init, eps=eps, tol=tol, max_moves=max_moves)


def max_likelihood_ranking(c: Comparisons, *, init=None, eps=1e-6, tol=1e-6, max_moves=None) -> jax.Array:
    """Approximate maximum-likelihood ranking by insertion local search (App. B).

    Args:
        c: comparisons, any batch shape.
        init: ``[..., N]`` starting scores (default :func:`jaxrank.poe_gaussian`).
        eps: probabilities are clipped to ``[eps, 1 - eps]`` before the log, ``0 < eps < 0.5``
            (``eps = 0`` would make a judgement of ``p = 0`` or ``1`` an infinite log-likelihood,
            whose gains cannot be compared); may be traced (inside ``jit``).
        tol: minimum log-likelihood gain for a move; may be traced.
        max_moves: cap on moves, an int ``>= 0`` (default ``N^2``); must be concrete.

    Returns:
        ``[..., N]`` rank scores ``(n - 1)/2 - position`` (higher is better,
        centred; ``n`` items in at least one comparison); padded items and
        items in no comparison get 0.

    Raises:
        ValueError: naming the argument: ``c`` not comparisons, ``eps`` outside ``(0, 0.5)``, ``tol``
            negative, ``max_moves`` not an int ``>= 0``, or ``init`` of the wrong shape or not finite.
    """
    _validate.comparisons("c", c)
    _validate.number("eps", eps, low=0.0, low_open=True, high=0.5, high_open=True)
    _validate.number("tol", tol, low=0.0)
    max_moves = _validate.integer("max_moves", max_moves, low=0, none=True)
    if init is None:
        init = poe_gaussian(c)
    if isinstance(init, jax.Array):
        init = init if init.dtype == c.p.dtype else init.astype(c.p.dtype)
    else:
        init = np.asarray(init, c.p.dtype)      # on the host: no staging program per shape
    if init.shape != c.batch_shape + (c.num_items,):
        raise ValueError(f"init must have shape {c.batch_shape + (c.num_items,)}, got {init.shape}")
    if not isinstance(init, jax.core.Tracer):
        bad = ~np.isfinite(np.asarray(init)) & np.asarray(c.item_mask)
        if bad.any():
            raise ValueError(f"init must be finite on the real items, got {np.asarray(init)[bad][0]!r} at index "
                             f"{tuple(int(k) for k in np.argwhere(bad)[0])}")
    max_moves = c.num_items ** 2 if max_moves is None else int(max_moves)
    # NumPy for concrete settings (no staging program per value), jnp for traced ones
    setting = lambda v: jnp.asarray(v, c.p.dtype) if isinstance(v, jax.core.Tracer) else np.asarray(v, c.p.dtype)
    settings = (setting(eps), setting(tol), np.asarray(min(max_moves, 2**31 - 1), np.int32))
    fn = lambda cc, s0, *rest: (_search(cc, s0, *rest),)
    return _batching.bucketed(fn, "max_likelihood_ranking", c, init, *settings, item_args=(0,))[0]
