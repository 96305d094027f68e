"""Private batching and loop control: contexts mapped, chunked and iterated independently.

The graph algebra of one context is :mod:`jaxrank._graph`; here are the ways a
single-context function runs over a batch: :func:`batched` (``vmap`` over any
leading batch axes), :func:`flatten_batch` / :func:`map_chunks` (a ``lax.map``
over chunks of contexts), :func:`while_per_context` (a ``while_loop`` whose
contexts stop independently), and the LAPACK thread setting of large solves
(:func:`single_threaded_lapack`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import threading

import jax
import jax.numpy as jnp


def batched(fn, c, *args, **kwargs):
    """Apply single-context ``fn(c, *args, **kwargs)`` over ``c``'s leading batch axes.

    ``args`` must share ``c``'s batch axes (their trailing axes are per-context).
    """
    nb = c.i.ndim - 1
    f = functools.partial(fn, **kwargs)
    for _ in range(nb):
        f = jax.vmap(f)
    return f(c, *args)


BLAS_SINGLE_THREAD_MIN_ITEMS = 32
"""Solvers on at least this many items run their LAPACK calls single-threaded (:func:`single_threaded_lapack`)."""


@functools.lru_cache(maxsize=1)
def _openblas_thread_controls():
    """``(get, set)`` thread-count functions of every OpenBLAS loaded in this process (Linux; else ``()``).

    On a CPU, jaxlib's factorisations (Cholesky, triangular solves) call the
    LAPACK that SciPy links, usually its bundled OpenBLAS. jaxlib loads it only
    when it first compiles a factorisation, which may come after this is
    first called (and cached): so it is loaded here first. (Without this, a
    process that had not touched SciPy's LAPACK before its first solve found
    no OpenBLAS to limit, and its 337 x 337 Cholesky factorisations took 13 ms
    each instead of 0.4 ms under load.)
    """
    import scipy.linalg.cython_lapack  # noqa: F401  (deferred: loads the LAPACK jaxlib calls; see above)

    try:
        with open("/proc/self/maps") as fh:
            paths = sorted({ln.split()[-1] for ln in fh if "openblas" in ln.lower() and "/" in ln})
    except OSError:
        return ()
    found = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in ("scipy_openblas", "scipy_openblas64_", "openblas"):
            get = getattr(lib, f"{prefix}_get_num_threads", None)
            put = getattr(lib, f"{prefix}_set_num_threads", None)
            if get is not None and put is not None:
                get.restype, put.argtypes = ctypes.c_int, [ctypes.c_int]
                found.append((get, put))
                break
    return tuple(found)


_lapack_lock = threading.Lock()
_lapack_depth = 0
_lapack_saved: list = []


@contextlib.contextmanager
def single_threaded_lapack():
    """Run the enclosed (blocking) JAX calls with OpenBLAS limited to one thread; restore it afterwards.

    Measured on the football results (316 teams, a 316 x 316 Cholesky per
    Newton step) on 2 cores shared with other jobs: OpenBLAS's threads, which
    busy-wait for each other, made a 9 ms solve take 135 ms in the median and
    up to 2 s (``benchmarks/football_bt.py``); single-threaded it stayed at
    9 ms. The limit is process-wide while it lasts (OpenBLAS has no per-call
    setting), so the caller must block on its results inside the ``with``;
    it is never set at import. Nested and concurrent uses restore the count
    once the last one leaves. Without an OpenBLAS (another LAPACK, or not
    Linux) it does nothing.
    """
    global _lapack_depth
    controls = _openblas_thread_controls()
    with _lapack_lock:
        if _lapack_depth == 0:
            _lapack_saved[:] = [get() for get, _ in controls]
            for _, put in controls:
                put(1)
        _lapack_depth += 1
    try:
        yield
    finally:
        with _lapack_lock:
            _lapack_depth -= 1
            if _lapack_depth == 0:
                for (_, put), n in zip(controls, _lapack_saved):
                    put(n)


def run_single_threaded_lapack(fn, *args, num_items: int, **kwargs):
    """``fn(*args, **kwargs)`` blocked on, under :func:`single_threaded_lapack` when worth it.

    Worth it at the top level (no argument is a tracer) for at least
    :data:`BLAS_SINGLE_THREAD_MIN_ITEMS` items; otherwise a plain call (no block).
    """
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kwargs)))
    if traced or num_items < BLAS_SINGLE_THREAD_MIN_ITEMS:
        return fn(*args, **kwargs)
    with single_threaded_lapack():
        return jax.block_until_ready(fn(*args, **kwargs))


def flatten_batch(c):
    """``(c with one batch axis [B, ...], batch_shape)`` for ``c`` of any batch shape (``B = 1`` if none)."""
    shape = c.i.shape[:-1]
    b = math.prod(shape)
    flat = jax.tree.map(lambda x: x.reshape((b,) + x.shape[len(shape):]), c)
    return flat, shape


def unflatten_batch(tree, shape):
    """Undo :func:`flatten_batch` on every leaf of ``tree`` (leading axis ``B``)."""
    return jax.tree.map(lambda x: x.reshape(shape + x.shape[1:]), tree)


def map_chunks(fn, tree, size: int):
    """``fn`` over the leading axis ``B`` of ``tree`` in chunks of ``size``, one after another.

    The same result as ``fn(tree)`` for a per-context ``fn``, but a batched
    solver then iterates each chunk only as long as that chunk's slowest
    context needs (not the whole batch's), and a chunk's working set stays in
    cache. One compiled copy of ``fn`` (a ``lax.map``); the last chunk is
    padded by repeating the last context, and the padding is dropped.
    """
    b = jax.tree.leaves(tree)[0].shape[0]
    if b <= size:
        return fn(tree)
    nc = -(-b // size)
    pad = nc * size - b

    def split(x):
        if pad:
            x = jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)], axis=0)
        return x.reshape((nc, size) + x.shape[1:])

    out = jax.lax.map(fn, jax.tree.map(split, tree))
    return jax.tree.map(lambda x: x.reshape((nc * size,) + x.shape[2:])[:b], out)


TAIL_FRACTION = 32
""":func:`while_per_context` moves the last ``B // TAIL_FRACTION`` running contexts to a small batch."""


def while_per_context(cont, step, operands, state, *, compact: bool = True):
    """Iterate ``state <- step(operands, state)`` per context while ``cont(state)``, over a batch ``[B]``.

    The same result as ``jax.vmap`` of a ``lax.while_loop`` (every context stops
    on its own, later steps leave its state unchanged), but cheaper when a few
    contexts need many more iterations than the rest: once at most
    ``K = B // TAIL_FRACTION`` contexts are still running, those ``K`` (chosen by
    ``lax.top_k``, a static size) are gathered into a small batch that finishes
    alone, and are scattered back. Under a vmapped ``while_loop`` the whole
    batch would pay for the slowest context. A batch of one context runs
    ``step`` in a plain ``while_loop``, not vmapped, so a ``lax.cond`` inside it
    executes only the branch taken.

    Args:
        cont: ``state -> bool`` for one context: keep iterating.
        step: ``(operands, state) -> state`` for one context.
        operands: pytree with leading axis ``B``, fixed during the loop.
        state: pytree with leading axis ``B``.
        compact: finish the last ``K`` running contexts in a small batch (a second
            compiled loop: faster steady state, longer compilation); False is
            ``jax.vmap`` of one ``while_loop``.

    Returns:
        The final state, leading axis ``B``.
    """
    b = jax.tree.leaves(state)[0].shape[0]
    if b == 1:
        # one context: its own loop, not vmapped, so a ``lax.cond`` in ``step`` runs only the branch it
        # takes (under ``vmap`` the predicate is batched and both branches run)
        one = lambda t: jax.tree.map(lambda x: x[0], t)
        ops = one(operands)
        out = jax.lax.while_loop(cont, lambda s: step(ops, s), one(state))
        return jax.tree.map(lambda x: x[None], out)
    vcont = jax.vmap(cont)
    vstep = jax.vmap(step)

    def masked_step(ops, st):
        run = vcont(st)
        new = vstep(ops, st)
        return jax.tree.map(lambda a, b: jnp.where(run.reshape(run.shape + (1,) * (a.ndim - 1)), a, b), new, st)

    def loop(ops, st, limit):
        return jax.lax.while_loop(lambda s: jnp.sum(vcont(s)) > limit, lambda s: masked_step(ops, s), st)

    k = b // TAIL_FRACTION
    if k < 1 or not compact:
        return loop(operands, state, 0)
    state = loop(operands, state, k)
    _, idx = jax.lax.top_k(vcont(state).astype(jnp.int32), k)
    take = lambda t: jax.tree.map(lambda x: x[idx], t)
    sub = loop(take(operands), take(state), 0)
    return jax.tree.map(lambda x, y: x.at[idx].set(y), state, sub)
