"""The bucketing of a scorer's first call (issue 33): every pool is padded to a bucket, scores unchanged.

Scores of the bucketed public entry points are compared with the independent NumPy/SciPy formulations of
``tests/reference.py`` and with the unpadded program (the same scorer staged inside ``jax.jit``, where
nothing is padded); a second pool of the same bucket must not compile anything (``CompileLog``, JAX's
"Compiling" records) nor trace the scorer again (a Python side effect in the traced function).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxrank as jr
from jaxrank import _batching, _graph, _sparse_inverse, compilation
from jaxrank.scoring import soft_bt

import reference as ref
from compile_log import CompileLog

ROOT = Path(__file__).resolve().parent.parent


# --- the buckets ---------------------------------------------------------------------------------------

def test_bucket_sizes_are_few_close_and_never_cross_a_threshold():
    below = soft_bt._below()
    seen = set()
    for n in range(1, 5000, 7):
        for r in (n, 3 * n + 1, n * n // 2 + 5):
            nb, rb = _batching.bucket_sizes(n, r, below=below)
            seen.add(nb)
            assert nb >= max(n, _batching.MIN_ITEMS) and rb >= max(r, _batching.MIN_COMPARISONS)
            assert nb <= max(1.5 * n, _batching.MIN_ITEMS) and (n <= 256 or nb <= 1.25 * n)
            for t in _batching.item_thresholds() + below:         # the algorithm's path is the pool's own
                assert (n >= t) == (nb >= t)
            assert _graph.use_dense(n, r) == _graph.use_dense(nb, rb)
            assert _batching.bucket_sizes(nb, rb, below=below) == (nb, rb)      # padding twice pads once
    # a handful of buckets per octave of items: 2 up to 256, 4 above (plus a threshold's size - 1)
    assert len([s for s in seen if 1024 < s <= 2048]) <= 5 and len([s for s in seen if 64 < s <= 128]) <= 3


def test_bucket():
    assert [_batching.bucket(n, 8) for n in (1, 8, 9, 12, 13, 17, 25, 100)] == [8, 8, 12, 12, 16, 24, 32, 128]
    assert [_batching.bucket(n, fine=True) for n in (257, 321, 385, 449, 513)] == [320, 384, 448, 512, 640]
    assert _batching.bucket(100, below=(128,)) == 127 and _batching.bucket(128, below=(128,)) == 128


def test_pad_and_unpad_keep_the_padding_contract():
    i, j, p, w, _ = ref.random_context(np.random.default_rng(0), 5, 7)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=5, weight=w)
    cp = _batching.pad(c, 8, 16)
    assert cp.num_items == 8 and cp.i.shape == (16,)
    assert not np.asarray(cp.item_mask)[5:].any() and not np.asarray(cp.weight)[7:].any()
    out = _batching.unpad({"s": np.zeros((3, 8)), "cov": np.zeros((3, 8, 8)), "it": np.zeros(3)}, 5, 1)
    assert out["s"].shape == (3, 5) and out["cov"].shape == (3, 5, 5) and out["it"].shape == (3,)


# --- same scores as unpadded ---------------------------------------------------------------------------

def _context(seed, n, r, weights=True):
    i, j, p, w, _ = ref.random_context(np.random.default_rng(seed), n, r, weights=weights)
    c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n, weight=w.astype(np.float32))
    return c, (i, j, p, w, n)


SCORERS = {
    "win_ratio": lambda c: jr.win_ratio(c),
    "average_probability": lambda c: jr.average_probability(c),
    "bradley_terry": lambda c: jr.bradley_terry(c),
    "bradley_terry_newman": lambda c: jr.bradley_terry(c, method="newman", tol=1e-6),
    "poe_gaussian": lambda c: jr.poe_gaussian(c),
    "poe_gaussian_hard_mean": lambda c: jr.poe_gaussian(c, hard=True, debias=True),
    "poe_gaussian_posterior": lambda c: jr.poe_gaussian_posterior(c).covariance,
    "poe_bradley_terry": lambda c: jr.poe_bradley_terry(c),
    "poe_bradley_terry_learn": lambda c: jr.poe_bradley_terry(c, debias="learn"),
    "poe_bradley_terry_ml": lambda c: jr.fit_poe_bradley_terry(c, eps=0.0).scores,
    "max_likelihood_ranking": lambda c: jr.max_likelihood_ranking(c),
    "poe_scores": lambda c: jr.poe_scores(c, jr.scoring.experts.soft_bradley_terry()),
}


@pytest.mark.parametrize("name", list(SCORERS))
def test_bucketed_scores_equal_the_unpadded_program(name):
    """11 items and 30 comparisons run padded to (12, 32); inside jit (tracers) nothing is padded."""
    c, _ = _context(1, 11, 30)
    assert _batching.bucket_sizes(11, 30, below=soft_bt._below()) != (11, 30)
    padded = np.asarray(SCORERS[name](c))
    unpadded = np.asarray(jax.jit(SCORERS[name])(c))
    assert padded.shape == unpadded.shape and padded.shape[-1] == 11
    np.testing.assert_allclose(padded, unpadded, atol=2e-5, rtol=1e-5)


def test_bucketed_scores_equal_independent_fits():
    c, (i, j, p, w, n) = _context(2, 13, 40)
    np.testing.assert_allclose(jr.win_ratio(c), ref.win_ratio(i, j, p, w, n), atol=1e-6)
    np.testing.assert_allclose(jr.average_probability(c), ref.average_probability(i, j, p, w, n), atol=1e-6)
    np.testing.assert_allclose(jr.poe_gaussian(c), ref.poe_gaussian(i, j, p, w, n), atol=1e-4)
    np.testing.assert_allclose(jr.poe_gaussian(c, hard=True), ref.poe_gaussian(i, j, p, w, n, hard=True), atol=1e-4)
    np.testing.assert_allclose(jr.poe_bradley_terry(c), ref.soft_bt(i, j, p, w, n)[0], atol=2e-4)
    s, g = ref.soft_bt(i, j, p, w, n, learn=True)
    sol = jr.fit_poe_bradley_terry(c, debias="learn")
    np.testing.assert_allclose(sol.scores, s, atol=1e-3)
    np.testing.assert_allclose(sol.gamma, g, atol=1e-3)
    np.testing.assert_allclose(jr.bradley_terry(c), ref.bradley_terry(i, j, p, w, n, 1 / (n - 1)), atol=2e-4)


def test_batched_pools_are_bucketed_per_context():
    cs = [_context(s, n, r)[0] for s, (n, r) in enumerate([(7, 15), (10, 25), (9, 30)])]
    c = jr.stack_contexts(cs)                      # [3] contexts of 10 items, 30 comparisons: bucket (12, 32)
    got = np.asarray(jr.poe_bradley_terry(c))
    assert got.shape == (3, 10)
    for k, ck in enumerate(cs):
        np.testing.assert_allclose(got[k, :ck.num_items], jr.poe_bradley_terry(ck), atol=2e-5)


def test_football_bucket_matches_the_unpadded_fit():
    """All 337 teams (a single context past the chord threshold) padded to 384 items: the same MAP scores."""
    try:
        jr.data.data_dir()
    except FileNotFoundError:
        pytest.skip("shared data folder not found")
    t = jr.io.read_comparisons(str(jr.data.data_dir() / "international_football" / "results.csv"),
                               item_a="home_team", item_b="away_team", score_a="home_score", score_b="away_score")
    c = jax.tree.map(lambda x: x[0], t.comparisons)
    got = jr.fit_poe_bradley_terry(c, score_prior=0.1)
    assert _batching.bucket_sizes(c.num_items, c.num_comparisons, below=soft_bt._below())[0] == 384
    want = jax.jit(lambda cc: jr.fit_poe_bradley_terry(cc, score_prior=0.1))(c)
    assert bool(got.converged)
    np.testing.assert_allclose(got.scores, want.scores, atol=1e-4)


# --- no recompilation within a bucket -------------------------------------------------------------------

@pytest.mark.parametrize("name", list(SCORERS))
def test_no_recompilation_within_a_bucket(name):
    first, _ = _context(3, 10, 26)
    second, _ = _context(4, 11, 29)                # another size of the same bucket (12, 32)
    SCORERS[name](first)
    with CompileLog() as log:
        SCORERS[name](second)
    assert log.records == []


def test_a_new_size_in_the_bucket_is_not_traced_again(monkeypatch):
    """A trace counter: a Python side effect in the soft-BT solver's traced loop runs only when JAX traces it."""
    from jaxrank.scoring import _soft_bt_newton

    traces = []
    real = _soft_bt_newton._newton

    def counted(*args, **kwargs):
        traces.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_soft_bt_newton, "_newton", counted)
    jax.clear_caches()
    for seed, (n, r) in enumerate([(20, 50), (21, 55), (24, 60), (19, 64)]):      # all in the bucket (24, 64)
        jr.poe_bradley_terry(_context(seed, n, r)[0])
    assert len(traces) == 1
    jr.poe_bradley_terry(_context(9, 30, 70)[0])                                    # the next bucket: traced
    assert len(traces) == 2


