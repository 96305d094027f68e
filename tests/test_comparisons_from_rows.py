"""``jaxrank.io.comparisons_from_rows``: raw rows (evalica's input form) to one context's comparisons.

References are independent: a row-by-row Python accumulation of the ordered pairs, :func:`read_comparisons`'s
own row loop for the numbering, and SciPy's maximisation of the per-row Bradley-Terry likelihood in float64.
"""

import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings

import jaxrank as jr
from _fixtures_rows import ROW_LISTS, per_row_ml_scores, row_columns, simulated_rows
from jaxrank.io import comparisons_from_rows, read_comparisons


def _python_pairs(a, b, p, w):
    """Ordered pairs by a plain dictionary, row by row: ``{(name_a, name_b): (sum w, sum w p)}``."""
    out = {}
    for x, y, q, v in zip(a, b, p, w):
        s, sp = out.get((str(x).strip(), str(y).strip()), (0.0, 0.0))
        out[(str(x).strip(), str(y).strip())] = (s + v, sp + v * q)
    return {k: v for k, v in out.items() if v[0] > 0}


def _table(c, names):
    i, j, p, w = (np.asarray(x, np.float64) for x in (c.i, c.j, c.p, c.weight))
    return {(names[int(x)], names[int(y)]): (v, v * q) for x, y, q, v in zip(i, j, p, w)}


@settings(max_examples=40, deadline=None)
@given(ROW_LISTS)
def test_rows_of_one_ordered_pair_sum_into_one_weighted_comparison(rows):
    """Invariant: each ordered pair's summed weight and weighted mean of ``p`` equal a Python accumulation."""
    a, b, p, w = row_columns(rows)
    if not any(v > 0 for v in w):
        with pytest.raises(ValueError, match="weight"):
            comparisons_from_rows(a, b, p, weight=w)
        return
    c, names = comparisons_from_rows(a, b, p, weight=w)
    got, ref = _table(c, names), _python_pairs(a, b, p, w)
    assert set(got) == set(ref)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-6)
    assert names == list(dict.fromkeys(x for pair in zip(a, b) for x in pair))


def test_numbering_matches_read_comparisons_and_unaggregated_rows_are_the_rows(tmp_path):
    rng = np.random.default_rng(0)
    teams = [" x", "x", 1, "1", "y", "z", 2.5]         # " x" is "x", 1 is "1": one item each
    a = [teams[k] for k in rng.integers(0, 7, 60)]
    b = [teams[(k + d) % 7] for k, d in zip([teams.index(x) for x in a], rng.integers(1, 7, 60))]
    keep = [str(x).strip() != str(y).strip() for x, y in zip(a, b)]
    a = [x for x, k in zip(a, keep) if k]
    b = [y for y, k in zip(b, keep) if k]
    p = rng.choice([0.0, 0.5, 1.0], len(a))
    df = pd.DataFrame({"item_a": pd.Series(a, dtype=object), "item_b": pd.Series(b, dtype=object), "p": p})
    t = read_comparisons(df)
    c, names = comparisons_from_rows(a, b, p, aggregate=False)
    assert names == t.items[0]
    for f in ("i", "j", "p", "weight"):
        np.testing.assert_array_equal(np.asarray(getattr(c, f)), np.asarray(getattr(t.comparisons, f))[0])


def test_typed_pandas_series_and_lists_give_the_same_comparisons():
    rng = np.random.default_rng(1)
    names = np.array([f"team {k}" for k in range(30)], object)
    ia = rng.integers(0, 30, 500)
    ib = (ia + rng.integers(1, 30, 500)) % 30
    p = rng.choice([0.0, 0.5, 1.0], 500)
    c1, n1 = comparisons_from_rows(names[ia].tolist(), names[ib].tolist(), p)
    for dtype in ("string[pyarrow]", "string[python]", "category"):
        c2, n2 = comparisons_from_rows(pd.Series(names[ia], dtype=dtype), pd.Series(names[ib], dtype=dtype), p)
        assert n1 == n2
        for f in ("i", "j", "p", "weight"):
            np.testing.assert_array_equal(np.asarray(getattr(c1, f)), np.asarray(getattr(c2, f)))
    c3, n3 = comparisons_from_rows(pd.Series(ia), pd.Series(ib), p)       # integer ids
    assert n3 == [str(x) for x in dict.fromkeys(np.ravel(np.column_stack([ia, ib])).tolist())]


def test_summed_pairs_give_the_per_row_maximum_likelihood_scores():
    """ML Bradley-Terry (ties half a win) on the summed pairs equals SciPy's maximum of the per-row likelihood."""
    n, m = 12, 900
    ia, ib, p = simulated_rows(2, n, m)
    c, names = comparisons_from_rows([f"n{k}" for k in ia], [f"n{k}" for k in ib], p)
    assert c.num_comparisons < m
    got = np.asarray(jr.fit_poe_bradley_terry(c, eps=0.0).scores, np.float64)
    ref = per_row_ml_scores(ia, ib, p, n)[[int(k[1:]) for k in names]]
    np.testing.assert_allclose(got - got.mean(), ref - ref.mean(), atol=2e-4)


@pytest.mark.parametrize("args, kwargs, match", [
    ((["a", "b"], ["b"], [1.0, 0.0]), {}, "one length"),
    ((["a", "b"], ["b", "b"], [1.0, 0.0]), {}, r"row 1: item 'b' is compared with itself"),
    ((["a", "b"], ["b", "a"], [1.0, 1.5]), {}, r"p, row 1"),
    ((["a", "b"], ["b", "a"], [1.0, np.nan]), {}, r"p, row 1"),
    ((["a", "b"], ["b", "a"], [1.0, 0.0]), {"weight": [1.0, -1.0]}, r"weight, row 1"),
    ((["a", "b"], ["b", "a"], [1.0, 0.0]), {"weight": [0.0, 0.0]}, "nothing to rank"),
    ((["a", None], ["b", "a"], [1.0, 0.0]), {}, r"item_a, row 1"),
    ((["a", "b"], ["b", ["x"]], [1.0, 0.0]), {}, "item_a and item_b"),
    ((["a", "b"], ["b", True], [1.0, 0.0]), {}, r"item_b, row 1"),
    (("ab", "ba", [1.0, 0.0]), {}, "item_a must be a sequence"),
    ((pd.Series(["a", None], dtype="string[pyarrow]"), pd.Series(["b", "a"], dtype="string[pyarrow]"),
      [1.0, 0.0]), {}, r"item_a, row 1"),
])
def test_bad_rows_are_errors_naming_the_argument_and_row(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        comparisons_from_rows(*args, **kwargs)


def test_not_strongly_connected_rows_warn_as_the_counts_do():
    """Plumbing: the summed pairs reach the existence check (a team that never lost)."""
    c, names = comparisons_from_rows(["a", "a", "b", "c"], ["b", "c", "c", "b"], [1.0, 1.0, 1.0, 1.0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jr.fit_poe_bradley_terry(c, eps=0.0)
    assert any("strongly connected" in str(w.message) for w in caught)
