"""Pointwise context truncation is per candidate: a candidate's score never depends on the others of its call.

Before the fix ``_PointwiseBase._fit`` cut the context so the *longest*
candidate's prompt of the call fit the window, so a candidate's G-Eval score
changed with the candidates scored beside it (tiny Llama, window 740, the
context cut: candidate 0 scored alone 3.17870, with the other four 3.18513).
Each candidate's prompt now keeps as much of the context as fits with its own
text (:func:`~jaxrank.judges._truncation.fit_each`, as the pairwise judges).
Checks, with truncation active (tiny Llama, byte tokenizer: one token a byte):

* each candidate's prompt is the template filled by hand with the largest
  context cut ``context[:k]`` whose prompt fits the window, found by a plain
  scan (``token_ids``/``prompt_text`` give exactly those bytes, whatever
  ``scored_with`` says);
* a G-Eval score alone, with all the others, in reversed order and in a subset
  agree (``1e-5``), and equal eq. 1 computed in float64 NumPy from one full
  forward pass of that candidate's own prompt (``1e-4``, as
  ``test_pointwise_review`` bounds the cached reading);
* the warning gives the largest cut in tokens and how many prompts were cut,
  both counted here by the scan;
* the sampling judges (``PromptScoringJudge``, ``SampledGEvalJudge``) generate
  from the candidate's own prompt (the rows handed to ``generate_texts``), so
  they sample the same answers for a candidate alone and with the others;
* without a cut the rows read as before: one context cache for every candidate.
"""

import warnings

import numpy as np
import pytest
from tiny_lm import BOS, OFFSET, sharpen, tiny_lm

from jaxrank.judges.geval_sampling import SampledGEvalJudge
from jaxrank.judges.pointwise import GEvalJudge
from jaxrank.judges.prompt_scoring import PromptScoringJudge
from jaxrank.judges.prompts import pointwise_template

WINDOW = 740
TPL = pointwise_template("coherence")
STEPS = "1. Read the text.\n2. Read the summary.\n3. Give a score."
CANDS = ["short one", "another short", "a much much longer candidate text " * 2, "mid length candidate here",
         "a candidate of some forty five characters"]
LONG = "The quick brown fox jumps over the lazy dog. " * 6           # every prompt is cut
MIXED = "The council met on Monday. It approved the new park plan."  # short candidates fit whole, long ones cut


@pytest.fixture(scope="module")
def lm():
    return sharpen(tiny_lm(seed=1, max_len=WINDOW))


def geval_text(context, candidate):
    """G-Eval's prompt filled in by hand, then the score tokens' shared lead (a space after the colon)."""
    return (TPL.text.replace("{criteria}", TPL.criteria).replace("{steps}", STEPS)
            .replace("{context}", context).replace("{candidate}", candidate)) + " "


def scoring_text(context, candidate):
    """PromptScoringJudge's default prompt filled in by hand (no chat template: a blank line, then ``Score:``)."""
    return (f"Article: {context}\n\nSummary: {candidate}\n\nScore the coherence of the summary on a scale from 1 "
            "to 10, where 1 is the worst and 10 is the best. Answer with the score only.\n\nScore:")


def ids(text):
    return [BOS] + [b + OFFSET for b in text.encode()]


def own_cut(fill, context, candidate, window, extra):
    """The largest number of context characters (= tokens) whose filled prompt plus ``extra`` fits, by a scan."""
    for k in range(len(context), -1, -1):
        if len(ids(fill(context[:k], candidate))) + extra <= window:
            return k
    raise AssertionError("no cut fits")


def reference_score(lm, text, score_ids):
    """G-Eval eq. 1 from one full forward over ``text`` (no cache), the softmax over the score tokens in float64."""
    logits = np.asarray(lm.model(np.asarray([ids(text)], np.int32)), np.float64)[0, -1]
    z = np.exp(logits[score_ids] - logits[score_ids].max())
    return float((z / z.sum()) @ np.arange(1, 6))


def quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


