"""Private linear-algebra helpers on the comparison graph of ONE context.

Every function here works on a single context (``i, j`` of shape ``[R]``);
:func:`batched` maps a single-context function over any leading batch axes.

Two implementations of the incidence products exist, chosen statically from
the shapes: a dense one-hot contraction (``[R, N]`` one-hot matrices and a
matmul) for ``N <= DENSE_MAX_ITEMS``, and a scatter-add (``segment_sum``)
otherwise. Older XLA:CPU builds were reported to make the dense form ~20x
faster for small ``N``; measured here with jax 0.10.2 on 2 CPU cores
(``benchmarks/incidence_switch.py``, 10,000 contexts x 16 items x 48
comparisons) scatter is faster at every size (average probability 4 vs 32 ms,
PoE-g 66 vs 125 ms, soft BT 0.50 vs 0.68 s, hard BT 0.50 vs 1.06 s), so the
default is 0 (always scatter). Re-measure on a new backend (GPU) and raise it
if the dense form wins there; both paths are tested to agree.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

DENSE_MAX_ITEMS = 0


def batched(fn, c, *args, **kwargs):
    """Apply single-context ``fn(c, *args, **kwargs)`` over ``c``'s leading batch axes.

    ``args`` must share ``c``'s batch axes (their trailing axes are per-context).
    """
    nb = c.i.ndim - 1
    f = functools.partial(fn, **kwargs)
    for _ in range(nb):
        f = jax.vmap(f)
    return f(c, *args)


def _use_dense(c) -> bool:
    return c.num_items <= DENSE_MAX_ITEMS


def one_hot(c):
    """``[R, N]`` one-hot matrices of positions A and B."""
    n = c.num_items
    dt = c.p.dtype
    return jax.nn.one_hot(c.i, n, dtype=dt), jax.nn.one_hot(c.j, n, dtype=dt)


def item_sums(c, x_a, x_b):
    """``out[n] = sum_k x_a[k] [i_k = n] + x_b[k] [j_k = n]`` for one context."""
    if _use_dense(c):
        oa, ob = one_hot(c)
        return x_a @ oa + x_b @ ob
    n = c.num_items
    return (jax.ops.segment_sum(x_a, c.i, n, indices_are_sorted=False)
            + jax.ops.segment_sum(x_b, c.j, n, indices_are_sorted=False))


def incidence_t(c, x):
    """``W^T x`` with ``W`` the ``[R, N]`` incidence matrix (row k = e_i - e_j)."""
    return item_sums(c, x, -x)


def incidence(c, s):
    """``W s``: the score difference ``s_i - s_j`` of every comparison."""
    return s[c.i] - s[c.j]


def laplacian(c, w):
    """``W^T diag(w) W``: weighted graph Laplacian ``[N, N]`` (METHODS.md §2)."""
    n = c.num_items
    if _use_dense(c):
        oa, ob = one_hot(c)
        d = oa - ob
        return d.T @ (w[:, None] * d)
    lap = jnp.zeros((n, n), w.dtype)
    lap = lap.at[c.i, c.i].add(w).at[c.j, c.j].add(w)
    return lap.at[c.i, c.j].add(-w).at[c.j, c.i].add(-w)


def adjacency(c):
    """Bool ``[N, N]``: items joined by a comparison of non-zero weight."""
    live = (c.weight > 0).astype(c.p.dtype)
    if _use_dense(c):
        oa, ob = one_hot(c)
        a = oa.T @ (live[:, None] * ob)
    else:
        n = c.num_items
        a = jnp.zeros((n, n), c.p.dtype).at[c.i, c.j].add(live)
    a = a > 0
    return a | a.T


def components(c):
    """Connected-component label of every item: the smallest item index in its component.

    Label propagation (``label_a <- min over neighbours``) in a ``while_loop``;
    it stops when no label changes (at most the graph's diameter + 1 sweeps).
    Items in no comparison (and padded items) are their own component.
    """
    n = c.num_items
    adj = adjacency(c) | jnp.eye(n, dtype=bool)
    big = jnp.int32(n)

    def sweep(labels):
        return jnp.min(jnp.where(adj, labels[None, :], big), axis=1)

    def cond(state):
        old, new = state
        return jnp.any(old != new)

    def body(state):
        _, new = state
        return new, sweep(new)

    labels0 = jnp.arange(n, dtype=jnp.int32)
    _, labels = jax.lax.while_loop(cond, body, (labels0, sweep(labels0)))
    return labels


def component_projector(labels, dtype):
    """``P = sum_c 1_c 1_c^T / |c|``: the projector onto per-component constants.

    ``L + P`` is positive definite for a Laplacian ``L`` whose null space is
    spanned by the component indicators, and ``(L + P)^{-1} = L^+ + P``; so
    solving with ``L + P`` returns the minimum-norm (per-component centred)
    solution. This replaces the paper's anchor row ``e_1`` (PoE eq. 7), which
    gives the same scores up to a shift on a connected graph.
    """
    same = (labels[:, None] == labels[None, :]).astype(dtype)
    return same / jnp.sum(same, axis=1, keepdims=True)


def centre_per_component(s, labels):
    """Subtract each connected component's mean score."""
    return s - component_projector(labels, s.dtype) @ s


def psd_solve(a, b):
    """Solve ``a x = b`` for symmetric positive-definite ``a`` (Cholesky)."""
    cf = jax.scipy.linalg.cho_factor(a, lower=True)
    return jax.scipy.linalg.cho_solve(cf, b)
