"""The program store (:class:`jaxrank.compilation.ExportedProgram`) across devices and settings.

A program kept on disk is for any one device: a process that ran it on sharded data (2 devices) leaves one that
a 1-device process runs, and a program compiled for data on device 0 is never run on data on device 1. Each
check runs in a subprocess: the device count (``XLA_FLAGS``) and the cache are process-wide settings.
"""

import json
import os
import subprocess
import sys

import numpy as np

SCRIPT = r"""
import json, sys
import jax
import numpy as np
import jaxrank as jr
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
jr.enable_compilation_cache(sys.argv[1])
rng = np.random.default_rng(0)
i = rng.integers(0, 8, (2, 32)); j = (i + 1 + rng.integers(0, 7, (2, 32))) % 8; p = rng.random((2, 32))
c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=8)
out = {}
if sys.argv[2] == "sharded":
    c = jax.device_put(c, NamedSharding(Mesh(np.array(jax.devices()), ("c",)), P("c")))
elif sys.argv[2] == "device1":
    out["device0"] = np.asarray(jr.average_probability(jax.device_put(c, jax.devices()[0]))).tolist()
    c = jax.device_put(c, jax.devices()[1])
s = jr.average_probability(c)
out.update(scores=np.asarray(s).tolist(), devices=sorted(d.id for d in s.devices()), i=i.tolist(), j=j.tolist(),
           p=p.astype(np.float32).tolist())
print(json.dumps(out))
"""


def _run(folder, mode, devices):
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}").strip())
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(folder), mode], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _average_probability(i, j, p, n):
    """NumPy reference: an item's mean probability of winning over its comparisons (0.5 without any)."""
    i, j, p = np.asarray(i), np.asarray(j), np.asarray(p, np.float64)
    out = np.full((len(i), n), 0.5)
    for b in range(len(i)):
        won, games = np.zeros(n), np.zeros(n)
        np.add.at(won, i[b], p[b]); np.add.at(won, j[b], 1 - p[b])
        np.add.at(games, i[b], 1); np.add.at(games, j[b], 1)
        out[b, games > 0] = won[games > 0] / games[games > 0]
    return out


def test_a_sharded_call_leaves_a_program_every_later_process_runs(tmp_path):
    # was: the 2-device process stored a program "exported for 2 devices"; every 1-device process with the same
    # shapes then failed (and the reverse order gave a 2-device process the same error)
    cache = tmp_path / "xla"
    for mode, devices in (("sharded", 2), ("plain", 1), ("sharded", 2), ("plain", 1)):
        got = _run(cache, mode, devices)
        ref = _average_probability(got["i"], got["j"], got["p"], 8)
        np.testing.assert_allclose(got["scores"], ref, rtol=1e-5, atol=1e-6)
        assert got["devices"] == ([0, 1] if mode == "sharded" else [0])     # the sharded call stays sharded
    assert list((tmp_path / "exported").iterdir())                            # the store was used


def test_data_on_another_device_never_runs_the_default_devices_executable(tmp_path):
    # was: "Computation was compiled for input shardings that disagree with the shardings of arguments"
    got = _run(tmp_path / "xla", "device1", 2)
    ref = _average_probability(got["i"], got["j"], got["p"], 8)
    np.testing.assert_allclose(got["device0"], ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["scores"], ref, rtol=1e-5, atol=1e-6)
    assert got["devices"] == [1]


MATMUL = r"""
import json, sys
import jax, jax.numpy as jnp
from jaxrank.compilation import ExportedProgram, enable_compilation_cache
enable_compilation_cache(sys.argv[1] + "/xla")
traced = []
def fn(a, b):
    traced.append(str(jax.config.jax_default_matmul_precision))
    return (a @ b,)
prog = ExportedProgram(fn, name="mm", directory=sys.argv[1] + "/exp", executables=sys.argv[1] + "/cmp")
a = jnp.ones((4, 4))
prog(a, a)
with jax.default_matmul_precision("highest"):
    prog(a, a)
prog(a, a)
print(json.dumps(traced))
"""


def test_a_matmul_precision_block_is_another_program(tmp_path):
    # was: the in-memory program of the first call ran inside the block (traced once, with precision None)
    out = subprocess.run([sys.executable, "-c", MATMUL, str(tmp_path)], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["None", "highest"]


REMOTE = r"""
import json
import jax
import numpy as np
import jaxrank as jr
from jaxrank.compilation import compiled_directory, enable_compilation_cache, exported_directory
try:
    enable_compilation_cache("gs://some-bucket/jax-cache")
    refused = ""
except ValueError as e:
    refused = str(e)
jax.config.update("jax_compilation_cache_dir", "gs://some-bucket/jax-cache")
c = jr.Comparisons.from_pairs(np.array([[0, 1]]), np.array([[1, 2]]), np.array([[0.7, 0.4]], np.float32), num_items=3)
print(json.dumps(dict(refused=refused, exported=str(exported_directory()), compiled=str(compiled_directory()),
                      scores=np.asarray(jr.average_probability(c)).tolist())))
"""


def test_a_remote_cache_folder_keeps_no_local_files(tmp_path):
    # was: jaxrank wrote its programs under ./gs:/some-bucket/... in the working folder
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", REMOTE], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "directory" in got["refused"] and "gs://some-bucket" in got["refused"]
    assert got["exported"] == got["compiled"] == "None"
    np.testing.assert_allclose(got["scores"], [[0.7, (0.3 + 0.4) / 2, 0.6]], rtol=1e-6)   # by hand
    assert list(tmp_path.iterdir()) == []
