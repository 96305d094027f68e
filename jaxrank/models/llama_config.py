"""The hyper-parameters of a Llama-family decoder (:class:`LlamaConfig`), read from a Hugging Face config.

Its own module, imported by both :mod:`~jaxrank.models.llama` (which
re-exports it) and the private functional core ``_llama_core``, so neither
imports the other for it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["LlamaConfig", "SUPPORTED_MODEL_TYPES", "SUPPORTED_ROPE_TYPES"]

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Hyper-parameters of a Llama-family decoder (hashable: a static jit arg).

    Attributes:
        rope_scaling: ``None`` or sorted ``(key, value)`` items of the HF
            ``rope_scaling`` dict (type ``linear`` or ``llama3``).
        rope_freq_factors: optional per-frequency divisors of the inverse
            frequencies (GGUF ``rope_freqs.weight`` of Llama 3 conversions).
        attention_bias: biases on the q/k/v projections.
        o_bias: bias on the output projection (Llama ``attention_bias``; not
            Qwen2).
        sliding_windows: per-layer window (``None``: full attention); a key at
            position ``p`` is visible from query position ``q`` iff
            ``q - window < p <= q``.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: tuple[tuple[str, Any], ...] | None = None
    rope_freq_factors: tuple[float, ...] | None = None
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 2048
    attention_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    sliding_windows: tuple[int | None, ...] | None = None
    model_type: str = "llama"

    @classmethod
    def from_hf(cls, cfg: Mapping[str, Any]) -> LlamaConfig:
        """Build from a Hugging Face ``config.json`` dict (transformers 4 or 5 layout).

        Raises:
            ValueError: unknown ``model_type``, activation or rope scaling type.
        """
        mt = cfg.get("model_type", "llama")
        if mt not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"model_type {mt!r} is not a Llama-family decoder; "
                             f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
        act = cfg.get("hidden_act", "silu")
        if act not in ("silu", "swish"):
            raise ValueError(f"hidden_act {act!r} is not supported (only silu)")
        n_heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        rp = dict(cfg.get("rope_parameters") or {})
        theta = cfg.get("rope_theta", rp.get("rope_theta", 10000.0))
        scaling = cfg.get("rope_scaling") or rp
        rtype = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "default"
        if rtype not in SUPPORTED_ROPE_TYPES:
            raise ValueError(f"rope scaling type {rtype!r} is not supported; "
                             f"supported: {', '.join(SUPPORTED_ROPE_TYPES)}")
        scaling = None if rtype == "default" else tuple(sorted(
            (k, v) for k, v in dict(scaling, rope_type=rtype).items()
            if k not in ("type", "rope_theta") and not isinstance(v, (list, dict))))
        n_layers = int(cfg["num_hidden_layers"])
        if mt == "qwen2":
            qkv_bias, o_bias = True, False
        else:
            qkv_bias = o_bias = bool(cfg.get("attention_bias", False))
        windows = None
        sw = cfg.get("sliding_window")
        layer_types = cfg.get("layer_types")
        if mt == "mistral" and sw:
            windows = (int(sw),) * n_layers
        elif mt == "qwen2" and cfg.get("use_sliding_window") and sw:
            if not layer_types:
                mwl = int(cfg.get("max_window_layers", n_layers))
                layer_types = ["sliding_attention" if i >= mwl else "full_attention"
                               for i in range(n_layers)]
        if layer_types and sw and any(t == "sliding_attention" for t in layer_types):
            windows = tuple(int(sw) if t == "sliding_attention" else None for t in layer_types)
        factors = cfg.get("rope_freq_factors")
        return cls(
            vocab_size=int(cfg["vocab_size"]), hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]), num_hidden_layers=n_layers,
            num_attention_heads=n_heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or n_heads),
            head_dim=int(cfg.get("head_dim") or hidden // n_heads),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_theta=float(theta),
            rope_scaling=scaling,
            rope_freq_factors=tuple(float(f) for f in factors) if factors is not None else None,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            attention_bias=qkv_bias, o_bias=o_bias, mlp_bias=bool(cfg.get("mlp_bias", False)),
            sliding_windows=windows, model_type=mt)

    def inv_freq(self) -> np.ndarray:
        """RoPE inverse frequencies ``[head_dim // 2]`` (float32), scaling applied."""
        d = self.head_dim
        inv = 1.0 / (self.rope_theta ** (np.arange(0, d, 2, dtype=np.float32) / d))
        if self.rope_freq_factors is not None:
            inv = inv / np.asarray(self.rope_freq_factors, np.float32)
        s = dict(self.rope_scaling or ())
        if s.get("rope_type") == "linear":
            inv = inv / float(s["factor"])
        elif s.get("rope_type") == "llama3":  # as transformers' _compute_llama3_parameters
            factor, lo, hi = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
            old = float(s["original_max_position_embeddings"])
            wavelen = 2 * math.pi / inv
            scaled = np.where(wavelen > old / lo, inv / factor, inv)
            smooth = (old / wavelen - lo) / (hi - lo)
            smoothed = (1 - smooth) * scaled / factor + smooth * scaled
            medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
            inv = np.where(medium, smoothed, scaled)
        return inv.astype(np.float32)
