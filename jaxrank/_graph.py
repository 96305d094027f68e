"""Private linear algebra on the comparison graph of ONE context.

Every function here works on a single context; batching and loop control
(mapping over contexts, chunks, per-context while loops, LAPACK threads) are
:mod:`jaxrank._batching`.

Two edge spaces carry per-comparison quantities:

* **sparse** (a :class:`~jaxrank.Comparisons` itself): one entry per comparison,
  ``[R]``; products with the incidence matrix are gathers and scatter-adds.
* **dense** (:class:`Edges` with ``dense=True``): one entry per ordered pair of
  items, ``[N, N]``, entry ``[a, b]`` summing every comparison with ``a`` in
  position A and ``b`` in position B. Every likelihood of the package is linear
  in the per-comparison weights and probabilities, so duplicates aggregate
  exactly. Building it costs one scatter-add; afterwards every iteration of a
  solver is dense elementwise work and row/column sums, no gather or scatter.

:func:`edges` picks the space statically from the shapes: dense when
``N^2 <= DENSE_RATIO * R``, i.e. when the ``[N, N]`` arrays are not much larger
than the comparison list (measured in ``benchmarks/edge_space.py``: on XLA:CPU
a scatter-add or gather costs several times an elementwise op per element, so
the dense space wins for the papers' sizes, e.g. 16 items with 48 of 240
comparisons, and loses for 1000 items with 26k comparisons).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

DENSE_RATIO = 1.5
"""Use the dense edge space when ``N * N <= DENSE_RATIO * R`` (``inf``: always; 0: never)."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Edges:
    """The edge space of one context: its comparisons (sparse) or all ordered pairs (dense)."""

    i: jax.Array
    j: jax.Array
    num_items: int = dataclasses.field(metadata=dict(static=True))
    dense: bool = dataclasses.field(metadata=dict(static=True))


def use_dense(num_items: int, num_comparisons: int) -> bool:
    """Whether :func:`edges` picks the dense space for these (static) sizes."""
    return num_items * num_items <= DENSE_RATIO * max(num_comparisons, 1)


def edges(c, *, dense: bool | None = None) -> Edges:
    """The edge space for ``c`` (one context); ``dense=None`` chooses by :func:`use_dense`."""
    if dense is None:
        dense = use_dense(c.num_items, c.i.shape[-1])
    return Edges(c.i, c.j, c.num_items, bool(dense))


def _is_dense(e) -> bool:
    return getattr(e, "dense", False)


def reduce(e, *xs):
    """Per-comparison values ``[R]`` to edge values (``[R]`` sparse, ``[N, N]`` dense).

    Several arrays share one scatter-add in the dense space.
    """
    if not _is_dense(e):
        return xs if len(xs) > 1 else xs[0]
    n = e.num_items
    flat = e.i * n + e.j
    out = jax.ops.segment_sum(jnp.stack(xs, axis=-1), flat, n * n).reshape(n, n, len(xs))
    out = tuple(out[..., k] for k in range(len(xs)))
    return out if len(xs) > 1 else out[0]


def head(e, s):
    """``s_i`` in edge space (``[N, 1]`` broadcastable when dense)."""
    return s[:, None] if _is_dense(e) else s[e.i]


def tail(e, s):
    """``s_j`` in edge space (``[1, N]`` broadcastable when dense)."""
    return s[None, :] if _is_dense(e) else s[e.j]


def incidence(e, s):
    """``W s``: the score difference ``s_i - s_j`` of every edge."""
    return head(e, s) - tail(e, s)


def item_sums(e, x_a, x_b):
    """``out[n] = sum_k x_a[k] [i_k = n] + x_b[k] [j_k = n]`` over the edges."""
    if _is_dense(e):
        return jnp.sum(x_a, axis=1) + jnp.sum(x_b, axis=0)
    n = e.num_items
    return (jax.ops.segment_sum(x_a, e.i, n, indices_are_sorted=False)
            + jax.ops.segment_sum(x_b, e.j, n, indices_are_sorted=False))


def item_max(e, x_a, x_b):
    """``out[n] = max_k max(x_a[k] [i_k = n], x_b[k] [j_k = n])`` over the edges (``-inf`` for an item in none)."""
    if _is_dense(e):
        return jnp.maximum(jnp.max(x_a, axis=1), jnp.max(x_b, axis=0))
    n = e.num_items
    return jnp.maximum(jax.ops.segment_max(x_a, e.i, n, indices_are_sorted=False),
                       jax.ops.segment_max(x_b, e.j, n, indices_are_sorted=False))


def incidence_t(e, x):
    """``W^T x`` with ``W`` the incidence matrix (row k = e_i - e_j)."""
    return item_sums(e, x, -x)


