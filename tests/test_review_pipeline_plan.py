"""The pairs a run plans and reports (review of the assessment pipeline, items 2-5).

* a context's ``--budget`` pairs are keyed by its id, not its position in the ``--contexts`` slice;
* ``judge_contexts`` returns exactly the planned pairs, whatever else the store holds of those texts;
* a budget that cannot be planned is refused before anything is judged (the library) and before the
  model loads (the command line, one line naming ``--budget``);
* two processes on one store share the work: each re-reads the store before every chunk.
"""

import csv
import multiprocessing as mp
import time

import numpy as np
import pytest

import jaxrank as jr
from jaxrank.assessment.run import check_budget, contexts_of, judge_contexts
from jaxrank.assessment.store import JudgementStore, text_sha
from jaxrank.cli import _common, main
from jaxrank.judges.pairwise import Judgement

N = 5


def _records(num_contexts=4, n=N):
    return [{"context_id": f"c{k}", "context": f"article {k}", "candidate_id": f"s{m}",
             "candidate": f"summary {k}-{m}", "score": float(m)} for k in range(num_contexts) for m in range(n)]


class Recorder:
    """A judge that records every (context, a, b) it is asked; p from the candidates' numbers."""
    name, template_key, batch_size = "rec", "t", 4

    def __init__(self):
        self.asked = []

    def compare(self, context, candidates, i, j):
        i, j = np.asarray(i), np.asarray(j)
        self.asked += [(context, candidates[a], candidates[b]) for a, b in zip(i.tolist(), j.tolist())]
        p = np.where(i > j, 0.8, 0.3).astype(np.float32)
        return Judgement(p, False, np.zeros((len(i), 2)))


def _pairs_of(sel, r):
    c = sel.comparisons
    w = np.asarray(c.weight[r]) > 0
    return sorted(zip(np.asarray(c.i[r])[w].tolist(), np.asarray(c.j[r])[w].tolist()))


def test_budget_pairs_are_keyed_by_context_id_not_slice_position(tmp_path):
    ds = jr.data.from_records(_records())
    got = {}
    for spec in ("0:4", "2:4"):
        cs = contexts_of(ds, aspect="score", contexts=spec)
        sel = judge_contexts(Recorder(), cs, tmp_path / f"{spec.replace(':', '_')}.jsonl", budget=8, seed=3,
                             progress=False)
        got[spec] = {ctx: _pairs_of(sel, r) for r, ctx in enumerate(sel.contexts)}
    for ctx in ("c2", "c3"):
        assert len(got["0:4"][ctx]) == 8
        assert got["0:4"][ctx] == got["2:4"][ctx]
    assert got["0:4"]["c0"] != got["0:4"]["c2"] or got["0:4"]["c1"] != got["0:4"]["c3"]   # not one plan for all


def test_report_holds_exactly_the_planned_pairs_whatever_the_store_holds(tmp_path):
    ds = jr.data.from_records(_records())
    cs = contexts_of(ds, aspect="score")
    store = tmp_path / "s.jsonl"
    judge_contexts(Recorder(), cs, store, progress=False)              # every ordered pair: 4 x 20
    assert len(JudgementStore(store)) == 4 * N * (N - 1)
    fresh = Recorder()
    alone = judge_contexts(fresh, cs, tmp_path / "fresh.jsonl", budget=10, seed=1, progress=False)
    again = Recorder()
    sel = judge_contexts(again, cs, store, budget=10, seed=1, progress=False)
    assert again.asked == []                                             # all stored: nothing judged
    n = (np.asarray(sel.comparisons.weight) > 0).sum(-1)
    assert n.tolist() == [10] * 4                                        # not the 20 stored per context
    for r in range(4):
        assert _pairs_of(sel, r) == _pairs_of(alone, r)
        assert len(set(_pairs_of(sel, r))) == 10
        text = {m: f"summary {r}-{m}" for m in range(N)}
        asked = sorted((a, b) for a in range(N) for b in range(N)
                       if (f"article {r}", text[a], text[b]) in set(fresh.asked))
        assert _pairs_of(sel, r) == asked                                # what a fresh run asked the judge


@pytest.mark.parametrize("budget,selection,word", [(2, "random", "below 4"), (9, "symmetric", "even"),
                                                   (12, "no_repeat", "10 unordered")])
