"""Review fixes of the judgement store and the run engine (jaxrank.assessment.store, .run): merging stores whose
``p`` differ by float rounding, a context selected twice, one context's judgements of edited texts mixed in
``comparisons()``, clear errors for bad arguments of ``judge_contexts``/``plan_pairs`` (seeds that wrapped
modulo 2**32 included), and a shard run reusing what another store holds (``reuse=``)."""

import json

import numpy as np
import pytest
from datasets import Dataset

from jaxrank.assessment.run import ContextSet, contexts_of, judge_contexts, plan_pairs, text_hashes
from jaxrank.assessment.store import MERGE_TOLERANCE, JudgementStore, StoreConflictError, merge_stores
from jaxrank.judges.judgement import Judgement


class CountingJudge:
    """p = sigmoid((len(a) - len(b)) / 5) of the candidate texts; counts the pairs it is asked."""

    name, template_key, fingerprint, batch_size = "count", "t1", "fp1", 2

    def __init__(self):
        self.asked = []

    def compare(self, context, candidates, i, j):
        i, j = np.asarray(i), np.asarray(j)
        self.asked += [(context, candidates[a], candidates[b]) for a, b in zip(i.tolist(), j.tolist())]
        s = np.array([len(c) for c in candidates], float)
        return Judgement((1 / (1 + np.exp(-(s[i] - s[j]) / 5))).astype(np.float32), False, np.zeros((len(i), 2)))


CS = ContextSet(["c1", "c2", "c3"], ["ctx one", "ctx two", "ctx three"], [["a", "b", "c", "d"], ["a", "b", "c"],
                                                                        ["x", "y", "z"]],
                [["aa", "bbbbbbb", "c", "dddd"], ["x", "yyyyy", "zz"], ["p", "qq", "rrr"]])


def _record(p, a="x", b="y"):
    return {"judge": "j", "template": "t", "context": "c", "a": a, "b": b, "p": p}


def _lines(path):
    return [json.loads(x) for x in open(path) if x.strip()]


# ------------------------------------------------------------------------------------------------ merging
def test_merge_keeps_the_first_value_within_the_tolerance_and_refuses_a_real_disagreement(tmp_path):
    main, shard = tmp_path / "main.jsonl", tmp_path / "shard.jsonl"
    p = 0.6180339
    JudgementStore(main).append([_record(p)])
    JudgementStore(shard).append([_record(p + 1.2e-7), _record(0.25, "y", "x")])   # single device vs a mesh
    assert MERGE_TOLERANCE == 1e-5
    assert merge_stores(main, [shard]) == 1                      # only the new key
    assert [r["p"] for r in _lines(main)] == [p, 0.25]           # the first value written is kept
    other = tmp_path / "other.jsonl"
    JudgementStore(other).append([_record(p + 1e-3)])
    with pytest.raises(StoreConflictError,
                       match=r"p=0\.6180339 in .*main\.jsonl but p=0\.6190339 in .*other\.jsonl .*MERGE_TOLERANCE"):
        merge_stores(main, [other])


# ---------------------------------------------------------------------------------------- repeated contexts
def _dataset(contexts=3, candidates=3):
    rows = [(f"q{c}", f"text {c}", f"s{n}", "w " * (n + 1), float(n)) for c in range(contexts)
            for n in range(candidates)]
    return Dataset.from_dict({k: [r[n] for r in rows] for n, k in enumerate(
        ("context_id", "context", "candidate_id", "candidate", "score"))})


@pytest.mark.parametrize("spec", ["0,0,0,0,0,1", "1, 2, 1", [0, 0], (2, 1, 2)])
def test_a_context_selected_twice_is_refused(spec):
    with pytest.raises(ValueError, match=r"contexts .* selects context position\(s\) \[\d\] more than once"):
        contexts_of(_dataset(), contexts=spec)
    assert contexts_of(_dataset(), contexts="2,0").ids == ["q2", "q0"]          # distinct ones still work


def test_judge_contexts_refuses_a_position_given_twice_before_judging(tmp_path):
    judge = CountingJudge()
    with pytest.raises(ValueError, match=r"positions \[0, 1, 0\] selects context position\(s\) \[0\] more than once"):
        judge_contexts(judge, CS, tmp_path / "s.jsonl", progress=False, positions=[0, 1, 0])
    assert judge.asked == []


