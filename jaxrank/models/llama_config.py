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

__all__ = ["LlamaConfig", "SUPPORTED_MODEL_TYPES", "SUPPORTED_ROPE_TYPES", "SUPPORTED_ACTIVATIONS"]

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "longrope")
SUPPORTED_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh",
                         "gelu_tanh": "gelu_tanh"}
"""Hugging Face ``hidden_act`` / ``hidden_activation`` names -> the core's activation."""

_GEMMA = ("gemma2", "gemma3_text")
_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
"""The ``config.json`` keys :meth:`LlamaConfig.from_hf` has no default for."""


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Hyper-parameters of a Llama-family decoder (hashable: a static jit arg).

    One config covers the families that share the pre-norm decoder layout; the
    switches below (all off by default: plain Llama) express how each family
    departs from it.

    Attributes:
        rope_scaling: ``None`` or sorted ``(key, value)`` items of the HF
            ``rope_scaling`` dict (type ``linear`` or ``llama3``; ``longrope``
            is mapped to ``rope_freq_factors`` and ``query_scale`` by
            :meth:`from_hf`).
        rope_freq_factors: optional per-frequency divisors of the inverse
            frequencies (GGUF ``rope_freqs.weight`` of Llama 3 conversions).
        attention_bias: biases on the q/k/v projections.
        o_bias: bias on the output projection (Llama ``attention_bias``; not
            Qwen2).
        sliding_windows: per-layer window (``None``: full attention); a key at
            position ``p`` is visible from query position ``q`` iff
            ``q - window < p <= q``.
        hidden_act: the MLP gate's activation: ``"silu"`` (SwiGLU)
            or ``"gelu_tanh"`` (Gemma's GeGLU, tanh approximation).
        norm_offset: RMSNorm gains are ``weight + norm_offset`` (Gemma: 1).
        embed_scale: the input embeddings (and learnt input vectors) are
            multiplied by it (Gemma: ``sqrt(hidden_size)``).
        query_scale: attention scores are ``q.k * query_scale`` (``None``:
            ``head_dim ** -0.5``; Gemma: ``query_pre_attn_scalar ** -0.5``).
        attn_softcap: attention scores become ``c * tanh(s / c)`` (Gemma 2).
        final_softcap: output logits become ``c * tanh(z / c)`` (Gemma 2).
        qk_norm: per-head RMSNorm of queries and keys before RoPE (Qwen3,
            Gemma 3).
        sandwich_norms: RMSNorm of the attention and MLP outputs before their
            residual adds (Gemma 2/3: four norms per layer).
        local_rope_theta: RoPE base of the sliding-window layers, unscaled
            (Gemma 3; ``None``: every layer uses ``rope_theta`` and the scaling).
        rotary_dim: RoPE turns the first ``rotary_dim`` channels of a head
            (``None``: all; Phi's ``partial_rotary_factor``).
        attention_kernel: how attention is computed, not what: ``"einsum"``
            (the scores materialised, float32 softmax), ``"fused"``
            (:func:`jax.nn.dot_product_attention` in bfloat16: cuDNN's fused
            flash kernel on a GPU, XLA elsewhere; not with ``attn_softcap``)
            or ``"auto"`` (the default: see :func:`attention_kernel`). Set it
            with ``dataclasses.replace(config, attention_kernel="fused")``.
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
    hidden_act: str = "silu"
    norm_offset: float = 0.0
    embed_scale: float = 1.0
    query_scale: float | None = None
    attn_softcap: float | None = None
    final_softcap: float | None = None
    qk_norm: bool = False
    sandwich_norms: bool = False
    local_rope_theta: float | None = None
    rotary_dim: int | None = None
    attention_kernel: str = "auto"

    def __post_init__(self):
        if self.attention_kernel not in ("auto", "einsum", "fused"):
            raise ValueError(f"attention_kernel must be 'auto', 'einsum' or 'fused', got {self.attention_kernel!r}")
        if self.attention_kernel == "fused" and self.attn_softcap is not None:
            raise ValueError("attention_kernel='fused' cannot soft-cap attention scores (attn_softcap is set): "
                             "use attention_kernel='einsum'")

    @classmethod
    def from_hf(cls, cfg: Mapping[str, Any]) -> LlamaConfig:
        """Build from a Hugging Face ``config.json`` dict (transformers 4 or 5 layout).

        ``model_type`` picks the family's mapping, as transformers' own config
        classes do: ``llama``, ``mistral`` (sliding window), ``qwen2`` (q/k/v
        biases, optional sliding layers), ``qwen3`` (q/k norms), ``phi3``
        (partial rotary, sliding window; fused projections in the loader),
        ``gemma2`` and ``gemma3_text`` (norm offset, embedding scale, query
        scalar, soft-capping, sandwich norms, alternating sliding-window
        layers; Gemma 3 with q/k norms and a local RoPE base).

        Raises:
            ValueError: unknown ``model_type``, activation or rope scaling type; a
                required size missing or null (names every such key).
        """
        missing = [k for k in _REQUIRED if cfg.get(k) is None]
        if missing:
            raise ValueError(f"config lacks {', '.join(map(repr, missing))}")
        mt = cfg.get("model_type", "llama")
        if mt not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"model_type {mt!r} is not a Llama-family decoder; "
                             f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
        gemma = mt in _GEMMA
        act = cfg.get("hidden_activation") or cfg.get("hidden_act") or ("gelu_pytorch_tanh" if gemma else "silu")
        if act not in SUPPORTED_ACTIVATIONS:
            raise ValueError(f"hidden_act {act!r} is not supported; supported: {', '.join(SUPPORTED_ACTIVATIONS)}")
        n_heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        head_dim = int(cfg.get("head_dim") or hidden // n_heads)
        rp = dict(cfg.get("rope_parameters") or {})
        local_rp = None
        if "full_attention" in rp:                  # transformers 5, per layer type (Gemma 3)
            local_rp = dict(rp.get("sliding_attention") or {})
            rp = dict(rp["full_attention"] or {})
        theta = cfg.get("rope_theta", rp.get("rope_theta", 1e6 if mt == "gemma3_text" else 10000.0))
        scaling = cfg.get("rope_scaling") or rp
        rtype = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "default"
        if rtype not in SUPPORTED_ROPE_TYPES:
            raise ValueError(f"rope scaling type {rtype!r} is not supported; "
                             f"supported: {', '.join(SUPPORTED_ROPE_TYPES)}")
        longrope = _longrope(cfg, scaling, head_dim, rp) if rtype == "longrope" else None
        if longrope is not None:
            rtype = "default"
        scaling = None if rtype == "default" else tuple(sorted(
            (k, v) for k, v in dict(scaling, rope_type=rtype).items()
            if k not in ("type", "rope_theta", "partial_rotary_factor") and not isinstance(v, (list, dict))))
        n_layers = int(cfg["num_hidden_layers"])
        if mt == "qwen2":
            qkv_bias, o_bias = True, False
        else:
            qkv_bias = o_bias = bool(cfg.get("attention_bias", False))
        factors = cfg.get("rope_freq_factors")
        kw: dict[str, Any] = dict(
            vocab_size=int(cfg["vocab_size"]), hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]), num_hidden_layers=n_layers,
            num_attention_heads=n_heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads") or n_heads),
            head_dim=head_dim, rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_theta=float(theta),
            rope_scaling=scaling,
            rope_freq_factors=tuple(float(f) for f in factors) if factors is not None else None,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", gemma)),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            attention_bias=qkv_bias, o_bias=o_bias, mlp_bias=bool(cfg.get("mlp_bias", False)),
            sliding_windows=_windows(mt, cfg, n_layers), model_type=mt, hidden_act=SUPPORTED_ACTIVATIONS[act],
            qk_norm=mt in ("qwen3", "gemma3_text"))
        if longrope is not None:
            kw.update(longrope)
        if mt == "phi3":
            prf = float(rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)))
            kw["rotary_dim"] = None if prf == 1.0 else int(head_dim * prf)
        if gemma:
            caps = [cfg.get(k) for k in ("attn_logit_softcapping", "final_logit_softcapping")]
            kw.update(norm_offset=1.0, embed_scale=float(hidden ** 0.5), sandwich_norms=True,
                      query_scale=float(cfg.get("query_pre_attn_scalar", 256)) ** -0.5,
                      attn_softcap=None if caps[0] is None else float(caps[0]),
                      final_softcap=None if caps[1] is None else float(caps[1]))
        if mt == "gemma3_text":
            kw["local_rope_theta"] = float(cfg.get("rope_local_base_freq",
                                                   (local_rp or {}).get("rope_theta", 10000.0)))
        return cls(**kw)

    def inv_freq(self, local: bool = False) -> np.ndarray:
        """RoPE inverse frequencies ``[rotary_dim // 2]`` (float32), scaling applied.

        Args:
            local: the frequencies of the sliding-window layers: base
                ``local_rope_theta`` without scaling, where the config has one.
        """
        if local and self.local_rope_theta is not None:
            d = self.rotary_dim or self.head_dim
            return (1.0 / (self.local_rope_theta ** (np.arange(0, d, 2, dtype=np.float32) / d))).astype(np.float32)
        d = self.rotary_dim or self.head_dim
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


