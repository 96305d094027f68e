"""Copying checkpoint tensors into Flax NNX parameters (private to the model loaders).

The loaders of :mod:`~jaxrank.models.llama`,
:mod:`~jaxrank.models.t5` and :mod:`~jaxrank.models.bert` all
check each checkpoint tensor's shape against its parameter, cast it to the
parameter dtype and store it; T5 and BERT, whose parameter paths are the
Hugging Face tensor names, additionally report missing and unexpected tensors.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx


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
        node.set_value(checked_array(name, tensors[name], node.get_value().shape, dtype, message))
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
