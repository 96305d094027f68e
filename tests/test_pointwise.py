"""Pointwise judges (jaxrank.judges.pointwise): G-Eval, prompt scoring, scores -> comparisons.

Logic tests run a tiny random-weight Llama with a byte tokenizer (tests/tiny_lm.py);
one smoke test runs the real SmolLM2-135M when its package is installed.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from tiny_lm import EOS, OFFSET, ByteTokenizer, sharpen, tiny_lm

from jaxrank.judges import textgen
from jaxrank.models.loading import LoadedModel
from jaxrank.models.llama import GenerateOutput
from jaxrank.judges.pointwise import DEFAULT_STEP_TOKENS, GEvalJudge, PointwiseResult, pointwise_comparisons
from jaxrank.judges.prompt_scoring import FALLBACK_SCORE, PromptScoringJudge, parse_score
from jaxrank.judges.prompts import PointwiseTemplate, pointwise_template

CTX = "The council voted to close the old bridge. Repairs start in May and last a year."
CANDS = ["The bridge closes for repairs.", "Council votes; bridge shut until next May.", "Bridge.",
         "A vote was held about a bridge and some repairs that will take a year."]
STEPS = "1. Read the text.\n2. Read the summary.\n3. Give a score."



@pytest.fixture(scope="module")
def lm():
    return sharpen(tiny_lm(seed=1))


def _reference_score(lm, text, score_ids, scores, bos=True):
    """Eq. 1 from a full forward over the whole prompt (no cache), full-vocabulary softmax in NumPy."""
    ids = np.asarray(ByteTokenizer()(text, add_special_tokens=bos)["input_ids"], np.int32)[None]
    logits = np.asarray(lm.model(ids), np.float64)[0, -1]
    logp = logits - logits.max()
    logp = logp - np.log(np.exp(logp).sum())
    p = np.exp(logp[score_ids])
    p = p / p.sum()
    return float(p @ scores), p


def test_geval_equals_full_forward_reference(lm):
    tpl = pointwise_template("coherence")
    judge = GEvalJudge(lm, tpl, steps=STEPS, batch_size=3)     # 4 candidates: batches of 3 and 1
    # " 1".." 5": the shared space is appended to the prompt, the digits are read.
    np.testing.assert_array_equal(judge.score_token_ids, [ord(str(s)) + OFFSET for s in range(1, 6)])
    res = judge.score(CTX, CANDS)
    assert isinstance(res, PointwiseResult) and not res.truncated
    assert res.scores.shape == (4,) and res.probs.shape == (4, 5)
    np.testing.assert_allclose(res.probs.sum(1), 1, atol=1e-6)
    assert np.all((res.scores >= 1) & (res.scores <= 5))
    for c, s, pr in zip(CANDS, res.scores, res.probs):
        text = (tpl.text.replace("{criteria}", tpl.criteria).replace("{steps}", STEPS)
                .replace("{context}", CTX).replace("{candidate}", c)) + " "
        assert judge.prompt_text(CTX, c) == text
        ref, ref_p = _reference_score(lm, text, judge.score_token_ids, np.arange(1, 6))
        assert abs(s - ref) < 1e-4
        np.testing.assert_allclose(pr, ref_p, atol=1e-4)
    assert np.ptp(res.probs) > 0.05                          # not a trivially uniform distribution
    # pairwise view
    jd = judge.compare(CTX, CANDS, [0, 1, 2], [1, 0, 3], scale=2.0)
    np.testing.assert_allclose(jd.p, 1 / (1 + np.exp(-2.0 * (res.scores[[0, 1, 2]] - res.scores[[1, 0, 3]]))),
                               atol=1e-6)


def test_geval_chat_template_reads_after_assistant_header():
    lm = sharpen(tiny_lm(seed=2, chat=True))
    tpl = pointwise_template("fluency")
    judge = GEvalJudge(lm, tpl, steps=STEPS, batch_size=4)
    text = judge.prompt_text(CTX, CANDS[0])
    assert text.startswith("<user>You will be given") and text.endswith("<assistant> ")
    res = judge.score(CTX, CANDS[:3])                         # 3 rows padded to 4 with a copy
    for c, s in zip(CANDS[:3], res.scores):           # a chat prompt has no BOS of its own
        ref, _ = _reference_score(lm, judge.prompt_text(CTX, c), judge.score_token_ids, np.arange(1, 6), bos=False)
        assert abs(s - ref) < 1e-4


def test_steps_generated_once_and_reused(lm, monkeypatch):
    calls = []
    real = textgen.generate

    def counting(*a, **kw):
        calls.append(kw)
        return real(*a, **kw)

    monkeypatch.setattr(textgen, "generate", counting)
    judge = GEvalJudge(lm, pointwise_template("coherence"), max_step_tokens=6)
    assert not calls                                        # lazy: nothing generated yet
    r1 = judge.score(CTX, CANDS[:2])
    r2 = judge.score("Another article entirely.", CANDS[2:])
    assert len(calls) == 1 and judge.step_generations == 1
    assert calls[0]["temperature"] == 0.0 and calls[0]["max_new_tokens"] == 6   # greedy auto-CoT
    steps = judge.steps
    assert isinstance(steps, str) and steps in judge.prompt_text(CTX, "x")
    assert np.all((r1.scores >= 1) & (r1.scores <= 5)) and np.all((r2.scores >= 1) & (r2.scores <= 5))
    # user-supplied steps: no generation at all
    given = GEvalJudge(lm, pointwise_template("coherence"), steps=STEPS)
    given.score(CTX, CANDS[:1])
    assert len(calls) == 1 and given.steps == STEPS


def test_geval_without_chain_of_thought_never_generates_steps(lm, monkeypatch):
    calls = []
    monkeypatch.setattr(textgen, "generate", lambda *a, **kw: calls.append(kw))
    tpl = pointwise_template("coherence", chain_of_thought=False)
    assert "{steps}" not in tpl.text and "Evaluation Steps" not in tpl.text and tpl.name.endswith("-nocot")
    assert tpl.key != pointwise_template("coherence").key
    judge = GEvalJudge(lm, tpl, batch_size=3)
    res = judge.score(CTX, CANDS)
    assert not calls and judge.step_generations == 0
    for c, s in zip(CANDS, res.scores):      # the prompt is the template with only criteria, context, candidate
        text = tpl.text.replace("{criteria}", tpl.criteria).replace("{context}", CTX).replace("{candidate}", c) + " "
        assert judge.prompt_text(CTX, c) == text
        ref, _ = _reference_score(lm, text, judge.score_token_ids, np.arange(1, 6))
        assert abs(s - ref) < 1e-4
    with pytest.raises(ValueError, match="chain_of_thought"):
        pointwise_template("coherence", chain_of_thought="no")


def test_geval_truncates_context_and_validates(lm):
    small = tiny_lm(seed=1, max_len=700)
    judge = GEvalJudge(small, pointwise_template("coherence"), steps=STEPS)
    with pytest.warns(UserWarning, match="context was cut"):
        res = judge.score(CTX * 10, CANDS[:2])
    assert res.truncated and np.all(np.isfinite(res.scores))
    with pytest.raises(ValueError, match="do not fit"):
        judge.score(CTX, ["x" * 2000])
    with pytest.raises(ValueError, match="empty"):
        judge.score(CTX, ["fine", "  "])
    empty = judge.score(CTX, [])
    assert empty.scores.shape == (0,) and empty.probs.shape == (0, 5)
    with pytest.raises(ValueError, match="outside"):
        judge.compare(CTX, CANDS[:2], [0], [2])
    bert_like = LoadedModel(None, None, ByteTokenizer(), None, "enc", "bert", None)
    with pytest.raises(ValueError, match="not generative"):
        GEvalJudge(bert_like, pointwise_template("coherence"))


def _random_t5():
    from jaxrank.models.t5 import T5Config, T5ForConditionalGeneration

    cfg = T5Config(vocab_size=256 + OFFSET, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                   num_heads=4, eos_token_id=EOS)
    m = T5ForConditionalGeneration(cfg)
    rng = np.random.default_rng(0)
    for path, node in nnx.iter_graph(m):
        if isinstance(node, nnx.Param):
            shape = node.get_value().shape
            val = np.ones(shape) if "layer_norm" in ".".join(map(str, path)) else rng.normal(0, 0.5, shape)
            node.set_value(jnp.asarray(val, jnp.float32))
    return LoadedModel(m, cfg, ByteTokenizer(), None, "tiny-t5", "t5", None, (EOS,), 0)


def test_geval_t5_first_decoder_step():
    lm = _random_t5()
    short = PointwiseTemplate("{criteria}\n{steps}\nText: {context}\nSummary: {candidate}\nScore:",
                              "Write the steps.", "Coherence (1-5).")
    judge = GEvalJudge(lm, short, steps="Read; score.", batch_size=2)
    np.testing.assert_array_equal(judge.score_token_ids, [ord(str(s)) + OFFSET for s in range(1, 6)])
    cands = ["Short.", "Text, short."]
    res = judge.score("Short text.", cands)
    rows = [ByteTokenizer()(judge.prompt_text("Short text.", c), add_special_tokens=False)["input_ids"] + [EOS]
            for c in cands]
    ids = np.zeros((2, max(map(len, rows))), np.int32)
    for r, x in enumerate(rows):
        ids[r, :len(x)] = x
    mask = jnp.asarray(ids > 0, jnp.int32)
    full = np.asarray(nnx.jit(lambda m, a, b: m(a, b, jnp.zeros((2, 1), jnp.int32)))(lm.model, jnp.asarray(ids), mask),
                      np.float64)[:, 0]                   # full vocabulary, one decoder step, no token slicing
    for s, f in zip(res.scores, full):
        p = np.exp(f - f.max())
        p = p[judge.score_token_ids] / p[judge.score_token_ids].sum()
        assert abs(s - p @ np.arange(1, 6)) < 1e-4
    with pytest.raises(NotImplementedError, match="t5"):
        PromptScoringJudge(lm, aspect="coherence", temperature=1.0)


@pytest.mark.parametrize("text, expected", [
    ("7", 7.0), ("Score: 8/10", 8.0), ("ten", 10.0), ("Ten out of ten", 10.0), ("", None), ("11", None),
    ("0", None), ("-3", None), ("11, I mean 9", 9.0), ("7.5", 7.5), ("score 10", 10.0),
    ("I would say six.", 6.0), ("no idea", None), ("1", 1.0), ("3rd", 3.0)])
def test_parse_score(text, expected):
    assert parse_score(text) == expected


def test_prompt_scoring_parses_batched_generations(lm, monkeypatch):
    answers = ["7", "Score: 8/10", "ten", "", "11", "4"]
    seen = []

    def fake_generate(model, ids, mask, *, max_new_tokens, temperature, top_p, rng, eos_id, pad_id):
        seen.append((ids.shape, max_new_tokens, temperature))
        start = sum(s[0][0] for s in seen[:-1])
        toks = np.full((ids.shape[0], max_new_tokens), pad_id, np.int32)
        lens = np.zeros(ids.shape[0], np.int32)
        for r in range(ids.shape[0]):
            t = [b + OFFSET for b in answers[(start + r) % len(answers)].encode()][:max_new_tokens - 1] + [EOS]
            toks[r, :len(t)], lens[r] = t, len(t)
        assert np.all(mask[:, -1])                          # left-padded prompts
        return GenerateOutput(jnp.asarray(toks), jnp.asarray(lens))

    monkeypatch.setattr(textgen, "generate", fake_generate)
    judge = PromptScoringJudge(lm, aspect="coherence", num_samples=2, batch_size=2, max_new_tokens=16)
    res = judge.score(CTX, CANDS[:3])                       # 6 answers: one generate call of 2 x 2 rows, one of 2
    assert [x[0][0] for x in seen] == [4, 2] and seen[0][1:] == (16, 1.0)
    assert res.texts == (("7", "Score: 8/10"), ("ten", ""), ("11", "4"))
    np.testing.assert_allclose(res.scores, [7.5, (10 + FALLBACK_SCORE) / 2, (FALLBACK_SCORE + 4) / 2])
    assert res.failures == 2 and res.probs is None
    assert judge.prompt_text(CTX, "S").endswith("Answer with the score only.\n\nScore:")


def test_prompt_scoring_real_generation_is_seeded(lm):
    a = PromptScoringJudge(lm, aspect="coherence", num_samples=3, seed=5).score(CTX, CANDS[:2])
    b = PromptScoringJudge(lm, aspect="coherence", num_samples=3, seed=5).score(CTX, CANDS[:2])
    assert a.texts == b.texts and np.array_equal(a.scores, b.scores)
    assert np.all((a.scores >= 1) & (a.scores <= 10))


def test_pointwise_comparisons():
    s = np.array([1.0, 2.5, 4.0])
    p = pointwise_comparisons(s, [0, 1, 2, 1], [1, 0, 0, 1])
    np.testing.assert_allclose(p, 1 / (1 + np.exp(-(s[[0, 1, 2, 1]] - s[[1, 0, 0, 1]]))), atol=1e-7)
    assert p[3] == 0.5 and abs(p[0] + p[1] - 1) < 1e-7
    assert pointwise_comparisons(PointwiseResult(s, None, False), [2], [0], scale=10.0)[0] > 0.9999
    assert np.all(np.isfinite(pointwise_comparisons([0.0, 1e4], [0, 1], [1, 0])))
    with pytest.raises(ValueError, match="scale"):
        pointwise_comparisons(s, [0], [1], scale=0)
    with pytest.raises(ValueError, match="outside"):
        pointwise_comparisons(s, [0], [3])


def test_real_smollm2_geval_smoke(smollm2):
    judge = GEvalJudge(smollm2, pointwise_template("coherence"), max_step_tokens=24)
    res = judge.score("A storm hit the coast on Monday, cutting power to 10,000 homes.",
                      ["A storm cut power to 10,000 homes.", "homes monday the storm power coast"])
    assert judge.step_generations == 1 and judge.steps
    assert np.all(np.isfinite(res.scores)) and np.all((res.scores >= 1) & (res.scores <= 5))
    assert judge.name == "smollm2-135m"


def test_geval_key_names_what_changes_the_scores(lm):
    """The store key (review of 11-27, defect 3): the defaults keep the template's key (the stored G-Eval results'),
    and given steps, the system message and the length of generated steps each change it and the scores; generated
    steps leave it as it was before they were written."""
    tpl = pointwise_template("coherence")
    auto = GEvalJudge(lm, tpl, max_step_tokens=DEFAULT_STEP_TOKENS)
    assert auto.template_key == tpl.key
    short = GEvalJudge(lm, tpl, max_step_tokens=6)
    before = short.template_key
    short.score(CTX, CANDS[:1])
    assert short.step_generations == 1 and short.template_key == before != tpl.key
    a, b = GEvalJudge(lm, tpl, steps=STEPS), GEvalJudge(lm, tpl, steps="1. Count the typos.")
    sa, sb = a.score(CTX, CANDS[:2]).scores, b.score(CTX, CANDS[:2]).scores
    assert not np.allclose(sa, sb) and a.template_key != b.template_key
    assert GEvalJudge(lm, tpl, steps=STEPS, system="Be strict.").template_key != a.template_key
    a.steps = "1. Count the typos."
    assert a.template_key == b.template_key
