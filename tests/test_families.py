"""The model families beyond Llama against PyTorch ``transformers``: Gemma 2, Gemma 3, Qwen3, Phi-3, Mistral.

Each family's tiny random model is built here by transformers (its own config class and modeling code),
saved as a Hugging Face checkpoint and read back by :func:`jaxrank.models.load_model`: the family's
``model_type`` picks the config mapping and the checkpoint names (Phi-3's fused ``qkv_proj`` and
``gate_up_proj``, Gemma's four norms per layer). Every weight is drawn away from its initial value (norm
gains away from one) and every sliding window is shorter than the sequences, so soft-capping, the
``1 + weight`` norms, the embedding scale, the query scalar, q/k norms, partial rotary, the local RoPE base
and the windows all act. Checked: the full forward's logits (float32 tolerance, a left-padded row too),
and a prefix cache extended by continuations (shared, and updated in place twice) against transformers'
full forward.
"""

import dataclasses

import numpy as np
import pytest

from jaxrank.models import llama
from jaxrank.models.llama import LlamaConfig
from jaxrank.models.loading import ARCHITECTURES, load_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V = 101
BASE = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=256, pad_token_id=0, bos_token_id=1,
            eos_token_id=2)
FAMILIES = {
    "gemma2": ("Gemma2Config", dict(query_pre_attn_scalar=24, sliding_window=4, attn_logit_softcapping=2.0,
                                    final_logit_softcapping=3.0, rope_theta=1e4)),
    "gemma3_text": ("Gemma3TextConfig", dict(
        query_pre_attn_scalar=20, sliding_window=4, final_logit_softcapping=None, attn_logit_softcapping=None,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}})),
    "qwen3": ("Qwen3Config", dict(use_sliding_window=True, sliding_window=4, max_window_layers=1,
                                  tie_word_embeddings=False, rope_theta=1e5)),
    "phi3": ("Phi3Config", dict(partial_rotary_factor=0.5, sliding_window=5, tie_word_embeddings=False)),
    "mistral": ("MistralConfig", dict(sliding_window=4, tie_word_embeddings=False)),
}
TOL = dict(atol=1e-4, rtol=1e-4)


