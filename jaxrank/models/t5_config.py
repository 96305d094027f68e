"""The hyper-parameters of a T5 encoder-decoder (:class:`T5Config`) and its feed-forward activations.

Its own module, imported by both :mod:`~jaxrank.models.t5` (which re-exports
it) and the private building blocks ``_t5_layers``, so neither imports the
other for it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping

import jax

__all__ = ["T5Config", "ACTIVATIONS"]

ACTIVATIONS = {
    "relu": jax.nn.relu,
    "gelu": functools.partial(jax.nn.gelu, approximate=False),
    "gelu_new": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_pytorch_tanh": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_fast": functools.partial(jax.nn.gelu, approximate=True),
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
}
"""Feed-forward activations by their ``config.json`` name."""

_REQUIRED = ("vocab_size", "d_model", "d_kv", "d_ff", "num_heads")
"""The ``config.json`` keys :meth:`T5Config.from_hf` has no default for."""


@dataclasses.dataclass(frozen=True)
class T5Config:
    """Hyper-parameters of a T5 encoder-decoder (field names as in config.json).

    Attributes:
        vocab_size, d_model, d_kv, d_ff, num_layers, num_decoder_layers, num_heads:
            Sizes as in transformers' ``T5Config`` (``d_kv`` = size of one head).
        relative_attention_num_buckets, relative_attention_max_distance:
            Relative position bucketing (see :func:`relative_position_bucket`).
        layer_norm_epsilon: Epsilon of the RMS norm.
        dense_act_fn, is_gated_act: Feed-forward activation and gating
            (v1.1: ``gelu_new`` gated; original T5: ``relu`` plain).
        scale_decoder_outputs: Multiply decoder outputs by ``d_model**-0.5``
            before the LM head (original T5 only).
        tie_word_embeddings: LM head is the shared embedding (no ``lm_head``).
        pad_token_id, eos_token_id, decoder_start_token_id: Special ids (the
            start id is the pad id for T5).
    """

    vocab_size: int
    d_model: int
    d_kv: int
    d_ff: int
    num_layers: int
    num_decoder_layers: int
    num_heads: int
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6
    dense_act_fn: str = "gelu_new"
    is_gated_act: bool = True
    scale_decoder_outputs: bool = False
    tie_word_embeddings: bool = False
    pad_token_id: int = 0
    eos_token_id: int = 1
    decoder_start_token_id: int = 0

    @classmethod
    def from_hf(cls, config_dict: Mapping[str, Any]) -> "T5Config":
        """Builds the config from a transformers ``config.json`` dictionary.

        ``feed_forward_proj`` is parsed as transformers does: ``"gated-ACT"`` or
        ``"ACT"``, with ``"gated-gelu"`` meaning ``gelu_new``. Output rescaling
        follows ``scale_decoder_outputs`` when present (transformers >= 5), else
        ``tie_word_embeddings is not False`` (transformers 4 convention).

        Raises:
            ValueError: For a non-T5 model type, an unknown activation, a
                feed-forward spec transformers would reject, or a required size
                missing or null (names every such key).
        """
        d = dict(config_dict)
        missing = [k for k in _REQUIRED if d.get(k) is None]
        if missing:
            raise ValueError(f"T5Config.from_hf: config lacks {', '.join(map(repr, missing))}")
        model_type = d.get("model_type", "t5")
        if model_type not in ("t5", "mt5"):
            raise ValueError(f"T5Config.from_hf: unsupported model_type {model_type!r} (expected 't5' or 'mt5')")
        if d.get("is_encoder_decoder", True) is False:
            raise ValueError("T5Config.from_hf: only encoder-decoder T5 checkpoints are supported")
        proj = d.get("feed_forward_proj", "relu")
        parts = proj.split("-")
        if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
            raise ValueError(f"T5Config.from_hf: invalid feed_forward_proj {proj!r}; use 'gated-ACT' or 'ACT'")
        act = "gelu_new" if proj == "gated-gelu" else parts[-1]
        if act not in ACTIVATIONS:
            raise ValueError(
                f"T5Config.from_hf: unsupported activation {act!r} in feed_forward_proj={proj!r}; "
                f"supported: {sorted(ACTIVATIONS)}"
            )
        tie = d.get("tie_word_embeddings", True) is not False
        nl = int(d.get("num_layers", 6))
        eos = d.get("eos_token_id", 1)
        eos = eos[0] if isinstance(eos, (list, tuple)) else eos
        pad = int(d.get("pad_token_id") or 0)
        start = d.get("decoder_start_token_id")
        return cls(
            **{k: int(d[k]) for k in _REQUIRED},
            num_layers=nl,
            num_decoder_layers=int(d.get("num_decoder_layers") or nl),
            relative_attention_num_buckets=int(d.get("relative_attention_num_buckets", 32)),
            relative_attention_max_distance=int(d.get("relative_attention_max_distance", 128)),
            layer_norm_epsilon=float(d.get("layer_norm_epsilon", 1e-6)),
            dense_act_fn=act,
            is_gated_act=parts[0] == "gated",
            scale_decoder_outputs=bool(d.get("scale_decoder_outputs", tie)),
            tie_word_embeddings=tie,
            pad_token_id=pad,
            eos_token_id=1 if eos is None else int(eos),
            decoder_start_token_id=pad if start is None else int(start),
        )
