"""Opt-in persistent compilation cache: a later process loads jaxrank's programs instead of compiling them.

On a CPU, XLA compilation is most of a first call: about 1-2 s for the
Bradley-Terry solver (shared by :func:`jaxrank.poe_bradley_terry` and
:func:`jaxrank.bradley_terry`), a fraction of a second for each other scorer,
against a few hundred milliseconds of work on 10,000 contexts. JAX can keep
compiled executables on disk (its persistent compilation cache, keyed by the
program, the jax/jaxlib version and the machine); a process that finds them
there skips compilation.

:func:`enable_compilation_cache` turns that cache on for the whole process (it
sets JAX's global ``jax_compilation_cache_dir``, so it also caches the
caller's own programs). jaxrank never calls it at import: it is the caller's
choice, like every global JAX setting. The ``jaxrank`` command line turns it
on (``--no-compilation-cache`` turns it off).

The persistent cache skips XLA's compilation, not JAX's tracing and lowering
of the Python function, which is most of what is left of a small first call
(about 0.4 s for ``jaxrank rank``'s program). :class:`ExportedProgram` keeps a
traced program itself on disk (a :mod:`jax.export` artifact, serialized
StableHLO), keyed by the program's name, the argument shapes, the versions of
jax and jaxlib, the backend and a digest of jaxrank's own source; a later
process deserializes it instead of tracing.

That still left the lowering of the deserialized program (``jax.jit`` of
``Exported.call``: its MLIR module rebuilt, hashed for the cache key, and, on a
CPU, jaxlib's LAPACK bound, which imports ``scipy.linalg``) on every first call:
0.3 s on an idle machine, 0.7-1.2 s on 2 busy cores (issue 33). With
``executables=`` (the scorers and ``jaxrank rank`` pass :func:`compiled_directory`)
:class:`ExportedProgram` also keeps the compiled executable
(:mod:`jax.experimental.serialize_executable`), keyed further by the compiler
options, the devices, the CPU's model and flags and ``XLA_FLAGS``; a later
process on the same machine loads and runs it with no tracing, lowering or
compilation at all (binding LAPACK first only where the program calls it).

A folder that cannot be written (read-only, full) is not an error: the program
runs from memory, a :class:`RuntimeWarning` names the folder once, and the next
process traces and compiles again. :func:`enable_compilation_cache` refuses a
folder it cannot write to with a ``PermissionError`` naming it (the command line
then runs without the cache and says so).

The files' keys, headers, atomic writes and the LAPACK binding live in the private
``jaxrank.compilation._store``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import pickle
import weakref
from collections.abc import Callable
from pathlib import Path

from jaxrank.compilation import _store
from jaxrank.compilation._store import _EXEC_MAGIC, _MAGIC, load_scipy_lapack

__all__ = ["clear_caches", "enable_compilation_cache", "default_cache_dir", "ExportedProgram", "exported_directory",
           "compiled_directory", "load_scipy_lapack"]


def default_cache_dir() -> Path:
    """``$JAXRANK_CACHE/xla``, else ``$XDG_CACHE_HOME/jaxrank/xla``, else ``~/.cache/jaxrank/xla``."""
    if os.environ.get("JAXRANK_CACHE"):
        return Path(os.environ["JAXRANK_CACHE"]).expanduser() / "xla"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "jaxrank" / "xla"


def enable_compilation_cache(directory: str | os.PathLike | None = None, *,
                             min_compile_seconds: float = 0.0) -> Path:
    """Turn on JAX's persistent compilation cache for this process.

    Args:
        directory: where compiled programs are kept (created if missing);
            default :func:`default_cache_dir`.
        min_compile_seconds: cache only programs that took at least this long
            to compile (JAX's default is 1 s, which would skip most of
            jaxrank's programs; 0 caches all).

    Returns:
        The cache directory.

    Raises:
        ValueError: ``min_compile_seconds`` negative, ``directory`` is a file, or it (or, without it,
            ``$JAXRANK_CACHE``) is a URL (``gs://...``: set
            ``jax_compilation_cache_dir`` with ``jax.config.update`` for a remote cache; jaxrank's own files
            are then not kept, :func:`exported_directory`).
        PermissionError: ``directory`` cannot be written to (JAX would otherwise warn on every program).
    """
    import jax  # deliberately lazy: the rest of this module (cache folders) needs no JAX, a cheap import

    if not min_compile_seconds >= 0:
        raise ValueError(f"min_compile_seconds must be >= 0, got {min_compile_seconds!r}")
    given = os.fspath(directory) if directory is not None else os.environ.get("JAXRANK_CACHE", "")
    if "://" in given:                   # Path() would make gs://b/x the local folder gs:/b/x
        what = "directory" if directory is not None else "$JAXRANK_CACHE"
        raise ValueError(f"{what} must be a local folder, got the URL {given!r}; for a remote cache call "
                         "jax.config.update('jax_compilation_cache_dir', url) yourself")
    path = Path(directory).expanduser() if directory is not None else default_cache_dir()
    if path.exists() and not path.is_dir():
        raise ValueError(f"directory {str(path)!r} exists and is not a folder")
    path.mkdir(parents=True, exist_ok=True)
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "the compilation cache folder is not writable; set $JAXRANK_CACHE to a "
                              "folder you can write to, or leave the cache off", str(path))
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_seconds))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return path


def exported_directory() -> Path | None:
    """Where traced programs go while JAX's persistent compilation cache is on in this process, else ``None``.

    Beside the cache folder: ``exported`` next to a folder named ``xla`` (the
    layout of :func:`default_cache_dir`), else the cache folder's name with
    ``-exported``. jaxrank's scorers keep their traced programs there
    (:class:`ExportedProgram`) only while the cache is on: a caller who has
    not asked for files on disk gets none. A remote cache folder (a URL such as
    ``gs://bucket/jax``, any path with ``://``) gives ``None`` too: jaxrank
    keeps its own files on local disks only (it used to write them under a
    local folder named ``gs:``).
    """
    import sys

    jax = sys.modules.get("jax")          # no cache without JAX imported; importing it here would cost 0.5 s
    if jax is None:
        return None
    cache = jax.config.jax_compilation_cache_dir
    if not cache:
        return None
    if "://" in str(cache):
        return None
    cache = Path(cache).expanduser()
    return cache.parent / "exported" if cache.name == "xla" else cache.with_name(cache.name + "-exported")


def compiled_directory() -> Path | None:
    """Where compiled executables go while the persistent cache is on, else ``None``: ``compiled`` beside
    :func:`exported_directory` (or the cache folder's name with ``-compiled``). Executables are specific to
    the machine (their key names it, :class:`ExportedProgram`); traced programs are not."""
    exported = exported_directory()
    if exported is None:
        return None
    return exported.parent / "compiled" if exported.name == "exported" else \
        exported.with_name(exported.name[:-len("-exported")] + "-compiled")


_LIVE_PROGRAMS: "weakref.WeakSet[ExportedProgram]" = weakref.WeakSet()


def clear_caches() -> None:
    """Release every compiled program this process holds: JAX's caches and jaxrank's kept programs.

    :func:`jax.clear_caches` drops the executables of every ``jax.jit``; this also drops those that
    :class:`ExportedProgram` objects loaded or compiled (the files on disk stay, so the next call of a
    released shape loads it again instead of compiling it, while the cache is on).

    A long process that compiles thousands of distinct shapes (a test run, a notebook sweeping many pool
    sizes without buckets) needs it: on XLA:CPU each compiled program maps about 18 memory regions of its
    own (measured: 300 small programs took 5,532 maps; all but 98 came back after this call), and Linux
    refuses new maps past ``vm.max_map_count`` (65,530 by default). LLVM then fails to place the next
    program's code, with ``Failed to materialize symbols ... Cannot allocate memory``, or the process
    crashes, whatever memory is free.
    """
    import jax  # deliberately lazy: see the module docstring

    for program in list(_LIVE_PROGRAMS):
        program.forget()
    jax.clear_caches()


class ExportedProgram:
    """A jitted function whose traced program (and, optionally, compiled executable) is kept on disk.

    The first call with a new signature traces ``fn`` once with
    :func:`jax.export.export` and writes the serialized artifact (atomically:
    a temporary file, then ``os.replace``) to ``directory``; every call runs
    the exported program under ``jax.jit``, whose compiled executable the
    persistent compilation cache keeps (:func:`enable_compilation_cache`). A
    later process with the same key reads the artifact instead of tracing.
    With ``executables`` the compiled executable itself is kept there too
    (:mod:`jax.experimental.serialize_executable`), and a later process on the
    same machine runs it without lowering or compiling anything: the first call
    of a scorer's bucket is then a file read and a load (tens of milliseconds),
    plus SciPy's import where the program calls LAPACK.

    The key of a traced program is ``name``, the shapes, dtypes and weak types
    of the arguments, the jax and jaxlib versions, the default backend, the JAX
    settings that change tracing (``jax_enable_x64``, the default matmul
    precision, the PRNG, ...) and a digest of jaxrank's source files, so an
    edited jaxrank or another JAX never reads a stale program. The key of an
    executable adds the compiler options and the machine (backend version,
    devices, the CPU's model and instruction-set flags, ``XLA_FLAGS``). A traced
    program is traced from the arguments' shapes and dtypes alone, so it is for
    any one device and runs on sharded arguments too (``jax.jit`` partitions it
    like the function itself); a compiled executable is kept and run only for
    arguments on the default device. In memory, a program is looked up by the
    arguments' shapes, dtypes, shardings and the tracing settings (a
    ``jax.default_matmul_precision`` block included). Every
    file starts with a digest of its key and of its content, checked before it
    is read: a file replaced by another one (another scorer's program copied
    over it, a file edited or truncated) or reached through a symbolic link is
    never run; it is made and written again, as is one that fails to load. A
    folder that cannot be written costs the next process a trace and a
    compilation, never the call: a :class:`RuntimeWarning` names it once.
    Arguments are arrays only (a flat tuple; pass static settings in ``name``
    and close over them in ``fn``); the result is a pytree of arrays (dicts,
    lists, tuples; no ``None`` leaves).

    A loaded executable is as trusted as the folder it comes from (it is machine
    code, like the entries of JAX's own persistent cache): keep the cache in a
    folder only you can write to.

    Args:
        fn: the function to jit, of arrays only.
        name: what the program is, including every static setting closed over
            in ``fn`` (different settings must give different names).
        directory: where traced programs are kept; default ``exported`` beside
            :func:`default_cache_dir`.
        compiler_options: XLA options of the compilation (``jax.jit``'s
            ``compiler_options``); they change the compiled executable (and its
            key), not the traced program.
        executables: where compiled executables are kept (:func:`compiled_directory`);
            ``None``: none are (the persistent cache still keeps them, but a later
            process lowers the program again to look them up).
    """

    def __init__(self, fn: Callable, *, name: str, directory: str | os.PathLike | None = None,
                 compiler_options: dict | None = None, executables: str | os.PathLike | None = None):
        if not name or not isinstance(name, str):
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self.fn, self.name, self.compiler_options = fn, name, dict(compiler_options or {}) or None
        self.directory = Path(directory).expanduser() if directory is not None else default_cache_dir().parent / "exported"
        self.executables = Path(executables).expanduser() if executables is not None else None
        self._calls: dict[str, Callable] = {}
        self._by_signature: dict[tuple, Callable] = {}
        _LIVE_PROGRAMS.add(self)

    def forget(self) -> None:
        """Drop the executables this program holds in memory (its files stay; the next call loads them again)."""
        self._calls.clear()
        self._by_signature.clear()

    def _key(self, *args) -> str:
        import jax  # deliberately lazy: see the module docstring
        import jaxlib

        sig = ";".join(f"{tuple(shape)}:{getattr(dtype, 'name', dtype)}" + (":weak" if weak else "")
                       for shape, dtype, weak in _store.signature(args))
        return "|".join([self.name, sig, jax.__version__, jaxlib.__version__, jax.default_backend(),
                         _store.trace_config(), _store.source_digest()])

    def _stem(self) -> str:
        return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in self.name)[:60]

    def path(self, *args) -> Path:
        """The traced program's file of a call with ``args``."""
        return self.directory / f"{self._stem()}-{hashlib.sha256(self._key(*args).encode()).hexdigest()[:32]}.jaxexport"

    def _executable_key(self, key: str) -> str:
        return "|".join([key, repr(sorted((self.compiler_options or {}).items())), _store.machine()])

    def executable_path(self, *args) -> Path | None:
        """The compiled executable's file of a call with ``args`` (``None`` without ``executables``)."""
        if self.executables is None:
            return None
        key = self._executable_key(self._key(*args))
        return self.executables / f"{self._stem()}-{hashlib.sha256(key.encode()).hexdigest()[:32]}.jaxexec"

    @staticmethod
    def _read(path: Path, key: str):
        """The traced program in ``path`` if its header's digest matches ``key`` and its content, else ``None``."""
        import jax

        found = _store.read_checked(path, key, _MAGIC)
        if found is None:
            return None
        try:
            return jax.export.deserialize(bytearray(found[1]))
        except Exception:                     # a damaged artifact: trace again and overwrite it
            return None

    def _load_executable(self, path: Path, key: str):
        """The compiled executable in ``path`` (LAPACK bound first where it calls it), else ``None``."""
        found = _store.read_checked(path, key, _EXEC_MAGIC)
        if found is None:
            return None
        flags, payload = found
        if flags == b"lapack" and not _store.bind_lapack():
            return None
        try:
            from jax.experimental import serialize_executable

            serialized, in_tree, out_tree = pickle.loads(payload)   # our own file, its digest checked above
            return serialize_executable.deserialize_and_load(serialized, in_tree, out_tree)
        except Exception:                     # a damaged file or another jaxlib's format: compile again
            return None

    def __call__(self, *args):
        # a call seen before: no key to build (a few microseconds). Keyed by the arguments' shardings too: the
        # executable compiled for arguments on the default device runs there only (data on another device or
        # sharded gets the jitted traced program), and by the tracing settings (a ``jax.default_matmul_precision``
        # block is another program)
        sig = _store.placed_signature(args)
        call = self._by_signature.get(sig)
        if call is None:
            call = self._by_signature[sig] = self._program(*args)
        return call(*args)

    def _program(self, *args):
        """The program of a call with ``args``: a loaded executable, or the traced program (read from its file,
        or traced and written there) jitted, compiled and its executable written."""
        import jax

        key = self._key(*args)
        exec_path = self.executable_path(*args) if _store.default_device(args) else None
        exec_key = self._executable_key(key) if exec_path is not None else ""
        if exec_path is not None:
            call = self._calls.get(str(exec_path)) or self._load_executable(exec_path, exec_key)
            if call is not None:
                self._calls[str(exec_path)] = call
                return call
        # lowering a program on a CPU binds LAPACK (JAX does it for every exported program): by SciPy's two
        # extension modules, not its whole linalg package (see load_scipy_lapack)
        load_scipy_lapack()
        path = self.path(*args)
        tag = hashlib.sha256((exec_key or key).encode()).hexdigest()[:16]
        jitted = self._calls.get(f"{path}#{tag}")
        if jitted is None:
            exported = self._read(path, key)
            if exported is None:
                # traced from shapes and dtypes alone: the program is for any one device, and jax.jit runs it on
                # the arguments' devices or shardings (traced from sharded arguments it was for their number of
                # devices only, and every later process on another number failed)
                exported = jax.export.export(jax.jit(self.fn))(*_store.abstract(args))
                if exported.nr_devices == 1:  # a program with its own shardings (fn's) stays in memory
                    payload = bytes(exported.serialize())
                    _store.write_atomic(path, _store.header(_MAGIC, key, payload) + payload)

            def program(*xs):
                return exported.call(*xs)
            # named by its key: JAX's persistent cache keys the module with its name, so an entry there is never
            # one of another key's (see below)
            program.__name__ = program.__qualname__ = f"jaxrank_{tag}"
            jitted = self._calls[f"{path}#{tag}"] = jax.jit(program, compiler_options=self.compiler_options)
        if exec_path is None:
            return jitted
        _store.listen()
        hits = getattr(_store._CACHE_HITS, "count", 0)
        lowered = jitted.lower(*args)
        # any custom call (jaxlib's LAPACK kernels are the CPU's) binds LAPACK before a later process runs it,
        # as lowering the exported program would; a program without one (counting, sums) never imports SciPy
        flags = b"lapack" if "custom_call" in lowered.as_text() else b"-"
        compiled = lowered.compile()
        if getattr(_store._CACHE_HITS, "count", 0) != hits:
            # loaded from JAX's persistent cache (our file was removed or damaged): jaxlib re-serializes such an
            # executable without its machine code ("Function ... not found" when the copy runs), so none is kept
            return compiled
        try:
            from jax.experimental import serialize_executable

            serialized, in_tree, out_tree = serialize_executable.serialize(compiled)
        except Exception:                     # an executable that cannot be serialized: kept in memory only
            return compiled
        payload = pickle.dumps((serialized, in_tree, out_tree))
        _store.write_atomic(exec_path, _store.header(_EXEC_MAGIC, exec_key, payload, flags) + payload)
        self._calls[str(exec_path)] = compiled
        return compiled
