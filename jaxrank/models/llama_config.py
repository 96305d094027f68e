"""The hyper-parameters of a Llama-family decoder (:class:`LlamaConfig`), read from a Hugging Face config.

Its own module, imported by both :mod:`~jaxrank.models.llama` (which
re-exports it) and the private functional core ``_llama_core``, so neither
imports the other for it.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["LlamaConfig", "SUPPORTED_MODEL_TYPES", "SUPPORTED_ROPE_TYPES", "SUPPORTED_ACTIVATIONS", "HF_DEFAULTS",
           "WindowWarning", "judge_max_length"]

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "longrope")
_ROPE_KEYS = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                                                "original_max_position_embeddings")}
"""The keys each scaled RoPE type reads (transformers' ``_compute_linear_scaling_rope_parameters``,
``_compute_llama3_parameters``)."""
SUPPORTED_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh",
                         "gelu_tanh": "gelu_tanh"}
"""Hugging Face ``hidden_act`` / ``hidden_activation`` names -> the core's activation."""

_GEMMA = ("gemma2", "gemma3_text")
_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
"""The ``config.json`` keys :meth:`LlamaConfig.from_hf` has no default for."""

_COMMON_DEFAULTS: dict[str, Any] = {
    "rms_norm_eps": 1e-6, "max_position_embeddings": 2048, "tie_word_embeddings": False, "head_dim": None,
    "num_key_value_heads": None, "sliding_window": None, "max_window_layers": None,
    "attn_logit_softcapping": None, "final_logit_softcapping": None, "query_pre_attn_scalar": 256,
    "original_max_position_embeddings": None}
HF_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {},
    "mistral": {"max_position_embeddings": 4096 * 32, "sliding_window": 4096, "num_key_value_heads": 8},
    "qwen2": {"max_position_embeddings": 32768, "sliding_window": 4096, "max_window_layers": 28,
              "num_key_value_heads": 32},
    "qwen3": {"max_position_embeddings": 32768, "sliding_window": 4096, "max_window_layers": 28,
              "num_key_value_heads": 32, "head_dim": 128},
    "phi3": {"rms_norm_eps": 1e-5, "max_position_embeddings": 4096, "original_max_position_embeddings": 4096},
    "gemma2": {"max_position_embeddings": 8192, "sliding_window": 4096, "num_key_value_heads": 4, "head_dim": 256,
               "tie_word_embeddings": True, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
    "gemma3_text": {"max_position_embeddings": 131072, "sliding_window": 4096, "num_key_value_heads": 4,
                    "head_dim": 256, "tie_word_embeddings": True},
}
"""Per ``model_type``, the value :meth:`LlamaConfig.from_hf` takes for a key *absent* from ``config.json``
(over :data:`_COMMON_DEFAULTS`): the defaults of transformers' own config classes (``LlamaConfig``,
``MistralConfig``, ``Qwen2Config``, ``Qwen3Config``, ``Phi3Config``, ``Gemma2Config``,
``Gemma3TextConfig``; transformers 5.24), so a hand-written config that omits a key reads as transformers
reads it (``tests/test_review_config_defaults.py`` checks each against the installed classes). A key
present as ``null`` keeps its null meaning (no window, no soft-cap; ``head_dim`` / ``num_key_value_heads``:
derived from the heads), as transformers' own ``null`` does."""


def _default(mt: str, key: str) -> Any:
    """The family's value for ``key`` when ``config.json`` lacks it (:data:`HF_DEFAULTS`)."""
    return HF_DEFAULTS.get(mt, {}).get(key, _COMMON_DEFAULTS.get(key))


