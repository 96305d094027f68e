"""BERT encoder in Flax NNX with sentence-transformers style pooling.

A from-scratch re-implementation of Hugging Face ``BertModel`` (Devlin et al.,
2019) for inference, used by the embedding-similarity judge with
``sentence-transformers/all-MiniLM-L6-v2``. Parameters keep the PyTorch layout
and names (``embeddings.word_embeddings.weight``, ``encoder.layer.{i}.attention
.self.query.weight`` ...), so loading is a rename-free copy.

Computation (post-norm transformer, as in transformers' ``modeling_bert.py``):

* embeddings: ``LayerNorm(word[ids] + position[0..T-1] + token_type[tt])``;
* per layer: ``h = LN(h + Wo attn(h))``, ``h = LN(h + W2 act(W1 h))`` with
  scaled dot-product attention ``softmax(q k^T / sqrt(d_head) + mask)`` (masked
  keys get weight 0);
* optional pooler ``tanh(W h[:, 0])``.

:func:`embed` then mean-pools the last hidden state over non-padding tokens
and L2-normalises, exactly like the sentence-transformers ``Pooling(mean)`` +
``Normalize`` modules. :func:`embed_packed` does the same for several texts
packed into one row: ``segment_ids`` give each token its text, attention is
block-diagonal (query ``q`` sees key ``k`` iff ``seg[q] = seg[k] > 0``),
positions restart at each text (:func:`segment_positions`), and each text is
pooled over its own tokens (:func:`pool_segments`), so one ``[B, T]`` shape
serves texts of every length; :func:`sentence_transformer_settings` (from the
private ``_sentence_transformers`` module) reads those choices from a model
directory (``modules.json``, ``1_Pooling/config.json``), refusing one whose
embeddings these functions would not reproduce (a ``Dense`` module, ``lasttoken``
pooling, ...).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ._sentence_transformers import (  # noqa: F401  (re-exported: the folder reading SimilarityJudge uses)
    read_max_seq_length, read_modules, read_pooling, sentence_transformer_settings,
)
from ._weights import fill_params, warn_unexpected

_ACTIVATIONS = {
    "gelu": functools.partial(jax.nn.gelu, approximate=False),
    "gelu_new": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_pytorch_tanh": functools.partial(jax.nn.gelu, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
}


_REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
"""The ``config.json`` keys :meth:`BertConfig.from_hf` has no default for."""


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """Hyper-parameters of a BERT encoder (field names as in config.json).

    Attributes:
        vocab_size: Word-piece vocabulary size.
        hidden_size: Hidden size.
        num_hidden_layers: Transformer layers.
        num_attention_heads: Attention heads (``hidden_size`` must divide evenly).
        intermediate_size: Feed-forward inner size.
        hidden_act: Feed-forward activation (``gelu`` = exact erf GELU).
        max_position_embeddings: Rows of the absolute position table.
        type_vocab_size: Rows of the token-type table.
        layer_norm_eps: LayerNorm epsilon.
        pad_token_id: Padding id.
        add_pooler: Whether the model has the ``pooler.dense`` layer.
    """

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    add_pooler: bool = True

    @classmethod
    def from_hf(cls, config_dict: Mapping[str, Any]) -> "BertConfig":
        """Builds the config from a transformers ``config.json`` dictionary.

        Raises:
            ValueError: For a non-BERT model type, a position embedding type
                other than ``"absolute"``, an unknown activation, a decoder /
                cross-attention config, heads not dividing the hidden size, or a
                required size missing or null (names every such key).
        """
        d = dict(config_dict)
        missing = [k for k in _REQUIRED if d.get(k) is None]
        if missing:
            raise ValueError(f"BertConfig.from_hf: config lacks {', '.join(map(repr, missing))}")
        model_type = d.get("model_type", "bert")
        if model_type != "bert":
            raise ValueError(f"BertConfig.from_hf: unsupported model_type {model_type!r} (expected 'bert')")
        pet = d.get("position_embedding_type", "absolute")
        if pet != "absolute":
            raise ValueError(f"BertConfig.from_hf: position_embedding_type {pet!r} unsupported (only 'absolute')")
        act = d.get("hidden_act", "gelu")
        if act not in _ACTIVATIONS:
            raise ValueError(f"BertConfig.from_hf: unsupported hidden_act {act!r}; supported: {sorted(_ACTIVATIONS)}")
        if d.get("is_decoder", False) or d.get("add_cross_attention", False):
            raise ValueError("BertConfig.from_hf: decoder / cross-attention BERT configs are unsupported")
        if int(d["hidden_size"]) % int(d["num_attention_heads"]):
            raise ValueError("BertConfig.from_hf: hidden_size must be a multiple of num_attention_heads")
        pad = d.get("pad_token_id", 0)
        return cls(
            vocab_size=int(d["vocab_size"]),
            hidden_size=int(d["hidden_size"]),
            num_hidden_layers=int(d["num_hidden_layers"]),
            num_attention_heads=int(d["num_attention_heads"]),
            intermediate_size=int(d["intermediate_size"]),
            hidden_act=act,
            max_position_embeddings=int(d.get("max_position_embeddings", 512)),
            type_vocab_size=int(d.get("type_vocab_size", 2)),
            layer_norm_eps=float(d.get("layer_norm_eps", 1e-12)),
            pad_token_id=0 if pad is None else int(pad),
        )


def _param(shape, dtype) -> nnx.Param:
    return nnx.Param(jnp.zeros(shape, dtype))


class _Dense(nnx.Module):
    """``x W^T + b`` with PyTorch-layout ``weight [out, in]`` and ``bias [out]``."""

    def __init__(self, out_dim: int, in_dim: int, dtype):
        self.weight = _param((out_dim, in_dim), dtype)
        self.bias = _param((out_dim,), dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.weight[...]
        return jnp.einsum("...i,oi->...o", x.astype(w.dtype), w) + self.bias[...]


class _LayerNorm(nnx.Module):
    """``(x - mean) / sqrt(var + eps) * weight + bias``, statistics in float32."""

    def __init__(self, dim: int, eps: float, dtype):
        self.weight = _param((dim,), dtype)
        self.bias = _param((dim,), dtype)
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        x32 = x.astype(jnp.float32)
        mu = jnp.mean(x32, -1, keepdims=True)
        var = jnp.mean(jnp.square(x32 - mu), -1, keepdims=True)
        y = (x32 - mu) * jax.lax.rsqrt(var + self.eps)
        w = self.weight[...]
        return y.astype(w.dtype) * w + self.bias[...]


class _Emb(nnx.Module):
    def __init__(self, num: int, dim: int, dtype):
        self.weight = _param((num, dim), dtype)


class _Embeddings(nnx.Module):
    def __init__(self, c: BertConfig, dtype):
        self.word_embeddings = _Emb(c.vocab_size, c.hidden_size, dtype)
        self.position_embeddings = _Emb(c.max_position_embeddings, c.hidden_size, dtype)
        self.token_type_embeddings = _Emb(c.type_vocab_size, c.hidden_size, dtype)
        self.LayerNorm = _LayerNorm(c.hidden_size, c.layer_norm_eps, dtype)

    def __call__(self, ids: jax.Array, token_type_ids: jax.Array, position_ids: jax.Array | None = None) -> jax.Array:
        table = self.position_embeddings.weight[...]
        pos = table[: ids.shape[1]][None] if position_ids is None else table[position_ids]
        h = self.word_embeddings.weight[...][ids] + pos + self.token_type_embeddings.weight[...][token_type_ids]
        return self.LayerNorm(h)


class _SelfAttention(nnx.Module):
    def __init__(self, c: BertConfig, dtype):
        self.query = _Dense(c.hidden_size, c.hidden_size, dtype)
        self.key = _Dense(c.hidden_size, c.hidden_size, dtype)
        self.value = _Dense(c.hidden_size, c.hidden_size, dtype)
        self.num_heads = c.num_attention_heads

    def __call__(self, h: jax.Array, allowed: jax.Array) -> jax.Array:
        """``softmax(q k^T / sqrt(d_head), over allowed keys) v`` per head; ``allowed [B, 1, 1 or T, T]``.

        Heads first (``[B, heads, T, d_head]``: batched matmuls XLA runs fast on a CPU, where the
        ``bqhd,bkhd->bhqk`` einsum ran the 8 x 256 encoder pass 1.6x slower), the scale on ``q``, and the
        softmax's division after the product with ``v`` (``[T, d_head]`` divisions, not ``[T, T]``):
        ``sum_k e_qk v_k / sum_k e_qk`` with ``e_qk = exp(s_qk - max_k s_qk)``, 0 where not allowed.
        """
        b, t, d = h.shape
        dh = d // self.num_heads
        split = lambda x: x.reshape(b, t, self.num_heads, dh).transpose(0, 2, 1, 3)  # noqa: E731
        q = split(self.query(h) * (1.0 / math.sqrt(dh)))
        k, v = split(self.key(h)), split(self.value(h))
        scores = jnp.where(allowed, (q @ k.transpose(0, 1, 3, 2)).astype(jnp.float32), -1e9)
        e = jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True))
        out = (e.astype(v.dtype) @ v).astype(jnp.float32) / jnp.sum(e, axis=-1, keepdims=True)
        return out.astype(v.dtype).transpose(0, 2, 1, 3).reshape(b, t, d)


class _AttnOut(nnx.Module):
    def __init__(self, c: BertConfig, in_dim: int, dtype):
        self.dense = _Dense(c.hidden_size, in_dim, dtype)
        self.LayerNorm = _LayerNorm(c.hidden_size, c.layer_norm_eps, dtype)

    def __call__(self, x: jax.Array, residual: jax.Array) -> jax.Array:
        return self.LayerNorm(self.dense(x) + residual)


class _Attention(nnx.Module):
    def __init__(self, c: BertConfig, dtype):
        self.self = _SelfAttention(c, dtype)
        self.output = _AttnOut(c, c.hidden_size, dtype)


class _Intermediate(nnx.Module):
    def __init__(self, c: BertConfig, dtype):
        self.dense = _Dense(c.intermediate_size, c.hidden_size, dtype)
        self.act_name = c.hidden_act

    def __call__(self, h: jax.Array) -> jax.Array:
        return _ACTIVATIONS[self.act_name](self.dense(h))


class BertLayer(nnx.Module):
    """Post-norm block: ``h = LN(h + attn(h))``; ``h = LN(h + W2 act(W1 h))``."""

    def __init__(self, c: BertConfig, dtype):
        self.attention = _Attention(c, dtype)
        self.intermediate = _Intermediate(c, dtype)
        self.output = _AttnOut(c, c.intermediate_size, dtype)

    def __call__(self, h: jax.Array, allowed: jax.Array) -> jax.Array:
        a = self.attention.output(self.attention.self(h, allowed), h)
        return self.output(self.intermediate(a), a)


class _Encoder(nnx.Module):
    def __init__(self, c: BertConfig, dtype):
        self.layer = nnx.List([BertLayer(c, dtype) for _ in range(c.num_hidden_layers)])


class _Pooler(nnx.Module):
    def __init__(self, c: BertConfig, dtype):
        self.dense = _Dense(c.hidden_size, c.hidden_size, dtype)

    def __call__(self, h: jax.Array) -> jax.Array:
        return jnp.tanh(self.dense(h[:, 0]))


class BertModel(nnx.Module):
    """BERT encoder; parameter names mirror transformers' ``BertModel``."""

    def __init__(self, config: BertConfig, dtype=jnp.float32):
        self.config = config
        self.embeddings = _Embeddings(config, dtype)
        self.encoder = _Encoder(config, dtype)
        if config.add_pooler:
            self.pooler = _Pooler(config, dtype)

    def __call__(
        self, ids: jax.Array, mask: jax.Array | None = None, token_type_ids: jax.Array | None = None, *,
        segment_ids: jax.Array | None = None, position_ids: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array | None]:
        """Runs the encoder.

        Args:
            ids: Token ids ``[B, T]`` (``T <= max_position_embeddings`` unless ``position_ids`` or
                ``segment_ids`` are given).
            mask: Attention mask ``[B, T]`` (1 = token); all ones if None. Not with ``segment_ids``.
            token_type_ids: Token-type ids ``[B, T]``; zeros if None.
            segment_ids: Packed rows (several texts in one row): ``[B, T]``, the text of each token
                (``1, 2, ...`` in order, each text contiguous; ``0`` = padding). A token attends only to
                the tokens of its own text (block-diagonal bias), so each text's hidden states are those
                of the text encoded alone (:func:`segment_positions` gives the positions).
            position_ids: Positions ``[B, T]``; ``0..T-1`` if None, or restarting at each text of
                ``segment_ids`` (:func:`segment_positions`).

        Returns:
            ``(last_hidden_state [B, T, H], pooler_output [B, H] or None)`` (the pooler reads each row's
            first token: with ``segment_ids``, the first text's).

        Raises:
            ValueError: Both ``mask`` and ``segment_ids``; ``T > max_position_embeddings`` with neither
                ``position_ids`` nor ``segment_ids``; and, where they are concrete (not traced by ``jit``),
                an id of ``ids`` outside ``[0, vocab_size)``, of ``token_type_ids`` outside
                ``[0, type_vocab_size)``, or a position outside ``[0, max_position_embeddings)`` (a text of
                ``segment_ids`` longer than the table). Traced ids are not checked: there the table lookups
                read the last row for an id past the table and wrap a negative one (``-1`` is the last
                row), with no error (PyTorch raises an ``IndexError``).
        """
        c = self.config
        if position_ids is None and segment_ids is None and ids.shape[1] > c.max_position_embeddings:
            raise ValueError(f"BertModel: ids has {ids.shape[1]} tokens a row, more than "
                             f"max_position_embeddings={c.max_position_embeddings} (cut the texts)")
        _check_ids(ids, c.vocab_size, "ids", "BertModel", "vocab_size")
        _check_ids(token_type_ids, c.type_vocab_size, "token_type_ids", "BertModel", "type_vocab_size")
        _check_ids(position_ids, c.max_position_embeddings, "position_ids", "BertModel", "max_position_embeddings")
        tt = jnp.zeros(ids.shape, jnp.int32) if token_type_ids is None else token_type_ids
        if segment_ids is not None:
            if mask is not None:
                raise ValueError("BertModel: give either mask or segment_ids, not both")
            seg = segment_ids.astype(jnp.int32)
            if position_ids is None:
                position_ids = segment_positions(seg)
                _check_ids(position_ids, c.max_position_embeddings, "positions of segment_ids (a text too long)",
                           "BertModel", "max_position_embeddings")
            allowed = ((seg[:, :, None] == seg[:, None, :]) & (seg[:, None, :] > 0))[:, None]   # [B, 1, T, T]
        else:
            mask = jnp.ones(ids.shape, jnp.int32) if mask is None else mask
            allowed = mask.astype(bool)[:, None, None, :]                                   # [B, 1, 1, T]
        h = self.embeddings(ids, tt, position_ids)
        for layer in self.encoder.layer:
            h = layer(h, allowed)
        pooled = self.pooler(h) if self.config.add_pooler else None
        return h, pooled


