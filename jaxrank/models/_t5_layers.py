"""T5 building blocks in Flax NNX (private; re-exported by :mod:`~jaxrank.models.t5`).

Relative position bucketing, the RMS :class:`T5LayerNorm`, unscaled
multi-head :class:`T5Attention` with its relative bias table, the (gated)
feed-forward, and the pre-norm :class:`T5Block` / :class:`T5Stack` containers.
Attribute names mirror transformers' ``modeling_t5.py`` so that parameter
paths are the Hugging Face tensor names.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from .t5_config import ACTIVATIONS, T5Config


def relative_position_bucket(rel: jax.Array, bidirectional: bool, num_buckets: int, max_distance: int) -> jax.Array:
    """Maps relative positions ``key - query`` to T5 bucket ids (Mesh TF scheme).

    Half the buckets (per direction when bidirectional) hold exact offsets
    ``0 .. max_exact-1``; the rest grow logarithmically up to ``max_distance``,
    beyond which all offsets share the last bucket. Causal mode maps every
    positive (future) offset to bucket 0.

    Args:
        rel: Integer array of relative positions.
        bidirectional: Encoder (True) or decoder (False) bucketing.
        num_buckets: Total buckets.
        max_distance: Saturation distance.

    Returns:
        int32 bucket ids in ``[0, num_buckets)``.
    """
    buckets = jnp.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).astype(rel.dtype) * num_buckets
        rel = jnp.abs(rel)
    else:
        rel = -jnp.minimum(rel, 0)
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    safe = jnp.maximum(rel, 1).astype(jnp.float32)
    large = max_exact + (
        jnp.log(safe / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).astype(rel.dtype)
    large = jnp.minimum(large, num_buckets - 1)
    return (buckets + jnp.where(is_small, rel, large)).astype(jnp.int32)


def _param(shape, dtype) -> nnx.Param:
    return nnx.Param(jnp.zeros(shape, dtype))


class T5LayerNorm(nnx.Module):
    """RMS norm ``w * x * rsqrt(mean(x^2) + eps)``, no mean subtraction, no bias."""

    def __init__(self, dim: int, eps: float, dtype):
        self.weight = _param((dim,), dtype)
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.weight[...]
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return w * y.astype(w.dtype)


class T5Attention(nnx.Module):
    """Multi-head attention without score scaling; optional relative bias table."""

    def __init__(self, cfg: T5Config, has_relative_bias: bool, dtype):
        inner = cfg.num_heads * cfg.d_kv
        self.q = _Lin(inner, cfg.d_model, dtype)
        self.k = _Lin(inner, cfg.d_model, dtype)
        self.v = _Lin(inner, cfg.d_model, dtype)
        self.o = _Lin(cfg.d_model, inner, dtype)
        if has_relative_bias:
            self.relative_attention_bias = _Emb(cfg.relative_attention_num_buckets, cfg.num_heads, dtype)
        self.num_heads, self.d_kv = cfg.num_heads, cfg.d_kv

    def heads(self, lin: "_Lin", x: jax.Array) -> jax.Array:
        """Projects ``x [B, T, D]`` to heads ``[B, T, H, d_kv]``."""
        y = lin(x)
        return y.reshape(*y.shape[:-1], self.num_heads, self.d_kv)

    def attend(self, q: jax.Array, k: jax.Array, v: jax.Array, bias: jax.Array) -> jax.Array:
        """``o(softmax(q k^T + bias) v)``; ``bias`` [B|1, H|1, Tq, Tk] includes the mask."""
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) + bias
        probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
        out = jnp.einsum("bhqk,bkhd->bqhd", probs, v)
        return self.o(out.reshape(*out.shape[:2], -1))

    def __call__(self, x: jax.Array, kv: jax.Array, bias: jax.Array) -> jax.Array:
        """Attention of ``x [B, Tq, D]`` over ``kv [B, Tk, D]``."""
        return self.attend(self.heads(self.q, x), self.heads(self.k, kv), self.heads(self.v, kv), bias)

    def position_bias(self, cfg: T5Config, q_pos: jax.Array, k_len: int, bidirectional: bool) -> jax.Array:
        """Relative bias ``[1, H, len(q_pos), k_len]`` for query positions ``q_pos``."""
        rel = jnp.arange(k_len, dtype=jnp.int32)[None, :] - q_pos.astype(jnp.int32)[:, None]
        buckets = relative_position_bucket(
            rel, bidirectional, cfg.relative_attention_num_buckets, cfg.relative_attention_max_distance
        )
        table = self.relative_attention_bias.weight[...].astype(jnp.float32)
        return jnp.transpose(table[buckets], (2, 0, 1))[None]


class _Lin(nnx.Module):
    """Bias-free linear map with a PyTorch-layout ``weight [out, in]``."""

    def __init__(self, out_dim: int, in_dim: int, dtype):
        self.weight = _param((out_dim, in_dim), dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.weight[...]
        return jnp.einsum("...i,oi->...o", x.astype(w.dtype), w)


class _Emb(nnx.Module):
    """Embedding table ``weight [num, dim]``."""

    def __init__(self, num: int, dim: int, dtype):
        self.weight = _param((num, dim), dtype)


class _Sub(nnx.Module):
    """One pre-norm sub-layer: ``layer_norm`` plus its attention / FF module."""

    def __init__(self, cfg: T5Config, kind: str, dtype, has_relative_bias: bool = False):
        self.layer_norm = T5LayerNorm(cfg.d_model, cfg.layer_norm_epsilon, dtype)
        if kind == "self":
            self.SelfAttention = T5Attention(cfg, has_relative_bias, dtype)
        elif kind == "cross":
            self.EncDecAttention = T5Attention(cfg, False, dtype)
        else:
            self.DenseReluDense = T5FeedForward(cfg, dtype)


class T5FeedForward(nnx.Module):
    """``wo(act(wi x))`` or, gated (v1.1), ``wo(act(wi_0 x) * wi_1 x)``."""

    def __init__(self, cfg: T5Config, dtype):
        self.gated = cfg.is_gated_act
        self.act_name = cfg.dense_act_fn
        if self.gated:
            self.wi_0 = _Lin(cfg.d_ff, cfg.d_model, dtype)
            self.wi_1 = _Lin(cfg.d_ff, cfg.d_model, dtype)
        else:
            self.wi = _Lin(cfg.d_ff, cfg.d_model, dtype)
        self.wo = _Lin(cfg.d_model, cfg.d_ff, dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.act_name]
        h = act(self.wi_0(x)) * self.wi_1(x) if self.gated else act(self.wi(x))
        return self.wo(h)


class T5Block(nnx.Module):
    """Encoder block ``[self-attn, FF]`` or decoder block ``[self-attn, cross-attn, FF]``."""

    def __init__(self, cfg: T5Config, is_decoder: bool, has_relative_bias: bool, dtype):
        subs = [_Sub(cfg, "self", dtype, has_relative_bias)]
        if is_decoder:
            subs.append(_Sub(cfg, "cross", dtype))
        subs.append(_Sub(cfg, "ff", dtype))
        self.layer = nnx.List(subs)

    def self_attn(self) -> T5Attention:
        return self.layer[0].SelfAttention

    def ff(self, h: jax.Array) -> jax.Array:
        """Residual feed-forward sub-layer."""
        sub = self.layer[-1]
        return h + sub.DenseReluDense(sub.layer_norm(h))

    def cross(self, h: jax.Array, enc_k: jax.Array, enc_v: jax.Array, enc_bias: jax.Array) -> jax.Array:
        """Residual cross-attention sub-layer over precomputed encoder keys/values."""
        sub = self.layer[1]
        att = sub.EncDecAttention
        return h + att.attend(att.heads(att.q, sub.layer_norm(h)), enc_k, enc_v, enc_bias)


class T5Stack(nnx.Module):
    """Encoder or decoder stack; ``block[0]`` owns the shared relative bias."""

    def __init__(self, cfg: T5Config, is_decoder: bool, dtype):
        n = cfg.num_decoder_layers if is_decoder else cfg.num_layers
        self.block = nnx.List([T5Block(cfg, is_decoder, i == 0, dtype) for i in range(n)])
        self.final_layer_norm = T5LayerNorm(cfg.d_model, cfg.layer_norm_epsilon, dtype)
