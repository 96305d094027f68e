"""Weights kept quantised in memory, dequantised inside the jitted matrix product (private).

One block form covers GGUF's ``Q8_0``, ``Q4_0``, ``Q4_1``, ``Q5_0``, ``Q5_1``,
``Q4_K``, ``Q5_K``, ``Q6_K`` and a plain int8 form with one scale per output
channel. Weight ``w[o, i]`` of a matrix ``[out, in]`` is

    w[o, i] = d[o, i // S] * sc[o, i // s] * (q[o, i] - zp) + dm[o, i // S] * mn[o, i // s]

with integer codes ``q`` (``bits`` wide), a block scale ``d`` (float16 in
GGUF, float32 for the int8 form) per block of ``S`` inputs, an optional
integer sub-block scale ``sc`` and offset pair ``dm`` (float) x ``mn``
(integer) per sub-block of ``s`` inputs (llama.cpp's ``ggml-quants.c``: the
legacy formats have ``S = 32`` and no ``sc``, ``Q4_1``/``Q5_1`` an offset
``m = dm`` with ``mn = 1``; the K-quants ``S = 256`` super-blocks of 6-bit /
8-bit sub-block scales and mins, ``dm = -dmin``). The codes are repacked at
load time into a layout JAX unpacks with shifts: the low 4 bits two to a byte
(``lo``), the remaining 1 or 2 high bits 8 or 4 to a byte (``hi``); 8-bit codes
are stored as ``int8`` in ``lo``.

A stack of layers in different K-quants (a ``Q4_K_M`` file's ``ffn_down``:
``Q6_K`` in some layers, ``Q4_K`` in the others) is held in one *mixed K*
form (``mixed=True``), exact for each of them at 6.625 bits a weight (``Q6_K``
is 6.5625): 6-bit codes ``c = q - zp + 32``, per super-block of 256 a float16
``d`` and ``dm``, and per 16 inputs an int8 ``a``. A ``Q6_K`` super-block has
``dm`` NaN and ``w = d * a[k] * (c - 32)`` (its own 16 scales); a ``Q4_K`` /
``Q5_K`` one holds its eight (scale, min) pairs in ``a`` (``a[2j]``, ``a[2j+1]``)
and ``w = d * a[2j] * (c - 32) + dm * a[2j+1]`` on sub-block ``j`` of 32 inputs.
Every array has the output rows on axis
``-2`` (a leading ``[L]`` layer axis is allowed), so a ``lax.scan`` over
stacked layers slices them and an embedding gathers rows before
dequantising.

:class:`QuantisedWeight` is a registered pytree (arrays as children, ``bits``
and ``zp`` static), so it passes through ``jax.jit`` and ``lax.scan`` like an
array; :func:`matmul` and :func:`take_rows` are what the decoder calls. Reading
GGUF blocks into this form and stacking layers (of one or several formats) is
:mod:`._quant_layers`.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np


__all__ = ["QuantisedWeight", "K_QUANTS", "BITS_PER_WEIGHT", "quantise_int8", "matmul", "take_rows", "nbytes",
           "GGUF_QTYPES", "to_device"]

GGUF_QTYPES = {"Q8_0": 8, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}
"""GGUF block formats kept quantised: name -> ``GGMLQuantizationType`` value."""
K_QUANTS = ("Q4_K", "Q5_K", "Q6_K")
"""The K-quants a stack of mixed layers holds in the mixed K form (see the module docstring)."""
_BLOCK = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
          "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210)}
"""GGUF block format -> (weights a block, bytes a block), as ``gguf.GGML_QUANT_SIZES``."""
BITS_PER_WEIGHT = {"mixed K": 8 * (256 // 2 + 256 // 4 + 2 + 2 + 256 // 16) / 256}
"""Bits a weight held by a form of several layers' formats: the mixed K form, 6.625."""
_FIELDS = ("lo", "hi", "d", "sc", "dm", "mn")