def _check_ids(x, rows: int, name: str, owner: str, size_name: str) -> None:
    """Raises a ValueError naming ``name`` and ``size_name = rows`` when a concrete ``x`` holds an id outside
    ``[0, rows)``; nothing for ``None`` or a traced ``x`` (inside ``jit`` the values are not known)."""
    if x is None or isinstance(x, jax.core.Tracer):
        return
    a = np.asarray(x)
    if a.size == 0:
        return
    lo, hi = a.min(), a.max()
    if lo < 0 or hi >= rows:
        raise ValueError(f"{owner}: {name} must be in [0, {rows}) ({size_name}={rows} table rows), "
                         f"got {int(lo if lo < 0 else hi)}")


def segment_positions(segment_ids: jax.Array) -> jax.Array:
    """Positions restarting at each text of a packed row: ``[B, T]``, ``t - start(t)`` where ``start(t)``
    is the first token of the run of equal ``segment_ids`` that holds ``t`` (texts are contiguous)."""
    seg = jnp.asarray(segment_ids)
    t = jnp.broadcast_to(jnp.arange(seg.shape[1], dtype=jnp.int32), seg.shape)
    new = jnp.concatenate([jnp.ones(seg.shape[:1] + (1,), bool), seg[:, 1:] != seg[:, :-1]], axis=1)
    return t - jax.lax.cummax(jnp.where(new, t, 0), axis=1)


