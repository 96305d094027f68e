"""jaxrank.io.read_comparisons: the field's formats without options, DataFrames, encodings, delimiters, errors.

Every expectation is written out by hand from the rows: items numbered in order of
first appearance, ``p = P(A better)`` = 1 / 0 / 0.5 for a win / loss / tie.
"""

import csv
import json

import numpy as np
import pytest

from jaxrank.io import read_comparisons

# Chatbot Arena battles (extra columns as in the published battle files)
ARENA_HEADER = ["question_id", "model_a", "model_b", "winner", "judge", "language"]
ARENA_ROWS = [("q1", "gpt-4", "claude", "model_a", "u1", "English"),
              ("q2", "claude", "llama", "model_b", "u2", "English"),
              ("q3", "gpt-4", "llama", "tie", "u1", "German"),
              ("q4", "llama", "gpt-4", "tie (bothbad)", "u3", "English"),
              ("q5", "llama", "claude", "MODEL_A", "u3", "English")]
ARENA_ITEMS = ["gpt-4", "claude", "llama"]
ARENA_I, ARENA_J = [0, 1, 0, 2, 2], [1, 2, 2, 0, 1]
ARENA_P = [1.0, 0.0, 0.5, 0.5, 1.0]


def _write_csv(path, rows, header, delimiter=",", encoding="utf-8"):
    with path.open("w", newline="", encoding=encoding) as fh:
        w = csv.writer(fh, delimiter=delimiter)
        w.writerow(header)
        w.writerows(rows)
    return path


def _check(table, items, i, j, p, w=None, contexts=("",)):
    assert table.contexts == list(contexts)
    assert table.items == [items]
    c = table.comparisons
    np.testing.assert_array_equal(np.asarray(c.i)[0], i)
    np.testing.assert_array_equal(np.asarray(c.j)[0], j)
    np.testing.assert_allclose(np.asarray(c.p)[0], p)
    np.testing.assert_allclose(np.asarray(c.weight)[0], np.ones(len(i)) if w is None else w)


def test_chatbot_arena_battles_csv_and_json_array(tmp_path):
    _check(read_comparisons(_write_csv(tmp_path / "battles.csv", ARENA_ROWS, ARENA_HEADER)),
           ARENA_ITEMS, ARENA_I, ARENA_J, ARENA_P)
    f = tmp_path / "clean_battle.json"  # the published battle files are one JSON array
    f.write_text(json.dumps([dict(zip(ARENA_HEADER, r)) for r in ARENA_ROWS], indent=1))
    _check(read_comparisons(f), ARENA_ITEMS, ARENA_I, ARENA_J, ARENA_P)


def test_evalica_left_right_winner(tmp_path):
    # evalica's command-line format: winner is left / right / tie, any case; items may be numbers
    rows = [("0", "1", "tie"), ("0", "2", "right"), ("1", "0", "left"), ("2", "4", "Tie"), ("4", "1", "RIGHT")]
    t = read_comparisons(_write_csv(tmp_path / "simple.csv", rows, ["left", "right", "winner"]))
    _check(t, ["0", "1", "2", "4"], [0, 0, 1, 2, 3], [1, 2, 0, 3, 1], [0.5, 0.0, 1.0, 0.5, 0.0])
    # the LLMFAO layout: ids in other columns, the names in left / right
    rows = [("0", "8", "97", "98", "left", "Airoboros", "Weaver"), ("1", "8", "98", "97", "tie", "Weaver", "Airoboros")]
    t = read_comparisons(_write_csv(tmp_path / "llmfao.csv", rows,
                                    ["id", "prompt", "model_x", "model_y", "winner", "left", "right"]))
    _check(t, ["Airoboros", "Weaver"], [0, 1], [1, 0], [1.0, 0.5])


