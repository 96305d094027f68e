"""ZEPO: the zero-shot objectives against NumPy, multi-template judging against one template at a time,
the greedy search's guarantee, the whole loop with a tiny-model paraphraser, its resume and its rejections."""

import json
import zlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxrank import fairness
from jaxrank.assessment import zepo
from jaxrank.assessment.run import ContextSet
from jaxrank.assessment.store import JudgementStore
from jaxrank.judges.pairwise import Judgement, PromptJudge
from jaxrank.judges.prompts import PairwiseTemplate, pairwise_template
from tiny_lm import ByteTokenizer, tiny_lm


# ------------------------------------------------------------------ objectives
def np_objectives(p):
    """The paper's formulas, written independently in NumPy (zepo eq. 1, App. A)."""
    p = np.asarray(p, np.float64)
    rate_a = np.mean(np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, 0.5)))
    dist = np.array([rate_a, 1 - rate_a])
    fair = -np.mean(np.abs(0.5 - dist))
    q = np.clip(p, 1e-7, 1 - 1e-7)
    conf = np.mean(q * np.log(q) + (1 - q) * np.log(1 - q))
    calib = abs(np.mean(np.log(q) - np.log(1 - q)))
    return rate_a, fair, conf, calib


DECISION_SETS = {
    "all A": ([0.9, 0.8, 0.7, 0.6, 0.95, 0.55], -0.5),
    "balanced": ([0.9, 0.2, 0.7, 0.4, 0.6, 0.1], 0.0),
    "2:1": ([0.9, 0.8, 0.3, 0.7, 0.6, 0.2], -1 / 6),
}


@pytest.mark.parametrize("name", DECISION_SETS)
def test_objectives_match_numpy(name):
    p, fair_closed = DECISION_SETS[name]
    rate, fair, conf, calib = np_objectives(p)
    assert fair == pytest.approx(fair_closed, abs=1e-12)
    np.testing.assert_allclose(fairness.decision_rate(np.array(p)), rate, atol=1e-6)
    np.testing.assert_allclose(fairness.fairness(np.array(p)), fair, atol=1e-6)
    np.testing.assert_allclose(fairness.confidence(np.array(p)), conf, atol=1e-5)
    np.testing.assert_allclose(fairness.batch_calibration(np.array(p)), calib, atol=1e-5)
    np.testing.assert_allclose(fairness.context_free_confidence(np.array(p)), conf, atol=1e-5)


def test_objectives_batch_and_padding():
    sets = [v[0] for v in DECISION_SETS.values()]
    p = np.array(sets, np.float32)                         # [K=3, R=6]: one value per row
    np.testing.assert_allclose(fairness.fairness(p), [np_objectives(s)[1] for s in sets], atol=1e-6)
    padded = np.concatenate([p, np.full((3, 4), 0.99, np.float32)], 1)
    w = np.concatenate([np.ones((3, 6)), np.zeros((3, 4))], 1)
    for f in (fairness.fairness, fairness.confidence, fairness.batch_calibration, fairness.decision_rate):
        np.testing.assert_allclose(f(padded, w), f(p), atol=1e-6)
    assert float(fairness.confidence(np.full(4, 0.5))) == pytest.approx(-np.log(2), abs=1e-6)
    with pytest.raises(ValueError, match="objective"):
        fairness.objective("beauty")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.01, 0.99), min_size=1, max_size=30))
def test_fairness_invariants(p):
    p = np.array(p, np.float32)
    f = float(fairness.fairness(p))
    assert -0.5 - 1e-6 <= f <= 1e-6
    np.testing.assert_allclose(fairness.fairness(1 - p), f, atol=1e-6)            # swapping A and B
    np.testing.assert_allclose(fairness.fairness(p[::-1]), f, atol=1e-6)          # order of pairs
    np.testing.assert_allclose(f, np_objectives(p)[1], atol=1e-6)
    both = np.concatenate([p, 1 - p])                                            # a perfectly consistent judge
    np.testing.assert_allclose(fairness.batch_calibration(both), 0.0, atol=1e-4)


# ----------------------------------------------------- multi-template judging
CTX = "The city council approved a new park on Monday. It will open next spring near the river."
CANDS = ["A park was approved by the council.", "The council met on Monday.", "A riverside park opens in spring."]
SEED = pairwise_template("summeval", "coherence", style="zepo")
OTHERS = ["Pick the summary with better coherence: answer A or B.",
          "Which one is more coherent in coherence terms? Reply A or B only, nothing else at all please.",
          "coherence: A or B?"]


