"""Many contexts across devices: split a batch of contexts over ``jax.devices()``.

Every jaxrank scorer solves each context on its own, so a batch of contexts
splits over devices with no communication at all. :func:`shard_contexts`
flattens the batch axes of a :class:`~jaxrank.Comparisons`, pads the context
count to a multiple of the device count with inert contexts (every comparison
of weight 0, every item masked: every scorer returns its neutral scores for
them, converged at once, never NaN), places the batch on a 1-D
``jax.sharding.Mesh`` with a ``NamedSharding`` split along contexts, and runs
the scorer on each device's slice under ``jax.shard_map``. Each device runs
the ordinary batched scorer on its own contexts, so whatever a solver does
across its batch (its while loops and chunks run until the device's own contexts
have converged) stays on that device, and the compiled program holds no collective. The padding is cut off and the
batch shape restored; the results equal the single-device ones.

The sharded program is compiled once per scorer, static options, devices and
shapes (cached), so later calls with the same shapes do not recompile.

Several processes (hosts, after :func:`jaxrank.distributed.initialize`): with
``process_local=True`` each process passes only its own contexts; the batch is
assembled on a mesh over every process's devices with
``jax.make_array_from_process_local_data`` (each process's contexts on its own
devices, every process padded to the same count), scored by the same compiled
program, and either gathered to every process
(``multihost_utils.process_allgather``) or left as each process's own rows.

Several *CPU* devices (``--xla_force_host_platform_device_count``) are for
testing: with jaxlib 0.10 the batched LAPACK kernels behind the Cholesky solves
wait on XLA:CPU's one shared thread pool, and two devices factorising large
batches at once can deadlock it (a warning says so). GPUs and TPUs do not use
these kernels; on one CPU device it has not been seen.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrank.comparisons import Comparisons

__all__ = ["shard_contexts"]

AXIS = "contexts"
"""Name of the mesh axis the contexts are split along."""


def _devices(devices) -> tuple:
    if devices is None:
        return tuple(jax.devices())
    if isinstance(devices, jax.Device):
        raise ValueError("devices must be a sequence of jax devices (e.g. jax.devices()[:2]), not one device")
    try:
        devices = tuple(devices)
    except TypeError:
        raise ValueError(f"devices must be None or a sequence of jax devices, got {type(devices).__name__}") from None
    if not devices:
        raise ValueError("devices is empty: pass None (all of jax.devices()) or at least one device")
    for k, d in enumerate(devices):
        if not isinstance(d, jax.Device):
            raise ValueError(f"devices[{k}] is {d!r}, not a jax device (see jax.devices())")
    if len(set(devices)) != len(devices):
        raise ValueError(f"devices lists a device twice: {list(devices)}")
    return devices


def _warn_cpu_lapack_deadlock(devices):
    """jaxlib 0.10 (up to 0.11.0) can deadlock batched LAPACK calls on several CPU devices; say so."""
    version = tuple(int(x) for x in jaxlib.__version__.split(".")[:3] if x.isdigit())
    if len(devices) > 1 and any(d.platform == "cpu" for d in devices) and (0, 10) <= version < (0, 11, 1):
        warnings.warn(
            f"shard_contexts over {len(devices)} CPU devices with jaxlib {jaxlib.__version__}: its batched "
            "LAPACK kernels (the Cholesky solves of the PoE and Bradley-Terry scorers) wait on XLA:CPU's shared "
            "thread pool and can deadlock when several devices run them at once on large batches (from about "
            "150 contexts of 16 items a device on 2 cores). Use one CPU device (XLA:CPU already uses every "
            "core) or jaxlib >= 0.11.1; several CPU devices are for testing the sharding.",
            RuntimeWarning, stacklevel=3)


def _split_kwargs(kwargs, batch_shape):
    """``(static, per_context, replicated)`` options; see :func:`shard_contexts`."""
    nb = len(batch_shape)
    static, per_context, replicated = [], {}, {}
    for name, v in kwargs.items():
        if isinstance(v, list) and _per_context_sequence(v, batch_shape):
            v = np.asarray(v)             # a list of one value per context: split like an array
        if isinstance(v, (jax.Array, np.ndarray)):
            if v.ndim >= nb and tuple(v.shape[:nb]) == tuple(batch_shape):
                per_context[name] = v
            else:
                replicated[name] = v
        else:
            try:
                hash(v)
            except TypeError:
                raise ValueError(f"scorer option {name}={v!r} is neither an array nor hashable: pass an array, "
                                 f"or a hashable (static) value such as a number, string or tuple") from None
            static.append((name, type(v), v))   # the type too: 1, 1.0 and True hash alike
    return tuple(sorted(static, key=lambda t: t[0])), per_context, replicated


def _per_context_sequence(v, batch_shape) -> bool:
    """Whether ``v`` (a list or tuple) is numbers, one per context: its NumPy shape starts with ``batch_shape``."""
    try:
        a = np.asarray(v)
    except (ValueError, TypeError):
        return False
    nb = len(batch_shape)
    return a.dtype.kind in "biuf" and a.ndim >= nb and tuple(a.shape[:nb]) == tuple(batch_shape)


@functools.lru_cache(maxsize=64)
def _sharded(fn, devices, static, per_context_names, replicated_names):
    """The jitted, ``shard_map``-ed ``fn`` and the shardings of its inputs (one cache entry per setting)."""
    del per_context_names, replicated_names   # part of the cache key only (the pytree structure of the inputs)
    mesh = Mesh(np.asarray(devices, dtype=object), (AXIS,))
    options = {name: v for name, _, v in static}

    def local(c, per_context, replicated):
        out = fn(c, **options, **per_context, **replicated)
        b = c.i.shape[0]
        for path, leaf in jax.tree_util.tree_leaves_with_path(out):
            shape = jnp.shape(leaf)
            if not shape or shape[0] != b:
                raise ValueError(f"shard_contexts: the scorer's output{jax.tree_util.keystr(path)} has shape "
                                 f"{shape} for {b} contexts; every output must have the contexts as its first axis")
        return out

    # check_vma=False: the scorers start their loops from fresh constants (device-invariant under the
    # varying-manual-axes type system), which would need a pcast in every solver; with no collective
    # in ``local`` nothing depends on that type.
    run = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(P(AXIS), P(AXIS), P()), out_specs=P(AXIS),
                                check_vma=False))
    return run, NamedSharding(mesh, P(AXIS)), NamedSharding(mesh, P())


def _run_or_scorer_error(run, c, per_context, replicated, scorer, c_user, scorer_kwargs):
    """``run(c, per_context, replicated)``; a ``ValueError`` while it is traced is the scorer's own error on the
    caller's shapes where the scorer refuses those (an option of the wrong length then names the caller's
    context count, not one device's share of it), else the error as it was."""
    try:
        return run(c, per_context, replicated)
    except ValueError:
        try:     # the options concrete (the scorer checks their shapes and values), the comparisons abstract
            jax.eval_shape(lambda cc: scorer(cc, **scorer_kwargs), c_user)
        except ValueError as e:
            raise e from None
        shape = c_user.batch_shape if c_user.batch_shape else (c.i.shape[0],)
        for name, v in scorer_kwargs.items():
            if isinstance(v, tuple) and _per_context_sequence(v, shape):
                raise ValueError(
                    f"shard_contexts: scorer option {name} is a tuple of one value per context (shape "
                    f"{np.shape(v)}); a tuple is a static option, passed whole to every device's share of the "
                    f"contexts, and the scorer refused it there. Pass an array (np.asarray({name})) or a list to "
                    f"split it with the contexts") from None
        raise


