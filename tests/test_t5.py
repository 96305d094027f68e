"""Parity of the Flax NNX T5 (jaxrank.models.t5) with transformers' PyTorch T5."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.numpy import load_file  # noqa: E402

from jaxrank.models import t5  # noqa: E402

V = 96
TINY = dict(vocab_size=V, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=3, num_heads=4,
            relative_attention_num_buckets=8, relative_attention_max_distance=16, decoder_start_token_id=0,
            dropout_rate=0.0)


def _save(tmp_path, name, untie_head=False, **kw):
    torch.manual_seed(0)
    cfg = transformers.T5Config(**{**TINY, **kw})
    m = transformers.T5ForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # random RMS-norm gains and relative biases, so no weight sits at its init value
        for n, p in m.named_parameters():
            if n.endswith("layer_norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            if "relative_attention_bias" in n:
                p.copy_(torch.randn_like(p))
    if untie_head:
        m.lm_head.weight = torch.nn.Parameter(torch.randn(V, TINY["d_model"]) * 0.3)
    d = tmp_path / name
    m.save_pretrained(d)
    return m, d


def _load(d, **kw):
    cfg = t5.T5Config.from_hf(json.loads((d / "config.json").read_text()))
    return t5.load_state_dict(cfg, load_file(str(d / "model.safetensors")), **kw)


def _inputs(seed=0, b=3, s=20, t=6):
    rng = np.random.default_rng(seed)
    ids = rng.integers(2, V, (b, s))
    mask = np.ones((b, s), np.int64)
    mask[1, 13:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    dec = rng.integers(2, V, (b, t))
    dec[:, 0] = 0
    return ids, mask, dec


def _torch_out(m, ids, mask, dec):
    with torch.no_grad():
        return m(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), decoder_input_ids=torch.tensor(dec))


@pytest.fixture(scope="module")
def v11(tmp_path_factory):
    """T5 v1.1 / FLAN-T5 style: gated-gelu, untied lm_head, no output rescaling."""
    m, d = _save(tmp_path_factory.mktemp("t5"), "v11", untie_head=True, feed_forward_proj="gated-gelu",
                 tie_word_embeddings=False)
    return m, _load(d), d


def test_v11_encoder_and_logits_match_torch(v11):
    tm, m, d = v11
    assert "lm_head.weight" in load_file(str(d / "model.safetensors"))
    assert not m.config.tie_word_embeddings and not m.config.scale_decoder_outputs
    assert m.config.is_gated_act and m.config.dense_act_fn == "gelu_new"
    ids, mask, dec = _inputs()
    out = _torch_out(tm, ids, mask, dec)
    enc = t5.encode(m, jnp.asarray(ids), jnp.asarray(mask))
    valid = mask.astype(bool)
    np.testing.assert_allclose(np.asarray(enc)[valid], out.encoder_last_hidden_state.numpy()[valid], atol=1e-4)
    logits = m.decode(jnp.asarray(dec), enc, jnp.asarray(mask))
    np.testing.assert_allclose(np.asarray(logits), out.logits.numpy(), atol=1e-4)
    assert np.abs(out.logits.numpy()).max() > 0.1  # non-trivial logits
    full = m(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(dec))
    np.testing.assert_allclose(np.asarray(full), out.logits.numpy(), atol=1e-4)


def test_first_step_logits_full_and_selected(v11):
    tm, m, _ = v11
    ids, mask, dec = _inputs(seed=1)
    out = _torch_out(tm, ids, mask, dec[:, :1])
    enc = t5.encode(m, jnp.asarray(ids), jnp.asarray(mask))
    full = t5.decoder_logits_first_step(m, enc, jnp.asarray(mask))
    assert full.shape == (3, V) and full.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(full), out.logits.numpy()[:, 0], atol=1e-4)
    sel = np.array([5, 17, 3, 90])
    part = t5.decoder_logits_first_step(m, enc, jnp.asarray(mask), jnp.asarray(sel))
    np.testing.assert_allclose(np.asarray(part), out.logits.numpy()[:, 0, sel], atol=1e-4)


def test_jit_no_recompile_same_shapes(v11):
    _, m, _ = v11
    jf = getattr(t5.encode, "jitted_fn", None)
    if jf is None or not hasattr(jf, "_cache_size"):
        pytest.skip("jit cache size not introspectable in this flax/jax version")
    ids, mask, _ = _inputs(seed=2, s=11)
    t5.encode(m, jnp.asarray(ids), jnp.asarray(mask))
    n = jf._cache_size()
    ids2, mask2, _ = _inputs(seed=3, s=11)
    e2 = t5.encode(m, jnp.asarray(ids2), jnp.asarray(mask2))
    assert jf._cache_size() == n
    e2.block_until_ready()


def test_greedy_generate_matches_torch(v11):
    tm, m, _ = v11
    ids, mask, _ = _inputs(seed=4)
    n = 7
    ours = np.asarray(t5.generate(m, jnp.asarray(ids), jnp.asarray(mask), max_new_tokens=n))
    with torch.no_grad():  # no HF cache: its DynamicCache sizing breaks with num_decoder_layers != num_layers
        ref = tm.generate(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), max_new_tokens=n,
                          do_sample=False, num_beams=1, use_cache=False).numpy()[:, 1:]
    ref = np.pad(ref, ((0, 0), (0, n - ref.shape[1])), constant_values=0)
    np.testing.assert_array_equal(ours, ref)
    # the cached loop agrees with teacher-forced recomputation of its own output
    dec = np.concatenate([np.zeros((3, 1), np.int64), ours[:, :-1]], axis=1)
    enc = m.encode(jnp.asarray(ids), jnp.asarray(mask))
    rec = np.asarray(jnp.argmax(m.decode(jnp.asarray(dec), enc, jnp.asarray(mask)), -1))
    for r in range(3):
        stop = np.flatnonzero(ours[r] == m.config.eos_token_id)
        k = stop[0] + 1 if stop.size else n
        np.testing.assert_array_equal(rec[r, :k], ours[r, :k])


def test_generate_stops_at_eos(v11):
    _, m, _ = v11
    ids, mask, _ = _inputs(seed=4)
    free = np.asarray(t5.generate(m, jnp.asarray(ids), jnp.asarray(mask), max_new_tokens=5))
    eos = int(free[0, 1])  # pretend the second generated token of row 0 is EOS
    out = np.asarray(t5.generate(m, jnp.asarray(ids), jnp.asarray(mask), max_new_tokens=5, eos_token_id=eos))
    assert out[0, 1] == eos and np.all(out[0, 2:] == m.config.pad_token_id)


def test_original_t5_relu_tied_scaled(tmp_path):
    tm, d = _save(tmp_path, "orig", feed_forward_proj="relu", tie_word_embeddings=True)
    m = _load(d)
    assert m.config.tie_word_embeddings and m.config.scale_decoder_outputs and not m.config.is_gated_act
    ids, mask, dec = _inputs(seed=5)
    out = _torch_out(tm, ids, mask, dec)
    logits = m(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(dec))
    np.testing.assert_allclose(np.asarray(logits), out.logits.numpy(), atol=1e-4)


def test_v11_tied_as_saved_by_transformers5(tmp_path):
    """transformers 5 always ties T5's head unless the weights differ; it then saves no lm_head."""
    tm, d = _save(tmp_path, "tied11", feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    assert "lm_head.weight" not in load_file(str(d / "model.safetensors"))
    m = _load(d)
    assert m.config.tie_word_embeddings and not m.config.scale_decoder_outputs
    ids, mask, dec = _inputs(seed=6)
    out = _torch_out(tm, ids, mask, dec)
    np.testing.assert_allclose(np.asarray(m(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(dec))),
                               out.logits.numpy(), atol=1e-4)


def test_relative_position_bucket_matches_torch():
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = np.arange(-300, 300)[None, :] - np.arange(0, 40)[:, None]
    for bidir in (True, False):
        for nb, md in ((32, 128), (8, 16)):
            ref = T5Attention._relative_position_bucket(torch.tensor(rel), bidir, nb, md).numpy()
            ours = np.asarray(t5.relative_position_bucket(jnp.asarray(rel), bidir, nb, md))
            np.testing.assert_array_equal(ours, ref)


def test_bfloat16_params(v11):
    tm, _, d = v11
    m16 = _load(d, dtype=jnp.bfloat16)
    assert m16.shared.weight[...].dtype == jnp.bfloat16
    ids, mask, dec = _inputs(seed=7)
    out = _torch_out(tm, ids, mask, dec).logits.numpy()
    got = np.asarray(m16(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(dec)))
    assert got.dtype == np.float32
    assert np.abs(got - out).max() < 0.05 * np.abs(out).max()


def test_embed_tokens_alias_and_missing_tensors(v11):
    _, m, d = v11
    tensors = load_file(str(d / "model.safetensors"))
    cfg = t5.T5Config.from_hf(json.loads((d / "config.json").read_text()))
    tensors["encoder.embed_tokens.weight"] = tensors.pop("shared.weight")
    m2 = t5.load_state_dict(cfg, tensors)
    np.testing.assert_array_equal(np.asarray(m2.shared.weight[...]), np.asarray(m.shared.weight[...]))
    del tensors["decoder.block.1.layer.2.DenseReluDense.wo.weight"]
    with pytest.raises(KeyError, match="decoder.block.1.layer.2.DenseReluDense.wo.weight"):
        t5.load_state_dict(cfg, tensors)


def test_from_hf_rejects_unsupported():
    base = {"vocab_size": 10, "d_model": 8, "d_kv": 2, "d_ff": 16, "num_layers": 1, "num_heads": 4}
    with pytest.raises(ValueError, match="feed_forward_proj"):
        t5.T5Config.from_hf({**base, "feed_forward_proj": "gated-foo"})
    with pytest.raises(ValueError, match="feed_forward_proj"):
        t5.T5Config.from_hf({**base, "feed_forward_proj": "double-gelu"})
    with pytest.raises(ValueError, match="model_type"):
        t5.T5Config.from_hf({**base, "model_type": "umt5"})
    c = t5.T5Config.from_hf({**base, "feed_forward_proj": "gated-silu", "tie_word_embeddings": False})
    assert c.dense_act_fn == "silu" and c.is_gated_act and not c.scale_decoder_outputs
    assert c.num_decoder_layers == 1 and c.decoder_start_token_id == 0
