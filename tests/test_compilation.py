"""The opt-in persistent compilation cache: a second process loads instead of compiling.

Runs in subprocesses: the cache is a process-wide JAX setting.
"""

import json
import subprocess
import sys

import pytest

import jaxrank as jr

SCRIPT = r"""
import json, sys
import jax
import numpy as np
import jaxrank as jr
events = []
jax.monitoring.register_event_listener(lambda name, **kw: events.append(name))
path = jr.enable_compilation_cache(sys.argv[1])
rng = np.random.default_rng(0)
i = rng.integers(0, 6, (3, 10)); j = (i + rng.integers(1, 6, (3, 10))) % 6
c = jr.Comparisons.from_pairs(i, j, rng.random((3, 10)), num_items=6)
s = np.asarray(jr.poe_bradley_terry(c))
print(json.dumps(dict(path=str(path), hits=events.count("/jax/compilation_cache/cache_hits"),
                      misses=events.count("/jax/compilation_cache/cache_misses"), scores=s.tolist(),
                      x64=bool(jax.config.jax_enable_x64))))
"""


def _run(folder):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(folder)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_loads_compiled_programs_from_the_cache(tmp_path):
    cache = tmp_path / "xla"
    first = _run(cache)
    assert first["path"] == str(cache) and first["misses"] >= 1 and first["hits"] == 0
    assert any(cache.iterdir())                                   # programs were written
    second = _run(cache)
    assert second["hits"] >= first["misses"] and second["misses"] == 0
    assert second["scores"] == first["scores"]                    # the same executable, the same numbers
    assert not first["x64"]                                       # no other global setting touched


def test_bad_arguments(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        jr.enable_compilation_cache(f)
    with pytest.raises(ValueError, match="min_compile_seconds"):
        jr.enable_compilation_cache(tmp_path, min_compile_seconds=-1)


def test_default_folder_follows_the_environment(monkeypatch, tmp_path):
    from jaxrank.compilation import default_cache_dir

    monkeypatch.setenv("JAXRANK_CACHE", str(tmp_path / "jr"))
    assert default_cache_dir() == tmp_path / "jr" / "xla"
    monkeypatch.delenv("JAXRANK_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "jaxrank" / "xla"


def test_cli_keeps_compiled_programs_unless_told_not_to(tmp_path):
    import os

    data = tmp_path / "c.csv"
    data.write_text("item_a,item_b,p\nx,y,0.8\ny,z,0.6\nz,x,0.3\n")
    env = dict(os.environ, JAXRANK_CACHE=str(tmp_path / "cache"), JAXRANK_COMPILATION_CACHE="1")
    for extra, expect in ((["--no-compilation-cache"], False), ([], True)):
        out = subprocess.run([sys.executable, "-m", "jaxrank.cli", "rank", str(data), *extra], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        folder = tmp_path / "cache" / "xla"
        assert (folder.is_dir() and any(folder.iterdir())) == expect, extra


# ------------------------------------------------------------ jaxrank inside a caller's jit
def test_a_scorer_inside_a_users_jit_with_only_constant_arguments():
    # No tracer among the arguments, yet the call is staged into the caller's program.
    import jax
    import numpy as np

    rng = np.random.default_rng(3)
    i = rng.integers(0, 6, (2, 12)); j = (i + rng.integers(1, 6, (2, 12))) % 6
    c = jr.Comparisons.from_pairs(i, j, rng.uniform(0.1, 0.9, (2, 12)), num_items=6)
    inside = jax.jit(lambda: (jr.poe_bradley_terry(c), jr.win_ratio(c), jr.poe_gaussian(c)))()
    outside = (jr.poe_bradley_terry(c), jr.win_ratio(c), jr.poe_gaussian(c))
    for a, b in zip(inside, outside):
        np.testing.assert_allclose(a, b, atol=1e-5)
