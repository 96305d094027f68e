"""read_comparisons: the columns of JSON sources, winners named by case, line ends, options given together.

Expected values are written by hand from each file.
"""

import json

import numpy as np
import pytest

from jaxrank.io import read_comparisons


def _jsonl(path, records, end="\n"):
    path.write_text(end.join(json.dumps(r) for r in records) + end, encoding="utf-8")
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_field_of_later_records_is_not_dropped(tmp_path, suffix):
    # was: the columns were the first record's, so the later records' weight 0 and context were dropped silently
    records = [{"item_a": "x", "item_b": "y", "p": 0.9},
               {"item_a": "x", "item_b": "y", "p": 0.1, "weight": 0},
               {"item_a": "y", "item_b": "z", "p": 0.2, "weight": 0}]
    path = tmp_path / f"a{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(records))
        where = "record 0"
    else:
        _jsonl(path, records)
        where = "line 1"
    for kw in ({}, {"weight": "weight"}):      # found by its usual name, or named (was: "is not there")
        with pytest.raises(ValueError, match=rf"a{suffix}, {where}: no field 'weight'"):
            read_comparisons(path, **kw)


def test_a_field_no_column_reads_may_be_missing(tmp_path):
    path = _jsonl(tmp_path / "a.jsonl", [{"item_a": "x", "item_b": "y", "p": 0.9},
                                        {"item_a": "y", "item_b": "z", "p": 0.2, "note": "late"}])
    t = read_comparisons(path)
    np.testing.assert_allclose(np.asarray(t.comparisons.p), [[0.9, 0.2]], rtol=1e-6)
    assert t.items == [["x", "y", "z"]]


def test_fields_in_any_order_are_read_from_every_record(tmp_path):
    path = _jsonl(tmp_path / "a.jsonl", [{"item_a": "x", "item_b": "y", "p": 0.9, "context": "c1", "weight": 1},
                                        {"context": "c2", "weight": 2, "p": 0.1, "item_b": "y", "item_a": "x"},
                                        {"item_a": "y", "weight": 3, "item_b": "z", "p": 0.2, "context": "c2"}])
    t = read_comparisons(path)
    assert t.contexts == ["c1", "c2"] and t.items == [["x", "y"], ["x", "y", "z"]]
    np.testing.assert_allclose(np.asarray(t.comparisons.weight), [[1, 0], [2, 3]])
    np.testing.assert_allclose(np.asarray(t.comparisons.p)[1], [0.1, 0.2], rtol=1e-6)


def test_a_winner_is_its_exact_spelling_first(tmp_path):
    # was: "gpt" matched "GPT" (item A) case-insensitively first: P(A better) = 1 for a win of item B
    path = tmp_path / "b.csv"
    path.write_text("model_a,model_b,winner\nGPT,gpt,gpt\nGPT,gpt,GPT\nGPT,claude,gpt\nGPT,claude,CLAUDE\n")
    t = read_comparisons(path)
    assert t.items == [["GPT", "gpt", "claude"]]
    np.testing.assert_array_equal(np.asarray(t.comparisons.p), [[0.0, 1.0, 1.0, 0.0]])


def test_a_winner_that_names_both_items_but_neither_exactly_is_an_error(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("model_a,model_b,winner\nGPT,gpt,gpt\nGPT,gpt,Gpt\n")
    with pytest.raises(ValueError, match=r"b\.csv, line 3: field 'winner' = 'Gpt' is ambiguous"):
        read_comparisons(path)


def test_json_lines_end_at_newlines_only(tmp_path):
    # was: str.splitlines() cut the record at U+2028 inside a string ("not valid JSON")
    path = tmp_path / "u.jsonl"
    path.write_bytes(('{"item_a": "x", "item_b": "y", "p": 0.6, "context": "line\u2028sep"}\r\n'
                      '{"item_a": "y", "item_b": "z", "p": 0.3, "context": "next\u0085one"}\r\n').encode("utf-8"))
    t = read_comparisons(path)
    assert t.contexts == ["line\u2028sep", "next\u0085one"]
    np.testing.assert_allclose(np.asarray(t.comparisons.p), [[0.6], [0.3]], rtol=1e-6)


def test_p_and_outcome_together_are_an_error(tmp_path):
    # was: p was ignored without a word when outcome was given
    path = tmp_path / "c.csv"
    path.write_text("item_a,item_b,p,outcome\nx,y,0.7,loss\n")
    with pytest.raises(ValueError, match=r"p and outcome are both given"):
        read_comparisons(path, p="p", outcome="outcome")
    with pytest.raises(ValueError, match=r"p and score_a/score_b are both given"):
        read_comparisons(path, p="p", score_a="p", score_b="p")
    assert float(np.asarray(read_comparisons(path, outcome="outcome").comparisons.p)[0, 0]) == 0.0


# ---------------------------------------------------------------------- comparisons_from_rows


def test_rows_ids_of_several_types_are_read_comparisons_ids():
    from jaxrank.io import comparisons_from_rows

    # was: 2 and 2.0 (and 1 and True) were one dictionary key, so one item; "1.0 is another" (the docstring)
    c, names = comparisons_from_rows([1, 2.0], [2, 3], [1.0, 0.0], aggregate=False)
    assert names == ["1", "2", "2.0", "3"]
    np.testing.assert_array_equal(np.asarray(c.i), [0, 2])
    np.testing.assert_array_equal(np.asarray(c.j), [1, 3])
    c, names = comparisons_from_rows([1.0, 1, "1"], [2, 3, " 2"], [1.0, 0.0, 0.5], aggregate=False)
    assert names == ["1.0", "2", "1", "3"]                  # "1" is 1, " 2" is 2 (as read_comparisons reads them)
    np.testing.assert_array_equal(np.asarray(c.i), [0, 2, 2])
    np.testing.assert_array_equal(np.asarray(c.j), [1, 3, 1])
    for a in ([1, True], [True, 1], [np.int64(1), np.bool_(False)]):
        row = next(k for k, x in enumerate(a) if isinstance(x, (bool, np.bool_)))
        with pytest.raises(ValueError, match=rf"item_a, row {row}: .* is a JSON boolean"):
            comparisons_from_rows(a, [2, 3], [1.0, 1.0], aggregate=False)


def test_rows_int_and_float_series_keep_their_ids():
    pd = pytest.importorskip("pandas")
    from jaxrank.io import comparisons_from_rows

    # was: joined as one float Series, so 1 was "1.0"
    _, names = comparisons_from_rows(pd.Series([1, 2]), pd.Series([2.0, 3.0]), [1.0, 0.0], aggregate=False)
    assert names == ["1", "2.0", "2", "3.0"]


def test_rows_p_or_weight_that_is_no_number_names_its_row():
    from jaxrank.io import comparisons_from_rows

    with pytest.raises(ValueError, match=r"p, row 1: 'a' is not a number"):
        comparisons_from_rows(["x", "y"], ["y", "z"], ["0.5", "a"])
    with pytest.raises(ValueError, match=r"weight, row 0: \[1\] is not a number"):
        comparisons_from_rows(["x", "y"], ["y", "z"], [0.5, 0.5], weight=[[1], 2])
