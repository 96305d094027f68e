"""One process of the multi-process tests (tests/test_distributed.py): ``python distributed_worker.py MODE ...``.

MODE ``score COORDINATOR N PID OUT``: join the runtime, score this process's share of
:func:`contexts` with ``shard_contexts(process_local=True)``, gathered and local, into ``OUT``.
MODE ``join COORDINATOR N PID TIMEOUT``: join with ``initialization_timeout=TIMEOUT`` and print ``joined``.
MODE ``die COORDINATOR N PID HEARTBEAT``: join, then process 1 dies and the others wait at a barrier.
MODE ``judge COORDINATOR N PID STORE CRASH_AFTER``: ``jaxrank judge`` (COORDINATOR ``-`` for none) on
:func:`dataset` with :class:`FakeJudge`, which kills its process (``os._exit(9)``) at its
``CRASH_AFTER``-th ``compare`` call (``-1``: never); prints ``asked K`` (comparisons judged).
MODE ``assess COORDINATOR N PID STORE OUTDIR``: ``jaxrank assess`` the same way, joined through COORDINATOR.
MODE ``assess-real COORDINATOR N PID STORE OUTDIR``: the same with the real SmolLM2 judge.
"""

import dataclasses
import sys

import numpy as np


def contexts(num_contexts=7, n=6, r=20, seed=3):
    """Deterministic ragged contexts (the test recomputes them in its own process)."""
    import jaxrank as jr

    rng = np.random.default_rng(seed)
    real = rng.integers(3, n + 1, num_contexts)
    i = np.floor(rng.uniform(size=(num_contexts, r)) * real[:, None]).astype(int)
    j = (i + 1 + np.floor(rng.uniform(size=(num_contexts, r)) * (real[:, None] - 1)).astype(int)) % real[:, None]
    p = rng.uniform(0.05, 0.95, (num_contexts, r)).astype(np.float32)
    mask = np.arange(n)[None, :] < real[:, None]
    return jr.Comparisons.from_pairs(i, j, p, num_items=n, item_mask=mask)


def dataset(num_contexts=5, num_candidates=4):
    """A small data set in jaxrank's schema (``coherence`` = the human score)."""
    from tiny_data import summary_dataset

    return summary_dataset(np.random.default_rng(0).uniform(1, 5, (num_contexts, num_candidates)))


class FakeJudge:
    """p = sigmoid(length difference + article number / 10); kills the process at its ``crash_at``-th call."""

    name, template_key, batch_size = "fake", "t0", 2

    def __init__(self, crash_at=-1):
        self.crash_at, self.calls, self.asked = crash_at, 0, 0

    def compare(self, context, candidates, i, j):
        import os

        from jaxrank.judges.pairwise import Judgement

        self.calls += 1
        if self.calls == self.crash_at:
            os._exit(9)                                  # as abrupt as kill -9: no cleanup, no flush
        self.asked += len(i)
        d = np.array([int(candidates[a].split()[1]) - int(candidates[b].split()[1]) + len(context) / 10
                      for a, b in zip(np.asarray(i).tolist(), np.asarray(j).tolist())])
        return Judgement((1 / (1 + np.exp(-d))).astype(np.float32), False, np.zeros((len(d), 2)))


def judge(coordinator, num_processes, process_id, store, crash_at):
    import jaxrank.data
    from jaxrank import cli

    fake = FakeJudge(crash_at)
    jaxrank.data.load_dataset = lambda name, **kw: dataset()
    cli.common.make_judge = lambda args: fake
    argv = ["judge", "--aspect", "coherence", "--no-progress", "--store", store, "--num-processes",
            str(num_processes), "--process-id", str(process_id), "--no-compilation-cache"]
    if coordinator != "-":
        argv += ["--coordinator", coordinator, "--join-timeout", "60"]
    cli.main(argv)
    print(f"asked {fake.asked}", flush=True)


def assess(coordinator, num_processes, process_id, store, outdir):
    import jaxrank.data
    from jaxrank import cli

    fake = FakeJudge()
    jaxrank.data.load_dataset = lambda name, **kw: dataset()
    cli.common.make_judge = lambda args: fake
    cli.main(["assess", "--aspect", "coherence", "--no-progress", "--store", store, "--output", outdir,
              "--methods", "win_ratio,average_probability", "--num-processes", str(num_processes),
              "--process-id", str(process_id), "--no-compilation-cache", "--coordinator", coordinator,
              "--join-timeout", "60"])
    print(f"asked {fake.asked}", flush=True)


def assess_real(coordinator, num_processes, process_id, store, outdir):
    """``jaxrank assess`` with the real SmolLM2 judge (its model loads in every process)."""
    import warnings

    import jaxrank.data
    from jaxrank import cli

    warnings.simplefilter("ignore")
    jaxrank.data.load_dataset = lambda name, **kw: dataset(num_contexts=2, num_candidates=3)
    cli.main(["assess", "--judge", "smollm2-135m", "--aspect", "coherence", "--no-progress", "--store", store,
              "--output", outdir, "--methods", "win_ratio,average_probability", "--answer-prefix", "Summary",
              "--num-processes", str(num_processes), "--process-id", str(process_id), "--no-compilation-cache",
              "--coordinator", coordinator, "--join-timeout", "120"])


def main(argv):
    mode, coordinator, num_processes, process_id = argv[0], argv[1], int(argv[2]), int(argv[3])
    if mode == "assess-real":
        assess_real(coordinator, num_processes, process_id, argv[4], argv[5])
        return
    from jaxrank.distributed import initialize, process_share

    if mode == "judge":
        judge(coordinator, num_processes, process_id, argv[4], int(argv[5]))
        return
    if mode == "assess":
        assess(coordinator, num_processes, process_id, argv[4], argv[5])
        return
    if mode == "die":                  # process 1 dies after joining; process 0 waits at a barrier
        import os

        from jaxrank.distributed import barrier
        initialize(coordinator, num_processes, process_id, initialization_timeout=60,
                   heartbeat_timeout_seconds=int(argv[4]))
        print("joined", flush=True)
        if process_id == 1:
            os._exit(9)
        barrier("the others")
        print("passed the barrier", flush=True)
        return
    if mode == "join":
        initialize(coordinator, num_processes, process_id, initialization_timeout=int(argv[4]))
        print("joined", flush=True)
        return
    initialize(coordinator, num_processes, process_id, initialization_timeout=60)
    import jax

    import jaxrank as jr

    c = contexts()
    ids = [f"ctx{k}" for k in range(c.batch_shape[0])]
    mine = np.asarray(process_share(ids, process_id, num_processes))
    local = jax.tree.map(lambda x: x[mine], c)
    out = {"devices": np.asarray(len(jax.devices())), "mine": mine}
    for name in ("bradley_terry", "poe_bradley_terry"):
        scorer = jr.SCORERS[name]
        out[name + "_all"] = np.asarray(jr.shard_contexts(scorer, local, process_local=True))
        out[name + "_mine"] = np.asarray(jr.shard_contexts(scorer, local, process_local=True, gather=False))
    from compile_log import CompileLog

    again = dataclasses.replace(local, p=1 - local.p)
    with CompileLog() as log:                # the same shapes again (new values): nothing compiles anew
        jr.shard_contexts(jr.SCORERS["poe_bradley_terry"], again, process_local=True)
        jr.shard_contexts(jr.SCORERS["poe_bradley_terry"], again, process_local=True, gather=False)
    out["recompiled"] = np.asarray(len(log.records))
    print("\n".join(log.records), flush=True)
    np.savez(argv[4], **out)
    print("scored", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
