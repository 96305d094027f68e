"""A GGUF whose layers of one tensor mix formats kept quantised (Q4_K) with others (Q3_K, Q2_K, float16) loads
with ``weights="quantised"``: that stack is dequantised whole, with a warning naming it (jaxrank/models/gguf.py).

Independent checks: the loaded stack equals the ``gguf`` package's own dequantisation of each layer; the
logits equal those of ``weights="float"``, where the ``gguf`` package dequantises every tensor.
"""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T, quants  # noqa: E402

from jaxrank.models import load_model  # noqa: E402

H, FF, V, L = 256, 512, 64, 2
_F16_AT = {T.Q4_K: [0, 2], T.Q6_K: [208], T.Q3_K: [108], T.Q2_K: [80, 82], T.Q8_0: [0]}   # d (and dmin) fields


def _raw(rng, qt, shape):
    """Random blocks of ``qt`` with small float16 scales (so the weights are finite and modest)."""
    blk, nb = GGML_QUANT_SIZES[qt]
    rows, nblk = int(np.prod(shape[:-1])), shape[-1] // blk
    b = rng.integers(0, 256, (rows, nblk, nb), dtype=np.uint8)
    for at in _F16_AT[qt]:
        b[..., at:at + 2] = (rng.standard_normal((rows, nblk)) * 0.005).astype(np.float16)[..., None].view(np.uint8)
    return b.reshape(rows, nblk * nb)


def _write(path, down):
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(L); w.add_embedding_length(H); w.add_feed_forward_length(FF); w.add_head_count(4)
    w.add_head_count_kv(2); w.add_context_length(256); w.add_layer_norm_rms_eps(1e-5); w.add_vocab_size(V)
    w.add_rope_freq_base(10000.0)
    raws = {}

    def add(name, shape, qt):
        if qt in (T.F32, T.F16):
            a = (1 + 0.1 * rng.standard_normal(shape)) if len(shape) == 1 else 0.05 * rng.standard_normal(shape)
            w.add_tensor(name, a.astype(np.float32 if qt == T.F32 else np.float16))
        else:
            raws[name] = (_raw(rng, qt, shape), qt, shape)
            w.add_tensor(name, raws[name][0], raw_dtype=qt)
    add("token_embd.weight", (V, H), T.Q8_0)
    add("output_norm.weight", (H,), T.F32)
    for i in range(L):
        add(f"blk.{i}.attn_norm.weight", (H,), T.F32)
        add(f"blk.{i}.ffn_norm.weight", (H,), T.F32)
        add(f"blk.{i}.attn_q.weight", (H, H), T.Q4_K)
        add(f"blk.{i}.attn_k.weight", (H // 2, H), T.Q4_K)
        add(f"blk.{i}.attn_v.weight", (H // 2, H), T.Q6_K)
        add(f"blk.{i}.attn_output.weight", (H, H), T.Q4_K)
        add(f"blk.{i}.ffn_gate.weight", (FF, H), T.Q4_K)
        add(f"blk.{i}.ffn_up.weight", (FF, H), T.Q6_K)
        add(f"blk.{i}.ffn_down.weight", (H, FF), down[i])
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    return raws


@pytest.mark.parametrize("down", [(T.Q3_K, T.Q4_K), (T.Q4_K, T.Q3_K), (T.Q2_K, T.Q6_K), (T.Q4_K, T.F16)],
                         ids=lambda d: "-".join(q.name for q in d))
def test_a_stack_mixing_kept_and_other_formats_is_dequantised(tmp_path, down):
    path = tmp_path / "mixed.gguf"
    raws = _write(path, down)
    with pytest.warns(UserWarning, match=r"blk\.\*\.ffn_down\.weight.*dequantised"):
        q = load_model(path, tokenizer=False, weights="quantised")
    w_down = q.model.weights()["w_down"]
    assert not hasattr(w_down, "dequantise") and hasattr(q.model.weights()["wq"], "dequantise")
    for i, qt in enumerate(down):
        if qt != T.F16:
            r, _, shape = raws[f"blk.{i}.ffn_down.weight"]
            want = np.asarray(quants.dequantize(r, qt), np.float32).reshape(shape)
            np.testing.assert_array_equal(np.asarray(w_down[i]), want)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = load_model(path, tokenizer=False, weights="float")
    ids = jnp.asarray([[1, 5, 9, 33, 2, 60]])
    got, want = np.asarray(q.model(ids)), np.asarray(f.model(ids))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())