def test_our_own_format_probabilities_outcomes_weights_contexts(tmp_path):
    rows = [("c1", "x", "y", "0.8", "2"), ("c1", "y", "z", "0.25", "1"), ("c2", "z", "x", "0", "0.5")]
    t = read_comparisons(_write_csv(tmp_path / "ours.csv", rows, ["context", "item_a", "item_b", "p", "weight"]))
    assert t.contexts == ["c1", "c2"] and t.items == [["x", "y", "z"], ["z", "x"]]
    c = t.comparisons
    # the second context's padding slot is a self-pair of weight 0 (slot 1 mod its own items)
    np.testing.assert_array_equal(np.asarray(c.i), [[0, 1], [0, 1]])
    np.testing.assert_array_equal(np.asarray(c.j), [[1, 2], [1, 1]])
    np.testing.assert_allclose(np.asarray(c.p), [[0.8, 0.25], [0.0, 0.5]])
    np.testing.assert_allclose(np.asarray(c.weight), [[2.0, 1.0], [0.5, 0.0]])  # padding has weight 0
    rows = [("x", "y", "win"), ("y", "z", "loss"), ("x", "z", "draw"), ("z", "y", "a"), ("y", "x", "0.5")]
    _check(read_comparisons(_write_csv(tmp_path / "o.csv", rows, ["item_a", "item_b", "outcome"])),
           ["x", "y", "z"], [0, 1, 0, 2, 1], [1, 2, 2, 1, 0], [1.0, 0.0, 0.5, 1.0, 0.5])


def test_winner_naming_the_item_and_score_columns(tmp_path):
    rows = [("gpt-4", "claude", "claude"), ("claude", "gpt-4", "claude"), ("gpt-4", "claude", "tie")]
    _check(read_comparisons(_write_csv(tmp_path / "w.csv", rows, ["model_a", "model_b", "winner"])),
           ["gpt-4", "claude"], [0, 1, 0], [1, 0, 1], [0.0, 1.0, 0.5])
    rows = [("A", "B", 2, 1), ("B", "C", 0, 0), ("C", "A", 1, 3)]
    t = read_comparisons(_write_csv(tmp_path / "m.csv", rows, ["home", "away", "hs", "as"]),
                         item_a="home", item_b="away", score_a="hs", score_b="as")
    _check(t, ["A", "B", "C"], [0, 1, 2], [1, 2, 0], [1.0, 0.5, 0.0])


def test_byte_order_mark_and_delimiters(tmp_path):
    for name, delimiter, encoding in (("bom.csv", ",", "utf-8-sig"), ("semi.csv", ";", "utf-8"),
                                      ("tab.tsv", "\t", "utf-8-sig"), ("semi_bom.csv", ";", "utf-8-sig")):
        f = _write_csv(tmp_path / name, ARENA_ROWS, ARENA_HEADER, delimiter=delimiter, encoding=encoding)
        _check(read_comparisons(f), ARENA_ITEMS, ARENA_I, ARENA_J, ARENA_P)
    # commas inside a quoted item name do not outvote the semicolons
    f = tmp_path / "quoted.csv"
    f.write_text('item_a;item_b;p\n"Smith, J.";"Doe, A.";0.75\n', encoding="utf-8")
    _check(read_comparisons(f), ["Smith, J.", "Doe, A."], [0], [1], [0.75])


def test_dataframe_reads_like_the_file(tmp_path):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(ARENA_ROWS, columns=ARENA_HEADER)
    _check(read_comparisons(df), ARENA_ITEMS, ARENA_I, ARENA_J, ARENA_P)
    # numbers as item names (evalica's test data) and a non-default index
    df = pd.DataFrame({"left": [0, 0, 1], "right": [1, 2, 2], "winner": ["left", "tie", "right"]}, index=[10, 11, 12])
    _check(read_comparisons(df), ["0", "1", "2"], [0, 0, 1], [1, 2, 2], [1.0, 0.5, 0.0])
    bad = pd.DataFrame({"item_a": ["x", "y"], "item_b": ["y", None], "p": [0.5, 0.5]}, index=["r0", "r1"])
    with pytest.raises(ValueError, match=r"DataFrame, row 1 \(index 'r1'\): field 'item_b' is empty"):
        read_comparisons(bad)
    with pytest.raises(ValueError, match=r"DataFrame, row 0 \(index 0\): field 'p' = 'high' is not a number"):
        read_comparisons(pd.DataFrame({"a": ["x"], "b": ["y"], "p": ["high"]}))
    with pytest.raises(ValueError, match="DataFrame: no column for item_a"):
        read_comparisons(pd.DataFrame({"first": ["x"], "second": ["y"], "p": [0.5]}))


def test_source_must_be_a_path_or_dataframe():
    with pytest.raises(ValueError, match="source must be a file path or a pandas DataFrame, got list"):
        read_comparisons([("x", "y", 1.0)])


