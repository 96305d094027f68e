"""T5 v1.1 / FLAN-T5 (and original T5) encoder-decoder in Flax NNX.

A from-scratch re-implementation of Hugging Face ``T5ForConditionalGeneration``
(Raffel et al., 2020, "Exploring the Limits of Transfer Learning with a Unified
Text-to-Text Transformer") for inference only. It reads the tensors of a
``model.safetensors`` written by ``save_pretrained`` without any transformers
model class. Parameters are stored in the PyTorch layout (``[out, in]`` for
linear maps), so loading needs no transposes.

Architecture, as in transformers' ``modeling_t5.py``:

* T5 LayerNorm: ``y = w * x / sqrt(mean(x**2) + eps)`` (RMS norm, no mean
  subtraction, no bias), statistics accumulated in float32.
* Attention scores ``q k^T`` are NOT scaled by ``1/sqrt(d_kv)`` (T5 folds the
  scale into the initialisation); a learned relative position bias, bucketed
  logarithmically (bidirectional in the encoder, causal in the decoder), lives
  only in the first layer of each stack and is shared by all of its layers.
  Cross-attention has no position bias.
* Pre-norm residual blocks; feed-forward is ``wo(act(wi x))`` (original T5,
  ``relu``) or ``wo(act(wi_0 x) * wi_1 x)`` (v1.1 ``gated-gelu``, with ``gelu_new``
  = tanh-approximated GELU).
* LM head: untied ``lm_head.weight`` (v1.1 / FLAN-T5) or tied to the shared
  embedding; decoder outputs are rescaled by ``d_model**-0.5`` when the config
  says so (original T5, ``tie_word_embeddings`` not False).

Generation: :meth:`T5ForConditionalGeneration.generate` is greedy decoding with
a static maximum length in a ``lax.while_loop`` and a key/value cache (self
attention cache of static length, cross-attention keys/values computed once).

Every method is traceable with static shapes; wrap calls in ``nnx.jit`` (see
:func:`encode`, :func:`decoder_logits_first_step`, :func:`generate`).

The building blocks (:class:`T5LayerNorm`, :class:`T5Attention`,
:class:`T5FeedForward`, :class:`T5Block`, :class:`T5Stack`,
:func:`relative_position_bucket`) live in the private ``_t5_layers`` module
and are re-exported here; :class:`T5Config` (re-exported too) in
:mod:`~jaxrank.models.t5_config`, which both import.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ._t5_layers import (  # noqa: F401  (building blocks, re-exported)
    T5Attention, T5Block, T5FeedForward, T5LayerNorm, T5Stack, _Emb, _Lin, relative_position_bucket,
)
from ._weights import fill_params, warn_unexpected
from .bert import _check_ids
from .t5_config import ACTIVATIONS, T5Config  # noqa: F401  (re-exported)

_NEG = -1e9  # additive mask value; finite so fully-masked rows never give NaN


def _mask_bias(mask: jax.Array) -> jax.Array:
    """Key mask ``[B, Tk]`` (1 = keep) -> additive ``[B, 1, 1, Tk]``."""
    return jnp.where(mask.astype(bool), 0.0, _NEG)[:, None, None, :].astype(jnp.float32)


class T5ForConditionalGeneration(nnx.Module):
    """T5 encoder-decoder with LM head; parameter names mirror transformers'."""

    def __init__(self, config: T5Config, dtype=jnp.float32):
        self.config = config
        self.shared = _Emb(config.vocab_size, config.d_model, dtype)
        self.encoder = T5Stack(config, False, dtype)
        self.decoder = T5Stack(config, True, dtype)
        if not config.tie_word_embeddings:
            self.lm_head = _Lin(config.vocab_size, config.d_model, dtype)

    # ----------------------------------------------------------------- encoder
    def encode(self, ids: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """Encoder hidden states (after the final RMS norm).

        Args:
            ids: Token ids ``[B, S]``.
            mask: Attention mask ``[B, S]`` (1 = token, 0 = padding); all ones if None.

        Returns:
            ``[B, S, d_model]`` encoder output.

        Raises:
            ValueError: A concrete ``ids`` (not traced by ``jit``) with an id outside ``[0, vocab_size)``.
                Traced ids are not checked: there the embedding lookup reads the last row for an id past
                the table and wraps a negative one (``-1`` is the last row), with no error (PyTorch raises
                an ``IndexError``); the jitted helpers (:func:`encode`, :func:`generate`) trace.
        """
        cfg = self.config
        _check_ids(ids, cfg.vocab_size, "ids", "T5", "vocab_size")
        mask = jnp.ones(ids.shape, jnp.int32) if mask is None else mask
        h = self.shared.weight[...][ids]
        s = ids.shape[1]
        bias = self.encoder.block[0].self_attn().position_bias(cfg, jnp.arange(s), s, True) + _mask_bias(mask)
        for blk in self.encoder.block:
            sub = blk.layer[0]
            x = sub.layer_norm(h)
            h = h + sub.SelfAttention(x, x, bias)
            h = blk.ff(h)
        return self.encoder.final_layer_norm(h)

    # ----------------------------------------------------------------- decoder
    def _cross_kv(self, encoder_out: jax.Array) -> list[tuple[jax.Array, jax.Array]]:
        """Per decoder layer cross-attention keys and values ``[B, S, H, d_kv]``."""
        out = []
        for blk in self.decoder.block:
            att = blk.layer[1].EncDecAttention
            out.append((att.heads(att.k, encoder_out), att.heads(att.v, encoder_out)))
        return out

    def _head(self, h: jax.Array, token_ids: jax.Array | None) -> jax.Array:
        """Final norm, optional ``d_model**-0.5`` rescale and LM head (float32 logits)."""
        cfg = self.config
        h = self.decoder.final_layer_norm(h)
        if cfg.scale_decoder_outputs:
            h = h * (cfg.d_model**-0.5)
        w = (self.shared if cfg.tie_word_embeddings else self.lm_head).weight[...]
        if token_ids is not None:
            w = w[jnp.asarray(token_ids)]
        return jnp.einsum("...d,vd->...v", h.astype(w.dtype), w).astype(jnp.float32)

    def decode(
        self,
        decoder_ids: jax.Array,
        encoder_out: jax.Array,
        enc_mask: jax.Array | None = None,
        dec_mask: jax.Array | None = None,
        token_ids: jax.Array | None = None,
    ) -> jax.Array:
        """Teacher-forced decoder logits (full causal pass, no cache).

        Args:
            decoder_ids: Decoder input ids ``[B, T]`` (starting with
                ``decoder_start_token_id``).
            encoder_out: ``[B, S, d_model]`` from :meth:`encode`.
            enc_mask: Encoder mask ``[B, S]``; all ones if None.
            dec_mask: Decoder padding mask ``[B, T]``, combined with the causal mask.
            token_ids: Optional vocabulary ids ``[K]`` to read logits at.

        Returns:
            float32 logits ``[B, T, V]`` (or ``[B, T, K]``).

        Raises:
            ValueError: A concrete ``decoder_ids`` or ``token_ids`` with an id outside ``[0, vocab_size)``
                (traced ones are not checked: see :meth:`encode`).
        """
        cfg = self.config
        _check_ids(decoder_ids, cfg.vocab_size, "decoder_ids", "T5", "vocab_size")
        _check_ids(token_ids, cfg.vocab_size, "token_ids", "T5", "vocab_size")
        b, t = decoder_ids.shape
        enc_mask = jnp.ones(encoder_out.shape[:2], jnp.int32) if enc_mask is None else enc_mask
        causal = jnp.tril(jnp.ones((t, t), bool))[None, None]
        if dec_mask is not None:
            causal = causal & dec_mask.astype(bool)[:, None, None, :]
        pos = jnp.arange(t)
        self_bias = self.decoder.block[0].self_attn().position_bias(cfg, pos, t, False)
        self_bias = self_bias + jnp.where(causal, 0.0, _NEG)
        enc_bias = _mask_bias(enc_mask)
        h = self.shared.weight[...][decoder_ids]
        for blk, (ek, ev) in zip(self.decoder.block, self._cross_kv(encoder_out)):
            sub = blk.layer[0]
            x = sub.layer_norm(h)
            h = h + sub.SelfAttention(x, x, self_bias)
            h = blk.cross(h, ek, ev, enc_bias)
            h = blk.ff(h)
        return self._head(h, token_ids)

    def decoder_logits_first_step(
        self, encoder_out: jax.Array, enc_mask: jax.Array | None = None, token_ids: jax.Array | None = None
    ) -> jax.Array:
        """Logits of the first decoding step (input = ``decoder_start_token_id``).

        With a single decoder position the self-attention is exactly the value
        projection of the start token, so this costs one token through the
        decoder plus cross-attention and a ``[K, d_model]`` slice of the head.

        Args:
            encoder_out: ``[B, S, d_model]`` from :meth:`encode`.
            enc_mask: Encoder mask ``[B, S]``.
            token_ids: Vocabulary ids ``[K]`` to read; full vocabulary if None.

        Returns:
            float32 logits ``[B, V]`` or ``[B, K]``.
        """
        b = encoder_out.shape[0]
        start = jnp.full((b, 1), self.config.decoder_start_token_id, jnp.int32)
        return self.decode(start, encoder_out, enc_mask, token_ids=token_ids)[:, 0]

    def __call__(self, ids, mask, decoder_ids, dec_mask=None) -> jax.Array:
        """Full forward ``encode`` + ``decode``; returns ``[B, T, V]`` float32 logits."""
        return self.decode(decoder_ids, self.encode(ids, mask), mask, dec_mask)

    def generate(
        self, ids: jax.Array, mask: jax.Array | None = None, max_new_tokens: int = 16, eos_token_id: int | None = None
    ) -> jax.Array:
        """Greedy decoding with a static-length KV cache in ``lax.while_loop``.

        Step ``t`` feeds the token generated at ``t-1`` (the start token at
        ``t=0``), writes its self-attention key/value into a cache of length
        ``max_new_tokens``, attends to cache positions ``<= t`` with the causal
        relative bias of query position ``t``, and to cross-attention keys and
        values computed once from the encoder output. The loop ends early once
        every row has produced EOS; later positions hold ``pad_token_id``.

        Args:
            ids: Encoder ids ``[B, S]``.
            mask: Encoder mask ``[B, S]``.
            max_new_tokens: Static number of decoding steps (Python int).
            eos_token_id: Stop id; defaults to ``config.eos_token_id``.

        Returns:
            int32 generated ids ``[B, max_new_tokens]`` (without the start token).
        """
        cfg = self.config
        eos = cfg.eos_token_id if eos_token_id is None else eos_token_id
        mask = jnp.ones(ids.shape, jnp.int32) if mask is None else mask
        enc = self.encode(ids, mask)
        b, n = ids.shape[0], max_new_tokens
        cross = self._cross_kv(enc)
        enc_bias = _mask_bias(mask)
        nl = len(self.decoder.block)
        dt = self.shared.weight[...].dtype
        cache0 = jnp.zeros((nl, 2, b, n, cfg.num_heads, cfg.d_kv), dt)
        tokens0 = jnp.full((b, n + 1), cfg.pad_token_id, jnp.int32).at[:, 0].set(cfg.decoder_start_token_id)
        bias_attn = self.decoder.block[0].self_attn()
        emb = self.shared.weight[...]

        def body(state):
            t, tokens, cache, done = state
            tok = jax.lax.dynamic_slice_in_dim(tokens, t, 1, axis=1)
            h = emb[tok]
            bias = bias_attn.position_bias(cfg, t[None], n, False)
            bias = bias + jnp.where(jnp.arange(n) <= t, 0.0, _NEG)[None, None, None, :]
            for i, (blk, (ek, ev)) in enumerate(zip(self.decoder.block, cross)):
                att = blk.layer[0].SelfAttention
                x = blk.layer[0].layer_norm(h)
                k_new = att.heads(att.k, x).astype(dt)
                v_new = att.heads(att.v, x).astype(dt)
                ck = jax.lax.dynamic_update_slice_in_dim(cache[i, 0], k_new, t, axis=1)
                cv = jax.lax.dynamic_update_slice_in_dim(cache[i, 1], v_new, t, axis=1)
                cache = cache.at[i].set(jnp.stack([ck, cv]))
                h = h + att.attend(att.heads(att.q, x), ck, cv, bias)
                h = blk.cross(h, ek, ev, enc_bias)
                h = blk.ff(h)
            nxt = jnp.argmax(self._head(h, None)[:, 0], axis=-1).astype(jnp.int32)
            nxt = jnp.where(done, cfg.pad_token_id, nxt)
            tokens = jax.lax.dynamic_update_slice_in_dim(tokens, nxt[:, None], t + 1, axis=1)
            return t + 1, tokens, cache, done | (nxt == eos)

        def cond(state):
            t, _, _, done = state
            return (t < n) & ~jnp.all(done)

        state = (jnp.asarray(0, jnp.int32), tokens0, cache0, jnp.zeros((b,), bool))
        _, tokens, _, _ = jax.lax.while_loop(cond, body, state)
        return tokens[:, 1:]


T5Model = T5ForConditionalGeneration

_IGNORED = ("decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight",)


def load_state_dict(
    config: T5Config, tensors: Mapping[str, np.ndarray], *, dtype=jnp.float32
) -> T5ForConditionalGeneration:
    """Builds a :class:`T5ForConditionalGeneration` from HF tensors.

    Names are those of ``T5ForConditionalGeneration.save_pretrained``. The
    shared embedding may also come as ``encoder.embed_tokens.weight`` /
    ``decoder.embed_tokens.weight``. A present ``lm_head.weight`` that differs
    from the shared embedding gives an untied head (as transformers 5 does);
    without one the head is tied to ``shared``, which is an error when the
    config says ``tie_word_embeddings=False``.

    Args:
        config: Model config (``tie_word_embeddings`` is resolved from the tensors).
        tensors: Name -> array, e.g. from ``safetensors.numpy.load_file``.
        dtype: Parameter dtype (float32 default; bfloat16 halves memory).

    Returns:
        The model with its parameters set.

    Raises:
        KeyError: Naming every missing tensor.
        ValueError: On a shape mismatch.
    """
    t = dict(tensors)
    if "shared.weight" not in t:
        for alias in ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"):
            if alias in t:
                t["shared.weight"] = t[alias]
                break
    untied = "lm_head.weight" in t and not (
        "shared.weight" in t and np.array_equal(np.asarray(t["lm_head.weight"]), np.asarray(t["shared.weight"]))
    )
    if not untied and not config.tie_word_embeddings and "lm_head.weight" not in t:
        raise KeyError("T5 load_state_dict: config has tie_word_embeddings=False but 'lm_head.weight' is missing")
    config = dataclasses.replace(config, tie_word_embeddings=not untied)
    model = nnx.eval_shape(lambda: T5ForConditionalGeneration(config, dtype))
    used = fill_params(model, t, dtype=dtype, owner="T5")
    warn_unexpected(t, used, owner="T5",
                    ignore=("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight") + _IGNORED)
    return model


# ------------------------------------------------------------ jitted helpers
@nnx.jit
def encode(model: T5ForConditionalGeneration, ids: jax.Array, mask: jax.Array) -> jax.Array:
    """Jitted :meth:`T5ForConditionalGeneration.encode` (``ids`` are traced, so not range-checked)."""
    return model.encode(ids, mask)


@nnx.jit
def decoder_logits_first_step(model, encoder_out, enc_mask, token_ids=None) -> jax.Array:
    """Jitted :meth:`T5ForConditionalGeneration.decoder_logits_first_step`."""
    return model.decoder_logits_first_step(encoder_out, enc_mask, token_ids)


@functools.partial(nnx.jit, static_argnames=("max_new_tokens", "eos_token_id"))
def generate(model, ids, mask, max_new_tokens: int = 16, eos_token_id: int | None = None) -> jax.Array:
    """Jitted greedy :meth:`T5ForConditionalGeneration.generate` (``ids`` traced, so not range-checked)."""
    return model.generate(ids, mask, max_new_tokens, eos_token_id)
