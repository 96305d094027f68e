"""Sampled judges' random numbers and store keys (review of jaxrank.judges.sampling / prompt_scoring / pointwise).

* Every sampled row has its own PRNG key from the seed and what it judges
  (context, the texts in order, the sample index): a comparison's answers are
  the same alone or in a batch, in any call, at any ``batch_size``, and differ
  between comparisons and between the two orders of a pair.
* ``PromptScoringJudge.template_key`` covers every setting that changes its scores.
* ``GEvalJudge.compare`` scores again after ``steps`` change.
* A parser whose key cannot tell what it reads warns.
"""

import hashlib
import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny_lm import sharpen, tiny_lm

import jaxrank as jr
from jaxrank.assessment.run import contexts_of, judge_contexts, template_key
from jaxrank.judges import textgen
from jaxrank.judges.pointwise import GEvalJudge
from jaxrank.judges.prompt_scoring import PromptScoringJudge, parse_score
from jaxrank.judges.prompts import PairwiseTemplate, pairwise_template, pointwise_template
from jaxrank.judges.sampling import CallableJudge, ParserKeyWarning, SamplingJudge, parser_key
from jaxrank.models import llama as llama_mod

CTX = "The council voted to close the old bridge. Repairs start in May."
CANDS = ["The bridge closes.", "Council votes; bridge shut.", "Bridge shut in May.", "A vote on a bridge."]
TPL = PairwiseTemplate("Article: {context}\n\nSummary A: {a}\n\nSummary B: {b}\n\nWhich is better, A or B?", name="t")


@pytest.fixture(scope="module")
def lm():
    return tiny_lm(seed=3)           # random weights: a near-uniform next-token distribution


# ----------------------------------------------------------------------------------------- per-row keys
def test_row_keys_are_the_seed_folded_with_a_hash_of_the_row():
    rows = [("ctx", "a", "b", 0), ("ctx", "a", "b", 1), ("ctx", "b", "a", 0)]
    got = np.asarray(textgen.row_keys(7, rows))
    for r, row in zip(got, rows):
        h = hashlib.sha256()
        for x in row:
            b = str(x).encode()
            h.update(len(b).to_bytes(8, "little") + b)
        want = jax.random.fold_in(jax.random.PRNGKey(7), int.from_bytes(h.digest()[:4], "little"))
        np.testing.assert_array_equal(r, np.asarray(want))
    assert len({tuple(r) for r in got}) == 3
    assert textgen.text_hash32(("ab", "c")) != textgen.text_hash32(("a", "bc"))      # length-prefixed


def _pick_per_row(logits, keys, top_p):
    """The decoding loop's next-token pick with one key per row (step 0: ``fold_in(key, 0)``)."""
    step = jax.vmap(lambda k: jax.random.fold_in(k, 0))(keys)
    return jax.jit(llama_mod._pick, static_argnums=2)(jnp.asarray(logits), step, False, jnp.float32(1.0),
                                                      jnp.float32(top_p))


def test_per_row_sampling_follows_the_softmax_and_the_nucleus():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05], np.float32))
    n = 4000
    keys = textgen.row_keys(0, [(k,) for k in range(n)])
    draw = np.asarray(_pick_per_row(np.tile(logits, (n, 1)), keys, 1.0))
    freq = np.bincount(draw, minlength=4) / n
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.15, 0.05], atol=0.03)       # 4 sigma at n = 4000
    # top_p = 0.6 keeps the tokens whose preceding mass is < 0.6: the first two, renormalised to 5/8, 3/8
    draw = np.asarray(_pick_per_row(np.tile(logits, (n, 1)), keys, 0.6))
    freq = np.bincount(draw, minlength=4) / n
    np.testing.assert_allclose(freq, [0.625, 0.375, 0, 0], atol=0.03)


def test_a_comparisons_samples_do_not_depend_on_batch_call_or_batch_size(lm):
    kw = dict(num_samples=4, temperature=1.0, max_new_tokens=5, seed=0)
    i, j = [0, 2, 1, 3, 2], [1, 3, 0, 2, 0]
    together, _ = SamplingJudge(lm, TPL, batch_size=2, **kw).sample_texts(CTX, CANDS, i, j)
    other_bs, _ = SamplingJudge(lm, TPL, batch_size=3, **kw).sample_texts(CTX, CANDS, i, j)
    judge = SamplingJudge(lm, TPL, batch_size=1, **kw)
    alone = [judge.sample_texts(CTX, CANDS, [a], [b])[0][0] for a, b in zip(i, j)]
    assert together == alone == other_bs
    # different comparisons and the two orders of one pair get other random numbers
    by_pair = dict(zip(zip(i, j), alone))
    assert by_pair[(0, 1)] != by_pair[(2, 3)]
    assert by_pair[(2, 3)] != by_pair[(3, 2)]
    assert sum(x == y for x, y in zip(by_pair[(0, 1)], by_pair[(2, 3)])) < 4
    # the p of one compare() call per comparison is the p of one call for all
    p_all = judge.compare(CTX, CANDS, i, j).p
    p_one = [judge.compare(CTX, CANDS, [a], [b]).p[0] for a, b in zip(i, j)]
    np.testing.assert_array_equal(p_all, p_one)


