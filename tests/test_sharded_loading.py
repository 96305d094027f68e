"""``load_model(path, mesh=)``: a checkpoint's weights go from host memory straight to their shards.

A model larger than one device must never sit whole on one device: with ``mesh=`` every parameter is built on
the host (CPU device) and placed by ``partition.param_shardings``. Checked in a subprocess with 8 CPU devices
(``XLA_FLAGS`` is read when jax starts): a tiny Llama checkpoint written by transformers loads onto a (2, 4)
mesh with each device holding the NumPy slice of its shard (1/4 of q_proj's rows, whole heads), float and
int8-quantised; a PromptJudge on it gives the single-device judge's p (itself checked against full forward
passes in tests/test_judging.py). In this process: an encoder with a mesh is refused with a clear error.
"""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

P_TOL = 2e-6


def _checkpoint(d: Path) -> Path:
    import torch
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=264, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=8, num_key_value_heads=4, head_dim=8,
                                   max_position_embeddings=4096, tie_word_embeddings=False)
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            p.copy_((1.0 if n.endswith("norm.weight") else 0.0) + 0.3 * torch.randn_like(p))
    m.save_pretrained(d)
    return d


def multi_device_checks(folder: str):
    import warnings

    from jaxrank.judges.pairwise import PromptJudge
    from jaxrank.judges.prompts import pairwise_template
    from jaxrank.models import load_model
    from tiny_lm import CHAT_TEMPLATE, ByteTokenizer

    warnings.simplefilter("ignore")
    assert len(jax.devices()) == 8
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    ctx, cands = "The park opens in spring.", ["A park opens.", "Spring.", "The park opens in spring."]
    i, j = [0, 1, 2, 0], [1, 0, 0, 2]
    t = pairwise_template("summeval", "coherence")
    as_judge = lambda lm: dataclasses.replace(lm, tokenizer=ByteTokenizer(), chat_template=CHAT_TEMPLATE)
    for weights in ("float", "quantised"):
        one = as_judge(load_model(folder, tokenizer=False, weights=weights))
        split = as_judge(load_model(folder, tokenizer=False, weights=weights, mesh=mesh))
        wq_one, wq = one.model.weights()["wq"], split.model.weights()["wq"]
        if weights == "float":
            whole = np.asarray(wq_one)
            assert wq_one.sharding.num_devices == 1 and wq.sharding.num_devices == 8
            for shard in wq.addressable_shards:          # [L, heads x head_dim, D]: rows over "model"
                assert shard.data.shape == (2, 16, 64), shard.data.shape
                np.testing.assert_array_equal(np.asarray(shard.data), whole[shard.index])
        else:
            assert {s.data.shape for s in wq.lo.addressable_shards} == {(2, 16, 64)}   # int8 codes, split
        ref = PromptJudge(one, t).compare(ctx, cands, i, j)
        got = PromptJudge(split, t, mesh=mesh).compare(ctx, cands, i, j)
        np.testing.assert_allclose(got.p, ref.p, atol=P_TOL)
        print(weights, "max |dp|", float(np.abs(got.p - ref.p).max()), "spread", float(np.ptp(ref.p)))
    print("8 devices: OK")


def test_load_onto_a_mesh_of_eight_devices(tmp_path):
    pytest.importorskip("transformers")
    folder = _checkpoint(tmp_path / "tiny-llama")
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip())
    res = subprocess.run([sys.executable, "-c", f"import test_sharded_loading as t; t.multi_device_checks({str(folder)!r})"],
                         cwd=Path(__file__).parent, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and "8 devices: OK" in res.stdout, res.stdout + res.stderr[-5000:]
    print(res.stdout)


def test_an_encoder_on_a_mesh_is_refused(tmp_path):
    from jaxrank.models import load_model
    from jaxrank.models.registry import resolve

    try:
        path = resolve("minilm-l6")
    except FileNotFoundError:
        pytest.skip("minilm-l6 not installed")
    with pytest.raises(ValueError, match="mesh: bert models load on one device"):
        load_model(path, mesh=jax.make_mesh((1, 1), ("data", "model")))