_WORKER = """
import json, sys, jax, numpy as np, jaxrank as jr
sys.path.insert(0, {tests!r})
import reference as ref
from jaxrank.scoring import gaussian
traces, real = [], gaussian._solve_one
def counted(*args, **kwargs):          # a Python side effect: runs only when JAX traces the scorer
    traces.append(1)
    return real(*args, **kwargs)
gaussian._solve_one = counted
events = {{}}
jax.monitoring.register_event_duration_secs_listener(
    lambda name, secs, **kw: events.__setitem__(name, events.get(name, 0.0) + secs))
jr.enable_compilation_cache({cache!r})
n, r = int(sys.argv[1]), int(sys.argv[2])
i, j, p, w, _ = ref.random_context(np.random.default_rng(n), n, r)
c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n)
s = np.asarray(jr.poe_gaussian(c))
print("JSON " + json.dumps({{"traces": len(traces), "scores": s.tolist(),
                             "loaded": events.get("/jax/compilation_cache/cache_retrieval_time_sec", 0.0)}}))
"""


def test_a_later_process_loads_the_buckets_program(tmp_path):
    """With the persistent cache on, a fresh process scoring another size of the bucket neither traces the
    scorer (its exported program is read from disk) nor compiles it (the executable comes from the cache)."""
    cache = tmp_path / "xla"
    code = _WORKER.format(tests=str(ROOT / "tests"), cache=str(cache))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    outs = []
    for n, r in ((10, 26), (11, 29)):
        run = subprocess.run([sys.executable, "-c", code, str(n), str(r)], capture_output=True, text=True,
                             env=env, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        outs.append(json.loads([x for x in run.stdout.splitlines() if x.startswith("JSON ")][-1][5:]))
    assert list((tmp_path / "exported").glob("*.jaxexport"))
    assert outs[0]["traces"] == 1 and outs[1]["traces"] == 0 and outs[1]["loaded"] > 0
    i, j, p, w, _ = ref.random_context(np.random.default_rng(11), 11, 29)
    np.testing.assert_allclose(outs[1]["scores"], ref.poe_gaussian(i, j, p, w, 11), atol=1e-4)


def test_exported_directory_only_while_the_cache_is_on(tmp_path):
    before = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        assert compilation.exported_directory() is None
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "xla"))
        assert compilation.exported_directory() == tmp_path / "exported"
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "mine"))
        assert compilation.exported_directory() == tmp_path / "mine-exported"
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


def test_the_last_padded_pool_is_reused_while_it_lives():
    """A loop scoring one pool pads and moves it once; another pool (or host arrays, which may change) is padded
    afresh."""
    c, _ = _context(5, 10, 26)
    a, b = _batching.pad(c, 12, 32), _batching.pad(c, 12, 32)
    assert a is b and isinstance(a.i, jax.Array)
    other, _ = _context(6, 10, 26)
    assert _batching.pad(other, 12, 32) is not a
    host = jr.Comparisons(*(np.array(x) for x in (c.i, c.j, c.p, c.weight, c.item_mask)), num_items=10)
    first = _batching.pad(host, 12, 32)
    host.p[0] = 0.0                                   # a NumPy array changed in place: the next pad sees it
    assert float(_batching.pad(host, 12, 32).p[0]) == 0.0 and first is not _batching.pad(host, 12, 32)