def laplacian(e, w):
    """``W^T diag(w) W``: weighted graph Laplacian ``[N, N]`` (METHODS.md §2)."""
    n = e.num_items
    if _is_dense(e):
        ws = w + w.T   # the degrees on the diagonal by a mask (jnp.diag is a scatter: 0.06 ms at 337 items)
        return jnp.where(jnp.eye(n, dtype=bool), jnp.sum(ws, axis=1)[:, None], 0) - ws
    idx = jnp.concatenate([e.i * (n + 1), e.j * (n + 1), e.i * n + e.j, e.j * n + e.i])
    return jax.ops.segment_sum(jnp.concatenate([w, w, -w, -w]), idx, n * n).reshape(n, n)


def laplacian_and_incidence_t(e, h, x, m):
    """``(W^T diag(h) W, W^T h, W^T x, |W|^T m)``.

    (Summing ``h``, ``x`` and ``m`` into one ``[N, N]`` pair matrix with a single
    scatter-add was measured 1.6x slower in the soft-BT loop than these separate
    scatter-adds, for 16 items.) In the sparse space the four item sums share
    two scatter-adds of ``[R, 4]`` columns and the Laplacian's off-diagonal one
    more, its degrees set by a mask: 0.20 -> 0.13 ms on all 337 football teams
    (12,309 ordered pairs), where six separate item sums and a ``4R``-entry
    Laplacian scatter ran before.
    """
    if _is_dense(e):
        return laplacian(e, h), incidence_t(e, h), incidence_t(e, x), item_sums(e, m, m)
    n = e.num_items
    deg, wt_h, wt_x, scale = item_sums_many(e, (h, h, x, m), (h, -h, -x, m))
    idx = jnp.concatenate([e.i * n + e.j, e.j * n + e.i])
    off = jax.ops.segment_sum(jnp.concatenate([-h, -h]), idx, n * n).reshape(n, n)
    return jnp.where(jnp.eye(n, dtype=bool), deg[:, None], off), wt_h, wt_x, scale


def item_sums_many(e, xs_a, xs_b):
    """:func:`item_sums` of several edge arrays at once (two scatter-adds in all, sparse space)."""
    if _is_dense(e):
        return tuple(item_sums(e, a, b) for a, b in zip(xs_a, xs_b))
    out = item_sums(e, jnp.stack(xs_a, axis=-1), jnp.stack(xs_b, axis=-1))
    return tuple(out[:, k] for k in range(len(xs_a)))


CG_MIN_ITEMS = 512
"""Sparse contexts with at least this many items solve their Newton systems by conjugate gradients.

A Newton system ``(W^T D W + P) x = b`` is then never formed: each CG iteration is
one product with the incidence matrix and one with its transpose (a gather and a
scatter-add over the comparisons), instead of a dense ``N x N`` Laplacian and its
Cholesky factorisation (``O(N^3)``). On a 1056-item pool with 26,000 comparisons
a product costs about 0.06 ms against about 8 ms for the factorisation, and a
solve 7x less time (``benchmarks/soft_bt_scale.py``). CG runs to convergence (at
most ``N + 1`` iterations: truncating it was measured to stall Newton). On
nearly saturated data (hard 0/1 outcomes clipped to ``eps``) the Hessian is badly
conditioned and CG needs hundreds of iterations per step: on the football
results (316 teams, forced through CG) a solve took 1.5 s against 0.09 s dense,
and was more accurate (0.03 against 0.16 from a float64 solve, on one-game
teams). Below this size the dense factorisation is cheap anyway."""


def use_cg(e) -> bool:
    """Whether Newton systems on edge space ``e`` are solved by CG (static: from the sizes)."""
    return not _is_dense(e) and e.num_items >= CG_MIN_ITEMS


def sizes_use_cg(num_items: int, num_comparisons: int) -> bool:
    """:func:`use_cg` of the edge space :func:`edges` picks for a context of these (static) sizes."""
    return not use_dense(num_items, num_comparisons) and num_items >= CG_MIN_ITEMS


def component_sizes(labels, dtype):
    """``[N]``: the size of every item's connected component (``1 / diag(P)``)."""
    n = labels.shape[0]
    return jax.ops.segment_sum(jnp.ones(labels.shape, dtype), labels, n)[labels]


def component_mean(x, labels, sizes):
    """``P x`` without forming ``P`` (:func:`component_projector`): every entry becomes its component's mean."""
    return jax.ops.segment_sum(x, labels, labels.shape[0])[labels] / sizes


