"""``PromptJudge(batch_size="auto")``: the batch size from the device memory free (judges._buckets).

The row-size estimate is checked against the bytes of real caches built by the model; the choice of
rows against its definition (hypothesis). The accelerator path is exercised here with a device whose
memory statistics the test sets (plumbing only: no accelerator in CI); on a GPU it was measured by
``benchmarks/judge_gpu.py`` (``benchmarks/results/judge_gpu.md``).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxrank.judges import PromptJudge, pairwise_template
from jaxrank.judges._buckets import AUTO_ROWS, decoder_row_bytes, rows_that_fit
from jaxrank.models.llama import LlamaConfig, LlamaModel, parameter_shapes

CFG = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=8)


def _model():
    params = {n: jnp.ones(s) * 0.01 for n, s in parameter_shapes(CFG).items()}
    return LlamaModel(CFG, params=params)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_row_bytes_cover_the_real_cache_rows(dtype):
    m = _model()
    slots, new = 24, 8
    cache = m.prefill(np.ones((1, 16), np.int32), capacity=slots, cache_dtype=dtype)
    copy = cache.rows(np.zeros(4, np.int32))                       # what a batch of 4 rows reads
    cache_row = (copy.k.nbytes + copy.v.nbytes) // 4
    out = m.extend(cache.rows(np.zeros(4, np.int32)), np.ones((4, new), np.int32))
    est = decoder_row_bytes(CFG, slots, new, np.dtype(dtype).itemsize, fused_attention=True)
    hidden_row = out.hidden.nbytes // 4
    assert est >= cache_row + hidden_row
    # the cache term is exact: 2 L S K Dh bytes-per-element
    assert decoder_row_bytes(CFG, slots, 0, np.dtype(dtype).itemsize) - \
        decoder_row_bytes(CFG, 0, 0, np.dtype(dtype).itemsize) == cache_row
    # materialised scores add 3 H T (S + T) float32 values
    assert decoder_row_bytes(CFG, slots, new, 2, fused_attention=False) - \
        decoder_row_bytes(CFG, slots, new, 2) == 3 * 4 * 4 * new * (slots + new)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 10**9), st.integers(0, 10**12), st.floats(0.05, 1.0))
def test_rows_that_fit_is_the_largest_size_within_the_fraction(row, free, fraction):
    b = rows_that_fit(row, free, fraction=fraction)
    assert b in AUTO_ROWS
    fits = [s for s in AUTO_ROWS if s * row <= fraction * free]
    assert b == (max(fits) if fits else AUTO_ROWS[0])


def test_rows_that_fit_bad_row():
    with pytest.raises(ValueError, match="row_bytes"):
        rows_that_fit(0, 10**9)


@pytest.fixture(scope="module")
def tiny(smollm2):
    cfg = dataclasses.replace(CFG, vocab_size=smollm2.config.vocab_size, max_position_embeddings=2048)
    model = LlamaModel(cfg, rngs=__import__("flax").nnx.Rngs(3))
    return dataclasses.replace(smollm2, model=model, config=cfg, name="tiny")


def test_auto_on_a_cpu_is_eight_and_bad_values_are_refused(tiny):
    t = pairwise_template("summeval", "coherence")
    judge = PromptJudge(tiny, t)
    assert jax.default_backend() == "cpu" and judge.batch_size == 8 and not judge.auto_batch
    for bad in (0, -1, "big", True, 2.5):
        with pytest.raises(ValueError, match="batch_size"):
            PromptJudge(tiny, t, batch_size=bad)


def test_auto_sizes_each_call_from_free_memory(tiny, monkeypatch):
    """Plumbing only: a device reporting set memory statistics; the judge's p are unchanged."""
    import jaxrank.judges._forward as fwd

    t = pairwise_template("summeval", "coherence")
    ctx = "The council met on Monday. It approved the new park and a bus line."
    cands = ["The council approved a park.", "A park and a bus line were approved.", "Monday's meeting.",
             "The council met and approved a park and a bus line on Monday."]
    i, j = np.nonzero(~np.eye(4, dtype=bool))
    ref = PromptJudge(tiny, t, batch_size=8).compare(ctx, cands, i, j).p

    class Device:
        def __init__(self, free):
            self.free = free

        def memory_stats(self):
            return {"bytes_limit": self.free + 1000, "bytes_in_use": 1000}

    seen = []
    real = fwd.plan_batches
    monkeypatch.setattr(fwd, "plan_batches", lambda lens, bs, **kw: seen.append(bs) or real(lens, bs, **kw))
    judge = PromptJudge(tiny, t, batch_size=8, batch_cost=2048)
    judge.auto_batch = True
    for free, want in ((10**12, 256), (1, 8)):
        monkeypatch.setattr(fwd.jax, "local_devices", lambda: [Device(free)])
        seen.clear()
        p = judge.compare(ctx, cands, i, j).p
        assert set(seen) == {want}
        np.testing.assert_allclose(p, ref, atol=1e-5)
