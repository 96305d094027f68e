"""``jaxrank store adopt --data FILE``: judgements of one's own texts written before fingerprints are stamped
with the hashes of that file's texts, as ``jaxrank judge --data FILE`` reads it (jaxrank.cli.store); adopt used
to accept only a data set name, and its error suggested the ``--data FILE`` it had been given. Real MiniLM."""

import csv
import hashlib
import json
import warnings

import pytest

from jaxrank.assessment.run import StoreMismatchWarning
from jaxrank.cli import main

STAMP = ("fingerprint", "context_sha", "a_sha", "b_sha")
ARTICLE = "The council met on Monday to discuss the budget."
CANDS = [("a", "The council discussed the budget."), ("b", "Cats sleep a lot."), ("c", "A meeting on Monday.")]


def _sha(text):
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _records(path):
    return [json.loads(x) for x in open(path) if x.strip()]


def _file(tmp_path):
    path = tmp_path / "v2.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["context_id", "context", "candidate_id", "candidate"])
        for cid, text in CANDS:
            w.writerow(["q1", ARTICLE, cid, text])
    return path


def test_adopt_reads_a_file_of_ones_own_texts(minilm, tmp_path, capsys):
    data, store = _file(tmp_path), tmp_path / "s.jsonl"
    main(["judge", "--data", str(data), "--store", str(store), "--no-progress"])
    new = _records(store)
    assert len(new) == 6
    # the texts' hashes, computed here from the file's texts with hashlib
    text = {cid: t for cid, t in CANDS}
    assert all(r["context_sha"] == _sha(ARTICLE) and r["a_sha"] == _sha(text[r["a"]])
               and r["b_sha"] == _sha(text[r["b"]]) for r in new)
    legacy = [{k: v for k, v in r.items() if k not in STAMP + ("schema",)} for r in new]
    store.write_text("".join(json.dumps(r) + "\n" for r in legacy))      # as an older jaxrank wrote them
    capsys.readouterr()
    main(["store", "adopt", str(store), "--judge", "minilm-l6", "--data", str(data)])
    out = capsys.readouterr().out
    assert "6 judgement(s) of minilm-l6-cos-k20 stamped" in out and "v2.csv" in out
    assert [{k: r[k] for k in STAMP} for r in _records(store)] == [{k: r[k] for k in STAMP} for r in new]
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreMismatchWarning)
        main(["judge", "--data", str(data), "--store", str(store), "--no-progress"])
    assert len(_records(store)) == 6                                     # reused: nothing judged again


def test_adopt_names_a_missing_or_unreadable_file(tmp_path):
    store = tmp_path / "s.jsonl"
    store.write_text(json.dumps({"judge": "j", "template": "t", "context": "c", "a": "x", "b": "y", "p": 0.5}) + "\n")
    with pytest.raises(SystemExit, match=r"--data .*nope\.csv: no such file"):
        main(["store", "adopt", str(store), "--judge", "minilm-l6", "--data", str(tmp_path / "nope.csv")])
    bad = tmp_path / "bad.csv"
    bad.write_text("context_id,context\nq1,x\n")
    with pytest.raises(SystemExit, match="bad.csv"):
        main(["store", "adopt", str(store), "--judge", "minilm-l6", "--data", str(bad)])
