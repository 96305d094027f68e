"""Phi-3's LongRoPE against PyTorch ``transformers`` (tiny random Phi-3 built by transformers).

Within the original window transformers turns q and k by the short factors and scales cos and sin by
the attention factor ``sqrt(1 + ln(s) / ln(L_orig))``; jaxrank maps this to per-frequency divisors and a
query scale, and keeps the judge's window at ``L_orig``. Checked: logits of a full forward and of a
prefix cache extended (transformers' full forward on the same ids), the window, the factors' effect
(the model without them differs), and the clear errors for partial rotary or missing factors.
"""

import numpy as np
import pytest
from tiny_lm import torch_random_checkpoint

from jaxrank.models.llama import LlamaConfig
from jaxrank.models.loading import load_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V, HEAD = 101, 16
BASE = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=512, original_max_position_embeddings=64,
            pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)


def _rope(seed=0, **kw):
    rng = np.random.default_rng(seed)
    return {"rope_type": "longrope", "rope_theta": 1e4,
            "short_factor": (1.0 + 3.0 * rng.random(HEAD // 2)).tolist(),
            "long_factor": (5.0 + 10.0 * rng.random(HEAD // 2)).tolist(), **kw}


@pytest.fixture(scope="module")
def phi(tmp_path_factory):
    cfg = transformers.Phi3Config(**BASE, rope_parameters=_rope())
    d = tmp_path_factory.mktemp("phi3") / "longrope"
    m = torch_random_checkpoint(cfg, d)
    return m, load_model(d)


def _torch_logits(m, ids):
    with torch.no_grad():
        return m(torch.tensor(ids)).logits.numpy()


def test_full_forward_and_cache_equal_transformers_within_the_original_window(phi):
    m, lm = phi
    assert lm.config.max_position_embeddings == 64          # the judge never passes L_orig
    ids = np.random.default_rng(1).integers(3, V, (2, 60))
    ids[1, :40] = ids[0, :40]                               # one shared prefix, two continuations
    ref = _torch_logits(m, ids)
    np.testing.assert_allclose(np.asarray(lm.model(ids)), ref, atol=1e-4, rtol=1e-4)
    cache = lm.model.prefill(ids[:1, :40])
    out = lm.model.extend(cache, ids[:, 40:])
    np.testing.assert_allclose(np.asarray(lm.model.logits_at(out.hidden)), ref[:, 40:], atol=1e-4, rtol=1e-4)


def test_the_factors_and_attention_scale_act(phi):
    """Without the short factors or the attention factor the logits are off: the mapping is exercised."""
    import dataclasses

    from jaxrank.models.llama import LlamaModel

    m, lm = phi
    ids = np.random.default_rng(2).integers(3, V, (1, 50))
    ref = _torch_logits(m, ids)
    params = {n: np.asarray(w) for n, w in lm.model.weights().items()}
    for change in ({"rope_freq_factors": None}, {"query_scale": None}):
        other = LlamaModel(dataclasses.replace(lm.config, **change), params=params)
        assert np.abs(np.asarray(other(ids)) - ref).max() > 1e-2, change


def test_attention_factor_closed_form():
    cfg = LlamaConfig.from_hf({**BASE, "model_type": "phi3", "rope_scaling": _rope()})
    s = 512 / 64
    a = np.sqrt(1 + np.log(s) / np.log(64))
    assert cfg.query_scale == pytest.approx(a * a / np.sqrt(HEAD), rel=1e-12)
    given = LlamaConfig.from_hf({**BASE, "model_type": "phi3", "rope_scaling": _rope(attention_factor=1.5)})
    assert given.query_scale == pytest.approx(2.25 / np.sqrt(HEAD), rel=1e-12)
    np.testing.assert_allclose(cfg.inv_freq(), 1.0 / (np.asarray(_rope()["short_factor"])
                                                      * 1e4 ** (np.arange(0, HEAD, 2) / HEAD)), rtol=1e-6)


def test_longrope_errors_name_the_problem():
    with pytest.raises(ValueError, match="short_factor"):
        LlamaConfig.from_hf({**BASE, "model_type": "phi3", "rope_scaling": _rope(short_factor=[1.0, 2.0])})
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        LlamaConfig.from_hf({**BASE, "model_type": "phi3", "partial_rotary_factor": 0.5,
                             "rope_scaling": _rope()})
