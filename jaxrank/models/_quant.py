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
array; :func:`matmul` and :func:`take_rows` are what the decoder calls.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._weights import release_pages

__all__ = ["QuantisedWeight", "decode_gguf", "stack_form", "K_QUANTS", "BITS_PER_WEIGHT", "quantise_int8", "stack", "matmul", "take_rows", "nbytes",
           "GGUF_QTYPES"]

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


def _f16(raw, at):
    return raw[..., at:at + 2].copy().view(np.float16)[..., 0]


def _scale_min_k4(sc12):
    """Q4_K / Q5_K's eight 6-bit scales and mins from their 12 bytes ``[..., 12]`` (ggml's get_scale_min_k4)."""
    s = sc12.astype(np.uint8)
    sc = np.concatenate([s[..., 0:4] & 63, (s[..., 8:12] & 15) | ((s[..., 0:4] >> 6) << 4)], -1)
    mn = np.concatenate([s[..., 4:8] & 63, (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)], -1)
    return sc, mn


DECODE_ROWS = 2048
"""Most rows decoded at a time (the NumPy temporaries of one chunk, not of a whole 150k-row embedding)."""
DECODE_WEIGHTS = 1 << 22
"""Most weights decoded at a time (4M: a chunk's int32 codes take 16 MB)."""


