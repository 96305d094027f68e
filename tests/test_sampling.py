"""Text-only judges (jaxrank.judges.sampling): sampled decisions (eq. 4-5) and callables as judges."""

import math
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from tiny_lm import EOS, OFFSET, ByteTokenizer, tiny_lm

from jaxrank.judges import textgen
from jaxrank.judges._truncation import fit_context
from jaxrank.models.llama import GenerateOutput
from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import PairwiseTemplate, pairwise_template
from jaxrank.judges.sampling import GENERIC_TEMPLATE, CallableJudge, SamplingJudge, label_parser

CTX = "The council voted to close the old bridge for a year of repairs."
CANDS = ["Bridge closed for repairs.", "zzz council bridge", "The old bridge closes for a year."]
TPL = pairwise_template("summeval", "coherence")


@pytest.fixture(scope="module")
def lm():
    return tiny_lm(seed=3)


@pytest.mark.parametrize("text, expected", [
    ("A", 1.0), ("B", 0.0), (" A.", 1.0), ("Summary B is more coherent than Summary A", 0.0),
    ("I think A", 1.0), ("a summary", None), ("Neither", None), ("", None), ("A or B? B", 1.0),
    ("AB", None), ("(B)", 0.0)])
def test_label_parser_single_letters(text, expected):
    assert label_parser(("A", "B"))(text) == expected


def test_label_parser_multiword_labels():
    parse = label_parser(("Summary A", "Summary B"))
    assert parse("Summary B is better.") == 0.0
    assert parse("Summary A, clearly; not Summary B") == 1.0
    assert parse("B") == 0.0 and parse("A!") == 1.0      # falls back to the distinguishing words
    assert parse("Both summaries") is None
    with pytest.raises(ValueError):
        label_parser(("A", "A"))


def _fake_generate(calls, answer_of):
    """A generate() whose row answers are ``answer_of(prompt_text, sample_index)``."""

    def fake(model, ids, mask, *, max_new_tokens, temperature, top_p, rng, eos_id, pad_id):
        calls.append(dict(shape=ids.shape, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p))
        ids, mask = np.asarray(ids), np.asarray(mask)
        toks = np.full((ids.shape[0], max_new_tokens), pad_id, np.int32)
        lens = np.zeros(ids.shape[0], np.int32)
        for r in range(ids.shape[0]):
            prompt = ByteTokenizer().decode(ids[r][mask[r]])
            t = [b + OFFSET for b in answer_of(prompt, r).encode()][:max_new_tokens - 1] + [EOS]
            toks[r, :len(t)], lens[r] = t, len(t)
        return GenerateOutput(jnp.asarray(toks), jnp.asarray(lens))

    return fake


def test_sampling_p_is_fraction_of_answers(lm, monkeypatch):
    calls = []
    cycle = ["A", "B is better", "Answer: A", "Unsure"]  # 1 + 0 + 1 + 1/2 over K = 4

    def answer_of(prompt, r):
        a_part = prompt.split("Summary A: ")[1].split("\n")[0]
        return "B" if a_part.startswith("zzz") else cycle[r % 4]

    monkeypatch.setattr(textgen, "generate", _fake_generate(calls, answer_of))
    judge = SamplingJudge(lm, TPL, num_samples=4, batch_size=2, max_new_tokens=12, temperature=0.7, top_p=0.9)
    i, j = [0, 1, 2], [1, 0, 0]
    jd = judge.compare(CTX, CANDS, i, j)
    np.testing.assert_allclose(jd.p, [0.625, 0.0, 0.625])
    np.testing.assert_array_equal(jd.logits, [[2, 1], [0, 4], [2, 1]])        # counts for A, B
    assert judge.undecided == 2 and not jd.truncated
    # K samples x comparisons batched: 2 comparisons x 4 samples in one call, then the last one
    assert [c["shape"][0] for c in calls] == [8, 4]
    assert calls[0]["temperature"] == 0.7 and calls[0]["top_p"] == 0.9 and calls[0]["max_new_tokens"] == 12
    # prompts are PromptJudge's, left-padded, without the label words' common prefix
    texts, _ = judge.sample_texts(CTX, CANDS, [0], [2])
    assert texts == [cycle]
    pj = PromptJudge(lm, TPL)
    whole = [t for part in pj.token_ids(CTX, CANDS[0], CANDS[2]) for t in part]
    rows, truncated = judge.token_rows(CTX, CANDS, [0], [2])
    assert rows == [whole] and not truncated
    assert ByteTokenizer().decode(whole) == pj.prompt_text(CTX, CANDS[0], CANDS[2])


