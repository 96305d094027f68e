"""Fingerprints of checkpoints: what a judgement's key says about the judge that made it.

A fingerprint is the SHA-256 of a checkpoint's content: for a ``.gguf`` file,
its bytes; for a Hugging Face folder, the names and bytes of the files that make
the model and its tokenizer (weights, ``config.json``, tokenizer files), not
read-me or licence files. Two folders with the same name but other weights get
other fingerprints; the same weights copied elsewhere get the same one.

Hashing a large file takes seconds (about 1 GB/s), so each file's digest is
computed once and kept in ``<cache>/fingerprints.json`` keyed by its resolved
path, size, inode number, modification time and status-change time
(nanoseconds): a file that is replaced or touched is hashed again, also one
copied over it with its size and modification time kept (``cp -p``: a new
inode, or at least a new ``ctime``, which no program can set back). A cache
that cannot be read or written is skipped, never an error.

A model built in memory, with no files behind it, is fingerprinted from its
parameters and its tokenizer's vocabulary (:func:`parameters_fingerprint`).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from jaxrank.models import registry

__all__ = ["file_sha256", "checkpoint_fingerprint", "parameters_fingerprint", "parameters_dtype",
           "FINGERPRINT_LENGTH"]

FINGERPRINT_LENGTH = 16
"""Hex digits of a fingerprint (64 bits)."""

_SKIPPED = ("readme", "license", "licence", "notice", ".git")
_CACHE_LOCK = threading.Lock()


def _cache_file() -> Path:
    return registry.cache_dir() / "fingerprints.json"


def _read_cache() -> dict:
    try:
        data = json.loads(_cache_file().read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(data: dict) -> None:
    try:
        f = _cache_file()
        tmp = f.with_name(f"{f.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=0, sort_keys=True))
        os.replace(tmp, f)
    except OSError:                                  # a read-only cache: hash again next time
        pass


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 (hex) of a file's bytes, cached by resolved path, size, inode, mtime and ctime.

    Raises:
        FileNotFoundError: no such file.
    """
    p = Path(path).resolve()
    st = p.stat()
    ident = [st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]
    with _CACHE_LOCK:
        hit = _read_cache().get(str(p))
        if isinstance(hit, dict) and hit.get("ident") == ident and isinstance(hit.get("sha256"), str):
            return hit["sha256"]
    with open(p, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    with _CACHE_LOCK:
        cache = _read_cache()
        cache[str(p)] = {"ident": ident, "sha256": digest}
        _write_cache(cache)
    return digest


def _content_files(folder: Path) -> list[Path]:
    files = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts) and \
                not p.name.lower().startswith(_SKIPPED) and not p.suffix.lower() == ".md":
            files.append(p)
    return files


def checkpoint_fingerprint(path: str | os.PathLike) -> str:
    """The fingerprint of a checkpoint file or folder: :data:`FINGERPRINT_LENGTH` hex digits of the SHA-256
    over its content files' relative names and digests (:func:`file_sha256`).

    Raises:
        FileNotFoundError: no such file or folder, or a folder without content files.
    """
    p = Path(path)
    if p.is_file():
        return file_sha256(p)[:FINGERPRINT_LENGTH]
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: no such checkpoint file or folder")
    files = _content_files(p)
    if not files:
        raise FileNotFoundError(f"{p}: no checkpoint files in this folder")
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(p).as_posix()}\0{file_sha256(f)}\n".encode())
    return h.hexdigest()[:FINGERPRINT_LENGTH]


def _tokenizer_text(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return backend.to_str()
    vocab = getattr(tokenizer, "get_vocab", None)
    return json.dumps(sorted(vocab().items())) if vocab is not None else repr(type(tokenizer))


def _leaves(module) -> list:
    import jax                                        # flax and jax: already imported by any model in memory
    from flax import nnx

    return jax.tree_util.tree_flatten_with_path(nnx.state(module))[0]


def parameters_dtype(module: Any) -> str:
    """The dtype of a model's first floating-point parameter (``"float32"``, ``"bfloat16"``), or ``"none"``."""
    for _, leaf in _leaves(module):
        dt = getattr(leaf, "dtype", None)
        if dt is None:
            continue
        if str(dt) in ("bfloat16", "float16") or np.issubdtype(np.dtype(dt), np.floating):
            return str(dt)
    return "none"


def parameters_fingerprint(module: Any, tokenizer: Any = None) -> str:
    """The fingerprint of a model held in memory: the SHA-256 of its parameters (path, dtype, shape and
    bytes of every array of ``nnx.state(module)``, in order) and of its tokenizer's serialised form.

    Seconds for a model of a billion parameters; a model loaded from files uses
    :func:`checkpoint_fingerprint` instead (cached).
    """
    import jax                                        # already imported by any model in memory

    h = hashlib.sha256()
    for path, leaf in _leaves(module):
        a = np.asarray(leaf)
        h.update(f"{jax.tree_util.keystr(path)}|{a.dtype}|{a.shape}\n".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    if tokenizer is not None:
        h.update(_tokenizer_text(tokenizer).encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:FINGERPRINT_LENGTH]
