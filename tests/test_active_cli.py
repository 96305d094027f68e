"""``jaxrank assess --active``: active assessment through the resumable judgement store.

The judge is a cheap fake (p = sigmoid(scale * (h_a - h_b)) of the human scores
h) and the data set a small synthetic one in jaxrank's schema, so these tests
need neither model weights nor the shared data folder.
"""

import csv
import json

import numpy as np
import pytest

from jaxrank import cli
from jaxrank.assessment.active import StoreJudgeFn, active_judge_contexts
from jaxrank.judges.pairwise import Judgement
from jaxrank.assessment.run import contexts_of
from jaxrank.assessment.store import JudgementStore
from tiny_data import summary_dataset

N, CONTEXTS = 8, 2
HUMAN = [np.array([1.0, 4.5, 2.0, 5.0, 3.0, 1.5, 4.0, 2.5]),     # distinct scores, 0.5 apart
         np.array([3.5, 1.0, 5.0, 2.0, 4.5, 1.5, 3.0, 4.0])]


def _dataset():
    return summary_dataset(HUMAN)


class FakeJudge:
    """p = sigmoid(scale * (h_a - h_b)) from the human scores; optionally crashes after some compare calls."""

    name = "fake"
    template_key = "t0"
    batch_size = 2

    def __init__(self, scale=3.0, crash_after=None):
        self.scale, self.crash_after, self.asked = scale, crash_after, []
        self.score = {f"summary {n} of article {c}": HUMAN[c][n] for c in range(CONTEXTS) for n in range(N)}

    def compare(self, context, candidates, i, j):
        if self.crash_after is not None and len(self.asked) >= self.crash_after:
            raise KeyboardInterrupt("simulated crash")
        pairs = list(zip(np.asarray(i).tolist(), np.asarray(j).tolist()))
        self.asked.append([(context, a, b) for a, b in pairs])
        d = np.array([self.score[candidates[a]] - self.score[candidates[b]] for a, b in pairs])
        return Judgement((1 / (1 + np.exp(-self.scale * d))).astype(np.float32), False, np.zeros((len(d), 2)))

    @property
    def num_asked(self):
        return sum(map(len, self.asked))


@pytest.fixture
def setup(monkeypatch, tmp_path):
    """Route the CLI to the synthetic data and a fake judge; returns a runner and the judge holder."""
    holder = {"judge": FakeJudge()}
    monkeypatch.setattr("jaxrank.data.load_dataset", lambda name, **kw: _dataset())
    monkeypatch.setattr(cli.common, "make_judge", lambda args: holder["judge"])

    def run(*extra, out="out", store="store.jsonl"):
        cli.main(["assess", "--active", "--judge", "smollm2-135m", "--aspect", "coherence", "--contexts", "0:2",
                  "--store", str(tmp_path / store), "--output", str(tmp_path / out), "--no-progress", "--budget", "40", "--active-batch", "4",
                  "--methods", "average_probability,poe_gaussian", *extra])
        # the file name ends in a hash of the options that change the report (jaxrank.cli._common.report_stem)
        md = max((tmp_path / out).glob("assess-summeval-coherence-smollm2-135m-active-*.md"),
                 key=lambda f: f.stat().st_mtime_ns)
        stem = md.with_suffix("")
        return stem.with_suffix(".md").read_text(), list(csv.DictReader(open(f"{stem}-scores.csv")))

    return run, holder, tmp_path


def test_easy_judge_stops_at_confidence_under_budget(setup, capsys):
    run, holder, tmp_path = setup
    md, rows = run("--rank-confidence", "0.8")
    out = capsys.readouterr().out
    used = {r["context"]: int(r["comparisons"]) for r in rows}
    assert set(used) == {"doc0", "doc1"} and all(N - 1 <= u < 40 for u in used.values())
    assert {r["stopped"] for r in rows} == {"confidence"}
    assert all(float(r["confidence"]) >= 0.8 for r in rows)
    assert holder["judge"].num_asked == sum(used.values())           # every comparison used, asked once
    assert len(JudgementStore(tmp_path / "store.jsonl")) == sum(used.values())
    mean = np.mean(list(used.values()))
    summary = f"Active assessment: {mean:.1f} comparisons per context on average"
    assert summary in out and summary in md and "of all N(N-1) = 56" in md and "of the budget 40" in md
    assert "stopped: 2 confidence" in md and f"{sum(used.values())} judged now, 0 from the store" in md
    for ctx, u in used.items():
        assert f"| {ctx} | " in md and f"| {u} / 56 | confidence |" in md
    # the easy judge ranks like the humans: the scorers agree with them closely
    for r in md.splitlines():
        if r.startswith("| poe_gaussian |"):
            assert float(r.split("|")[2]) > 0.9
    assert len(rows) == CONTEXTS * N and {"human", "poe_gaussian", "average_probability"} <= set(rows[0])


