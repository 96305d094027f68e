"""One's own texts: ``jaxrank.data.from_records`` / ``read_records`` and ``jaxrank assess --data FILE``.

Every expectation is computed here, independently of the code under test: the data set by hand,
the store name with :mod:`hashlib`, the report's Spearman from the stored judgements with
``reference.win_ratio`` and SciPy, the ranking and its intervals with ``reference.soft_bt`` and a
NumPy pseudo-inverse of the Laplace precision.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats

import reference
from jaxrank import cli
from jaxrank.assessment._report_stats import RANK_SCORE_PRIOR
from jaxrank.data import from_records, label_matrix, read_records

ROOT = Path(__file__).resolve().parents[1]

TEXTS = {
    "q1": ("Explain why the sky is blue.", {
        "a": ("Sunlight scatters off air molecules, and blue light scatters most, so the sky looks blue.", 5),
        "b": ("Because the ocean reflects onto it.", 1),
        "c": ("Rayleigh scattering: shorter wavelengths scatter more strongly in air.", 4),
        "d": ("The sky is blue on clear days.", 2),
    }),
    "q2": ("Summarise: the cat sat on the mat all afternoon, ignoring the dog.", {
        "a": ("A cat lazed on a mat all afternoon and ignored a dog.", 5),
        "b": ("The dog chased the cat around the garden.", 1),
        "c": ("Cat on mat, dog ignored.", 3.5),
        "d": ("It was an afternoon.", 2),
    }),
}


def records(score=True):
    out = []
    for cid, (ctx, cands) in TEXTS.items():
        for k, (text, s) in cands.items():
            rec = {"context_id": cid, "context": ctx, "candidate_id": k, "candidate": text}
            if score:
                rec["score"] = s
            out.append(rec)
    return out


def write(path: Path, recs) -> Path:
    if path.suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(recs[0]))
            w.writeheader()
            w.writerows(recs)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.Table.from_pylist(recs), path)
    return path


# ------------------------------------------------------------------------------------- Python


def test_from_records_is_the_data_set_written_out_by_hand():
    ds = from_records(records())
    assert ds.column_names == ["context_id", "context", "candidate_id", "candidate", "reference", "score"]
    want = [(cid, ctx, k, text, "", float(s)) for cid, (ctx, cands) in TEXTS.items() for k, (text, s) in cands.items()]
    assert [tuple(r.values()) for r in ds] == want
    lm = label_matrix(ds, "score")
    np.testing.assert_array_equal(lm.labels, [[5, 1, 4, 2], [5, 1, 3.5, 2]])
    assert lm.context_ids == ["q1", "q2"] and lm.candidate_ids == [list("abcd")] * 2


def test_tables_and_files_give_the_same_data_set(tmp_path):
    import pandas as pd
    import pyarrow as pa

    want = from_records(records()).to_list()
    assert from_records(pd.DataFrame(records())).to_list() == want
    assert from_records(pa.Table.from_pylist(records())).to_list() == want
    assert from_records({k: [r[k] for r in records()] for k in records()[0]}).to_list() == want   # columns
    assert from_records(iter(records())).to_list() == want
    for suffix in (".csv", ".jsonl", ".parquet"):
        assert read_records(write(tmp_path / f"t{suffix}", records())).to_list() == want, suffix


def test_rows_in_any_order_group_by_first_appearance_and_ids_are_text():
    recs = [{"context_id": 7, "context": "x", "candidate_id": 2, "candidate": "two", "fluency": "3"},
            {"context_id": "z", "context": "y", "candidate_id": "p", "candidate": "P", "fluency": ""},
            {"context_id": 7, "context": "", "candidate_id": 1, "candidate": "one", "fluency": 4.5},
            {"context_id": "z", "context": "y", "candidate_id": "q", "candidate": "Q", "fluency": None}]
    ds = from_records(recs)
    assert ds["context_id"] == ["7", "7", "z", "z"] and ds["candidate_id"] == ["2", "1", "p", "q"]
    assert ds["context"] == ["x", "x", "y", "y"]            # a context's text given on one row is enough
    assert ds["fluency"][:2] == [3.0, 4.5] and all(math.isnan(v) for v in ds["fluency"][2:])


@pytest.mark.parametrize("change,message", [
    (lambda r: [{k: v for k, v in x.items() if k != "candidate_id"} for x in r],
     r"records, record 0: no 'candidate_id' field"),
    (lambda r: r + [dict(r[1])], r"record 8: candidate 'b' of context 'q1' appears twice \(first at records, record 1\)"),
    (lambda r: r[:4] + r[4:5], r"record 4: context 'q2' has one candidate \('a'\); a comparison needs two"),
    (lambda r: [dict(x, score="good") if n == 2 else x for n, x in enumerate(r)],
     r"record 2: 'score' = 'good' is not a number"),
    (lambda r: [dict(x, extra=("text" if n == 3 else n)) for n, x in enumerate(r)],
     r"record 3: 'extra' = 'text' is not a number: the field mixes numbers and text"),
    (lambda r: [dict(x, candidate="  ") if n == 5 else x for n, x in enumerate(r)],
     r"record 5: field 'candidate' is empty"),
    (lambda r: [dict(x, context="other") if n == 6 else x for n, x in enumerate(r)],
     r"record 6: context 'q2' has another text than at records, record 4"),
    (lambda r: [], "records: no records"),
])
def test_from_records_errors_name_the_row_and_the_field(change, message):
    with pytest.raises(ValueError, match=message):
        from_records(change(records()))


def test_a_text_field_is_a_note_left_out():
    ds = from_records([dict(r, system=f"sys-{n}") for n, r in enumerate(records())])
    assert "system" not in ds.column_names and "score" in ds.column_names


# ---------------------------------------------------------------------------------- the CLI


def _store_records(path: Path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _table(text: str, header_start: str) -> list[list[str]]:
    """The rows of the markdown table whose header line starts with ``header_start``."""
    lines = text.splitlines()
    k = next(n for n, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[k:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[:1] + rows[2:]


def _assess(tmp_path, data, *extra):
    cli.main(["assess", "--data", str(data), "--no-progress", "--no-compilation-cache", "-o", str(tmp_path / "out"),
              *extra])


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_assess_a_file_with_human_scores(suffix, tmp_path, monkeypatch, minilm):
    monkeypatch.chdir(tmp_path)
    data = write(tmp_path / f"my texts{suffix}", records())
    name = f"my_texts-{hashlib.sha256(data.read_bytes()).hexdigest()[:12]}"
    _assess(tmp_path, data, "--methods", "win_ratio,average_probability")
    stores = list((tmp_path / "results" / "judgements").glob("*.jsonl"))
    assert [s.name for s in stores] == [f"{name}-relevance-minilm-l6-cos-k20.jsonl"]
    recs = _store_records(stores[0])
    assert len(recs) == 2 * 4 * 3                                # every ordered pair of both contexts
    [md] = (tmp_path / "out").glob(f"assess-{name}-relevance-minilm-l6-*.md")   # --methods: the options' hash
    report = md.read_text()
    assert report.startswith(f"# my texts{suffix} ({name}) score: judge minilm-l6, 2 contexts")   # its column
    per_context = {row[0]: row for row in _table(report, "| context |")[1:]}
    head = _table(report, "| context |")[0]
    for cid, (_, cands) in TEXTS.items():
        ids = list(cands)
        mine = [r for r in recs if r["context"] == cid]
        i = [ids.index(r["a"]) for r in mine]
        j = [ids.index(r["b"]) for r in mine]
        p = [r["p"] for r in mine]
        human = [cands[k][1] for k in ids]
        for method, ref in (("win_ratio", reference.win_ratio), ("average_probability", reference.average_probability)):
            s = ref(i, j, p, np.ones(len(p)), 4)
            rho = stats.spearmanr(s, human).statistic
            cell = per_context[cid][head.index(method)]
            if np.isfinite(rho) and np.ptp(s) > 0:
                assert float(cell) == pytest.approx(rho, abs=5e-4), (cid, method)
    with md.with_name(f"{md.stem}-scores.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["context"], r["candidate"], float(r["human"])) for r in rows] == \
        [(cid, k, float(s)) for cid, (_, c) in TEXTS.items() for k, (_, s) in c.items()]


def test_two_files_never_share_a_store(tmp_path, monkeypatch, minilm):
    """Same stem, same ids, other texts: another data set name, so another store."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    one = write(tmp_path / "x" / "t.csv", records())
    other = write(tmp_path / "y" / "t.csv", [dict(r, candidate=r["candidate"] + " Indeed.") for r in records()])
    for f in (one, other):
        cli.main(["judge", "--data", str(f), "--no-progress", "--no-compilation-cache", "--contexts", "0"])
    names = sorted(p.name for p in (tmp_path / "results" / "judgements").glob("*.jsonl"))
    want = sorted(f"t-{hashlib.sha256(f.read_bytes()).hexdigest()[:12]}-relevance-minilm-l6-cos-k20.jsonl"
                  for f in (one, other))
    assert names == want and want[0] != want[1]