def test_sampling_deterministic_given_seed_one_call_per_batch(lm, monkeypatch):
    calls = []
    real = textgen.generate

    def counting(*a, **kw):
        calls.append(a[1].shape)
        return real(*a, **kw)

    monkeypatch.setattr(textgen, "generate", counting)
    kw = dict(num_samples=3, max_new_tokens=4, batch_size=2)
    t1, _ = SamplingJudge(lm, TPL, seed=11, **kw).sample_texts(CTX, CANDS, [0, 1], [1, 2])
    assert calls == [(6, calls[0][1])]                      # 2 comparisons x 3 samples: one call
    t2, _ = SamplingJudge(lm, TPL, seed=11, **kw).sample_texts(CTX, CANDS, [0, 1], [1, 2])
    t3, _ = SamplingJudge(lm, TPL, seed=12, **kw).sample_texts(CTX, CANDS, [0, 1], [1, 2])
    assert t1 == t2 and t1 != t3
    assert len(t1) == 2 and all(len(x) == 3 for x in t1)
    assert len(set(t1[0])) > 1                              # temperature 1: the samples differ
    jd = SamplingJudge(lm, TPL, seed=11, **kw).compare(CTX, CANDS, [0, 1], [1, 2])
    assert np.all((jd.p >= 0) & (jd.p <= 1)) and jd.p.dtype == np.float32
    greedy, _ = SamplingJudge(lm, TPL, temperature=0.0, **kw).sample_texts(CTX, CANDS, [0], [1])
    assert len(set(greedy[0])) == 1


