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
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _graph, _sparse_inverse, compilation


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
    # deferred: loads the LAPACK jaxlib calls (see above), by its two extension modules alone when it can
    # (``compilation.load_scipy_lapack``: the package ``scipy.linalg`` costs 0.2-0.5 s more to import)
    compilation.load_scipy_lapack()
    import scipy.linalg.cython_lapack  # noqa: F401

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


# ----------------------------------------------------------------------------- buckets of the first call

SMALL_BUCKETS_UP_TO = 256
"""Up to this many items (and for comparisons at every size) a bucket is ``2^k`` or ``3 * 2^k`` (at most 1.5x
the size); above it ``m * 2^k`` with ``m`` in 4..7 (at most 1.25x), where a dense ``O(N^3)`` factorisation makes
padded items dear."""

MIN_ITEMS = 8
"""The smallest item bucket."""

MIN_COMPARISONS = 16
"""The smallest comparison bucket."""


def _next_size(n: int, fine: bool) -> int:
    """The smallest ``2^k``/``3 * 2^k`` (or with ``fine``, ``m * 2^k``, ``m`` in 4..7) that is at least ``n``."""
    if n <= 4:
        return max(n, 1)
    k = (n - 1).bit_length() - 3            # 2^(k+2) < n <= 2^(k+3)
    steps = (4, 5, 6, 7, 8) if fine else (4, 6, 8)
    return next(m << k for m in steps if m << k >= n)


def bucket(n: int, least: int = 1, *, fine: bool = False, below: tuple[int, ...] = ()) -> int:
    """The bucket of a size ``n``: the smallest bucket size at least ``max(n, least)``, never reaching a threshold.

    Args:
        n: the size needed.
        least: the smallest bucket.
        fine: ``m * 2^k`` with ``m`` in 4..7 (at most 1.25x ``n``) instead of ``2^k``/``3 * 2^k`` (1.5x).
        below: sizes where an algorithm switches (``size >= t`` takes another path): a size below ``t`` is
            never padded to ``t`` or beyond (its bucket is then ``t - 1``), so padding never changes the path.
    """
    n = max(int(n), int(least), 1)
    size = max(_next_size(n, fine), least)
    for t in below:
        if n < t <= size:
            size = t - 1
    return size


def item_thresholds() -> tuple[int, ...]:
    """Item counts where a scorer's algorithm (and so its rounding) changes: conjugate gradients from
    ``_graph.CG_MIN_ITEMS``, the sparse covariance above ``_sparse_inverse.DENSE_COVARIANCE_MAX_ITEMS``
    (read now: tests and benchmarks may move them)."""
    return (_graph.CG_MIN_ITEMS, _sparse_inverse.DENSE_COVARIANCE_MAX_ITEMS + 1)


def bucket_sizes(num_items: int, num_comparisons: int, *, below: tuple[int, ...] = ()) -> tuple[int, int]:
    """``(items, comparisons)`` of the bucket of a pool: what :func:`pad` pads it to.

    Items: :func:`bucket` from :data:`MIN_ITEMS`, fine above :data:`SMALL_BUCKETS_UP_TO`, never across
    :func:`item_thresholds` or ``below``; comparisons: :func:`bucket` from :data:`MIN_COMPARISONS`. Where the
    pool's own sizes pick the dense edge space (``_graph.use_dense``) and the bucket's would not, or the other
    way round, the comparisons' bucket is moved to the edge of that choice, so padding keeps the edge space.
    A bucket is a function of the sizes only (a bucket's programs serve every pool in it), and a bucket's
    own sizes are their bucket (padding twice pads once).

    Args:
        num_items: ``N`` of the pool.
        num_comparisons: ``R`` of the pool.
        below: further item thresholds of the caller's algorithm (see :func:`bucket`).
    """
    thresholds = item_thresholds() + tuple(below)
    n = bucket(num_items, MIN_ITEMS, fine=num_items > SMALL_BUCKETS_UP_TO, below=thresholds)
    r = bucket(num_comparisons, MIN_COMPARISONS)
    dense, dense_b = _graph.use_dense(num_items, num_comparisons), _graph.use_dense(n, r)
    if dense and not dense_b:            # more comparisons of weight 0: the bucket is dense too
        r = bucket(math.ceil(n * n / _graph.DENSE_RATIO))
    elif dense_b and not dense:          # fewer: the largest count that leaves the bucket sparse (>= R)
        r = math.ceil(n * n / _graph.DENSE_RATIO) - 1
    return n, r


