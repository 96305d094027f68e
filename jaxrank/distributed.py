"""Several processes (hosts): join JAX's multi-controller runtime and split contexts over processes.

jaxrank does not run its own cluster runtime: :func:`initialize` is a thin
wrapper over :func:`jax.distributed.initialize` (the coordinator on process 0,
every process given the same ``coordinator_address`` and ``num_processes`` and
its own ``process_id``, or the ``JAX_COORDINATOR_ADDRESS`` / ``JAX_NUM_PROCESSES``
/ ``JAX_PROCESS_ID`` environment variables JAX reads, or a cluster JAX detects
itself, e.g. SLURM or a Cloud TPU slice). After it, ``jax.devices()`` lists every
process's devices and :func:`jaxrank.shard_contexts` with ``process_local=True``
scores each process's own contexts on a mesh over all of them.

:func:`process_share` is the deterministic, disjoint and complete split of
context ids over processes that ``jaxrank judge --num-processes`` uses: the ids
are sorted and dealt round-robin, so the share of a process depends only on the
set of ids, its ``process_id`` and ``num_processes`` (no hash, no run state).

Nothing here changes a JAX setting at import; :func:`initialize` selects the
CPU collectives (gloo) only when it is called on a CPU backend.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

__all__ = ["initialize", "process_share", "shard_store_path", "barrier"]


def _positive_int(name: str, value, *, allow_zero: bool = False) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if allow_zero else 1):
        raise ValueError(f"{name} must be an integer >= {0 if allow_zero else 1}, got {value!r}")
    return value


def process_share(context_ids: Sequence[str], process_id: int, num_processes: int) -> list[int]:
    """The positions in ``context_ids`` that process ``process_id`` of ``num_processes`` handles.

    With ``s`` the ids sorted as strings, process ``p`` takes ``s[p], s[p + n], s[p + 2n], ...``
    (round-robin, ``n = num_processes``); the result lists their positions in
    ``context_ids``, in the order of ``context_ids``. The shares of ``p = 0..n-1``
    are disjoint, cover every id, differ in size by at most one, and are the
    same in every run (no hashing, no randomness).

    Args:
        context_ids: the ids of every context to split (distinct).
        process_id: this process, in ``[0, num_processes)``.
        num_processes: how many processes share the contexts.

    Returns:
        Ascending positions into ``context_ids``.

    Raises:
        ValueError: a repeated id, or ``process_id`` / ``num_processes`` out of range.
    """
    _positive_int("num_processes", num_processes)
    _positive_int("process_id", process_id, allow_zero=True)
    if process_id >= num_processes:
        raise ValueError(f"process_id must lie in [0, num_processes={num_processes}), got {process_id}")
    ids = [str(c) for c in context_ids]
    if len(set(ids)) != len(ids):
        seen, twice = set(), None
        for c in ids:
            if c in seen:
                twice = c
                break
            seen.add(c)
        raise ValueError(f"context_ids holds {twice!r} twice; the split needs distinct ids")
    order = sorted(range(len(ids)), key=lambda k: ids[k])
    return sorted(order[process_id::num_processes])


def shard_store_path(store: str, process_id: int, num_processes: int) -> str:
    """The judgement store shard of one process: ``results/x.jsonl`` -> ``results/x.process-1-of-4.jsonl``.

    Raises:
        ValueError: ``process_id`` / ``num_processes`` out of range.
    """
    _positive_int("num_processes", num_processes)
    _positive_int("process_id", process_id, allow_zero=True)
    if process_id >= num_processes:
        raise ValueError(f"process_id must lie in [0, num_processes={num_processes}), got {process_id}")
    stem = store[:-len(".jsonl")] if store.endswith(".jsonl") else store
    return f"{stem}.process-{process_id}-of-{num_processes}.jsonl"


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, initialization_timeout: int = 300,
               heartbeat_timeout_seconds: int = 100, cpu_collectives: str | None = "gloo",
               **kwargs) -> None:
    """Join JAX's multi-process runtime: :func:`jax.distributed.initialize`, with CPU collectives.

    Call it once per process, before any other JAX call. Every process gives
    the same ``coordinator_address`` (``host:port`` of process 0, which runs the
    coordinator) and ``num_processes``, and its own ``process_id``; left as
    ``None`` they come from ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``
    and ``JAX_PROCESS_ID``, or from a cluster JAX detects (SLURM, Cloud TPU, ...).

    If not every process joins within ``initialization_timeout`` seconds, the
    processes waiting end themselves with exit status ``NOT_JOINED_EXIT_STATUS``
    (3) and a message on stderr naming the coordinator (JAX itself would abort
    them from C++ a few seconds later, which Python cannot catch). A process
    that dies after joining is noticed by the others after
    ``heartbeat_timeout_seconds``: JAX then ends them with its own message.

    Args:
        coordinator_address: ``host:port`` of the coordinator (process 0).
        num_processes: the number of processes.
        process_id: this process, in ``[0, num_processes)``.
        initialization_timeout: seconds to wait for every process to join.
        heartbeat_timeout_seconds: seconds without a heartbeat before a process
            is declared dead.
        cpu_collectives: on a CPU backend, the cross-process collectives
            (``jax_cpu_collectives_implementation``: ``"gloo"``, ``"mpi"``, or
            ``None`` to leave JAX's setting); set only here, never at import.
        **kwargs: any other option of :func:`jax.distributed.initialize`
            (``local_device_ids``, ``shutdown_timeout_seconds``, ...).

    Raises:
        ValueError: a bad ``num_processes``, ``process_id`` or timeout.
    """
    import jax

    if num_processes is not None:
        _positive_int("num_processes", num_processes)
    if process_id is not None:
        _positive_int("process_id", process_id, allow_zero=True)
        if num_processes is not None and process_id >= num_processes:
            raise ValueError(f"process_id must lie in [0, num_processes={num_processes}), got {process_id}")
    _positive_int("initialization_timeout", initialization_timeout)
    _positive_int("heartbeat_timeout_seconds", heartbeat_timeout_seconds)
    if cpu_collectives is not None:
        if cpu_collectives not in ("gloo", "mpi", "none"):
            raise ValueError(f"cpu_collectives must be 'gloo', 'mpi', 'none' or None, got {cpu_collectives!r}")
        platforms = (jax.config.jax_platforms or "").split(",")
        if "cpu" in platforms or not any(p in ("cuda", "gpu", "rocm", "tpu") for p in platforms):
            jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    # JAX ends a process whose peers do not join by aborting it from C++ (SIGABRT, DEADLINE_EXCEEDED on
    # RegisterTask), which Python cannot catch. So this call keeps JAX's deadline a little later as a
    # backstop and, at ``initialization_timeout``, ends the process itself with a message that says why.
    watchdog = threading.Timer(initialization_timeout, _not_joined,
                               (coordinator_address, num_processes, process_id, initialization_timeout))
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(coordinator_address, num_processes, process_id,
                                   initialization_timeout=initialization_timeout + JAX_DEADLINE_MARGIN,
                                   heartbeat_timeout_seconds=heartbeat_timeout_seconds, **kwargs)
    finally:
        watchdog.cancel()


JAX_DEADLINE_MARGIN = 5
"""Seconds JAX's own join deadline runs past ``initialization_timeout`` (its backstop)."""

NOT_JOINED_EXIT_STATUS = 3
"""Exit status of a process whose peers did not all join within ``initialization_timeout``."""


def _not_joined(coordinator_address, num_processes, process_id, timeout):
    import os

    who = "this process" if process_id is None else f"process {process_id}"
    of = "" if num_processes is None else f" of {num_processes}"
    sys.stderr.write(
        f"jaxrank.distributed.initialize: {who}{of}: not every process joined the coordinator "
        f"{coordinator_address or '(from JAX_COORDINATOR_ADDRESS)'} within initialization_timeout={timeout} s. "
        f"Start all processes with the same coordinator address and process count and distinct process ids "
        f"0..N-1 (process 0 runs the coordinator); a firewall can also block the port. Exiting with status "
        f"{NOT_JOINED_EXIT_STATUS}.\n")
    sys.stderr.flush()
    os._exit(NOT_JOINED_EXIT_STATUS)


def barrier(name: str) -> None:
    """Wait until every process reaches the barrier ``name`` (:func:`jax.experimental.multihost_utils.sync_global_devices`).

    A no-op in a single process.
    """
    import jax
    from jax.experimental import multihost_utils

    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)
