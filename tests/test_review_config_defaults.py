"""``LlamaConfig.from_hf`` on a minimal ``config.json`` (the sizes and ``model_type`` only) reads the keys it
lacks as transformers' own config classes do (their class defaults), for every family; and a minimal Gemma 2
folder gives transformers' logits (its soft-caps 50 / 30 act)."""

import json

import numpy as np
import pytest

from jaxrank.models.llama import LlamaConfig
from jaxrank.models.loading import load_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SIZES = dict(vocab_size=101, hidden_size=512, intermediate_size=96, num_hidden_layers=7, num_attention_heads=32)
CLASSES = {"llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config",
           "phi3": "Phi3Config", "gemma2": "Gemma2Config", "gemma3_text": "Gemma3TextConfig"}


def _rope(hf, kind="full_attention"):
    rp = hf.rope_parameters or {}
    return rp.get(kind, rp) if kind in rp else rp


@pytest.mark.parametrize("mt", list(CLASSES))
def test_minimal_config_reads_as_transformers_class_defaults(mt):
    hf = getattr(transformers, CLASSES[mt])(**SIZES)
    j = LlamaConfig.from_hf({**SIZES, "model_type": mt})
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
    assert j.head_dim == head_dim
    assert j.num_key_value_heads == hf.num_key_value_heads
    assert j.rms_norm_eps == hf.rms_norm_eps
    assert j.rope_theta == _rope(hf)["rope_theta"]
    assert j.tie_word_embeddings == hf.tie_word_embeddings
    assert j.max_position_embeddings == hf.max_position_embeddings
    assert j.attn_softcap == getattr(hf, "attn_logit_softcapping", None)
    assert j.final_softcap == getattr(hf, "final_logit_softcapping", None)
    # the per-layer windows transformers' modelling applies: layer_types where the class has them, else one
    # window for every layer (Mistral; Phi-3's default is none)
    sw = getattr(hf, "sliding_window", None)
    types = getattr(hf, "layer_types", None)
    if types is not None:
        want = tuple(sw if t == "sliding_attention" and sw else None for t in types)
    else:
        want = (sw,) * hf.num_hidden_layers
    got = j.sliding_windows or (None,) * hf.num_hidden_layers
    assert got == want
    if mt.startswith("gemma"):
        assert j.query_scale == pytest.approx(hf.query_pre_attn_scalar ** -0.5)
    if mt == "gemma3_text":
        assert j.local_rope_theta == _rope(hf, "sliding_attention")["rope_theta"]


def test_explicit_null_keeps_its_meaning():
    """A key present as null is not replaced by the default: no soft-cap, no window."""
    j = LlamaConfig.from_hf({**SIZES, "model_type": "gemma2", "attn_logit_softcapping": None,
                             "final_logit_softcapping": None, "sliding_window": None})
    assert j.attn_softcap is None and j.final_softcap is None and j.sliding_windows is None


def test_minimal_gemma2_folder_logits_equal_transformers(tmp_path):
    cfg = transformers.Gemma2Config(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                    query_pre_attn_scalar=16)
    cfg._attn_implementation = "eager"
    torch.manual_seed(1)
    m = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():       # large weights: the scores and logits pass the soft-caps' knees
        for n, p in m.named_parameters():
            p.copy_((0.3 if n.endswith("norm.weight") else 1.0) * torch.randn_like(p))
    m.save_pretrained(tmp_path)
    keep = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "architectures", "query_pre_attn_scalar")
    full = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in full.items() if k in keep}))
    ref_m = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert ref_m.config.final_logit_softcapping == 30.0
    lm = load_model(tmp_path, tokenizer=False)
    ids = np.random.default_rng(0).integers(3, 101, (1, 24))
    with torch.no_grad():
        ref = ref_m(torch.tensor(ids)).logits.numpy()
    assert np.abs(ref).max() > 15          # near the cap: without it the logits would differ
    np.testing.assert_allclose(np.asarray(lm.model(ids)), ref, atol=2e-4, rtol=2e-4)