def _build(directory, family):
    """A transformers model of ``family`` with every weight drawn away from its init, and its saved folder."""
    cls_name, kw = FAMILIES[family]
    cfg = getattr(transformers, cls_name)(**{**BASE, **kw})
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    m = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    gemma = family.startswith("gemma")
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):     # Gemma's gain is 1 + weight
                p.copy_((0.0 if gemma else 1.0) + 0.3 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    d = directory / family
    m.save_pretrained(d)
    return m, d


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    """``(name, torch model, LoadedModel)`` per family."""
    m, d = _build(tmp_path_factory.mktemp("families"), request.param)
    return request.param, m, load_model(d)


def _torch_logits(m, ids, mask=None):
    with torch.no_grad():
        kw = {} if mask is None else {"attention_mask": torch.tensor(mask)}
        return m(torch.tensor(ids), **kw).logits.numpy()


def test_config_mapping_per_family(tmp_path):
    """``model_type`` -> the family's switches, as transformers' config classes set them."""
    assert {"gemma2", "gemma3_text", "qwen3", "phi3", "mistral"} <= set(ARCHITECTURES)
    cfgs = {}
    for fam, (cls_name, kw) in FAMILIES.items():
        hf = getattr(transformers, cls_name)(**{**BASE, **kw})
        cfgs[fam] = LlamaConfig.from_hf(hf.to_dict())
    g2, g3, q3, p3, mi = (cfgs[k] for k in FAMILIES)
    assert g2.sliding_windows == (4, None, 4) and g2.attn_softcap == 2.0 and g2.final_softcap == 3.0
    assert g2.norm_offset == 1.0 and g2.embed_scale == 8.0 and g2.query_scale == 24 ** -0.5
    assert g2.sandwich_norms and not g2.qk_norm and g2.hidden_act == "gelu_tanh" and g2.tie_word_embeddings
    assert g3.sliding_windows == (4, None, 4) and g3.qk_norm and g3.local_rope_theta == 100.0
    assert g3.rope_theta == 1e4 and dict(g3.rope_scaling) == {"rope_type": "linear", "factor": 2.0}
    assert g3.final_softcap is None and g3.attn_softcap is None
    assert q3.qk_norm and q3.sliding_windows == (None, 4, 4) and q3.norm_offset == 0.0
    assert p3.rotary_dim == 8 and p3.sliding_windows == (5, 5, 5) and not p3.qk_norm
    assert mi.sliding_windows == (4, 4, 4)
    # Gemma 3's default pattern: five sliding layers to one global
    hf = transformers.Gemma3TextConfig(**{**BASE, "num_hidden_layers": 7, "sliding_window": 8})
    assert LlamaConfig.from_hf(hf.to_dict()).sliding_windows == (8,) * 5 + (None, 8)
    with pytest.raises(ValueError, match="longrope"):
        LlamaConfig.from_hf({**BASE, "model_type": "phi3", "rope_scaling": {"rope_type": "longrope"}})  # no factors
    with pytest.raises(ValueError, match="bidirectional"):
        LlamaConfig.from_hf({**BASE, "model_type": "gemma3_text", "sliding_window": 4,
                             "use_bidirectional_attention": True})


def test_full_forward_equals_transformers(family):
    name, m, lm = family
    assert lm.architecture == name and lm.config.model_type == name
    ids = np.random.default_rng(1).integers(3, V, (2, 12))
    np.testing.assert_allclose(np.asarray(lm.model(ids)), _torch_logits(m, ids), **TOL)
    # a left-padded row: positions (and windows) come from the mask
    mask = np.ones_like(ids)
    mask[1, :3] = 0
    out = np.asarray(lm.model(ids, mask))
    np.testing.assert_allclose(out[1, 3:], _torch_logits(m, ids[1:, 3:])[0], **TOL)
    if name == "gemma2":      # without its soft-caps the model is far from transformers: the caps act
        ref = _torch_logits(m, ids)
        assert np.abs(ref).max() < 3.0                    # the final cap bounds the logits
        cfg = dataclasses.replace(lm.config, attn_softcap=None, final_softcap=None)
        uncapped = llama.LlamaModel(cfg, params=lm.model.weights())
        assert np.abs(np.asarray(uncapped(ids)) - ref).max() > 0.1


def test_prefix_cache_and_extend_equal_transformers(family):
    """A shared batch-1 prefix cache extended by two continuations, and a per-row cache updated twice,
    give transformers' full-forward logits; the window (4 or 5) is shorter than the 12 tokens."""
    _, m, lm = family
    model = lm.model
    rng = np.random.default_rng(2)
    prefix, cont = rng.integers(3, V, (1, 6)), rng.integers(3, V, (2, 6))
    full_ids = np.concatenate([np.repeat(prefix, 2, 0), cont], 1)
    ref = _torch_logits(m, full_ids)
    cache = model.prefill(prefix)
    shared = model.extend(cache, cont)
    assert cache.k.shape[1] == 1
    # the updating chain: prefill 6, extend 3 (update), extend 3 (update)
    c = model.prefill(full_ids[:, :6], capacity=16)
    a = model.extend(c, full_ids[:, 6:9], update=True)
    b = model.extend(a.cache, full_ids[:, 9:], update=True)
    assert int(b.cache.length) == 12
    chained = np.concatenate([np.asarray(a.hidden), np.asarray(b.hidden)], 1)
    for hidden in (shared.hidden, chained):
        np.testing.assert_allclose(np.asarray(model.logits_at(hidden)), ref[:, 6:], **TOL)
    np.testing.assert_allclose(np.asarray(b.last_hidden), chained[:, -1], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(cache.last_hidden[0]), np.asarray(c.last_hidden[0]), atol=1e-5, rtol=1e-5)
