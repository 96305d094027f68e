"""GGUF blocks read into the quantised form of :mod:`._quant`, and layers stacked into one weight (private).

:func:`decode_gguf` repacks a GGUF tensor's blocks, chunk by chunk, into a
:class:`~._quant.QuantisedWeight`; :func:`stack` and :func:`stack_layers` put
``L`` layers on a leading axis, bringing layers of different formats to one
exact form first (:func:`stack_form`: a wider code width, the mixed K form of
:mod:`._quant`'s docstring, or 8-bit codes).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._quant import _BLOCK, _FIELDS, GGUF_QTYPES, QuantisedWeight, _codes_np, _form, _pack
from ._weights import release_pages

__all__ = ["decode_gguf", "stack_form", "stack", "stack_layers"]


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