# --------------------------------------------------------------------------------- edited texts in a store
def test_comparisons_refuses_one_context_judged_from_two_texts_and_hashes_select_one(tmp_path):
    path = tmp_path / "s.jsonl"
    judge_contexts(CountingJudge(), CS, path, progress=False)
    edited = ContextSet(CS.ids, CS.texts, CS.candidate_ids, [CS.candidates[0], ["x", "y", "zzzzzzzzzz"],
                                                               CS.candidates[2]])
    with pytest.warns(UserWarning, match="of other texts"):
        judge_contexts(CountingJudge(), edited, path, progress=False)
    store = JudgementStore(path)
    with pytest.raises(ValueError, match=r"context 'c2' holds judgements of different texts .*candidate "
                                         r"'[bc]'.*hashes="):
        store.comparisons(judge="count")
    hashes = {c: text_hashes(t, cands, ids) for c, t, cands, ids in zip(edited.ids, edited.texts, edited.candidates,
                                                                         edited.candidate_ids)}
    out = store.comparisons(judge="count", hashes=hashes)
    for r, ctx in enumerate(out.contexts):
        w = np.asarray(out.comparisons.weight[r]) > 0
        pairs = list(zip(np.asarray(out.comparisons.i[r])[w].tolist(), np.asarray(out.comparisons.j[r])[w].tolist()))
        n = len(edited.candidates[edited.ids.index(ctx)])
        assert sorted(pairs) == [(a, b) for a in range(n) for b in range(n) if a != b]      # each pair once
    # the edited candidate's p is the new text's: len 'zzzzzzzzzz' = 10 against len 'x' = 1
    r = out.contexts.index("c2")
    c = out.comparisons
    k = [n for n in range(len(np.asarray(c.i[r]))) if int(c.i[r][n]) == 2 and int(c.j[r][n]) == 0][0]
    assert float(c.p[r][k]) == pytest.approx(1 / (1 + np.exp(-9 / 5)), rel=1e-6)


# -------------------------------------------------------------------------------------------- bad arguments
@pytest.mark.parametrize("kw, name", [(dict(chunk=-1), "chunk"), (dict(chunk=0), "chunk"), (dict(chunk=0.5), "chunk"),
                                      (dict(chunk="8"), "chunk"), (dict(budget=4.5), "budget"),
                                      (dict(budget=0), "budget"), (dict(selection="bogus"), "selection"),
                                      (dict(selection="bogus", budget=4), "selection"),
                                      (dict(seed=-3, budget=4), "seed"), (dict(seed=1.5, budget=4), "seed"),
                                      (dict(seed=2 ** 32, budget=4), "seed"), (dict(seed=True), "seed")])
def test_judge_contexts_names_a_bad_argument_before_judging(tmp_path, kw, name):
    judge = CountingJudge()
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        judge_contexts(judge, CS, tmp_path / "s.jsonl", progress=False, **kw)
    assert judge.asked == [] and not (tmp_path / "s.jsonl").exists()


def test_seeds_do_not_wrap_modulo_2_to_the_32():
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*32\)"):
        plan_pairs(6, budget=10, seed=2 ** 32)                   # was the very pairs of seed 0
    with pytest.raises(ValueError, match="seed must be"):
        plan_pairs(6, budget=10, seed=-1)                        # was the pairs of seed 2**32 - 1
    i, j = plan_pairs(6, budget=10, seed=2 ** 32 - 1)            # the largest seed still plans
    assert len(i) == 10 and len(set(zip(i.tolist(), j.tolist()))) == 10 and all(i != j)


# --------------------------------------------------------------------------------------------- reuse
def test_reuse_copies_what_another_store_holds_and_judges_only_the_rest(tmp_path):
    main, shard = tmp_path / "main.jsonl", tmp_path / "shard.jsonl"
    first = CountingJudge()
    judge_contexts(first, CS, main, progress=False, positions=[0, 1])          # 12 + 6 pairs
    assert len(first.asked) == 18
    before = main.read_bytes()
    second = CountingJudge()
    sel = judge_contexts(second, CS, shard, progress=False, positions=[1, 2], reuse=main)
    assert len(second.asked) == 6 and {x[0] for x in second.asked} == {"ctx three"}   # c3 only
    assert main.read_bytes() == before                                       # the other store is only read
    held = {(r["context"], r["a"], r["b"]): r["p"] for r in _lines(main)}
    copied = [r for r in _lines(shard) if r["context"] == "c2"]
    assert len(copied) == 6 and all(held[(r["context"], r["a"], r["b"])] == r["p"] for r in copied)
    assert sel.contexts == ["c2", "c3"]
    # an absent store to reuse holds nothing: everything is judged
    third = CountingJudge()
    judge_contexts(third, CS, tmp_path / "t.jsonl", progress=False, positions=[2], reuse=tmp_path / "none.jsonl")
    assert len(third.asked) == 6


def test_reuse_says_how_many_judgements_it_copied(tmp_path, capsys):
    main, shard = tmp_path / "main.jsonl", tmp_path / "shard.jsonl"
    judge_contexts(CountingJudge(), CS, main, progress=False, positions=[0, 1])
    capsys.readouterr()
    judge_contexts(CountingJudge(), CS, shard, progress=True, positions=[1, 2], reuse=main)
    assert f"6 judgements copied from {main}" in capsys.readouterr().err