def load_state_dict(config: BertConfig, tensors: Mapping[str, np.ndarray], *, dtype=jnp.float32) -> BertModel:
    """Builds a :class:`BertModel` from HF tensors.

    Accepts names with or without the ``bert.`` prefix (``BertForX``
    checkpoints); task heads (``cls.*``, ``classifier.*``, ...) and the
    ``embeddings.position_ids`` buffer are ignored. The pooler is created only
    when ``pooler.dense.*`` tensors are present.

    Args:
        config: Model config (``add_pooler`` is resolved from the tensors).
        tensors: Name -> array, e.g. from ``safetensors.numpy.load_file``.
        dtype: Parameter dtype.

    Returns:
        The model.

    Raises:
        KeyError: Naming every missing tensor.
        ValueError: On a shape mismatch.
    """
    t = {}
    for k, v in tensors.items():
        t[k[len("bert."):] if k.startswith("bert.") else k] = v
    config = dataclasses.replace(config, add_pooler="pooler.dense.weight" in t)
    model = nnx.eval_shape(lambda: BertModel(config, dtype))
    used = fill_params(model, t, dtype=dtype, owner="BERT")
    warn_unexpected(t, used, owner="BERT", ignore=("embeddings.position_ids",),
                    ignore_prefixes=("cls.", "classifier.", "qa_outputs."))
    return model