@jax.tree_util.register_pytree_node_class
class QuantisedWeight:
    """A matrix ``[..., out, in]`` held as integer codes and block scales (see the module docstring).

    Attributes:
        lo: ``uint8 [..., out, in/2]`` low nibbles (``bits`` 4-6), or ``int8 [..., out, in]`` (``bits`` 8).
        hi: ``uint8 [..., out, in*hb/8]`` the ``hb = bits - 4`` high bits, or ``None``.
        d: ``[..., out, in/S]`` block scales (float16 or float32).
        sc: ``int8 [..., out, in/s]`` sub-block scales, or ``None`` (one).
        dm: ``[..., out, in/S]`` offset scales, or ``None`` (no offset).
        mn: ``uint8 [..., out, in/s]`` offset multipliers, or ``None`` (one).
        bits: code width (4, 5, 6 or 8); zp: the zero point subtracted from the codes.
        mixed: the mixed K form (``bits`` 6, ``zp`` 32; ``sc`` per 16 inputs, ``dm`` NaN on ``Q6_K``
            super-blocks, ``mn`` ``None``; see the module docstring).
    """

    def __init__(self, lo, hi, d, sc, dm, mn, bits: int, zp: int, mixed: bool = False):
        self.lo, self.hi, self.d, self.sc, self.dm, self.mn = lo, hi, d, sc, dm, mn
        self.bits, self.zp, self.mixed = int(bits), int(zp), bool(mixed)

    def tree_flatten(self):
        return tuple(getattr(self, f) for f in _FIELDS), (self.bits, self.zp, self.mixed)

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children, *aux)

    # ------------------------------------------------------------- array-like
    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the dequantised matrix ``[..., out, in]``."""
        n = self.lo.shape[-1] * (1 if self.bits == 8 else 2)
        return (*self.lo.shape[:-1], n)

    @property
    def dtype(self):
        """What it dequantises to: float32."""
        return jnp.dtype(jnp.float32)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def map(self, fn) -> "QuantisedWeight":
        """The same weight with ``fn`` applied to every array (e.g. a row permutation on axis -2)."""
        return QuantisedWeight(*(None if a is None else fn(a) for a in (getattr(self, f) for f in _FIELDS)),
                               self.bits, self.zp, self.mixed)

    def dequantise(self, dtype=jnp.float32) -> jax.Array:
        """The matrix ``[..., out, in]`` in ``dtype`` (the module docstring's equation, in float32)."""
        return _dequantise(self).astype(dtype)

    def __repr__(self) -> str:
        return f"QuantisedWeight(shape={self.shape}, bits={self.bits}, zp={self.zp}{', mixed K' * self.mixed})"


def _codes(w: QuantisedWeight):
    """Integer codes ``[..., out, in]`` (int32) from the packed ``lo`` / ``hi``."""
    if w.bits == 8:
        return w.lo.astype(jnp.int32)
    lo = w.lo.astype(jnp.int32)
    q = jnp.stack([lo & 15, lo >> 4], -1).reshape(*lo.shape[:-1], -1)
    if w.bits > 4:
        hb = w.bits - 4
        per = 8 // hb
        h = w.hi.astype(jnp.int32)
        shifts = jnp.arange(per, dtype=jnp.int32) * hb
        h = ((h[..., None] >> shifts) & ((1 << hb) - 1)).reshape(q.shape)
        q = q | (h << 4)
    return q


def _dequantise(w: QuantisedWeight) -> jax.Array:
    if w.mixed:
        return _dequantise_mixed(w)
    q = _codes(w).astype(jnp.float32)
    if w.zp:
        q = q - w.zp
    *lead, out, n = q.shape
    nS = w.d.shape[-1]
    S = n // nS

    def split(a, k):        # [..., out, n] -> [..., out, n/k, k]
        return a.reshape(*lead, out, n // k, k)

    d = w.d.astype(jnp.float32)
    if w.sc is None:
        y = split(q, S) * d[..., None]
    else:
        s = n // w.sc.shape[-1]
        scale = w.sc.astype(jnp.float32).reshape(*lead, out, nS, S // s) * d[..., None]   # [.., out, nS, S/s]
        y = q.reshape(*lead, out, nS, S // s, s) * scale[..., None]
    if w.dm is not None:
        dm = w.dm.astype(jnp.float32)
        if w.mn is None:
            off = dm[..., None]
            y = y.reshape(*lead, out, nS, S) + off
        else:
            s = n // w.mn.shape[-1]
            off = w.mn.astype(jnp.float32).reshape(*lead, out, nS, S // s) * dm[..., None]
            y = y.reshape(*lead, out, nS, S // s, s) + off[..., None]
    return y.reshape(*lead, out, n)


def _dequantise_mixed(w: QuantisedWeight) -> jax.Array:
    """The mixed K form: per super-block, ``Q6_K``'s ``d * a[k] * (c - 32)`` where ``dm`` is NaN, else
    ``Q4_K``'s ``d * a[2j] * (c - 32) + dm * a[2j+1]`` (the same float32 operations as their own forms).

    The choice is made on the per-sub-block scales and offsets, not per weight: a ``Q6_K`` sub-block adds
    the offset ``-0.0``, which leaves every float32 as it is (``-0.0 + -0.0 = -0.0``)."""
    q = _codes(w).astype(jnp.float32) - w.zp
    *lead, out, n = q.shape
    nS = n // 256
    d, dm = w.d.astype(jnp.float32), w.dm.astype(jnp.float32)
    six = jnp.isnan(dm)[..., None, None]                                    # [.., out, nS, 1, 1]
    a = w.sc.astype(jnp.float32).reshape(*lead, out, nS, 8, 2)
    scale = jnp.where(six, a, a[..., :1]).reshape(*lead, out, nS, 16) * d[..., None]
    off = jnp.where(six[..., 0], jnp.float32(-0.0), a[..., 1] * dm[..., None])      # [.., out, nS, 8]
    y = (q.reshape(*lead, out, nS, 16, 16) * scale[..., None]).reshape(*lead, out, nS, 8, 32)
    return (y + off[..., None]).reshape(*lead, out, n)


CHUNK = 1 << 22
"""Most weights (4M: 16 MB in float32) dequantised at once by :func:`matmul`; larger matrices go by chunks
of output rows, so the float32 copy alive at any time stays small beside the quantised model."""


def _chunks(out: int, n: int) -> int:
    k = 1
    while (out // k) * n > CHUNK and k < out:
        k += 1
        while out % k:
            k += 1
    return k


def matmul(x: jax.Array, w: QuantisedWeight) -> jax.Array:
    """``x @ W.T`` for ``W [out, in]`` kept quantised.

    The blocks are dequantised inside the jit (XLA fuses the unpacking into one producer of the float32
    operand) and multiply ``x`` in float32; a matrix of more than :data:`CHUNK` weights is done in ``k``
    chunks of ``out / k`` rows by ``lax.map`` (one chunk's float32 copy alive at a time):
    ``y[..., c] = x @ dequantise(W[c]).T``.
    """
    out, n = w.shape[-2:]
    k = _chunks(out, n)
    if k == 1:
        return jnp.einsum("...i,oi->...o", x, _dequantise(w).astype(x.dtype))
    wc = w.map(lambda a: a.reshape(k, out // k, a.shape[-1]))
    ys = jax.lax.map(lambda wi: jnp.einsum("...i,oi->...o", x, _dequantise(wi).astype(x.dtype)), wc)
    return jnp.moveaxis(ys, 0, -2).reshape(*x.shape[:-1], out)


def take_rows(w: QuantisedWeight, ids) -> jax.Array:
    """Rows ``ids`` of the matrix (an embedding lookup): the packed rows are gathered, then dequantised."""
    return _dequantise(w.map(lambda a: jnp.take(a, ids, axis=-2)))


def nbytes(tree) -> int:
    """Bytes held by the arrays of a pytree (quantised weights count their codes and scales)."""
    return sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize for a in jax.tree_util.tree_leaves(tree))


# ------------------------------------------------------------------ packing (NumPy, at load time)
def _pack(q: np.ndarray, bits: int):
    """``(lo, hi)`` from integer codes ``q [..., n]`` (0 <= q < 2**bits; int8 as they are for bits 8)."""
    if bits == 8:
        return q.astype(np.int8), None
    q = q.astype(np.uint8)
    lo = (q[..., 0::2] & 15) | ((q[..., 1::2] & 15) << 4)
    if bits == 4:
        return lo, None
    hb = bits - 4
    per = 8 // hb
    h = (q >> 4).reshape(*q.shape[:-1], -1, per).astype(np.uint8)
    hi = np.zeros(h.shape[:-1], np.uint8)
    for j in range(per):
        hi |= h[..., j] << (j * hb)
    return lo, hi


def quantise_int8(w: np.ndarray) -> QuantisedWeight:
    """Symmetric int8 with one float32 scale per output row: ``q = round(w / d)``, ``d = max|w[o]| / 127``."""
    w = np.asarray(w, np.float32)
    d = np.abs(w).max(-1, keepdims=True) / 127.0
    d = np.where(d > 0, d, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / d), -127, 127).astype(np.int8)
    return QuantisedWeight(q, None, d, None, None, None, 8, 0)


def _codes_np(w: QuantisedWeight) -> np.ndarray:
    if w.bits == 8:
        return np.asarray(w.lo).astype(np.int32)
    lo = np.asarray(w.lo).astype(np.int32)
    q = np.stack([lo & 15, lo >> 4], -1).reshape(*lo.shape[:-1], -1)
    if w.bits > 4:
        hb = w.bits - 4
        per = 8 // hb
        h = np.asarray(w.hi).astype(np.int32)
        h = ((h[..., None] >> (np.arange(per) * hb)) & ((1 << hb) - 1)).reshape(q.shape)
        q = q | (h << 4)
    return q


def _form(w: QuantisedWeight):
    return (w.bits, w.zp, w.mixed) + tuple(None if a is None else (a.shape, np.dtype(a.dtype).str)
                                  for a in (getattr(w, f) for f in _FIELDS))


def to_device(w: QuantisedWeight) -> QuantisedWeight:
    """The weight with its arrays on the default device."""
    return w.map(lambda a: a if isinstance(a, jax.Array) else jax.device_put(np.asarray(a)))
