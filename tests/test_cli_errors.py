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


@pytest.mark.parametrize("rows,argv,message", [
    ('{"item_a": "x", "item_b": "y", "p": 0.6, "p": 0.2}\n', [], "field 'p' appears twice in one record"),
    ('{"item_a": true, "item_b": "y", "p": 0.6}\n', [], "True is a JSON boolean, not an item id"),
    ('{"item_a": "x", "item_b": "y", "p": true}\n', [], "field 'p' = True is a JSON boolean"),
    ('{"item_a": "x", "item_b": "y", "p": NaN}\n', [], "field 'p' is NaN"),
    ('{"item_a": "x", "item_b": "y", "p": 0.6, "w": 0}\n', ["--weight", "w"], "every comparison has weight 0"),
    ('{"item_a": "x", "item_b": "y", "p": 0.6, "w": 1e300}\n', ["--weight", "w"], "is too large"),
    ('{"item_a": "x", "item_b": "y", "p": 0.6, "o": "win"}\n', ["--p", "p", "--outcome", "o"], "not both"),
    ('{"item_a": "x", "item_b": "y", "sa": 1, "sb": 2}\n', ["--score-a", "sa", "--score-b", "sa"], "name one column"),
    ('{"item_a": "x", "item_b": "y", "p": 0.6}\n', ["--item-a", "item_a", "--item-b", "item_a"], "name one column"),
    ('{"item_a": "x", "item_b": "y", "p": 0.6}\n', ["--output", ""], "--output is empty"),
])
def test_rank_inputs_that_were_read_silently_are_one_line_usage_errors(rows, argv, message, tmp_path,
                                                                         monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.jsonl").write_text(rows)
    with pytest.raises(SystemExit, match=message) as e:
        cli.main(["rank", "c.jsonl", *argv])
    assert e.value.code == 2 and "Traceback" not in capsys.readouterr().err


def test_a_store_path_that_is_not_a_store_is_refused_and_left_as_it_is(tmp_path, monkeypatch, capsys):
    """A CSV or a folder or a pipe given as --store: one line, nothing changed, no hang (the similarity judge
    is never loaded: the store is opened before judging)."""
    from jaxrank.assessment.store import JudgementStore, NotAStoreError, check_store

    csv_file = tmp_path / "c.csv"
    csv_file.write_text("item_a,item_b,p\nx,y,0.5\n")
    with pytest.raises(NotAStoreError, match="is not a judgement store: none of its lines"):
        JudgementStore(csv_file)
    assert csv_file.read_text() == "item_a,item_b,p\nx,y,0.5\n" and not (tmp_path / "c.csv.damaged").exists()
    (tmp_path / "torn.jsonl").write_text('{"judge": "m", "templ')          # a killed first writer: recovered
    with pytest.warns(UserWarning, match="torn last line"):
        assert len(JudgementStore(tmp_path / "torn.jsonl")) == 0
    (tmp_path / "sdir").mkdir()
    with pytest.raises(NotAStoreError, match="sdir is a folder"):
        JudgementStore(tmp_path / "sdir")
    os.mkfifo(tmp_path / "f.jsonl")
    with pytest.raises(NotAStoreError, match="not a regular file"):
        check_store(tmp_path / "f.jsonl")
    for action in ("check", "repair"):
        with pytest.raises(SystemExit, match="is not a regular file") as e:
            cli.main(["store", action, str(tmp_path / "f.jsonl")])
        assert e.value.code == 2
    with pytest.raises(SystemExit, match="apply to store adopt only"):
        cli.main(["store", "check", str(csv_file), "--judge", "minilm-l6", "--data", "summeval"])


def test_a_garbled_coordinator_address_is_a_usage_error(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="give HOST:PORT") as e:
        cli.main(["judge", "--judge", "minilm-l6", "--num-processes", "2", "--coordinator", "not an address"])
    assert e.value.code == 2


def test_a_strict_judge_refusing_is_one_line(smollm2, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("JAXRANK_DATA", str(DATA))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="the labels .* hold") as e:
        cli.main(["judge", "--judge", "smollm2-135m", "--contexts", "0:1", "--candidates", "2", "--no-progress",
                  "--answer-prefix", "none", "--min-label-mass", "1", "--strict"])
    assert e.value.code not in (0, 2) and "Traceback" not in capsys.readouterr().err


def test_an_output_that_cannot_be_written_is_a_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.jsonl").write_text('{"item_a": "x", "item_b": "y", "p": 0.6}\n')
    with pytest.raises(SystemExit, match="is a file, not a folder") as e:
        cli.main(["rank", "c.jsonl", "--output", "c.jsonl/s.csv"])
    assert e.value.code not in (0, 2)


@pytest.mark.parametrize("argv,message", [
    (["--selection", "symmetric"], "applies with --budget only"),
    (["--coordinator", "127.0.0.1:1234"], "applies with --num-processes > 1"),
    (["--judge", ""], "--judge is empty"),
    (["--judge", "minilm-l6", "--base-url", "http://127.0.0.1:9/v1"], "--base-url is for a judge behind a server"),
    (["--judge", "server:m", "--base-url", "http://127.0.0.1:9/v1", "--max-concurrency", "0"],
     "--max-concurrency must be at least 1"),
])
def test_options_that_would_do_nothing_are_usage_errors(argv, message, tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRANK_DATA", str(DATA))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=message) as e:
        cli.main(["judge", "--no-progress", "--contexts", "0:1", "--candidates", "3", *argv])
    assert e.value.code == 2


def test_assess_checks_its_scorers_before_judging(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRANK_DATA", str(DATA))
    monkeypatch.chdir(tmp_path)
    for methods, message in (("foo", "unknown scorer"), ("win_ratio,win_ratio", "more than once")):
        with pytest.raises(SystemExit, match=message) as e:
            cli.main(["assess", "--methods", methods, "--store", "s.jsonl", "--no-progress"])
        assert e.value.code == 2 and not (tmp_path / "s.jsonl").exists()


def test_a_template_with_an_unknown_placeholder_or_a_folder_is_refused(tmp_path):
    from jaxrank.assessment.zepo import load_template

    (tmp_path / "t.txt").write_text("{context} {a} {b} {summary}")
    with pytest.raises(ValueError, match=r"unknown placeholder\(s\) \{summary\}"):
        load_template(tmp_path / "t.txt")
    (tmp_path / "j.txt").write_text('{context} {a} {b} answer as {"choice": "A"}')
    assert load_template(tmp_path / "j.txt").render("c", "x", "y").endswith('{"choice": "A"}')
    (tmp_path / "tdir").mkdir()
    with pytest.raises(SystemExit, match="is a folder; give a template file"):
        cli.main(["judge", "--judge", "minilm-l6", "--template", str(tmp_path / "tdir"), "--store",
                  str(tmp_path / "s.jsonl")])


def test_weights_quantised_judges_into_its_own_store_keys(smollm2, monkeypatch, tmp_path, capsys):
    """``--weights quantised`` judges with the GGUF's blocks kept: the same p as float32 within the quantised tests'
    tolerance, under a fingerprint of its own (never read as the float judge's); an encoder is refused in one line."""
    import json

    monkeypatch.setenv("JAXRANK_DATA", str(DATA))
    monkeypatch.chdir(tmp_path)
    recs = {}
    for w in ("float", "quantised"):
        store = tmp_path / f"{w}.jsonl"
        cli.main(["judge", "--judge", "smollm2-135m", "--contexts", "0:1", "--candidates", "2", "--no-progress",
                  "--answer-prefix", "Summary", "--weights", w, "--store", str(store)])
        recs[w] = [json.loads(x) for x in store.read_text().splitlines() if x.strip()]
        recs[w] = [r for r in recs[w] if "p" in r]
    assert len(recs["float"]) == len(recs["quantised"]) == 2
    for a, b in zip(recs["float"], recs["quantised"]):
        assert abs(a["p"] - b["p"]) < 1e-4
    fps = {w: {str(r.get("fingerprint", r.get("judge_fingerprint"))) for r in rs} for w, rs in recs.items()}
    assert all(f.endswith("-quantised") or "-quantised-" in f for f in fps["quantised"]), fps
    assert not fps["float"] & fps["quantised"]
    with pytest.raises(SystemExit, match="quantised") as e:
        cli.main(["judge", "--judge", "minilm-l6", "--contexts", "0:1", "--candidates", "2", "--no-progress",
                  "--weights", "quantised", "--store", str(tmp_path / "m.jsonl")])
    assert "Traceback" not in capsys.readouterr().err