def pool(hidden: jax.Array, mask: jax.Array, mode: str = "mean") -> jax.Array:
    """Sentence-transformers pooling of ``hidden [B, T, H]`` over ``mask [B, T]``.

    Modes: ``mean`` (``sum(h * m) / max(sum(m), 1e-9)``), ``cls`` (first
    token), ``max`` (max over tokens, padding set to -1e9) and
    ``mean_sqrt_len`` (``sum(h * m) / sqrt(sum(m))``).
    """
    m = mask.astype(jnp.float32)[..., None]
    h = hidden.astype(jnp.float32)
    if mode == "mean":
        return jnp.sum(h * m, 1) / jnp.maximum(jnp.sum(m, 1), 1e-9)
    if mode == "cls":
        return h[:, 0]
    if mode == "max":
        return jnp.max(jnp.where(m > 0, h, -1e9), axis=1)
    if mode == "mean_sqrt_len":
        return jnp.sum(h * m, 1) / jnp.sqrt(jnp.maximum(jnp.sum(m, 1), 1e-9))
    raise ValueError(f"pool: unknown mode {mode!r}")


@functools.partial(nnx.jit, static_argnames=("pooling", "normalize"))
def embed(
    model: BertModel, ids: jax.Array, mask: jax.Array, *, pooling: str = "mean", normalize: bool = True
) -> jax.Array:
    """Sentence embeddings ``[B, H]`` (float32), jitted.

    Default: mask-aware mean of the last hidden state, then L2 normalisation
    ``x / max(||x||, 1e-12)`` (``torch.nn.functional.normalize``), i.e. what
    ``SentenceTransformer("all-MiniLM-L6-v2").encode`` returns.

    Args:
        model: A loaded :class:`BertModel`.
        ids: Token ids ``[B, T]`` (traced, so not range-checked: see :meth:`BertModel.__call__`).
        mask: Attention mask ``[B, T]``.
        pooling: ``mean`` | ``cls`` | ``max`` | ``mean_sqrt_len``.
        normalize: L2-normalise the pooled vectors.
    """
    hidden, _ = model(ids, mask)
    e = pool(hidden, mask, pooling)
    if normalize:
        e = e / jnp.maximum(jnp.linalg.norm(e, axis=-1, keepdims=True), 1e-12)
    return e


