"""Several processes: JAX's multi-process runtime on 127.0.0.1, scoring and judging split over processes.

Each multi-process check starts real processes (tests/distributed_worker.py) on
this CPU host, joined through ``jax.distributed`` at a free port the test picks,
each with two CPU devices; the results are compared with a computation in this
one process.
"""

import csv
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxrank as jr
from jaxrank.assessment.run import contexts_of, judge_contexts
from jaxrank.assessment.store import JudgementStore, merge_stores
from jaxrank.distributed import NOT_JOINED_EXIT_STATUS, initialize, process_share, shard_store_path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import distributed_worker as worker  # noqa: E402


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(*args):
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu",
               PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    for name in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        env.pop(name, None)
    return subprocess.Popen([sys.executable, str(HERE / "distributed_worker.py"), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(procs, timeout=150):
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError("a worker process hung")
        out.append((p.returncode, stdout, stderr))
    return out


# ---- the split -----------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=6), unique=True, max_size=40), st.integers(1, 7))
def test_process_share_is_disjoint_complete_balanced_and_independent_of_order(ids, n):
    shares = [process_share(ids, k, n) for k in range(n)]
    flat = [k for s in shares for k in s]
    assert sorted(flat) == list(range(len(ids)))                       # complete and disjoint
    assert all(s == sorted(s) for s in shares)
    assert max(map(len, shares)) - min(map(len, shares)) <= 1          # balanced
    rev = ids[::-1]                                                    # the same ids listed in another order
    for k in range(n):
        assert sorted(rev[q] for q in process_share(rev, k, n)) == sorted(ids[q] for q in shares[k])
    expected = sorted(ids)[0::n]                                       # round-robin over the sorted ids
    assert sorted(ids[q] for q in shares[0]) == expected


def test_split_and_shard_names_refuse_bad_input_naming_the_argument():
    with pytest.raises(ValueError, match="process_id must lie in"):
        process_share(["a"], 2, 2)
    with pytest.raises(ValueError, match="num_processes"):
        process_share(["a"], 0, 0)
    with pytest.raises(ValueError, match="'a' twice"):
        process_share(["a", "b", "a"], 0, 2)
    with pytest.raises(ValueError, match="initialization_timeout"):
        initialize("127.0.0.1:1", 2, 0, initialization_timeout=0)
    with pytest.raises(ValueError, match="process_id must lie in"):
        initialize("127.0.0.1:1", 2, 5)
    assert shard_store_path("r/x.jsonl", 1, 4) == "r/x.process-1-of-4.jsonl"
    with pytest.raises(ValueError, match="process_id"):
        shard_store_path("r/x.jsonl", 4, 4)


# ---- scoring over a mesh of two processes -------------------------------------------------------------


def test_two_processes_score_their_shares_to_the_single_process_numbers(tmp_path):
    port = _port()
    procs = [_start("score", f"127.0.0.1:{port}", 2, k, tmp_path / f"p{k}.npz") for k in range(2)]
    for rc, stdout, stderr in _finish(procs):
        assert rc == 0 and "scored" in stdout, stderr[-3000:]
    got = [np.load(tmp_path / f"p{k}.npz") for k in range(2)]
    assert int(got[0]["devices"]) == 4                     # the mesh spans both processes' devices
    assert [int(g["recompiled"]) for g in got] == [0, 0]    # a repeated same-shape call compiles nothing
    c = worker.contexts()
    ids = [f"ctx{k}" for k in range(c.batch_shape[0])]
    order = np.concatenate([process_share(ids, k, 2) for k in range(2)])
    assert sorted(order.tolist()) == list(range(len(ids)))
    for name in ("bradley_terry", "poe_bradley_terry"):
        one = np.asarray(jr.SCORERS[name](c))              # one process, one device, no sharding
        for k in range(2):
            np.testing.assert_allclose(got[k][name + "_all"], one[order], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got[k][name + "_mine"], one[got[k]["mine"]], rtol=1e-5, atol=1e-6)


# ---- judging: shards, kill and resume, merge -----------------------------------------------------------


def _records(path):
    return {(r["context"], r["a"], r["b"]): round(r["p"], 6) for r in map(json.loads, Path(path).read_text().splitlines())}


def test_two_processes_judge_disjoint_shards_resume_after_a_kill_and_merge_to_one_store(tmp_path):
    store = str(tmp_path / "a" / "s.jsonl")
    shard = [shard_store_path(store, k, 2) for k in range(2)]
    cs = contexts_of(worker.dataset(), aspect="coherence")
    per_context = 4 * 3                                     # all ordered pairs of 4 candidates
    # process 1 is killed at its 2nd compare call (the 1st chunk of 8 is in its shard); process 0 finishes
    (rc0, out0, err0), (rc1, _, _) = _finish([_start("judge", "-", 2, k, store, 2 if k else -1) for k in range(2)])
    assert rc0 == 0, err0[-3000:]
    assert rc1 == 9                                         # killed
    share = [process_share(cs.ids, k, 2) for k in range(2)]
    assert f"asked {len(share[0]) * per_context}" in out0
    assert len(Path(shard[1]).read_text().splitlines()) == 8
    before = Path(shard[0]).read_bytes()
    (rc, out, err), = _finish([_start("judge", "-", 2, 1, store, -1)])           # process 1 again
    assert rc == 0, err[-3000:]
    assert f"asked {len(share[1]) * per_context - 8}" in out                      # nothing redone
    assert Path(shard[0]).read_bytes() == before                                  # the other shard untouched
    for k in range(2):
        assert {c for c, _, _ in _records(shard[k])} == {cs.ids[q] for q in share[k]}
        assert len(Path(shard[k]).read_text().splitlines()) == len(share[k]) * per_context

    merged = tmp_path / "merged.jsonl"
    assert merge_stores(merged, shard) == len(cs.ids) * per_context
    assert merge_stores(merged, shard) == 0                                       # a repeated merge adds nothing
    one = tmp_path / "one.jsonl"                                                  # one process, whole data set
    judge_contexts(worker.FakeJudge(), cs, one, progress=False)
    assert _records(merged) == _records(one)

    # the same with the processes joined through a coordinator: same shards, a barrier at the end
    store_b = str(tmp_path / "b" / "s.jsonl")
    port = _port()
    results = _finish([_start("judge", f"127.0.0.1:{port}", 2, k, store_b, -1) for k in range(2)])
    for rc, stdout, stderr in results:
        assert rc == 0 and "all 2 shares judged" in stdout, stderr[-3000:]
    for k in range(2):
        assert _records(shard_store_path(store_b, k, 2)) == _records(shard[k])


def test_two_processes_assess_through_a_coordinator_process_0_merges_and_reports(tmp_path):
    store = str(tmp_path / "s.jsonl")
    cs = contexts_of(worker.dataset(), aspect="coherence")
    port = _port()
    results = _finish([_start("assess", f"127.0.0.1:{port}", 2, k, store, str(tmp_path / f"out{k}"))
                       for k in range(2)])
    for rc, stdout, stderr in results:
        assert rc == 0, stderr[-3000:]
    asked = [int(re.search(r"asked (\d+)", out).group(1)) for _, out, _ in results]
    share = [process_share(cs.ids, k, 2) for k in range(2)]
    assert asked == [len(share[k]) * 12 for k in range(2)]           # each its own share, nothing twice
    assert "merged 2 shard(s)" in results[0][1] and "process 0 merges" in results[1][1]
    one = tmp_path / "one.jsonl"
    judge_contexts(worker.FakeJudge(), cs, one, progress=False)
    assert _records(store) == _records(one)                          # the merged store is the whole data set
    report = list((tmp_path / "out0").glob("assess-*-scores.csv"))
    assert len(report) == 1 and not (tmp_path / "out1").exists()     # process 0 alone reports
    rows = list(csv.DictReader(report[0].open()))
    assert len(rows) == len(cs.ids) * 4 and {r["context"] for r in rows} == set(cs.ids)


def test_two_processes_assess_with_a_real_judge_through_a_coordinator(smollm2, tmp_path):
    """The real SmolLM2 judge in both processes: each joins the runtime before its model loads (JAX refuses a
    join after any JAX work), judges its share; process 0 merges and reports."""
    store = str(tmp_path / "s.jsonl")
    port = _port()
    results = _finish([_start("assess-real", f"127.0.0.1:{port}", 2, k, store, str(tmp_path / f"out{k}"))
                       for k in range(2)], timeout=600)
    for rc, stdout, stderr in results:
        assert rc == 0, stderr[-3000:]
    assert "merged 2 shard(s)" in results[0][1]
    recs = [json.loads(x) for x in Path(store).read_text().splitlines()]
    assert len(recs) == 2 * 6                                          # 2 contexts x 3 candidates, both orders
    assert all(0.0 < r["p"] < 1.0 and r["label_mass"] > 0.5 and r["judge"] == "smollm2-135m" for r in recs)
    assert list((tmp_path / "out0").glob("assess-*.md"))


def test_merge_refuses_one_key_with_two_different_judgements_naming_both_files(tmp_path):
    rec = {"judge": "m", "template": "t", "context": "c", "a": "x", "b": "y", "p": 0.25}
    JudgementStore(tmp_path / "s0.jsonl").append([rec])
    JudgementStore(tmp_path / "s1.jsonl").append([dict(rec, p=0.75)])
    with pytest.raises(ValueError, match=r"p=0.25 in .*s0.jsonl but p=0.75 in .*s1.jsonl"):
        merge_stores(tmp_path / "m.jsonl", [tmp_path / "s0.jsonl", tmp_path / "s1.jsonl"])
    with pytest.raises(ValueError, match="no such file"):
        merge_stores(tmp_path / "m.jsonl", [tmp_path / "nope.jsonl"])


# ---- a process that never joins -----------------------------------------------------------------------


def test_a_process_that_never_joins_is_a_clear_error_within_the_timeout():
    t0 = time.monotonic()
    (rc, stdout, stderr), = _finish([_start("join", f"127.0.0.1:{_port()}", 2, 0, 5)], timeout=60)
    elapsed = time.monotonic() - t0
    assert rc == NOT_JOINED_EXIT_STATUS and "joined" not in stdout
    assert "not every process joined the coordinator 127.0.0.1:" in stderr and "initialization_timeout=5 s" in stderr
    assert elapsed < 45                                     # the timeout, not a hang (generous for start-up)


# ---- the command line ---------------------------------------------------------------------------------


def test_cli_refuses_bad_process_options_before_loading_anything_and_merges_shards(tmp_path, monkeypatch, capsys):
    from jaxrank import cli

    for name in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit, match=r"--process-id must lie in 0..1 \(--num-processes 2\), got 2"):
        cli.main(["judge", "--judge", "no-such-model", "--num-processes", "2", "--process-id", "2"])
    monkeypatch.setenv("JAX_PROCESS_ID", "one")
    with pytest.raises(SystemExit, match=r"\$JAX_PROCESS_ID='one' is not an integer"):
        cli.main(["judge", "--judge", "no-such-model", "--num-processes", "2"])
    monkeypatch.setenv("JAX_PROCESS_ID", "1")
    with pytest.raises(SystemExit, match="assess with several processes needs --coordinator"):
        cli.main(["assess", "--judge", "no-such-model", "--num-processes", "2"])
    with pytest.raises(SystemExit, match="and no --active"):
        cli.main(["assess", "--judge", "no-such-model", "--num-processes", "2", "--coordinator", "h:1", "--active"])
    recs = [{"judge": "m", "template": "t", "context": f"c{k}", "a": "x", "b": "y", "p": k / 4} for k in range(4)]
    for k in range(2):
        JudgementStore(tmp_path / f"s.process-{k}-of-2.jsonl").append(recs[k::2])
    cli.main(["store", "merge", str(tmp_path / "s.jsonl"), str(tmp_path / "s.process-0-of-2.jsonl"),
              str(tmp_path / "s.process-1-of-2.jsonl")])
    assert "4 judgement(s) added from 2 shard(s)" in capsys.readouterr().out
    assert _records(tmp_path / "s.jsonl") == {(r["context"], "x", "y"): r["p"] for r in recs}
    with pytest.raises(SystemExit, match="no such file"):
        cli.main(["store", "merge", str(tmp_path / "s.jsonl"), str(tmp_path / "gone.jsonl")])


def test_a_process_that_dies_after_joining_ends_the_others_within_the_heartbeat_timeout():
    port = _port()
    t0 = time.monotonic()
    (rc0, out0, err0), (rc1, out1, _) = _finish([_start("die", f"127.0.0.1:{port}", 2, k, 5) for k in range(2)],
                                                timeout=90)
    elapsed = time.monotonic() - t0
    assert "joined" in out1 and rc1 == 9
    assert "joined" in out0 and "passed the barrier" not in out0 and rc0 != 0     # JAX ends it (abort)
    assert "stopped sending heartbeats" in err0
    assert elapsed < 60
