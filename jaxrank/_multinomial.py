"""Private: exact binomial and multinomial draws on the device, vectorised (``jax.random`` bits).

``jax.random.multinomial`` is a ``lax.scan`` over the categories (one binomial
per category, in sequence), and ``jax.random.binomial`` evaluates both of its
algorithms for every element and loops until the slowest element finishes:
about 1 microsecond per draw on this CPU, half a minute for a bootstrap of
33,000 categories x 1000 replicates. Here:

* :func:`multinomial` splits the total along a balanced binary tree over the
  categories (conditional binomials ``n_left ~ Binomial(n_node, m_left /
  m_node)``, ``m`` the categories' masses): one vectorised binomial call per
  level, ``ceil(log2 K)`` levels, ``K - 1`` draws in all. Masses are summed
  from whole-number counts, so every split probability is one correctly
  rounded division.
* :func:`binomial` draws by inversion (search from 0 along the probability
  recurrence) where ``n min(p, 1-p) < 10``, and by Hoermann's (1993)
  transformed rejection with squeeze (BTRS) elsewhere; the acceptance test's
  ``log f(k) / f(m)`` is in Loader's (2000) saddle-point form (``stirlerr`` and
  ``bd0``), accurate in float32 up to ``n = 2^24``. The first pass does only
  the cheap part for every element (two uniforms; BTRS's proposal and squeeze,
  which accept about 60-80%; inversion up to ``k = 2`` in closed form). The
  rest are compacted (``jnp.nonzero`` with a static size) and finished in
  stages of shrinking size, so the full acceptance test and the retries cost
  only where they are needed.

Exact up to floating-point rounding: counts are whole numbers in the float
dtype, at most ``2^24`` in float32.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

INVERSION_MAX_MEAN = 10.0
"""Binomials with ``n min(p, 1 - p)`` below this are drawn by inversion, the rest by BTRS."""

INVERSION_BLOCK = 16
"""Inversion reaches ``k = INVERSION_BLOCK - 1`` in one vectorised block; beyond, a compacted search."""


STAGES = (4, 8, 8)
"""Entries still open after the first pass are finished in nested stages: stage ``t`` takes at most
``1 / STAGES[t]`` of the entries of the stage before (and at least ``MIN_STAGE``), in as many
rounds as needed; past the last stage a loop steps its few entries until none is open."""

MIN_STAGE = 64

MAX_COUNT_FLOAT32 = 2**24
"""Largest total a float32 draw represents exactly."""

_STIRLERR = [0.0] + [math.lgamma(x + 1) - (x + 0.5) * math.log(x) + x - 0.5 * math.log(2 * math.pi)
                     for x in range(1, 16)]


def _stirlerr(x):
    """``log(x!) - log(sqrt(2 pi x) (x/e)^x)`` for whole ``x >= 1`` (table to 15, series above).

    The table is a chain of selects, not a gather: a gather inside a fusion
    makes XLA:CPU emit scalar code for the whole fusion (measured 8x slower).
    """
    ix = 1 / x
    ix2 = ix * ix
    out = (1 / 12 - (1 / 360 - (1 / 1260 - ix2 / 1680) * ix2) * ix2) * ix
    for k in range(15, 0, -1):
        out = jnp.where(x == k, _STIRLERR[k], out)
    return out


def _bd0_near(x, mean):
    """:func:`_bd0` by its series alone, for ``|x - mean| < (x + mean) / 2`` (to 2e-8 relative; no log)."""
    d = x - mean
    v = d / (x + mean)
    v2 = v * v
    poly = jnp.full_like(v2, 1 / 23)
    for k in range(10, 0, -1):
        poly = 1 / (2 * k + 1) + v2 * poly
    return d * v + 2 * x * v * v2 * poly


def _bd0(x, mean):
    """``x log(x / mean) + mean - x``, by its series where ``x`` is near ``mean`` (Loader 2000)."""
    d = x - mean
    v = d / (x + mean)
    v2 = v * v
    poly = jnp.full_like(v2, 1 / 15)
    for k in range(6, 0, -1):                       # Horner: sum_k v2^k / (2k + 1), k = 1..7
        poly = 1 / (2 * k + 1) + v2 * poly
    series = d * v + 2 * x * v * v2 * poly
    safe_x = jnp.where(x > 0, x, 1)
    direct = jnp.where(x > 0, x * jnp.log(safe_x / mean), 0.0) + mean - x
    return jnp.where(jnp.abs(d) < 0.1 * (x + mean), series, direct)


class _Btrs:
    """BTRS (Hoermann 1993) for ``Binomial(n, q)``, ``q <= 1/2``, ``n q >= 10``: proposal and squeeze."""

    def __init__(self, n, q):
        spq = jnp.sqrt(n * q * (1 - q))
        self.n, self.q, self.spq = n, q, spq
        self.b = 1.15 + 2.53 * spq
        self.a = -0.0873 + 0.0248 * self.b + 0.01 * q
        c = n * q + 0.5
        self.c0 = jnp.floor(c)                 # whole part kept apart: k stays exact for n up to 2^24
        self.cf = c - self.c0
        self.vr = 0.92 - 4.2 / self.b

    def propose(self, u, v):
        """``(k, us, quick)``: the candidate from uniforms ``u, v`` and whether the squeeze accepts it."""
        u = u - 0.5
        us = 0.5 - jnp.abs(u)
        k = self.c0 + jnp.floor((2 * self.a / us + self.b) * u + self.cf)
        return k, us, (us >= 0.07) & (v <= self.vr)

    def _base(self):
        """``(m, stirlerr(m) + stirlerr(n - m) + bd0(m) + bd0(n - m))`` at the mode ``m`` (no log)."""
        n, q = self.n, self.q
        m = jnp.floor((n + 1) * q)             # the mode; 10 <= m <= n - 10 here, |m - nq| <= 1
        return m, _stirlerr(m) + _stirlerr(n - m) + _bd0_near(m, n * q) + _bd0_near(n - m, n * (1 - q))

    def accept_near(self, k, us, v):
        """``(accepted, decided)``: the full test without a ``bd0`` log, decided for ``1 <= k <= n - 1`` with
        ``k`` and ``n - k`` within a factor 3 of their means (nearly every candidate), else left open.

        ``log(v alpha / (a/us^2 + b)) + log sqrt(k (n-k) / (m (n-m)))`` is one log.
        """
        n, q = self.n, self.q
        nq, nqc = n * q, n * (1 - q)
        m, base = self._base()
        kk = jnp.clip(k, 1, n - 1)
        near = ((k >= 1) & (k <= n - 1) & (jnp.abs(kk - nq) < 0.5 * (kk + nq))
                & (jnp.abs(n - kk - nqc) < 0.5 * (n - kk + nqc)))
        rhs = base - _stirlerr(kk) - _stirlerr(n - kk) - _bd0_near(kk, nq) - _bd0_near(n - kk, nqc)
        alpha = (2.83 + 5.1 / self.b) * self.spq
        lhs = jnp.log(v * alpha * jnp.sqrt(kk * (n - kk) / (m * (n - m))) / (self.a / (us * us) + self.b))
        outside = (k < 0) | (k > n)
        return near & (lhs <= rhs), near | outside

    def accept(self, k, us, v):
        """The full test: ``log(v alpha / (a / us^2 + b)) <= log f(k) / f(m)`` (and ``0 <= k <= n``)."""
        n, q = self.n, self.q
        alpha = (2.83 + 5.1 / self.b) * self.spq
        nq, nqc = n * q, n * (1 - q)
        m, base = self._base()
        kk = jnp.clip(k, 1, n - 1)
        ratio = (base - _stirlerr(kk) - _stirlerr(n - kk) - _bd0(kk, nq) - _bd0(n - kk, nqc)
                 + 0.5 * jnp.log(m * (n - m) / (kk * (n - kk))))
        log_fm = _stirlerr(n) - base + 0.5 * jnp.log(n / (2 * math.pi * m * (n - m)))
        ratio = jnp.where(k <= 0, n * jnp.log1p(-q) - log_fm, jnp.where(k >= n, n * jnp.log(q) - log_fm, ratio))
        lv = jnp.log(v * alpha / (self.a / (us * us) + self.b))
        return (k >= 0) & (k <= n) & (lv <= ratio)


def _prefix_count(mask):
    """Inclusive running count of a bool vector, as int32.

    Blocks of 128 are summed by a product with a triangular matrix, the block
    totals by ``cumsum``: ``jnp.cumsum`` alone (a reduce-window on XLA:CPU)
    cost 7 ns per element, half of what ``jnp.nonzero`` costs.
    """
    size, blk = mask.shape[0], 128
    x = jnp.pad(mask.astype(jnp.float32), (0, (-size) % blk)).reshape(-1, blk)
    within = x @ jnp.triu(jnp.ones((blk, blk), jnp.float32))
    before = jnp.cumsum(within[:, -1]) - within[:, -1]
    return (within + before[:, None]).reshape(-1)[:size].astype(jnp.int32)


def _compact(todo, cap):
    """``[cap]`` positions of the first ``cap`` true entries of ``todo`` (``size`` where there are fewer)."""
    size = todo.shape[0]
    pos = _prefix_count(todo) - 1
    put = jnp.where(todo & (pos < cap), pos, cap)
    return jnp.full(cap, size, jnp.int32).at[put].set(jnp.arange(size, dtype=jnp.int32), mode="drop")


def _gather(arrays, idx):
    size = arrays[0].shape[0]
    return tuple(a[jnp.minimum(idx, size - 1)] for a in arrays)


def _scatter(arrays, idx, valid, sub):
    put = jnp.where(valid, idx, arrays[0].shape[0])
    return tuple(a.at[put].set(s, mode="drop") for a, s in zip(arrays, sub))


def _settle(key, todo, arrays, step, stages):
    """Apply ``step(key, arrays) -> (arrays, done)`` to the ``todo`` entries until all are done.

    Rounds gather at most ``size // stages[0]`` open entries (``jnp.nonzero``
    with a static size), take one step, hand the entries still open to the
    next, smaller stage, and scatter back; the last stage steps its entries in
    a loop. Every open entry is stepped with its own fresh key.
    """
    size = todo.shape[0]
    if not stages or size <= MIN_STAGE:
        def body(st):
            i, todo, arrays = st
            new, done = step(jax.random.fold_in(key, i), arrays)
            keep = lambda a, b: jnp.where(todo, a, b)
            return i + 1, todo & ~done, tuple(keep(a, b) for a, b in zip(new, arrays))

        return jax.lax.while_loop(lambda st: jnp.any(st[1]), body, (jnp.int32(0), todo, arrays))[2]
    cap = max(MIN_STAGE, size // stages[0])

    def body(st):
        rnd, todo, arrays = st
        idx = _compact(todo, cap)
        valid = idx < size
        k_round = jax.random.fold_in(key, rnd)
        sub, done = step(jax.random.fold_in(k_round, 0), _gather(arrays, idx))
        sub = _settle(jax.random.fold_in(k_round, 1), valid & ~done, sub, step, stages[1:])
        return rnd + 1, todo.at[jnp.where(valid, idx, size)].set(False, mode="drop"), _scatter(arrays, idx, valid, sub)

    return jax.lax.while_loop(lambda st: jnp.any(st[1]), body, (jnp.int32(0), todo, arrays))[2]


def _inversion_step(u, k, pmf, cdf, n, q, r):
    """Move to ``k + 1`` where ``u`` lies beyond ``F(k)``; ``(k, pmf, cdf, moved)``."""
    go = (u > cdf) & (k < n) & ~((k > n * q) & (pmf < 1e-12 * cdf))   # (a negligible tail stops the search)
    k1 = k + 1
    pmf_next = pmf * r * (n - k) / k1
    return jnp.where(go, k1, k), jnp.where(go, pmf_next, pmf), jnp.where(go, cdf + pmf_next, cdf), go


def _scan_rows(x, op, unit):
    """Inclusive prefix ``op`` along the short last axis by doubling (Hillis-Steele): a few whole-array
    operations, where ``jnp.cumsum``/``cumprod`` (reduce-windows on XLA:CPU) cost 12-15 ns per element."""
    shift = 1
    while shift < x.shape[-1]:
        x = op(x, jnp.pad(x[..., :-shift], ((0, 0), (shift, 0)), constant_values=unit))
        x = jax.lax.optimization_barrier(x)      # each level once (fused, the levels were recomputed)
        shift *= 2
    return x


def _inversion(key, v, n, q, inv):
    """Inversion for the ``inv`` entries (``n q < 10``): ``k``, 0 elsewhere.

    The first ``INVERSION_BLOCK`` probabilities of every entry form a
    ``[size, INVERSION_BLOCK]`` block (cumulative product and sum along it): a
    search step by step, even one materialised per step, cost 3-10x more (XLA
    recomputes an unrolled chain, and pays per step for a loop). Entries beyond
    the block continue the search compacted.
    """
    dt = n.dtype
    qi, ni = jnp.where(inv, q, 0.25), jnp.where(inv, n, 1)
    r = qi / (1 - qi)
    pmf0 = jnp.exp(ni * jnp.log1p(-qi))
    jj = jnp.arange(1, INVERSION_BLOCK, dtype=dt)
    ratio = r[:, None] * jnp.maximum(ni[:, None] - jj + 1, 0) / jj
    pmfs = jnp.concatenate([pmf0[:, None], pmf0[:, None] * _scan_rows(ratio, jnp.multiply, 1.0)], axis=1)
    cdfs = pmfs @ jnp.triu(jnp.ones((INVERSION_BLOCK, INVERSION_BLOCK), dt))
    k = jnp.sum((v[:, None] > cdfs[:, :-1]) & (jj <= ni[:, None]), axis=1).astype(dt)
    last = k.astype(jnp.int32)[:, None]
    pmf, cdf = jnp.take_along_axis(pmfs, last, axis=1)[:, 0], jnp.take_along_axis(cdfs, last, axis=1)[:, 0]
    more = inv & (k >= INVERSION_BLOCK - 1) & _inversion_step(v, k, pmf, cdf, ni, qi, r)[3]

    def search(_, arrays):                      # one more step of the search
        v_, k_, pmf_, cdf_, n_, q_ = arrays
        k_, pmf_, cdf_, go = _inversion_step(v_, k_, pmf_, cdf_, n_, q_, q_ / (1 - q_))
        return (v_, k_, pmf_, cdf_, n_, q_), ~go

    k = _settle(key, more, (v, k, pmf, cdf, ni, qi), search, (STAGES[0],))[1]
    return jnp.where(inv, k, 0.0)


def _rejection(key, u, v, n, q, rej):
    """BTRS for the ``rej`` entries (``n q >= 10``): ``k``, 0 elsewhere.

    Proposal, squeeze and the log-free test (:meth:`_Btrs.accept_near`) for
    every entry; rejected and undecided ones are finished compacted.
    """
    dt = n.dtype
    qb, nb = jnp.where(rej, q, 0.5), jnp.where(rej, n, 100.0)
    bt = _Btrs(nb, qb)
    k, us, quick = bt.propose(u, v)
    ok, decided = bt.accept_near(k, us, v)
    todo = rej & ~(quick | ok)
    pending = todo & ~decided                  # a far candidate: its exact test is done compacted

    def retry(key_, arrays):                    # the pending exact test, else a fresh attempt
        k_, us_, v_, n_, q_, pend = arrays
        bt_ = _Btrs(n_, q_)
        uu, vv = jax.random.uniform(key_, (2,) + k_.shape, dt)
        kn, usn, quick_n = bt_.propose(uu, vv)
        k_, us_, v_ = jnp.where(pend, k_, kn), jnp.where(pend, us_, usn), jnp.where(pend, v_, vv)
        ok_ = (~pend & quick_n) | bt_.accept(k_, us_, v_)
        return (k_, us_, v_, n_, q_, jnp.zeros_like(pend)), ok_

    k = _settle(key, todo, (k, us, v, nb, qb, pending), retry, STAGES)[0]
    return jnp.where(rej, k, 0.0)


def binomial(key, n, p):
    """Draws ``K ~ Binomial(n, p)`` elementwise (``n`` whole numbers, ``p`` in ``[0, 1]``; float arrays).

    Each algorithm runs only if some entry needs it (``lax.cond``): the upper
    levels of a multinomial tree never need inversion, a sparse bottom level
    rarely needs BTRS.

    Returns:
        Float array of ``n``'s shape and dtype.
    """
    shape, dt = n.shape, n.dtype
    n, p = n.reshape(-1), jnp.broadcast_to(p, shape).reshape(-1).astype(dt)
    size = n.shape[0]
    if size == 0:
        return n.reshape(shape)
    flip = p > 0.5
    q = jnp.where(flip, 1 - p, p)
    trivial = (n <= 0) | (q <= 0)
    inv = ~trivial & (n * q < INVERSION_MAX_MEAN)
    rej = ~trivial & ~inv
    k_first, k_inv, k_rej = jax.random.split(key, 3)
    u, v = jax.random.uniform(k_first, (2, size), dt)
    zero = lambda *_: jnp.zeros_like(n)
    k = jax.lax.cond(jnp.any(inv), _inversion, zero, k_inv, v, n, q, inv)
    k = k + jax.lax.cond(jnp.any(rej), _rejection, zero, k_rej, u, v, n, q, rej)
    k = jnp.where(flip, n - k, k)
    return jnp.where(trivial, jnp.where(flip, n, 0.0), k).reshape(shape)


class Tree(NamedTuple):
    """A balanced binary tree over ``K`` categories, heap-ordered (node ``h`` has children ``2h, 2h+1``).

    Internal nodes are ``1 .. K-1``, category ``c`` is leaf ``K + c``. Built
    on the host once per set of masses (:func:`tree`).
    """

    frac: np.ndarray       # [K + CHUNK] float: m[2h] / m[h] for internal h (0 elsewhere)
    starts: np.ndarray     # [T] int32: first node of every chunk of CHUNK internal nodes
    ends: np.ndarray       # [T] int32: end of that chunk's level (nodes at or past it are padding)
    num_categories: int


CHUNK = 256
"""Internal nodes drawn per step of :func:`multinomial`'s loop (for every replicate of the batch)."""