@pytest.mark.parametrize("chat", [False, True])
def test_compare_templates_equals_one_template_at_a_time(chat):
    judge = PromptJudge(tiny_lm(chat=chat, seed=1), SEED, batch_size=4)
    temps = [SEED] + [zepo.with_instruction(SEED, s) for s in OTHERS]
    i, j = np.array([0, 1, 2, 0, 2]), np.array([1, 0, 0, 2, 1])
    together = judge.compare_templates(temps, CTX, CANDS, i, j)
    for t, r in zip(temps, together):
        alone = PromptJudge(judge.lm, t, batch_size=3).compare(CTX, CANDS, i, j)
        np.testing.assert_allclose(r.p, alone.p, atol=1e-5)
        np.testing.assert_allclose(r.logits, alone.logits, atol=1e-4)
    assert len({float(r.p[0]) for r in together}) == len(temps)     # the instruction does change p


def test_compare_templates_refuses_other_prefix_or_labels():
    judge = PromptJudge(tiny_lm(), SEED)
    moved = PairwiseTemplate("Text: {context}\n\nA: {a}\n\nB: {b}\n\ncoherence? A or B")
    with pytest.raises(ValueError, match=r"templates\[1\].*prefix"):
        judge.compare_templates([SEED, moved], CTX, CANDS, [0], [1])
    relabel = PairwiseTemplate(SEED.text, labels=("1", "2"))
    with pytest.raises(ValueError, match=r"templates\[1\].*label"):
        judge.compare_templates([SEED, relabel], CTX, CANDS, [0], [1])
    with pytest.raises(ValueError, match="templates"):
        judge.compare_templates([], CTX, CANDS, [0], [1])


def test_check_candidate_reasons():
    ok = "Which summary has better coherence? Return A or B."
    assert zepo.check_candidate(ok, "coherence") is None
    assert "aspect" in zepo.check_candidate("Which summary is better? A or B.", "coherence")
    assert "label 'B'" in zepo.check_candidate("Better coherence? Say A.", "coherence")
    assert "label 'A'" in zepo.check_candidate("Better coherence? Say a or B.", "coherence")
    assert "placeholder" in zepo.check_candidate("coherence of {a}: A or B", "coherence")
    assert "empty" in zepo.check_candidate("  ", "coherence")
    assert "window" in zepo.check_candidate(ok + " x" * 50, "coherence", max_tokens=40,
                                            count_tokens=lambda s: len(s.split()))
    moved = PairwiseTemplate("Text: {context} {a} {b} " + ok)
    assert "prefix" in zepo.check_candidate(ok, "coherence", seed=SEED, template=moved)
    assert zepo.instruction_of(zepo.with_instruction(SEED, ok)) == ok


# ------------------------------------------------------------------ the search
def _contexts(n=3, m=4):
    rng = np.random.default_rng(0)
    words = ["park", "river", "council", "spring", "city", "rain", "open", "new"]
    texts = [" ".join(rng.choice(words, 12)) for _ in range(n)]
    cands = [[" ".join(rng.choice(words, 5)) + f" {k}" for k in range(m)] for _ in range(n)]
    return ContextSet([f"c{k}" for k in range(n)], texts, [[f"s{x}" for x in range(m)] for _ in range(n)], cands)


class HashJudge:
    """A deterministic stand-in judge: p from a hash of (template, pair), so each prompt has its own bias."""

    name = "hash"

    def __init__(self):
        self.lm = type("LM", (), {"tokenizer": ByteTokenizer()})()
        self.rows = 0

    def compare_templates(self, templates, context, candidates, i, j, progress=None):
        out = []
        for t in templates:
            bias = (zlib.crc32(t.text.encode()) % 1000) / 1000
            p = np.array([(zlib.crc32(f"{t.text}|{candidates[a]}|{candidates[b]}".encode()) % 1000) / 1000
                          for a, b in zip(i, j)]) * 0.5 + 0.5 * bias
            out.append(Judgement(p.astype(np.float32), False, np.zeros((len(p), 2), np.float32)))
            self.rows += len(p)
        return out