def test_fit_context_cuts_only_the_context_end():
    """The shared truncation helper: prompts = 2 prefix + 10 context + (3 | 1) candidate tokens, 1 appended."""
    pre, ctx, cands = [1, 2], list(range(100, 110)), ([7, 7, 7], [8])

    def build(k):
        return [pre + ctx[:k] + c for c in cands]

    def fit(max_length, warn=True, context_len=lambda: 10):
        return fit_context(build(None), 2 + 10 + 3 + 1, max_length=max_length, context_len=context_len,
                           rebuild=build, warn=warn, kept="candidates and question", stacklevel=1)

    def no_count():
        raise AssertionError("context length asked for although the prompts fit")

    rows = build(None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted, cut = fit_context(rows, 16, max_length=16, context_len=no_count, rebuild=build, warn=True,
                                  kept="x")
        assert fitted is rows and not cut                          # fits exactly: untouched, no warning
        fitted, cut = fit(12, warn=False)                          # cut, but the judge already warned
        assert cut
    with pytest.warns(UserWarning, match=r"^prompt longer than the model's 12 tokens: the context was cut by "
                      r"4 tokens \(candidates and question kept whole\)$") as rec:
        fitted, cut = fit(12)
    assert rec[0].filename == __file__                             # stacklevel counted from the caller
    assert cut and fitted == [[1, 2, 100, 101, 102, 103, 104, 105, 7, 7, 7], [1, 2, 100, 101, 102, 103, 104, 105, 8]]
    assert max(map(len, fitted)) + 1 == 12
    with pytest.warns(UserWarning, match="cut by 10 tokens"):
        assert fit(6) == ([[1, 2, 7, 7, 7], [1, 2, 8]], True)       # the whole context goes, nothing else
    with pytest.raises(ValueError, match=r"^a prompt needs 6 tokens \(answer included\) without the context's "
                       r"share; the model allows 5: too small$"):
        fit_context(rows, 16, max_length=5, context_len=lambda: 10, rebuild=build, warn=True, kept="x",
                    need_note=" (answer included)", error_tail=": too small")
    with pytest.raises(ValueError, match="needs 16 tokens"):     # no context to cut at all
        fit(15, context_len=lambda: 0)


def test_sampling_truncation_and_validation(lm):
    small = tiny_lm(seed=3, max_len=400)
    judge = SamplingJudge(small, TPL, num_samples=2, max_new_tokens=4)
    with pytest.warns(UserWarning, match="context was cut"):
        jd = judge.compare(CTX * 10, CANDS, [0], [1])
    assert jd.truncated and jd.p.shape == (1,)
    with pytest.raises(ValueError, match="outside"):
        judge.compare(CTX, CANDS, [0], [3])
    with pytest.raises(ValueError, match="empty"):
        judge.compare(CTX, ["ok", " "], [0], [1])
    empty = judge.compare(CTX, CANDS, [], [])
    assert empty.p.shape == (0,) and empty.logits.shape == (0, 2)
    assert judge.name == "tiny-sampled-k2-t1"
    with pytest.raises(ValueError, match="num_samples"):
        SamplingJudge(small, TPL, num_samples=0)


def test_callable_probabilities():
    seen = []

    def fn(prompts):
        seen.append(list(prompts))
        return [0.9 if "first" in p.split("Summary B:")[0] else 0.2 for p in prompts]

    judge = CallableJudge(fn, TPL, name="api")
    cands = ["first text", "second text", "third"]
    jd = judge.compare(CTX, cands, [0, 1, 2], [1, 0, 1])
    np.testing.assert_allclose(jd.p, [0.9, 0.2, 0.2], atol=1e-7)
    assert seen[0][0] == TPL.render(CTX, "first text", "second text")
    np.testing.assert_allclose(np.exp(jd.logits[:, 0]) / np.exp(jd.logits).sum(1), jd.p, atol=1e-6)
    ones = CallableJudge(lambda ps: [1.0, 0.0], TPL, name="edge").compare(CTX, cands, [0, 1], [1, 0])
    assert np.all(np.isfinite(ones.logits)) and list(ones.p) == [1.0, 0.0]
    chunked = CallableJudge(fn, TPL, name="api", batch_size=2)
    seen.clear()
    chunked.compare(CTX, cands, [0, 1, 2], [1, 0, 1])
    assert [len(x) for x in seen] == [2, 1]


@pytest.mark.parametrize("bad, match", [
    ([0.5, float("nan")], r"result 1 is nan"), ([0.5, 1.5], r"result 1 is 1\.5"), ([-0.1, 0.5], r"result 0"),
    ([0.5, "x"], r"result 1 is 'x'"), ([0.5], "1 results for 2 prompts"), ([0.5, None], "result 1")])
def test_callable_rejects_bad_probabilities(bad, match):
    judge = CallableJudge(lambda ps: bad, TPL, name="bad")
    with pytest.raises(ValueError, match=match):
        judge.compare(CTX, CANDS, [0, 1], [1, 0])


def test_callable_texts():
    n_calls = []

    def one_each(prompts):
        n_calls.append(1)
        k = len(n_calls)
        return ["A" if k != 2 else "B", "maybe"][:len(prompts)]

    judge = CallableJudge(one_each, TPL, name="chat-api", kind="text", num_samples=3)
    jd = judge.compare(CTX, CANDS, [0, 1], [1, 0])
    assert len(n_calls) == 3                                 # K calls for single answers
    np.testing.assert_allclose(jd.p, [2 / 3, 0.5])
    np.testing.assert_array_equal(jd.logits, [[2, 1], [0, 0]])
    assert judge.undecided == 3

    lists = CallableJudge(lambda ps: [["A", "A", "B", "?"] for _ in ps], name="cache", kind="text",
                          num_samples=7)
    jd = lists.compare(CTX, CANDS, [0], [1])
    assert math.isclose(jd.p[0], (2 + 0.5) / 4) and lists.undecided == 1
    assert lists.prompts(CTX, CANDS, [0], [1])[0] == GENERIC_TEMPLATE.render(CTX, CANDS[0], CANDS[1])
    with pytest.raises(ValueError, match="not a string"):
        CallableJudge(lambda ps: [3 for _ in ps], name="x", kind="text").compare(CTX, CANDS, [0], [1])
    with pytest.raises(ValueError, match="kind"):
        CallableJudge(lambda ps: ps, name="x", kind="logits")
    prefixed = PairwiseTemplate("{context} {a} {b}", answer_prefix="Answer:")
    assert CallableJudge(len, prefixed, name="p").prompts("c", ["a", "b"], [0], [1]) == ["c a b\n\nAnswer:"]


def test_real_smollm2_sampling_smoke(smollm2):
    judge = SamplingJudge(smollm2, TPL, num_samples=4, max_new_tokens=4, batch_size=2)
    jd = judge.compare("A storm hit the coast on Monday, cutting power to 10,000 homes.",
                       ["A storm cut power to 10,000 homes.", "homes monday the storm"], [0, 1], [1, 0])
    assert jd.p.shape == (2,) and np.all((jd.p >= 0) & (jd.p <= 1))
    np.testing.assert_allclose(jd.p * 8, np.round(jd.p * 8))  # multiples of 1/(2K)
    assert jd.logits.sum() + judge.undecided == 8