def decode_gguf(raw: np.ndarray, qtype: int, shape: tuple[int, ...], stack_qtypes=(), *,
                device: bool = False) -> QuantisedWeight:
    """A GGUF tensor's blocks (``raw uint8 [rows, row bytes]``) repacked as a NumPy-backed
    :class:`QuantisedWeight` of ``shape [rows, n]``, :data:`DECODE_ROWS` rows (at most
    :data:`DECODE_WEIGHTS` weights) at a time into arrays of
    the whole tensor (no concatenated copy), each chunk's file pages dropped once read.

    Args:
        raw, qtype, shape: the tensor's bytes (a ``np.memmap`` view: its pages are released), format, shape.
        stack_qtypes: the formats of every layer of the stack this tensor is a layer of (names or values):
            where they differ, the layer comes back in the form the whole stack is held in
            (:func:`stack_form`), so the stack is written layer by layer.
        device: a tensor of more than one chunk is written chunk by chunk straight into
            arrays on the default device (donated buffers): the host never holds it whole beside them.

    Raises:
        ValueError: a ``qtype`` not in :data:`GGUF_QTYPES`.
    """
    conv = stack_form(stack_qtypes, shape[-1]) if stack_qtypes else (lambda w: w)
    rows = math.prod(shape[:-1])
    step = max(1, min(DECODE_ROWS, DECODE_WEIGHTS // shape[-1]))
    if len(shape) != 2 or rows <= step:
        w = conv(_decode(raw, qtype, shape))
        release_pages(raw)
        return w
    r = raw.reshape(rows, -1)
    out, last = None, None
    for i in range(0, rows, step):
        m = min(step, rows - i)
        part = conv(_decode(r[i:i + m], qtype, (m, shape[1])))
        release_pages(r[i:i + m])
        if out is None:
            new = (lambda s_, t_: jnp.zeros(s_, t_)) if device else np.empty
            out = [None if a is None else new((rows, *a.shape[1:]), a.dtype)
                   for a in (getattr(part, f) for f in _FIELDS)]
        for k, f in enumerate(_FIELDS):
            if out[k] is not None:
                if device:
                    out[k] = _put_rows(out[k], i, getattr(part, f))
                else:
                    out[k][i:i + m] = getattr(part, f)
        last = part
        del part
    return QuantisedWeight(*out, last.bits, last.zp, last.mixed)


@functools.partial(jax.jit, donate_argnums=0)
def _put_rows(buf, i, x):
    return jax.lax.dynamic_update_slice_in_dim(buf, x, i, 0)


def _qname(qtype) -> str:
    if isinstance(qtype, str) and qtype in GGUF_QTYPES:
        return qtype
    name = next((k for k, v in GGUF_QTYPES.items() if v == int(qtype)), None)
    if name is None:
        raise ValueError(f"qtype {qtype} cannot be kept quantised; supported: {', '.join(GGUF_QTYPES)}")
    return name


def stack_form(qtypes, n: int):
    """The conversion of one decoded layer to the form of a stack whose layers have the formats ``qtypes``.

    One format: none (the layer as it is). Formats that differ only in code width (``Q4_K`` and ``Q5_K``,
    ``Q4_0`` and ``Q5_0``, ``Q4_1`` and ``Q5_1``): the wider, the narrower codes shifted to its zero point.
    Other mixes of K-quants (with ``Q6_K``): the mixed K form (6.625 bits a weight, see the module
    docstring). Any other mix: 8-bit codes with the smallest block sizes of the mix (:func:`_common`,
    ~8.5 bits a weight; ``Q8_0`` in the mix needs 8 bits anyway). Each is exact: the layer dequantises to
    the same float32 weights.
    """
    names = sorted({_qname(q) for q in qtypes})
    if len(names) <= 1:
        return lambda w: w
    templates = [_decode(np.zeros((1, n // _BLOCK[q][0] * _BLOCK[q][1]), np.uint8), GGUF_QTYPES[q], (1, n))
                 for q in names]
    return _unifier(templates)


def _unifier(ws: list[QuantisedWeight]):
    """The exact conversion to one form of weights of the forms ``ws`` (see :func:`stack_form`)."""
    if len({_form(w)[5:] for w in ws}) == 1 and not any(w.mixed for w in ws) and all(w.bits < 8 for w in ws):
        wide = max(ws, key=lambda w: w.bits)
        if all(w.zp <= wide.zp and (1 << w.bits) - w.zp <= (1 << wide.bits) - wide.zp for w in ws):
            return lambda w: _widen(w, wide.bits, wide.zp)
    if all(_is_k(w) for w in ws):
        return _to_mixed
    return lambda w: _common([w] + list(ws))[0]


def _widen(w: QuantisedWeight, bits: int, zp: int) -> QuantisedWeight:
    """``w`` with ``bits``-wide codes ``q - w.zp + zp`` (same scales): exact where they fit."""
    if (w.bits, w.zp) == (bits, zp):
        return w
    lo, hi = _pack(_codes_np(w) - w.zp + zp, bits)
    return QuantisedWeight(lo, hi, w.d, w.sc, w.dm, w.mn, bits, zp)


def _is_k(w: QuantisedWeight) -> bool:
    """Whether a decoded weight is in a K-quant's own form (``Q4_K``/``Q5_K``: 8 scales and mins a
    super-block; ``Q6_K``: 16 scales, zero point 32) or the mixed K form."""
    if w.mixed:
        return True
    n = w.shape[-1]
    if w.sc is None or w.d.shape[-1] * 256 != n or np.dtype(w.d.dtype) != np.float16:
        return False
    if (w.bits, w.zp) in ((4, 0), (5, 0)):
        return w.mn is not None and w.sc.shape[-1] * 32 == n and w.dm is not None
    return (w.bits, w.zp) == (6, 32) and w.mn is None and w.dm is None and w.sc.shape[-1] * 16 == n


def _to_mixed(w: QuantisedWeight) -> QuantisedWeight:
    """A ``Q4_K`` / ``Q5_K`` / ``Q6_K`` weight (NumPy) in the mixed K form (module docstring); exact."""
    if w.mixed:
        return w
    if not _is_k(w):
        raise ValueError(f"{w!r} is not in a K-quant form")
    lo, hi = _pack(_codes_np(w) - w.zp + 32, 6)
    d = np.asarray(w.d)
    if w.mn is None:                                             # Q6_K: its 16 scales, dm NaN marks it
        return QuantisedWeight(lo, hi, d, np.asarray(w.sc, np.int8), np.full(d.shape, np.nan, np.float16),
                               None, 6, 32, True)
    dm = np.asarray(w.dm)
    bad = np.isnan(dm)
    if bad.any():               # a NaN dmin makes its whole super-block NaN: kept so by a NaN d
        d, dm = np.where(bad, np.float16(np.nan), d), np.where(bad, np.float16(0), dm)
    sc = np.stack([np.asarray(w.sc, np.int8), np.asarray(w.mn).astype(np.int8)], -1)
    return QuantisedWeight(lo, hi, d, sc.reshape(*sc.shape[:-2], -1), dm, None, 6, 32, True)


def _decode(raw: np.ndarray, qtype: int, shape: tuple[int, ...]) -> QuantisedWeight:
    name = _qname(qtype)
    rows, n = math.prod(shape[:-1]), shape[-1]
    r = np.asarray(raw, np.uint8).reshape(rows, -1)
    bsz = _BLOCK[name][1]
    b = r.reshape(rows, -1, bsz)                                   # [rows, blocks, bytes]
    sc = dm = mn = None
    if name == "Q8_0":
        d, q, bits, zp = _f16(b, 0), b[..., 2:].view(np.int8).reshape(rows, n), 8, 0
    elif name in ("Q4_0", "Q4_1", "Q5_0", "Q5_1"):
        one = name.endswith("_1")
        d = _f16(b, 0)
        if one:
            dm = _f16(b, 2)
        qs = b[..., -16:]
        q = np.concatenate([qs & 15, qs >> 4], -1)                   # element j, j + 16
        bits, zp = (4, 0 if one else 8) if name.startswith("Q4") else (5, 0 if one else 16)
        if bits == 5:
            at = 4 if one else 2
            qh = b[..., at:at + 4].copy().view("<u4")                 # [rows, blocks, 1]
            q = q | (((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8) << 4)
        q = q.reshape(rows, n)
    elif name in ("Q4_K", "Q5_K"):
        d, dmin = _f16(b, 0), _f16(b, 2)
        sc, mn = _scale_min_k4(b[..., 4:16])
        sc, dm = sc.astype(np.int8), -dmin
        qs = b[..., -128:].reshape(rows, -1, 4, 32)                   # 4 chunks of 64 values
        q = np.stack([qs & 15, qs >> 4], 3)                            # [rows, blocks, 4, 2, 32]
        bits = 4
        if name == "Q5_K":
            qh = b[..., 16:48]                                         # [rows, blocks, 32]
            shift = (2 * np.arange(4)[:, None, None] + np.arange(2)[None, :, None]).astype(np.uint8)
            bit = (qh[..., None, None, :] >> shift) & 1
            q = q | (bit.astype(np.uint8) << 4)
            bits = 5
        q, zp = q.reshape(rows, n), 0
        mn = mn.reshape(rows, -1)
    else:  # Q6_K: ql[128] qh[64] scales int8[16] d
        ql, qh = b[..., 0:128].reshape(rows, -1, 2, 2, 32), b[..., 128:192].reshape(rows, -1, 2, 32)
        sc, d = b[..., 192:208].view(np.int8), _f16(b, 208)
        lo = np.stack([ql & 15, ql >> 4], 3)                           # [rows, blocks, half, 2(nib), 2(l/l+32), 32]
        shift = (2 * (2 * np.arange(2)[:, None, None] + np.arange(2)[None, :, None])).astype(np.uint8)
        hi = (qh[..., None, None, :] >> shift) & 3
        q = (lo | (hi.astype(np.uint8) << 4)).reshape(rows, n)         # order: half, nibble, l-offset, l
        bits, zp = 6, 32
    lo_, hi_ = _pack(q, bits)
    shape2 = (*shape[:-1],)
    fix = (lambda a: None if a is None else a.reshape(*shape2, -1))
    return QuantisedWeight(fix(lo_), fix(hi_), fix(d), fix(None if sc is None else sc.reshape(rows, -1)),
                           fix(dm), fix(mn), bits, zp)


def quantise_int8(w: np.ndarray) -> QuantisedWeight:
    """Symmetric int8 with one float32 scale per output row: ``q = round(w / d)``, ``d = max|w[o]| / 127``."""
    w = np.asarray(w, np.float32)
    d = np.abs(w).max(-1, keepdims=True) / 127.0
    d = np.where(d > 0, d, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / d), -127, 127).astype(np.int8)
    return QuantisedWeight(q, None, d, None, None, None, 8, 0)


def _common(ws: list[QuantisedWeight]) -> list[QuantisedWeight]:
    """The weights in one form (to stack layers of different formats): 8-bit codes ``q - zp``, the
    smallest block and sub-block sizes, missing scales one and missing offsets zero (exact)."""
    if any(w.mixed for w in ws):
        raise ValueError("a weight in the mixed K form stacks only with K-quants (Q4_K, Q5_K, Q6_K)")
    n = ws[0].shape[-1]
    S = min(n // w.d.shape[-1] for w in ws)
    subs = [n // a.shape[-1] for w in ws for a in (w.sc, w.mn) if a is not None]
    s = min(subs + [S])
    out = []
    for w in ws:
        q = np.asarray(_codes_np(w)) - w.zp
        rows = q.shape[:-1]

        def at(a, k, fill, dtype):      # per-block array of size-k blocks -> per-block of the target size
            if a is None:
                return np.full((*rows, n // k), fill, dtype)
            return np.repeat(np.asarray(a), (n // a.shape[-1]) // k, axis=-1).astype(dtype)
        dm = None if all(x.dm is None for x in ws) else at(w.dm, S, 0.0, np.float32)
        d_dtype = np.result_type(*[x.d.dtype for x in ws] + ([x.dm.dtype for x in ws if x.dm is not None]))
        out.append(QuantisedWeight(q.astype(np.int8), None, at(w.d, S, 1.0, d_dtype),
                                   at(w.sc, s, 1, np.int8) if any(x.sc is not None for x in ws) else None,
                                   None if dm is None else dm.astype(d_dtype),
                                   (at(w.mn, s, 1 if w.dm is not None else 0, np.uint8)
                                    if any(x.mn is not None for x in ws) else None), 8, 0))
    return out


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


def stack(items: list[Any]) -> QuantisedWeight:
    """Layer weights stacked on a new leading axis into one device-resident :class:`QuantisedWeight`.

    Layers of one format stack as they are; mixed formats are first brought to one form, exactly, as
    :func:`stack_form` does: a wider code width, the mixed K form (a GGUF file with ``Q4_K`` and ``Q6_K``
    layers of one tensor, 6.625 bits a weight), else 8-bit codes (:func:`_common`).
    """
    if len({_form(w) for w in items}) > 1:
        unify = _unifier(items)
        items = [unify(w) for w in items]
    fields = []
    for f in _FIELDS:
        parts = [getattr(w, f) for w in items]
        fields.append(None if parts[0] is None else jax.device_put(np.stack([np.asarray(p) for p in parts])))
    return QuantisedWeight(*fields, items[0].bits, items[0].zp, items[0].mixed)


@functools.partial(jax.jit, donate_argnums=0)
def _put(buf, i, x):
    return jax.lax.dynamic_update_index_in_dim(buf, x, i, 0)


def stack_layers(getters: list) -> QuantisedWeight:
    """:func:`stack` of ``[g() for g in getters]`` read one layer at a time: each layer is written into
    device buffers of the whole stack (donated, updated in place), so the host holds one decoded layer,
    not ``L`` of them and their stacked copy. A layer in another form than the first falls back to
    :func:`stack` (the layers so far read back)."""
    first = getters[0]()
    if not isinstance(first, QuantisedWeight):
        raise TypeError(f"expected a QuantisedWeight, got {type(first).__name__}")
    n, form, mixed = len(getters), _form(first), first.mixed
    bufs = [None if a is None else jnp.zeros((n, *a.shape), a.dtype) for a in (getattr(first, f) for f in _FIELDS)]

    def write(bufs, i, w):
        return [None if b is None else _put(b, i, np.asarray(getattr(w, f))) for b, f in zip(bufs, _FIELDS)]
    bufs = write(bufs, 0, first)
    del first
    for i in range(1, n):
        w = getters[i]()
        if not isinstance(w, QuantisedWeight) or _form(w) != form:
            if not isinstance(w, QuantisedWeight):
                raise ValueError(f"layer {i} is not quantised where layer 0 is (dequantise the tensor: "
                                 "weights='float')")
            done = [QuantisedWeight(*(None if b is None else np.asarray(b[k]) for b in bufs), form[0], form[1],
                                    mixed) for k in range(i)]
            del bufs
            return stack(done + [w] + [g() for g in getters[i + 1:]])
        bufs = write(bufs, i, w)
    return QuantisedWeight(*bufs, form[0], form[1], mixed)


def to_device(w: QuantisedWeight) -> QuantisedWeight:
    """The weight with its arrays on the default device."""
    return w.map(lambda a: a if isinstance(a, jax.Array) else jax.device_put(np.asarray(a)))
