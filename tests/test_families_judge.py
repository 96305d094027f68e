"""A PromptJudge runs unchanged on every model family (Gemma 2, Gemma 3, Qwen3, Phi-3, Mistral).

Tiny random models of each family (weights at std 0.2, norm gains away from one) behind SmolLM2's
tokenizer and chat template: the judge's cached path (one prefix cache per context, continuations
extended against it, label logits through ``logits_at``) gives finite ``p`` equal to an independent
reading: the whole prompt and each label tokenised as one text and run through the full forward. The
sliding windows (16 tokens) are far shorter than the prompts, so the cached path must mask them as the
full forward does.
"""

import dataclasses

import numpy as np
import pytest
from flax import nnx

from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import pairwise_template
from jaxrank.models.llama import LlamaConfig, LlamaModel

CTX = "The city council approved a new park on Monday. It will open next spring near the river."
CANDS = ["A park was approved by the council.", "The council met on Monday to talk.",
         "A new riverside park opens next spring."]
FAMILIES = {
    "gemma2": dict(query_pre_attn_scalar=12, attn_logit_softcapping=4.0, final_logit_softcapping=5.0),
    "gemma3_text": dict(layer_types=["sliding_attention", "full_attention"], rope_local_base_freq=100.0),
    "qwen3": dict(use_sliding_window=True, max_window_layers=1),
    "phi3": dict(partial_rotary_factor=0.5),
    "mistral": {},
}


def _tiny(smollm2, family):
    cfg = LlamaConfig.from_hf(dict(
        model_type=family, vocab_size=smollm2.config.vocab_size, hidden_size=32, intermediate_size=48,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=16,
        max_position_embeddings=4096, rope_theta=1e4, **FAMILIES[family]))
    model = LlamaModel(cfg, rngs=nnx.Rngs(5))
    rng = np.random.default_rng(0)
    for n, w in model.weights().items():
        var = getattr(model, n)
        var.set_value(np.asarray(w) * 10 if not n.endswith("norm") else
                      (1.0 - cfg.norm_offset + 0.3 * rng.standard_normal(w.shape)).astype(np.float32))
    return dataclasses.replace(smollm2, model=model, config=cfg, name=f"tiny-{family}", architecture=family)


def _full_forward_p(lm, judge, pairs):
    """``p`` of each pair from the whole text of prompt + label, all rows in one padded full forward."""
    special = judge.decoder and not judge.chat
    rows, spans = [], []
    for a, b in pairs:
        text = judge.prompt_text(CTX, CANDS[a], CANDS[b])
        lead = "" if text[-1].isspace() else " "
        base = list(lm.tokenizer(text, add_special_tokens=special)["input_ids"])
        for w in judge.template.labels:
            full = list(lm.tokenizer(text + lead + w, add_special_tokens=special)["input_ids"])
            assert full[:len(base)] == base
            rows.append(full)
            spans.append((len(base), len(full)))
    n = max(map(len, rows))
    ids = np.zeros((len(rows), n), np.int32)
    mask = np.zeros((len(rows), n), bool)
    for r, full in enumerate(rows):
        ids[r, :len(full)], mask[r, :len(full)] = full, True     # right padding: earlier positions unchanged
    logits = np.asarray(lm.model(ids, mask)).astype(np.float64)
    lp = logits - logits.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    label_lp = np.array([sum(lp[r, t - 1, ids[r, t]] for t in range(s, e)) for r, (s, e) in enumerate(spans)])
    la, lb = label_lp[0::2], label_lp[1::2]
    return 1.0 / (1.0 + np.exp(lb - la)), min(s for s, _ in spans)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_prompt_judge_cached_equals_full_forward(smollm2, family):
    lm = _tiny(smollm2, family)
    assert lm.config.sliding_windows is not None and lm.config.model_type == family
    judge = PromptJudge(lm, pairwise_template("summeval", "coherence"), batch_size=8)
    i, j = np.array([0, 1, 2, 1]), np.array([1, 0, 0, 2])
    res = judge.compare(CTX, CANDS, i, j)
    assert res.p.shape == (4,) and np.isfinite(res.p).all() and not res.truncated
    ref, shortest = _full_forward_p(lm, judge, list(zip(i, j)))
    assert shortest > 4 * 16                              # the windows are far shorter than the prompts
    np.testing.assert_allclose(res.p, ref, atol=1e-5)
    assert np.ptp(res.p) > 1e-3                           # the pairs are told apart: p is not constant


def test_every_decoder_family_is_a_generative_judge_model(smollm2):
    """A checkpoint of each family, as load_model names it (its model_type), makes a prompt and a G-Eval judge."""
    from jaxrank.judges.pointwise import GEvalJudge
    from jaxrank.judges.prompts import pointwise_template
    from jaxrank.models.loading import ARCHITECTURES, GENERATIVE

    assert set(GENERATIVE) == {k for k in ARCHITECTURES if k != "bert"}
    for family in FAMILIES:
        lm = _tiny(smollm2, family)
        assert lm.architecture == family
        PromptJudge(lm, pairwise_template("summeval", "coherence"))
        GEvalJudge(lm, pointwise_template("coherence"))