def _longrope(cfg: Mapping[str, Any], scaling: Mapping[str, Any], head_dim: int,
              rp: Mapping[str, Any]) -> dict[str, Any]:
    """LongRoPE (Phi-3) within its original window, as switches of the config.

    transformers' ``_compute_longrope_parameters``: the inverse frequencies are
    ``1 / (f_i * theta^(2i/d))`` with the *short* factors ``f`` while the
    sequence is at most ``original_max_position_embeddings`` long (the long
    factors beyond), and cos and sin are multiplied by the attention factor
    ``a = sqrt(1 + ln(s) / ln(L_orig))`` (``s = L_max / L_orig``; 1 if
    ``s <= 1``; or the config's ``attention_factor``). With every channel
    turned, ``a`` scales both q and k, so the scores are ``a^2 q.k / sqrt(d)``:
    ``query_scale = a^2 / sqrt(d)``. The judge's window is kept to
    ``L_orig`` (``max_position_embeddings``), so the long factors (which
    transformers switches to for a whole forward pass past ``L_orig``, keeping
    earlier cache entries turned by the short ones) are never needed.

    Raises:
        ValueError: no short factors, or their count is not ``d / 2``; partial
            rotary (``a`` would scale only the turned channels).
    """
    short = scaling.get("short_factor")
    prf = float(rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)) or 1.0)
    if prf != 1.0:
        raise ValueError(f"rope scaling 'longrope' with partial_rotary_factor {prf} is not supported "
                         "(only every channel turned, as Phi-3 and Phi-3.5 mini)")
    if not isinstance(short, (list, tuple)) or len(short) != head_dim // 2:
        raise ValueError(f"rope scaling 'longrope' needs short_factor: {head_dim // 2} numbers "
                         f"(head_dim / 2), got {short!r}")
    max_pos = int(cfg.get("max_position_embeddings", 2048))
    orig = int(scaling.get("original_max_position_embeddings") or cfg.get("original_max_position_embeddings")
               or max_pos)
    factor = float(scaling.get("factor") or max_pos / orig)
    a = scaling.get("attention_factor")
    a = float(a) if a is not None else (1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig)))
    return {"rope_freq_factors": tuple(float(f) for f in short), "query_scale": a * a / math.sqrt(head_dim),
            "max_position_embeddings": min(max_pos, orig)}


