"""The judging layer: prompts, the pairwise prompt judge, the judgement store, resumable runs.

The prompt judge's cached path (context cache, then context + candidate A, then
candidate B) is checked against an independent full forward of the whole prompt;
the store against a simulated crash (a torn last line, an interrupted run).
"""

import json

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_lm import tiny_llama_like

import jaxrank as jr
from jaxrank.assessment.store import StoreDamageWarning
from jaxrank.models.loading import LoadedModel, load_model
from jaxrank.judges.pairwise import PromptJudge, batch_sizes, bucket, plan_batches
from jaxrank.judges.prompts import PairwiseTemplate, TEMPLATES, pairwise_template
from jaxrank.assessment.run import ContextSet, contexts_of, judge_contexts, plan_pairs
from jaxrank.assessment.store import JudgementStore


# ------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tiny(smollm2):
    """SmolLM2's tokenizer and chat template on a tiny random-weight Llama (fast, exact checks)."""
    return tiny_llama_like(smollm2, seed=3)


def label_logprobs_by_hand(lm, text, labels, *, special):
    """Independent reading of one prompt: ``text + label`` tokenised whole, one full forward per label,
    the log-softmax (NumPy, float64) of the label's tokens summed by hand."""
    lead = "" if text[-1].isspace() else " "
    base = list(lm.tokenizer(text, add_special_tokens=special)["input_ids"])
    out = []
    for w in labels:
        full = list(lm.tokenizer(text + lead + w, add_special_tokens=special)["input_ids"])
        assert full[:len(base)] == base and len(full) > len(base)
        logits = np.asarray(lm.model(np.array([full])))[0].astype(np.float64)
        m = logits.max(-1, keepdims=True)
        lp = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
        out.append(sum(lp[t - 1, full[t]] for t in range(len(base), len(full))))
    return np.array(out)


def _full_forward_p(lm, judge, context, a, b):
    """Independent p: the whole prompt text and each label in one full forward pass (see above)."""
    la, lb = label_logprobs_by_hand(lm, judge.prompt_text(context, a, b), judge.template.labels,
                                    special=judge.decoder and not judge.chat)
    return 1.0 / (1.0 + np.exp(lb - la))


CTX = "The city council approved a new park on Monday. It will open next spring near the river."
CANDS = ["A park was approved by the council.", "The council met on Monday to talk.",
         "A new riverside park opens next spring.", "Rain is expected."]


# -------------------------------------------------------------------- prompts
def test_templates_cover_every_dataset_aspect():
    from jaxrank.data import ASPECTS
    for ds, aspects in ASPECTS.items():
        for a in aspects:
            t = pairwise_template(ds, a)
            assert "{a}" in t.text and "{b}" in t.text
    assert TEMPLATES[("summeval", "coherence")].render("X", "Y", "Z") == (
        "Article: X\n\nSummary A: Y\n\nSummary B: Z\n\nWhich Summary is more coherent, Summary A or Summary B?")


def test_template_errors():
    with pytest.raises(ValueError, match="aspect 'beauty'"):
        pairwise_template("summeval", "beauty")
    with pytest.raises(ValueError, match="data set"):
        pairwise_template("nope", "coherence")
    with pytest.raises(ValueError, match=r"\{b\}"):
        PairwiseTemplate("only {a}")
    with pytest.raises(ValueError, match="labels"):
        PairwiseTemplate("{a} {b}", labels=("A", "A"))


def test_bucket():
    assert bucket(1) == 16 and bucket(17) == 24 and bucket(100) == 112 and bucket(40000) == 2 * 32768