def _staged() -> bool:
    """Whether a caller's ``jit`` (or ``vmap``, ``grad``) is tracing now, even a function of constants only."""
    try:
        from jax._src import core   # deferred: JAX's own test, private to it; without it assume top level
        return not core.trace_state_clean()
    except (ImportError, AttributeError):
        return False


def is_concrete(*trees) -> bool:
    """No leaf of ``trees`` is a tracer and nothing is being traced: the call is at the top level, outside any
    ``jit``, ``vmap`` or ``grad`` (a scorer of constants inside a caller's ``jit`` is staged into its program)."""
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(trees)) and not _staged()


def _on_host(x) -> bool:
    """``x`` is a NumPy array or a JAX array on the CPU (padded by NumPy: no compiled program per shape)."""
    if isinstance(x, jax.core.Tracer):     # staged into a caller's program (a scorer of constants inside jit)
        return False
    if isinstance(x, np.ndarray) or not isinstance(x, jax.Array):
        return True
    return all(d.platform == "cpu" for d in x.devices())


def pad_last(x, size: int, value):
    """``x`` with its last axis padded to ``size`` with ``value`` (NumPy on the host; ``jnp`` on an accelerator)."""
    extra = size - x.shape[-1]
    if extra == 0:
        return x
    widths = [(0, 0)] * (x.ndim - 1) + [(0, extra)]
    if _on_host(x):
        x = np.asarray(x)
        out = np.full(x.shape[:-1] + (size,), value, x.dtype)     # a third of np.pad's time on 16k entries
        out[..., :x.shape[-1]] = x
        return out
    return jnp.pad(x, widths, constant_values=value)


def pad_items(x, size: int, num_items: int):
    """Item indices ``x [..., R]`` padded to ``size`` slots, slot ``k`` pointing at item ``k mod num_items``."""
    extra = size - x.shape[-1]
    if extra == 0:
        return x
    tail = (np.arange(x.shape[-1], size) % max(num_items, 1)).astype(x.dtype)
    if _on_host(x):
        x = np.asarray(x)
        out = np.empty(x.shape[:-1] + (size,), x.dtype)
        out[..., :x.shape[-1]] = x
        out[..., x.shape[-1]:] = tail
        return out
    return jnp.concatenate([x, jnp.broadcast_to(jnp.asarray(tail), x.shape[:-1] + (extra,))], -1)


_LAST_PAD: tuple = ()


def pad(c, num_items: int, num_comparisons: int):
    """``c`` with ``num_items`` items and ``num_comparisons`` comparisons: the padded items masked out, the
    padded comparisons self-pairs ``k vs k`` of weight 0, ``k`` the slot's index modulo the unpadded
    ``c.num_items`` (the padding contract of :class:`jaxrank.Comparisons`: every score of a real item is unchanged, a padded item gets the
    neutral score). A comparison of weight 0 adds exactly 0 to every sum wherever it points; spread over the items
    rather than all on item 0, it never turns a scatter-add into a chain of dependent adds onto one address
    (:data:`jaxrank.scoring.bradley_terry.PAD_SPREAD_NOTE`: PoE-BT on a padded 5,000-item pool 0.79-0.86x its time
    with ``0 vs 0``, the same scores).

    The last pool of JAX arrays (immutable) padded on the host is kept, moved to the device, while it lives:
    a loop scoring one pool again and again pads and copies it once.
    """
    if c.num_items == num_items and c.i.shape[-1] == num_comparisons:
        return c
    global _LAST_PAD
    last = _LAST_PAD
    if last and last[0]() is c and last[1] == (num_items, num_comparisons):
        return last[2]
    r = num_comparisons
    out = type(c)(i=pad_items(c.i, r, c.num_items), j=pad_items(c.j, r, c.num_items), p=pad_last(c.p, r, 0.5),
                  weight=pad_last(c.weight, r, 0), item_mask=pad_last(c.item_mask, num_items, False),
                  num_items=num_items)
    arrays = (c.i, c.j, c.p, c.weight, c.item_mask)
    if all(isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer) for x in arrays):
        moved = jax.device_put([out.i, out.j, out.p, out.weight, out.item_mask])   # one transfer, no program
        out = type(c)(*moved, num_items=num_items)
        _LAST_PAD = (weakref.ref(c), (num_items, num_comparisons), out)
    return out