def adjacency(e, w):
    """Bool ``[N, N]``: items joined by an edge of non-zero weight ``w`` (in ``e``'s space)."""
    if _is_dense(e):
        a = w != 0
    else:
        n = e.num_items
        a = jax.ops.segment_sum((w != 0).astype(jnp.float32), e.i * n + e.j, n * n).reshape(n, n) > 0
    return a | a.T


SQUARING_MAX_ITEMS = 64
""":func:`components` uses boolean matrix squaring up to this many items, label propagation above."""


def components(c, *, e=None, w=None):
    """Connected-component label of every item: the smallest item index in its component.

    For ``N <= SQUARING_MAX_ITEMS`` the reachability matrix comes from
    ``ceil(log2 N)`` boolean squarings of ``A + I`` (small matmuls, no loop);
    above, label propagation (``label_a <- min over neighbours``, then
    ``label_a <- label_{label_a}``, a shortcut that keeps every label inside its
    component) runs in a ``while_loop`` until no label changes (at most the
    graph's diameter + 1 sweeps). In the sparse edge space a sweep is two
    ``segment_min`` over the comparisons, ``O(N + R)`` memory, no ``[N, N]``
    array; in the dense space a row minimum of the adjacency matrix. Items in no
    comparison (and padded items) are their own component. ``e`` and ``w`` (the
    comparison weights in that edge space) can be passed when the caller has
    them already.
    """
    if e is None:
        e = edges(c)
    if w is None:
        w = reduce(e, c.weight)
    n = e.num_items
    big = jnp.int32(n)
    if n <= SQUARING_MAX_ITEMS or _is_dense(e):
        adj = adjacency(e, w) | jnp.eye(n, dtype=bool)
        if n <= SQUARING_MAX_ITEMS:
            reach = adj.astype(jnp.float32)
            for _ in range(max(0, (n - 1).bit_length())):
                reach = (reach @ reach > 0).astype(jnp.float32)
            return jnp.argmax(reach > 0, axis=1).astype(jnp.int32)

        def neighbour_min(labels):
            return jnp.min(jnp.where(adj, labels[None, :], big), axis=1)

        def sweep(labels):
            new = neighbour_min(labels)
            return new[new]
    else:
        sweep = functools.partial(_label_sweep, e, w != 0)

    def cond(state):
        old, new = state
        return jnp.any(old != new)

    def body(state):
        _, new = state
        return new, sweep(new)

    labels0 = jnp.arange(n, dtype=jnp.int32)
    _, labels = jax.lax.while_loop(cond, body, (labels0, sweep(labels0)))
    return labels


def _label_sweep(e, on, labels):
    """One sweep of label propagation in the sparse edge space over the edges where ``on``: each item
    takes the smallest label among itself and its neighbours, then its label's label (a shortcut
    that keeps every label inside its component)."""
    n = e.num_items
    big = jnp.int32(n)
    from_a = jax.ops.segment_min(jnp.where(on, labels[e.i], big), e.j, n)
    from_b = jax.ops.segment_min(jnp.where(on, labels[e.j], big), e.i, n)
    new = jnp.minimum(labels, jnp.minimum(from_a, from_b))
    return new[new]


def merge_labels(e, on, sweeps: int):
    """Labels after ``sweeps`` sweeps of :func:`components`' label propagation over the edges where ``on``
    (sparse edge space only): every set of equal labels is connected by such edges (a component may still
    be split in several when ``sweeps`` is below its depth)."""
    return jax.lax.fori_loop(0, sweeps, lambda _, lab: _label_sweep(e, on, lab),
                             jnp.arange(e.num_items, dtype=jnp.int32))


def reached_both_ways(e, ab, ba, labels):
    """Bool ``[N]``: items reachable from their component's first item along arcs, and back to it.

    Arcs run ``a -> b`` on edges with ``ab != 0`` and ``b -> a`` on edges with
    ``ba != 0`` (``e``'s space; ``a, b`` in positions A, B). ``labels`` are the
    (weakly) connected components of :func:`components`; a component is
    strongly connected exactly when all its items are reached both ways. Two
    boolean reachability vectors grow by one arc per sweep of a ``while_loop``
    (at most the longest shortest path from a component's first item, plus one,
    sweeps; each a pass over the edges), from every component at once.
    """
    n = e.num_items
    root = labels == jnp.arange(n, dtype=labels.dtype)
    fa, fb = ab != 0, ba != 0
    if _is_dense(e):
        arc = fa | fb.T                                   # arc[u, v]: u -> v

        def sweep(x, y):
            return x | jnp.any(arc & x[:, None], axis=0), y | jnp.any(arc & y[None, :], axis=1)
    else:
        f32 = lambda v: v.astype(jnp.float32)

        def spread(x, src, dst, ok):
            return jax.ops.segment_sum(f32(x[src] & ok), dst, n) > 0

        def sweep(x, y):
            fwd = spread(x, e.i, e.j, fa) | spread(x, e.j, e.i, fb)
            bwd = spread(y, e.j, e.i, fa) | spread(y, e.i, e.j, fb)
            return x | fwd, y | bwd

    def body(state):
        x, y, _ = state
        nx, ny = sweep(x, y)
        return nx, ny, jnp.any(nx != x) | jnp.any(ny != y)

    x, y, _ = jax.lax.while_loop(lambda st: st[2], body, (root, root, jnp.asarray(True)))
    return x & y