class ListParaphraser:
    def __init__(self, seed):
        self.rng, self.name, self.temperature, self.seed = np.random.default_rng(seed), "list", 0.0, seed

    def propose(self, instruction, n, epoch):
        verbs = ["Pick", "Choose", "Say", "Decide", "Tell"]
        return [f"{self.rng.choice(verbs)} which summary has better coherence ({self.rng.integers(1e6)}): A or B."
                for _ in range(n)]


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(list(fairness.OBJECTIVES)))
def test_greedy_never_worse_than_seed(tmp_path_factory, seed, objective):
    tmp = tmp_path_factory.mktemp("greedy")
    judge, cs = HashJudge(), _contexts()
    sample = zepo.sample_pairs(cs, num_contexts=2, pairs_per_context=3, seed=seed)
    res = zepo.zepo_search(judge, ListParaphraser(seed), SEED, sample, "coherence", store=tmp / "s.jsonl",
                           log=tmp / "l.jsonl", epochs=3, population=4, objective=objective)

    def independent(t):       # the objective from the templates' p, recomputed in NumPy
        p = np.concatenate([judge.compare_templates([t], c, cands, pr[:, 0], pr[:, 1])[0].p
                            for c, cands, pr in zip(sample.texts, sample.candidates, sample.pairs)])
        pcf = judge.compare_templates([t], "[N/A]", ["[N/A]"] * 2, [0, 1], [1, 0])[0].p
        _, fair, conf, calib = np_objectives(p)
        return {"fairness": fair, "confidence": conf, "calibration": -calib,
                "context_free": -np_objectives(pcf)[2]}[objective]

    best, start = independent(res.best), independent(SEED)
    assert best >= start - 1e-6
    all_scores = [independent(zepo.with_instruction(SEED, c["instruction"])) for c in res.candidates]
    assert best == pytest.approx(max(all_scores), abs=1e-5)          # greedy keeps the best seen


class WordParaphraser(zepo.Paraphraser):
    """The tiny model's sampled text, kept as letters, framed so that some candidates keep the template."""

    def propose(self, instruction, n, epoch):
        self.calls = getattr(self, "calls", 0) + 1
        raw = super().propose(instruction, n, epoch)
        out = []
        for k, t in enumerate(raw):
            word = "".join(ch for ch in t if ch.isalpha())[:12] or "plain"
            out.append(f"{word}: which has better coherence? Answer A or B." if k % 2 == 0 else f"{word} A or B")
        return out


class Killed(Exception):
    pass


class CountingJudge:
    """Delegates to a PromptJudge, recording every (template, context, a, b) it is asked to judge."""

    def __init__(self, judge, stop_after=None):
        self.judge, self.stop_after, self.calls, self.keys = judge, stop_after, 0, []
        self.name, self.lm = judge.name, judge.lm

    def compare_templates(self, templates, context, candidates, i, j, progress=None):
        if self.stop_after is not None and self.calls >= self.stop_after:
            raise Killed
        self.calls += 1
        self.keys += [(t.key, context, tuple(candidates), int(a), int(b)) for t in templates for a, b in zip(i, j)]
        return self.judge.compare_templates(templates, context, candidates, i, j, progress=progress)


def _search(tmp, judge, para, cs, sample):
    return zepo.zepo_search(judge, para, SEED, sample, "coherence", store=tmp / "store.jsonl",
                            log=tmp / "log.jsonl", epochs=2, population=4, max_instruction_tokens=80)