# --------------------------------------------------------------- prompt judge
def test_cached_judge_equals_full_forward(tiny):
    judge = PromptJudge(tiny, pairwise_template("summeval", "coherence"), batch_size=4)
    i, j = np.nonzero(~np.eye(4, dtype=bool))
    res = judge.compare(CTX, CANDS, i, j)
    assert res.p.shape == (12,) and not res.truncated
    ref = np.array([_full_forward_p(tiny, judge, CTX, CANDS[a], CANDS[b]) for a, b in zip(i, j)])
    np.testing.assert_allclose(res.p, ref, atol=1e-5)
    # a subset in another order gives the same numbers (batching and grouping are invisible)
    sub = judge.compare(CTX, CANDS, j[::-1][:5], i[::-1][:5])
    np.testing.assert_allclose(sub.p, [_full_forward_p(tiny, judge, CTX, CANDS[b], CANDS[a])
                                       for a, b in zip(i[::-1][:5], j[::-1][:5])], atol=1e-5)


def test_progress_is_told_of_every_batch(tiny, tmp_path, monkeypatch):
    judge = PromptJudge(tiny, pairwise_template("summeval", "coherence"), batch_size=2)
    i, j = np.nonzero(~np.eye(4, dtype=bool))
    calls = []
    res = judge.compare(CTX, CANDS, i, j, progress=calls.append)
    # one call per B batch: each A (4 of them) has 3 comparisons, cut into batches of at most 2
    assert sum(calls) == len(i) == res.p.shape[0] and len(calls) >= 8 and max(calls) <= 2
    # the run loop moves its bar by the same batches, and counts each comparison once
    cs = ContextSet(["c0"], [CTX], [["a", "b", "c", "d"]], [list(CANDS)], None)

    updates = []

    class FakeBar:
        def __init__(self, total, *args, **kw):
            self.total = total

        def update(self, k):
            updates.append(k)

        def close(self):
            pass

    import jaxrank.assessment.run as run_module

    monkeypatch.setattr(run_module, "progress_bar", FakeBar)
    judge_contexts(judge, cs, tmp_path / "s.jsonl", progress=True)
    assert sum(updates) == 12 and len(updates) >= 8


def _brute_force_padded_tokens(lengths, batch_size, batch_cost=0):
    """Fewest padded tokens (plus ``batch_cost`` per batch) over every cut of the sorted rows into
    consecutive batches (exhaustive)."""
    n, best = len(lengths), None
    for k in range(n):
        for cuts in itertools.combinations(range(1, n), k):
            edges = (0, *cuts, n)
            if any(e - s > batch_size for s, e in zip(edges, edges[1:])):
                continue
            pow2 = [min(batch_size, 1 << (e - s - 1).bit_length()) for s, e in zip(edges, edges[1:])]
            total = sum(b * bucket(lengths[e - 1]) + batch_cost for b, e in zip(pow2, edges[1:]))
            best = total if best is None else min(best, total)
    return 0 if n == 0 else best


@pytest.mark.parametrize("seed", range(40))
def test_plan_batches_is_the_cheapest_cut(seed):
    rng = np.random.default_rng(seed)
    lengths = sorted(rng.integers(1, 300, rng.integers(0, 11)).tolist())
    batch_size = int(rng.integers(1, 10))
    plan = plan_batches(lengths, batch_size)
    assert [s for s, _, _ in plan] + [len(lengths)] == [0] + [e for _, e, _ in plan]   # covers 0:n in order
    for s, e, b in plan:
        assert 1 <= e - s <= b <= batch_size and b in batch_sizes(batch_size)
    total = sum(b * bucket(lengths[e - 1]) for s, e, b in plan)
    assert total == _brute_force_padded_tokens(lengths, batch_size)
    # never more padded tokens than fixed chunks of batch_size (the former batching)
    fixed = sum(min(batch_size, 1 << (len(lengths[s:s + batch_size]) - 1).bit_length()) *
                bucket(max(lengths[s:s + batch_size])) for s in range(0, len(lengths), batch_size))
    assert total <= fixed


