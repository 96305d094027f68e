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
pool = np.load(sys.argv[1])
c = jr.Comparisons.from_pairs(pool["i"], pool["j"], pool["p"].astype(np.float32), num_items=int(pool["n"]))
scores = {{"poe_gaussian": np.asarray(jr.poe_gaussian(c)).tolist(),
           "win_ratio": np.asarray(jr.win_ratio(c)).tolist(),
           "poe_bradley_terry": np.asarray(jr.poe_bradley_terry(c)).tolist()}}
print("JSON " + json.dumps({{"traces": len(traces), "scores": scores, "events": events,
                             "scipy_linalg": "scipy.linalg" in sys.modules}}))
"""

_STAGES = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
           "/jax/core/compile/backend_compile_duration", "/jax/compilation_cache/cache_retrieval_time_sec")


def test_a_later_process_runs_the_buckets_executable(tmp_path):
    """With the persistent cache on, a fresh process scoring another size of the bucket neither traces, lowers
    nor compiles (JAX reports none of those stages): it loads the bucket's compiled executable, binding LAPACK
    without importing the package ``scipy.linalg``. Its scores are those of the NumPy/SciPy references, and the
    first process's are too."""
    cache = tmp_path / "xla"
    code = _WORKER.format(cache=str(cache))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    outs = []
    for n, r in ((10, 26), (11, 29)):
        i, j, p, w, _ = ref.random_context(np.random.default_rng(n), n, r)
        np.savez(tmp_path / "pool.npz", i=i, j=j, p=p, n=n)
        run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "pool.npz")], capture_output=True,
                             text=True, env=env, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        outs.append(json.loads([x for x in run.stdout.splitlines() if x.startswith("JSON ")][-1][5:]))
    assert list((tmp_path / "exported").glob("*.jaxexport"))
    assert len(list((tmp_path / "compiled").glob("*.jaxexec"))) == 3          # counting, PoE-g, PoE-BT fit
    assert outs[0]["traces"] == 1 and outs[1]["traces"] == 0
    assert not [k for k in _STAGES if outs[1]["events"].get(k)], outs[1]["events"]
    assert not outs[1]["scipy_linalg"]
    for (n, r), out in zip(((10, 26), (11, 29)), outs):
        i, j, p, w, _ = ref.random_context(np.random.default_rng(n), n, r)
        p = p.astype(np.float32).astype(np.float64)
        np.testing.assert_allclose(out["scores"]["poe_gaussian"], ref.poe_gaussian(i, j, p, w, n), atol=1e-4)
        np.testing.assert_allclose(out["scores"]["win_ratio"], ref.win_ratio(i, j, p, w, n), atol=1e-6)
        np.testing.assert_allclose(out["scores"]["poe_bradley_terry"], ref.soft_bt(i, j, p, w, n)[0], atol=2e-4)


@pytest.fixture
def cache_on(tmp_path):
    """JAX's persistent cache on in ``tmp_path/xla`` for one test (restored after it)."""
    before = (jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs,
              jax.config.jax_persistent_cache_min_entry_size_bytes)
    compilation.enable_compilation_cache(tmp_path / "xla")
    yield tmp_path
    jax.config.update("jax_compilation_cache_dir", before[0])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", before[2])


def test_no_trace_nor_compilation_within_a_bucket_with_the_cache_on(cache_on, monkeypatch):
    """A trace counter and JAX's compile log: the second size of a bucket runs the bucket's program (in memory)."""
    from jaxrank.scoring import _soft_bt_newton

    traces, real = [], _soft_bt_newton._newton
    monkeypatch.setattr(_soft_bt_newton, "_newton", lambda *a, **k: (traces.append(1), real(*a, **k))[1])
    monkeypatch.setattr(_batching, "_PROGRAMS", {})
    first, (i, j, p, w, n) = _context(20, 13, 33)                  # bucket (16, 48)
    np.testing.assert_allclose(jr.poe_bradley_terry(first), ref.soft_bt(i, j, p, w, n)[0], atol=2e-4)
    second, (i, j, p, w, n) = _context(21, 15, 40)
    with CompileLog() as log:
        got = jr.poe_bradley_terry(second)
    assert log.records == [] and len(traces) == 1
    np.testing.assert_allclose(got, ref.soft_bt(i, j, p, w, n)[0], atol=2e-4)
    assert len(list((cache_on / "compiled").glob("soft_bt*.jaxexec"))) == 1