def unpad(tree, num_items: int, batch_ndim: int):
    """Every leaf of ``tree`` cut back to ``num_items`` along each axis after its ``batch_ndim`` batch axes
    (scores ``[..., N]``, covariances ``[..., N, N]``; per-context leaves are left alone).

    Cut on the host and returned as JAX arrays (an eager slice would compile a program per size).
    """
    def cut(x):
        if x.ndim <= batch_ndim or all(k == num_items for k in x.shape[batch_ndim:]):
            return x
        idx = (slice(None),) * batch_ndim + tuple(slice(0, num_items) for _ in range(x.ndim - batch_ndim))
        if _on_host(x):
            return jax.device_put(np.asarray(x)[idx]) if isinstance(x, jax.Array) else np.asarray(x)[idx]
        return x[idx]
    return jax.tree.map(cut, tree)


SMALL_PROGRAM_ITEMS = 64
"""Buckets of at most this many items are compiled by XLA without its backend optimisations and with its
older CPU emitters (:func:`compiler_options`), when the batch is small too (:data:`SMALL_PROGRAM_COMPARISONS`)."""

SMALL_PROGRAM_COMPARISONS = 32_768
"""...and the call's padded comparisons over every context of the batch are at most this many.

Unoptimised code runs each comparison several times slower, which a few hundred comparisons do not feel but a
sweep does: 10,000 contexts of 48 comparisons among 16 items (2 cores, load ~5) ran a win ratio in 116 ms
against 10 ms optimised, Bradley-Terry in 1.40 s against 0.30 s and PoE-g in 0.39 s against 0.12 s, where the
optimised Bradley-Terry program compiles about 4 s longer; at 340 contexts (16,320 comparisons) 52 ms against
6 ms for Bradley-Terry, its compile still 4 s longer. Past this size the optimised program pays for itself within
a few dozen calls."""


def _legacy_emitters_option() -> dict:
    """``{"xla_cpu_use_fusion_emitters": False, "xla_cpu_parallel_codegen_split_count": 1}`` where the installed
    jaxlib is one they were measured on (0.10.x, the versions ``pyproject.toml`` allows; XLA rejects an option
    it does not know), else ``{}``."""
    import jaxlib   # deferred: only the version string

    if not jaxlib.__version__.startswith("0.10."):
        return {}
    return {"xla_cpu_use_fusion_emitters": False, "xla_cpu_parallel_codegen_split_count": 1}


def compiler_options(num_items: int, num_comparisons: int | None = None) -> dict | None:
    """XLA options of a bucket's program: for at most :data:`SMALL_PROGRAM_ITEMS` items and (when given) at most
    :data:`SMALL_PROGRAM_COMPARISONS` padded comparisons in the whole batch, ``xla_backend_optimization_level=0`` and (jaxlib 0.10) ``xla_cpu_use_fusion_emitters=False`` and
    ``xla_cpu_parallel_codegen_split_count=1``, else the defaults (``None``).

    On a small pool the compiled code runs in a fraction of a millisecond either way, and compiling is most of
    a first call. LLVM's optimisations: the soft-BT fit of 24 items (2 cores, load ~10) compiled in 3.4 s
    instead of 6.0 s and ran in 0.24 ms against 0.22 ms; at 1,000 items they pay (0.0011 s a call against
    0.016 s). XLA's fusion emitters (issue 33, fresh processes, 2 pairs each at load 9, 24 items): without
    them compilation took 0.72-1.04 s against 2.42-2.68 s (BT), 0.80 against 2.13-2.46 s (PoE-BT), 0.15-0.30
    against 0.85-0.87 s (PoE-g), 0.43-0.48 against 1.30-1.74 s (max-likelihood ranking), with bit-identical
    scores; a PoE-BT call then ran in 0.85-0.91 ms against 0.50 ms, the others within noise. LLVM's module in
    one piece (``xla_cpu_parallel_codegen_split_count=1``, not split for threads that 2 busy cores cannot run at
    once): ``jaxrank rank``'s PoE-BT + Laplace program of 8 items compiled in 0.51 s of CPU against 0.59 s
    (median of 5, load 10), the same scores.
    """
    if num_items > SMALL_PROGRAM_ITEMS or (num_comparisons is not None and num_comparisons > SMALL_PROGRAM_COMPARISONS):
        return None
    return {"xla_backend_optimization_level": 0, **_legacy_emitters_option()}