@functools.partial(jax.jit, static_argnums=(2, 3))
def _flatten_and_pad(c: Comparisons, per_context, nb: int, pad: int):
    """One batch axis, then ``pad`` inert contexts (weight-0 comparisons, all items masked) appended.

    A padding context's per-context options copy the last real context's (valid values), or are zeros where
    there is none (a process with no contexts of its own, ``process_local=True``).
    """
    flat = lambda x: x.reshape((-1,) + x.shape[nb:])
    c, per_context = jax.tree.map(flat, (c, per_context))
    if not pad:
        return c, per_context

    def more(x, value):
        return jnp.concatenate([x, jnp.full((pad,) + x.shape[1:], value, x.dtype)])
    c = Comparisons(i=more(c.i, 0), j=more(c.j, 0), p=more(c.p, 0.5), weight=more(c.weight, 0),
                    item_mask=more(c.item_mask, False), num_items=c.num_items)
    per_context = {k: jnp.concatenate([v, jnp.repeat(v[-1:], pad, axis=0) if v.shape[0] else
                                       jnp.zeros((pad,) + v.shape[1:], v.dtype)]) for k, v in per_context.items()}
    return c, per_context


@functools.partial(jax.jit, static_argnums=(1,))
def _trim_and_unflatten(out, shape):
    b = math.prod(shape)
    return jax.tree.map(lambda x: x[:b].reshape(shape + x.shape[1:]), out)