def test_unplannable_budget_is_refused_before_judging(tmp_path, budget, selection, word):
    cs = contexts_of(jr.data.from_records(_records()), aspect="score")
    judge = Recorder()
    with pytest.raises(ValueError, match=word):
        judge_contexts(judge, cs, tmp_path / "s.jsonl", budget=budget, selection=selection, progress=False)
    assert judge.asked == []
    for ok in (N * (N - 1), N * (N - 1) + 5, N - 1 if selection != "symmetric" else 2 * (N - 1)):
        assert check_budget(N, ok, selection) is None


@pytest.mark.parametrize("budget,selection,word", [("2", "random", "below 4"), ("9", "symmetric", "even"),
                                                   ("12", "no_repeat", "10 unordered")])
def test_cli_refuses_unplannable_budget_before_loading_the_model(tmp_path, monkeypatch, capsys, budget, selection,
                                                                 word):
    f = tmp_path / "mine.csv"
    rows = _records(2)
    with f.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before --budget was checked")

    monkeypatch.setattr(_common, "make_judge", no_model)
    monkeypatch.chdir(tmp_path)
    for cmd in ("judge", "assess"):
        with pytest.raises(SystemExit) as e:
            main([cmd, "--data", str(f), "--judge", "smollm2-135m", "--budget", budget, "--selection", selection,
                  "--store", str(tmp_path / "s.jsonl"), "--no-progress"])
        assert e.value.code == 2
        msg = str(e.value)
        assert f"--budget {budget}" in msg and word in msg and "\n" not in msg
        assert "ensure_coverage" not in msg


class Sneaky(Recorder):
    """On its first call, another writer (a second store object on the same file) stores a later chunk."""

    def __init__(self, path, cs):
        super().__init__()
        self.path, self.cs = path, cs

    def compare(self, context, candidates, i, j):
        if not self.asked:
            other = JudgementStore(self.path)
            cs, k = self.cs, 2
            recs = [{"judge": "rec", "template": "t", "context": cs.ids[k], "a": cs.candidate_ids[k][a],
                     "b": cs.candidate_ids[k][b], "p": 0.5, "fingerprint": "",
                     "context_sha": text_sha(cs.texts[k]),
                     "a_sha": text_sha(cs.candidates[k][a]),
                     "b_sha": text_sha(cs.candidates[k][b])}
                    for a in range(N) for b in range(N) if a != b]
            other.append(recs)
        return super().compare(context, candidates, i, j)


def test_pairs_stored_by_another_writer_meanwhile_are_not_judged_again(tmp_path):
    cs = contexts_of(jr.data.from_records(_records()), aspect="score")
    path = tmp_path / "s.jsonl"
    judge = Sneaky(path, cs)
    sel = judge_contexts(judge, cs, path, chunk=4, progress=False)
    asked_contexts = {c for c, _, _ in judge.asked}
    assert "article 2" not in asked_contexts                   # stored by the other writer after planning
    assert len(judge.asked) == 3 * N * (N - 1)
    assert len(JudgementStore(path)) == 4 * N * (N - 1)
    r = sel.contexts.index("c2")
    np.testing.assert_array_equal(np.asarray(sel.comparisons.p[r])[np.asarray(sel.comparisons.weight[r]) > 0], 0.5)


def _work(path, q):
    from jaxrank.assessment.run import ContextSet, judge_contexts
    from jaxrank.judges.pairwise import Judgement

    class Slow:
        name, template_key, batch_size, chunk = "slow", "t", 2, 4
        n = 0

        def compare(self, ctx, cands, i, j):
            time.sleep(0.15)
            self.n += len(i)
            return Judgement(np.full(len(i), 0.6, np.float32), False, np.zeros((len(i), 2)))

    cs = ContextSet([f"c{k}" for k in range(4)], [f"text {k}" for k in range(4)],
                    [[f"x{n}" for n in range(N)]] * 4, [[f"cand {k}-{n}" for n in range(N)] for k in range(4)])
    j = Slow()
    judge_contexts(j, cs, path, progress=False)
    q.put(j.n)


def test_two_processes_on_one_store_share_the_work(tmp_path):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    path = str(tmp_path / "shared.jsonl")
    ps = [ctx.Process(target=_work, args=(path, q)) for _ in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(120)
    judged = [q.get(timeout=5) for _ in ps]
    total = 4 * N * (N - 1)
    assert len(JudgementStore(path)) == total
    assert sum(judged) < 1.75 * total, judged       # each judging everything would be 2 x 80
