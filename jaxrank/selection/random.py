"""Random comparison selection: random, no-repeat and symmetric (LCA §3.4; PoE §4.2).

The three schemes of llm-comparative-assessment §3.4 (METHODS.md §5):

* ``random``: ``R`` distinct ordered pairs drawn from all ``N(N-1)``;
* ``no_repeat``: ``R`` distinct unordered pairs, each judged in one random order
  (if ``(a, b)`` is selected, ``(b, a)`` is not);
* ``symmetric``: ``R / 2`` distinct unordered pairs, each judged in both orders.

The PoE paper (§4.2) further requires every text to be in at least one
comparison. ``ensure_coverage=True`` guarantees a stronger property, that the
comparison graph is *connected* (every scorer centres each connected component
on its own, so scores of different components would not be comparable): a
random spanning tree of the real items (a random recursive tree: the items in a
random order, item ``k`` joined to a uniformly chosen earlier one; expected depth
``O(log N)``) is always selected, and the rest of the budget is drawn uniformly
from the remaining pairs. It needs ``R >= N - 1`` (``2 (N - 1)`` symmetric).

Selections are *nested*: the tree comes first (in random order), then the
uniform fill in random order, so the first ``R' >= N - 1`` comparisons of a
selection are distributed exactly as a selection of budget ``R'``; one
selection (and one compiled shape) gives a whole efficiency curve, by setting
the weights of the later slots to 0.

Selections are index arrays of static shape ``[..., R]``; ``jax.jit``/``vmap``
friendly, one selection per key (any leading key batch axes). Use them with
:meth:`jaxrank.Comparisons.from_pairs` (the judge's answers) or with
:func:`gather_comparisons` (look up a dense probability matrix).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank.comparisons import Comparisons
from jaxrank.selection import _common

__all__ = ["random_comparisons", "gather_comparisons", "MODES"]

MODES = ("random", "no_repeat", "symmetric")


def _mode(symmetric, no_repeat):
    if symmetric and no_repeat:
        raise ValueError("symmetric and no_repeat are exclusive (symmetric judges both orders of each pair)")
    return "symmetric" if symmetric else ("no_repeat" if no_repeat else "random")


def check_budget(num_items: int, budget: int, mode: str, ensure_coverage: bool) -> None:
    """``ValueError`` for a budget that the scheme cannot meet (static shapes, checked before tracing)."""
    n = _common.check_int("num_items", num_items, minimum=2)
    r = _common.check_int("budget", budget, minimum=1)
    most = n * (n - 1) // (2 if mode == "no_repeat" else 1)
    if r > most:
        what = {"random": "N(N-1) ordered pairs", "no_repeat": "N(N-1)/2 unordered pairs",
                "symmetric": "N(N-1) ordered pairs (both orders of all N(N-1)/2 pairs)"}[mode]
        raise ValueError(f"budget={r} exceeds the {most} = {what} of num_items={n} ({mode} selection)")
    if mode == "symmetric" and r % 2:
        raise ValueError(f"budget={r} must be even for symmetric selection (both orders of each pair)")
    if ensure_coverage:
        least = (n - 1) * (2 if mode == "symmetric" else 1)
        if r < least:
            raise ValueError(f"budget={r} is below {least}, the fewest comparisons that connect num_items={n} "
                             f"items ({mode}); raise the budget or pass ensure_coverage=False")


def spanning_tree(u_order, u_parent, mask):
    """A random recursive spanning tree of the real items: ``(a, b, ok)``, each ``[N - 1]``.

    Items in a random order (from uniforms ``u_order [N]``, real first); the item at
    position ``k >= 1`` is joined to the one at position ``floor(u_parent[k-1] k)``,
    uniform in ``[0, k)``. ``ok`` is False for the edges of padded items.
    """
    n = mask.shape[-1]
    perm, n_real = _common.real_first_order(u_order, mask)
    k = jnp.arange(1, n)
    parent = jnp.floor(u_parent * k).astype(jnp.int32)
    parent = jnp.minimum(parent, k - 1)
    return perm[1:], perm[parent], k < n_real


@functools.partial(jax.jit, static_argnames=("num_items", "budget", "mode", "ensure_coverage"))
def _random(key, mask, *, num_items, budget, mode, ensure_coverage):
    def one(key, mask):
        n = num_items
        ordered = mode == "random"
        pairs = budget // 2 if mode == "symmetric" else budget
        u_order, u_parent, u_flip_tree, prio, u_flip, u_shuffle = _common.uniforms(
            key, (n,), (n - 1,), (n - 1,), (n, n), (pairs,), (pairs,))
        eye = jnp.eye(n, dtype=bool)
        valid = mask[:, None] & mask[None, :] & ~eye
        if ensure_coverage:
            a, b, ok = spanning_tree(u_order, u_parent, mask)
            if ordered:     # one random order of every tree edge is forced in
                flip = u_flip_tree < 0.5
                a, b = jnp.where(flip, b, a), jnp.where(flip, a, b)
            boost = jnp.zeros((n, n)).at[a, b].max(jnp.where(ok, 2.0, 0.0))
            if not ordered:
                boost = jnp.maximum(boost, boost.T)
            prio = prio + boost
        prio = jnp.where(valid, prio, -1.0)
        if ordered:
            ra, rb = np.nonzero(~np.eye(n, dtype=bool))
        else:
            ra, rb = np.triu_indices(n, 1)
        top, idx = jax.lax.top_k(prio[ra, rb], pairs)
        a = jnp.asarray(ra, jnp.int32)[idx]
        b = jnp.asarray(rb, jnp.int32)[idx]
        live = top >= 0
        if mode == "no_repeat":
            flip = u_flip < 0.5
            a, b = jnp.where(flip, b, a), jnp.where(flip, a, b)
        # slot order: the tree (random order), then the uniform fill (random order), then padding;
        # so every prefix of >= N - 1 slots is itself a selection of that budget (nested budgets)
        order = jnp.argsort(jnp.where(top >= 2, u_shuffle, jnp.where(live, 1.0 + u_shuffle, 3.0 + u_shuffle)))
        a, b, live = a[order], b[order], live[order]
        if mode == "symmetric":
            a, b = jnp.stack([a, b], -1).reshape(-1), jnp.stack([b, a], -1).reshape(-1)
            live = jnp.repeat(live, 2)
        return a, jnp.where(live, b, a)          # padding slots: i == j

    return _common.map_over_keys(one, key, mask)


def random_comparisons(key, num_items: int, budget: int, *, symmetric: bool = False, no_repeat: bool = False,
                       ensure_coverage: bool = True, item_mask=None) -> tuple[jax.Array, jax.Array]:
    """Random comparisons of ``num_items`` candidates (LCA §3.4; PoE §4.2; METHODS.md §5).

    Args:
        key: a ``jax.random`` key, or a batch of keys (shape ``[...]`` typed,
            or ``[..., 2]`` raw): one independent selection per key.
        num_items: ``N``.
        budget: ``R``, the number of (ordered) comparisons to return.
        symmetric: select ``R / 2`` unordered pairs and judge each in both orders.
        no_repeat: select ``R`` unordered pairs, each judged in one random order.
            Neither flag: ``R`` distinct ordered pairs (the "random" scheme).
        ensure_coverage: always include a random spanning tree of the real items,
            so every item is compared and the comparison graph is connected.
        item_mask: optional bool ``[..., N]`` of real candidates (padded contexts):
            pairs touching a masked item are never selected. When fewer valid pairs
            than ``R`` exist, the spare slots hold ``i == j`` (padding; give them weight 0,
            as :func:`gather_comparisons` does).

    Returns:
        ``(i, j)``, int32 ``[..., R]``: comparison ``k`` puts ``i[k]`` in position A.

    Raises:
        ValueError: ``budget`` above the number of available pairs (``N(N-1)``,
            ``N(N-1)/2`` no-repeat), odd with ``symmetric``, below the ``N - 1``
            (``2(N - 1)`` symmetric) needed with ``ensure_coverage``; both flags set.
    """
    mode = _mode(symmetric, no_repeat)
    check_budget(num_items, budget, mode, ensure_coverage)
    batch = _common.key_batch_shape(key)
    mask = _common.check_item_mask(item_mask, batch, num_items)
    if mask is None:
        mask = jnp.ones(batch + (num_items,), bool)
    return _random(key, mask, num_items=int(num_items), budget=int(budget), mode=mode,
                   ensure_coverage=bool(ensure_coverage))


def gather_comparisons(probs, i, j, *, item_mask=None) -> Comparisons:
    """Look up selected comparisons in a dense ``[..., N, N]`` matrix of judge probabilities.

    ``probs[..., a, b]`` is ``P(a better than b)`` with ``a`` in position A (as in
    :meth:`jaxrank.Comparisons.from_matrix`, whose full ``N(N-1)`` set this
    subsets). Slots with ``i == j`` (padding from a selection) and pairs touching
    a masked item get weight 0 and ``p = 0.5``.

    Args:
        probs: ``[..., N, N]`` probabilities (the diagonal is never read).
        i, j: int ``[..., R]`` selected positions A and B; their batch axes
            broadcast with those of ``probs`` (one selection for every context, or
            one per context).
        item_mask: optional bool ``[..., N]`` of real candidates.

    Returns:
        :class:`jaxrank.Comparisons` of batch shape ``broadcast(probs[..., 0, 0], i[..., 0])``.
    """
    probs = jnp.asarray(probs)
    if probs.ndim < 2 or probs.shape[-1] != probs.shape[-2]:
        raise ValueError(f"probs must have shape [..., N, N], got {probs.shape}")
    if not jnp.issubdtype(probs.dtype, jnp.floating):
        probs = probs.astype(jnp.float32)
    i, j = jnp.asarray(i, jnp.int32), jnp.asarray(j, jnp.int32)
    if i.shape != j.shape or i.ndim == 0:
        raise ValueError(f"i and j must have the same shape [..., R]; got {i.shape} and {j.shape}")
    n, r = probs.shape[-1], i.shape[-1]
    try:
        batch = jnp.broadcast_shapes(probs.shape[:-2], i.shape[:-1])
    except ValueError:
        raise ValueError(f"batch axes of probs {probs.shape[:-2]} and of i, j {i.shape[:-1]} do not broadcast") from None
    i, j = jnp.broadcast_to(i, batch + (r,)), jnp.broadcast_to(j, batch + (r,))
    flat = jnp.broadcast_to(probs, batch + (n, n)).reshape(batch + (n * n,))
    live = i != j
    mask = _common.check_item_mask(item_mask, batch, n)
    if mask is not None:
        live = live & jnp.take_along_axis(mask, i, -1) & jnp.take_along_axis(mask, j, -1)
    p = jnp.take_along_axis(flat, jnp.clip(i, 0, n - 1) * n + jnp.clip(j, 0, n - 1), -1)
    p = jnp.where(live, p, 0.5)
    return Comparisons.from_pairs(i, j, p, num_items=n, weight=live.astype(p.dtype), item_mask=mask)
