"""Review fixes of ``jaxrank judge``/``assess``/``store`` (jaxrank.cli.assess, ._common, .store): shards that
reuse what the main store holds, a context selected twice, report files that differ with the options that
change the report (and a title naming the score column compared with), the server options checked with a
local judge, seeds outside 32 bits, and ``store adopt`` beside a file named ``poe``."""

import csv
import json

import pytest

from jaxrank import cli
from jaxrank.cli import build_parser
from jaxrank.cli._common import report_stem
from jaxrank.cli.assess import _active_options
from test_review_store_run import CountingJudge   # the same counting judge as the pipeline tests


def _data(tmp_path, contexts=6, candidates=4):
    path = tmp_path / "own.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["context_id", "context", "candidate_id", "candidate", "score"])
        for c in range(contexts):
            for n in range(candidates):
                w.writerow([f"c{c}", f"Article {c}", f"s{n}", "word " * (n + 1 + c % 2), (n * 7 + c) % 5])
    return path


@pytest.fixture
def judge(monkeypatch):
    holder = CountingJudge()
    monkeypatch.setattr(cli.common, "make_judge", lambda args, **kw: holder)
    return holder


def _lines(path):
    return [json.loads(x) for x in open(path) if x.strip()]


def test_shards_judge_only_what_the_main_store_lacks_and_merge_to_the_whole_run(tmp_path, judge, capsys):
    data, store = _data(tmp_path), tmp_path / "S.jsonl"
    base = ["judge", "--data", str(data), "--store", str(store), "--no-progress"]
    cli.main(base + ["--contexts", "0:3"])
    assert len(judge.asked) == 3 * 12 and len(_lines(store)) == 36
    judge.asked.clear()
    for k in (0, 1):
        cli.main(base + ["--num-processes", "2", "--process-id", str(k)])
    assert len(judge.asked) == 3 * 12                           # the three contexts S lacks, once each
    assert {ctx for ctx, _, _ in judge.asked} == {"Article 3", "Article 4", "Article 5"}
    shards = [tmp_path / f"S.process-{k}-of-2.jsonl" for k in (0, 1)]
    cli.main(["store", "merge", str(store)] + [str(s) for s in shards])
    merged = _lines(store)
    assert len(merged) == 6 * 12 and len({(r["context"], r["a"], r["b"]) for r in merged}) == 72
    judge.asked.clear()
    cli.main(base)                                               # the merged store holds everything
    assert judge.asked == []


@pytest.mark.parametrize("spec", ["0,0,0,0,0,1", "2,1,2"])
def test_a_context_given_twice_in_contexts_is_a_usage_error(tmp_path, judge, spec, capsys):
    with pytest.raises(SystemExit, match=r"--contexts '[\d,]+' selects context position\(s\) \[\d\] more than once"):
        cli.main(["judge", "--data", str(_data(tmp_path)), "--store", str(tmp_path / "s.jsonl"), "--contexts", spec,
                  "--no-progress"])
    assert judge.asked == []


def test_report_files_differ_with_the_options_that_change_the_report():
    parse = build_parser().parse_args
    default = ("win_ratio", "average_probability")

    def stem(*argv, methods=default):
        return report_stem(parse(["assess", *argv]), methods, default, active=False)

    assert stem() == "assess-summeval-relevance-minilm-l6"                   # the default run's name is kept
    assert stem("--no-progress", "--store", "x.jsonl", "--batch-size", "4") == stem()   # these change no report
    variants = [stem("--contexts", "0:3"), stem("--contexts", "0:4"), stem("--budget", "10"),
                stem("--debias", "permutation"), stem("--template", "zepo"), stem("--seed", "1"),
                stem("--candidates", "3"), stem("--answer-prefix", "none"), stem(methods=("win_ratio",)),
                stem("--contexts", "0:3", "--budget", "10")]
    assert len(set(variants)) == len(variants) and stem() not in variants
    assert all(v.startswith("assess-summeval-relevance-minilm-l6-") for v in variants)
    assert stem("--rank-confidence", "0.8") == stem()                     # an --active option, without --active

    def active(*argv):                   # as run_assess fills in the --active options' defaults first
        args = parse(["assess", "--active", *argv])
        _active_options(args)
        return report_stem(args, default, default, active=True)

    assert active() == "assess-summeval-relevance-minilm-l6-active"
    others = [active("--rank-confidence", "0.8"), active("--rank-confidence", "none"), active("--active-batch", "2"),
              active("--stop-rule", "adjacent"), active("--score-prior", "0.1")]
    assert len(set(others)) == len(others) and active() not in others


