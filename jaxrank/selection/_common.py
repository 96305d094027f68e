"""Shared helpers of the selection strategies (keys, validation, batching)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def is_typed_key(key) -> bool:
    dtype = key.dtype if hasattr(key, "dtype") else np.asarray(key).dtype
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def key_batch_shape(key) -> tuple[int, ...]:
    """Batch shape of a key array: typed keys ``[...]``, raw uint32 keys ``[..., 2]``."""
    if is_typed_key(key):
        return tuple(key.shape)
    shape = tuple(jnp.shape(key))
    if len(shape) == 0 or shape[-1] != 2:
        raise ValueError(f"key must be a jax.random key (typed, or raw uint32 of shape [..., 2]); got shape {shape}")
    return shape[:-1]


def map_over_keys(fn, key, *args):
    """Apply single-key ``fn(key, *args)`` over every key of a (batched) key array.

    ``args`` share the key's batch axes (leading), or are None.
    """
    batch = key_batch_shape(key)
    f = fn
    for _ in batch:
        f = jax.vmap(f)
    return f(key, *args)


def check_int(name: str, value, *, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_item_mask(item_mask, batch: tuple[int, ...], num_items: int):
    """None, or a bool ``[*batch, N]`` mask (broadcast over the batch if ``[N]``)."""
    if item_mask is None:
        return None
    m = jnp.asarray(item_mask, bool)
    if m.shape[-1:] != (num_items,):
        raise ValueError(f"item_mask must have last axis num_items={num_items}, got shape {m.shape}")
    return jnp.broadcast_to(m, batch + (num_items,))


def uniforms(key, *shapes):
    """Independent U(0, 1) arrays of the given shapes from ONE ``jax.random.uniform`` call.

    One draw sliced up, rather than a split and a draw per array: on XLA:CPU every
    (vmapped) threefry call site costs about a second of compilation.
    """
    sizes = [int(np.prod(s)) for s in shapes]
    u = jax.random.uniform(key, (max(1, sum(sizes)),))
    out, start = [], 0
    for shape, size in zip(shapes, sizes):
        out.append(u[start:start + size].reshape(shape))
        start += size
    return out


def real_first_order(u, mask):
    """A random order (from uniforms ``u [N]``) with the real (``mask``) items first; and their number."""
    perm = jnp.argsort(jnp.where(mask, u, 2.0 + u))
    return perm.astype(jnp.int32), jnp.sum(mask).astype(jnp.int32)


def top_index(score, rel_tol):
    """Argmax with a deterministic tie rule: the first index within ``rel_tol`` of the maximum."""
    best = jnp.max(score)
    tol = rel_tol * jnp.maximum(1.0, jnp.abs(best))
    return jnp.argmax(score >= best - tol)