def _get(cfg: Mapping[str, Any], mt: str, key: str) -> Any:
    """``cfg[key]`` when the key is there (even ``null``), else the family's default."""
    return cfg[key] if key in cfg else _default(mt, key)


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
        attn_softcap: attention scores become ``c * tanh(s / c)`` (Gemma 2; a
            Gemma 3 config's ``attn_logit_softcapping`` is ignored, as
            transformers' ``Gemma3Attention`` ignores it).
        final_softcap: output logits become ``c * tanh(z / c)`` (Gemma 2).
        qk_norm: per-head RMSNorm of queries and keys before RoPE (Qwen3,
            Gemma 3).
        sandwich_norms: RMSNorm of the attention and MLP outputs before their
            residual adds (Gemma 2/3: four norms per layer).
        local_rope_theta: RoPE base of the sliding-window layers
            (Gemma 3; ``None``: every layer uses ``rope_theta`` and the scaling).
        local_rope_scaling: the sliding-window layers' own scaling, as
            ``rope_scaling`` (Gemma 3 in the transformers 5 layout,
            ``rope_parameters["sliding_attention"]``; ``None``: unscaled).
        rotary_dim: RoPE turns the first ``rotary_dim`` channels of a head
            (``None``: all; Phi's ``partial_rotary_factor``).
        hard_window: positions past ``max_position_embeddings`` need maths this
            config does not carry, so a longer input would be wrong, not merely
            extrapolated: set for LongRoPE (Phi-3), whose window is capped at the
            original one because transformers turns every position by the *long*
            factors once a sequence passes it. The judges refuse a ``max_length``
            above the window when it is set (and only warn otherwise).
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
    local_rope_scaling: tuple[tuple[str, Any], ...] | None = None
    rotary_dim: int | None = None
    hard_window: bool = False
    attention_kernel: str = "auto"

    def __post_init__(self):
        if self.attention_kernel not in ("auto", "einsum", "fused"):
            raise ValueError(f"attention_kernel must be 'auto', 'einsum' or 'fused', got {self.attention_kernel!r}")
        if self.attention_kernel == "fused" and self.attn_softcap is not None:
            raise ValueError("attention_kernel='fused' cannot soft-cap attention scores (attn_softcap is set): "
                             "use attention_kernel='einsum'")
        _check_scaling(dict(self.rope_scaling or ()), "rope_scaling")
        _check_scaling(dict(self.local_rope_scaling or ()), "local_rope_scaling")

    @classmethod
    def from_hf(cls, cfg: Mapping[str, Any]) -> LlamaConfig:
        """Build from a Hugging Face ``config.json`` dict (transformers 4 or 5 layout).

        ``model_type`` picks the family's mapping, as transformers' own config
        classes do: ``llama``, ``mistral`` (sliding window), ``qwen2`` (q/k/v
        biases, optional sliding layers), ``qwen3`` (q/k norms), ``phi3``
        (partial rotary, sliding window; fused projections in the loader),
        ``gemma2`` and ``gemma3_text`` (norm offset, embedding scale, query
        scalar, soft-capping, sandwich norms, alternating sliding-window
        layers; Gemma 3 with q/k norms and a local RoPE base). A key absent from
        ``cfg`` takes the family's transformers default (:data:`HF_DEFAULTS`:
        e.g. Gemma 2's soft-caps 50 / 30, Phi-3's ``rms_norm_eps`` 1e-5, a 4096
        window for Mistral and Gemma, the family's ``max_position_embeddings``).

        As transformers: ``attention_bias`` is ignored for Phi-3 and Mistral
        (no biases), ``mlp_bias`` read for Llama alone, Gemma 3's
        ``attn_logit_softcapping`` ignored; a ``llama3`` scaling without
        ``original_max_position_embeddings`` takes ``max_position_embeddings``.

        Raises:
            ValueError: unknown ``model_type``, activation or rope scaling type
                (Gemma 3's sliding layers: ``default``, ``linear`` or ``llama3``); a
                scaling lacking a key it reads or with a factor that is not a
                positive number (names the key); a required size missing or null
                (names every such key).
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
        head_dim = int(_get(cfg, mt, "head_dim") or hidden // n_heads)
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
        longrope = _longrope(cfg, scaling, head_dim, rp, mt) if rtype == "longrope" else None
        if longrope is not None:
            rtype = "default"
        max_pos = int(_get(cfg, mt, "max_position_embeddings"))
        scaling = _scaling_items(scaling, rtype, max_pos, "rope_scaling" if cfg.get("rope_scaling") else
                                 "rope_parameters")
        local_scaling = None
        if local_rp:
            ltype = local_rp.get("rope_type", local_rp.get("type", "default"))
            if ltype not in ("default", *_ROPE_KEYS):
                raise ValueError(f"rope_parameters['sliding_attention'] has rope_type {ltype!r}, which is not "
                                 f"supported for the sliding-window layers; supported: default, "
                                 f"{', '.join(_ROPE_KEYS)}")
            local_scaling = _scaling_items(local_rp, ltype, max_pos, "rope_parameters['sliding_attention']")
        n_layers = int(cfg["num_hidden_layers"])
        if mt == "qwen2":
            qkv_bias, o_bias = True, False
        elif mt in ("phi3", "mistral"):     # transformers' Phi3Attention / MistralAttention: never a bias
            qkv_bias = o_bias = False
        else:
            qkv_bias = o_bias = bool(cfg.get("attention_bias", False))
        factors = cfg.get("rope_freq_factors")
        kw: dict[str, Any] = dict(
            vocab_size=int(cfg["vocab_size"]), hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]), num_hidden_layers=n_layers,
            num_attention_heads=n_heads,
            num_key_value_heads=int(_get(cfg, mt, "num_key_value_heads") or n_heads),
            head_dim=head_dim, rms_norm_eps=float(_get(cfg, mt, "rms_norm_eps")), rope_theta=float(theta),
            rope_scaling=scaling,
            rope_freq_factors=tuple(float(f) for f in factors) if factors is not None else None,
            tie_word_embeddings=bool(_get(cfg, mt, "tie_word_embeddings")),
            max_position_embeddings=max_pos,
            attention_bias=qkv_bias, o_bias=o_bias, mlp_bias=mt == "llama" and bool(cfg.get("mlp_bias", False)),
            sliding_windows=_windows(mt, cfg, n_layers), model_type=mt, hidden_act=SUPPORTED_ACTIVATIONS[act],
            qk_norm=mt in ("qwen3", "gemma3_text"))
        if longrope is not None:
            kw.update(longrope)
        if mt == "phi3":
            prf = float(rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0)))
            kw["rotary_dim"] = None if prf == 1.0 else int(head_dim * prf)
        if gemma:
            caps = [_get(cfg, mt, k) for k in ("attn_logit_softcapping", "final_logit_softcapping")]
            if mt == "gemma3_text":        # transformers' Gemma3Attention never soft-caps its scores
                caps[0] = None
            kw.update(norm_offset=1.0, embed_scale=float(hidden ** 0.5), sandwich_norms=True,
                      query_scale=float(_get(cfg, mt, "query_pre_attn_scalar")) ** -0.5,
                      attn_softcap=None if caps[0] is None else float(caps[0]),
                      final_softcap=None if caps[1] is None else float(caps[1]))
        if mt == "gemma3_text":
            kw["local_rope_theta"] = float(cfg.get("rope_local_base_freq",
                                                   (local_rp or {}).get("rope_theta", 10000.0)))
            kw["local_rope_scaling"] = local_scaling
        return cls(**kw)

    def inv_freq(self, local: bool = False) -> np.ndarray:
        """RoPE inverse frequencies ``[rotary_dim // 2]`` (float32), scaling applied.

        Args:
            local: the frequencies of the sliding-window layers: base
                ``local_rope_theta`` and ``local_rope_scaling``, where the config has
                a local base.
        """
        d = self.rotary_dim or self.head_dim
        if local and self.local_rope_theta is not None:
            inv = 1.0 / (self.local_rope_theta ** (np.arange(0, d, 2, dtype=np.float32) / d))
            return _scaled(inv, dict(self.local_rope_scaling or ()))
        inv = 1.0 / (self.rope_theta ** (np.arange(0, d, 2, dtype=np.float32) / d))
        if self.rope_freq_factors is not None:
            inv = inv / np.asarray(self.rope_freq_factors, np.float32)
        return _scaled(inv, dict(self.rope_scaling or ()))


def _scaled(inv: np.ndarray, s: Mapping[str, Any]) -> np.ndarray:
    """Inverse frequencies ``inv`` under the scaling ``s`` (``rope_type`` linear or llama3; else unchanged)."""
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


def _scaling_items(scaling: Mapping[str, Any] | None, rtype: str, max_pos: int,
                   where: str) -> tuple[tuple[str, Any], ...] | None:
    """A scaling dict as the config's sorted items (``None`` for ``default``), after checking it
    (:func:`_check_scaling`); a ``llama3`` scaling lacking ``original_max_position_embeddings`` takes
    ``max_pos``, as transformers' config does."""
    if rtype == "default":
        return None
    items = {k: v for k, v in dict(scaling or {}, rope_type=rtype).items()
             if k not in ("type", "rope_theta", "partial_rotary_factor") and not isinstance(v, (list, dict))}
    if rtype == "llama3" and items.get("original_max_position_embeddings") is None:
        items["original_max_position_embeddings"] = max_pos
    _check_scaling(items, where)
    return tuple(sorted(items.items()))


def _check_scaling(s: Mapping[str, Any], where: str) -> None:
    """Refuse a scaling that :func:`_scaled` cannot compute: a key it reads missing or not a finite
    positive number, or a ``llama3`` ``high_freq_factor`` not above ``low_freq_factor``.

    Raises:
        ValueError: naming ``where`` and the key.
    """
    rtype = s.get("rope_type")
    for key in _ROPE_KEYS.get(rtype, ()):
        v = s.get(key)
        if v is None:
            raise ValueError(f"{where}: rope_type {rtype!r} needs {key!r}, which is missing")
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{where}: {key!r} must be a finite number > 0, got {v!r}")
    if rtype == "llama3" and not s["high_freq_factor"] > s["low_freq_factor"]:
        raise ValueError(f"{where}: 'high_freq_factor' ({s['high_freq_factor']!r}) must be greater than "
                         f"'low_freq_factor' ({s['low_freq_factor']!r})")


def _longrope(cfg: Mapping[str, Any], scaling: Mapping[str, Any], head_dim: int,
              rp: Mapping[str, Any], mt: str = "phi3") -> dict[str, Any]:
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
    earlier cache entries turned by the short ones) are never needed; the
    config is marked ``hard_window`` so that the judges refuse a ``max_length``
    past it (the model itself would silently give other logits than
    transformers there).

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
    max_pos = int(_get(cfg, mt, "max_position_embeddings"))
    orig = int(scaling.get("original_max_position_embeddings") or _get(cfg, mt, "original_max_position_embeddings")
               or max_pos)
    factor = float(scaling.get("factor") or max_pos / orig)
    a = scaling.get("attention_factor")
    a = float(a) if a is not None else (1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig)))
    return {"rope_freq_factors": tuple(float(f) for f in short), "query_scale": a * a / math.sqrt(head_dim),
            "max_position_embeddings": min(max_pos, orig), "hard_window": True}