def test_two_assess_runs_with_other_contexts_write_two_reports_titled_with_the_score_column(tmp_path, judge,
                                                                                             capsys):
    data, out = _data(tmp_path), tmp_path / "out"
    for spec in ("0:3", "0:4"):
        cli.main(["assess", "--data", str(data), "--store", str(tmp_path / "s.jsonl"), "--contexts", spec,
                  "--methods", "win_ratio", "--no-progress", "-o", str(out)])
    reports = sorted(out.glob("*.md"))
    assert len(reports) == 2 and len(list(out.glob("*-scores.csv"))) == 2
    contexts = sorted(len({row["context"] for row in csv.DictReader(open(str(r)[:-3] + "-scores.csv"))})
                      for r in reports)
    assert contexts == [3, 4]                                   # neither run overwrote the other
    title = reports[0].read_text().splitlines()[0]
    assert title.startswith("# own.csv") and " score: judge" in title and "relevance" not in title


def test_server_options_are_checked_with_any_judge_and_noted_with_a_local_one(tmp_path, judge, capsys):
    data = str(_data(tmp_path, contexts=1))
    for option, value, message in (("--max-concurrency", "0", "--max-concurrency must be at least 1"),
                                   ("--timeout", "-5", "--timeout must be > 0"),
                                   ("--max-retries", "-1", "--max-retries must be >= 0")):
        with pytest.raises(SystemExit, match=message):
            cli.main(["judge", "--data", data, "--store", str(tmp_path / "s.jsonl"), option, value, "--no-progress"])
    assert judge.asked == []
    capsys.readouterr()
    cli.main(["judge", "--data", data, "--store", str(tmp_path / "s.jsonl"), "--timeout", "5", "--api-key-env",
              "NOPE", "--no-progress"])
    err = capsys.readouterr().err
    assert "note: --api-key-env, --timeout apply to a judge behind a server" in err and len(judge.asked) == 12


@pytest.mark.parametrize("seed", ["-1", str(2 ** 32)])
def test_a_seed_outside_32_bits_is_a_usage_error(tmp_path, judge, seed):
    with pytest.raises(SystemExit, match=rf"--seed must lie in \[0, 2\*\*32\) .*got {seed}"):
        cli.main(["judge", "--data", str(_data(tmp_path)), "--store", str(tmp_path / "s.jsonl"), "--budget", "4",
                  "--seed", seed, "--no-progress"])
    assert judge.asked == []


@pytest.mark.parametrize("own_file", [False, True])
def test_store_adopt_checks_no_option_it_does_not_have(minilm, tmp_path, monkeypatch, capsys, own_file):
    import os
    from pathlib import Path

    from jaxrank.data import load_dataset

    monkeypatch.setenv("JAXRANK_DATA", os.environ.get("JAXRANK_DATA", str(Path(__file__).resolve().parents[2]
                                                                           / "shared" / "data")))
    data = str(_data(tmp_path)) if own_file else "summeval"
    ds = load_dataset("summeval") if not own_file else None
    ctx, a, b = ("c0", "s0", "s1") if own_file else (ds["context_id"][0], ds["candidate_id"][0], ds["candidate_id"][1])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "poe").mkdir()                                   # a folder named poe: adopt has no --template
    store = tmp_path / "s.jsonl"
    store.write_text(json.dumps({"judge": "minilm-l6-cos-k20", "template": "none", "context": ctx, "a": a, "b": b,
                                 "p": 0.5}) + "\n")
    capsys.readouterr()
    cli.main(["store", "adopt", str(store), "--judge", "minilm-l6", "--data", data])
    out, err = capsys.readouterr()
    assert "1 judgement(s) of minilm-l6-cos-k20 stamped" in out
    assert "--answer-prefix" not in err and "note:" not in err
