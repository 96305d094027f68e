"""shard_contexts: contexts split over devices give the single-device results.

The 8-device checks run in a subprocess, because the device count of the CPU
platform (``XLA_FLAGS=--xla_force_host_platform_device_count=8``) is fixed when
jax starts; the other checks run here, on this process's devices (one CPU).
"""

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank as jr
from compile_log import CompileLog
from jaxrank.sharding import AXIS, _sharded, shard_contexts


def _contexts(shape, *, n=8, r=24, seed=0):
    """Random contexts of ragged sizes (padded items masked, some weights 0), one empty context."""
    rng = np.random.default_rng(seed)
    b = int(np.prod(shape))
    real = rng.integers(3, n + 1, b)
    i = np.floor(rng.uniform(size=(b, r)) * real[:, None]).astype(int)
    j = (i + 1 + np.floor(rng.uniform(size=(b, r)) * (real[:, None] - 1)).astype(int)) % real[:, None]
    p = rng.uniform(0.02, 0.98, (b, r)).astype(np.float32)
    w = rng.choice([0.0, 1.0, 2.0], size=(b, r), p=[0.2, 0.6, 0.2]).astype(np.float32)
    w[b // 2] = 0                                  # a real context with no comparisons at all
    mask = np.arange(n)[None, :] < real[:, None]
    rs = lambda x: x.reshape(tuple(shape) + x.shape[1:])
    return jr.Comparisons.from_pairs(rs(i), rs(j), rs(p), num_items=n, weight=rs(w), item_mask=rs(mask))


def _average_probability_numpy(c):
    """METHODS.md §2 by hand: won weight over played weight, 0.5 when an item played nothing."""
    i, j, p, w, m = (np.asarray(x).reshape(-1, x.shape[-1]) for x in (c.i, c.j, c.p, c.weight, c.item_mask))
    out = np.full(m.shape, 0.5)
    for b in range(len(i)):
        won, games = np.zeros(c.num_items), np.zeros(c.num_items)
        np.add.at(won, i[b], w[b] * p[b])
        np.add.at(won, j[b], w[b] * (1 - p[b]))
        np.add.at(games, i[b], w[b])
        np.add.at(games, j[b], w[b])
        live = (games > 0) & m[b]
        out[b, live] = won[live] / games[live]
    return out.reshape(c.batch_shape + (c.num_items,))


def _assert_same(a, b, what):
    assert jax.tree.structure(a) == jax.tree.structure(b), what
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert x.shape == y.shape and x.dtype == y.dtype, (what, x.shape, y.shape)
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-5, err_msg=what)


_SCORERS = {   # name -> (scorer, options)
    "win_ratio": (jr.win_ratio, {}),
    "average_probability": (jr.average_probability, {}),
    "bradley_terry": (jr.bradley_terry, {}),
    "poe_gaussian": (jr.poe_gaussian, {}),
    "poe_bradley_terry_learn": (jr.poe_bradley_terry, {"debias": "learn"}),
    "fit_poe_bradley_terry_learn": (jr.fit_poe_bradley_terry, {"debias": "learn"}),
}


def multi_device_checks():
    """Run with 8 CPU devices (see :func:`test_eight_devices`); raises on any failure."""
    devices = jax.devices()
    assert len(devices) == 8 and all(d.platform == "cpu" for d in devices), devices
    with warnings.catch_warnings(record=True) as caught:      # jaxlib 0.10: LAPACK pool deadlock warning
        warnings.simplefilter("always")
        shard_contexts(jr.win_ratio, _contexts((3,)))
    if (0, 10) <= jax.__version_info__ < (0, 11, 1):
        assert any("deadlock" in str(w.message) for w in caught), caught
    warnings.simplefilter("ignore", RuntimeWarning)

    # 261 contexts, two batch axes: padded to 264, 33 a device, so each device's while loops
    # also move their last straggler to a small batch (_batching.while_per_context) on their own
    c = _contexts((3, 87), seed=1)
    for name, (scorer, kw) in _SCORERS.items():
        _assert_same(shard_contexts(scorer, c, **kw), scorer(c, **kw), name)
    sol = shard_contexts(jr.fit_poe_bradley_terry, c, debias="learn")
    assert isinstance(sol, jr.SoftBTSolution) and sol.scores.shape == (3, 87, 8) and sol.gamma.shape == (3, 87)
    assert bool(jnp.all(sol.converged)) and bool(jnp.all(jnp.isfinite(sol.scores)))
    np.testing.assert_allclose(shard_contexts(jr.average_probability, c), _average_probability_numpy(c),
                               rtol=1e-5, atol=1e-6)

    # per-context (split) and shared (copied) array options
    thr = jnp.asarray(np.random.default_rng(2).uniform(0.3, 0.7, (3, 87)), jnp.float32)
    _assert_same(shard_contexts(jr.win_ratio, c, threshold=thr), jr.win_ratio(c, threshold=thr), "threshold")
    _assert_same(shard_contexts(jr.poe_gaussian, c, alpha=jnp.float32(2.5)), jr.poe_gaussian(c, alpha=2.5), "alpha")

    # each device solves its own contexts: no collective in the compiled program (an AOT cache hit)
    run, split, _ = _sharded(jr.fit_poe_bradley_terry, tuple(devices), (("debias", str, "learn"),), (), ())
    flat = jax.ShapeDtypeStruct((264, 24), jnp.float32, sharding=split)
    spec = jr.Comparisons(i=flat.update(dtype=jnp.int32), j=flat.update(dtype=jnp.int32), p=flat, weight=flat,
                          item_mask=jax.ShapeDtypeStruct((264, 8), jnp.bool_, sharding=split), num_items=8)
    hlo = run.lower(spec, {}, {}).compile().as_text()
    assert "while" in hlo
    assert not re.search(r"all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter", hlo)

    # 16 contexts, 2 a device: the result stays split over the 8 devices
    c16 = _contexts((16,), seed=3)
    out = shard_contexts(jr.average_probability, c16)
    assert len(out.sharding.device_set) == 8 and out.sharding.spec == jax.P(AXIS), out.sharding
    assert sorted(s.data.shape for s in out.addressable_shards) == [(2, 8)] * 8
    np.testing.assert_allclose(out, _average_probability_numpy(c16), rtol=1e-5, atol=1e-6)

    # a second call with new data of the same shapes compiles nothing
    c2 = _contexts((3, 87), seed=4)
    with CompileLog() as log:
        jax.block_until_ready(shard_contexts(jr.fit_poe_bradley_terry, c2, debias="learn"))
    assert log.records == [], log.records
    print("8 devices: OK")