@pytest.mark.parametrize("content, match", [
    (b"item_a,item_b,p\nx,y,abc\n", r"bad.csv, line 2: field 'p' = 'abc' is not a number"),
    (b"item_a,item_b,p\nx,y,0.5\nx,y,1.5\n", r"bad.csv, line 3: field 'p' = '1.5' is outside \[0, 1\]"),
    (b"item_a,item_b,p\nx,y,0.5\nx,,0.5\n", r"bad.csv, line 3: field 'item_b' is empty"),
    (b"item_a,item_b,p\nx,x,0.5\n", r"bad.csv, line 2: item 'x' is compared with itself"),
    (b"item_a,item_b,p\nx,y,nan\n", r"bad.csv, line 2: field 'p' = 'nan' is not finite"),
    (b"item_a,item_b,outcome\nx,y,maybe\n", r"bad.csv, line 2: field 'outcome' = 'maybe'; expected"),
    (b"item_a,item_b,p,weight\nx,y,0.5,-1\n", r"bad.csv, line 2: field 'weight' = '-1' is negative"),
    (b"item_a,item_b,p\nx,y,0.5,7\n", r"bad.csv, line 2: 4 fields, more than the header's 3"),
    (b"item_a,item_b,p\nx,y,0.5\nx,y\n", r"bad.csv, line 3: 2 field\(s\), fewer than the header's 3"),
    (b"context,item_a,item_b,p\nq,x,y,0.5\n,x,y,0.5\n", r"bad.csv, line 3: field 'context' is empty"),
    (b"item_a,item_b\nx,y\n", r"bad.csv: no probability or outcome column"),
    (b"first,second,p\nx,y,0.5\n", r"bad.csv: no column for item_a"),
    (b"", r"bad.csv: empty file \(no header row\)"),
    (b"item_a,item_b,p\n", r"bad.csv: no comparisons"),
    (b"item_a,item_b,p\nx,y,0.5\n\x89PNG\x00\x01", r"bad.csv, line 3: not a text file"),
    (b"item_a,item_b,p\nx,y,0.5\nJos\xe9,y,0.5\n", r"bad.csv, line 3: not UTF-8 text \(byte 0xe9, which UTF-8 does not allow there"),
    # "b" is an outcome word for B winning, and the name of item A here
    (b"model_a,model_b,winner\nb,a,b\n", r"bad.csv, line 2: field 'winner' = 'b' is ambiguous"),
])
def test_malformed_files_name_file_and_line(tmp_path, content, match):
    f = tmp_path / "bad.csv"
    f.write_bytes(content)
    with pytest.raises(ValueError, match=match):
        read_comparisons(f)


def _refused(path, text, match):
    """``text`` written to ``path`` is refused by :func:`read_comparisons` with a ``ValueError`` matching ``match``."""
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        read_comparisons(path)


def test_bad_columns_and_json_name_file_and_line(tmp_path):
    f = _write_csv(tmp_path / "c.csv", [("x", "y", "0.5")], ["item_a", "item_b", "p"])
    with pytest.raises(ValueError, match=r"c.csv: column 'who' \(for item_a\) is not there; columns: \['item_a'"):
        read_comparisons(f, item_a="who")
    with pytest.raises(ValueError, match=r"c.csv: column 'hs' \(for score_a\) is not there"):
        read_comparisons(f, score_a="hs", score_b="p")
    with pytest.raises(ValueError, match="score_a and score_b go together"):
        read_comparisons(f, score_a="p")
    with pytest.raises(FileNotFoundError, match="comparison file not found"):
        read_comparisons(tmp_path / "nope.csv")
    j = tmp_path / "bad.jsonl"
    _refused(j, '{"a": "x", "b": "y", "p": 0.5}\n\n{oops\n', r"bad.jsonl, line 3: not valid JSON")
    _refused(j, '{"a": "x", "b": "y", "p": 0.5}\n[1, 2]\n', r"bad.jsonl, line 2: expected a JSON object, got list")
    _refused(tmp_path / "bad.json", '[{"a": "x", "b": "y", "p": 0.5},\n {"a": "x", "b": "y", "p": 2}]',
             r"bad.json, record 1: field 'p' = 2 is outside")


def _random_name(rng):
    while True:
        name = "".join(rng.choice(list("abcxyz;, \t'\""), size=rng.integers(1, 7)))
        if name.strip() and name == name.strip():
            return name