def test_assess_without_human_scores_ranks_with_intervals(tmp_path, monkeypatch, minilm, capsys):
    monkeypatch.chdir(tmp_path)
    data = write(tmp_path / "plain.jsonl", records(score=False))
    name = f"plain-{hashlib.sha256(data.read_bytes()).hexdigest()[:12]}"
    _assess(tmp_path, data)
    err = capsys.readouterr().err
    assert "no human scores" in err
    report = (tmp_path / "out" / f"assess-{name}-relevance-minilm-l6.md").read_text()
    said = [line for line in report.splitlines() if "No human scores" in line]
    assert len(said) == 1 and "no agreement figures" in said[0]
    for absent in ("Spearman |", "Pairwise accuracy", "Verdict", "nan", "NaN"):
        assert absent not in report, absent
    recs = _store_records(tmp_path / "results" / "judgements" / f"{name}-relevance-minilm-l6-cos-k20.jsonl")
    z = stats.norm.ppf(0.975)
    for cid, (_, cands) in TEXTS.items():
        ids = list(cands)
        mine = [r for r in recs if r["context"] == cid]
        i = np.array([ids.index(r["a"]) for r in mine])
        j = np.array([ids.index(r["b"]) for r in mine])
        p = np.array([r["p"] for r in mine])
        # the report's ranking: the MAP under its weak prior N(0, 1/lam) on each score, and the Laplace
        # covariance of the centred scores (SciPy and NumPy, independently of jaxrank)
        lam = RANK_SCORE_PRIOR

        def neg_log_post(z):
            d = z[i] - z[j]
            return (p * np.logaddexp(0, -d) + (1 - p) * np.logaddexp(0, d)).sum() + lam / 2 * z @ z

        s = optimize.minimize(neg_log_post, np.zeros(4), method="BFGS", options={"gtol": 1e-10}).x
        q = 1 / (1 + np.exp(-(s[i] - s[j])))
        h = np.zeros((4, 4))
        for a, b, v in zip(i, j, q * (1 - q)):
            h[a, a] += v; h[b, b] += v; h[a, b] -= v; h[b, a] -= v
        centre = np.eye(4) - 1.0 / 4
        se = np.sqrt(np.diag(centre @ np.linalg.inv(h + lam * np.eye(4)) @ centre))
        rows = _table(report.split(f"## Context {cid}")[1], "| rank |")[1:]
        assert [r[1] for r in rows] == [ids[k] for k in np.argsort(-s, kind="stable")]
        for r in rows:
            k = ids.index(r[1])
            lo, hi = (float(x) for x in re.findall(r"[-+][\d.]+", r[3]))
            assert float(r[2]) == pytest.approx(s[k], abs=2e-3)
            assert (lo, hi) == pytest.approx((s[k] - z * se[k], s[k] + z * se[k]), abs=2e-3 + 1e-3 * se[k])
    with (tmp_path / "out" / f"assess-{name}-relevance-minilm-l6-scores.csv").open() as fh:
        assert {r["human"] for r in csv.DictReader(fh)} == {""}


