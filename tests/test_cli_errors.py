"""Ordinary faults on the command line end in one line naming the option and what to do, never a traceback."""

import os
from pathlib import Path

import pytest

from jaxrank import cli

DATA = Path(os.environ.get("JAXRANK_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


@pytest.mark.parametrize("argv,message", [
    (["--contexts", "abc"], r"contexts 'abc': use START:STOP\[:STEP\] or i,j,k \(context positions, 0..99\)"),
    (["--contexts", "5:2"], "contexts '5:2' selects none of the 100 contexts"),
    (["--contexts", "200:300"], "contexts '200:300' selects none of the 100 contexts"),
    (["--contexts", "1:2:3:4"], "contexts '1:2:3:4': use START:STOP"),
    (["--candidates", "1"], "--candidates must be >= 2: a comparison needs two candidates"),
    (["--aspect", "candidate"], "aspect 'candidate' is a text column, not a human score; the human scores are: "
                                "coherence, consistency, fluency, relevance"),
    (["--aspect", "clarity"], "aspect 'clarity' is unknown"),
    (["--min-label-mass", "1.5"], r"--min-label-mass must lie in \[0, 1\]"),
])
def test_bad_options_are_one_line_errors(argv, message, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("JAXRANK_DATA", str(DATA))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=message) as e:
        cli.main(["judge", "--no-progress", "--no-compilation-cache", "--store", str(tmp_path / "s.jsonl"), *argv])
    assert e.value.code == 2                                   # a usage error, as argparse's own
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("jaxrank: ") and "Traceback" not in "\n".join(err)
    assert not (tmp_path / "s.jsonl").exists()


@pytest.mark.parametrize("name,message", [
    ("scores.txt", "write scores to a .csv, .jsonl, .json, .ndjson file"),
    ("scores", "not a name without a suffix"),
    ("folder.csv/", "is a directory"),
    ("c.csv", "is the input file"),
])
def test_rank_output_faults(name, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.csv").write_text("item_a,item_b,p\nx,y,0.7\n")
    (tmp_path / "folder.csv").mkdir()
    with pytest.raises(SystemExit, match=message) as e:
        cli.main(["rank", "c.csv", "--output", name])
    assert e.value.code == 2
    assert (tmp_path / "c.csv").read_text() == "item_a,item_b,p\nx,y,0.7\n"


def test_a_store_that_cannot_be_used_is_a_failure_not_a_usage_error(tmp_path, monkeypatch, capsys):
    """Exit status 1: the command was right but could not be carried out (a store with conflicting records)."""
    store = tmp_path / "s.jsonl"
    rec = '{"judge": "j", "template": "t", "context": "c", "a": "x", "b": "y", "p": %s}\n'
    store.write_text(rec % 0.2 + rec % 0.7)
    with pytest.raises(SystemExit) as e:
        cli.main(["store", "merge", str(tmp_path / "m.jsonl"), str(store)])
    assert e.value.code not in (0, 2) and "different records" in str(e.value.code)


def test_assess_output_that_is_a_file_is_refused_before_judging(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRANK_DATA", str(DATA))
    (tmp_path / "report").write_text("mine\n")
    with pytest.raises(SystemExit, match="is a file; assess writes its report and scores into a folder"):
        cli.main(["assess", "--output", str(tmp_path / "report"), "--no-compilation-cache", "--store",
                  str(tmp_path / "s.jsonl")])
    assert (tmp_path / "report").read_text() == "mine\n" and not (tmp_path / "s.jsonl").exists()
