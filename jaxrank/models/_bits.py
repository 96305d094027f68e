"""bfloat16/float16 weights handed to the compiled decoder passes as their ``uint16`` bits (private).

XLA:CPU widens a bfloat16 array that a ``lax.scan`` slices by layer, or that a gather reads rows
of, to float32 before the loop, on every call; integer arrays are sliced as they are. The decoder
core (:mod:`~jaxrank.models._llama_core`) therefore scans and gathers the bits and reads each
slice back in its dtype.
"""

from __future__ import annotations

import weakref

import jax
import jax.numpy as jnp
import numpy as np

BITS_DTYPES = (jnp.bfloat16, jnp.float16)


@jax.custom_jvp
def as_bits(a):
    """A 2-byte float array as its ``uint16`` bits, inside a traced function (see :class:`Bits`).

    The bits carry no tangent, so differentiating through them is refused (below) instead of
    giving a silent zero.
    """
    return jax.lax.bitcast_convert_type(a, jnp.uint16)


@as_bits.defjvp
def as_bits_jvp(primals, tangents):
    raise TypeError("cannot differentiate with respect to bfloat16/float16 model weights or caches: "
                    "load the model in float32 (load_model(..., dtype=jnp.float32)) to take their gradients")


@jax.tree_util.register_pytree_node_class
class Bits:
    """A bfloat16/float16 weight passed to the compiled passes as its ``uint16`` bits.

    XLA:CPU widens a bfloat16 array that a ``lax.scan`` slices by layer, or that a gather reads
    rows of, to float32 first (every stacked weight and the embedding table, on each call:
    about 40% of a SmolLM2 judge call in bfloat16), which took the bfloat16 weights' faster
    products away; integers are sliced and gathered as they are. ``bits`` is a zero-copy view
    of the weight's own buffer (:func:`bits_view`), read back as the weight's dtype per layer
    slice or gathered rows; ``array`` is the weight itself, for whole-array products.
    """

    def __init__(self, bits, array):
        self.bits, self.array = bits, array

    def tree_flatten(self):
        return (self.bits, self.array), None

    @classmethod
    def tree_unflatten(cls, _, children):
        return cls(*children)

    @property
    def shape(self):
        return self.bits.shape

    @property
    def dtype(self):
        return self.array.dtype

    def value(self):
        """The weight itself (for whole-array products, which XLA:CPU runs in bfloat16 as they are)."""
        return self.array

    def take(self, index, axis=0):
        """Rows of the weight, gathered from the bits."""
        return jax.lax.bitcast_convert_type(jnp.take(self.bits, index, axis=axis), self.array.dtype)


BITS_MEMO: dict[int, tuple] = {}


def bits_view(w):
    """``w`` with each concrete bfloat16/float16 array on one CPU device as a :class:`Bits` view.

    The view shares the weight's buffer (``device_put`` of a NumPy ``uint16`` view is zero-copy
    on the CPU) and is kept while the weight lives, so repeated calls reuse it. Other arrays
    (float32, quantised, traced, on an accelerator or sharded) pass as they are.
    """
    out = {}
    for n, a in w.items():
        if not (isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer) and a.dtype in BITS_DTYPES
                and len(a.devices()) == 1 and next(iter(a.devices())).platform == "cpu"):
            out[n] = a
            continue
        memo = BITS_MEMO.get(id(a))
        if memo is None or memo[0]() is not a:
            bits = Bits(jax.device_put(np.asarray(a).view(np.uint16), a.sharding), a)
            memo = (weakref.ref(a, lambda _, k=id(a), table=BITS_MEMO: table.pop(k, None)), bits)
            BITS_MEMO[id(a)] = memo
        out[n] = memo[1]
    return out


def slice_as_bits(a) -> bool:
    """Whether the layer scan slices this array as bits: a :class:`Bits` view, or a traced
    bfloat16/float16 array on the CPU (bits made inside the program: one copy, no widening)."""
    return isinstance(a, Bits) or (isinstance(a, jax.Array) and a.dtype in BITS_DTYPES
                                    and jax.default_backend() == "cpu")


def value_of(a):
    return a.value() if isinstance(a, Bits) else a