def pool_segments(hidden: jax.Array, segment_ids: jax.Array, num_segments: int, mode: str = "mean") -> jax.Array:
    """:func:`pool` of each text of packed rows: ``[B, num_segments, H]``, text ``s`` of row ``b`` at
    ``[b, s - 1]`` (``segment_ids`` as in :meth:`BertModel.__call__`; texts beyond ``num_segments`` are
    dropped, missing ones give zeros). The sums run over the text's own tokens (``jax.ops.segment_sum``).
    """
    if mode not in ("mean", "cls", "max", "mean_sqrt_len"):
        raise ValueError(f"pool_segments: unknown mode {mode!r}")
    b, t, d = hidden.shape
    seg = segment_ids.astype(jnp.int32)
    valid = (seg > 0) & (seg <= num_segments)
    flat = jnp.where(valid, jnp.arange(b, dtype=jnp.int32)[:, None] * num_segments + seg - 1, b * num_segments)
    flat, h = flat.reshape(-1), hidden.astype(jnp.float32).reshape(b * t, d)
    n = b * num_segments + 1                                     # the last bucket takes the padding
    counts = jax.ops.segment_sum(valid.reshape(-1).astype(jnp.float32), flat, n)[:-1, None]
    if mode == "max":
        out = jnp.where(counts > 0, jax.ops.segment_max(h, flat, n)[:-1], 0.0)
    elif mode == "cls":
        first = (segment_positions(seg) == 0).reshape(-1, 1).astype(jnp.float32)
        out = jax.ops.segment_sum(h * first, flat, n)[:-1]
    else:
        total = jax.ops.segment_sum(h, flat, n)[:-1]
        c = jnp.maximum(counts, 1e-9)
        out = total / (c if mode == "mean" else jnp.sqrt(c))
    return out.reshape(b, num_segments, d)


