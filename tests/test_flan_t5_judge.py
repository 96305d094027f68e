"""FlanT5 as the LCA paper ran it, end to end: a PromptJudge over a T5 v1.1 (FLAN-T5) network against transformers.

LCA (Liusie et al., 2024, §4) prompts FlanT5 with the comparative template and
reads ``P(A better)`` from the decoder's first step: the softmax over the
vocabulary at the label tokens ``A`` and ``B``, normalised over the two
(METHODS.md, the prompt classifier ``p = P(A) / (P(A) + P(B))``). No FlanT5
weights ship on the package index, so the networks here are tiny random
FLAN-T5-shaped ones (gated-gelu, untied head) built by transformers; the
reference is PyTorch's forward on the same token ids, computed in this file.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.numpy import load_file  # noqa: E402

from jaxrank.judges import PromptJudge, pairwise_template  # noqa: E402
from jaxrank.models import t5  # noqa: E402
from jaxrank.models.loading import LoadedModel  # noqa: E402

from tiny_lm import EOS, OFFSET, PAD, ByteTokenizer  # noqa: E402

V = 256 + OFFSET
CTX = "The cat sat on the mat. It was warm, so it stayed there all afternoon."
CANDS = ["A cat sat on a mat.", "It was warm.", "The cat stayed on the warm mat all afternoon.", "Mats."]


@pytest.fixture(scope="module")
def flan(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.T5Config(vocab_size=V, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=2,
                                num_heads=4, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                                decoder_start_token_id=PAD, pad_token_id=PAD, eos_token_id=EOS, dropout_rate=0.0)
    m = transformers.T5ForConditionalGeneration(cfg).eval()
    with torch.no_grad():     # weights far from their init, so the first step's distribution is not flat
        for n, p in m.named_parameters():
            if n.endswith("layer_norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif "relative_attention_bias" in n:
                p.copy_(torch.randn_like(p))
            else:
                p.mul_(1.5)
    d = tmp_path_factory.mktemp("flan") / "tiny-flan-t5"
    m.save_pretrained(d)
    jcfg = t5.T5Config.from_hf(json.loads((d / "config.json").read_text()))
    net = t5.load_state_dict(jcfg, load_file(str(d / "model.safetensors")))
    lm = LoadedModel(net, jcfg, ByteTokenizer(), None, "tiny-flan-t5", "t5", d, (EOS,), PAD)
    return m, lm


def _torch_p(m, judge, i, j):
    """p(A) from PyTorch's first decoder step on the prompt's bytes + ``</s>`` (the judge's ids, rebuilt here)."""
    ps, mass, lps = [], [], []
    a_id, b_id = (OFFSET + ord(w) for w in judge.template.labels)
    for a, b in zip(i, j):
        ids = [c + OFFSET for c in judge.prompt_text(CTX, CANDS[a], CANDS[b]).encode()] + [EOS]
        with torch.no_grad():
            logits = m(input_ids=torch.tensor([ids]), decoder_input_ids=torch.tensor([[PAD]])).logits[0, 0]
        logp = torch.log_softmax(logits.double(), -1).numpy()
        ps.append(1.0 / (1.0 + np.exp(logp[b_id] - logp[a_id])))
        mass.append(np.exp(logp[a_id]) + np.exp(logp[b_id]))
        lps.append([logp[a_id], logp[b_id]])
    return np.array(ps), np.array(mass), np.array(lps)


@pytest.mark.parametrize("template", [pairwise_template("summeval", "coherence"),
                                      pairwise_template("summeval", "coherence", style="zepo")],
                         ids=["poe", "zepo"])
def test_flan_t5_judge_matches_torch_first_step(flan, template):
    m, lm = flan
    judge = PromptJudge(lm, template, batch_size=3, min_label_mass=0.0)
    assert not judge.decoder
    i, j = np.array([0, 1, 2, 3, 0, 2]), np.array([1, 0, 3, 2, 2, 0])   # both orders; 6 rows in batches of 3
    out = judge.compare(CTX, CANDS, i, j)
    ref_p, ref_mass, ref_logp = _torch_p(m, judge, i, j)
    np.testing.assert_allclose(out.logits, ref_logp, atol=1e-4)
    np.testing.assert_allclose(out.p, ref_p, atol=2e-5)
    np.testing.assert_allclose(out.label_mass, ref_mass, rtol=1e-4, atol=1e-7)
    log_odds = ref_logp[:, 0] - ref_logp[:, 1]
    assert np.ptp(log_odds) > 0.1 and 0.01 < ref_p.min() and ref_p.max() < 0.99   # a check p could fail


def test_flan_t5_top_tokens_are_torch_argmax(flan):
    m, lm = flan
    judge = PromptJudge(lm, pairwise_template("summeval", "coherence"), min_label_mass=0.0)
    out = judge.compare(CTX, CANDS, [0, 3], [1, 0])
    for r, (a, b) in enumerate([(0, 1), (3, 0)]):
        ids = [c + OFFSET for c in judge.prompt_text(CTX, CANDS[a], CANDS[b]).encode()] + [EOS]
        with torch.no_grad():
            logits = m(input_ids=torch.tensor([ids]), decoder_input_ids=torch.tensor([[PAD]])).logits[0, 0]
        probs = torch.softmax(logits.double(), -1).numpy()
        assert int(out.top_ids[r, 0]) == int(np.argmax(probs))
        np.testing.assert_allclose(out.top_probs[r, 0], probs.max(), rtol=1e-4)