def _windows(mt: str, cfg: Mapping[str, Any], n_layers: int) -> tuple[int | None, ...] | None:
    """Per-layer sliding windows of a family (``None``: every layer attends to all its past)."""
    sw = cfg.get("sliding_window")
    if cfg.get("use_bidirectional_attention"):
        raise ValueError("bidirectional attention (embedding models) is not supported")
    layer_types = cfg.get("layer_types")
    if not sw:
        return None
    if mt in ("mistral", "phi3") and not layer_types:
        return (int(sw),) * n_layers
    if mt in ("qwen2", "qwen3"):
        if not cfg.get("use_sliding_window"):
            return None
        if not layer_types:
            mwl = int(cfg.get("max_window_layers", n_layers))
            layer_types = ["sliding_attention" if i >= mwl else "full_attention" for i in range(n_layers)]
    if mt in _GEMMA and not layer_types:    # as transformers: Gemma 2 alternates, Gemma 3 has 5 local : 1 global
        every = 2 if mt == "gemma2" else int(cfg.get("sliding_window_pattern", 6))
        layer_types = ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(n_layers)]
    if layer_types and any(t == "sliding_attention" for t in layer_types):
        if len(layer_types) != n_layers:
            raise ValueError(f"layer_types has {len(layer_types)} entries for {n_layers} layers")
        return tuple(int(sw) if t == "sliding_attention" else None for t in layer_types)
    return None


def attention_kernel(config: LlamaConfig, weight_dtype, backend: str | None = None) -> str:
    """The attention kernel a decoder runs: ``config.attention_kernel``, with ``"auto"`` resolved.

    ``"auto"`` is ``"fused"`` on a GPU backend for bfloat16/float16 weights without attention
    soft-capping, ``"einsum"`` otherwise (CPU, float32 or quantised weights, Gemma 2). On one
    H200 the fused kernel judged 1.2x as many comparisons per second as the einsum path at
    Llama-3-8B shapes and compiled in half the time (``benchmarks/results/judge_gpu.md``).

    Args:
        config: the decoder's configuration.
        weight_dtype: dtype of the attention projections (``None`` for quantised weights).
        backend: ``jax.default_backend()`` when ``None``.
    """
    if config.attention_kernel != "auto":
        return config.attention_kernel
    import jax
    import jax.numpy as jnp

    backend = jax.default_backend() if backend is None else backend
    low = weight_dtype is not None and jnp.dtype(weight_dtype) in (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))
    return "fused" if backend == "gpu" and low and config.attn_softcap is None else "einsum"