def _global_devices(devices) -> tuple:
    """All processes' devices, grouped by process (a process's contexts land on its own devices)."""
    devices = _devices(devices)
    counts = {}
    for d in devices:
        counts[d.process_index] = counts.get(d.process_index, 0) + 1
    if len(counts) != jax.process_count() or len(set(counts.values())) != 1:
        raise ValueError(f"process_local=True needs the same number of devices from every one of the "
                         f"{jax.process_count()} processes; devices has {dict(sorted(counts.items()))} a process")
    return tuple(sorted(devices, key=lambda d: (d.process_index, d.id)))


def _shard_process_local(scorer, c, devices, scorer_kwargs, gather):
    """:func:`shard_contexts` with ``process_local=True``: see there."""
    from jax.experimental import multihost_utils

    shape = c.batch_shape
    if len(shape) != 1:
        raise ValueError(f"process_local=True needs one batch axis (this process's contexts), got batch shape {shape}")
    devices = _global_devices(devices)
    local_devices = len(devices) // jax.process_count()
    counts = np.asarray(multihost_utils.process_allgather(np.asarray([shape[0]], np.int32))).reshape(-1)
    per_process = -(-int(counts.max()) // local_devices) * local_devices     # same on every process
    static, per_context, replicated = _split_kwargs(scorer_kwargs, shape)
    run, split, copy = _sharded(scorer, devices, static, tuple(sorted(per_context)), tuple(sorted(replicated)))
    local = jax.device_get(_flatten_and_pad(c, per_context, 1, per_process - shape[0]))
    c_global, per_context_global = jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(split, np.asarray(x)), local)
    replicated = jax.tree.map(lambda x: jax.make_array_from_process_local_data(copy, np.asarray(x)), replicated)
    out = _run_or_scorer_error(run, c_global, per_context_global, replicated, scorer, c, scorer_kwargs)
    if gather:
        full = multihost_utils.process_allgather(out, tiled=True)
        rows = np.concatenate([np.arange(p * per_process, p * per_process + int(n)) for p, n in enumerate(counts)])
        return jax.tree.map(lambda x: jnp.asarray(np.asarray(x)[rows]), full)

    def mine(x):
        shards = sorted(x.addressable_shards, key=lambda sh: sh.index[0].start or 0)
        return jnp.asarray(np.concatenate([np.asarray(sh.data) for sh in shards])[:shape[0]])
    return jax.tree.map(mine, out)