def test_budget_stop_and_no_target(setup):
    run, holder, tmp_path = setup
    holder["judge"] = FakeJudge(scale=0.05)                           # nearly uninformative: never confident
    md, rows = run("--rank-confidence", "0.95", out="b", store="b.jsonl")
    assert {r["stopped"] for r in rows} == {"budget"} and {int(r["comparisons"]) for r in rows} == {40}
    assert "stopped: 2 budget" in md and "40.0 comparisons per context" in md and "100% of the budget" in md
    holder["judge"] = FakeJudge()                                     # 'none': run to the budget even if certain
    md, rows = run("--rank-confidence", "none", "--stop-rule", "adjacent", out="c", store="c.jsonl")
    assert {r["stopped"] for r in rows} == {"budget"} and {int(r["comparisons"]) for r in rows} == {40}
    assert "rank confidence target none, rule adjacent" in md


def test_crash_then_resume_replays_from_store_and_equals_uninterrupted(setup, tmp_path):
    run, holder, _ = setup
    holder["judge"] = FakeJudge()
    md_ref, rows_ref = run("--rank-confidence", "0.85", out="ref", store="ref.jsonl")
    total = holder["judge"].num_asked
    crashing = FakeJudge(crash_after=5)                               # dies mid-way through the run
    holder["judge"] = crashing
    with pytest.raises(KeyboardInterrupt):
        run("--rank-confidence", "0.85", out="res", store="res.jsonl")
    done = {x for call in crashing.asked for x in call}
    assert 0 < len(done) < total
    assert len(JudgementStore(tmp_path / "res.jsonl")) == len(done)  # written as produced
    resumed = FakeJudge()
    holder["judge"] = resumed
    md, rows = run("--rank-confidence", "0.85", out="res", store="res.jsonl")
    again = [x for call in resumed.asked for x in call]
    assert not done & set(again)                                      # the model is not asked for stored pairs
    assert len(again) + len(done) == total
    assert f"{len(again)} judged now, {len(done)} from the store" in md
    assert rows == rows_ref                                           # same comparisons, scores, stops
    strip = lambda t: "\n".join(x for x in t.splitlines() if not x.startswith("Active assessment"))
    assert strip(md) == strip(md_ref)
    ref = [json.loads(x) for x in (tmp_path / "ref.jsonl").read_text().splitlines()]
    res = [json.loads(x) for x in (tmp_path / "res.jsonl").read_text().splitlines()]
    assert sorted((r["context"], r["a"], r["b"], r["p"]) for r in ref) == \
        sorted((r["context"], r["a"], r["b"], r["p"]) for r in res)


def test_store_judge_fn_answers_stored_pairs_and_reuses_judge_runs(tmp_path):
    cs = contexts_of(_dataset(), aspect="coherence", contexts="0:1")
    judge = FakeJudge()
    store = JudgementStore(tmp_path / "s.jsonl")
    fn = StoreJudgeFn(judge, store, cs.ids[0], cs.texts[0], cs.candidates[0], cs.candidate_ids[0], chunk=3)
    p = fn(np.array([0, 1, 0, 2]), np.array([1, 0, 1, 3]))           # (0, 1) twice: judged once
    assert fn.judged == 3 and fn.replayed == 1 and len(judge.asked) == 1 and p[0] == p[2]
    q = fn(np.array([1, 4]), np.array([0, 5]))
    assert fn.judged == 4 and fn.replayed == 2 and q[0] == p[1]
    np.testing.assert_allclose(p[0], 1 / (1 + np.exp(-3 * (HUMAN[0][0] - HUMAN[0][1]))), rtol=1e-6)
    # a store filled by a full `jaxrank judge` run answers the whole active loop: no model call
    from jaxrank.assessment.run import judge_contexts
    judge_contexts(FakeJudge(), cs, store, progress=False)
    silent = FakeJudge(crash_after=0)
    out = active_judge_contexts(silent, cs, store, budget=40, rank_confidence=0.8, progress=False)
    assert out.judged == 0 and out.replayed == out.num_comparisons[0] and out.stopped == ["confidence"]
    sel = out.selection
    assert sel.contexts == ["doc0"] and int((np.asarray(sel.comparisons.weight) > 0).sum()) == out.num_comparisons[0]


