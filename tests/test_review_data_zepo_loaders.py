"""Review fixes of the built-in loaders: missing system outputs left out, candidate text edges stripped,
infinite human scores refused.

Expected values come from the raw files read here with the csv / json modules (or from tiny files written
here), never from the loader itself.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter

import numpy as np
import pytest

from jaxrank.data import data_dir, label_matrix, load_dataset

WEBNLG17 = "webnlg2017/all_data_final_averaged.csv"
HEADER = ["id", "mr", "team", "text", "category", "type", "bleu", "meteor", "ter", "systemtype", "triplesize",
          "fluency", "grammar", "semantics"]


@pytest.fixture(scope="module")
def real_dir():
    try:
        folder = data_dir()
    except FileNotFoundError:
        pytest.skip("real data folder (shared/data) not available")
    if not (folder / WEBNLG17).is_file():
        pytest.skip("webnlg2017 file absent")
    return folder


def _webnlg17(folder, rows):
    """A tiny WebNLG 2017 CSV; rows are ``(mr, team, text, fluency)``."""
    (folder / "webnlg2017").mkdir(parents=True, exist_ok=True)
    with open(folder / WEBNLG17, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for n, (mr, team, text, flu) in enumerate(rows):
            w.writerow([n, mr, team, text, "c", "t", 0, 0, 0, "s", 1, flu, 2.0, 3.0])


def test_missing_outputs_left_out_with_a_count(tmp_path):
    _webnlg17(tmp_path, [("m1", "x", "A text.", 1.0), ("m1", "vietnam", "null", 1.0), ("m1", "y", "", 1.0),
                         ("m2", "x", "null", 1.0), ("m2", "y", "  ", 1.0),       # a context with no output left
                         ("m3", "x", "Other.", 2.0), ("m3", "y", "Third.\n", 3.0)])
    with pytest.warns(UserWarning, match=r"webnlg2017: left out 4 row\(s\)"):
        ds = load_dataset("webnlg2017", path=tmp_path)
    assert ds["candidate"] == ["A text.", "Other.", "Third."]
    assert ds["candidate_id"] == ["x", "x", "y"]
    assert ds["context_id"] == ["C0", "C2", "C2"]       # ids count every context of the file
    lm = label_matrix(ds, "fluency")
    np.testing.assert_array_equal(lm.labels, [[1.0, 0.0], [2.0, 3.0]])
    np.testing.assert_array_equal(lm.mask, [[True, False], [True, True]])


def test_no_warning_when_nothing_is_missing(tmp_path, recwarn):
    _webnlg17(tmp_path, [("m1", "x", "A.", 1.0), ("m1", "y", "B.", 2.0)])
    load_dataset("webnlg2017", path=tmp_path)
    assert not [w for w in recwarn if "left out" in str(w.message)]


def test_real_webnlg_missing_counts(real_dir):
    with open(real_dir / WEBNLG17, encoding="utf-8", newline="") as f:
        raw = list(csv.DictReader(f))
    nulls = [r for r in raw if r["text"] == "null"]
    empty = [r for r in raw if r["text"].strip() == ""]
    assert (len(nulls), len(empty)) == (168, 25)
    assert {r["team"] for r in nulls} == {"vietnam"} and {r["team"] for r in empty} == {"tilburg-pipe"}
    with pytest.warns(UserWarning, match=r"left out 193 row\(s\)"):
        ds = load_dataset("webnlg2017", path=real_dir)
    assert len(ds) == len(raw) - 193
    assert "null" not in ds["candidate"] and "" not in ds["candidate"]
    assert Counter(ds["candidate_id"])["vietnam"] == Counter(r["team"] for r in raw)["vietnam"] - 168
    path20 = real_dir / "webnlg2020" / "webnlg2020_en_humeval_merged.jsonl"
    if path20.is_file():
        raw20 = [json.loads(x) for x in path20.read_text(encoding="utf-8").splitlines() if x.strip()]
        gone = [r for r in raw20 if r["text"] is not None and not r["text"].strip()]
        assert len(gone) == 1
        with pytest.warns(UserWarning, match=r"left out 1 row\(s\)"):
            ds20 = load_dataset("webnlg2020", path=real_dir)
        assert len(ds20) == len(raw20) - 1
        assert (str(gone[0]["sample_id"]), gone[0]["submission_id"]) not in set(
            zip(ds20["context_id"], ds20["candidate_id"]))


def test_candidate_edges_stripped(real_dir):
    """No system is marked by a whitespace edge its rivals lack (the raw files: every WebNLG 2017 ``webnlg``
    text ends in a newline, every TopicalChat ``Original Ground Truth`` response in a space)."""
    with open(real_dir / WEBNLG17, encoding="utf-8", newline="") as f:
        raw = [r for r in csv.DictReader(f) if r["team"] == "webnlg"]
    assert all(r["text"].endswith("\n") for r in raw)
    ds = load_dataset("webnlg2017", path=real_dir)
    ours = [t for t, c in zip(ds["candidate"], ds["candidate_id"]) if c == "webnlg"]
    assert ours == [r["text"].strip() for r in raw]
    tc_file = real_dir / "topicalchat" / "topical_chat.json"
    if tc_file.is_file():
        tc = json.loads(tc_file.read_text(encoding="utf-8"))
        assert all(r["system_output"].endswith(" ") for r in tc if r["system_id"] == "Original Ground Truth")
        ds = load_dataset("topicalchat", path=real_dir)
        assert ds["candidate"] == [r["system_output"].strip() for r in tc]
    for name in ("webnlg2017", "topicalchat", "personachat"):
        try:
            texts = load_dataset(name, path=real_dir)["candidate"]
        except FileNotFoundError:
            continue
        assert all(t == t.strip() for t in texts), name


def _summeval(folder, coherence):
    (folder / "summeval").mkdir(parents=True)
    rows = [{"article_id": "A0", "summary_id": f"S{k}", "article": "art", "summary": f"sum {k}",
             "coherence": c, "consistency": 1.0, "fluency": 2.0, "relevance": 3.0} for k, c in enumerate(coherence)]
    (folder / "summeval" / "summeval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("bad", [math.inf, -math.inf])
def test_infinite_score_refused_naming_file_and_row(tmp_path, bad):
    _summeval(tmp_path, [1.0, bad, 2.0])
    with pytest.raises(ValueError, match=r"summeval\.jsonl: line 2: .*coherence.*not finite"):
        load_dataset("summeval", path=tmp_path)


def test_infinite_score_in_a_csv_refused(tmp_path):
    _webnlg17(tmp_path, [("m1", "x", "A.", 1.0), ("m1", "y", "B.", "inf")])
    with pytest.raises(ValueError, match=r"all_data_final_averaged\.csv: line 3: .*fluency.*not finite"):
        load_dataset("webnlg2017", path=tmp_path)


def test_nan_score_is_no_score(tmp_path):
    _summeval(tmp_path, [1.0, math.nan, 2.0])
    ds = load_dataset("summeval", path=tmp_path)
    got = ds["coherence"]
    assert got[0] == 1.0 and math.isnan(got[1]) and got[2] == 2.0