# --- the executables on disk: keys, damaged files, unwritable folders ----------------------------------

def _fn(calls):
    import jax.numpy as jnp

    def fn(x, w):
        calls.append(1)                               # runs only when JAX traces fn
        return {"total": jnp.sum(x * w[:, None], axis=0), "chol": jnp.linalg.cholesky(x.T @ x + jnp.eye(3))}
    return fn


def _reference(x, w):
    return (x * w[:, None]).sum(0), np.linalg.cholesky(x.T.astype(np.float64) @ x + np.eye(3))


def _program(tmp_path, calls, **kw):
    kw.setdefault("name", "demo")
    return compilation.ExportedProgram(_fn(calls), directory=tmp_path / "exported",
                                       executables=tmp_path / "compiled", **kw)


def _check(out, x, w):
    total, chol = _reference(x, w)
    np.testing.assert_allclose(out["total"], total, rtol=1e-5)
    np.testing.assert_allclose(out["chol"], chol, rtol=1e-4, atol=1e-5)


def test_executable_is_loaded_and_a_changed_key_part_rebuilds_it(tmp_path, monkeypatch):
    """A new instance (as a new process) loads the executable: no trace, no JAX compile record. Changing one
    part of the key (source digest, machine, compiler options, name) never reads the old files."""
    rng = np.random.default_rng(0)
    x, w = rng.random((4, 3), dtype=np.float32), rng.random(4, dtype=np.float32)
    calls = []
    first = _program(tmp_path, calls)
    _check(first(x, w), x, w)
    exe, traced = first.executable_path(x, w), first.path(x, w)
    assert len(calls) == 1 and exe.is_file() and traced.is_file()
    with CompileLog() as log:
        again = _program(tmp_path, calls)
        _check(again(x * 2, w), x * 2, w)
    assert len(calls) == 1 and log.records == []

    monkeypatch.setattr(compilation._store, "_MACHINE", "another machine")          # the executable only is rebuilt
    moved = _program(tmp_path, calls)
    assert moved.executable_path(x, w) != exe and moved.path(x, w) == traced
    _check(moved(x, w), x, w)
    assert len(calls) == 1 and moved.executable_path(x, w).is_file()         # read the traced program, compiled
    monkeypatch.undo()

    options = _program(tmp_path, calls, compiler_options={"xla_backend_optimization_level": 0})
    assert options.executable_path(x, w) != exe and options.path(x, w) == traced
    _check(options(x, w), x, w)
    assert len(calls) == 1

    monkeypatch.setattr(compilation._store, "_SOURCE_DIGEST", "edited")               # an edited jaxrank: traced again
    edited = _program(tmp_path, calls)
    assert edited.path(x, w) != traced and edited.executable_path(x, w) != exe
    _check(edited(x, w), x, w)
    assert len(calls) == 2
    monkeypatch.undo()

    assert _program(tmp_path, calls, name="demo-2").executable_path(x, w) != exe
    x64 = jax.config.jax_enable_x64
    try:                                               # a JAX setting that changes tracing is part of the key
        jax.config.update("jax_enable_x64", not x64)
        flipped = first.path(x, w), first.executable_path(x, w)
    finally:
        jax.config.update("jax_enable_x64", x64)
    assert flipped[0] != traced and flipped[1] != exe


def test_a_damaged_or_foreign_executable_is_never_run(tmp_path):
    """A truncated executable, another program's executable copied over it, or a link: compiled again."""
    x, w = np.ones((4, 3), np.float32), np.full(4, 2.0, np.float32)
    calls = []
    prog = _program(tmp_path, calls)
    prog(x, w)
    exe = prog.executable_path(x, w)
    other = compilation.ExportedProgram(lambda v, u: {"total": v.sum(0) * 0, "chol": v[:3] * 0},
                                        name="other", directory=tmp_path / "exported",
                                        executables=tmp_path / "compiled")
    other(x, w)
    for damage in ("truncate", "foreign", "link"):
        if damage == "truncate":
            exe.write_bytes(exe.read_bytes()[:200])
        elif damage == "foreign":
            exe.write_bytes(other.executable_path(x, w).read_bytes())
        else:
            exe.unlink()
            os.symlink(other.executable_path(x, w), exe)
        _check(_program(tmp_path, calls)(x, w), x, w)
        assert not exe.is_symlink() and exe.read_bytes() != other.executable_path(x, w).read_bytes()
    assert len(calls) == 1                            # the traced program was read each time, never retraced