def test_whole_loop_tiny_paraphraser_resume_and_rejections(tmp_path):
    lm = tiny_lm(seed=2)
    judge = PromptJudge(lm, SEED, batch_size=8)
    cs = _contexts()
    sample = zepo.sample_pairs(cs, num_contexts=2, pairs_per_context=2, seed=0)

    full = CountingJudge(judge)
    ref = _search(tmp_path / "full", full, WordParaphraser(lm, "coherence", temperature=1.0, seed=5,
                                                            max_new_tokens=12), cs, sample)
    assert len(full.keys) == len(set(full.keys))
    assert ref.rejected and all(r["reason"] for r in ref.rejected)           # "xyz A or B" lacks the aspect
    assert len(ref.candidates) > 1                                           # some paraphrases were scored
    log = [json.loads(x) for x in (tmp_path / "full" / "log.jsonl").read_text().splitlines()]
    logged = [e for e in log if e["event"] == "rejected"]
    assert [e["reason"] for e in logged] == [r["reason"] for r in ref.rejected]
    assert all("aspect" in e["reason"] for e in logged)
    assert [e["epoch"] for e in log if e["event"] == "epoch"] == [0, 1, 2]
    # every scored candidate's template_key is the key its judgements are stored under (the reading's hash in it)
    stored = {r["template"] for r in JudgementStore(tmp_path / "full" / "store.jsonl").records()}
    assert {c["template_key"] for c in ref.candidates} == stored
    for c in ref.candidates:
        assert set(sample.ids) <= set(JudgementStore(tmp_path / "full" / "store.jsonl").comparisons(
            judge=judge.name, template=c["template_key"]).contexts)

    # Killed midway (after a few judging calls), then resumed: nothing judged twice, same result.
    tmp = tmp_path / "killed"
    first = CountingJudge(judge, stop_after=full.calls // 2)
    para = WordParaphraser(lm, "coherence", temperature=1.0, seed=5, max_new_tokens=12)
    with pytest.raises(Killed):
        _search(tmp, first, para, cs, sample)
    calls_before = para.calls
    second = CountingJudge(judge)
    res = _search(tmp, second, para, cs, sample)
    assert not set(first.keys) & set(second.keys)                          # no judgement redone
    assert sorted(first.keys + second.keys) == sorted(full.keys)
    assert calls_before >= 1 and para.calls == 2                             # logged proposals are not regenerated
    assert res.best.text == ref.best.text
    assert [e["objective"] for e in res.epochs] == pytest.approx([e["objective"] for e in ref.epochs], abs=1e-6)
    again = CountingJudge(judge)
    _search(tmp, again, para, cs, sample)
    assert again.calls == 0                                                # a finished search judges nothing
    events = [json.loads(x) for x in (tmp / "log.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [0, 1, 2]   # no duplicated events
    assert len(JudgementStore(tmp / "store.jsonl")) == len(full.keys)


def test_search_log_of_another_search_is_refused(tmp_path):
    judge, cs = HashJudge(), _contexts()
    sample = zepo.sample_pairs(cs, num_contexts=2, pairs_per_context=2)
    zepo.zepo_search(judge, ListParaphraser(0), SEED, sample, "coherence", store=tmp_path / "s.jsonl",
                     log=tmp_path / "l.jsonl", epochs=1, population=2)
    with pytest.raises(ValueError, match="another search"):
        zepo.zepo_search(judge, ListParaphraser(0), SEED, sample, "coherence", store=tmp_path / "s.jsonl",
                         log=tmp_path / "l.jsonl", epochs=1, population=3)
    with pytest.raises(ValueError, match="num_contexts"):
        zepo.sample_pairs(cs, num_contexts=9, pairs_per_context=2)


def test_template_file_round_trip(tmp_path):
    t = zepo.with_instruction(SEED, "Which has better coherence? A or B.")
    assert zepo.load_template(zepo.save_template(t, tmp_path / "t.json")) == t
    (tmp_path / "plain.txt").write_text("Doc: {context}\nA: {a}\nB: {b}\nBetter? A or B\n")
    assert zepo.load_template(tmp_path / "plain.txt").text.endswith("Better? A or B")
    (tmp_path / "bad.txt").write_text("no placeholders")
    with pytest.raises(ValueError, match="bad.txt"):
        zepo.load_template(tmp_path / "bad.txt")


def test_cli_zepo_options_and_template_file(tmp_path, capsys):
    import argparse

    from jaxrank import cli

    for bad in (["--population", "0"], ["--budget", "0"], ["--epochs", "-1"]):
        with pytest.raises(SystemExit, match=bad[0]):
            cli.main(["zepo", "--no-compilation-cache", *bad])
    t = zepo.save_template(zepo.with_instruction(SEED, "Better coherence? A or B."), tmp_path / "best.json")
    ns = argparse.Namespace(template=str(t), data="summeval", aspect="coherence")
    assert cli.common.template_option(ns).text.endswith("Better coherence? A or B.")
    assert cli.common.template_option(argparse.Namespace(template="zepo", data="summeval", aspect="coherence")) == SEED
    with pytest.raises(ValueError, match="no file"):
        cli.common.template_option(argparse.Namespace(template=str(tmp_path / "none.json"), data="summeval",
                                                aspect="coherence"))
    for command in ("judge", "assess"):
        assert cli.build_parser().parse_args([command, "--template", str(t)]).template == str(t)
