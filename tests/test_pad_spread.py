"""Bucket padding as spread self-pairs (``_batching.pad``, ``stack_contexts``): where the padding points changes no score.

A padded comparison has weight 0; the old layout put every one at ``0 vs 0``, the new one at ``k vs k`` with ``k`` the
slot modulo the real items. Each scorer must give the same scores for both layouts and for the unpadded pool.
"""

import numpy as np
import pytest

import jaxrank as jr
from jaxrank import _batching


def _pool(n=40, r=160, seed=0):
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, r)
    j = (i + 1 + rng.integers(0, n - 1, r)) % n
    s = rng.normal(0, 1, n)
    p = 1 / (1 + np.exp(-(s[i] - s[j]) + rng.normal(0, 0.5, r)))
    return jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n)


def _old_layout(c, n, r):
    """The former padding: ``0 vs 0`` of weight 0 (built here by NumPy, independently of ``_batching.pad``)."""
    extra = r - c.i.shape[-1]
    z = np.zeros(extra, np.int32)
    return jr.Comparisons(i=np.concatenate([np.asarray(c.i), z]), j=np.concatenate([np.asarray(c.j), z]),
                          p=np.concatenate([np.asarray(c.p), np.full(extra, 0.5, np.float32)]),
                          weight=np.concatenate([np.asarray(c.weight), np.zeros(extra, np.float32)]),
                          item_mask=np.concatenate([np.asarray(c.item_mask), np.zeros(n - c.num_items, bool)]),
                          num_items=n)


def test_pad_writes_spread_self_pairs():
    c = _pool()
    out = _batching.pad(c, 48, 256)
    i, j, w = np.asarray(out.i), np.asarray(out.j), np.asarray(out.weight)
    np.testing.assert_array_equal(i[:160], np.asarray(c.i))
    np.testing.assert_array_equal(i[160:], j[160:])                 # self-pairs
    np.testing.assert_array_equal(i[160:], np.arange(160, 256) % 40)  # spread over the real items only
    assert np.all(w[160:] == 0) and not np.asarray(out.item_mask)[40:].any()


@pytest.mark.parametrize("scorer", ["win_ratio", "average_probability", "poe_gaussian", "poe_bradley_terry",
                                    "bradley_terry"])
def test_scores_do_not_depend_on_where_padding_points(scorer):
    from jaxrank import scorer_table

    c = _pool()
    spread = _batching.pad(c, 48, 256)
    old = _old_layout(c, 48, 256)
    s_spread = np.asarray(scorer_table.score(scorer, spread))[:40]
    s_old = np.asarray(scorer_table.score(scorer, old))[:40]
    s_plain = np.asarray(scorer_table.score(scorer, c))
    np.testing.assert_allclose(s_spread, s_old, atol=1e-5)
    np.testing.assert_allclose(s_spread, s_plain, atol=1e-4)


def test_stack_contexts_spreads_padding_per_context():
    a, b = _pool(10, 30, 1), _pool(20, 50, 2)
    st = jr.stack_contexts([a, b])
    i, j = np.asarray(st.i), np.asarray(st.j)
    np.testing.assert_array_equal(i[0, 30:], np.arange(30, 50) % 10)
    np.testing.assert_array_equal(j[0, 30:], i[0, 30:])
    s = np.asarray(jr.poe_bradley_terry(st))
    np.testing.assert_allclose(s[0, :10], np.asarray(jr.poe_bradley_terry(a)), atol=1e-4)
    np.testing.assert_allclose(s[1], np.asarray(jr.poe_bradley_terry(b)), atol=1e-4)