def _one_line_error(capsys, argv, status=2):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == status
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_missing_column_is_one_line_naming_file_and_column(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    data = write(tmp_path / "t.csv", [{k: v for k, v in r.items() if k != "candidate"} for r in records()])
    err = _one_line_error(capsys, ["assess", "--data", str(data), "--no-progress"])
    assert str(data) in err and "'candidate'" in err and "line 1 (the header)" in err
    data = write(tmp_path / "t.jsonl", [r if n != 3 else {k: v for k, v in r.items() if k != "context_id"}
                                         for n, r in enumerate(records())])
    err = _one_line_error(capsys, ["judge", "--data", str(data), "--no-progress"])
    assert f"{data}: line 4: no 'context_id' field" in err
    assert not (tmp_path / "results").exists()


def test_score_columns_named_as_aspects_are_chosen_by_aspect(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    recs = [{**{k: v for k, v in r.items() if k != "score"}, "fluency": r["score"], "coherence": 1}
            for r in records()]
    data = write(tmp_path / "aspects.csv", recs)
    err = _one_line_error(capsys, ["assess", "--data", str(data), "--no-progress"])    # --aspect relevance
    assert "no human score column 'relevance'" in err and "fluency, coherence" in err and "--aspect" in err


def test_non_utf8_file_names_the_file_and_the_encoding(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "latin.csv"
    data.write_bytes("context_id,context,candidate_id,candidate\nq,Caf\u00e9,a,x\nq,Caf\u00e9,b,y\n".encode("latin-1"))
    err = _one_line_error(capsys, ["assess", "--data", str(data), "--no-progress"])
    assert str(data) in err and "not UTF-8" in err and "line 2" in err and "0xe9" in err


def test_a_missing_file_and_a_directory_are_one_line_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = _one_line_error(capsys, ["assess", "--data", "nothing.csv"])
    assert "nothing.csv: no such file" in err and "summeval" in err
    (tmp_path / "d.csv").mkdir()
    assert "is a directory" in _one_line_error(capsys, ["judge", "--data", "d.csv"])
    assert "nothing.jsonl: no such file" in _one_line_error(capsys, ["zepo", "--data", "nothing.jsonl"])


def test_data_set_not_found_says_where_it_looked_and_how_to_point_at_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JAXRANK_DATA", str(tmp_path))          # a folder without the data sets
    with pytest.raises(SystemExit) as e:
        cli.main(["assess", "--data", "summeval", "--no-progress"])
    msg = str(e.value)
    assert str(tmp_path / "summeval" / "summeval.jsonl") in msg and f"$JAXRANK_DATA={tmp_path}" in msg
    assert "export JAXRANK_DATA=" in msg and "--data FILE" in msg
    monkeypatch.setenv("JAXRANK_DATA", str(tmp_path / "absent"))
    with pytest.raises(SystemExit) as e:
        cli.main(["judge", "--data", "hanna", "--no-progress"])
    msg = str(e.value)
    assert f"looked in {tmp_path / 'absent'}" in msg and "export JAXRANK_DATA=" in msg and "--data FILE" in msg


def test_help_names_jaxrank_data(capsys):
    for command in ("assess", "judge", "zepo"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        assert "JAXRANK_DATA" in out and ".csv, .jsonl, .json or .parquet FILE" in out, command


# ------------------------------------------------------------------------ what a newcomer sees

HIDE_TORCH = """
import importlib.machinery as m, sys
class Hide(m.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        return None if name == "torch" or name.startswith("torch.") else m.PathFinder.find_spec(name, path, target)
sys.meta_path[:] = [Hide if f is m.PathFinder else f for f in sys.meta_path]
"""


def test_no_pytorch_notice_on_a_model_command(tmp_path, minilm):
    """Without PyTorch, transformers says "PyTorch was not found" on import (checked first, so the test shows the
    notice would appear); ``jaxrank judge``, which imports it for its tokenizer, shows no such line."""
    env = dict(os.environ, JAXRANK_COMPILATION_CACHE="0")
    bare = subprocess.run([sys.executable, "-c", HIDE_TORCH + "import transformers"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert "PyTorch was not found" in bare.stderr
    data = write(tmp_path / "t.csv", records())
    run = subprocess.run([sys.executable, "-c", HIDE_TORCH + "from jaxrank.cli import main; main()", "judge",
                          "--data", str(data), "--no-progress", "--contexts", "0"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "12 judgements of 1 context" in run.stdout
    assert "PyTorch was not found" not in run.stderr + run.stdout


def test_the_torch_notice_filter_is_scoped():
    import logging

    from jaxrank._notices import quiet_torch_notice

    logger = logging.getLogger("transformers")
    before = list(logger.filters)
    seen = []

    class Catch(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    h = Catch()
    logger.addHandler(h)
    try:
        with quiet_torch_notice():
            logger.warning("PyTorch was not found. Models won't be available and only tokenizers ...")
            logger.warning("another notice")
        logger.warning("PyTorch was not found. Models won't be available (after the block)")
    finally:
        logger.removeHandler(h)
    assert seen == ["another notice", "PyTorch was not found. Models won't be available (after the block)"]
    assert logger.filters == before
