"""Copying checkpoint tensors into Flax NNX parameters (private to the model loaders).

The loaders of :mod:`~jaxrank.models.llama`,
:mod:`~jaxrank.models.t5` and :mod:`~jaxrank.models.bert` all
check each checkpoint tensor's shape against its parameter, cast it to the
parameter dtype and store it; T5 and BERT, whose parameter paths are the
Hugging Face tensor names, additionally report missing and unexpected tensors.
"""

from __future__ import annotations

import mmap
import warnings
from collections.abc import Collection, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


def release_pages(array: Any) -> None:
    """Drops the resident pages of a memory-mapped read-only ``array`` (``madvise(MADV_DONTNEED)``).

    Reading a tensor out of a memory-mapped file leaves its pages resident and
    counted in the process RSS; after the tensor has been copied into its
    parameter they are not needed again (a later read faults them back in
    from the file). ``array`` may be a ``np.memmap`` or any view of one (the
    chain of ``.base`` is followed: :func:`~jaxrank.models.loading.read_safetensors`
    returns ``np.frombuffer`` views of its file's map). Page-aligned interior
    only; a no-op for other arrays or where ``madvise`` is unavailable.
    """
    mm = _mapping(array)
    if mm is None or not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    start = array.ctypes.data - np.frombuffer(mm, np.uint8).ctypes.data
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    last = (start + array.nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
    if 0 <= first < last <= len(mm):
        mm.madvise(mmap.MADV_DONTNEED, first, last - first)


def _mapping(array: Any) -> mmap.mmap | None:
    """The ``mmap.mmap`` under ``array`` (its own ``_mmap``, or one along its chain of ``.base``), or ``None``."""
    if not isinstance(array, np.ndarray):
        return None
    b: Any = array
    for _ in range(64):
        if b is None:
            return None
        if isinstance(b, mmap.mmap):
            return b
        mm = getattr(b, "_mmap", None)
        if isinstance(mm, mmap.mmap):
            return mm
        b = getattr(b, "base", None)
        if isinstance(b, memoryview):
            b = b.obj
    return None


QUANT_SUFFIXES = ("_scale", "_zero_point", "_scale_inv", ".scales", ".qweight", ".qzeros", ".g_idx", ".absmax",
                  ".quant_map", ".quant_state")
"""Name endings of the extra tensors quantised checkpoints carry (compressed-tensors, FP8, GPTQ, AWQ,
bitsandbytes): a checkpoint holding one is refused, not loaded without them."""


def float_tensor(name: str, value: Any) -> Any:
    """``value`` after checking that it is not an integer or boolean array (a quantised checkpoint's
    codes, which a cast to float would turn into wrong weights without an error).

    Raises:
        ValueError: naming the tensor and its dtype.
    """
    dt = getattr(value, "dtype", None)
    if dt is not None and np.dtype(dt).kind in "iub":
        raise ValueError(f"checkpoint tensor {name!r} has dtype {np.dtype(dt).name}: the checkpoint is quantised "
                         "(integer codes with scales), which jaxrank does not read; load its float (bfloat16 / "
                         "float16 / float32) safetensors or a GGUF file (weights='quantised' quantises on load)")
    return value


def check_leftovers(extra: Collection[str], *, owner: str) -> None:
    """Refuse or report checkpoint tensors the loader did not take.

    Args:
        extra: the names left over.
        owner: the model's name for the message.

    Raises:
        ValueError: a leftover is a quantisation tensor (:data:`QUANT_SUFFIXES`): the weights beside it
            are not what they seem.
    """
    extra = sorted(extra)
    quant = [k for k in extra if k.endswith(QUANT_SUFFIXES)]
    if quant:
        raise ValueError(f"{owner}: the checkpoint holds quantisation tensors jaxrank does not read "
                         f"({len(quant)}, e.g. {quant[:3]}): it is a quantised checkpoint; load its float "
                         "safetensors or a GGUF file")
    if extra:
        warnings.warn(f"{owner}: ignoring {len(extra)} unexpected checkpoint tensors: {extra[:10]}", stacklevel=4)


def stacked_param(tensors: list, dtype) -> jax.Array:
    """``jnp.stack(tensors).astype(dtype)`` built with one host buffer in ``dtype``.

    Each item is read (a lazy mapping may dequantise it only now), cast into
    its slot of a pre-allocated ``[L, ...]`` NumPy buffer of the target dtype,
    and its memory-mapped pages released, so the host holds the buffer plus
    one source tensor; the buffer then moves to the device and is dropped.

    Args:
        tensors: zero-argument callables returning the ``L`` equally shaped
            tensors, in order.
        dtype: target dtype (``jnp.float32``, ``jnp.bfloat16``...).
    """
    buf = None
    for i, get in enumerate(tensors):
        arr = np.asarray(get())
        if buf is None:
            buf = np.empty((len(tensors), *arr.shape), np.dtype(dtype))
        elif arr.shape != buf.shape[1:]:
            raise ValueError(f"stacked tensor {i} has shape {arr.shape}, expected {buf.shape[1:]}")
        buf[i] = arr
        release_pages(arr)
        del arr
    out = jax.device_put(buf)
    del buf
    return out


def checked_array(name: str, value: Any, shape: tuple[int, ...], dtype, message: str) -> jax.Array:
    """``value`` as a ``dtype`` array, after checking that its shape is ``shape``.

    Args:
        name: Parameter name, for the error message.
        value: Array-like tensor (NumPy or JAX array).
        shape: Expected shape.
        dtype: Target dtype.
        message: Error format string with fields ``{name}``, ``{got}`` (the
            tensor's shape) and ``{want}`` (``shape``).

    Returns:
        ``jnp.asarray(value, dtype)``.

    Raises:
        ValueError: ``message`` formatted, when the shapes differ.
    """
    got = tuple(np.shape(value))
    if got != tuple(shape):
        raise ValueError(message.format(name=name, got=got, want=shape))
    return jnp.asarray(value, dtype=dtype)


def fill_params(model: nnx.Module, tensors: Mapping[str, Any], *, dtype, owner: str) -> set[str]:
    """Sets every ``nnx.Param`` of ``model`` from the tensor named by its dotted path.

    A parameter at graph path ``("encoder", "block", 0, "layer", 1, "weight")``
    reads ``tensors["encoder.block.0.layer.1.weight"]``.

    Args:
        model: The module to fill in place (typically from ``nnx.eval_shape``).
        tensors: Name -> array.
        dtype: Parameter dtype.
        owner: Model name for messages (``"T5"``, ``"BERT"``).

    Returns:
        The names of the tensors used.

    Raises:
        KeyError: Naming every missing tensor.
        ValueError: On a shape mismatch.
    """
    message = owner + " load_state_dict: {name} has shape {got}, expected {want}"
    missing, used = [], set()
    for path, node in list(nnx.iter_graph(model)):
        if not isinstance(node, nnx.Param):
            continue
        name = ".".join(str(p) for p in path)
        if name not in tensors:
            missing.append(name)
            continue
        value = tensors[name]
        node.set_value(checked_array(name, value, node.get_value().shape, dtype, message))
        release_pages(value)
        used.add(name)
    if missing:
        raise KeyError(f"{owner} load_state_dict: missing tensors: {missing}")
    return used


def warn_unexpected(tensors: Mapping[str, Any], used: Collection[str], *, owner: str,
                    ignore: Collection[str] = (), ignore_prefixes: tuple[str, ...] = ()) -> None:
    """Warns (at the loader's caller) about tensors no parameter took.

    Args:
        tensors: Name -> array given to the loader.
        used: Names returned by :func:`fill_params`.
        owner: Model name for the message.
        ignore: Names expected to be left over (aliases, buffers).
        ignore_prefixes: Prefixes of names expected to be left over (task heads).
    """
    extra = sorted(k for k in tensors if k not in used and not k.startswith(ignore_prefixes)
                   and k not in ignore)
    if extra:
        warnings.warn(f"{owner} load_state_dict: ignoring unexpected tensors: {extra[:10]}", stacklevel=3)
