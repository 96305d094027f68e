"""G-Eval with sampling (jaxrank.judges.geval_sampling.SampledGEvalJudge): the mean of n sampled scores.

* With one-token answers at temperature 1, the sample mean estimates g-eval eq. 1 (checked against a full
  forward of the prompt text in NumPy, within a 4-sigma CLT bound), the score frequencies the renormalised
  score-token probabilities and the parsed share the score tokens' mass.
* Parsing, the fallback, the scale's middle and the result's fields against hand-computed values (fake answers).
* Samples do not depend on the batch size or the candidates' order (per-row keys).
* The store key differs from GEvalJudge's and changes with each sampling setting; settings are read-only.
* Bad settings are ValueErrors naming the argument.
"""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from tiny_lm import EOS, OFFSET, ByteTokenizer, sharpen, tiny_lm

from jaxrank.judges import textgen
from jaxrank.judges.geval_sampling import SampledGEvalJudge
from jaxrank.judges.pointwise import GEvalJudge
from jaxrank.judges.prompts import PointwiseTemplate
from jaxrank.judges.reading import LabelMassWarning
from jaxrank.models.llama import GenerateOutput
from jaxrank.models.loading import LoadedModel

CTX = "The council voted to close the old bridge."
CANDS = ["The bridge closes.", "Bridge shut.", "A vote on a bridge."]
TPL = PointwiseTemplate("{criteria}\n{steps}\nText: {context}\nSummary: {candidate}\n- Coherence:",
                        "Write the steps.", "Coherence (1-5).", name="short")
STEPS = "Read; score."
SCORE_IDS = [ord(str(s)) + OFFSET for s in range(1, 6)]


@pytest.fixture(scope="module")
def lm():
    return tiny_lm(seed=3)


def _reference(model, text):
    """Eq. 1 from a full forward of the whole prompt text (no cache): ``(E[s], P(s) renormalised, mass)``."""
    ids = np.asarray(ByteTokenizer()(text, add_special_tokens=True)["input_ids"], np.int32)[None]
    logits = np.asarray(model(ids), np.float64)[0, -1]
    e = np.exp(logits - logits.max())
    full = e / e.sum()
    p = full[SCORE_IDS] / full[SCORE_IDS].sum()
    return float(p @ np.arange(1, 6)), p, float(full[SCORE_IDS].sum())


def _score_heavy_lm(judge_texts):
    """A tiny model whose next token after the prompts is mostly a score token, the five spread apart: the
    other tokens' output rows are zero (logit 0) and the score rows move towards the prompts' last hidden state."""
    lm = sharpen(tiny_lm(seed=4), 4.0)
    x = np.stack([np.asarray(lm.model.hidden(jnp.asarray(ByteTokenizer()(t)["input_ids"], jnp.int32)[None]))[0, -1]
                  for t in judge_texts])
    x_hat = (x / np.linalg.norm(x, axis=1, keepdims=True)).mean(0)
    w = np.asarray(lm.model.lm_head.get_value(), np.float64)
    keep = np.zeros(len(w), bool)
    keep[SCORE_IDS] = True
    w = np.where(keep[:, None], w + x_hat / np.linalg.norm(x_hat), 0.0)
    lm.model.lm_head.set_value(jnp.asarray(w, jnp.float32))
    return lm


def test_one_token_samples_estimate_eq1():
    """n one-token samples at temperature 1: mean, frequencies and parsed share within 4 sigma of eq. 1's."""
    probe = GEvalJudge(tiny_lm(seed=4), TPL, steps=STEPS)
    lm = _score_heavy_lm([probe.prompt_text(CTX, c) for c in CANDS[:2]])
    n = 2000
    judge = SampledGEvalJudge(lm, TPL, steps=STEPS, num_samples=n, max_new_tokens=1, batch_size=1, seed=1)
    assert judge.prompt_text(CTX, CANDS[0]) == probe.prompt_text(CTX, CANDS[0])    # G-Eval's prompt (lead " ")
    assert judge.prompt_text(CTX, CANDS[0]).endswith("- Coherence: ")
    res = judge.score(CTX, CANDS[:2])
    assert res.probs.shape == (2, 5) and len(res.texts) == 2 and all(len(t) == n for t in res.texts)
    for c, s, freq, share, texts in zip(CANDS[:2], res.scores, res.probs, res.label_mass, res.texts):
        ref, p, mass = _reference(lm.model, judge.prompt_text(CTX, c))
        assert 0.5 < mass < 0.99 and p.min() > 0.03 and p.max() < 0.8     # a spread, mostly-score answer
        n_ok = sum(t in "12345" and t != "" for t in texts)
        assert abs(share - n_ok / n) < 1e-6
        assert abs(share - mass) < 4 * np.sqrt(mass * (1 - mass) / n)
        var = p @ (np.arange(1, 6) - ref) ** 2
        assert abs(s - ref) < 4 * np.sqrt(var / n_ok)
        assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / n_ok))
        assert abs(s - freq @ np.arange(1, 6)) < 1e-9        # every parsed answer is on the scale
    assert res.failures == sum(t not in "12345" or t == "" for ts in res.texts for t in ts)


