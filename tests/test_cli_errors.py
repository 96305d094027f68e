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
def test_bad_options_are_one_line_errors(argv, message, monkeypatch, tmp_path):
    monkeypatch.setenv("JAXRANK_DATA", str(DATA))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=message):
        cli.main(["judge", "--no-progress", "--no-compilation-cache", "--store", str(tmp_path / "s.jsonl"), *argv])
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
    with pytest.raises(SystemExit, match=message):
        cli.main(["rank", "c.csv", "--output", name])
    assert (tmp_path / "c.csv").read_text() == "item_a,item_b,p\nx,y,0.7\n"


def test_assess_output_that_is_a_file_is_refused_before_judging(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRANK_DATA", str(DATA))
    (tmp_path / "report").write_text("mine\n")
    with pytest.raises(SystemExit, match="is a file; assess writes its report and scores into a folder"):
        cli.main(["assess", "--output", str(tmp_path / "report"), "--no-compilation-cache", "--store",
                  str(tmp_path / "s.jsonl")])
    assert (tmp_path / "report").read_text() == "mine\n" and not (tmp_path / "s.jsonl").exists()