def test_an_unwritable_folder_warns_once_and_still_scores(tmp_path, monkeypatch):
    """The folders cannot be made (a file stands where a folder should): a RuntimeWarning naming the folder,
    the right numbers, and a plain call the next time."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(compilation._store, "_WARNED", set())
    calls = []
    prog = compilation.ExportedProgram(_fn(calls), name="demo", directory=blocker / "exported",
                                       executables=blocker / "compiled")
    x, w = np.ones((4, 3), np.float32), np.arange(4, dtype=np.float32)
    with pytest.warns(RuntimeWarning) as caught:
        _check(prog(x, w), x, w)
    said = " ".join(str(c.message) for c in caught)
    assert str(blocker / "exported") in said and str(blocker / "compiled") in said
    _check(prog(x + 1, w), x + 1, w)
    assert len(calls) == 1


def test_enable_compilation_cache_refuses_a_folder_it_cannot_write(tmp_path, monkeypatch):
    """Plumbing only (the tests run as root, who may write anywhere): a folder ``os.access`` calls unwritable
    is refused with a PermissionError naming it; a file where the folder should be with an OSError."""
    monkeypatch.setattr(compilation.os, "access", lambda *a, **k: False)
    with pytest.raises(PermissionError, match="not writable") as err:
        compilation.enable_compilation_cache(tmp_path / "ro")
    assert err.value.filename == str(tmp_path / "ro")
    monkeypatch.undo()
    (tmp_path / "f").write_text("")
    with pytest.raises(OSError):
        compilation.enable_compilation_cache(tmp_path / "f" / "xla")


def test_executable_from_jaxs_cache_is_not_written_again(cache_on):
    """An executable JAX loaded from its own persistent cache is run, never re-serialized (jaxlib drops its
    machine code then): with our file removed, the next instance scores right and writes no executable."""
    x, w = np.ones((4, 3), np.float32), np.arange(4, dtype=np.float32)
    prog = _program(cache_on, [])
    prog(x, w)
    exe = prog.executable_path(x, w)
    exe.unlink()
    jax.clear_caches()
    _check(_program(cache_on, [])(x, w), x, w)
    assert not exe.exists()


def test_exported_directory_only_while_the_cache_is_on(tmp_path):
    before = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        assert compilation.exported_directory() is None and compilation.compiled_directory() is None
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "xla"))
        assert compilation.exported_directory() == tmp_path / "exported"
        assert compilation.compiled_directory() == tmp_path / "compiled"
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "mine"))
        assert compilation.exported_directory() == tmp_path / "mine-exported"
        assert compilation.compiled_directory() == tmp_path / "mine-compiled"
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


def test_scipy_lapack_loaded_alone_serves_jaxlib_and_a_later_scipy_import():
    """SciPy's Cython LAPACK modules loaded by themselves (no ``scipy.linalg`` package): jaxlib's Cholesky and a
    later ``import scipy.linalg`` both give NumPy's factor."""
    code = ("import sys, numpy as np, jax, jax.numpy as jnp\n"
            "from jaxrank import compilation\n"
            "assert compilation._store.bind_lapack() and 'scipy.linalg' not in sys.modules\n"
            "x = np.random.default_rng(0).random((6, 6)); a = (x @ x.T + 6 * np.eye(6)).astype(np.float32)\n"
            "want = np.linalg.cholesky(a.astype(np.float64))\n"
            "assert np.abs(np.asarray(jax.jit(jnp.linalg.cholesky)(a)) - want).max() < 1e-5\n"
            "import scipy.linalg\n"
            "assert np.abs(scipy.linalg.cholesky(a, lower=True) - want).max() < 1e-5\n"
            "from scipy.linalg import cython_lapack\n"
            "assert cython_lapack is sys.modules['scipy.linalg.cython_lapack']\n"
            "print('ok')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-2000:]
