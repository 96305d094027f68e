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
    # nothing compiled: each program from JAX's cache, or run from jaxrank's own executable files (issue 33)
    assert second["misses"] == 0 and (second["hits"] >= first["misses"]
                                      or list((tmp_path / "compiled").glob("*.jaxexec")))
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


# --- ExportedProgram: the traced program kept on disk -----------------------------------------------

def _program(calls):
    import jax.numpy as jnp

    def fn(x, w):
        calls.append(1)                               # runs only when JAX traces fn
        return {"total": jnp.sum(x * w[:, None], axis=0), "top": jnp.argmax(x, axis=-1)}
    return fn


def test_exported_program_is_traced_once_and_read_back(tmp_path):
    import numpy as np

    from jaxrank.compilation import ExportedProgram

    rng = np.random.default_rng(0)
    x, w = rng.random((4, 3), dtype=np.float32), rng.random(4, dtype=np.float32)
    calls = []
    first = ExportedProgram(_program(calls), name="demo", directory=tmp_path)
    out = first(x, w)
    np.testing.assert_allclose(out["total"], (x * w[:, None]).sum(0), rtol=1e-6)   # NumPy reference
    np.testing.assert_array_equal(out["top"], x.argmax(-1))
    assert len(calls) == 1 and first.path(x, w).is_file()
    first(x * 2, w)                                   # same shapes: no new trace, no new file
    assert len(calls) == 1 and len(list(tmp_path.iterdir())) == 1

    again = ExportedProgram(_program(calls), name="demo", directory=tmp_path)     # as a new process would
    out2 = again(x, w)
    assert len(calls) == 1                            # read from disk, not traced
    np.testing.assert_array_equal(out2["total"], out["total"])

    again(np.ones((5, 3), np.float32), np.ones(5, np.float32))                    # new shapes: a new artifact
    assert len(calls) == 2 and len(list(tmp_path.iterdir())) == 2
    other = ExportedProgram(_program(calls), name="demo-2", directory=tmp_path)
    assert other.path(x, w) != first.path(x, w)


def test_exported_program_key_follows_the_source(tmp_path, monkeypatch):
    import numpy as np

    from jaxrank import compilation

    x, w = np.ones((2, 2), np.float32), np.ones(2, np.float32)
    prog = compilation.ExportedProgram(_program([]), name="demo", directory=tmp_path)
    before = prog.path(x, w)
    monkeypatch.setattr(compilation._store, "_SOURCE_DIGEST", "edited")
    assert prog.path(x, w) != before                  # an edited jaxrank never reads a stale program


def test_damaged_artifact_is_traced_again(tmp_path):
    import numpy as np

    from jaxrank.compilation import ExportedProgram

    x, w = np.ones((2, 2), np.float32), np.full(2, 2.0, np.float32)
    calls = []
    ExportedProgram(_program(calls), name="demo", directory=tmp_path)(x, w)
    path = ExportedProgram(_program(calls), name="demo", directory=tmp_path).path(x, w)
    path.write_bytes(path.read_bytes()[:100])         # truncated, as by a crash of an older writer
    out = ExportedProgram(_program(calls), name="demo", directory=tmp_path)(x, w)
    assert len(calls) == 2
    np.testing.assert_allclose(out["total"], [4.0, 4.0])
    assert len(path.read_bytes()) > 100               # written again whole


def test_an_artifact_replaced_by_another_programs_is_never_run(tmp_path):
    import os

    import jax.numpy as jnp
    import numpy as np

    from jaxrank.compilation import ExportedProgram

    x = np.arange(3, dtype=np.float32)
    def plus_one(v):
        return v + 1

    def times_two(v):
        return v * jnp.float32(2)

    a = ExportedProgram(plus_one, name="scorer-a", directory=tmp_path)
    b = ExportedProgram(times_two, name="scorer-b", directory=tmp_path)
    a(x), b(x)
    b_path = b.path(x)
    b_path.write_bytes(a.path(x).read_bytes())         # scorer a's artifact copied over scorer b's
    out = ExportedProgram(times_two, name="scorer-b", directory=tmp_path)(x)
    np.testing.assert_allclose(out, x * 2)              # b's program, exported again: not a's
    assert b_path.read_bytes() != a.path(x).read_bytes()
    b_path.unlink()
    os.symlink(a.path(x), b_path)                       # a link to another artifact is not read either
    np.testing.assert_allclose(ExportedProgram(times_two, name="scorer-b", directory=tmp_path)(x), x * 2)
    assert not b_path.is_symlink() and b_path.read_bytes() != a.path(x).read_bytes()


def test_exported_program_rejects_an_empty_name():
    from jaxrank.compilation import ExportedProgram

    with pytest.raises(ValueError, match="name"):
        ExportedProgram(lambda x: x, name="")


def test_cli_second_run_reads_the_exported_program_with_the_same_numbers(tmp_path):
    import os

    data = tmp_path / "c.csv"
    data.write_text("item_a,item_b,p\nx,y,0.8\ny,z,0.6\nz,x,0.3\nx,z,0.7\n")
    env = dict(os.environ, JAXRANK_CACHE=str(tmp_path / "cache"), JAXRANK_COMPILATION_CACHE="1")
    outs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-m", "jaxrank.cli", "rank", str(data), "-o", str(tmp_path / "s.csv")],
                             env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        outs.append((tmp_path / "s.csv").read_text())
    assert len(list((tmp_path / "cache" / "exported").glob("*.jaxexport"))) == 1
    assert outs[0] == outs[1]


def test_cli_output_cut_short_by_its_reader_ends_quietly(tmp_path):
    import os

    data = tmp_path / "c.csv"
    rows = "".join(f"t{k},t{k + 1},0.6\n" for k in range(3000))    # ~200 kB of ranking: past the pipe buffer
    data.write_text("item_a,item_b,p\n" + rows)
    env = dict(os.environ, JAXRANK_CACHE=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-m", "jaxrank.cli", "rank", str(data), "--top", "3000", "--method", "win_ratio"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()                               # what `| head -1` does
    err = proc.stderr.read().decode()
    proc.wait(timeout=300)
    assert "Traceback" not in err and "BrokenPipeError" not in err
