"""The files of :class:`jaxrank.compilation.ExportedProgram`: their keys, their digest-checked headers, atomic
writes, and binding jaxlib's LAPACK kernels before a loaded executable runs.

Private to :mod:`jaxrank.compilation` (split from it to keep each file short; issue 33). Every file is
``MAGIC DIGEST FLAGS\n`` followed by its payload, ``DIGEST`` the SHA-256 of its key, ``FLAGS`` and the payload
(:func:`header`, :func:`read_checked`): a file that is another program's, edited, truncated or reached through
a symbolic link is never run.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import warnings
from pathlib import Path


def source_digest() -> str:
    """SHA-256 of every ``.py`` file of the installed jaxrank (path and content): a changed program is a new key."""
    global _SOURCE_DIGEST
    if _SOURCE_DIGEST is None:
        root = Path(__file__).resolve().parents[1]   # the jaxrank package (this file is in compilation/)
        h = hashlib.sha256()
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
        _SOURCE_DIGEST = h.hexdigest()
    return _SOURCE_DIGEST


_SOURCE_DIGEST: str | None = None
_MACHINE: str | None = None
_MAGIC = b"jaxrank-export-v3"   # v3: the header of executables (flags field), read by one helper
_EXEC_MAGIC = b"jaxrank-executable-v1"
_WARNED: set = set()

_TRACE_CONFIG = ("jax_enable_x64", "jax_default_matmul_precision", "jax_default_prng_impl",
                 "jax_threefry_partitionable", "jax_numpy_dtype_promotion", "jax_use_shardy_partitioner")
"""JAX settings that change what a function traces or lowers to: part of every key."""


def trace_config() -> str:
    import jax

    return ",".join(f"{name}={getattr(jax.config, name, None)}" for name in _TRACE_CONFIG)


_STATES: list = []


def trace_values() -> tuple:
    """The values of :data:`_TRACE_CONFIG` in this thread (a ``with jax.default_matmul_precision(...)`` block
    included), read from JAX's setting objects (0.1 microseconds, against 3 for :func:`trace_config`); where
    this JAX has none of them, :func:`trace_config`."""
    if not _STATES:
        import jax

        holders = getattr(jax.config, "_value_holders", {})
        states = [holders.get(name) for name in _TRACE_CONFIG]
        _STATES.append(tuple(states) if all(hasattr(st, "value") for st in states) else None)
    states = _STATES[0]
    return trace_config() if states is None else tuple(st.value for st in states)


def machine() -> str:
    """What a compiled executable depends on beyond its program: the backend and its version, the devices, the
    CPU (model name and instruction-set flags from ``/proc/cpuinfo`` where there is one) and ``XLA_FLAGS``."""
    global _MACHINE
    if _MACHINE is None:
        import platform

        import jax

        devices = jax.devices()
        cpu = platform.machine() + platform.processor()
        try:
            with open("/proc/cpuinfo") as fh:
                lines = [ln for ln in fh if ln.startswith(("model name", "flags", "Features", "CPU part"))]
            cpu += "".join(sorted(set(lines)))
        except OSError:
            pass
        client = devices[0].client
        _MACHINE = "|".join([client.platform, client.platform_version, str(len(devices)),
                             ",".join(sorted({d.device_kind for d in devices})),
                             hashlib.sha256(cpu.encode()).hexdigest(), os.environ.get("XLA_FLAGS", "")])
    return _MACHINE


def _digest(key: str, payload: bytes) -> bytes:
    return hashlib.sha256(key.encode() + b"\0" + payload).hexdigest().encode()


def header(magic: bytes, key: str, payload: bytes, flags: bytes = b"-") -> bytes:
    """The first line of a file of ``magic`` holding ``payload`` under ``key`` (its digest covers ``flags`` too)."""
    return magic + b" " + _digest(key, flags + b"\0" + payload) + b" " + flags + b"\n"


def read_checked(path: Path, key: str, magic: bytes) -> tuple[bytes, bytes] | None:
    """``(flags, payload)`` of ``path`` if it is a plain file whose header (:func:`header`) names ``magic`` and
    the digest of ``key``, its flags and its payload; else ``None`` (missing, unreadable, a symbolic link,
    another program's file, an edited or truncated one: never run)."""
    if path.is_symlink() or not path.is_file():
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head, _, payload = data.partition(b"\n")
    parts = head.split(b" ")
    if len(parts) != 3 or parts[0] != magic or parts[1] != _digest(key, parts[2] + b"\0" + payload):
        return None
    return parts[2], payload


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file, then ``os.replace``); a folder that cannot be
    written is warned about once (:func:`warn_unwritable`), not raised."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        warn_unwritable(path.parent, e)
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