def shard_contexts(scorer: Callable, c: Comparisons, *, devices: Sequence[Any] | None = None,
                   process_local: bool = False, gather: bool = True, **scorer_kwargs):
    """``scorer(c, **scorer_kwargs)`` with the contexts of ``c`` split over devices.

    The result equals ``scorer(c, **scorer_kwargs)`` on one device (same shapes
    and pytree; values equal up to float rounding). Each device scores its own
    share of the contexts; nothing is exchanged between devices.

    Args:
        scorer: any jaxrank scorer (every entry of :data:`jaxrank.SCORERS`,
            ``fit_poe_bradley_terry``, ``laplace_bradley_terry``, ...) or any
            ``scorer(c, **kwargs)`` that treats contexts independently, takes a
            batch with one leading batch axis and returns a pytree of arrays with
            the contexts as their first axis. Compilations are cached per
            ``scorer`` object: pass the same function (not a new ``lambda``
            each call) to reuse them.
        c: comparisons with at least one leading batch axis (any number:
            they are flattened and restored). The context count need not be a
            multiple of the device count: inert padding contexts fill the last
            device and are dropped from the result.
        devices: the devices to split over (default ``jax.devices()``); one
            device works too. On a CPU host, ``XLA_FLAGS=--xla_force_host_platform_device_count=8``
            (set before jax starts) gives 8 devices.
        **scorer_kwargs: options for the scorer. Arrays whose shape starts
            with ``c.batch_shape`` (e.g. a per-context ``threshold=`` or
            ``init=``) are split with the contexts, and so is a list of numbers
            whose shape does (one value per context); other arrays are copied to
            every device; any other value (``debias="learn"``, ``tol=1e-6``)
            is static: it must be hashable and a new value compiles anew. A
            tuple is static, passed whole to every device: a per-context tuple
            the scorer then refuses raises a ``ValueError`` naming the option
            (pass an array or a list).
        process_local: several processes (after :func:`jaxrank.distributed.initialize`):
            ``c`` (one batch axis) holds only *this process's* contexts; every
            process calls ``shard_contexts`` with its own (the counts may differ),
            and the contexts are scored on one mesh over every process's
            devices (``devices``, default ``jax.devices()``, all processes'),
            each process's on its own devices. Also right in one process.
        gather: with ``process_local``: return the results of every process's
            contexts, concatenated in process order (``True``, an allgather),
            or only this process's (``False``, no communication); plain arrays
            of this process either way.

    Returns:
        The scorer's output with batch shape ``c.batch_shape``, on the devices.
        When the first batch axis is a multiple of the device count, every
        array stays split over the devices along that axis; otherwise cutting
        the padding or restoring the batch shape gathers it (every device then
        holds a copy; ``np.asarray`` reads one).

    Raises:
        ValueError: if ``scorer`` is not callable, ``c`` is not a batched
            :class:`~jaxrank.Comparisons` with at least one context, ``devices`` is
            empty or holds something other than distinct jax devices, an option
            is neither an array nor hashable, or the scorer returns an array
            without the context axis first; the scorer's own errors are those
            of ``c`` unsplit (an option of the wrong length names ``c``'s
            context count, not one device's share).

    Example::

        c = jr.Comparisons.from_pairs(i, j, p, num_items=16)     # i, j, p: [10_000, 48]
        s = jr.shard_contexts(jr.poe_bradley_terry, c, debias="learn")   # [10_000, 16]
    """
    if not callable(scorer):
        raise ValueError(f"scorer must be callable (e.g. jaxrank.poe_bradley_terry), got {scorer!r}")
    if not isinstance(c, Comparisons):
        raise ValueError(f"c must be a jaxrank.Comparisons, got {type(c).__name__}")
    if process_local:
        return _shard_process_local(scorer, c, devices, scorer_kwargs, gather)
    shape = c.batch_shape
    if not shape:
        raise ValueError("c is a single context (no batch axis): there is nothing to split over devices; "
                         "call the scorer directly, or add a batch axis")
    b = math.prod(shape)
    if b == 0:
        raise ValueError(f"c has no contexts (batch shape {shape})")
    devices = _devices(devices)
    _warn_cpu_lapack_deadlock(devices)
    static, per_context, replicated = _split_kwargs(scorer_kwargs, shape)
    run, split, copy = _sharded(scorer, devices, static, tuple(sorted(per_context)), tuple(sorted(replicated)))

    pad = -b % len(devices)
    flat, per_context = jax.device_put(_flatten_and_pad(c, per_context, len(shape), pad), split)
    out = _run_or_scorer_error(run, flat, per_context, jax.device_put(replicated, copy), scorer, c, scorer_kwargs)
    if not pad and len(shape) == 1:
        return out                       # split evenly over the devices, as it is
    return _trim_and_unflatten(out, shape)