def _windows(mt: str, cfg: Mapping[str, Any], n_layers: int) -> tuple[int | None, ...] | None:
    """Per-layer sliding windows of a family (``None``: every layer attends to all its past)."""
    sw = _get(cfg, mt, "sliding_window")
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
            mwl = _get(cfg, mt, "max_window_layers")
            mwl = n_layers if mwl is None else int(mwl)
            layer_types = ["sliding_attention" if i >= mwl else "full_attention" for i in range(n_layers)]
    if mt in _GEMMA and not layer_types:    # as transformers: Gemma 2 alternates, Gemma 3 has 5 local : 1 global
        every = 2 if mt == "gemma2" else int(cfg.get("sliding_window_pattern", 6))
        layer_types = ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(n_layers)]
    if layer_types and any(t == "sliding_attention" for t in layer_types):
        if len(layer_types) != n_layers:
            raise ValueError(f"layer_types has {len(layer_types)} entries for {n_layers} layers")
        return tuple(int(sw) if t == "sliding_attention" else None for t in layer_types)
    return None


class WindowWarning(UserWarning):
    """A judge's ``max_length`` is above its model's trained window (``max_position_embeddings``)."""


def judge_max_length(config, max_length: int | None) -> int:
    """The context window a prompt judge cuts its prompts to: ``max_length``, or the model's.

    The default is the model's ``max_position_embeddings`` (512 for a T5, whose relative positions have no
    window). A ``max_length`` above it is refused where going past the window changes the maths: a config
    marked ``hard_window`` (Phi-3's LongRoPE, kept to its original window, beyond which transformers turns
    every position by the long factors); elsewhere (plain, linear or Llama 3 RoPE) the positions past the
    window are computed exactly as transformers computes them, but the model was not trained there, so it
    warns (:class:`WindowWarning`).

    Args:
        config: the model's config.
        max_length: the window asked for, or ``None`` for the model's.

    Raises:
        ValueError: ``max_length`` not a positive int, or above a ``hard_window`` config's window.
    """
    window = getattr(config, "max_position_embeddings", None)
    if max_length is None:
        return int(window or 512)
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 1:
        raise ValueError(f"max_length must be an int >= 1 or None, got {max_length!r}")
    if window and max_length > window:
        if getattr(config, "hard_window", False):
            raise ValueError(f"max_length {max_length} is above the model's window of {window} tokens: past it "
                             f"its LongRoPE would switch to the long factors, which jaxrank does not run (the "
                             f"logits would differ from the model's); use max_length <= {window}")
        warnings.warn(f"max_length {max_length} is above the model's window of {window} tokens "
                      "(max_position_embeddings): positions past it are extrapolation", WindowWarning, stacklevel=3)
    return int(max_length)


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
