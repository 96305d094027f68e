"""Replay judges: stored absolute LLM ratings (HANNA) turned into pairwise comparisons.

Given ratings ``r[k, c, v]`` (prompt ``k``, story ``c``, rating variant ``v = 1..V``),
the pairwise probability that story ``a`` beats ``b`` is derived in one of three ways:

* ``"variant_share"``: ``p = (1/V) sum_v [1(r_av > r_bv) + 1/2 * 1(r_av = r_bv)]``,
  the share of variants where ``a`` is rated higher, ties counting 1/2 (a
  Condorcet/Borda reading of the V variants as V voters).
* ``"logistic"``: ``p = sigmoid((mean_v r_av - mean_v r_bv) / T)`` with temperature
  ``T`` (default 1: a one-point gap on the 1-5 scale gives ``p = 0.73``), the
  Bradley-Terry reading of a score (PoE eq. 1; cf. :func:`~jaxrank.judges.pointwise.pointwise_comparisons`).
* ``"gaussian"``: ``p = Phi((mean_a - mean_b) / sqrt(var_a/V + var_b/V + eps))``, the
  probability that the true mean rating of ``a`` exceeds that of ``b`` under a normal
  approximation of the variant spread (Thurstone case V); ``eps = 1e-2`` keeps it finite
  when the variants agree.

All are antisymmetric, ``p(a, b) = 1 - p(b, a)``, up to the float32 rounding of the result: the
float32 values satisfy ``|p(a, b) + p(b, a) - 1| <= 2**-24`` (each keeps float32's relative precision,
so a small ``p`` is not flushed to a multiple of ``2**-24``). ``p(a, a)`` is never used.
Ratings must be finite where they are compared (a NaN rating raises ``ValueError``
naming it; :func:`replay_comparisons` ignores the ratings of padded items).
"""

from __future__ import annotations

import math

import numpy as np

from jaxrank.comparisons import Comparisons

METHODS = ("variant_share", "logistic", "gaussian")


def replay_scores(ratings, *, variant: int | None = None) -> np.ndarray:
    """Per-item scores of an absolute-rating replay judge.

    Args:
        ratings: ``[..., N, V]`` ratings.
        variant: ``None`` for the mean over the ``V`` variants (``s = (1/V) sum_v r_v``),
            else the 0-based variant to use alone.

    Returns:
        ``float32 [..., N]`` scores.

    Raises:
        ValueError: ``ratings`` has fewer than 2 axes or ``variant`` is out of range.
    """
    r = np.asarray(ratings, np.float64)
    if r.ndim < 2:
        raise ValueError(f"ratings must be [..., N, V], got shape {r.shape}")
    if variant is None:
        return r.mean(-1).astype(np.float32)
    if not 0 <= variant < r.shape[-1]:
        raise ValueError(f"variant must be in [0, {r.shape[-1]}), got {variant}")
    return r[..., variant].astype(np.float32)


def replay_probabilities(ratings, i, j, *, method: str = "variant_share", temperature: float = 1.0) -> np.ndarray:
    """``P(i beats j)`` from ratings, for index arrays over the item axis.

    Args:
        ratings: ``[..., N, V]`` ratings of ``N`` items under ``V`` variants.
        i, j: integer ``[..., R]`` item indices (same leading axes as ``ratings``).
        method: one of :data:`METHODS` (formulas in the module docstring).
        temperature: ``T > 0`` of ``"logistic"``.

    Returns:
        ``float32 [..., R]`` probabilities in ``[0, 1]``.

    Raises:
        ValueError: unknown ``method``, ``temperature <= 0``, bad shapes, or a
            non-finite rating of a compared item (named by its index).
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    r = np.asarray(ratings, np.float64)
    i = np.asarray(i, np.int64)
    j = np.asarray(j, np.int64)
    if r.ndim < 2 or i.shape != j.shape or i.shape[:-1] != r.shape[:-2]:
        raise ValueError(f"ratings [..., N, V] and i, j [..., R] disagree: {r.shape}, {i.shape}, {j.shape}")
    if i.size and (min(i.min(), j.min()) < 0 or max(i.max(), j.max()) >= r.shape[-2]):
        raise ValueError(f"i and j must index the {r.shape[-2]} items, got values in [{min(i.min(), j.min())}, "
                         f"{max(i.max(), j.max())}]")
    ra = np.take_along_axis(r, i[..., None], axis=-2)     # [..., R, V]
    rb = np.take_along_axis(r, j[..., None], axis=-2)
    for side, g, idx in (("i", ra, i), ("j", rb, j)):
        bad = np.argwhere(~np.isfinite(g))
        if bad.size:
            *lead, pair, v = bad[0].tolist()
            item = int(idx[tuple(lead) + (pair,)])
            where = ", ".join(map(str, lead + [item, v]))
            raise ValueError(f"ratings[{where}] is {g[tuple(bad[0])]} (item {item}, variant {v}, compared as "
                             f"{side} in pair {pair}); replay judges need finite ratings: drop or fill it")
    if method == "variant_share":
        p = ((ra > rb) + 0.5 * (ra == rb)).mean(-1)
    elif method == "logistic":
        p = 0.5 * (1.0 + np.tanh(0.5 * (ra.mean(-1) - rb.mean(-1)) / temperature))
    else:
        v = r.shape[-1]
        sd = np.sqrt(ra.var(-1) / v + rb.var(-1) / v + 1e-2)
        z = (ra.mean(-1) - rb.mean(-1)) / sd
        p = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0))) if z.size else z
    return np.asarray(p, np.float32)


def all_pairs(mask) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every unordered pair ``a < b`` of real items per context, padded.

    Args:
        mask: ``bool [K, N]`` real items.

    Returns:
        ``(i, j, weight)`` each ``[K, N(N-1)/2]``; weight 0 where a pair touches padding.
    """
    m = np.asarray(mask, bool)
    a, b = np.triu_indices(m.shape[-1], k=1)
    i = np.broadcast_to(a, m.shape[:-1] + a.shape).astype(np.int32)
    j = np.broadcast_to(b, m.shape[:-1] + b.shape).astype(np.int32)
    weight = (m[..., a] & m[..., b]).astype(np.float32)
    return i, j, weight


def replay_comparisons(ratings, mask, *, method: str = "variant_share", temperature: float = 1.0) -> Comparisons:
    """A padded batch of comparisons (all pairs of every context) from stored ratings.

    Args:
        ratings: ``[K, N, V]`` ratings (e.g. :attr:`jaxrank.data.LLMRatings.ratings`).
        mask: ``bool [K, N]`` real items.
        method, temperature: as :func:`replay_probabilities`.

    Returns:
        :class:`~jaxrank.comparisons.Comparisons` with batch shape ``[K]`` and
        ``R = N(N-1)/2`` comparisons per context, usable by every scorer.

    Raises:
        ValueError: a non-finite rating of a real item (as :func:`replay_probabilities`).
    """
    i, j, weight = all_pairs(mask)
    r = np.asarray(ratings, np.float64)
    m = np.asarray(mask, bool)
    if r.ndim == 3 and m.shape == r.shape[:2]:
        r = np.where(m[..., None], r, 0.0)                 # padded items' ratings are never read
    p = replay_probabilities(r, i, j, method=method, temperature=temperature)
    return Comparisons.from_pairs(i, j, p, num_items=np.asarray(mask).shape[-1], weight=weight,
                                  item_mask=np.asarray(mask, bool))
