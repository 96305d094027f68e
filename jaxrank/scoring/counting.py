"""Counting scorers: win ratio and average probability (METHODS.md §2; PoE eq. 6)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _batching, _graph, _validate
from jaxrank.comparisons import Comparisons

__all__ = ["win_ratio", "average_probability", "decisions"]


def decisions(p, threshold=0.5):
    """Hard decisions ``1[p > tau]``; exactly ``p == tau`` is a tie and gives 0.5."""
    return jnp.where(p > threshold, 1.0, jnp.where(p < threshold, 0.0, 0.5)).astype(p.dtype)


def _ratio(c: Comparisons, x):
    """``[sum_{k: i_k = n} w x + sum_{k: j_k = n} w (1 - x)] / sum_{k touching n} w``."""
    e = _graph.edges(c)
    w, wx = _graph.reduce(e, c.weight, c.weight * x)
    won = _graph.item_sums(e, wx, w - wx)
    games = _graph.item_sums(e, w, w)
    ratio = won / jnp.where(games > 0, games, 1)
    return jnp.where((games > 0) & c.item_mask, ratio, 0.5)


@jax.jit
def _counting(c, threshold, hard):
    # ``hard`` is traced: win ratio and average probability share one compiled program.
    one = lambda cc, t: _ratio(cc, jnp.where(hard, decisions(cc.p, t), cc.p))
    return _batching.batched(one, c, jnp.broadcast_to(jnp.asarray(threshold, c.p.dtype), c.batch_shape))


def _counting_bucketed(c, threshold, hard):
    """:func:`_counting` on ``c`` padded to its bucket (``_batching.bucketed``: one program per bucket)."""
    fn = lambda cc, t, h: (_counting(cc, t, h),)
    t = threshold if isinstance(threshold, jax.Array) else np.asarray(threshold, c.p.dtype)
    # kept on disk with its compiled executable: loading it runs no lowering, so no SciPy import (no LAPACK here)
    return _batching.bucketed(fn, "counting", c, t, np.asarray(hard))[0]


def win_ratio(c: Comparisons, *, threshold=0.5) -> jax.Array:
    """Fraction of games won (PoE eq. 6; llm-comparative-assessment §3.3).

    A comparison is won by A when ``p > threshold`` and by B when
    ``p < threshold``; ``p == threshold`` counts half to each. Use
    :func:`jaxrank.debias_threshold` for the bias-corrected ``tau`` (eq. 9-10).

    Args:
        c: comparisons, any batch shape.
        threshold: decision threshold ``tau`` in ``[0, 1]`` (scalar or ``[...]`` per context).

    Returns:
        ``[..., N]`` win ratios in ``[0, 1]``; items in no comparison and padded
        items get the neutral 0.5.

    Raises:
        ValueError: ``c`` is not a :class:`~jaxrank.Comparisons`, or ``threshold``
            is not a finite number in ``[0, 1]``.
    """
    _validate.comparisons("c", c)
    _validate.number("threshold", threshold, low=0.0, high=1.0, array=True, batch_shape=c.batch_shape)
    return _counting_bucketed(c, threshold, True)


def average_probability(c: Comparisons) -> jax.Array:
    """Average probability of winning (METHODS.md §2, "avg-prob").

    ``s_n = [sum_{k: i_k = n} w_k p_k + sum_{k: j_k = n} w_k (1 - p_k)] / sum_{k touching n} w_k``.

    Returns:
        ``[..., N]`` in ``[0, 1]``; items in no comparison and padded items get 0.5.
    """
    _validate.comparisons("c", c)
    return _counting_bucketed(c, 0.5, False)
