"""PromptJudge(mesh=): a decoder split tensor-parallel over "model" and data-parallel over "data" judges as
one device does.

The 8-device checks run in a subprocess (``XLA_FLAGS=--xla_force_host_platform_device_count=8`` is read when
jax starts; this process keeps its one CPU device, as ``tests/test_sharding.py`` does). There, tiny random
decoders with a byte tokenizer (``tests/tiny_lm.py``) are judged on one device and on meshes ``(1, 8)``,
``(2, 4)`` and ``(8, 1)`` (data x model): a multi-head Llama (key/value heads split, both embeddings split
over the vocabulary) and a grouped-query Qwen2 with q/k/v biases, tied embeddings and 2 key/value heads
(replicated over 4 model devices). The single-device judge is the reference (itself checked
against full forward passes in ``tests/test_judging.py``); the sharded judge must give the same ``p`` within
``P_TOL`` and the same label log-probabilities within ``LOGP_TOL`` (float32 sums in another order: observed
up to 4.8e-7 and 1.9e-6). The weights' shards are compared with NumPy slices of the weights (each device
holds its ``1/m`` of q_proj's columns), and the cache's shards with its heads and rows.
"""

import collections
import os
import re
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import PartitionSpec as P

from jaxrank.judges._buckets import batch_sizes, plan_batches
from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import pairwise_template
from jaxrank.models._quant import quantise_int8
from jaxrank.models.llama import LlamaConfig, LlamaModel
from jaxrank.models.loading import LoadedModel
from jaxrank.models.partition import param_specs, shard_model, shard_params
from tiny_lm import CHAT_TEMPLATE, EOS, PAD, ByteTokenizer, sharpen

P_TOL, LOGP_TOL = 2e-6, 1e-5
CTX = "The city council approved a new park on Monday. It will open next spring near the river."
CANDS = ["A park was approved by the council.", "The council met on Monday to talk.",
         "A new riverside park opens next spring."]
I, J = [0, 1, 2, 1], [1, 0, 0, 2]


def tiny_decoder(**overrides) -> LoadedModel:
    """A random 2-layer decoder, 8 query heads of width 8, vocabulary 264 (the byte tokenizer's 259 ids and
    5 never used, so that 4 and 8 devices divide it), weights scaled 3x so that ``p`` is far from 0.5."""
    cfg = dict(vocab_size=264, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=8,
               num_key_value_heads=8, head_dim=8, max_position_embeddings=4096, rope_theta=1e4,
               tie_word_embeddings=False, model_type="llama")
    cfg = LlamaConfig.from_hf({**cfg, **overrides})
    lm = LoadedModel(LlamaModel(cfg, rngs=nnx.Rngs(1)), cfg, ByteTokenizer(), CHAT_TEMPLATE,
                     f"tiny-{cfg.model_type}", "llama", None, (EOS,), PAD)
    return sharpen(lm, 3.0)


def _check_shards(array, whole, axis, parts):
    """Every device's shard is the NumPy slice of ``whole`` at its index, ``1/parts`` of ``axis``."""
    assert len(array.addressable_shards) == 8
    for shard in array.addressable_shards:
        assert shard.data.shape[axis] == whole.shape[axis] // parts, (shard.data.shape, whole.shape, parts)
        np.testing.assert_array_equal(np.asarray(shard.data), whole[shard.index])


def _check_judge(lm, judge, ref, what):
    res = judge.compare(CTX, CANDS, I, J)
    np.testing.assert_allclose(res.p, ref.p, atol=P_TOL, err_msg=what)
    np.testing.assert_allclose(res.logits, ref.logits, atol=LOGP_TOL, err_msg=what)
    assert lm.model.wq[...].sharding.num_devices == 1                          # the model passed in is unchanged
    return float(np.abs(res.p - ref.p).max()), float(np.abs(res.logits - ref.logits).max())