@pytest.mark.parametrize("seed", range(30))
def test_any_delimiter_bom_and_layout_read_the_same(tmp_path, seed):
    """Random comparisons written in either layout, with any delimiter, with or without BOM, read back the same.

    Names draw on the delimiters and quote characters themselves, so quoting must be honoured.
    """
    rng = np.random.default_rng(seed)
    names = list(dict.fromkeys(_random_name(rng) for _ in range(rng.integers(2, 6))))
    if len(names) < 2:
        names.append(names[0] + "x")
    pairs = []
    for _ in range(rng.integers(1, 9)):
        a, b = rng.choice(len(names), size=2, replace=False)
        pairs.append((names[a], names[b], str(rng.choice(["left", "right", "tie"]))))
    layout = ["evalica", "arena"][seed % 2]
    if layout == "evalica":
        header, word = ["left", "right", "winner"], {"left": "left", "right": "right", "tie": "tie"}
    else:
        header, word = ["model_a", "model_b", "winner"], {"left": "model_a", "right": "model_b", "tie": "tie"}
    f = _write_csv(tmp_path / "c.csv", [(a, b, word[w]) for a, b, w in pairs], header,
                   delimiter=[",", ";", "\t"][seed % 3], encoding="utf-8-sig" if seed % 5 < 2 else "utf-8")
    items = list(dict.fromkeys(x for a, b, _ in pairs for x in (a, b)))
    pos = {n: k for k, n in enumerate(items)}
    _check(read_comparisons(f), items, [pos[a] for a, _, _ in pairs], [pos[b] for _, b, _ in pairs],
           [{"left": 1.0, "right": 0.0, "tie": 0.5}[w] for _, _, w in pairs])


def test_item_ids_blanks_numbers_objects_and_duplicate_columns(tmp_path):
    from jaxrank.io import read_comparisons as _read

    f = tmp_path / "c.csv"
    f.write_text("item_a,item_b,p\nx,y,0.7\n x ,y ,0.6\n")
    t = _read(f)
    assert t.items == [["x", "y"]] and int(t.comparisons.num_items) == 2       # blanks dropped: one x, one y
    j = tmp_path / "c.jsonl"
    j.write_text('{"item_a": 1, "item_b": "2", "p": 0.7}\n{"item_a": "1", "item_b": 2, "p": 0.4}\n'
                 '{"item_a": 1.0, "item_b": 2, "p": 0.4}\n')
    assert _read(j).items == [["1", "2", "1.0"]]                              # 1 and "1" one item; 1.0 another
    _refused(j, '{"item_a": {"id": 1}, "item_b": "2", "p": 0.7}\n',
             r"line 1: field 'item_a' = \{'id': 1\} is a JSON dict")
    _refused(f, "item_a,item_b,p,p\nx,y,0.7,0.2\n", r"line 1: column\(s\) \['p'\] appear more than once")
    _refused(f, "item_a,item_b,p,P\nx,y,0.7,0.2\n", r"columns \['p', 'P'\] differ only in case; which is p\?")
    assert _read(f, p="P").comparisons.p[0, 0] == pytest.approx(0.2)          # named explicitly: fine


def test_non_regular_empty_pretty_and_unterminated_inputs(tmp_path):
    import os as _os

    from jaxrank.io import read_comparisons as _read

    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(ValueError, match="dir.csv is a directory"):
        _read(tmp_path / "dir.csv")
    _os.mkfifo(tmp_path / "fifo.csv")
    with pytest.raises(ValueError, match="fifo.csv is not a regular file"):      # never blocks on the pipe
        _read(tmp_path / "fifo.csv")
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="e.jsonl: empty file"):
        _read(tmp_path / "e.jsonl")
    (tmp_path / "one.json").write_text('{\n  "item_a": "x",\n  "item_b": "y",\n  "p": 0.25\n}\n')
    t = _read(tmp_path / "one.json")
    assert t.items == [["x", "y"]] and float(t.comparisons.p[0, 0]) == pytest.approx(0.25)
    (tmp_path / "q.csv").write_text('item_a,item_b,p\n"x,y,0.5\nz,w,0.2\n')
    with pytest.raises(ValueError, match=r"q.csv, line \d: unterminated quote"):
        _read(tmp_path / "q.csv")