def bias_identified(e, w, labels):
    """Whether the comparisons identify a shared positional bias ``gamma``: bool scalar, exact.

    ``d = s_a - s_b - gamma`` leaves ``gamma`` unidentified exactly when some
    potential ``phi`` has ``phi_a - phi_b = 1`` on every edge of weight > 0 (then
    ``(s + t phi, gamma + t)`` fits equally for every ``t``): e.g. when every pair
    is compared in one order only along a tree. Such a ``phi`` is unique per
    connected component up to a shift, so it is grown in integers from each
    component's first item (``labels``), one arc per sweep of a ``while_loop``
    (at most the diameter + 1 sweeps), and then checked on every edge: no
    rounding, so the answer does not flicker with ``p``.
    """
    n = e.num_items
    on = w > 0
    root = labels == jnp.arange(n, dtype=labels.dtype)
    low = jnp.int32(-(2 ** 30))
    if _is_dense(e):
        def offer(known, phi):   # candidate phi_v from a known neighbour: phi_u - 1 (u -> v) or phi_u + 1 (v -> u)
            via_a = jnp.max(jnp.where(on & known[:, None], phi[:, None] - 1, low), axis=0)
            via_b = jnp.max(jnp.where(on & known[None, :], phi[None, :] + 1, low), axis=1)
            return jnp.maximum(via_a, via_b)

        def violated(phi):
            return jnp.any(on & (phi[:, None] - phi[None, :] != 1))
    else:
        def offer(known, phi):
            via_a = jax.ops.segment_max(jnp.where(on & known[e.i], phi[e.i] - 1, low), e.j, n)
            via_b = jax.ops.segment_max(jnp.where(on & known[e.j], phi[e.j] + 1, low), e.i, n)
            return jnp.maximum(jnp.maximum(via_a, via_b), low)

        def violated(phi):
            return jnp.any(on & (phi[e.i] - phi[e.j] != 1))

    def body(state):
        known, phi, _ = state
        cand = offer(known, phi)
        grow = ~known & (cand > low)
        return known | grow, jnp.where(grow, cand, phi), jnp.any(grow)

    _, phi, _ = jax.lax.while_loop(lambda st: st[2], body,
                                   (root, jnp.zeros(n, jnp.int32), jnp.asarray(True)))
    return violated(phi)


def component_projector(labels, dtype):
    """``P = sum_c 1_c 1_c^T / |c|``: the projector onto per-component constants.

    ``L + P`` is positive definite for a Laplacian ``L`` whose null space is
    spanned by the component indicators, and ``(L + P)^{-1} = L^+ + P``; so
    solving with ``L + P`` returns the minimum-norm (per-component centred)
    solution. This replaces the paper's anchor row ``e_1`` (PoE eq. 7), which
    gives the same scores up to a shift on a connected graph.
    """
    inv = 1 / component_sizes(labels, dtype)      # O(N); the [N, N] entries fuse into their consumer
    return jnp.where(labels[:, None] == labels[None, :], inv[:, None], jnp.zeros((), dtype))


def centre_per_component(s, labels):
    """Subtract each connected component's mean score (``s - P s``, by segment sums: ``O(N)``)."""
    return s - component_mean(s, labels, component_sizes(labels, s.dtype))


def psd_factor(a):
    """The lower Cholesky factor of symmetric positive-definite ``a`` (for :func:`factor_solve`)."""
    return jax.scipy.linalg.cho_factor(a, lower=True)[0]


def factor_solve(factor, b):
    """Solve ``a x = b`` given ``factor = psd_factor(a)``; ``b`` is ``[N]`` or ``[N, K]``."""
    if b.ndim == factor.ndim - 1:
        return jax.scipy.linalg.cho_solve((factor, True), b[..., None])[..., 0]
    return jax.scipy.linalg.cho_solve((factor, True), b)


def psd_solve(a, b):
    """Solve ``a x = b`` for symmetric positive-definite ``a`` (Cholesky); ``b`` is ``[N]`` or ``[N, K]``."""
    return factor_solve(psd_factor(a), b)