def _check_weights_and_cache(lm, judge, d, m):
    """Each device holds 1/m of the split weights, and the caches are split by heads and rows."""
    cfg, w = lm.config, judge.lm.model.weights()
    weights = {n: np.asarray(a) for n, a in lm.model.weights().items() if isinstance(a, jax.Array)}
    kv = m if cfg.num_key_value_heads % m == 0 else 1              # fewer kv heads than devices: replicated
    _check_shards(w["wq"], weights["wq"], 1, m)                    # q_proj: 1/m of its columns (whole heads)
    _check_shards(w["wo"], weights["wo"], 2, m)                    # o_proj: 1/m of its rows
    _check_shards(w["w_gate"], weights["w_gate"], 1, m)
    if "w_down" in weights:
        _check_shards(w["w_down"], weights["w_down"], 2, m)
    _check_shards(w["wk"], weights["wk"], 1, kv)
    _check_shards(w["embed"], weights["embed"], 0, m)              # vocabulary-parallel (264 rows)
    if cfg.attention_bias:
        _check_shards(w["bq"], weights["bq"], 1, m)
        _check_shards(w["bv"], weights["bv"], 1, kv)
    if "lm_head" in w:
        _check_shards(w["lm_head"], weights["lm_head"], 0, m)      # split over the vocabulary
    runner, hkv = judge.runner, cfg.num_key_value_heads
    ids = np.full((8, 16), 5, np.int32)
    cache = runner.prefill(ids[:1], capacity=32)                   # a prefix: batch 1, replicated over "data"
    assert {s.data.shape for s in cache.k.addressable_shards} == {(2, 1, 32, hkv // kv, 8)}
    out = runner.extend(runner.rows(cache, np.zeros(8, np.int32)), ids, update=True)
    assert {s.data.shape for s in out.cache.k.addressable_shards} == {(2, 8 // d, 32, hkv // kv, 8)}
    assert {s.data.shape for s in out.hidden.addressable_shards} == {(8 // d, 16, 64)}
    return cache, ids


def _collectives(runner, cache, ids):
    """The collectives of the compiled ``extend`` (its layer scan's body once): ``{(op, shape): count}``."""
    hlo = runner._extend.lower(nnx.state(runner.model), cache, runner.place(ids), runner.place(ids > 0),
                               update=False).compile().as_text()
    found = re.findall(r"= (\S+?)\{[^}]*\} (all-reduce|all-gather|all-to-all|reduce-scatter)\(", hlo)
    return collections.Counter((op, shape) for shape, op in found)


def multi_device_checks():
    """Run with 8 CPU devices (see :func:`test_eight_devices`); raises on any failure."""
    import warnings
    warnings.simplefilter("ignore")                 # random tiny models: the label-mass warning
    assert len(jax.devices()) == 8, jax.devices()
    t = pairwise_template("summeval", "coherence")
    mesh = lambda d, m: jax.make_mesh((d, m), ("data", "model"))
    errors = []
    # multi-head Llama: k/v heads split on every model axis; the mixed-A path (KVCache.rows) on (2, 4)
    lm = tiny_decoder()
    ref = PromptJudge(lm, t, batch_size=4).compare(CTX, CANDS, I, J)
    assert np.ptp(ref.p) > 1e-3, ref.p                                          # the pairs really differ
    for d, m, cost in ((1, 8, 0), (2, 4, 10**6), (8, 1, 0)):
        judge = PromptJudge(lm, t, batch_size=4, batch_cost=cost, mesh=mesh(d, m))
        errors.append(_check_judge(lm, judge, ref, f"llama {(d, m)}"))
        if (d, m) == (2, 4):
            cache, ids = _check_weights_and_cache(lm, judge, d, m)
            # Megatron's layer: one all-reduce of the [B/d, T, D] activations after the attention's output
            # projection and one after the MLP's down projection (the layer scan's body, counted once), one
            # after the vocabulary-parallel embedding lookup (the rest: the last rows' [B/d, D] states);
            # nothing is gathered (no weight travels)
            found = _collectives(judge.runner, cache, ids)
            assert found[("all-reduce", "f32[4,16,64]")] == 3 and found.total() <= 4, found
            assert not any(op == "all-gather" for op, _ in found), found
    # Qwen2 (q/k/v biases, tied embeddings) with 2 key/value heads on 4 model devices: k/v replicated; its MLP
    # up and down projections kept quantised (int8 codes, one float32 scale per output row)
    lm = tiny_decoder(model_type="qwen2", num_key_value_heads=2, tie_word_embeddings=True)
    assert lm.config.attention_bias
    floats = {n: np.asarray(a) for n, a in lm.model.weights().items()}
    for n in ("w_up", "w_down"):
        getattr(lm.model, n).set_value(quantise_int8(floats[n]))
    ref = PromptJudge(lm, t, batch_size=4).compare(CTX, CANDS, I, J)
    judge = PromptJudge(lm, t, batch_size=4, mesh=mesh(2, 4))
    errors.append(_check_judge(lm, judge, ref, "qwen2 GQA int8 MLP (2, 4)"))
    _check_weights_and_cache(lm, judge, 2, 4)
    sharded, q = judge.lm.model.weights(), lm.model.weights()
    up, down, q_up, q_down = sharded["w_up"], sharded["w_down"], q["w_up"], q["w_down"]
    _check_shards(up.lo, np.asarray(q_up.lo), 1, 4)                  # codes and scales: output rows split
    _check_shards(up.d, np.asarray(q_up.d), 1, 4)
    _check_shards(down.lo, np.asarray(q_down.lo), 2, 4)              # codes: input columns split
    _check_shards(down.d, np.asarray(q_down.d), 2, 1)                # a per-row scale [L, D, 1]: replicated
    # host parameters placed straight onto their shards keep them in a model built from them
    built = LlamaModel(lm.config, params=shard_params(lm.config, floats, mesh(2, 4)))
    assert built.wq[...].sharding.spec == P(None, "model", None) and built.wk[...].sharding.spec == P(None, None, None)
    # a model axis that does not divide the heads: a clear error
    with pytest.raises(ValueError, match="'model' has 3 devices.*num_attention_heads=8"):
        PromptJudge(lm, t, mesh=jax.make_mesh((1, 3), ("data", "model"), devices=jax.devices()[:3]))
    with pytest.raises(ValueError, match="'model' has 8 devices.*num_attention_heads=4"):
        shard_model(tiny_decoder(num_attention_heads=4, num_key_value_heads=4, head_dim=16).model, mesh(1, 8))
    print(f"max |dp| {max(e[0] for e in errors):.2e}, max |dlogp| {max(e[1] for e in errors):.2e}")
    print("8 devices: OK")


def test_eight_devices():
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip())
    res = subprocess.run([sys.executable, "-c", "import test_sharded_judge as t; t.multi_device_checks()"],
                         cwd=Path(__file__).parent, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and "8 devices: OK" in res.stdout, res.stdout + res.stderr[-5000:]
    print(res.stdout)


# --------------------------------------------------------------------- this process (its devices, one CPU)
def test_mesh_errors_name_the_argument():
    lm = tiny_decoder()
    t = pairwise_template("summeval", "coherence")
    with pytest.raises(ValueError, match="mesh must be a jax.sharding.Mesh"):
        PromptJudge(lm, t, mesh=(2, 4))
    with pytest.raises(ValueError, match="mesh has axes .*'x'"):
        PromptJudge(lm, t, mesh=jax.make_mesh((1, 1), ("x", "model")))
    import dataclasses
    with pytest.raises(ValueError, match="T5 judge runs on one device"):
        PromptJudge(dataclasses.replace(lm, architecture="t5"), t, mesh=jax.make_mesh((1, 1), ("data", "model")))


def test_param_specs_split_heads_and_mlp():
    """The specs by hand: q/k/v and gate/up split by output rows ([L, out, in]), o/down by input columns."""
    cfg = LlamaConfig.from_hf(dict(vocab_size=264, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=8, num_key_value_heads=2, head_dim=8,
                                   tie_word_embeddings=False, model_type="qwen2"))
    shapes = {"wq": (2, 64, 64), "wk": (2, 16, 64), "wo": (2, 64, 64), "w_gate": (2, 128, 64),
              "w_down": (2, 64, 128), "bq": (2, 64), "bk": (2, 16), "embed": (264, 64), "lm_head": (264, 64),
              "norm": (64,)}
    shapes = {n: np.zeros(s, np.float32) for n, s in shapes.items()}

    class FakeMesh:                 # param_specs reads only the axis sizes
        axis_names, shape = ("data", "model"), {"data": 1, "model": 4}

    s = param_specs(cfg, shapes, FakeMesh())
    assert s["wq"] == P(None, "model", None) and s["wo"] == P(None, None, "model")
    assert s["w_gate"] == P(None, "model", None) and s["w_down"] == P(None, None, "model")
    assert s["bq"] == P(None, "model")
    assert s["wk"] == P(None, None, None) and s["bk"] == P(None, None)       # 2 kv heads on 4 devices
    assert s["embed"] == P("model", None) and s["norm"] == P(None)
    assert s["lm_head"] == P("model", None)                                      # 264 = 66 * 4
    FakeMesh.shape = {"data": 1, "model": 2}
    s = param_specs(cfg, shapes, FakeMesh())
    assert s["wk"] == P(None, "model", None) and s["bk"] == P(None, "model")
    FakeMesh.shape = {"data": 8, "model": 1}
    assert all(all(a is None for a in spec) for spec in param_specs(cfg, shapes, FakeMesh()).values())


def test_batch_sizes_round_up_to_the_data_axis():
    assert batch_sizes(8, 1) == (1, 2, 4, 8)
    assert batch_sizes(8, 2) == (2, 4, 8) and batch_sizes(8, 8) == (8,) and batch_sizes(5, 2) == (2, 4, 6)
    for n in range(1, 12):
        plan = plan_batches(list(range(n)), 4, multiple=2)
        assert [s for s, _, _ in plan] == [0] + [e for _, e, _ in plan][:-1] and plan[-1][1] == n
        assert all(b % 2 == 0 and e - s <= min(b, 4) for s, e, b in plan)
    with pytest.raises(ValueError, match="multiple"):
        batch_sizes(4, 0)


@settings(max_examples=60, deadline=None)
@given(heads=st.integers(1, 16), group=st.sampled_from([1, 2, 4]), head_dim=st.sampled_from([2, 4, 8]),
       ffn=st.integers(1, 64), vocab=st.integers(8, 80), m=st.sampled_from([1, 2, 3, 4, 8]), tied=st.booleans())
def test_param_specs_split_whole_heads_or_refuse(heads, group, head_dim, ffn, vocab, m, tied):
    """For any config and model axis: a ValueError exactly when ``m`` does not divide the query heads or the MLP
    width; else every split dimension splits into ``m`` whole heads (or whole MLP columns, vocabulary rows), and
    keys/values are split exactly when ``m`` divides their heads."""
    kv = max(1, heads // group) if heads % group == 0 else heads
    cfg = LlamaConfig.from_hf(dict(vocab_size=vocab, hidden_size=16, intermediate_size=ffn, num_hidden_layers=2,
                                   num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                                   tie_word_embeddings=tied, model_type="qwen2"))
    shapes = {"wq": (2, heads * head_dim, 16), "wk": (2, kv * head_dim, 16), "bv": (2, kv * head_dim),
              "wo": (2, 16, heads * head_dim), "w_up": (2, ffn, 16), "w_down": (2, 16, ffn), "embed": (vocab, 16)}
    if not tied:
        shapes["lm_head"] = (vocab, 16)

    class FakeMesh:
        axis_names, shape = ("data", "model"), {"data": 1, "model": m}

    if m > 1 and (heads % m or ffn % m):
        with pytest.raises(ValueError, match="mesh axis 'model' has"):
            param_specs(cfg, shapes, FakeMesh())
        return
    specs = param_specs(cfg, shapes, FakeMesh())
    for name, shape in shapes.items():
        split = [d for d, a in enumerate(specs[name]) if a == "model"]
        assert len(specs[name]) == len(shape) and len(split) <= 1
        want = {"wq": m > 1, "wo": m > 1, "w_up": m > 1, "w_down": m > 1, "embed": m > 1 and vocab % m == 0,
                "wk": m > 1 and kv % m == 0, "bv": m > 1 and kv % m == 0, "lm_head": m > 1 and vocab % m == 0}
        assert bool(split) == want[name], (name, specs[name])
        if split and name in ("wq", "wo", "wk", "bv"):
            assert (shape[split[0]] // m) % head_dim == 0                      # whole heads per device