def tree(masses) -> Tree:
    """The split fractions and the chunk schedule of the tree over ``masses`` (``[K]`` whole numbers).

    Masses are summed in float64 up the tree, so each fraction is one
    correctly rounded division.
    """
    m = np.asarray(masses, np.float64)
    k = m.shape[0]
    if k < 1:
        raise ValueError("at least one category is needed")
    node = np.zeros(2 * k)
    node[k:] = m
    for h in range(k - 1, 0, -1):
        node[h] = node[2 * h] + node[2 * h + 1]
    frac = np.zeros(k + CHUNK)
    inner = np.arange(1, k)
    frac[inner] = np.where(node[inner] > 0, node[2 * inner] / np.where(node[inner] > 0, node[inner], 1), 0.0)
    starts, ends = [], []
    level = 1
    while level < k:                              # depth d: nodes [2^d, min(2^(d+1), K))
        end = min(2 * level, k)
        for h0 in range(level, end, CHUNK):
            starts.append(h0)
            ends.append(end)
        level *= 2
    return Tree(frac, np.asarray(starts, np.int32), np.asarray(ends, np.int32), k)


def multinomial(key, frac, starts, ends, total, num: int, num_categories: int):
    """``num`` draws of ``Multinomial(total, masses / sum(masses))``: ``[num, K]`` float counts.

    Args:
        key: a ``jax.random`` key.
        frac, starts, ends: the arrays of :func:`tree` (device or host).
        total: trials per draw (a whole number; e.g. the sum of the masses).
        num: draws (static).
        num_categories: ``K`` (static).

    One ``while_loop`` over the chunks of :func:`tree`, level by level from the
    root: every step gathers ``CHUNK`` parent counts of all ``num`` draws,
    splits each by one :func:`binomial` with its node's fraction, and writes
    the children (the step's program is compiled once, whatever ``K``).
    """
    k = num_categories
    dt = jnp.asarray(frac).dtype if jnp.issubdtype(jnp.asarray(frac).dtype, jnp.floating) else jnp.float32
    counts = jnp.zeros((num, 2 * k + 2 * CHUNK), dt).at[:, 1].set(total)
    if k == 1:
        return counts[:, 1:2]
    frac = jnp.asarray(frac, dt)
    starts, ends = jnp.asarray(starts, jnp.int32), jnp.asarray(ends, jnp.int32)
    offs = jnp.arange(CHUNK, dtype=jnp.int32)

    def body(t, counts):
        h0, end = starts[t], ends[t]
        parent = jax.lax.dynamic_slice(counts, (0, h0), (num, CHUNK))
        parent = jnp.where(h0 + offs < end, parent, 0)
        f = jax.lax.dynamic_slice(frac, (h0,), (CHUNK,))
        left = binomial(jax.random.fold_in(key, t), parent, jnp.broadcast_to(f, parent.shape))
        children = jnp.stack([left, parent - left], axis=-1).reshape(num, 2 * CHUNK)
        return jax.lax.dynamic_update_slice(counts, children, (0, 2 * h0))

    counts = jax.lax.fori_loop(0, starts.shape[0], body, counts)
    return counts[:, k:2 * k]