def warn_unwritable(directory: Path, error: OSError) -> None:
    if str(directory) not in _WARNED:
        _WARNED.add(str(directory))
        warnings.warn(f"jaxrank could not keep a program in {directory} ({error.strerror or error}); it runs from "
                      "memory and a later process traces and compiles it again. Make the folder writable or set "
                      "$JAXRANK_CACHE to another one.", RuntimeWarning, stacklevel=4)


_SCIPY_LAPACK = ("scipy.linalg.cython_blas", "scipy.linalg.cython_lapack")
"""The two SciPy extension modules whose exported C routines jaxlib binds its CPU LAPACK kernels to."""


def load_scipy_lapack() -> None:
    """Load SciPy's Cython BLAS and LAPACK modules by themselves, without running ``scipy.linalg/__init__``.

    jaxlib needs only their C routines' addresses (their ``__pyx_capi__``), but importing them by name first
    imports the package ``scipy.linalg`` and everything it imports: 0.2 s on an idle machine, 0.4 s at load 8,
    against 0.03 s for the two extension modules (measured in this session). Each is loaded from its file
    beside ``scipy/linalg/__init__.py`` and registered under its own name, so every later import (jaxlib's,
    jaxrank's OpenBLAS thread control, a user's ``import scipy.linalg``) finds it. Anything unexpected (another
    layout of SciPy, a failed load) leaves the module out, and the normal import happens instead.
    """
    import importlib.machinery
    import importlib.util
    import sys

    try:
        import scipy   # the top-level package alone is cheap (a few ms); it locates the files

        folder = Path(scipy.__file__).parent / "linalg"
    except Exception:
        return
    for name in _SCIPY_LAPACK:
        if name in sys.modules:
            continue
        short = name.rsplit(".", 1)[1]
        path = next((folder / (short + suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES
                     if (folder / (short + suffix)).is_file()), None)
        if path is None:
            return
        try:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        except Exception:
            sys.modules.pop(name, None)
            return


def bind_lapack() -> bool:
    """Bind jaxlib's CPU LAPACK kernels to SciPy's routines (what lowering a LAPACK call does); whether it could.

    A loaded executable that calls LAPACK before this would jump to an unset routine and crash the process.
    """
    try:
        import numpy as np
        from jaxlib import lapack   # deferred: binds to SciPy's routines, only for programs that call LAPACK

        load_scipy_lapack()
        lapack.prepare_lapack_call("potrf", np.float32)
        return True
    except Exception:               # another jaxlib: no executables (the exported program binds LAPACK itself)
        return False


_CACHE_HITS = threading.local()
_LISTENING: list = []


def listen() -> None:
    """Count, per thread, the executables JAX loads from its persistent cache (``jax.monitoring``; once)."""
    if not _LISTENING:
        import jax

        def on_event(name, secs, **kwargs):
            if name == "/jax/compilation_cache/cache_retrieval_time_sec":
                _CACHE_HITS.count = getattr(_CACHE_HITS, "count", 0) + 1

        jax.monitoring.register_event_duration_secs_listener(on_event)
        _LISTENING.append(on_event)


def signature(args) -> tuple:
    """``(shape, dtype, weak type)`` of every argument (dtype objects: cheaper than their names on every call)."""
    return tuple((getattr(a, "shape", ()), getattr(a, "dtype", type(a)), getattr(a, "weak_type", False))
                 for a in args)


def placed_signature(args) -> tuple:
    """:func:`signature` with every argument's sharding (``None`` for a NumPy array) and the JAX settings that
    change tracing (:func:`trace_values`, thread-local ones such as ``jax.default_matmul_precision`` included):
    the in-memory key of a program of :class:`~jaxrank.compilation.ExportedProgram`, never reused on other
    devices or under other settings."""
    return (tuple((getattr(a, "shape", ()), getattr(a, "dtype", type(a)), getattr(a, "weak_type", False),
                   getattr(a, "sharding", None)) for a in args), trace_values())


def abstract(args) -> list:
    """Every JAX array of ``args`` as a ``jax.ShapeDtypeStruct`` without its sharding (others as they are): the
    program exported from them is for any one device, whatever devices the arguments are on."""
    import jax

    return [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type) if isinstance(a, jax.Array) else a
            for a in args]


def default_device(args) -> bool:
    """No argument is a JAX array placed anywhere but the default device (a compiled executable runs there)."""
    import jax

    default = jax.devices()[0]
    return all(not isinstance(a, jax.Array) or a.devices() == {default} for a in args)
