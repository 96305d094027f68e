"""``jax.jit`` with jaxrank's XLA:CPU compiler options.

On a CPU most of a first call is XLA compilation (about 15 ms per kernel). LLVM
optimisation level 1 instead of XLA's default compiles jaxrank's programs about
15% faster with the same run time (measured on the PoE protocol's programs and
on a 1056-item soft Bradley-Terry pool: ``benchmarks/compile_options.py``).
The options are set per program (``jax.jit(compiler_options=...)``), never as
a global flag, and only when the program runs on a CPU: elsewhere the
backend's defaults apply.
"""

from __future__ import annotations

import functools

import jax

CPU_COMPILER_OPTIONS = {"xla_backend_optimization_level": 1}
"""XLA options of every jaxrank program compiled for a CPU."""


try:
    from jax._src.core import trace_state_clean as _trace_state_clean   # private; jax is pinned < 0.11
except ImportError:                                                      # pragma: no cover
    _trace_state_clean = None


def _top_level(args, kw) -> bool:
    """Whether a call happens outside every JAX transformation (only there may options be set)."""
    if _trace_state_clean is None:                                       # pragma: no cover
        return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((args, kw)))
    return _trace_state_clean()


def jit(fun=None, /, **kwargs):
    """Like :func:`jax.jit` (same keyword arguments); adds :data:`CPU_COMPILER_OPTIONS` on a CPU.

    The backend is read at call time (``jax.default_backend()``), so importing
    jaxrank never initialises one. Inside a caller's own ``jax.jit`` the outer
    program's options apply (JAX allows ``compiler_options`` only on a top-level
    ``jax.jit``), and under ``vmap`` or ``grad`` the backend's defaults do.
    """
    if fun is None:
        return functools.partial(jit, **kwargs)
    on_cpu = jax.jit(fun, compiler_options=CPU_COMPILER_OPTIONS, **kwargs)
    elsewhere = jax.jit(fun, **kwargs)

    def pick(args, kw):
        top = _top_level(args, kw)
        return on_cpu if top and jax.default_backend() == "cpu" else elsewhere

    @functools.wraps(fun)
    def call(*args, **kw):
        return pick(args, kw)(*args, **kw)

    def lower(*args, **kw):
        return pick(args, kw).lower(*args, **kw)

    call.lower = lower
    return call
