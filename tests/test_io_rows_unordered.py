"""``comparisons_from_rows(aggregate="unordered")`` and the text-id fast path of the numbering (issue 33).

References are independent: a row-by-row Python accumulation of the unordered pairs, SciPy's maximisation of the
per-row Bradley-Terry likelihood in float64 (no position bias), and the general per-id numbering.
"""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings

import jaxrank as jr
from _fixtures_rows import ROW_LISTS, per_row_ml_scores, row_columns, simulated_rows
from jaxrank.io import _rows, comparisons_from_rows


def _python_unordered(a, b, p, w):
    """``{frozenset pair: (sum w, sum w P(first-numbered item better))}``, one row at a time."""
    order = {}
    for x, y in zip(a, b):
        order.setdefault(x, len(order))
        order.setdefault(y, len(order))
    out = {}
    for x, y, q, v in zip(a, b, p, w):
        first, second, q = (x, y, q) if order[x] < order[y] else (y, x, 1 - q)
        s, sp = out.get((first, second), (0.0, 0.0))
        out[(first, second)] = (s + v, sp + v * q)
    return {k: v for k, v in out.items() if v[0] > 0}


@settings(max_examples=40, deadline=None)
@given(ROW_LISTS)
def test_rows_of_one_pair_in_either_order_sum_into_one_comparison(rows):
    a, b, p, w = row_columns(rows)
    if not any(v > 0 for v in w):
        return
    c, names = comparisons_from_rows(a, b, p, weight=w, aggregate="unordered")
    i, j, q, v = (np.asarray(x, np.float64) for x in (c.i, c.j, c.p, c.weight))
    assert (i < j).all()                                   # the item numbered first is in position A
    got = {(names[int(x)], names[int(y)]): (vv, vv * qq) for x, y, qq, vv in zip(i, j, q, v)}
    ref = _python_unordered(a, b, p, w)
    assert set(got) == set(ref)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-6)
    assert names == list(dict.fromkeys(x for pair in zip(a, b) for x in pair))


def test_unordered_pairs_give_the_per_row_maximum_likelihood_scores():
    """ML Bradley-Terry without a position bias (ties half a win) on the unordered pairs equals SciPy's maximum
    of the per-row likelihood in float64; both orders of every pair occur."""
    n, m = 14, 1200
    ia, ib, p = simulated_rows(5, n, m)
    w = np.random.default_rng(6).choice([0.5, 1.0, 2.0], m)
    c, names = comparisons_from_rows([f"n{k}" for k in ia], [f"n{k}" for k in ib], p, weight=w,
                                     aggregate="unordered")
    ordered, _ = comparisons_from_rows([f"n{k}" for k in ia], [f"n{k}" for k in ib], p, weight=w)
    assert c.num_comparisons <= n * (n - 1) // 2 < ordered.num_comparisons
    with warnings.catch_warnings():
        warnings.simplefilter("error")                     # strongly connected: finite ML scores, no warning
        got = np.asarray(jr.fit_poe_bradley_terry(c, eps=0.0).scores, np.float64)

    ref = per_row_ml_scores(ia, ib, p, n, weight=w)[[int(k[1:]) for k in names]]
    np.testing.assert_allclose(got - got.mean(), ref - ref.mean(), atol=2e-4)


def test_unordered_keeps_exact_ties():
    """A balanced round robin, every game drawn both ways: every item's ML score is exactly 0."""
    teams = [f"x{k}" for k in range(6)]
    a = [x for x in teams for y in teams if x != y]
    b = [y for x in teams for y in teams if x != y]
    c, _ = comparisons_from_rows(a, b, np.full(len(a), 0.5), aggregate="unordered")
    assert c.num_comparisons == 15
    np.testing.assert_array_equal(np.asarray(jr.fit_poe_bradley_terry(c, eps=0.0).scores), 0.0)


@pytest.mark.parametrize("bad", ["pairs", "Unordered", ""])
def test_an_unknown_aggregate_is_an_error(bad):
    with pytest.raises(ValueError, match="aggregate must be"):
        comparisons_from_rows(["a"], ["b"], [1.0], aggregate=bad)


def test_ordered_is_the_default_and_false_is_one_comparison_a_row():
    a, b, p = ["a", "b", "a", "a"], ["b", "a", "b", "c"], [1.0, 0.5, 0.0, 1.0]
    for agg, r in ((True, 3), ("ordered", 3), ("unordered", 2), (False, 4)):
        assert comparisons_from_rows(a, b, p, aggregate=agg)[0].num_comparisons == r


def test_text_ids_are_numbered_as_the_general_path_numbers_them():
    """All-text ids take the fast path: stripped, merged when they read alike, a blank one named by its row."""
    a, b = [" x", "y", "x ", "z"], ["y", "z", "w", " y"]
    names, ia, ib = _rows._item_codes(a, b)
    assert names == ["x", "y", "z", "w"]
    assert ia.tolist() == [0, 1, 0, 2] and ib.tolist() == [1, 2, 3, 1]
    names, ia, ib = _rows._item_codes(["p", "q"], ["q", "r"])
    assert names == ["p", "q", "r"] and ia.tolist() == [0, 1] and ib.tolist() == [1, 2]
    with pytest.raises(ValueError, match=r"item_b, row 1: '  ' is empty"):
        _rows._item_codes(["a", "b"], ["b", "  "])


def test_a_list_column_is_read_not_copied_or_changed():
    a, b = ["a", "b"], ["b", "c"]
    assert _rows._column("item_a", a) is a
    comparisons_from_rows(a, b, [1.0, 0.0], aggregate="unordered")
    assert a == ["a", "b"] and b == ["b", "c"]
