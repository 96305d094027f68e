"""Review of the pointwise judges (11-27): read-only prompt settings, template and input checks, the text the
model reads after a cut, pointwise_comparisons' arguments, rating replay's antisymmetry.

Runs the tiny random-weight Llama with a byte tokenizer (tests/tiny_lm.py): one token per byte, BOS first.
"""

import dataclasses
import warnings

import numpy as np
import pytest
from tiny_lm import BOS, OFFSET, sharpen, tiny_lm

from jaxrank.judges.pointwise import GEvalJudge, PointwiseResult, pointwise_comparisons
from jaxrank.judges.prompt_scoring import PromptScoringJudge
from jaxrank.judges.prompts import pointwise_template
from jaxrank.judges.rating_replay import replay_probabilities

CTX = "The council voted to close the old bridge. Repairs start in May and last a year."
CANDS = ["The bridge closes for repairs.", "Council votes; bridge shut until next May.", "Bridge."]
STEPS = "1. Read the text.\n2. Read the summary.\n3. Give a score."


@pytest.fixture(scope="module")
def lm():
    return sharpen(tiny_lm(seed=1))


def _bytes_ids(text):
    """The byte tokenizer by hand: BOS, then each UTF-8 byte shifted by OFFSET."""
    return [BOS] + [b + OFFSET for b in text.encode()]


def _reference_score(lm, text, score_ids):
    """G-Eval eq. 1 from one full forward over ``text`` (no cache), the softmax in NumPy."""
    logits = np.asarray(lm.model(np.asarray([_bytes_ids(text)], np.int32)), np.float64)[0, -1]
    p = np.exp(logits[score_ids] - logits[score_ids].max())
    return float((p / p.sum()) @ np.arange(1, 6))


# ----------------------------------------------------------------------- 1: read-only settings
def test_geval_prompt_settings_are_read_only(lm):
    """Assigning a setting that shapes the prompt changed template_key but not the prompt (scores of one
    template stored under another's key): it now raises, leaving key and prompt as they were; a new judge
    with the other template renders that template (checked against the template filled in by hand)."""
    judge = GEvalJudge(lm, pointwise_template("coherence"), steps=STEPS)
    key, text = judge.template_key, judge.prompt_text(CTX, CANDS[0])
    fluency = pointwise_template("fluency")
    for name, value in [("template", fluency), ("system", "Be harsh."), ("chat", True),
                        ("max_step_tokens", 7), ("max_length", 100)]:
        with pytest.raises(AttributeError, match=f"{name} is fixed.*build a new judge"):
            setattr(judge, name, value)
    assert judge.template_key == key and judge.prompt_text(CTX, CANDS[0]) == text
    fresh = GEvalJudge(lm, fluency, steps=STEPS)
    hand = (fluency.text.replace("{criteria}", fluency.criteria).replace("{steps}", STEPS)
            .replace("{context}", CTX).replace("{candidate}", CANDS[0])) + " "
    assert fresh.prompt_text(CTX, CANDS[0]) == hand and fresh.template_key != key
    judge.steps = "1. Count the typos."               # the steps stay settable (they re-render the prompt)
    assert "Count the typos" in judge.prompt_text(CTX, CANDS[0]) and judge.template_key != key


def test_prompt_scoring_settings_are_read_only(lm):
    judge = PromptScoringJudge(lm, aspect="coherence", temperature=0.0)
    key, text = judge.template_key, judge.prompt_text(CTX, CANDS[0])
    for name, value in [("text", "Rate the FLUENCY: {context} {candidate}"), ("aspect", "fluency"),
                        ("answer_prefix", "Answer:"), ("system", "Be harsh."), ("max_new_tokens", 9),
                        ("temperature", 1.0), ("top_p", 0.5), ("num_samples", 3), ("seed", 4),
                        ("fallback", 1.0), ("parser", len)]:
        with pytest.raises(AttributeError, match=f"{name} is fixed"):
            setattr(judge, name, value)
    assert judge.template_key == key and judge.prompt_text(CTX, CANDS[0]) == text
    assert judge.text.startswith("Article: {context}") and judge.max_new_tokens == 5


# ----------------------------------------------------------------------- 3, 7: template checks
def test_bad_templates_are_refused_at_construction(lm):
    tpl = pointwise_template("coherence")
    bad_text = {"no candidate": tpl.text.replace("{candidate}", "the summary"),
                "context twice": tpl.text + "\n{context}",
                "context after candidate": tpl.text.replace("{context}", "").replace("{candidate}",
                                                                                    "{candidate} {context}")}
    for why, text in bad_text.items():
        with pytest.raises(ValueError, match=r"template\.text must"):
            GEvalJudge(lm, dataclasses.replace(tpl, text=text), steps=STEPS)
        with pytest.raises(ValueError, match=r"^text must"):
            PromptScoringJudge(lm, aspect="coherence", text=text.replace("{criteria}", "").replace("{steps}", ""))
    for scores in [(), (1, float("nan")), ("a", "b")]:
        with pytest.raises(ValueError, match=r"template\.scores"):
            GEvalJudge(lm, dataclasses.replace(tpl, scores=scores), steps=STEPS)
    with pytest.raises(ValueError, match="template must be a PointwiseTemplate"):
        GEvalJudge(lm, tpl.text, steps=STEPS)
    with pytest.raises(ValueError, match="steps must be a string"):
        GEvalJudge(lm, tpl, steps=STEPS).steps = None
    # a template without {context} is fine: its prompt is the template filled in by hand
    free = dataclasses.replace(tpl, text=tpl.text.replace("{context}", "(none)"))
    hand = free.text.replace("{criteria}", free.criteria).replace("{steps}", STEPS).replace("{candidate}", "x") + " "
    assert GEvalJudge(lm, free, steps=STEPS).prompt_text(CTX, "x") == hand


