"""Low-precision (bfloat16 / float16) weights and caches in the layer scan (jaxrank.models._llama_core).

XLA:CPU widened bfloat16 arrays sliced by a ``lax.scan`` to float32 before the loop (every stacked
weight, every call), which cost a bfloat16 judge its faster products; the scan now slices their
``uint16`` bits. These tests check that the compiled program holds no widened copy of a stacked
weight, that slicing the bits changes no output bit against the scan over the bfloat16 arrays, and
that gradients with respect to the vectors still flow (against a central difference) while
gradients with respect to low-precision weights are refused.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxrank.models import _bits, _llama_core as core
from jaxrank.models.llama import LlamaConfig, LlamaModel, extend_with_vectors

V = 97
CFG = LlamaConfig.from_hf(dict(model_type="llama", vocab_size=V, hidden_size=64, intermediate_size=96,
                               num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                               max_position_embeddings=128, rope_theta=500.0))


@pytest.fixture(scope="module")
def models():
    f32 = LlamaModel(CFG, rngs=nnx.Rngs(5))
    w = {n: a * (4.0 if not n.endswith("norm") else 1.0) for n, a in f32.weights().items()}
    return LlamaModel(CFG, params=w), LlamaModel(CFG, dtype=jnp.bfloat16, params=w)


def _ids(shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(0, V, shape), jnp.int32)


def _stacked_copies(text):
    """Lines of a compiled program that convert or bit-cast a whole stacked ``[L, a, b]`` array."""
    stacked = re.compile(r"(f32|u16)\[%d,\d+,\d+\]" % CFG.num_hidden_layers)
    return [ln for ln in text.split("ENTRY")[-1].splitlines()
            if ("convert" in ln) and "=" in ln and stacked.search(ln.split("=")[1].split("(")[0])]


def test_compiled_extend_keeps_no_widened_copy_of_the_stacked_weights(models):
    """With the weights' bits views (what the model passes) nothing stacked is converted or copied;
    with bfloat16 arrays traced inside a program (a user's jit) they are never widened to float32."""
    _, m16 = models
    cache = m16.prefill(_ids((1, 9)), capacity=16, cache_dtype=jnp.bfloat16)
    ids = _ids((2, 5), 1)
    mask = jnp.ones(ids.shape, bool)
    viewed = core._extend_jit.lower(CFG, _bits.bits_view(m16.weights()), cache, ids, mask, False)
    assert not _stacked_copies(viewed.compile().as_text())
    traced = core._extend_jit.lower(CFG, m16.weights(), cache, ids, mask, False).compile().as_text()
    assert not [ln for ln in _stacked_copies(traced) if "f32[" in ln.split("=")[1].split("(")[0]]


def test_bits_view_shares_the_weights_buffer_and_is_reused(models):
    _, m16 = models
    w = m16.weights()
    view = _bits.bits_view(w)
    assert isinstance(view["wq"], _bits.Bits) and view["wq"].dtype == jnp.bfloat16
    assert view["wq"].bits.unsafe_buffer_pointer() == w["wq"].unsafe_buffer_pointer()       # no copy
    assert _bits.bits_view(w)["wq"] is view["wq"]                                             # reused
    np.testing.assert_array_equal(np.asarray(view["wq"].value()), np.asarray(w["wq"]))


@pytest.mark.parametrize("how", ["views", "traced"])
def test_scan_over_bits_changes_no_result(models, monkeypatch, how):
    """Slicing the bits instead of the bfloat16 arrays is a reinterpretation, not arithmetic: the same
    pass with the bits switched off (``BITS_DTYPES = ()``, the scan and gather over the bfloat16 arrays
    as before) gives identical hidden states, caches and label logits."""
    _, m16 = models
    ids = _ids((2, 7), 2)
    mask = jnp.asarray(np.arange(7)[None] < np.array([[7], [5]]))
    cache = m16.prefill(_ids((1, 6)), capacity=13, cache_dtype=jnp.bfloat16).rows(jnp.zeros(2, jnp.int32))
    w = m16.weights()
    labels = jnp.asarray([3, 5], jnp.int32)

    def run(weights):
        out = core._run(CFG, weights, ids, mask, cache, True)
        return out, core._project(weights, out[1], None, labels)

    with_bits = run(_bits.bits_view(w) if how == "views" else w)
    monkeypatch.setattr(_bits, "BITS_DTYPES", ())
    without = run(w)
    for a, b in zip(jax.tree.leaves(with_bits), jax.tree.leaves(without)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_gradients_flow_to_vectors_and_are_refused_for_low_precision_weights(models):
    m32, m16 = models
    cache16 = m16.prefill(_ids((1, 6)), capacity=10, cache_dtype=jnp.bfloat16)
    ids = _ids((2, 4), 3)
    mask = jnp.ones(ids.shape, bool)
    index = jnp.asarray([[0, -1, -1, -1], [-1, 0, -1, -1]], jnp.int32)
    vec = 0.1 * jnp.ones((1, 64), jnp.float32)

    def loss(v, w, cache):
        return extend_with_vectors(CFG, w, cache, ids, mask, v, index).last_hidden.sum()

    # vectors: the gradient agrees with a central difference along a direction (bfloat16 weights)
    g = jax.grad(loss)(vec, m16.weights(), cache16)
    d = jax.random.normal(jax.random.key(0), vec.shape)
    h = 1e-2
    fd = (loss(vec + h * d, m16.weights(), cache16) - loss(vec - h * d, m16.weights(), cache16)) / (2 * h)
    assert np.isfinite(np.asarray(g)).all() and abs(float((g * d).sum()) - float(fd)) <= 0.05 * abs(float(fd)) + 1e-3
    # float32 weights: differentiable (nonzero gradient)
    cache32 = m32.prefill(_ids((1, 6)), capacity=10)
    gw = jax.grad(loss, argnums=1)(vec, m32.weights(), cache32)
    assert float(jnp.abs(gw["w_up"]).max()) > 0
    # bfloat16 weights or caches: a clear error, never a silent zero gradient
    with pytest.raises(TypeError, match="bfloat16/float16 model weights"):
        jax.grad(loss, argnums=1)(vec, m16.weights(), cache16)
    cache_b = m32.prefill(_ids((1, 6)), capacity=10, cache_dtype=jnp.bfloat16)
    with pytest.raises(TypeError, match="float32"):
        jax.grad(lambda k: loss(vec, m32.weights(), cache_b._replace(k=k)))(cache_b.k)
