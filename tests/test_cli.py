"""The `jaxrank rank` command and the comparison-file reader."""

import csv
import json

import numpy as np
import pytest

import jaxrank as jr
from jaxrank.cli import main
from jaxrank.io import read_comparisons


def _write_csv(path, rows, header):
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def test_rank_csv_probabilities_matches_api(tmp_path, capsys):
    f = tmp_path / "c.csv"
    rows = [("x", "y", 0.8), ("y", "z", 0.7), ("z", "x", 0.2), ("y", "x", 0.3)]
    _write_csv(f, rows, ["item_a", "item_b", "p"])
    out = tmp_path / "s.csv"
    main(["rank", str(f), "--method", "poe_gaussian", "--output", str(out)])
    got = {r["item"]: float(r["score"]) for r in csv.DictReader(out.open())}
    c = jr.Comparisons.from_pairs([0, 1, 2, 1], [1, 2, 0, 0], [0.8, 0.7, 0.2, 0.3], num_items=3)
    expect = np.asarray(jr.poe_gaussian(c))
    np.testing.assert_allclose([got["x"], got["y"], got["z"]], expect, atol=1e-5)
    assert "rank" in capsys.readouterr().out


def test_rank_jsonl_outcomes_with_contexts_and_weights(tmp_path):
    f = tmp_path / "c.jsonl"
    rows = [{"context": "q1", "a": "m1", "b": "m2", "winner": "a", "weight": 2},
            {"context": "q1", "a": "m2", "b": "m3", "winner": "tie", "weight": 1},
            {"context": "q2", "a": "m9", "b": "m1", "winner": "b", "weight": 1}]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = read_comparisons(f)
    assert t.contexts == ["q1", "q2"] and t.items == [["m1", "m2", "m3"], ["m9", "m1"]]
    np.testing.assert_allclose(t.comparisons.p[0, :2], [1.0, 0.5])
    np.testing.assert_allclose(t.comparisons.weight[0, :2], [2.0, 1.0])
    out = tmp_path / "s.jsonl"
    main(["rank", str(f), "--method", "win_ratio", "--debias", "threshold", "-o", str(out)])
    rec = [json.loads(x) for x in out.read_text().splitlines()]
    assert {r["context"] for r in rec} == {"q1", "q2"} and len(rec) == 5


def test_score_columns_give_outcomes(tmp_path):
    f = tmp_path / "m.csv"
    _write_csv(f, [("A", "B", 2, 1), ("B", "C", 0, 0), ("C", "A", 1, 3)], ["home", "away", "hs", "as"])
    t = read_comparisons(f, item_a="home", item_b="away", score_a="hs", score_b="as")
    np.testing.assert_allclose(t.comparisons.p[0], [1.0, 0.5, 0.0])


@pytest.mark.parametrize("rows, header, match", [
    ([("x", "y", "abc")], ["item_a", "item_b", "p"], r"line 2: field 'p' = 'abc' is not a number"),
    ([("x", "y", "1.5")], ["item_a", "item_b", "p"], r"line 2: field 'p' = '1.5' is outside"),
    ([("x", "y", "0.5"), ("x", "", "0.5")], ["item_a", "item_b", "p"], r"line 3: field 'item_b' is empty"),
    ([("x", "x", "0.5")], ["item_a", "item_b", "p"], "compared with itself"),
    ([("x", "y", "nan")], ["item_a", "item_b", "p"], "not finite"),
    ([("x", "y", "maybe")], ["item_a", "item_b", "outcome"], r"line 2: field 'outcome'"),
    ([("x", "y")], ["item_a", "item_b"], "no probability or outcome column"),
    ([("x", "y", "0.5")], ["left", "right", "p"], "no column for item_a"),
])
def test_malformed_files_name_line_and_field(tmp_path, rows, header, match):
    f = tmp_path / "bad.csv"
    _write_csv(f, rows, header)
    with pytest.raises(ValueError, match=match):
        read_comparisons(f)
    with pytest.raises(SystemExit, match=match):
        main(["rank", str(f)])


def test_bad_json_line(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"a": "x", "b": "y", "p": 0.5}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad.jsonl, line 2: not valid JSON"):
        read_comparisons(f)


def test_missing_file_and_bad_method_combination(tmp_path):
    with pytest.raises(SystemExit, match="not found"):
        main(["rank", str(tmp_path / "nope.csv")])
    f = tmp_path / "c.csv"
    _write_csv(f, [("x", "y", 0.8)], ["item_a", "item_b", "p"])
    with pytest.raises(SystemExit, match="learn applies to poe_bradley_terry"):
        main(["rank", str(f), "--method", "poe_gaussian", "--debias", "learn"])


def test_default_football_job(tmp_path, capsys):
    try:
        jr.data.data_dir()
    except FileNotFoundError:
        pytest.skip("shared data folder not found")
    out = tmp_path / "football.csv"
    main(["rank", "--top", "5", "-o", str(out)])
    text = capsys.readouterr().out
    assert "49520 comparisons, 337 items" in text
    rec = list(csv.DictReader(out.open()))
    assert len(rec) == 337 and all(np.isfinite(float(r["stderr"])) for r in rec)
    # the learnt positional bias is a home advantage: gamma < 0 favours position A
    assert "gamma = -" in text
