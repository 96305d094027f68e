"""shard_contexts: a process without contexts of its own, and options of the wrong length.

The multi-device and multi-process checks run in subprocesses (the device count is fixed when JAX starts);
expected scores are a NumPy win ratio.
"""

import json
import os
import socket
import subprocess
import sys
import time

import numpy as np

import jaxrank as jr
from jaxrank.sharding import _flatten_and_pad


def _win_ratio(i, j, p, threshold, n):
    """NumPy reference: wins (p > t counts 1 to A, p < t 1 to B, p == t half each) over games; 0.5 without any."""
    out = np.full((len(i), n), 0.5)
    for b in range(len(i)):
        win = np.where(p[b] > threshold[b], 1.0, np.where(p[b] < threshold[b], 0.0, 0.5))
        won, games = np.zeros(n), np.zeros(n)
        np.add.at(won, i[b], win); np.add.at(won, j[b], 1 - win)
        np.add.at(games, i[b], 1); np.add.at(games, j[b], 1)
        out[b, games > 0] = won[games > 0] / games[games > 0]
    return out


def test_padding_a_process_without_contexts_gives_neutral_options():
    # was: v[-1:] of an empty option repeated gave 0 rows, not 2 (every process then failed)
    c0 = jr.Comparisons.from_pairs(np.zeros((0, 4), int), np.ones((0, 4), int), np.zeros((0, 4), np.float32),
                                   num_items=3)
    c, per_context = _flatten_and_pad(c0, {"threshold": np.zeros((0,), np.float32),
                                           "init": np.zeros((0, 3), np.float32)}, 1, 2)
    np.testing.assert_array_equal(np.asarray(per_context["threshold"]), np.zeros(2))
    np.testing.assert_array_equal(np.asarray(per_context["init"]), np.zeros((2, 3)))
    np.testing.assert_array_equal(np.asarray(c.weight), np.zeros((2, 4)))          # inert contexts
    np.testing.assert_array_equal(np.asarray(c.item_mask), np.zeros((2, 3), bool))


WORKER = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
import numpy as np
import jaxrank as jr
from jaxrank import distributed
pid, port = int(sys.argv[1]), sys.argv[2]
distributed.initialize(f"localhost:{port}", 2, pid, initialization_timeout=60)
rng = np.random.default_rng(0); K, R, N = 3, 20, 5
i = rng.integers(0, N, (K, R)); j = (i + 1 + rng.integers(0, N - 1, (K, R))) % N; p = rng.random((K, R))
p = np.round(p.astype(np.float32), 1)
th = np.array([0.3, 0.5, 0.7], np.float32)
mine = slice(0, 3) if pid == 0 else slice(3, 3)                  # process 1 has no contexts
c = jr.Comparisons.from_pairs(i[mine], j[mine], p[mine], num_items=N)
g = np.asarray(jr.shard_contexts(jr.win_ratio, c, process_local=True, threshold=th[mine]))
l = np.asarray(jr.shard_contexts(jr.win_ratio, c, process_local=True, gather=False, threshold=th[mine]))
print(json.dumps(dict(gathered=g.tolist(), local=l.tolist(), local_shape=l.shape, i=i.tolist(), j=j.tolist(),
                      p=p.tolist(), th=th.tolist())), flush=True)
"""


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_one_without_contexts_score_with_a_per_context_option():
    # was: every process failed (the padding of the empty process), process 0 then aborted in C++
    port = _port()
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(k), str(port)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for k in range(2)]
    deadline = time.monotonic() + 150
    try:
        while any(q.poll() is None for q in procs):     # one that fails stops the test (the other would wait)
            if any(q.poll() not in (None, 0) for q in procs) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        for q in procs:
            if q.poll() is None:
                q.kill()
    outs = []
    for proc in procs:
        out, err = proc.communicate()
        assert proc.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    got = outs[0]
    ref = _win_ratio(np.array(got["i"]), np.array(got["j"]), np.array(got["p"]), np.array(got["th"]), 5)
    for k, o in enumerate(outs):
        np.testing.assert_allclose(o["gathered"], ref, rtol=1e-6)
    np.testing.assert_allclose(outs[0]["local"], ref, rtol=1e-6)
    assert outs[1]["local_shape"] == [0, 5]


WRONG = r"""
import numpy as np, warnings
warnings.simplefilter("ignore")
import jaxrank as jr
rng = np.random.default_rng(1); K, R, N = 5, 30, 7
i = rng.integers(0, N, (K, R)); j = (i + 1 + rng.integers(0, N - 1, (K, R))) % N
c = jr.Comparisons.from_pairs(i, j, rng.random((K, R)).astype(np.float32), num_items=N)
for scorer, kw in ((jr.win_ratio, dict(threshold=np.full(K + 1, 0.5, np.float32))),
                   (jr.max_likelihood_ranking, dict(init=np.zeros((K + 1, N), np.float32)))):
    for local in (False, True):
        try:
            jr.shard_contexts(scorer, c, process_local=local, **kw)
            print("no error")
        except ValueError as e:
            print(str(e).splitlines()[0])
"""


def test_an_option_of_the_wrong_length_names_the_callers_context_count():
    # was: "Incompatible types for broadcasting: input type=float32[6] and requested type=float32[3]" (one
    # device's share of 5 contexts on 2 devices)
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip())
    out = subprocess.run([sys.executable, "-c", WRONG], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[:2] == ["threshold must be a scalar or one value per context, shape (5,); got shape (6,)"] * 2
    assert lines[2:] == ["init must have shape (5, 7), got (6, 7)"] * 2
