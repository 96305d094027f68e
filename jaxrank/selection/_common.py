"""Shared helpers of the selection strategies (keys, validation, batching)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def is_typed_key(key) -> bool:
    dtype = key.dtype if hasattr(key, "dtype") else np.asarray(key).dtype
    return jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def key_batch_shape(key, *, single: bool = False) -> tuple[int, ...]:
    """Batch shape of a key array: typed keys ``[...]``, raw uint32 keys ``[..., 2]``.

    Raises:
        ValueError: naming ``key``: None, not a key, or (``single``) a batch of keys.
    """
    if key is None:
        raise ValueError("key must be a jax.random key (e.g. jax.random.key(0)), got None")
    if is_typed_key(key):
        shape = tuple(key.shape)
    else:
        try:
            raw = tuple(jnp.shape(key))
        except TypeError:
            raise ValueError(f"key must be a jax.random key, got {type(key).__name__}") from None
        if len(raw) == 0 or raw[-1] != 2:
            raise ValueError(f"key must be a jax.random key (typed, or raw uint32 of shape [..., 2]); got shape {raw}")
        shape = raw[:-1]
    if single and shape:
        raise ValueError(f"key must be a single jax.random key, got a batch of keys of shape {shape}")
    return shape


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
    """None, or a bool ``[*batch, N]`` mask (broadcast over the batch if ``[N]``).

    A numeric mask is accepted when every entry is exactly 0 or 1 (checked when concrete).

    Raises:
        ValueError: naming ``item_mask``: a shape that does not broadcast to ``[*batch, N]``,
            or a non-bool mask with a value other than 0 and 1 (e.g. a probability 0.5).
    """
    if item_mask is None:
        return None
    m = item_mask if isinstance(item_mask, jax.Array) else np.asarray(item_mask)
    want = batch + (num_items,)
    if m.shape[-1:] != (num_items,) or len(m.shape) > len(want) or any(
            d not in (1, w) for d, w in zip(m.shape[::-1], want[::-1])):
        raise ValueError(f"item_mask must have shape {want} (or broadcast to it, e.g. [{num_items}]), "
                         f"got shape {tuple(m.shape)}")
    if m.dtype != bool:
        if not (jnp.issubdtype(m.dtype, jnp.number) or m.dtype == np.bool_):
            raise ValueError(f"item_mask must be bool (or 0/1), got dtype {m.dtype}")
        if not isinstance(m, jax.core.Tracer):
            vals = np.asarray(m)
            if not np.all((vals == 0) | (vals == 1)):
                bad = vals[(vals != 0) & (vals != 1)].ravel()[0]
                raise ValueError(f"item_mask must be bool (or exactly 0/1), got a value {bad.item()!r}")
    return jnp.broadcast_to(jnp.asarray(m, bool), want)


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
