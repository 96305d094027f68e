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
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["enable_compilation_cache", "default_cache_dir", "ExportedProgram", "exported_directory"]


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
        ValueError: ``min_compile_seconds`` negative, or ``directory`` is a file.
    """
    import jax  # deliberately lazy: the rest of this module (cache folders) needs no JAX, a cheap import

    if not min_compile_seconds >= 0:
        raise ValueError(f"min_compile_seconds must be >= 0, got {min_compile_seconds!r}")
    path = Path(directory).expanduser() if directory is not None else default_cache_dir()
    if path.exists() and not path.is_dir():
        raise ValueError(f"directory {str(path)!r} exists and is not a folder")
    path.mkdir(parents=True, exist_ok=True)
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
    not asked for files on disk gets none.
    """
    import sys

    jax = sys.modules.get("jax")          # no cache without JAX imported; importing it here would cost 0.5 s
    if jax is None:
        return None
    cache = jax.config.jax_compilation_cache_dir
    if not cache:
        return None
    cache = Path(cache).expanduser()
    return cache.parent / "exported" if cache.name == "xla" else cache.with_name(cache.name + "-exported")


def _source_digest() -> str:
    """SHA-256 of every ``.py`` file of the installed jaxrank (path and content): a changed program is a new key."""
    global _SOURCE_DIGEST
    if _SOURCE_DIGEST is None:
        root = Path(__file__).resolve().parent
        h = hashlib.sha256()
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
        _SOURCE_DIGEST = h.hexdigest()
    return _SOURCE_DIGEST


_SOURCE_DIGEST: str | None = None
_MAGIC = b"jaxrank-export-v2"


class ExportedProgram:
    """A jitted function whose traced program is kept on disk, so a later process skips tracing it.

    The first call with a new signature traces ``fn`` once with
    :func:`jax.export.export` and writes the serialized artifact (atomically:
    a temporary file, then ``os.replace``) to ``directory``; every call runs
    the exported program under ``jax.jit``, whose compiled executable the
    persistent compilation cache keeps (:func:`enable_compilation_cache`). A
    later process with the same key reads the artifact instead of tracing:
    ``jaxrank rank`` on a small file spends about 0.2 s there instead of 0.6 s.

    The key of an artifact is ``name``, the shapes and dtypes of the
    arguments, the jax and jaxlib versions, the default backend and a digest
    of jaxrank's source files, so an edited jaxrank or another JAX never reads
    a stale program. The file starts with a digest of that key and of the
    serialized program, checked before it is read: an artifact replaced by
    another one (another scorer's program copied over it, a file edited or
    truncated) or reached through a symbolic link is never run; it is traced and
    written again, as is one that fails to deserialize. Arguments are arrays only (a flat tuple; pass
    static settings in ``name`` and close over them in ``fn``); the result is a
    pytree of arrays (dicts, lists, tuples; no ``None`` leaves).

    Args:
        fn: the function to jit, of arrays only.
        name: what the program is, including every static setting closed over
            in ``fn`` (different settings must give different names).
        directory: where artifacts are kept; default ``exported`` beside
            :func:`default_cache_dir`.
        compiler_options: XLA options of the compilation (``jax.jit``'s
            ``compiler_options``); they change the compiled executable (and its
            cache entry), not the traced program on disk.
    """

    def __init__(self, fn: Callable, *, name: str, directory: str | os.PathLike | None = None,
                 compiler_options: dict | None = None):
        if not name or not isinstance(name, str):
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self.fn, self.name, self.compiler_options = fn, name, dict(compiler_options or {}) or None
        self.directory = Path(directory).expanduser() if directory is not None else default_cache_dir().parent / "exported"
        self._calls: dict[str, Callable] = {}
        self._by_signature: dict[tuple, Callable] = {}

    def _key(self, *args) -> str:
        import jax  # deliberately lazy: see the module docstring
        import jaxlib

        sig = ";".join(f"{tuple(getattr(a, 'shape', ()))}:{getattr(a, 'dtype', type(a).__name__)}" for a in args)
        return "|".join([self.name, sig, jax.__version__, jaxlib.__version__, jax.default_backend(),
                         _source_digest()])

    def path(self, *args) -> Path:
        """The artifact file of a call with ``args``."""
        stem = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in self.name)[:60]
        return self.directory / f"{stem}-{hashlib.sha256(self._key(*args).encode()).hexdigest()[:32]}.jaxexport"

    @staticmethod
    def _digest(key: str, payload: bytes) -> bytes:
        return hashlib.sha256(key.encode() + b"\0" + payload).hexdigest().encode()

    def _read(self, path: Path, key: str):
        """The program in ``path`` if its header's digest matches ``key`` and its content, else ``None``."""
        import jax

        if path.is_symlink() or not path.is_file():
            return None
        data = path.read_bytes()
        head, _, payload = data.partition(b"\n")
        magic, _, digest = head.partition(b" ")
        if magic != _MAGIC or digest != self._digest(key, payload):
            return None                       # another program, an edited or truncated file: never run it
        try:
            return jax.export.deserialize(bytearray(payload))
        except Exception:                     # a damaged artifact: trace again and overwrite it
            return None

    def __call__(self, *args):
        sig = tuple((getattr(a, "shape", ()), getattr(a, "dtype", type(a))) for a in args)
        call = self._by_signature.get(sig)        # a call seen before: no key to build (a few microseconds)
        if call is None:
            call = self._by_signature[sig] = self._program(*args)
        return call(*args)

    def _program(self, *args):
        """The jitted program of a call with ``args``: read from its artifact, or traced and written there."""
        import jax

        path = self.path(*args)
        call = self._calls.get(str(path))
        if call is None:
            key = self._key(*args)
            exported = self._read(path, key)
            if exported is None:
                exported = jax.export.export(jax.jit(self.fn))(*args)
                payload = bytes(exported.serialize())
                self._write(path, _MAGIC + b" " + self._digest(key, payload) + b"\n" + payload)
            call = self._calls[str(path)] = jax.jit(exported.call, compiler_options=self.compiler_options)
        return call

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