@pytest.mark.parametrize("extra, match", [
    (["--selection", "random"], "--selection random cannot be combined with --active"),
    (["--budget", "5"], r"budget 5 is below the 7 comparisons of the starting spanning tree .* context doc0"),
    (["--rank-confidence", "1.5"], r"--rank-confidence must lie in \(-1, 1\)"),
    (["--rank-confidence", "-1"], r"--rank-confidence must lie in \(-1, 1\)"),
    (["--active-batch", "0"], "--active-batch must be >= 1"),
    (["--budget", "0"], "--budget must be >= 1"),
    (["--score-prior", "-0.5"], "--score-prior must be a finite number >= 0"),
    (["--score-prior", "nan"], "--score-prior must be a finite number >= 0"),
])
def test_bad_options_are_clear(setup, extra, match):
    run, holder, _ = setup
    holder["judge"] = FakeJudge(crash_after=0)                        # never reached
    with pytest.raises(SystemExit, match=match):
        cli.main(["assess", "--active", "--aspect", "coherence", "--contexts", "0:2", "--no-progress", "--store",
                  "x.jsonl", *extra])


def test_active_options_need_active(setup, capsys):
    with pytest.raises(SystemExit, match="--rank-confidence, --stop-rule apply to --active only"):
        cli.main(["assess", "--rank-confidence", "0.9", "--stop-rule", "adjacent"])
    with pytest.raises(SystemExit):
        cli.main(["assess", "--active", "--rank-confidence", "high"])
    assert "not a number or 'none'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["assess", "--active", "--stop-rule", "kendall"])
    assert "invalid choice: 'kendall'" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="--score-prior applies to --active only"):
        cli.main(["assess", "--score-prior", "0.1"])


class HardJudge(FakeJudge):
    """FakeJudge's answers rounded to 0/1 (as one sampled answer)."""

    def compare(self, context, candidates, i, j):
        out = super().compare(context, candidates, i, j)
        return Judgement((out.p > 0.5).astype(np.float32), False, out.logits)


def test_score_prior_lets_a_hard_judge_reach_confidence(setup, monkeypatch):
    """A judge of hard 0/1 answers (one sampled answer) that ranks exactly as the humans.

    Without a score prior its soft-BT scores are unbounded and the confidence stays near 0
    (runs to the budget); ``--score-prior 0.1`` reaches the target. The value reaches
    ``active_assess`` (default 0, its own default).
    """
    import jaxrank.assessment.active as assessment_active
    run, holder, _ = setup
    seen, real = [], assessment_active.active_assess
    monkeypatch.setattr(assessment_active, "active_assess",
                        lambda *a, **kw: seen.append(kw["score_prior"]) or real(*a, **kw))
    holder["judge"] = HardJudge()
    _, rows = run("--rank-confidence", "0.8", out="h0", store="h0.jsonl")
    assert seen == [0.0, 0.0] and {r["stopped"] for r in rows} == {"budget"}
    assert all(float(r["confidence"]) < 0.5 for r in rows)
    seen.clear()
    _, rows = run("--rank-confidence", "0.8", "--score-prior", "0.1", out="h1", store="h1.jsonl")
    assert seen == [0.1, 0.1] and {r["stopped"] for r in rows} == {"confidence"}
    assert all(float(r["confidence"]) >= 0.8 and int(r["comparisons"]) < 40 for r in rows)
