"""Review of the Llama-family config and loader against transformers (PyTorch).

* Gemma 3's sliding layers take their own RoPE scaling (transformers 5 ``rope_parameters["sliding_attention"]``:
  ``linear`` or ``llama3``; others refused), and its ``attn_logit_softcapping`` is ignored as transformers'
  ``Gemma3Attention`` ignores it: logits against transformers.
* Phi-3 (and Mistral) with ``"attention_bias": true`` load without biases, as transformers builds them.
* Malformed RoPE scaling dicts are refused by ``from_hf`` naming the key; a ``llama3`` scaling without
  ``original_max_position_embeddings`` takes ``max_position_embeddings`` (transformers' inverse frequencies).
* Quantised safetensors checkpoints (``quantization_config``, integer weights, ``*_scale`` tensors) are refused;
  other leftover tensors are reported.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from jaxrank.models.llama import LlamaConfig
from jaxrank.models.loading import load_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

V = 101
BASE = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
            eos_token_id=2)
LAYERS = ["sliding_attention", "full_attention", "sliding_attention"]


def _build(folder, cls_name, **kw):
    """A transformers model (every weight drawn away from its init) saved to ``folder``."""
    cfg = getattr(transformers, cls_name)(**{**BASE, **kw})
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    m = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    gemma = cls_name.startswith("Gemma")
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_((0.0 if gemma else 1.0) + 0.3 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    m.save_pretrained(folder)
    return m


def _compare(m, folder):
    ids = np.random.default_rng(1).integers(3, V, (2, 40))
    with torch.no_grad():
        ref = m(torch.tensor(ids)).logits.numpy()
    out = np.asarray(load_model(folder, tokenizer=False).model(ids))
    np.testing.assert_allclose(out, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("local", [
    {"rope_type": "linear", "factor": 4.0, "rope_theta": 100.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 16, "rope_theta": 100.0},
], ids=["linear", "llama3"])
def test_gemma3_local_rope_scaling_matches_transformers(tmp_path, local):
    m = _build(tmp_path, "Gemma3TextConfig", sliding_window=4, query_pre_attn_scalar=20, layer_types=LAYERS,
               rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e4},
                                "sliding_attention": local})
    _compare(m, tmp_path)


def test_gemma3_local_rope_type_unsupported_is_refused():
    cfg = {**BASE, "model_type": "gemma3_text", "layer_types": LAYERS, "sliding_window": 4,
           "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4},
                               "sliding_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 100.0}}}
    with pytest.raises(ValueError, match=r"sliding_attention.*yarn"):
        LlamaConfig.from_hf(cfg)


def test_gemma3_attention_softcap_is_ignored_as_transformers(tmp_path):
    m = _build(tmp_path, "Gemma3TextConfig", sliding_window=4, attn_logit_softcapping=2.0, query_pre_attn_scalar=20)
    assert m.config.attn_logit_softcapping == 2.0
    _compare(m, tmp_path)


def test_gemma2_attention_softcap_still_applies():
    cfg = LlamaConfig.from_hf({**BASE, "model_type": "gemma2", "attn_logit_softcapping": 2.0})
    assert cfg.attn_softcap == 2.0


@pytest.mark.parametrize("cls_name,kw", [
    ("Phi3Config", dict(attention_bias=True, partial_rotary_factor=0.5, sliding_window=None)),
    ("MistralConfig", dict(attention_bias=True, sliding_window=4)),
], ids=["phi3", "mistral"])
def test_attention_bias_ignored_where_transformers_has_none(tmp_path, cls_name, kw):
    m = _build(tmp_path, cls_name, **kw)
    assert not any(n.endswith("bias") for n, _ in m.named_parameters())
    saved = json.loads((tmp_path / "config.json").read_text())
    saved["attention_bias"] = True                      # as a hand-edited config may carry it
    (tmp_path / "config.json").write_text(json.dumps(saved))
    _compare(m, tmp_path)


@pytest.mark.parametrize("scaling,key", [
    ({"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
     "low_freq_factor"),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0}, "high_freq_factor"),
    ({"rope_type": "linear"}, "factor"),
    ({"rope_type": "linear", "factor": 0}, "factor"),
    ({"rope_type": "linear", "factor": float("nan")}, "factor"),
    ({"type": "linear", "factor": "2"}, "factor"),
])
def test_malformed_rope_scaling_is_refused_naming_the_key(scaling, key):
    with pytest.raises(ValueError, match=key):
        LlamaConfig.from_hf({**BASE, "model_type": "llama", "rope_scaling": scaling})


def test_llama3_without_original_window_takes_max_position_embeddings():
    """transformers fills ``original_max_position_embeddings`` with ``max_position_embeddings``."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    hf = transformers.LlamaConfig(**{**BASE, "rope_scaling": dict(scaling), "rope_theta": 5e5})
    ref, _ = ROPE_INIT_FUNCTIONS["llama3"](hf, "cpu")
    ours = LlamaConfig.from_hf({**BASE, "model_type": "llama", "rope_scaling": scaling, "rope_theta": 5e5})
    np.testing.assert_allclose(ours.inv_freq(), ref.numpy(), rtol=1e-6)