# ----------------------------------------------------------------------- 4: texts
def test_candidates_must_be_a_sequence_of_strings(lm):
    """A string was scored per character (3 scores for "abc"); None gave a raw TypeError."""
    for judge in (GEvalJudge(lm, pointwise_template("coherence"), steps=STEPS),
                  PromptScoringJudge(lm, aspect="coherence", temperature=0.0, max_new_tokens=2)):
        with pytest.raises(ValueError, match="candidates must be a sequence of strings"):
            judge.score(CTX, "abc")
        with pytest.raises(ValueError, match="candidates must be a sequence of strings"):
            judge.compare(CTX, "abc", [0], [1])
        with pytest.raises(ValueError, match=r"candidates\[1\] must be a string, got NoneType"):
            judge.score(CTX, ["fine", None])
        with pytest.raises(ValueError, match="context must be a string"):
            judge.score(None, ["fine"])
        with pytest.raises(ValueError, match=r"candidates\[0\] must be a string"):
            judge.prompt_text(CTX, 3)
    res = GEvalJudge(lm, pointwise_template("coherence"), steps=STEPS).score(CTX, np.asarray(CANDS[:2]))
    assert res.scores.shape == (2,)                   # numpy strings are strings


# ----------------------------------------------------------------------- 5: the text the model reads
def test_prompt_text_is_what_the_model_reads_after_a_cut():
    """With the context cut to fit the window, prompt_text (and token_ids) gave the whole context. Now its
    byte tokens fit the window and the full-forward score of it equals the judge's, for one candidate alone
    and for a candidate scored with a longer one (each candidate's cut is its own)."""
    small = sharpen(tiny_lm(seed=1, max_len=900))
    judge = GEvalJudge(small, pointwise_template("coherence"), steps=STEPS)
    long_ctx = CTX * 10
    tpl = judge.template
    whole = (tpl.text.replace("{criteria}", tpl.criteria).replace("{steps}", STEPS)
             .replace("{context}", long_ctx).replace("{candidate}", CANDS[2])) + " "
    assert judge.prompt_text(CTX, CANDS[2]) == whole.replace(long_ctx, CTX)     # a short context stays whole
    assert len(_bytes_ids(whole)) + 1 > 900
    for group in ([CANDS[2]], [CANDS[2], CANDS[1]]):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = judge.score(long_ctx, group)
        assert res.truncated
        text = judge.prompt_text(long_ctx, CANDS[2], scored_with=group[1:])
        assert text != whole and len(_bytes_ids(text)) + 1 <= 900
        assert abs(res.scores[0] - _reference_score(small, text, judge.score_token_ids)) < 1e-4
        p, s = judge.token_ids(long_ctx, CANDS[2], scored_with=group[1:])
        assert p + s == _bytes_ids(text)
    alone = judge.prompt_text(long_ctx, CANDS[2])
    with_long = judge.prompt_text(long_ctx, CANDS[2], scored_with=[CANDS[1]])
    assert with_long == alone                         # a longer candidate beside it no longer cuts its context


# ----------------------------------------------------------------------- 6: pointwise_comparisons
def test_pointwise_comparisons_arguments():
    s = np.array([3.0, 3.0, 2.0])
    for scale in (float("inf"), float("nan"), -1.0, 0.0, True, "2"):
        with pytest.raises(ValueError, match="scale must be a finite number > 0"):
            pointwise_comparisons(s, [0, 0], [1, 2], scale=scale)
    with pytest.raises(ValueError, match="^i must be integer indices"):
        pointwise_comparisons(s, [0.9], [2])
    with pytest.raises(ValueError, match="^j must be integer indices"):
        pointwise_comparisons(s, [0], [2.7])
    with pytest.raises(ValueError, match="^i must be integer indices"):
        pointwise_comparisons(s, [True], [False])
    p = pointwise_comparisons(PointwiseResult(s, None, False), np.asarray([0, 0], np.int32), [1, 2], scale=1e6)
    np.testing.assert_array_equal(p, [0.5, 1.0])      # a tie is 1/2 at any finite scale
    assert pointwise_comparisons(s, [], []).shape == (0,)


# ----------------------------------------------------------------------- 10: replay antisymmetry
@pytest.mark.parametrize("method", ["variant_share", "logistic", "gaussian"])
def test_replay_antisymmetric_to_float32_rounding(method):
    """The float32 probabilities of both orders sum to 1 within 2**-24 (the documented bound), and each is
    the formula keeping float32's relative precision, checked by hand for the logistic and the variant share."""
    rng = np.random.default_rng(0)
    r = rng.integers(1, 6, size=(50, 3)).astype(float) + rng.normal(0, 0.3, (50, 3))
    a, b = np.triu_indices(50, 1)
    p = replay_probabilities(r, a, b, method=method).astype(np.float64)
    q = replay_probabilities(r, b, a, method=method).astype(np.float64)
    assert np.abs(p + q - 1).max() <= 2.0 ** -24
    if method == "logistic":
        d = r[a].mean(1) - r[b].mean(1)
        np.testing.assert_allclose(p, 1 / (1 + np.exp(-d)), rtol=2.0 ** -23, atol=0)
    if method == "variant_share":
        share = ((r[a] > r[b]).sum(1) + 0.5 * (r[a] == r[b]).sum(1)) / 3
        np.testing.assert_array_equal(p, share.astype(np.float32).astype(np.float64))
    s = np.array([1.0, 2.5, 4.0, 1.0 + 1e-9])
    i, j = np.triu_indices(4, 1)
    pp = pointwise_comparisons(s, i, j).astype(np.float64) + pointwise_comparisons(s, j, i).astype(np.float64)
    assert np.abs(pp - 1).max() <= 2.0 ** -24