def test_smollm2_samples_same_alone_and_batched_and_differ_across_orders(smollm2):
    t = pairwise_template("summeval", "coherence")
    kw = dict(num_samples=4, temperature=1.0, max_new_tokens=3, seed=0)
    cands = ["A park was approved.", "The council met on Monday.", "A riverside park opens in spring."]
    ctx = "The city council approved a new park on Monday. It will open next spring near the river."
    i, j = [0, 1, 2, 1], [1, 0, 0, 2]
    batched, _ = SamplingJudge(smollm2, t, batch_size=4, **kw).sample_texts(ctx, cands, i, j)
    single = SamplingJudge(smollm2, t, batch_size=1, **kw)
    alone = [single.sample_texts(ctx, cands, [a], [b])[0][0] for a, b in zip(i, j)]
    assert batched == alone
    assert alone[0] != alone[1]                     # (0, 1) and (1, 0)
    assert len({tuple(x) for x in alone}) == 4


def test_sampled_judges_keys_carry_the_sampling_scheme(lm):
    sj = SamplingJudge(lm, TPL, num_samples=2, max_new_tokens=2)
    assert sj.template_key.startswith(TPL.key + "-") and sj.template_key != TPL.key
    ps = PromptScoringJudge(lm, aspect="coherence")
    assert textgen.SAMPLING_SCHEME == "rk1"
    other = PromptScoringJudge(lm, aspect="coherence")
    assert ps.template_key == other.template_key


# -------------------------------------------------------------------------------- prompt scoring's key
def _ps(lm, **kw):
    return PromptScoringJudge(lm, **{"aspect": "coherence", **kw})


@pytest.mark.parametrize("change", [
    dict(aspect="fluency"), dict(text="Article: {context}\nSummary: {candidate}\nScore 1-10:"),
    dict(kind="dialogue"), dict(source="story"), dict(temperature=0.5), dict(top_p=0.9), dict(max_new_tokens=4),
    dict(num_samples=3), dict(seed=1), dict(fallback=1.0), dict(parser=lambda t: 3.0), dict(answer_prefix="Answer:"),
    dict(system="Be strict."), dict(chat=True)])
def test_prompt_scoring_key_changes_with_every_setting(change):
    lm = tiny_lm(seed=1, chat="chat" in change)
    base = _ps(lm, chat=False) if "chat" in change else _ps(lm)
    assert _ps(lm, **change).template_key != base.template_key
    assert base.template_key.startswith("score-coherence-")


def test_prompt_scoring_key_ignores_batch_size(lm):
    assert _ps(lm, batch_size=1).template_key == _ps(lm, batch_size=16).template_key
    assert template_key(_ps(lm)) == _ps(lm).template_key != "none"


def test_two_prompt_scoring_judges_on_one_store_do_not_mix(tmp_path):
    lm = sharpen(tiny_lm(seed=1))
    rows = [{"context_id": "c0", "context": "The council voted to close the bridge.", "candidate_id": f"s{k}",
             "candidate": t} for k, t in enumerate(["Bridge shut.", "A vote on a bridge.", "Council closes bridge."])]
    cs = contexts_of(jr.data.from_records(rows))
    a = _ps(lm, temperature=1.0, seed=0, num_samples=2)
    b = _ps(lm, aspect="fluency", temperature=0.0, seed=7, num_samples=3, fallback=1.0)
    store = tmp_path / "s.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ra = judge_contexts(a, cs, store, progress=False)
        rb = judge_contexts(b, cs, store, progress=False)
    lines = [json.loads(x) for x in open(store) if x.strip()]
    assert len(lines) == 12 and {r["template"] for r in lines} == {a.template_key, b.template_key}
    for judge, res in ((a, ra), (b, rb)):
        c = res.comparisons
        i, j = np.asarray(c.i)[0], np.asarray(c.j)[0]
        direct = _ps(lm, **({"temperature": 1.0, "seed": 0, "num_samples": 2} if judge is a else
                            {"aspect": "fluency", "temperature": 0.0, "seed": 7, "num_samples": 3,
                             "fallback": 1.0})).compare(cs.texts[0], cs.candidates[0], i, j).p
        np.testing.assert_allclose(np.asarray(c.p)[0], direct, rtol=1e-6)


def test_prompt_scoring_score_independent_of_other_candidates(lm):
    judge = _ps(lm, temperature=1.0, num_samples=3, batch_size=2)
    together = judge.score(CTX, CANDS).texts
    alone = tuple(judge.score(CTX, [c]).texts[0] for c in CANDS)
    assert together == alone