def test_eight_devices():
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip())
    res = subprocess.run([sys.executable, "-c", "import test_sharding; test_sharding.multi_device_checks()"],
                         cwd=Path(__file__).parent, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "8 devices: OK" in res.stdout, res.stdout + res.stderr[-5000:]


# --------------------------------------------------------------------- this process (its devices, one CPU)
def test_one_device_pytrees_and_array_options():
    c = _contexts((2, 3), n=6, r=12, seed=6)
    one = jax.devices()[:1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # one device: no warning
        shard_contexts(jr.average_probability, c, devices=one)
    _assert_same(shard_contexts(jr.average_probability, c, devices=one), jr.average_probability(c), "avg")
    _assert_same(shard_contexts(jr.poe_gaussian_posterior, c, devices=one), jr.poe_gaussian_posterior(c), "post")
    thr = jnp.asarray(np.random.default_rng(7).uniform(0.3, 0.7, (2, 3)), jnp.float32)   # split per context
    _assert_same(shard_contexts(jr.win_ratio, c, threshold=thr), jr.win_ratio(c, threshold=thr), "threshold")
    np.testing.assert_allclose(shard_contexts(jr.average_probability, c), _average_probability_numpy(c),
                               rtol=1e-5, atol=1e-6)


def test_no_recompilation_on_second_call_with_same_shapes():
    c1, c2, c3 = _contexts((7,), seed=8), _contexts((7,), seed=9), _contexts((9,), seed=8)
    jax.block_until_ready(shard_contexts(jr.poe_gaussian, c1, debias="mean"))
    with CompileLog() as log:
        jax.block_until_ready(shard_contexts(jr.poe_gaussian, c2, debias="mean"))
    assert log.records == []
    with CompileLog() as log:          # positive control: a new shape does compile
        jax.block_until_ready(shard_contexts(jr.poe_gaussian, c3, debias="mean"))
    assert log.records


def test_bad_arguments():
    c = _contexts((4,), seed=10)
    d0 = jax.devices()[0]
    with pytest.raises(ValueError, match="devices is empty"):
        shard_contexts(jr.win_ratio, c, devices=[])
    with pytest.raises(ValueError, match="twice"):
        shard_contexts(jr.win_ratio, c, devices=[d0, d0])
    with pytest.raises(ValueError, match="not one device"):
        shard_contexts(jr.win_ratio, c, devices=d0)
    with pytest.raises(ValueError, match=r"devices\[0\]"):
        shard_contexts(jr.win_ratio, c, devices=["cpu"])
    with pytest.raises(ValueError, match="no batch axis"):
        shard_contexts(jr.win_ratio, jax.tree.map(lambda x: x[0], c))
    with pytest.raises(ValueError, match="no contexts"):
        shard_contexts(jr.win_ratio, jax.tree.map(lambda x: x[:0], c))
    with pytest.raises(ValueError, match="Comparisons"):
        shard_contexts(jr.win_ratio, np.zeros((4, 3)))
    with pytest.raises(ValueError, match="callable"):
        shard_contexts("win_ratio", c)
    with pytest.raises(ValueError, match="hashable"):
        shard_contexts(jr.poe_bradley_terry, c, debias=["learn"])
    with pytest.raises(ValueError, match="first axis"):
        shard_contexts(lambda cc: jnp.sum(cc.p), c)
    with pytest.raises(ValueError, match="debias"):     # the scorer's own checks still apply
        shard_contexts(jr.poe_bradley_terry, c, debias="bogus")