@functools.partial(nnx.jit, static_argnames=("num_segments", "pooling", "normalize"))
def embed_packed(
    model: BertModel, ids: jax.Array, segment_ids: jax.Array, *, num_segments: int, pooling: str = "mean",
    normalize: bool = True,
) -> jax.Array:
    """Sentence embeddings of texts packed several to a row: ``[B, num_segments, H]`` (float32), jitted.

    Each text attends only to itself and its positions restart at 0 (:meth:`BertModel.__call__` with
    ``segment_ids``), so text ``s`` of row ``b`` (at ``[b, s - 1]``) equals :func:`embed` of that text
    alone, up to float32 rounding: one shape ``[B, T]`` serves texts of any lengths up to ``T`` with no
    padding but a row's tail.

    Args:
        model: A loaded :class:`BertModel`.
        ids: Token ids ``[B, T]``, the texts of a row one after another (each with its own ``[CLS]`` and
            ``[SEP]``), padding after the last (traced, so not range-checked: see :meth:`BertModel.__call__`).
        segment_ids: ``[B, T]``: ``1, 2, ...`` for the row's first, second, ... text, ``0`` for padding.
        num_segments: Texts per row in the output (static).
        pooling: ``mean`` | ``cls`` | ``max`` | ``mean_sqrt_len`` (:func:`pool`).
        normalize: L2-normalise the pooled vectors (zero vectors stay zero).
    """
    hidden, _ = model(ids, segment_ids=segment_ids)
    e = pool_segments(hidden, segment_ids, num_segments, pooling)
    if normalize:
        e = e / jnp.maximum(jnp.linalg.norm(e, axis=-1, keepdims=True), 1e-12)
    return e