# ----------------------------------------------------------------------------------------- G-Eval cache
def test_geval_compare_scores_again_after_the_steps_change():
    lm = sharpen(tiny_lm(seed=1))
    cands = CANDS[:3]
    j = GEvalJudge(lm, pointwise_template("coherence"), steps="1. Read the text.\n2. Give a score.")
    first = j.compare(CTX, cands, [0, 1], [1, 2]).p
    j.steps = "Think very carefully about every sentence, then answer with a number."
    fresh = GEvalJudge(lm, pointwise_template("coherence"), steps=j.steps).compare(CTX, cands, [0, 1], [1, 2]).p
    np.testing.assert_array_equal(j.compare(CTX, cands, [0, 1], [1, 2]).p, fresh)
    assert not np.array_equal(first, fresh)


# ------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kw, arg", [
    (dict(temperature=-1.0), "temperature"), (dict(temperature=float("inf")), "temperature"),
    (dict(top_p=0.0), "top_p"), (dict(top_p=-3.0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(max_new_tokens=0), "max_new_tokens")])
def test_sampling_settings_are_checked_at_construction(lm, kw, arg):
    with pytest.raises(ValueError, match=arg):
        SamplingJudge(lm, TPL, num_samples=2, **{"max_new_tokens": 3, **kw})
    with pytest.raises(ValueError, match=arg):
        _ps(lm, **kw)


def test_pointwise_settings_are_checked_at_construction(lm):
    with pytest.raises(ValueError, match="max_step_tokens"):
        GEvalJudge(lm, pointwise_template("coherence"), max_step_tokens=0)
    with pytest.raises(ValueError, match="num_samples"):
        _ps(lm, num_samples=0)
    with pytest.raises(ValueError, match="fallback"):
        _ps(lm, fallback=float("nan"))
    assert parse_score("7") == 7.0


# ---------------------------------------------------------------------------------------- parser keys
def _table_parser(words):
    def parse(text):
        for w, v in words.items():
            if w in text:
                return v
        return None
    return parse


def test_parsers_closing_over_tables_or_patterns_get_their_own_keys():
    import re
    a, b = _table_parser({"A": 1.0, "B": 0.0}), _table_parser({"A": 0.0, "B": 1.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # plain tables and patterns: no warning
        assert parser_key(a) != parser_key(b)
        assert parser_key(a) == parser_key(_table_parser({"A": 1.0, "B": 0.0}))
        ra = (lambda r: (lambda t: 1.0 if r.search(t) else 0.0))(re.compile("A"))
        rb = (lambda r: (lambda t: 1.0 if r.search(t) else 0.0))(re.compile("B"))
        assert parser_key(ra) != parser_key(rb)
    fn = lambda prompts: ["A"] * len(prompts)
    ja = CallableJudge(fn, name="api", kind="text", parser=a)
    jb = CallableJudge(fn, name="api", kind="text", parser=b)
    assert ja.template_key != jb.template_key


class _Reader:
    def __init__(self, word):
        self.word = word

    def __call__(self, text):
        return 1.0 if self.word in text else 0.0


def test_a_parser_whose_key_misses_its_state_warns_and_a_key_attribute_silences_it():
    obj = object()

    def opaque(text, _o=None):
        return 1.0 if obj else 0.0

    with pytest.warns(ParserKeyWarning, match=r"set parser\.key"):
        parser_key(opaque)
    with pytest.warns(ParserKeyWarning, match="_Reader"):
        parser_key(_Reader("A"))
    keyed = _Reader("B")
    keyed.key = "reader-B"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parser_key(keyed) == "reader-B"


def test_callable_text_judge_keys_its_number_of_samples(tmp_path):
    """``p`` of a text judge is the share of ``num_samples`` answers naming A: another count, another key; a
    store of one-call (hard 0/1) judgements is not read back as nine-call shares."""
    import random

    from jaxrank.assessment.run import ContextSet, judge_contexts

    rng = random.Random(0)
    calls = []

    def answers(prompts):
        calls.append(len(prompts))
        return ["A" if rng.random() < 0.7 else "B" for _ in prompts]

    cs = ContextSet(["c0"], ["ctx"], [["x", "y", "z"]], [["one", "two", "three"]])
    one = CallableJudge(answers, kind="text", name="api", num_samples=1)
    nine = CallableJudge(answers, kind="text", name="api", num_samples=9)
    assert one.template_key == one.template.key          # the default keeps the key stored results have
    assert nine.template_key != one.template_key
    path = tmp_path / "s.jsonl"
    judge_contexts(one, cs, path, progress=False)
    before = sum(calls)
    sel = judge_contexts(nine, cs, path, progress=False)
    assert sum(calls) - before == 9 * 6                  # judged again, nine calls over the 6 ordered pairs
    p = np.asarray(sel.comparisons.p)[0][np.asarray(sel.comparisons.weight)[0] > 0]
    assert not np.all(np.isin(p, [0.0, 1.0]))            # shares of nine answers, not the stored 0/1