@pytest.mark.parametrize("seed", range(20))
def test_plan_batches_with_a_cost_per_batch_is_the_cheapest_cut(seed):
    """``batch_cost`` tokens per batch: the plan minimises padded tokens plus that, exhaustively
    checked, and a high cost leaves no more batches than no cost (few, full batches)."""
    rng = np.random.default_rng(100 + seed)
    lengths = sorted(rng.integers(1, 300, rng.integers(1, 11)).tolist())
    batch_size, batch_cost = int(rng.integers(1, 10)), int(rng.integers(0, 3000))
    plan = plan_batches(lengths, batch_size, batch_cost=batch_cost)
    total = sum(b * bucket(lengths[e - 1]) + batch_cost for s, e, b in plan)
    assert total == _brute_force_padded_tokens(lengths, batch_size, batch_cost)
    assert len(plan_batches(lengths, batch_size, batch_cost=10**6)) == -(-len(lengths) // batch_size)
    assert len(plan_batches(lengths, batch_size, batch_cost=10**6)) <= len(plan_batches(lengths, batch_size))


def test_plan_batches_bad_input():
    with pytest.raises(ValueError, match="ascending"):
        plan_batches([5, 3], 4)
    with pytest.raises(ValueError, match="batch_size"):
        plan_batches([3], 0)
    with pytest.raises(ValueError, match="batch_cost"):
        plan_batches([3], 2, batch_cost=-1)
    assert batch_sizes(6) == (1, 2, 4, 6) and batch_sizes(8) == (1, 2, 4, 8)


def test_planned_batches_equal_full_forward(tiny):
    """Candidates of very different lengths: planned batches of several sizes give the full forward's p."""
    cands = [" ".join(["word"] * k) + "." for k in (1, 2, 3, 5, 9, 14, 22, 30, 41)]
    judge = PromptJudge(tiny, pairwise_template("summeval", "coherence"), batch_size=8)
    i, j = np.nonzero(~np.eye(len(cands), dtype=bool))
    rows, _ = judge.prompt_rows(CTX, cands, [0] * (len(cands) - 1), list(range(1, len(cands))))
    lens = sorted(len(r) for r in rows)
    plan = plan_batches(lens, 8)
    assert len({b for _, _, b in plan}) >= 2 and len(plan) >= 3               # the case under test
    res = judge.compare(CTX, cands, i, j)
    ref = np.array([_full_forward_p(tiny, judge, CTX, cands[a], cands[b]) for a, b in zip(i, j)])
    np.testing.assert_allclose(res.p, ref, atol=1e-5)


def test_a_parts_sharing_batches_equal_full_forward(tiny):
    """With a cost per call, a batch wider than one A's comparisons mixes several A's rows (each
    reading its own A's cache rows, a filler A in the last chunk); the p still equal one full forward
    pass per prompt. Without (a CPU's default), each A's rows keep their own batches."""
    cands = [f"The {w} park opens in spring." for w in ("red", "blue", "green", "small", "new")]
    judge = PromptJudge(tiny, pairwise_template("summeval", "coherence"), batch_size=8, batch_cost=1)
    lens = {len(r) for r in judge.prompt_rows(CTX, cands, [0] * 4, [1, 2, 3, 4])[0]}
    assert len({bucket(x) for x in lens}) == 1        # one bucket: the plan fills batches of 8
    i, j = np.nonzero(~np.eye(len(cands), dtype=bool))      # 4 comparisons per A: A parts 2 at a time
    calls = []
    res = judge.compare(CTX, cands, i, j, progress=calls.append)
    assert max(calls) > 4 and sum(calls) == len(i)            # some batch spans two A's
    ref = np.array([_full_forward_p(tiny, judge, CTX, cands[a], cands[b]) for a, b in zip(i, j)])
    np.testing.assert_allclose(res.p, ref, atol=1e-5)
    calls = []
    PromptJudge(tiny, pairwise_template("summeval", "coherence"), batch_size=8).compare(
        CTX, cands, i, j, progress=calls.append)
    assert max(calls) <= 4
    # candidates of different lengths, one batch for all (a high cost per batch): the same numbers
    wide = PromptJudge(tiny, pairwise_template("summeval", "coherence"), batch_size=12, batch_cost=10**6)
    ci, cj = np.nonzero(~np.eye(len(CANDS), dtype=bool))
    calls = []
    res = wide.compare(CTX, CANDS, ci, cj, progress=calls.append)
    assert calls == [12]
    np.testing.assert_allclose(res.p, [_full_forward_p(tiny, wide, CTX, CANDS[a], CANDS[b])
                                       for a, b in zip(ci, cj)], atol=1e-5)
    # uneven groups, in another order: the same numbers
    keep = np.array([0, 3, 5, 6, 7, 11, 12, 19, 18, 2])
    sub = judge.compare(CTX, cands, j[keep], i[keep])
    np.testing.assert_allclose(sub.p, [_full_forward_p(tiny, judge, CTX, cands[b], cands[a])
                                       for a, b in zip(i[keep], j[keep])], atol=1e-5)


def test_bfloat16_cache_judge_is_close_to_full_forward(tiny):
    """``cache_dtype=bfloat16`` (an accelerator's default with bfloat16 weights): p within bfloat16
    rounding of the full forward pass, through the shared and the mixed-A paths."""
    i, j = np.nonzero(~np.eye(4, dtype=bool))
    ref = np.array([_full_forward_p(tiny, PromptJudge(tiny, pairwise_template("summeval", "coherence")),
                                    CTX, CANDS[a], CANDS[b]) for a, b in zip(i, j)])
    for cost in (0, 10**6):
        judge = PromptJudge(tiny, pairwise_template("summeval", "coherence"), batch_size=12, batch_cost=cost,
                            cache_dtype=jnp.bfloat16)
        assert judge.cache_dtype == jnp.bfloat16
        np.testing.assert_allclose(judge.compare(CTX, CANDS, i, j).p, ref, atol=5e-3)


def test_prompt_text_is_chat_wrapped_and_read_as_whole_text(tiny):
    judge = PromptJudge(tiny, pairwise_template("summeval", "coherence"))
    text = judge.prompt_text(CTX, CANDS[0], CANDS[1])
    assert text.startswith("<|im_start|>") and text.endswith("<|im_start|>assistant\n")
    assert f"Summary A: {CANDS[0]}\n\nSummary B: {CANDS[1]}" in text
    rows, truncated = judge.prompt_rows(CTX, CANDS, [0], [1])
    assert rows[0] == list(tiny.tokenizer(text, add_special_tokens=False)["input_ids"]) and not truncated
    raw = PromptJudge(tiny, pairwise_template("summeval", "coherence", answer_prefix="Answer:"), chat=False)
    assert raw.prompt_text(CTX, "x", "y").endswith("Summary A or Summary B?\n\nAnswer:")
    assert raw.name == "tiny-nochat"
    # after "Answer:" the label is " A" (a space-prefixed token), after a newline plain "A"
    assert [tiny.tokenizer.decode(list(x)) for x in raw.reading.ids] == [" A", " B"]
    assert [tiny.tokenizer.decode(list(x)) for x in judge.reading.ids] == ["A", "B"]
    # a raw decoder prompt starts with the tokenizer's own special tokens, as the whole text gets them
    raw_rows, _ = raw.prompt_rows(CTX, CANDS, [0], [1])
    assert raw_rows[0] == list(tiny.tokenizer(raw.prompt_text(CTX, CANDS[0], CANDS[1]))["input_ids"])


def test_multi_token_labels_are_read_as_whole_continuations(tiny):
    """"Summary A" vs "Summary B": both tokens of each label are scored (the shared word's log-probability
    included), one row per comparison; labels of different lengths take a row each."""
    t = pairwise_template("summeval", "coherence", labels=("Summary A", "Summary B"))
    judge = PromptJudge(tiny, t)
    assert len(judge.reading.common) >= 1 and judge.reading.single_row
    res = judge.compare(CTX, CANDS, [0, 2], [1, 0])
    for r, (a, b) in enumerate([(0, 1), (2, 0)]):
        ref = label_logprobs_by_hand(tiny, judge.prompt_text(CTX, CANDS[a], CANDS[b]), t.labels, special=False)
        np.testing.assert_allclose(res.logits[r], ref, atol=2e-4)
        np.testing.assert_allclose(res.label_mass[r], np.exp(ref).sum(), rtol=2e-4)
    uneven = pairwise_template("summeval", "coherence", labels=("Summary A", "B"))
    judge = PromptJudge(tiny, uneven, batch_size=3)
    assert not judge.reading.single_row
    res = judge.compare(CTX, CANDS, [0, 1, 3], [1, 2, 0])
    for r, (a, b) in enumerate([(0, 1), (1, 2), (3, 0)]):
        ref = label_logprobs_by_hand(tiny, judge.prompt_text(CTX, CANDS[a], CANDS[b]), uneven.labels, special=False)
        np.testing.assert_allclose(res.logits[r], ref, atol=2e-4)


def test_long_context_is_truncated_never_the_candidates(tiny):
    long_ctx = " ".join(["The council discussed the budget at length."] * 80)
    judge = PromptJudge(tiny, pairwise_template("summeval", "coherence"), max_length=160)
    with pytest.warns(UserWarning, match="context was cut"):
        res = judge.compare(long_ctx, CANDS, [0, 1], [1, 0])
    assert res.truncated
    rows, truncated = judge.prompt_rows(long_ctx, CANDS, [0, 1], [1, 0])
    assert truncated and max(map(len, rows)) + judge.reading.width <= 160
    text = tiny.tokenizer.decode(rows[0])
    assert rows[0] == list(tiny.tokenizer(text, add_special_tokens=False)["input_ids"])  # whole-text ids
    kept = text.split("Article: ", 1)[1].split("\n\nSummary A: ", 1)[0]
    assert long_ctx.startswith(kept) and 0 < len(kept) < len(long_ctx)            # the context's start
    assert f"Summary A: {CANDS[0]}\n\nSummary B: {CANDS[1]}" in text                # candidates whole
    la, lb = label_logprobs_by_hand(tiny, text, ("A", "B"), special=False)
    np.testing.assert_allclose(res.p[0], 1 / (1 + np.exp(lb - la)), atol=1e-5)
    tight = PromptJudge(tiny, pairwise_template("summeval", "coherence"), max_length=40)
    with pytest.raises(ValueError, match="candidates and question alone do not fit"):
        tight.compare(long_ctx, CANDS, [0], [1])


def test_bad_input(tiny):
    judge = PromptJudge(tiny, pairwise_template("summeval", "coherence"))
    with pytest.raises(ValueError, match="empty"):
        judge.compare(CTX, ["fine", "  "], [0], [1])
    with pytest.raises(ValueError, match="outside"):
        judge.compare(CTX, CANDS, [0], [7])
    with pytest.raises(ValueError, match="no differing token"):
        PromptJudge(tiny, pairwise_template("summeval", "coherence", labels=("A", "A ")))
    for bad in (-0.1, 1.5, "half"):
        with pytest.raises(ValueError, match="min_label_mass"):
            PromptJudge(tiny, pairwise_template("summeval", "coherence"), min_label_mass=bad)
    assert judge.compare(CTX, CANDS, [], []).p.shape == (0,)
    assert judge.batch_cost == 0                                # "auto" on a CPU: padded tokens alone
    assert judge.cache_dtype is None                            # "auto" on a CPU: float32 caches
    for bad in ("fast", "int32"):
        with pytest.raises(ValueError, match="cache_dtype"):
            PromptJudge(tiny, pairwise_template("summeval", "coherence"), cache_dtype=bad)
    for bad in (-1, 2.5, "fast", True):
        with pytest.raises(ValueError, match="batch_cost"):
            PromptJudge(tiny, pairwise_template("summeval", "coherence"), batch_cost=bad)


# ---------------------------------------------------------------------- store
def _rec(ctx, a, b, p):
    return {"judge": "m", "template": "t", "context": ctx, "a": a, "b": b, "i": 0, "j": 1, "p": p}


def test_store_round_trip_and_torn_last_line(tmp_path):
    path = tmp_path / "s.jsonl"
    st = JudgementStore(path)
    st.append([_rec("c1", "x", "y", 0.7), _rec("c1", "y", "x", 0.2), _rec("c2", "u", "v", 0.5)])
    st.append([_rec("c1", "x", "y", 0.9)])                      # already stored: skipped
    assert len(st) == 3 and ("m", "t", "c1", "x", "y") in st
    with open(path, "a") as f:                                   # a crash mid-write
        f.write('{"judge": "m", "template": "t", "context": "c9", "a"')
    with pytest.warns(UserWarning, match="torn last line"):
        st2 = JudgementStore(path)
    assert len(st2) == 3 and st2.get(("m", "t", "c1", "x", "y"))["p"] == 0.7
    assert path.read_text().endswith("\n")                       # torn tail cut before appending
    st2.append([_rec("c2", "v", "u", 0.4)])
    assert len(JudgementStore(path)) == 4
    sc = st2.comparisons(candidates={"c1": ["y", "x", "z"]})
    assert sc.contexts == ["c1", "c2"] and sc.candidates[0] == ["y", "x", "z"]
    c = sc.comparisons
    assert c.num_items == 3 and c.p.shape == (2, 2)
    np.testing.assert_allclose(np.asarray(c.p[0]), [0.7, 0.2])
    assert np.asarray(c.i[0]).tolist() == [1, 0] and np.asarray(c.j[0]).tolist() == [0, 1]


def test_store_moves_corrupt_middle_line_aside_and_rejects_bad_p(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(_rec("c", "a", "b", 0.5)) + "\nGARBAGE\n" + json.dumps(_rec("c", "b", "a", 0.5)) + "\n")
    with pytest.warns(UserWarning, match="line 2"):
        assert len(JudgementStore(path)) == 2                    # nothing valid lost (tests/test_store.py)
    path.write_text(json.dumps(_rec("c", "a", "b", 1.5)) + "\n")
    with pytest.warns(UserWarning, match="line 1 .*field p"):
        assert len(JudgementStore(path)) == 0
    with pytest.raises(ValueError, match="p must be a probability"):
        JudgementStore(tmp_path / "t.jsonl").append([_rec("c", "a", "b", float("nan"))])


# ------------------------------------------------------------------ resumable run
class _FakeJudge:
    """p = sigmoid(len(a) - len(b)); can crash after a number of chunks."""

    name = "fake"
    template_key = "t0"
    batch_size = 2

    def __init__(self, crash_after=None):
        self.calls, self.crash_after = [], crash_after

    def compare(self, context, candidates, i, j):
        if self.crash_after is not None and len(self.calls) >= self.crash_after:
            raise KeyboardInterrupt("simulated crash")
        self.calls.append(list(zip(np.asarray(i).tolist(), np.asarray(j).tolist())))
        d = np.array([len(candidates[a]) - len(candidates[b]) for a, b in zip(i, j)], np.float64)
        from jaxrank.judges.pairwise import Judgement
        return Judgement((1 / (1 + np.exp(-d / 5))).astype(np.float32), False, np.zeros((len(d), 2)))


def _cs():
    cands = [["a", "bbb", "cc", "dddd"], ["xx", "y", "zzzzz"]]
    return ContextSet(["c0", "c1"], ["ctx0", "ctx1"], [["a", "b", "c", "d"], ["x", "y", "z"]], cands,
                      [np.array([1, 3, 2, 4.0]), np.array([2, 1, 5.0])])


def test_interrupted_run_resumes_without_redoing_or_losing(tmp_path):
    path = tmp_path / "run.jsonl"
    crashing = _FakeJudge(crash_after=3)
    with pytest.raises(KeyboardInterrupt):
        judge_contexts(crashing, _cs(), path, chunk=2, progress=False)
    done = {tuple(x) for call in crashing.calls for x in call}
    assert len(JudgementStore(path)) == 6 == sum(map(len, crashing.calls))
    resumed = _FakeJudge()
    sel = judge_contexts(resumed, _cs(), path, chunk=2, progress=False)
    redone = sum(map(len, resumed.calls))
    assert redone == 12 + 6 - 6                                   # 18 planned, 6 were stored
    assert sel.contexts == ["c0", "c1"] and sel.candidates[0] == ["a", "b", "c", "d"]
    full = judge_contexts(_FakeJudge(), _cs(), tmp_path / "fresh.jsonl", progress=False)
    for f in ("i", "j", "p"):
        a, b = np.asarray(getattr(sel.comparisons, f)), np.asarray(getattr(full.comparisons, f))
        key = lambda c, r: sorted(zip(np.asarray(c.i[r]).tolist(), np.asarray(c.j[r]).tolist(),
                                      np.asarray(c.p[r]).round(6).tolist()))
        for r in range(2):
            assert key(sel.comparisons, r) == key(full.comparisons, r)
    assert done  # the crashed run had made progress


def test_judge_comparisons_returns_the_core_structure():
    from jaxrank.assessment.run import judge_comparisons
    c = judge_comparisons(_FakeJudge(), "ctx", ["a", "bbb", "cc"])
    assert isinstance(c, jr.Comparisons) and c.num_items == 3 and c.p.shape == (6,)
    d = np.array([len(x) for x in ["a", "bbb", "cc"]], float)
    np.testing.assert_allclose(np.asarray(c.p), 1 / (1 + np.exp(-(d[np.asarray(c.i)] - d[np.asarray(c.j)]) / 5)),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="both i and j"):
        judge_comparisons(_FakeJudge(), "ctx", ["a", "b"], i=[0])


def test_plan_pairs_budget_is_reproducible_and_connected():
    i, j = plan_pairs(6, budget=8, seed=3, context_index=2)
    i2, j2 = plan_pairs(6, budget=8, seed=3, context_index=2)
    assert (i == i2).all() and (j == j2).all() and len(i) == 8
    assert bool(jr.Comparisons.from_pairs(i, j, np.full(8, 0.5, np.float32), num_items=6).is_connected())
    a, b = plan_pairs(4)
    assert len(a) == 12 and (a != b).all()


# ----------------------------------------------------------- the real judge
def test_real_smollm2_two_articles_both_orders_with_crash(smollm2, tmp_path):
    from jaxrank.data import load_dataset
    cs = contexts_of(load_dataset("summeval"), aspect="coherence", contexts="0:2", max_candidates=4)
    judge = PromptJudge(smollm2, pairwise_template("summeval", "coherence"), batch_size=4)
    path = tmp_path / "real.jsonl"
    calls = {"n": 0}
    original = judge.compare

    def crash_once(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt("killed")
        return original(*a, **k)

    judge.compare = crash_once
    with pytest.raises(KeyboardInterrupt):
        judge_contexts(judge, cs, path, chunk=6, progress=False)
    kept = len(JudgementStore(path))
    assert kept == 12                                   # two chunks of 6 made it to disk
    with open(path, "a") as f:
        f.write('{"judge": "smollm2-135m", "te')        # and a torn line
    judge.compare = original
    with pytest.warns(StoreDamageWarning, match="torn last line"):      # moved aside, said once, nothing valid lost
        sel = judge_contexts(judge, cs, path, chunk=6, progress=False)
    assert "torn last line" in (tmp_path / "real.jsonl.damaged").read_text()
    c = sel.comparisons
    p = np.asarray(c.p)[np.asarray(c.weight) > 0]
    assert p.size == 24 and np.all((p > 0) & (p < 1))
    pairs = {(int(a), int(b)) for a, b in zip(np.asarray(c.i[0]), np.asarray(c.j[0]))}
    assert pairs == {(a, b) for a in range(4) for b in range(4) if a != b}     # both orders of every pair
    direct = judge.compare(cs.texts[1], cs.candidates[1], np.asarray(c.i[1]), np.asarray(c.j[1]))
    np.testing.assert_allclose(np.asarray(c.p[1]), direct.p, atol=1e-5)   # batch composition differs
