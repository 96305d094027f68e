"""experiments/soft_prompt.py and soft_prompt_merge.py after review: the judge reads after an answer prefix
("auto" by default), every judgement row records its label mass and the settings that made it, and a rerun or
a merge refuses rows of other settings (naming the file and the fields) instead of reusing or mixing them.

The study runs end to end on a tiny random Llama and a three-context data set (seconds, no download). The label
mass is checked against the judge's own label log-probabilities (``exp`` summed), judged again here.
"""

import importlib.util
import json
import sys
import warnings
from pathlib import Path

import datasets
import numpy as np
import pytest

from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import pairwise_template
from tiny_lm import sharpen, tiny_lm

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


def _load(name):
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod                    # soft_prompt_merge imports soft_prompt by name
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(ROOT / "experiments"))


study = _load("soft_prompt")
merger = _load("soft_prompt_merge")

TEXTS = ["The council approved a park by the river.", "A storm closed the coast road until Friday.",
         "The school opens a new library next week."]
CANDS = [["A park was approved.", "The council met.", "A river park is coming.", "Rain is expected."],
         ["The road is closed.", "Crews clear debris.", "Road reopens Friday.", "A storm hit the coast."],
         ["A library opens.", "The school is old.", "New library next week.", "Books are read."]]


def _dataset():
    rows = {k: [] for k in ("context_id", "context", "candidate_id", "candidate", "reference", "coherence")}
    for c, (text, cands) in enumerate(zip(TEXTS, CANDS)):
        for k, cand in enumerate(cands):
            rows["context_id"].append(f"C{c}")
            rows["context"].append(text)
            rows["candidate_id"].append(f"S{k}")
            rows["candidate"].append(cand)
            rows["reference"].append("")
            rows["coherence"].append(float((k * 7 + c) % 5))
    return datasets.Dataset.from_dict(rows)


@pytest.fixture(scope="module")
def lm():
    return sharpen(tiny_lm(seed=1, chat=True), 3.0)


@pytest.fixture
def run(lm, monkeypatch, tmp_path):
    """``soft_prompt.main`` on the tiny model and data set, writing to ``tmp_path``; returns the store's rows."""
    monkeypatch.setattr(study, "load_dataset", lambda name: _dataset())
    monkeypatch.setattr(study, "load_model", lambda name: lm)
    monkeypatch.setattr(study, "plot", lambda *a, **k: None)
    template = tmp_path / "zepo.json"
    template.write_text(json.dumps({"text": "Text: {context}\n\nA: {a}\n\nB: {b}\n\nWhich is more coherent, A or B?",
                                    "name": "zepo-test"}))

    def go(*extra):
        argv = ["--data", "summeval", "--aspect", "coherence", "--model", "tiny", "--train-contexts", "0:1",
                "--eval-contexts", "1:3", "--eval-pairs", "2", "--steps", "1", "--pairs-per-step", "1",
                "--boot", "10", "--template", str(template), "--out", str(tmp_path), *extra]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study.main(argv)
        return study.read_store(tmp_path / "soft_prompt_summeval_coherence_tiny_judgements.jsonl")
    return go


def test_rows_record_the_reading_and_their_settings(run, lm, tmp_path):
    rows = run()
    assert sorted({r["variant"] for r in rows}) == ["seed", "soft", "zepo"] and len(rows) == 6
    judge = PromptJudge(lm, pairwise_template("summeval", "coherence"), answer_prefix="auto")
    with pytest.warns(UserWarning, match="chose"):
        judge.prepare(TEXTS[0], CANDS[0])                 # "auto" is chosen on the first training context
    seed = [r for r in rows if r["variant"] == "seed"]
    for r in rows:
        k = r["key"]
        assert k["answer_prefix"] == judge.template.answer_prefix
        assert k["model_fingerprint"] == judge.fingerprint and k["eval_contexts"] == "1:3"
        assert ("soft" in k) == (r["variant"] == "soft")
        if r["variant"] == "soft":
            assert k["soft"]["lr"] == 1e-2 and k["soft"]["steps"] == 1 and k["judge"].startswith("tiny+soft-")
        assert len(r["label_mass"]) == len(r["p"]) and all(0 < m <= 1 + 1e-6 for m in r["label_mass"])
    assert seed[0]["key"]["template_key"] == judge.template_key
    for r in seed:
        again = judge.compare(TEXTS[r["context_index"] + 1], CANDS[r["context_index"] + 1], r["i"], r["j"])
        np.testing.assert_allclose(r["label_mass"], np.exp(np.asarray(again.logits, np.float64)).sum(1), rtol=1e-4)
    report = (tmp_path / "soft_prompt_summeval_coherence_tiny.md").read_text()
    assert f"answer prefix {judge.template.answer_prefix!r}, label mass " in report
    assert run() == rows                                  # a rerun with the same settings judges nothing again


