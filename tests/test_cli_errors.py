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
