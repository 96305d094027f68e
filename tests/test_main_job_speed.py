"""The similarity judge of the main job: each text embedded once, in planned passes, same p as a direct cosine."""

import json

import numpy as np
import pytest

import jax.numpy as jnp

from jaxrank.assessment.run import ContextSet, judge_contexts
from jaxrank.judges import similarity
from jaxrank.judges.similarity import SimilarityJudge
from jaxrank.models.bert import embed

SHARED = "A summary that two articles share, word for word."
CS = ContextSet(
    ids=["a", "b", "c"],
    texts=["The council closed the old bridge for a year of repairs.",
           "Rain fell on the city for three days and the river rose.",
           "The team won the final after extra time."],
    candidate_ids=[["a0", "a1", "a2"], ["b0", "b1", "b2"], ["c0", "c1"]],
    candidates=[["The bridge is closed for repairs.", SHARED, "Football results."],
                ["The river rose after days of rain.", SHARED, "The bridge is closed for repairs."],
                ["The team won.", "It rained."]],
)


def _distinct(cs, contexts=None):
    keep = range(len(cs.ids)) if contexts is None else contexts
    return {t for k in keep for t in (cs.texts[k], *cs.candidates[k])}


def _store_p(path):
    return {(r["context"], r["a"], r["b"]): r["p"] for r in map(json.loads, open(path).read().splitlines())}


@pytest.fixture()
def calls(monkeypatch):
    """Every encoder pass as (rows, length, texts in it)."""
    seen = []
    real = similarity._encode

    def counted(graphdef, state, ids, segment_ids, num_segments, pooling):
        seen.append(tuple(ids.shape) + (int(np.asarray(segment_ids).max(1).sum()),))
        return real(graphdef, state, ids, segment_ids, num_segments, pooling)

    monkeypatch.setattr(similarity, "_encode", counted)
    return seen


def test_each_text_embedded_once_and_p_is_the_numpy_cosine(minilm, tmp_path, calls):
    judge = SimilarityJudge(minilm, batch_size=4)
    judge_contexts(judge, CS, tmp_path / "s.jsonl", progress=False)
    distinct = _distinct(CS)
    assert judge.stats.texts == len(distinct) == 9               # SHARED and one candidate appear twice
    assert len(calls) == judge.stats.passes and sum(n for _, _, n in calls) == len(distinct)
    assert judge.stats.tokens <= judge.stats.padded_tokens
    # p from the store equals sigmoid(k (cos_a - cos_b)) of embeddings made one text at a time, unpadded
    direct = {}
    for t in distinct:
        ids = minilm.tokenizer(t, truncation=True, max_length=256)["input_ids"]
        e = np.asarray(embed(minilm.model, jnp.asarray([ids], jnp.int32), jnp.ones((1, len(ids)), jnp.int32)))
        direct[t] = e[0].astype(np.float64)
    got = _store_p(tmp_path / "s.jsonl")
    assert len(got) == 6 + 6 + 2
    for k, ctx in enumerate(CS.ids):
        cos = {c: direct[t] @ direct[CS.texts[k]] for c, t in zip(CS.candidate_ids[k], CS.candidates[k])}
        for a in CS.candidate_ids[k]:
            for b in CS.candidate_ids[k]:
                if a != b:
                    expected = 1 / (1 + np.exp(-judge.k * (cos[a] - cos[b])))
                    assert got[(ctx, a, b)] == pytest.approx(expected, abs=2e-5)
    # judging again (another store) embeds nothing: every text is cached
    before = len(calls)
    judge_contexts(judge, CS, tmp_path / "t.jsonl", progress=False)
    assert len(calls) == before and judge.stats.texts == 9
    assert _store_p(tmp_path / "t.jsonl") == got


def test_resume_embeds_only_what_is_left(minilm, tmp_path, calls):
    store = tmp_path / "s.jsonl"
    first = SimilarityJudge(minilm, batch_size=4)
    judge_contexts(first, CS, store, progress=False, positions=[0, 1])
    part = _store_p(store)
    fresh = SimilarityJudge(minilm, batch_size=4)                 # a new process: nothing cached
    sel = judge_contexts(fresh, CS, store, progress=False)
    assert fresh.stats.texts == len(_distinct(CS, [2]))           # only the unjudged context's texts
    assert sel.contexts == CS.ids and int((np.asarray(sel.comparisons.weight) > 0).sum()) == 14
    whole = SimilarityJudge(minilm, batch_size=4)
    judge_contexts(whole, CS, tmp_path / "w.jsonl", progress=False)
    ref, got = _store_p(tmp_path / "w.jsonl"), _store_p(store)
    assert set(got) == set(ref) and all(part[k] == got[k] for k in part)
    np.testing.assert_allclose([got[k] for k in ref], [ref[k] for k in ref], atol=2e-6)


def test_progress_counts_texts(minilm, tmp_path):
    judge = SimilarityJudge(minilm, batch_size=4)
    told = []
    judge.prefetch(CS.texts[:1], progress=told.append)
    judge.prefetch([*CS.texts, CS.texts[0]], progress=told.append)   # one cached, two new, a repeat
    assert told[0] == 1 and told[1] == 1 and sum(told[1:]) == 3


def test_plan_one_full_shape(minilm):
    judge = SimilarityJudge(minilm, batch_size=8)                 # rows of 256 tokens, 8 rows a pass
    lengths = [256] + [60] * 100 + [20] * 3 + [200, 56]
    passes = judge._plan(lengths)
    rows = [row for _, p in passes for row in p]
    assert sorted(k for row in rows for k in row) == list(range(len(lengths)))
    assert all(nb == 8 for nb, _ in passes)                       # one shape, the last pass filled up
    # by hand: the 256 alone, 200 + 56, 25 rows of four 60s (16 tokens free each), one row of the three 20s
    assert sorted(sorted(lengths[k] for k in row) for row in rows) == sorted(
        [[256], [56, 200], *[[60] * 4] * 25, [20] * 3])


def test_no_recompilation_for_the_same_shapes(minilm):
    a = SimilarityJudge(minilm, batch_size=4)
    a.prefetch(["one short text", "another short text"])
    size = similarity._encode._cache_size()
    b = SimilarityJudge(minilm, batch_size=4)                     # a new judge, other texts of the same plan
    b.prefetch(["a third short text", "and a fourth one"])
    assert similarity._encode._cache_size() == size and b.stats.shapes == a.stats.shapes


def test_cache_is_bounded(minilm):
    judge = SimilarityJudge(minilm, batch_size=4, cache_size=2)
    e, _ = judge.embed(["x one", "x two", "x three"])              # more than it keeps: still all embedded
    assert e.shape == (3, minilm.config.hidden_size) and len(judge._cache) <= 2
    ref, _ = SimilarityJudge(minilm, batch_size=4).embed(["x one", "x two", "x three"])
    np.testing.assert_allclose(e, ref, atol=1e-6)
    with pytest.raises(ValueError, match="cache_size"):
        SimilarityJudge(minilm, cache_size=0)
