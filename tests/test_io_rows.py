"""The numbering of raw rows (``jaxrank.io.comparisons_from_rows``, issue 33): one dictionary pass whose codes are
joined into one buffer; checked against a plain Python numbering and against the file reader's."""

import csv

import numpy as np
import pytest

from jaxrank.io import _rows, comparisons_from_rows, read_comparisons


def _numbered_in_python(a, b):
    """Items in order of first appearance, row by row, A before B (the documented order), one row at a time."""
    code = {}
    ia, ib = [], []
    for x, y in zip(a, b):
        ia.append(code.setdefault(x, len(code)))
        ib.append(code.setdefault(y, len(code)))
    return list(code), np.array(ia), np.array(ib)


@pytest.mark.parametrize("distinct", [3, 300, 70_000])      # codes of 1, 2 and 3 significant bytes
def test_numbering_equals_a_row_by_row_python_numbering(distinct):
    rng = np.random.default_rng(distinct)
    rows = 2 * distinct + 50
    a = [f"n{k}" for k in rng.integers(0, distinct, rows)]
    b = [f"n{k}" for k in rng.integers(0, distinct, rows)]
    names, ia, ib = _rows._item_codes(a, b)
    want_names, want_a, want_b = _numbered_in_python(a, b)
    assert names == want_names
    np.testing.assert_array_equal(ia, want_a)
    np.testing.assert_array_equal(ib, want_b)
    assert ia.dtype == np.int64 and ib.dtype == np.int64


def test_numbering_merges_ids_that_read_alike_and_names_bad_ones():
    names, ia, ib = _rows._item_codes([" x", 1, "y"], ["x", "1", 2.5])
    assert names == ["x", "1", "y", "2.5"]
    assert ia.tolist() == [0, 1, 2] and ib.tolist() == [0, 1, 3]
    with pytest.raises(ValueError, match="strings or numbers"):
        _rows._item_codes([[1]], ["a"])
    with pytest.raises(ValueError, match=r"item_a, row 1: nan is empty or NaN"):
        _rows._item_codes(["a", float("nan")], ["b", "c"])
    with pytest.raises(ValueError, match=r"item_b, row 0: '' is empty"):
        _rows._item_codes(["a"], [""])


def test_rows_number_items_as_the_file_reader_does(tmp_path):
    rng = np.random.default_rng(7)
    a = [f"m{k}" for k in rng.integers(0, 40, 200)]
    b = [f"m{(k + 1 + int(rng.integers(0, 39))) % 40}" for k in (int(x[1:]) for x in a)]
    p = rng.random(200).round(3)
    f = tmp_path / "rows.csv"
    with f.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["item_a", "item_b", "p"])
        w.writerows(zip(a, b, p))
    table = read_comparisons(f)
    c, names = comparisons_from_rows(a, b, p, aggregate=False)
    assert names == table.items[0]
    np.testing.assert_array_equal(np.asarray(c.i), np.asarray(table.comparisons.i)[0])
    np.testing.assert_array_equal(np.asarray(c.j), np.asarray(table.comparisons.j)[0])