# ----------------------------------------------------------------- quantised checkpoints and leftovers
@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama")
    _build(d, "LlamaConfig", tie_word_embeddings=False)
    return d


def _edited(tmp_path, src, edit_tensors=None, edit_config=None):
    """A copy of the checkpoint ``src`` with its tensors and config edited in place."""
    t = safetensors_numpy.load_file(str(src / "model.safetensors"))
    cfg = json.loads((src / "config.json").read_text())
    if edit_tensors:
        edit_tensors(t)
    if edit_config:
        edit_config(cfg)
    safetensors_numpy.save_file(t, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def _w8a8(t):
    """The compressed-tensors W8A8 layout: int8 projection weights and a per-channel ``weight_scale``."""
    for k in list(t):
        if k.endswith("_proj.weight"):
            s = np.abs(t[k]).max(1, keepdims=True) / 127
            t[k] = np.round(t[k] / s).astype(np.int8)
            t[k[:-len("weight")] + "weight_scale"] = s.astype(np.float32)


def test_quantization_config_is_refused_naming_the_method(tmp_path, llama_dir):
    d = _edited(tmp_path, llama_dir, _w8a8, lambda c: c.update(quantization_config={
        "quant_method": "compressed-tensors", "format": "int-quantized"}))
    with pytest.raises(ValueError, match="compressed-tensors"):
        load_model(d, tokenizer=False)


@pytest.mark.parametrize("weights", ["float", "quantised"])
def test_integer_weights_are_refused_without_a_quantization_config(tmp_path, llama_dir, weights):
    def int8_q(t):
        k = "model.layers.1.self_attn.q_proj.weight"
        t[k] = np.round(t[k] * 50).astype(np.int8)
    d = _edited(tmp_path, llama_dir, int8_q)
    with pytest.raises(ValueError, match=r"q_proj\.weight.*int8"):
        load_model(d, tokenizer=False, weights=weights)


def test_scale_tensors_are_refused(tmp_path, llama_dir):
    def scale(t):
        t["model.layers.0.mlp.up_proj.weight_scale"] = np.ones((96, 1), np.float32)
    d = _edited(tmp_path, llama_dir, scale)
    with pytest.raises(ValueError, match="up_proj.weight_scale"):
        load_model(d, tokenizer=False)


def test_other_leftover_tensors_are_reported(tmp_path, llama_dir):
    def extra(t):
        t["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(8, np.float32)    # a buffer: no report
        t["model.layers.2.extra_gate.weight"] = np.ones((4, 4), np.float32)
    d = _edited(tmp_path, llama_dir, extra)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        lm = load_model(d, tokenizer=False)
    msgs = [str(w.message) for w in ws if "unexpected checkpoint tensors" in str(w.message)]
    assert len(msgs) == 1 and "model.layers.2.extra_gate.weight" in msgs[0] and "inv_freq" not in msgs[0]
    ref = load_model(llama_dir, tokenizer=False)
    ids = np.arange(3, 19)[None]
    np.testing.assert_array_equal(np.asarray(lm.model(ids)), np.asarray(ref.model(ids)))


def test_a_clean_checkpoint_warns_nothing(llama_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_model(llama_dir, tokenizer=False)
