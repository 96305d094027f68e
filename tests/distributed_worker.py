"""One process of the multi-process tests (tests/test_distributed.py): ``python distributed_worker.py MODE ...``.

MODE ``score COORDINATOR N PID OUT``: join the runtime, score this process's share of
:func:`contexts` with ``shard_contexts(process_local=True)``, gathered and local, into ``OUT``.
MODE ``join COORDINATOR N PID TIMEOUT``: join with ``initialization_timeout=TIMEOUT`` and print ``joined``.
"""

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


def main(argv):
    mode, coordinator, num_processes, process_id = argv[0], argv[1], int(argv[2]), int(argv[3])
    from jaxrank.distributed import initialize, process_share

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
    np.savez(argv[4], **out)
    print("scored", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