@pytest.mark.parametrize("context", [LONG, MIXED], ids=["all-cut", "mixed"])
def test_geval_score_of_a_candidate_does_not_depend_on_the_others(lm, context):
    judge = GEvalJudge(lm, TPL, steps=STEPS, max_length=WINDOW, batch_size=2, min_label_mass=0.0)
    cuts = [own_cut(geval_text, context, c, WINDOW, 1) for c in CANDS]
    assert len(set(cuts)) > 2 and min(cuts) < len(context)           # the candidates need different cuts
    if context is MIXED:
        assert len(context) in cuts                                    # some prompts keep the whole context
    over = [len(ids(geval_text(context, c))) + 1 - WINDOW for c in CANDS]
    cut = [o for o in over if o > 0]
    with pytest.warns(UserWarning, match=rf"cut by up to {max(cut)} tokens in {len(cut)} of {len(CANDS)} prompts"):
        together = judge.score(context, CANDS)
    assert together.truncated
    rev = quiet(judge.score, context, CANDS[::-1])
    sub = quiet(judge.score, context, CANDS[2:])
    np.testing.assert_allclose(rev.scores[::-1], together.scores, rtol=0, atol=1e-5)
    np.testing.assert_allclose(sub.scores, together.scores[2:], rtol=0, atol=1e-5)
    for c, k in zip(CANDS, cuts):
        text = geval_text(context[:k], c)
        alone = quiet(GEvalJudge(lm, TPL, steps=STEPS, max_length=WINDOW, min_label_mass=0.0).score, context, [c])
        np.testing.assert_allclose(alone.scores[0], together.scores[CANDS.index(c)], rtol=0, atol=1e-5)
        assert judge.prompt_text(context, c) == text == judge.prompt_text(context, c, scored_with=CANDS)
        p, s = judge.token_ids(context, c, scored_with=CANDS)
        assert p + s == ids(text)
        ref = reference_score(lm, text, judge.score_token_ids)
        np.testing.assert_allclose(together.scores[CANDS.index(c)], ref, rtol=0, atol=1e-4)
    assert np.ptp(together.scores) > 1e-3                                # the candidates' scores differ


def test_pairwise_view_does_not_depend_on_the_others(lm):
    """``compare`` reads the scores: a pair's ``p`` is the same whether its two candidates are scored alone."""
    judge = GEvalJudge(lm, TPL, steps=STEPS, max_length=WINDOW, min_label_mass=0.0)
    both = quiet(judge.compare, LONG, CANDS, [0, 3], [3, 0])
    pair = quiet(GEvalJudge(lm, TPL, steps=STEPS, max_length=WINDOW, min_label_mass=0.0).compare, LONG,
                 [CANDS[0], CANDS[3]], [0, 1], [1, 0])
    np.testing.assert_allclose(both.p, pair.p, rtol=0, atol=1e-5)


def generated_rows(monkeypatch):
    """The prompts the sampling judges hand to ``generate_texts`` (one row per sample), recorded."""
    import jaxrank.judges.prompt_scoring as ps
    seen, real = [], ps.generate_texts
    monkeypatch.setattr(ps, "generate_texts", lambda lm, rows, **kw: seen.append([list(r) for r in rows])
                        or real(lm, rows, **kw))
    return seen


def check_sampling_judge(monkeypatch, make, fill, window, extra, samples):
    seen = generated_rows(monkeypatch)
    together = quiet(make().score, LONG, CANDS)
    assert together.truncated and len(seen) == 1
    cuts = []
    for r, c in enumerate(CANDS):
        k = own_cut(fill, LONG, c, window, extra)
        cuts.append(k)
        assert seen[0][r * samples] == ids(fill(LONG[:k], c))           # the candidate's own prompt
        alone = quiet(make().score, LONG, [c])
        assert seen[-1] == [ids(fill(LONG[:k], c))] * samples
        assert alone.texts[0] == together.texts[r] and alone.scores[0] == together.scores[r]
        p, s = make().token_ids(LONG, c, scored_with=CANDS)
        assert p + s == ids(fill(LONG[:k], c))
    assert len(set(cuts)) > 2


def test_prompt_scoring_samples_from_each_candidates_own_prompt(lm, monkeypatch):
    kw = dict(aspect="coherence", num_samples=3, max_new_tokens=5, seed=3, max_length=260)
    check_sampling_judge(monkeypatch, lambda: PromptScoringJudge(lm, **kw), scoring_text, 260, 5, 3)


def test_sampled_geval_samples_from_each_candidates_own_prompt(lm, monkeypatch):
    kw = dict(steps=STEPS, num_samples=2, max_new_tokens=3, seed=5, max_length=WINDOW, min_label_mass=0.0)
    check_sampling_judge(monkeypatch, lambda: SampledGEvalJudge(lm, TPL, **kw), geval_text, WINDOW, 3, 2)


def test_no_cut_reads_one_context_cache(lm, monkeypatch):
    """Prompts that fit keep the whole context and share one prefix: one cache, as before the fix."""
    judge = GEvalJudge(lm, TPL, steps=STEPS, max_length=WINDOW, min_label_mass=0.0)
    seen = []
    real = GEvalJudge._read_prefix
    monkeypatch.setattr(GEvalJudge, "_read_prefix", lambda self, p, s: seen.append(len(s)) or real(self, p, s))
    short = "Rain."
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = judge.score(short, CANDS)
    assert not res.truncated and seen == [len(CANDS)]
    for c, got in zip(CANDS, res.scores):
        ref = reference_score(lm, geval_text(short, c), judge.score_token_ids)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4)