_PROGRAMS: dict = {}


def call(fn, name: str, *args, options: dict | None = None):
    """``fn(*args)``, through a traced program kept on disk while the persistent compilation cache is on.

    With the cache on (:func:`jaxrank.compilation.exported_directory`) and concrete ``args``, the program is a
    :class:`jaxrank.compilation.ExportedProgram` of ``fn`` on the flattened ``args``, its compiled executable
    kept too (:func:`jaxrank.compilation.compiled_directory`): a later process with the same shapes (a pool of
    the same bucket) on the same machine loads and runs the executable, with no tracing, lowering or
    compilation. Otherwise (no cache, or tracers) a plain call.

    Args:
        fn: a function of pytrees of arrays (``None`` allowed) whose result is a tuple, list or dict of arrays
            (no ``NamedTuple``: rebuild it from a tuple); jitted or not.
        name: what ``fn`` is with every static setting it closes over (different settings, different names).
        *args: its arguments.
        options: XLA compiler options (:func:`compiler_options`); with them ``fn`` is compiled as a program of
            its own even without the cache.
    """
    if not is_concrete(args):
        return fn(*args)
    directory = compilation.exported_directory()
    opts = tuple(sorted((options or {}).items()))
    if directory is None:
        if not opts:
            return fn(*args)
        key = (name, opts)
        program = _PROGRAMS.get(key)
        if program is None:
            program = _PROGRAMS[key] = jax.jit(fn, compiler_options=dict(opts))
        return program(*args)
    leaves, tree = jax.tree.flatten(args)
    key = (name, tree, str(directory), opts)
    program = _PROGRAMS.get(key)
    if program is None:
        def flat(*xs):
            return fn(*jax.tree.unflatten(tree, xs))
        program = _PROGRAMS[key] = compilation.ExportedProgram(flat, name=f"{name}-{tree}", directory=directory,
                                                               compiler_options=dict(opts) or None,
                                                               executables=compilation.compiled_directory())
    return program(*leaves)


def bucketed(fn, name: str | None, c, *args, item_args: tuple[int, ...] = (), below: tuple[int, ...] = ()):
    """``fn(c, *args)`` on ``c`` padded to its bucket (:func:`bucket_sizes`), its results cut back (:func:`unpad`).

    The one way a scorer's public entry point runs its jitted program: every pool of a bucket runs one
    program, through :func:`call` (kept on disk while the persistent cache is on). Inside a caller's
    ``jit``, ``vmap`` or ``grad`` it is a plain ``fn(c, *args)``.

    Args:
        fn: ``(c, *args) -> tuple, list or dict of arrays`` (see :func:`call`).
        name: ``fn`` with its static settings (see :func:`call`); ``None``: never kept on disk (a program whose
            settings have no name that is the same in every process, such as a user's expert).
        c: the comparisons, any batch shape.
        *args: further arguments; those at positions ``item_args`` have ``c``'s items as their last axis
            and are padded with 0 (the neutral score of a padded item).
        item_args: positions in ``args`` of per-item arrays.
        below: item thresholds of ``fn``'s algorithm beyond :func:`item_thresholds` (see :func:`bucket`).
    """
    if not is_concrete(c, args):
        return fn(c, *args)
    n, r = bucket_sizes(c.num_items, c.i.shape[-1], below=below)
    args = tuple(pad_last(a, n, 0) if k in item_args else a for k, a in enumerate(args))
    cp = pad(c, n, r)
    out = fn(cp, *args) if name is None else call(fn, name, cp, *args, options=compiler_options(n, cp.i.size))
    return unpad(out, c.num_items, len(c.batch_shape))