def _fake_generate(answers, seen):
    def fake(model, ids, mask, *, max_new_tokens, temperature, top_p, rng, eos_id, pad_id):
        seen.append((ids.shape[0], max_new_tokens, temperature, top_p))
        start = sum(s[0] for s in seen[:-1])
        toks = np.full((ids.shape[0], max_new_tokens), pad_id, np.int32)
        lens = np.zeros(ids.shape[0], np.int32)
        for r in range(ids.shape[0]):
            t = [b + OFFSET for b in answers[(start + r) % len(answers)].encode()][:max_new_tokens - 1] + [EOS]
            toks[r, :len(t)], lens[r] = t, len(t)
        return GenerateOutput(jnp.asarray(toks), jnp.asarray(lens))
    return fake


def test_parsing_mean_and_fallback(lm, monkeypatch):
    answers = ["4", "Score: 2", "five", "", "9", "none", "3.5", "1 or 2"]     # 3 candidates x 4 samples, cycled
    seen = []
    monkeypatch.setattr(textgen, "generate", _fake_generate(answers, seen))
    kw = dict(steps=STEPS, num_samples=4, batch_size=2, max_new_tokens=10, temperature=0.7, top_p=0.9,
              min_label_mass=0.0)
    res = SampledGEvalJudge(lm, TPL, **kw).score(CTX, CANDS)
    assert [s[0] for s in seen] == [8, 4] and seen[0][1:] == (10, 0.7, 0.9)     # 2 x 4 rows, then 1 x 4
    assert res.texts == (("4", "Score: 2", "five", ""), ("9", "none", "3.5", "1 or 2"),
                         ("4", "Score: 2", "five", ""))
    # parsed: [4, 2, 5, -], [-, -, 3.5, 1], [4, 2, 5, -]; fallback None leaves the failures out
    np.testing.assert_allclose(res.scores, [11 / 3, 4.5 / 2, 11 / 3])
    np.testing.assert_allclose(res.probs, [[0, 1 / 3, 0, 1 / 3, 1 / 3], [1 / 2, 0, 0, 0, 0],
                                           [0, 1 / 3, 0, 1 / 3, 1 / 3]])     # 3.5 is off the scale
    np.testing.assert_allclose(res.label_mass, [0.75, 0.5, 0.75])
    assert res.failures == 4 and not res.truncated
    seen.clear()
    res = SampledGEvalJudge(lm, TPL, fallback=2.0, **kw).score(CTX, CANDS[:2])
    np.testing.assert_allclose(res.scores, [13 / 4, 8.5 / 4])
    assert res.failures == 3
    # no parsable answer: the scale's middle, every answer a failure; a low parsed share warns once
    monkeypatch.setattr(textgen, "generate", _fake_generate(["no", "idea"], []))
    judge = SampledGEvalJudge(lm, TPL, **{**kw, "min_label_mass": 0.5})
    with pytest.warns(LabelMassWarning, match="sampled answers"):
        res = judge.score(CTX, CANDS[:2])
    np.testing.assert_allclose(res.scores, [3.0, 3.0])
    assert res.failures == 8 and np.all(res.probs == 0) and np.all(res.label_mass == 0)
    # a custom parser; an empty candidate list
    parser = lambda t: 5.0 if t == "no" else None          # noqa: E731
    res = SampledGEvalJudge(lm, TPL, parser=parser, **kw).score(CTX, CANDS[:1])
    assert res.scores[0] == 5.0 and res.failures == 2 and res.probs[0, 4] == 1.0
    empty = SampledGEvalJudge(lm, TPL, **kw).score(CTX, [])
    assert empty.scores.shape == (0,) and empty.probs.shape == (0, 5)


