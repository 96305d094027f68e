"""The Flax NNX Llama-family decoder (jaxrank.models.llama).

Parity with transformers' PyTorch LlamaForCausalLM / Qwen2ForCausalLM /
MistralForCausalLM through the safetensors loader, KV-cache prefix +
continuation equivalence with the full forward (left and right padding),
selective logits, greedy generation against torch's ``generate``, sampling.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrank.models import llama
from jaxrank.models.llama import LlamaConfig, LlamaModel, bucket_length, generate

V = 101
BASE = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8}
CASES = {
    "llama_tied_gqa": ("LlamaConfig", dict(rope_theta=500.0, tie_word_embeddings=True)),
    "llama_untied_bias": ("LlamaConfig", dict(rope_theta=2e4, attention_bias=True, mlp_bias=True,
                                              tie_word_embeddings=False)),
    "llama3_rope": ("LlamaConfig", dict(rope_scaling=LLAMA3, tie_word_embeddings=False)),
    "llama_mha": ("LlamaConfig", dict(num_key_value_heads=4, tie_word_embeddings=False)),
    "qwen2_bias": ("Qwen2Config", dict(rope_theta=1e6, tie_word_embeddings=False)),
    "mistral_window": ("MistralConfig", dict(sliding_window=5, tie_word_embeddings=False)),
}


def _torch_model(tmp_path, case):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cls_name, kw = CASES[case]
    cfg = getattr(transformers, cls_name)(**{**BASE, **kw})
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    m = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():  # no weight at its init value (HF zeros biases, ones norms)
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    d = tmp_path / case
    m.save_pretrained(d)
    return m, d


def _torch_logits(m, ids, mask=None):
    import torch

    with torch.no_grad():
        kw = {} if mask is None else {"attention_mask": torch.tensor(mask)}
        return m(torch.tensor(ids), **kw).logits.numpy()


@pytest.mark.parametrize("case", list(CASES))
def test_parity_with_transformers(tmp_path, case):
    from jaxrank.models.loading import load_model

    m, d = _torch_model(tmp_path, case)
    lm = load_model(d)
    assert lm.architecture == m.config.model_type and lm.tokenizer is None
    assert lm.config.tie_word_embeddings == CASES[case][1]["tie_word_embeddings"]
    if case == "qwen2_bias":
        assert lm.config.attention_bias and not lm.config.o_bias
    ids = np.random.default_rng(1).integers(0, V, (2, 13))
    ref = _torch_logits(m, ids)
    np.testing.assert_allclose(np.asarray(lm.model(ids)), ref, atol=1e-4, rtol=1e-4)
    # a row of real tokens after left padding: RoPE positions come from the mask
    mask = np.ones_like(ids)
    mask[1, :4] = 0
    out = np.asarray(lm.model(ids, mask))
    np.testing.assert_allclose(out[1, 4:], _torch_logits(m, ids[1:, 4:])[0], atol=1e-4, rtol=1e-4)


def test_bfloat16_params_close(tmp_path):
    from jaxrank.models.loading import load_model

    m, d = _torch_model(tmp_path, "llama_tied_gqa")
    ids = np.random.default_rng(2).integers(0, V, (2, 9))
    lm = load_model(d, dtype=jnp.bfloat16)
    assert lm.model.wq[...].dtype == jnp.bfloat16
    out = np.asarray(lm.model(ids))
    assert out.dtype == np.float32
    ref = _torch_logits(m, ids)
    assert np.abs(out - ref).max() < 0.05 * np.abs(ref).max()


def _random_model(**kw):
    cfg = LlamaConfig.from_hf({**BASE, "model_type": "llama", "rope_theta": 300.0, **kw})
    return LlamaModel(cfg, rngs=nnx.Rngs(3))


def _perturbed(model):
    """Weights at std 0.2 (peaked attention) and norm gains away from one."""
    rng = np.random.default_rng(7)
    for n, w in model.weights().items():
        var = getattr(model, n)
        if n.endswith("norm"):
            var.set_value(jnp.asarray(1 + 0.3 * rng.standard_normal(w.shape), jnp.float32))
        else:
            var.set_value(10 * w)
    return model


@pytest.fixture(scope="module")
def rand_model():
    return _perturbed(_random_model())


@pytest.fixture(scope="module")
def window_model():
    return _perturbed(_random_model(model_type="mistral", sliding_window=4))


def _real_rows(h, mask):
    return [np.asarray(h[b])[np.asarray(mask[b], bool)] for b in range(h.shape[0])]


@pytest.mark.parametrize("prefix_pad,window", [("none", False), ("right", False), ("left", False),
                                                ("right", True)])
def test_shared_prefix_cache_equals_full_forward(rand_model, window_model, prefix_pad, window):
    model = window_model if window else rand_model
    rng = np.random.default_rng(0)
    P, T, B = 9, 6, 4
    prefix = rng.integers(0, V, (1, P))
    pmask = np.ones((1, P), bool)
    if prefix_pad == "right":
        pmask[0, 6:] = False
    elif prefix_pad == "left":
        pmask[0, :3] = False
    cont = rng.integers(0, V, (B, T))
    cmask = np.ones((B, T), bool)
    cmask[1, 4:] = False      # right padding
    cmask[2, :2] = False      # left padding
    cmask[3, 1:] = False      # a single token
    cache = model.prefill(prefix, pmask)
    out = model.extend(cache, cont, cmask)
    assert out.cache is None and cache.k.shape[1] == 1   # the prefix was not copied per row
    full_ids = np.concatenate([np.repeat(prefix, B, 0), cont], 1)
    full_mask = np.concatenate([np.repeat(pmask, B, 0), cmask], 1)
    full = model.hidden(full_ids, full_mask)
    for got, ref in zip(_real_rows(out.hidden, cmask), _real_rows(full[:, P:], cmask)):
        np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-5)
    last = [np.flatnonzero(cmask[b])[-1] for b in range(B)]
    np.testing.assert_allclose(np.asarray(out.last_hidden),
                               np.asarray(full[:, P:])[np.arange(B), last], atol=1e-5, rtol=1e-5)
    # the prefix's own last hidden state matches too
    np.testing.assert_allclose(np.asarray(cache.last_hidden[0]),
                               np.asarray(full[0, np.flatnonzero(pmask[0])[-1]]), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("window", [False, True])
def test_updating_cache_chain_equals_full_forward(rand_model, window_model, window):
    model = window_model if window else rand_model
    rng = np.random.default_rng(1)
    ids = rng.integers(0, V, (3, 14))
    mask = np.ones(ids.shape, bool)
    mask[0, :3] = False       # left-padded prompt
    mask[1, 5:8] = False      # right-padded prompt (then more tokens)
    full = np.asarray(model.hidden(ids, mask))
    cache = model.prefill(ids[:, :8], mask[:, :8], capacity=20)
    a = model.extend(cache, ids[:, 8:11], mask[:, 8:11], update=True)
    b = model.extend(a.cache, ids[:, 11:], mask[:, 11:], update=True)
    assert int(b.cache.length) == 14 and b.cache.k.shape[2] == 20
    np.testing.assert_array_equal(np.asarray(b.cache.next_pos), mask.sum(1))
    for got, ref in ((a.hidden, full[:, 8:11]), (b.hidden, full[:, 11:])):
        np.testing.assert_allclose(np.asarray(got), ref, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(b.last_hidden), full[:, -1], atol=1e-5, rtol=1e-5)


def test_logits_at_selected_positions_and_rows(rand_model):
    rng = np.random.default_rng(2)
    ids = rng.integers(0, V, (2, 7))
    h = rand_model.hidden(ids)
    full = np.asarray(rand_model(ids))
    pos = np.array([[6, 2], [0, 3]])
    rows = np.array([5, 17, 3])
    got = np.asarray(rand_model.logits_at(h, pos, rows))
    assert got.shape == (2, 2, 3)
    np.testing.assert_allclose(got, full[np.arange(2)[:, None], pos][..., rows], atol=1e-5, rtol=1e-5)
    one = np.asarray(rand_model.logits_at(h, np.array([6, 1])))
    np.testing.assert_allclose(one, full[[0, 1], [6, 1]], atol=1e-5, rtol=1e-5)


def test_greedy_generate_matches_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from jaxrank.models.loading import load_model

    m, d = _torch_model(tmp_path, "llama_untied_bias")
    lm = load_model(d)
    ids = np.random.default_rng(4).integers(3, V, (2, 7))
    mask = np.ones_like(ids)
    mask[1, :3] = 0                 # left padding, as generate expects
    ids[1, :3] = 0
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = 0
    with torch.no_grad():
        ref = m.generate(torch.tensor(ids), attention_mask=torch.tensor(mask), max_new_tokens=10,
                         do_sample=False, min_new_tokens=10)[:, ids.shape[1]:].numpy()
    out = generate(lm.model, ids, mask, max_new_tokens=10)
    np.testing.assert_array_equal(np.asarray(out.tokens), ref)
    np.testing.assert_array_equal(np.asarray(out.lengths), [10, 10])
    # right-padded prompts give the same continuation (positions from the mask)
    r_ids, r_mask = np.roll(ids, -3, 1), np.roll(mask, -3, 1)
    r_ids[0], r_mask[0] = ids[0], mask[0]
    out_r = generate(lm.model, r_ids, r_mask, max_new_tokens=10)
    np.testing.assert_array_equal(np.asarray(out_r.tokens), ref)


def test_eos_and_sampling(rand_model):
    ids = np.random.default_rng(5).integers(0, V, (3, 5))
    greedy = np.asarray(generate(rand_model, ids, max_new_tokens=6).tokens)
    # tiny nucleus == greedy, whatever the temperature
    nucleus = generate(rand_model, ids, max_new_tokens=6, temperature=2.0, top_p=1e-6,
                       rng=jax.random.PRNGKey(1))
    np.testing.assert_array_equal(np.asarray(nucleus.tokens), greedy)
    # stop at EOS: the EOS is kept, then padding
    eos = int(greedy[0, 2])
    out = generate(rand_model, ids, max_new_tokens=6, eos_id=[eos, 10_000], pad_id=-1)
    toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)
    for b in range(3):
        hit = np.flatnonzero(greedy[b] == eos)
        n = hit[0] + 1 if hit.size else 6
        assert lens[b] == n
        np.testing.assert_array_equal(toks[b, :n], greedy[b, :n])
        assert (toks[b, n:] == -1).all()
    # sampling: reproducible per key, differs across keys, ids in range
    s1 = np.asarray(generate(rand_model, ids, max_new_tokens=6, temperature=1.5,
                             rng=jax.random.PRNGKey(0)).tokens)
    s2 = np.asarray(generate(rand_model, ids, max_new_tokens=6, temperature=1.5,
                             rng=jax.random.PRNGKey(0)).tokens)
    s3 = np.asarray(generate(rand_model, ids, max_new_tokens=6, temperature=1.5,
                             rng=jax.random.PRNGKey(9)).tokens)
    np.testing.assert_array_equal(s1, s2)
    assert (s1 != s3).any() and ((s1 >= 0) & (s1 < V)).all()


def test_top_p_keeps_the_nucleus():
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
    keys = jax.random.split(jax.random.PRNGKey(0), 400)
    draws = np.asarray(jax.jit(jax.vmap(lambda k: llama._pick(logits, k, False, 1.0, 0.7)[0]))(keys))
    assert set(draws) == {0, 1}          # 0.5 + 0.3 >= 0.7: tokens 2 and 3 are cut
    assert 0.55 < (draws == 0).mean() < 0.7   # 0.5 / 0.8 = 0.625


def test_bucket_length():
    assert bucket_length(1) == 32 and bucket_length(32) == 32 and bucket_length(33) == 64
    assert bucket_length(2048) == 2048 and bucket_length(2049) == 4096
    assert bucket_length(5, buckets=(8, 4)) == 8


def test_config_errors():
    with pytest.raises(ValueError, match="gpt_neox.*llama, mistral, qwen2"):
        LlamaConfig.from_hf({**BASE, "model_type": "gpt_neox"})
    with pytest.raises(ValueError, match="yarn.*default, linear, llama3"):
        LlamaConfig.from_hf({**BASE, "model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 2.0}})
    with pytest.raises(ValueError, match="gelu"):
        LlamaConfig.from_hf({**BASE, "model_type": "llama", "hidden_act": "gelu"})
    cfg = LlamaConfig.from_hf({**BASE, "model_type": "llama", "rope_scaling": {"type": "linear", "factor": 4.0}})
    ref = LlamaConfig.from_hf({**BASE, "model_type": "llama"})
    np.testing.assert_allclose(cfg.inv_freq(), ref.inv_freq() / 4)
    with pytest.raises(ValueError, match="lacks tensor"):
        llama.load_state_dict(ref, {})


def test_parameter_shapes_build_the_model_from_outside_arrays():
    """``parameter_shapes`` names every parameter a model takes: arrays drawn elsewhere (as on a GPU)
    in those shapes build a model whose weights are exactly those arrays; a missing one is refused."""
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=4, attention_bias=True)
    shapes = llama.parameter_shapes(cfg)
    reference = LlamaModel(cfg, rngs=nnx.Rngs(0)).weights()
    assert shapes == {k: tuple(v.shape) for k, v in reference.items()}
    rng = np.random.default_rng(1)
    params = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
    model = LlamaModel(cfg, params=params)
    for k, v in model.weights().items():
        np.testing.assert_array_equal(np.asarray(v), params[k])
    del params["wq"]
    with pytest.raises(ValueError, match="wq"):
        LlamaModel(cfg, params=params)


def test_bfloat16_cache_and_its_rows_match_the_float32_cache(rand_model):
    """``prefill(cache_dtype=bfloat16)`` stores keys and values in bfloat16 (half the memory); a shared
    and a per-row cache (``KVCache.rows``, an update in between) give the float32 cache's hidden
    states to bfloat16 rounding; the rows of a cache are the rows asked for, repeats included."""
    rng = np.random.default_rng(5)
    prefix, cont = rng.integers(0, V, (1, 9)), rng.integers(0, V, (3, 5))
    ext = rng.integers(0, V, (2, 4))
    f32 = rand_model.prefill(prefix, capacity=13)
    bf16 = rand_model.prefill(prefix, capacity=13, cache_dtype=jnp.bfloat16)
    assert f32.k.dtype == jnp.float32 and bf16.k.dtype == bf16.v.dtype == jnp.bfloat16
    assert bf16.k.nbytes * 2 == f32.k.nbytes
    ref, got = rand_model.extend(f32, cont).hidden, rand_model.extend(bf16, cont).hidden
    scale = float(np.max(np.abs(np.asarray(ref))))
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=0.02 * scale)
    # an update in bfloat16, then per-row caches read through KVCache.rows
    two_f, two_b = f32.rows([0, 0]), bf16.rows([0, 0])
    up_f = rand_model.extend(two_f, ext, update=True).cache
    up_b = rand_model.extend(two_b, ext, update=True).cache
    assert up_b.k.dtype == jnp.bfloat16 and up_b.k.shape[1] == 2
    idx = np.array([1, 0, 1])
    rows_f = up_f.rows(idx)
    np.testing.assert_array_equal(np.asarray(rows_f.k), np.asarray(up_f.k)[:, idx])
    np.testing.assert_array_equal(np.asarray(rows_f.valid), np.asarray(up_f.valid)[idx])
    ref2 = rand_model.extend(rows_f, cont).last_hidden
    got2 = rand_model.extend(up_b.rows(idx), cont).last_hidden
    np.testing.assert_allclose(np.asarray(got2), np.asarray(ref2), atol=0.02 * float(np.max(np.abs(np.asarray(ref2)))))