@pytest.mark.parametrize("change, field", [(("--lr", "0.02"), "lr"), (("--steps", "2"), "steps"),
                                           (("--answer-prefix", "Verdict:"), "answer_prefix"),
                                           (("--seed", "1"), "seed")])
def test_a_rerun_with_other_settings_is_refused(run, tmp_path, change, field):
    before = run()
    store = tmp_path / "soft_prompt_summeval_coherence_tiny_judgements.jsonl"
    with pytest.raises(SystemExit, match=f"{store}.*{field}"):
        run(*change)
    assert study.read_store(store) == before              # nothing written


def test_old_rows_are_read_as_the_old_reading_and_not_mixed(run, tmp_path):
    store = tmp_path / "soft_prompt_summeval_coherence_tiny_judgements.jsonl"
    old = [{"variant": v, "context": f"C{c}", "context_index": c - 1, "i": [0, 1], "j": [1, 0], "p": [0.9, 0.8],
            "seconds": 0.1} for v in ("seed", "soft") for c in (1, 2)]
    store.write_text("".join(json.dumps(r) + "\n" for r in old))
    with pytest.raises(SystemExit, match="reading"):
        run()
    run("--summarise-only")
    summary = json.loads((tmp_path / "soft_prompt_summeval_coherence_tiny.json").read_text())
    assert {r["reading"] for r in summary["rows"]} == {study.OLD_READING["reading"]}
    assert "old reading (answer prefix and label mass not recorded)" in (
        tmp_path / "soft_prompt_summeval_coherence_tiny.md").read_text()


def test_committed_soft_prompt_stores_are_old_rows_and_summarise():
    """The committed stores predate the keys: every row reads as the old reading, and each store is one run."""
    stores = sorted(RESULTS.rglob("soft_prompt_*_judgements.jsonl"))
    assert stores
    for s in stores:
        rows = study.read_store(s)
        assert {json.dumps(study.row_key(r)) for r in rows} == {json.dumps(study.OLD_READING)}
        study.check_rows(rows, [s] * len(rows))
        n = 1 + max(max(r["i"] + r["j"]) for r in rows)
        labels = [np.arange(n, dtype=np.float32)] * (1 + max(r["context_index"] for r in rows))
        assert all("reading" in r for r in study.summarise(rows, labels, boot=5, seed=0))


def test_merge_refuses_rows_of_other_settings_naming_the_file(tmp_path):
    key = {"data": "summeval", "aspect": "coherence", "model_fingerprint": "fp", "eval_contexts": "1:3",
           "candidates": None, "eval_pairs": 2, "seed": 0, "judge": "tiny+soft-x", "template_key": "t",
           "answer_prefix": "", "soft": {"lr": 0.01}}

    def write(name, variant, key):
        p = tmp_path / name
        p.write_text("".join(json.dumps({"variant": variant, "context": c, "context_index": 0, "i": [0], "j": [1],
                                         "p": [0.6], "key": key}) + "\n" for c in ("C1", "C2")))
        return p
    a = write("a.jsonl", "soft", key)
    b = write("b.jsonl", "soft", dict(key, soft={"lr": 0.002}))
    out = tmp_path / "merged" / "m.jsonl"
    variants, contexts, n = merger.merge([(a, {"soft": "soft (lr 1e-2)"}), (b, {"soft": "soft (lr 2e-3)"})], out)
    assert variants == ["soft (lr 1e-2)", "soft (lr 2e-3)"] and n == 4
    with pytest.raises(ValueError, match=f"{b}.*soft"):               # one merged name, two learning rates
        merger.merge([(a, {"soft": "soft"}), (b, {"soft": "soft"})], out)
    c = write("c.jsonl", "seed", dict(key, eval_pairs=5))
    with pytest.raises(ValueError, match=f"{c}.*eval_pairs"):          # other held-out pairs
        merger.merge([(a, {"soft": "soft"}), (c, {"seed": "seed"})], out)
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps({"variant": "seed", "context": "C1", "context_index": 0, "i": [0], "j": [1],
                               "p": [0.6]}) + "\n")
    with pytest.raises(ValueError, match=f"{old}.*reading"):           # old rows with new ones
        merger.merge([(a, {"soft": "soft"}), (old, {"seed": "seed"})], out)


def test_a_rerun_whose_vectors_differ_is_refused(run, tmp_path):
    """Rows judged with other vectors (the soft judge's name carries their hash) are not reused."""
    rows = run()
    store = tmp_path / "soft_prompt_summeval_coherence_tiny_judgements.jsonl"
    for r in rows:
        if r["variant"] == "soft":
            r["key"]["judge"] = "tiny+soft-before_question-k15-00000000"
    store.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SystemExit, match="judge: .*hash of the soft prompt's vectors"):
        run()