def test_window_keeps_room_for_the_answer(lm):
    probe = GEvalJudge(lm, TPL, steps=STEPS, min_label_mass=0.0)
    n_tok = sum(map(len, probe.token_ids(CTX, CANDS[0])))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                     # G-Eval (one free token) fits whole
        fits = GEvalJudge(lm, TPL, steps=STEPS, max_length=n_tok + 1, min_label_mass=0.0)
        assert not fits.score(CTX, CANDS[:1]).truncated
    judge = SampledGEvalJudge(lm, TPL, steps=STEPS, max_length=n_tok + 1, max_new_tokens=6, num_samples=2,
                              min_label_mass=0.0)
    with pytest.warns(UserWarning, match="cut|trunc|shorten"):
        res = judge.score(CTX, CANDS[:1])
    assert res.truncated
    assert sum(map(len, judge.token_ids(CTX, CANDS[0]))) + 6 <= n_tok + 1


def test_samples_independent_of_batch_size_and_order(lm):
    kw = dict(steps=STEPS, num_samples=3, max_new_tokens=2, seed=7, min_label_mass=0.0)
    a = SampledGEvalJudge(lm, TPL, batch_size=1, **kw).score(CTX, CANDS)        # 3 calls of 3 rows
    b = SampledGEvalJudge(lm, TPL, batch_size=3, **kw).score(CTX, CANDS[::-1])  # one call of 9 rows
    assert a.texts == b.texts[::-1]
    np.testing.assert_array_equal(a.scores, b.scores[::-1])
    assert len({t for ts in a.texts for t in ts}) > 3                 # random answers, not one repeated text
    c = SampledGEvalJudge(lm, TPL, batch_size=1, **{**kw, "seed": 8}).score(CTX, CANDS)
    assert c.texts != a.texts


def test_key_differs_from_geval_and_names_each_setting(lm):
    base = SampledGEvalJudge(lm, TPL, steps=STEPS)
    geval = GEvalJudge(lm, TPL, steps=STEPS)
    assert base.template_key != geval.template_key and base.template_key.startswith(geval.template_key + "-")
    changed = [dict(num_samples=19), dict(temperature=0.5), dict(top_p=0.9), dict(max_new_tokens=4), dict(seed=1),
               dict(fallback=3.0), dict(parser=lambda t: 1.0), dict(steps="Other steps."), dict(system="Be strict.")]
    keys = {SampledGEvalJudge(lm, TPL, **{"steps": STEPS, **c}).template_key for c in changed}
    assert len(keys) == len(changed) and base.template_key not in keys
    assert SampledGEvalJudge(lm, TPL, steps=STEPS, batch_size=3).template_key == base.template_key
    scale = PointwiseTemplate(TPL.text, TPL.steps_request, TPL.criteria, scores=(1, 2, 3), name="short")
    assert SampledGEvalJudge(lm, scale, steps=STEPS).template_key != base.template_key   # another default parser
    for name in ("num_samples", "temperature", "top_p", "max_new_tokens", "seed", "fallback", "parser", "template"):
        with pytest.raises(AttributeError, match=name):
            setattr(base, name, getattr(base, name))


@pytest.mark.parametrize("kw, name", [
    (dict(num_samples=0), "num_samples"), (dict(num_samples=2.0), "num_samples"), (dict(temperature=-1), "temperature"),
    (dict(temperature=float("inf")), "temperature"), (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(seed=1.5), "seed"), (dict(fallback=float("nan")), "fallback"),
    (dict(fallback="3"), "fallback"), (dict(parser="3"), "parser"), (dict(batch_size=0), "batch_size")])
def test_bad_settings_name_the_argument(lm, kw, name):
    with pytest.raises(ValueError, match=name):
        SampledGEvalJudge(lm, TPL, steps=STEPS, **kw)


def test_t5_needs_greedy():
    """t5 decodes greedily only: temperature > 0 is refused (as PromptScoringJudge refuses it)."""
    from jaxrank.models.t5 import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=256 + OFFSET, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=1,
                   num_heads=4, eos_token_id=EOS)
    t5 = LoadedModel(T5ForConditionalGeneration(cfg), cfg, ByteTokenizer(), None, "tiny-t5", "t5", None, (EOS,), 0)
    with pytest.raises(NotImplementedError, match="t5"):
        SampledGEvalJudge(t5, TPL, steps=STEPS)
    assert SampledGEvalJudge(t5, TPL, steps=STEPS, temperature=0.0).temperature == 0.0
