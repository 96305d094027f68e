"""Exact ties in solved scores: scores the solve cannot tell apart come back equal (issue 32).

Private to the scoring package: :mod:`jaxrank.scoring.gaussian` (PoE-g, a Cholesky solve) and
:mod:`jaxrank.scoring.soft_bt` (soft and hard Bradley-Terry, Newton's method) share it.

Scores equal in exact arithmetic are common with hard decisions: two candidates with the same wins against
the same opponents, or, in a complete balanced design (every pair compared equally often), any two with the
same number of wins (Bradley-Terry's win counts are then sufficient, and PoE-g's scores are the win ratio up to
an affine map). A float32 solve returns them a few ulps apart, and apart differently for different batch shapes
(LAPACK's blocking, XLA's fusion): a rank statistic then ranks them apart, by rounding. On a TopicalChat slice
(every ordered pair of 6 responses judged) the efficiency sweep read PoE-g-hard 43.0 against 47.0 solved alone,
and BT 47.0 against 46.5, where the exact estimates rank as the win ratio does (45.5).

The remedy: an estimate of each score's forward error (the caller's per-item term: a correction step, or the
gradient's rounding) plus one rounding of the largest score (:func:`rounding_floor`), and :func:`tie_scores`,
which returns every group of scores within those tolerances at its mean.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

TIE_SAFETY = 4.0
"""How many times the estimated forward error of a solve two scores may differ by and still be tied."""


def rounding_floor(s, terms=1):
    """``sqrt(terms) eps max_i |s_i|`` (float): the rounding of the scores ``s`` themselves, ``eps`` the dtype's
    machine epsilon, for scores that ``terms`` roundings of their own size reached. No gradient.

    One (the default) for both solvers: each score's last rounding is one ulp of ``max |s|`` at most, while the
    solve's own error is the caller's per-item term. For a Newton iterate (Bradley-Terry, ``soft_bt._tied``)
    that is the update ``x + step`` and the centring, the per-item term the gradient's rounding over the item's
    curvature; a floor of ``sqrt(n + 1) eps max |s|`` there tied football teams whose exact scores differ by
    5.8e-5 (Monaco and Sint Maarten; 316 teams, scores up to 6.5, a float32 solve within 2.2e-6 of the float64
    optimum). For a Cholesky solve (PoE-g, :func:`tolerance`) the per-item term is the item's own
    iterative-refinement correction."""
    eps = jnp.finfo(s.dtype).eps
    return math.sqrt(terms) * eps * jnp.max(jnp.abs(jax.lax.stop_gradient(s)), initial=0.0)


def tolerance(correction, s):
    """``(TIE_SAFETY eps max_i |s_i|, TIE_SAFETY |correction|)``: :func:`tie_scores`' ``tol`` and ``item_tol`` for
    the scores ``s`` of a linear solve, ``correction`` ``[N]`` the step one more iteration of the solve
    (iterative refinement) would make at ``s`` (the a-posteriori estimate of each score's forward error, as
    LAPACK's ``xPORFS`` forms it). Two scores ``a``, ``b`` are then tied where they are at most
    ``TIE_SAFETY (|correction_a| + |correction_b| + eps max |s|)`` apart: each score's own error estimate plus one
    rounding of the largest score (:func:`rounding_floor`'s default), as Bradley-Terry's rule is built.

    A tolerance from the largest correction of all items (and a floor of ``sqrt(n + 1) eps max |s|``) let one
    poorly determined item set it for every pair: on the football results PoE-g tied teams whose float64 scores
    differ by 2.0e-5 (Mozambique and Quebec) and 3.0e-5 (Bolivia and Libya, hard decisions), several times the
    float32 solve's own error (1.7e-6, 4.2e-6). No gradient flows through it."""
    c = jnp.abs(jax.lax.stop_gradient(correction))
    return TIE_SAFETY * rounding_floor(s), TIE_SAFETY * c


def tie_scores(s, mask, tol, item_tol=None, cap=None):
    """Scores that the solve cannot tell apart, made exactly equal: ``s`` with every tie group at its mean.

    Sorted, the real items (``mask``) form groups of consecutive scores at most ``tol`` apart (``tol`` the
    solve's precision, :func:`tolerance`); with ``item_tol`` (``[N]``) two scores ``a``, ``b`` are tied where
    they are at most ``tol + item_tol_a + item_tol_b`` apart, and with ``cap`` never where they are more than
    ``cap`` apart. A group does not chain: scanning up from its first (lowest) score, it closes at the first score
    further than that from the first (or from its lower neighbour), so every group spans at most the tolerance
    (comparing neighbours only, a star of 200 leaves whose exact scores step by 2e-6 had merged into one group
    spanning 4e-4). Each item of a group gets the group's mean. Scores equal in exact arithmetic are then equal
    in the result whatever the batch shape or the LAPACK path that solved them, so a rank statistic with average
    ranks (:func:`jaxrank.metrics.spearman`, ``scipy.stats.spearmanr``) sees them tied;
    two scores further apart than ``tol`` (all the solve resolves) are never in one group. Items outside
    ``mask`` (padded, or in no comparison) keep their scores exactly.

    The value moves by at most its group's span; the derivative is that of ``s`` (straight through): at an exact tie
    each item's score still moves on its own when the data move. ``O(N log N)`` (a sort; the grouping is a
    sequential scan of ``N`` steps).
    """
    n = s.shape[-1]
    key = jax.lax.stop_gradient(jnp.where(mask, s, jnp.inf))
    order = jnp.argsort(key)
    srt = key[order]
    tol = jax.lax.stop_gradient(tol)
    it = None if item_tol is None else jax.lax.stop_gradient(item_tol)[order]
    step = _group_starts(srt, tol, it, cap)
    group = jnp.zeros(n, jnp.int32).at[order].set(jnp.cumsum(step))
    group = jnp.where(mask, group, n)                       # outside the mask: a segment of its own, dropped
    s0 = jax.lax.stop_gradient(s)
    size = jax.ops.segment_sum(jnp.ones_like(s0), group, n + 1)[group]
    mean = jax.ops.segment_sum(jnp.where(mask, s0, 0), group, n + 1)[group] / jnp.maximum(size, 1)
    # the value is exactly ``mean`` (``s - s0`` is exactly 0), the derivative is ``s``'s
    return jnp.where(mask & (size > 1), mean + (s - s0), s)


def _group_starts(srt, tol, it, cap):
    """``[N]`` int32: 1 where the sorted score ``srt[k]`` starts a new group (:func:`tie_scores`), else 0.

    ``k`` starts one where it is further than the pair's tolerance (``tol``, plus ``it`` of both with
    ``item_tol``, at most ``cap``) from its lower neighbour or from the current group's first score."""
    it = jnp.zeros_like(srt) if it is None else it
    cap = jnp.inf if cap is None else cap
    pair_tol = lambda x, y: jnp.minimum(tol + x + y, cap)

    def body(carry, k):
        first, first_it = carry
        new = (srt[k] - srt[k - 1] > pair_tol(it[k], it[k - 1])) | (srt[k] - first > pair_tol(it[k], first_it))
        return (jnp.where(new, srt[k], first), jnp.where(new, it[k], first_it)), new.astype(jnp.int32)

    _, starts = jax.lax.scan(body, (srt[0], it[0]), jnp.arange(1, srt.shape[0]))
    return jnp.concatenate([jnp.zeros(1, jnp.int32), starts])
