"""The decoder's attention over a cached prefix against a NumPy float64 decoder (issue 33).

The judge's two cache levels (a batch-1 prefix cache, a batch-1 "A" cache extended from it, then ``b``
continuation rows sharing it, or reading their own copies of it) must give the hidden states of the
whole padded sequence computed from the definitions: RMSNorm, rotary embeddings ("rotate half"),
grouped-query attention with ``softmax(c tanh(q.k s / c))`` over the visible keys (causal, padding
masked), SwiGLU MLP (METHODS.md, "Judges"). The softmax is computed by the model in two blocks (cache
keys and the row's own keys) without joining them; the reference joins them.
"""

import numpy as np
import pytest

from jaxrank.models.llama import LlamaConfig, LlamaModel, parameter_shapes

CFG = LlamaConfig(vocab_size=53, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=6, num_key_value_heads=2, head_dim=8, rope_theta=100.0,
                  query_scale=0.3, attn_softcap=3.0, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(7)
    return {n: (1.0 + 0.3 * rng.standard_normal(s) if n.endswith("norm") else 0.4 * rng.standard_normal(s))
            .astype(np.float32) for n, s in parameter_shapes(CFG).items()}


def reference_hidden(w, ids, mask):
    """Final hidden states ``[B, T, D]`` of padded rows, float64, straight from the definitions."""
    c, f64 = CFG, np.float64
    w = {k: np.asarray(v, f64) for k, v in w.items()}
    hq, hk, dh = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    B, T = ids.shape
    rms = lambda x, g: x / np.sqrt(np.mean(x * x, -1, keepdims=True) + c.rms_norm_eps) * g
    pos = np.maximum(np.cumsum(mask, 1) - 1, 0).astype(f64)
    inv = 1.0 / c.rope_theta ** (np.arange(0, dh, 2) / dh)
    ang = pos[..., None] * inv                                         # [B, T, dh/2]
    cos, sin = np.cos(ang)[:, :, None], np.sin(ang)[:, :, None]

    def rope(x):
        x1, x2 = x[..., :dh // 2], x[..., dh // 2:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    visible = np.tril(np.ones((T, T), bool))[None] & mask[:, None, :]     # [B, query, key]
    x = w["embed"][ids]
    for layer in range(c.num_hidden_layers):
        lw = {k: v[layer] for k, v in w.items() if k not in ("embed", "norm")}
        h = rms(x, lw["attn_norm"])
        q = rope((h @ lw["wq"].T).reshape(B, T, hq, dh))
        k = rope((h @ lw["wk"].T).reshape(B, T, hk, dh))
        v = (h @ lw["wv"].T).reshape(B, T, hk, dh)
        out = np.zeros((B, T, hq, dh))
        for head in range(hq):
            kv = head // (hq // hk)
            s = np.einsum("btd,bsd->bts", q[:, :, head], k[:, :, kv]) * c.query_scale
            s = c.attn_softcap * np.tanh(s / c.attn_softcap)
            s = np.where(visible, s, -1e300)        # a padded query seeing no key: finite, never read
            p = np.exp(s - s.max(-1, keepdims=True))
            out[:, :, head] = np.einsum("bts,bsd->btd", p / p.sum(-1, keepdims=True), v[:, :, kv])
        x = x + out.reshape(B, T, hq * dh) @ lw["wo"].T
        h = rms(x, lw["mlp_norm"])
        g = h @ lw["w_gate"].T
        x = x + ((g / (1.0 + np.exp(-g))) * (h @ lw["w_up"].T)) @ lw["w_down"].T
    return rms(x, w["norm"])


@pytest.mark.parametrize("shared", [True, False])
def test_two_cache_levels_match_the_whole_sequence(weights, shared):
    model = LlamaModel(CFG, params=weights)
    rng = np.random.default_rng(3)
    P, A, T, b = 10, 6, 7, 4
    prefix, a_ids, cont = rng.integers(0, 53, (1, P)), rng.integers(0, 53, (1, A)), rng.integers(0, 53, (b, T))
    pmask, amask, cmask = np.ones((1, P), bool), np.ones((1, A), bool), np.ones((b, T), bool)
    pmask[0, 7:] = False                  # padded prefix and A part: masked slots inside the cache
    amask[0, 4:] = False
    cmask[1, 5:] = False                  # right padding
    cmask[2, :3] = False                  # left padding
    cmask[3, 1:] = False                  # a single token
    cache = model.prefill(prefix, pmask, capacity=P + A)
    cache_a = model.extend(cache, a_ids, amask, update=True).cache
    if not shared:                        # each row reads its own copy of the A cache
        cache_a = cache_a.rows(np.zeros(b, np.int32))
    out = model.extend(cache_a, cont, cmask)
    ids = np.concatenate([np.repeat(prefix, b, 0), np.repeat(a_ids, b, 0), cont], 1)
    mask = np.concatenate([np.repeat(pmask, b, 0), np.repeat(amask, b, 0), cmask], 1)
    ref = reference_hidden(weights, ids, mask)[:, P + A:]
    got = np.asarray(out.hidden)
    for r in range(b):
        np.testing.assert_allclose(got[r][cmask[r]], ref[r][cmask[r]], rtol=2e-4, atol=2e-4)
    last = [np.flatnonzero(cmask[r])[-1] for r in range(b)]
    np.testing.assert_allclose(np.asarray(out.last_hidden), ref[np.arange(b), last], rtol=2e-4, atol=2e-4)


def test_prefill_matches_the_definitions(weights):
    """No cache: the own-keys block alone, left and right padding."""
    model = LlamaModel(CFG, params=weights)
    rng = np.random.default_rng(4)
    ids = rng.integers(0, 53, (3, 9))
    mask = np.ones(ids.shape, bool)
    mask[0, 6:] = False
    mask[1, :2] = False
    got = np.asarray(model.hidden(ids, mask))
    ref = reference_hidden(weights, ids, mask)
    for r in range(3):
        np.testing.assert_allclose(got[r][mask[r]], ref[r][mask[r]], rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("shared", [True, False])
def test_last_only_matches_the_definitions(weights, shared):
    """``extend(last_only=True)``: the last layer at each row's last real token only (issue 33) gives the
    whole sequence's final hidden state there, and with ``update=True`` the same cache as the full pass."""
    model = LlamaModel(CFG, params=weights)
    rng = np.random.default_rng(5)
    P, T, b = 9, 7, 4
    prefix, cont = rng.integers(0, 53, (1, P)), rng.integers(0, 53, (b, T))
    pmask, cmask = np.ones((1, P), bool), np.ones((b, T), bool)
    pmask[0, 8:] = False
    cmask[1, 4:] = False                  # right padding
    cmask[2, :2] = False                  # left padding
    cmask[3, 1:] = False                  # a single token
    cache = model.prefill(prefix, pmask, capacity=P + T)
    if not shared:
        cache = cache.rows(np.zeros(b, np.int32))
    out = model.extend(cache, cont, cmask, last_only=True)
    ids = np.concatenate([np.repeat(prefix, b, 0), cont], 1)
    mask = np.concatenate([np.repeat(pmask, b, 0), cmask], 1)
    ref = reference_hidden(weights, ids, mask)[:, P:]
    last = [np.flatnonzero(cmask[r])[-1] for r in range(b)]
    assert out.hidden.shape == (b, 1, CFG.hidden_size)
    np.testing.assert_allclose(np.asarray(out.last_hidden), ref[np.arange(b), last], rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(np.asarray(out.hidden[:, 0]), ref[np.arange(b), last], rtol=2e-4, atol=2e-4)
    if not shared:                        # the cache written: keys and values of every position, every layer
        full = model.extend(cache, cont, cmask, update=True).cache
        part = model.extend(cache, cont, cmask, update=True, last_only=True).cache
        for a, c in zip(full, part):
            np.testing.assert_allclose(np.asarray(c), np.asarray(a), rtol=1e-6, atol=1e-6)


def test_a_parts_of_other_lengths_batched_match_the_definitions(weights):
    """The judge's A parts on a CPU (``_forward.a_caches``): A's of different lengths in one call padded to
    the longest, each row taken out as a batch-1 cache, then continuations sharing it, against the
    whole sequences from the definitions."""
    model = LlamaModel(CFG, params=weights)
    rng = np.random.default_rng(6)
    P, A, T, b = 8, 6, 5, 2
    prefix = rng.integers(0, 53, (1, P))
    pmask = np.ones((1, P), bool)
    pmask[0, 7:] = False
    a_ids, amask = rng.integers(0, 53, (2, A)), np.ones((2, A), bool)
    amask[0, 3:] = False                  # a short A beside a long one
    cont, cmask = rng.integers(0, 53, (b, T)), np.ones((b, T), bool)
    cmask[1, 3:] = False
    cache = model.prefill(prefix, pmask, capacity=P + A + 2)      # spare slots stay masked
    both = model.extend(cache.rows(np.zeros(2, np.int32)), a_ids, amask, update=True).cache
    for q in range(2):
        out = model.extend(both.rows(np.array([q], np.int32)), cont, cmask, last_only=True)
        ids = np.concatenate([np.repeat(prefix, b, 0), np.repeat(a_ids[q:q + 1], b, 0), cont], 1)
        mask = np.concatenate([np.repeat(pmask, b, 0), np.repeat(amask[q:q + 1], b, 0), cmask], 1)
        ref = reference_hidden(weights, ids, mask)[:, P + A:]
        last = [np.flatnonzero(cmask[r])[-1] for r in range(b)]
        np.testing.assert_allclose(np.asarray(out.last_hidden), ref[np.arange(b), last], rtol=2e-4, atol=2e-4)
