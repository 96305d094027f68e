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
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["enable_compilation_cache", "default_cache_dir"]


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
