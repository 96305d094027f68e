"""Positional bias: measure it and remove it (llm-comparative-assessment §3.5, eq. 8-10).

* :func:`positional_bias` -- ``P(A)``, the fraction of decisions for position A (eq. 8).
* :func:`debias_threshold` -- the threshold ``tau`` for which ``P(A) = P(B) = 0.5`` (eq. 9-10).
* :func:`threshold_debias` -- reweight ``p^ = p (1 - tau) / (p (1 - tau) + tau (1 - p))`` (eq. 9's
  ``alpha p / (alpha p + 1 - p)``, ``alpha = (1 - tau) / tau``), so that ``p^ > 0.5`` exactly when ``p > tau``:
  every scorer can then consume debiased probabilities.
* :func:`permutation_average` -- average both orders of a pair:
  ``p~_ij = (p_ij + 1 - p_ji) / 2`` (METHODS.md §1).

The PoE scorers have their own debiasing (``beta = mean p`` for PoE-g,
``gamma`` for PoE-BT): see their ``debias`` argument.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxrank import _batching, _graph, _validate
from jaxrank.comparisons import Comparisons
from jaxrank.scoring.counting import decisions

__all__ = ["positional_bias", "debias_threshold", "threshold_debias", "permutation_average"]


def positional_bias(c: Comparisons, *, threshold=0.5) -> jax.Array:
    """``P(A)``: weighted fraction of comparisons decided for position A (eq. 8).

    A decision for A is ``p > threshold``; ``p == threshold`` counts half.

    Args:
        c: comparisons, any batch shape.
        threshold: ``tau`` in ``[0, 1]``, scalar or ``[...]`` per context.

    Returns:
        ``[...]`` one value per context; 0.5 for a context with no comparisons.

    Raises:
        ValueError: a bad ``c`` or ``threshold`` (naming it).
    """
    _validate.comparisons("c", c)
    _validate.number("threshold", threshold, low=0.0, high=1.0, array=True, batch_shape=c.batch_shape)
    return _positional_bias(c, threshold)


@jax.jit
def _positional_bias(c, threshold):
    threshold = jnp.asarray(threshold, c.p.dtype)[..., None]
    total = jnp.sum(c.weight, axis=-1)
    pa = jnp.sum(c.weight * decisions(c.p, threshold), axis=-1)
    return jnp.where(total > 0, pa / jnp.where(total > 0, total, 1), 0.5)


def _weighted_median_one(p, w):
    # Zero-weight (padded) comparisons sort last, so they never become the "next" value.
    order = jnp.argsort(jnp.where(w > 0, p, jnp.inf))
    ps, ws = p[order], w[order]
    cw = jnp.cumsum(ws)
    half = 0.5 * cw[-1]
    k = jnp.argmax(cw >= half)
    m = ps[k]                                   # the weighted median
    # P(A) is a step function of tau, falling from 1 to 0: at the median m it is 1/2 plus or minus half the
    # weight tied at m, in the gap below m above 1/2, in the gap above m at most 1/2, and further out further
    # from 1/2. So the most balancing tau is one of m and the midpoints of the gaps next to it.
    live = w > 0
    above = jnp.min(jnp.where(live & (p > m), p, jnp.inf))
    below = jnp.max(jnp.where(live & (p < m), p, -jnp.inf))
    # Without a tie at m, m is within half of one comparison's weight of balance (a weighted median,
    # P(p > tau) <= 1/2 <= P(p >= tau)) unless the weight splits exactly at m, where the gap above gives 1/2;
    # with a tie (a sampling judge's discrete p) the tied weight can leave m far off: compare all three.
    tied = jnp.sum(live & (p == m)) > 1
    exact = jnp.isclose(cw[k], half)
    cand = jnp.stack([m, 0.5 * (m + above), 0.5 * (below + m)])
    ok = jnp.stack([True, jnp.isfinite(above) & (tied | exact), jnp.isfinite(below) & tied])
    total = jnp.where(cw[-1] > 0, cw[-1], 1)
    pa = jnp.sum(w * decisions(p, cand[:, None]), axis=-1) / total
    tau = cand[jnp.argmin(jnp.where(ok, jnp.abs(pa - 0.5), jnp.inf))]    # ties: the median first
    return jnp.where(cw[-1] > 0, tau, 0.5)


def debias_threshold(c: Comparisons) -> jax.Array:
    """Threshold ``tau`` with ``P(p > tau) = 0.5`` over the comparisons (eq. 9-10).

    The weighted median ``m`` of ``p`` (``P(p > tau) <= 1/2 <= P(p >= tau)``),
    or the midpoint between it and the next distinct value: when the weight
    splits exactly in half, the midpoint of the two central values (``P(A) =
    0.5``); when several comparisons tie at ``m`` (a sampling judge's discrete
    probabilities), the tied weight can leave ``P(A)`` (:func:`positional_bias`,
    ``p == tau`` counting half) far from 0.5 at ``m``, and of ``m`` and the
    midpoints of the gaps below and above it the one with ``P(A)`` closest to
    0.5 is taken (``P(A)`` falls with ``tau``, so no other threshold is
    closer). ``P(A) = P(B) = 0.5`` as closely as the data allow with equal
    weights; with unequal weights and no tie at ``m``, within half of one
    comparison's weight.

    Returns:
        ``[...]`` one threshold per context (0.5 for an empty context).
    """
    return _debias_threshold(_validate.comparisons("c", c))


@jax.jit
def _debias_threshold(c):
    p = c.p
    w = c.weight
    if p.shape[-1] == 0:   # no comparison slots (R = 0, a static shape): no data, no bias measured
        return jnp.full(p.shape[:-1], 0.5, p.dtype)
    fn = _weighted_median_one
    for _ in range(p.ndim - 1):
        fn = jax.vmap(fn)
    return fn(p, w)


def threshold_debias(c: Comparisons, tau=None) -> Comparisons:
    """Reweight probabilities so that ``0.5`` plays the role of ``tau`` (eq. 9).

    ``p^ = alpha p / (alpha p + 1 - p)``, ``alpha = (1 - tau) / tau``; ``p^``
    is monotone in ``p`` and ``p^ > 0.5`` exactly when ``p > tau``. Computed as
    ``p (1 - tau) / (p (1 - tau) + tau (1 - p))``, whose two terms are the same
    product at ``p == tau``: there ``p^`` is exactly 0.5 (a tie, as
    :func:`positional_bias` counts ``p == tau``), where ``alpha``'s rounding
    gave 0.50000006 in float32, a win.

    Args:
        c: comparisons.
        tau: ``[...]`` thresholds in ``(0, 1)`` (default :func:`debias_threshold`,
            which may be 0 or 1 on hard decisions: ``p == tau`` still maps to 0.5,
            every ``p`` on the other side to 0 or 1).

    Raises:
        ValueError: a bad ``c``, or ``tau`` not a finite number in ``(0, 1)`` (naming it).
    """
    _validate.comparisons("c", c)
    if tau is not None:
        _validate.number("tau", tau, low=0.0, high=1.0, low_open=True, high_open=True, array=True,
                         batch_shape=c.batch_shape)
    return _threshold_debias(c, tau)


@jax.jit
def _threshold_debias(c, tau):
    if tau is None:
        tau = _debias_threshold(c)
    tau = jnp.asarray(tau, c.p.dtype)[..., None]
    a, b = c.p * (1 - tau), tau * (1 - c.p)      # equal products at p == tau: p_hat exactly 0.5
    # a + b = 0 only where p == tau is 0 or 1 (a default tau at the end of the range): a tie too
    p_hat = jnp.where(a + b > 0, a / jnp.where(a + b > 0, a + b, 1), 0.5).astype(c.p.dtype)
    return dataclasses.replace(c, p=p_hat)


def _permutation_average_one(c):
    w = c.weight
    if _graph.use_dense(c.num_items, c.i.shape[-1]):
        wsum, psum = _graph.reduce(_graph.edges(c, dense=True), w, w * c.p)
        rev_w = wsum[c.j, c.i]
        rev_p = psum[c.j, c.i]
    else:
        rev_w, rev_p = _reverse_sums_sparse(c.i, c.j, w, w * c.p)
    rev_p = rev_p / jnp.where(rev_w > 0, rev_w, 1)
    return jnp.where(rev_w > 0, 0.5 * (c.p + 1 - rev_p), c.p)


def _reverse_sums_sparse(i, j, *xs):
    """For every comparison ``k``, the sums of ``xs`` over the comparisons of the ordered pair ``(j_k, i_k)``, in
    ``O(R log R)`` (no ``[N, N]`` array): the comparisons sorted by pair, summed per pair, and each reverse pair
    found by a binary search over the sorted pairs."""
    r = i.shape[0]
    if r == 0:
        return xs
    order = jnp.lexsort((j, i))                                   # by i, then j
    i_s, j_s = i[order], j[order]
    new = jnp.concatenate([jnp.ones(1, bool), (i_s[1:] != i_s[:-1]) | (j_s[1:] != j_s[:-1])])
    group = jnp.cumsum(new) - 1                                   # pair id of every sorted comparison
    sums = [jax.ops.segment_sum(x[order], group, r) for x in xs]
    a, b = j, i                                                   # the reverse pair of every comparison
    lo, hi = jnp.zeros(r, jnp.int32), jnp.full(r, r, jnp.int32)
    for _ in range(max(1, int(r).bit_length())):                  # lower bound of (a, b) among the sorted pairs
        mid = (lo + hi) // 2
        m = jnp.minimum(mid, r - 1)
        less = (i_s[m] < a) | ((i_s[m] == a) & (j_s[m] < b))
        open_ = lo < hi
        lo = jnp.where(open_ & less, mid + 1, lo)
        hi = jnp.where(open_ & ~less, mid, hi)
    pos = jnp.minimum(lo, r - 1)
    found = (lo < r) & (i_s[pos] == a) & (j_s[pos] == b)
    return tuple(jnp.where(found, s[group[pos]], 0) for s in sums)


def permutation_average(c: Comparisons) -> Comparisons:
    """Average each comparison with its reverse order (permutation debiasing).

    ``p~_k = (p_k + 1 - mean p_(j_k, i_k)) / 2`` where the reverse comparison
    ``(j_k, i_k)`` exists (weighted mean over repeats); comparisons without a
    reverse keep their ``p``. On a symmetric set this removes any constant
    positional offset. Works in the comparisons' edge space: ``[N, N]`` pair
    sums on a dense pool, a sort and binary search over the ``R`` comparisons
    otherwise (``O(R log R)``, no ``N x N`` array).
    """
    return _permutation_average(_validate.comparisons("c", c))


@jax.jit
def _permutation_average(c):
    return dataclasses.replace(c, p=_batching.batched(_permutation_average_one, c))
