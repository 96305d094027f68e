"""Llama-family decoder in Flax NNX: Llama 2/3, Mistral, Qwen2/2.5, SmolLM2.

Our own implementation (issue 3: the judges run on JAX, not on transformers'
Flax classes). One module covers the family: grouped-query attention (GQA),
rotary position embeddings (RoPE, "rotate half" layout as in Hugging Face
checkpoints) with the checkpoint's own ``rope_theta`` and optional ``linear`` /
``llama3`` scaling, RMSNorm, SwiGLU MLP, q/k/v biases (Qwen2), an optional
sliding window (Mistral), tied or separate output embeddings.

The layer weights are stacked along a leading ``[L]`` axis and the layers run
in one ``lax.scan``, so compilation cost does not grow with depth.

What the judges need for speed (see METHODS.md, "Judges"):

* :meth:`LlamaModel.hidden` runs a padded ``[B, T]`` batch (left or right
  padding; positions come from the mask) and returns final hidden states;
  :meth:`LlamaModel.logits_at` projects only selected positions onto only
  selected vocabulary rows, so the full vocabulary is never projected over
  every position.
* :meth:`LlamaModel.prefill` encodes a shared prefix (the article) once into a
  :class:`KVCache`; :meth:`LlamaModel.extend` runs ``B`` continuations against
  a batch-1 prefix cache *without copying it B times* (attention scores are
  computed over ``[prefix keys ; own keys]`` by two einsums).
* :func:`generate`: greedy or temperature / top-p sampling with the cache in a
  ``lax.while_loop`` of static maximum length.

Everything is ``jax.jit``-compiled with static shapes; padding to length
buckets (:func:`bucket_length`) is the caller's job.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

__all__ = [
    "LlamaConfig", "LlamaModel", "KVCache", "ExtendOutput", "GenerateOutput",
    "load_state_dict", "generate", "bucket_length", "SUPPORTED_MODEL_TYPES",
]

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")
_NO_WINDOW = 1 << 30


def bucket_length(n: int, buckets: Sequence[int] = (32, 64, 128, 256, 512, 1024, 2048)) -> int:
    """Smallest bucket ``>= n`` (a multiple of the largest bucket beyond it).

    Padding sequence lengths to a few buckets bounds the number of compiled
    shapes.
    """
    for b in sorted(buckets):
        if n <= b:
            return int(b)
    top = max(buckets)
    return int(-(-n // top) * top)


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


class KVCache(NamedTuple):
    """Key/value cache (a pytree; static capacity ``S``).

    Attributes:
        k, v: ``[L, Bc, S, Hkv, Dh]``.
        valid: ``[Bc, S]`` which slots hold real tokens.
        pos: ``[Bc, S]`` RoPE position of each slot.
        length: ``[]`` slots written so far (the next write goes there).
        next_pos: ``[Bc]`` position of the next real token (real tokens so far).
        last_hidden: ``[Bc, D]`` final hidden state at the last real token.
    """

    k: jax.Array
    v: jax.Array
    valid: jax.Array
    pos: jax.Array
    length: jax.Array
    next_pos: jax.Array
    last_hidden: jax.Array


class ExtendOutput(NamedTuple):
    """Result of :meth:`LlamaModel.extend`: ``hidden [B, T, D]``, ``last_hidden
    [B, D]`` (at each row's last real token) and the updated cache (``None``
    unless ``update=True``)."""

    hidden: jax.Array
    last_hidden: jax.Array
    cache: KVCache | None


class GenerateOutput(NamedTuple):
    """Result of :func:`generate`: ``tokens [B, max_new_tokens]`` (``pad_id``
    after an end-of-sequence token, which is kept) and ``lengths [B]``."""

    tokens: jax.Array
    lengths: jax.Array


# --------------------------------------------------------------------------- core
def _rms(x, w, eps):
    xf = x.astype(jnp.float32)
    xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return w * xf.astype(x.dtype)


def _lin(x, w):
    """``x @ w.T`` with ``w [out, in]`` as stored in PyTorch checkpoints (no transposed copy)."""
    return jnp.einsum("...i,oi->...o", x, w)


def _rope(x, cos, sin):
    """``x [B, T, ..., Dh]``; ``cos, sin [B, T, Dh/2]``."""
    h = x.shape[-1] // 2
    extra = (None,) * (x.ndim - 3)
    c, s = cos[(..., *extra, slice(None))], sin[(..., *extra, slice(None))]
    x1, x2 = x[..., :h].astype(jnp.float32), x[..., h:].astype(jnp.float32)
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1).astype(x.dtype)


def _last_index(mask):
    t = mask.shape[1]
    return jnp.where(mask.any(1), t - 1 - jnp.argmax(mask[:, ::-1], axis=1), t - 1)


def _run(cfg: LlamaConfig, w, ids, mask, cache: KVCache | None, update: bool):
    """Decoder over ``ids [B, T]`` after the tokens in ``cache`` (or none)."""
    b, t = ids.shape
    hkv, dh = cfg.num_key_value_heads, cfg.head_dim
    g = cfg.num_attention_heads // hkv
    mask = mask.astype(bool)
    base = jnp.zeros((b,), jnp.int32) if cache is None else jnp.broadcast_to(cache.next_pos, (b,))
    pos = base[:, None] + jnp.maximum(jnp.cumsum(mask, 1, dtype=jnp.int32) - 1, 0)
    ang = pos[..., None].astype(jnp.float32) * jnp.asarray(cfg.inv_freq())
    cos, sin = jnp.cos(ang), jnp.sin(ang)
    causal = jnp.tril(jnp.ones((t, t), bool))
    dpos = pos[:, :, None] - pos[:, None, :]                       # [B, T, T]
    self_ok = causal[None] & mask[:, None, :]
    if cache is not None:
        shared = cache.k.shape[1] == 1 and b > 1
        dpos_c = pos[:, :, None] - cache.pos[:, None, :]           # [B, T, S]
        valid_c = cache.valid[:, None, :]
    windows = jnp.asarray([w_ or _NO_WINDOW for w_ in (cfg.sliding_windows
                          or (None,) * cfg.num_hidden_layers)], jnp.int32)
    scale = 1.0 / math.sqrt(dh)
    neg = jnp.float32(-1e30)

    def layer(x, lw):
        h = _rms(x, lw["attn_norm"], cfg.rms_norm_eps)
        q, k, v = _lin(h, lw["wq"]), _lin(h, lw["wk"]), _lin(h, lw["wv"])
        if cfg.attention_bias:
            q, k, v = q + lw["bq"], k + lw["bk"], v + lw["bv"]
        q = _rope(q.reshape(b, t, hkv, g, dh), cos, sin)
        k = _rope(k.reshape(b, t, hkv, dh), cos, sin)
        v = v.reshape(b, t, hkv, dh)
        f32 = jnp.float32
        s_self = jnp.einsum("bthgd,bshd->bhgts", q, k, preferred_element_type=f32) * scale
        ok = self_ok & (dpos < lw["window"])
        scores, oks = [s_self], [ok]
        if cache is not None:
            kc, vc = lw["ck"], lw["cv"]
            if shared:
                s_c = jnp.einsum("bthgd,shd->bhgts", q, kc[0], preferred_element_type=f32)
            else:
                s_c = jnp.einsum("bthgd,bshd->bhgts", q, kc, preferred_element_type=f32)
            scores.insert(0, s_c * scale)
            oks.insert(0, jnp.broadcast_to(valid_c & (dpos_c < lw["window"]), (b,) + dpos_c.shape[1:]))
        s_all = jnp.concatenate(scores, -1)
        ok_all = jnp.concatenate(oks, -1)[:, None, None]
        p = jax.nn.softmax(jnp.where(ok_all, s_all, neg), axis=-1).astype(v.dtype)
        if cache is not None:
            n_c = kc.shape[1]
            pc, p = p[..., :n_c], p[..., n_c:]
            eq = "bhgts,shd->bthgd" if shared else "bhgts,bshd->bthgd"
            o = jnp.einsum(eq, pc, vc[0] if shared else vc) + jnp.einsum("bhgts,bshd->bthgd", p, v)
        else:
            o = jnp.einsum("bhgts,bshd->bthgd", p, v)
        o = _lin(o.reshape(b, t, hkv * g * dh), lw["wo"])
        if cfg.o_bias:
            o = o + lw["bo"]
        x = x + o
        h = _rms(x, lw["mlp_norm"], cfg.rms_norm_eps)
        gate, up = _lin(h, lw["w_gate"]), _lin(h, lw["w_up"])
        if cfg.mlp_bias:
            gate, up = gate + lw["b_gate"], up + lw["b_up"]
        y = _lin(jax.nn.silu(gate) * up, lw["w_down"])
        if cfg.mlp_bias:
            y = y + lw["b_down"]
        return x + y, (k, v)

    xs = {n: a for n, a in w.items() if n not in ("embed", "lm_head", "norm")}
    xs["window"] = windows
    if cache is not None:
        xs["ck"], xs["cv"] = cache.k, cache.v
    x = jnp.take(w["embed"], ids, axis=0)
    x, (ks, vs) = jax.lax.scan(layer, x, xs)
    hid = _rms(x, w["norm"], cfg.rms_norm_eps)
    last = _last_index(mask)
    last_h = hid[jnp.arange(b), last]
    if cache is not None:
        last_h = jnp.where(mask.any(1)[:, None], last_h, jnp.broadcast_to(cache.last_hidden, last_h.shape))
    new_cache = None
    if update:
        if cache is None:
            raise ValueError("update=True needs a cache")
        if cache.k.shape[1] != b:
            raise ValueError(f"cannot update a cache of batch {cache.k.shape[1]} with batch {b}")
        at = cache.length
        new_cache = KVCache(
            k=jax.lax.dynamic_update_slice(cache.k, ks.astype(cache.k.dtype), (0, 0, at, 0, 0)),
            v=jax.lax.dynamic_update_slice(cache.v, vs.astype(cache.v.dtype), (0, 0, at, 0, 0)),
            valid=jax.lax.dynamic_update_slice(cache.valid, mask, (0, at)),
            pos=jax.lax.dynamic_update_slice(cache.pos, pos, (0, at)),
            length=at + t, next_pos=base + mask.sum(1, dtype=jnp.int32),
            last_hidden=last_h.astype(cache.last_hidden.dtype))
    return hid, last_h, (ks, vs, pos), new_cache


@functools.partial(jax.jit, static_argnames=("cfg",))
def _hidden(cfg, w, ids, mask):
    return _run(cfg, w, ids, mask, None, False)[0]


@functools.partial(jax.jit, static_argnames=("cfg", "capacity"))
def _prefill(cfg, w, ids, mask, capacity):
    mask = mask.astype(bool)
    _, last_h, (ks, vs, pos), _ = _run(cfg, w, ids, mask, None, False)
    pad = capacity - ids.shape[1]
    return KVCache(
        k=jnp.pad(ks, ((0, 0), (0, 0), (0, pad), (0, 0), (0, 0))),
        v=jnp.pad(vs, ((0, 0), (0, 0), (0, pad), (0, 0), (0, 0))),
        valid=jnp.pad(mask, ((0, 0), (0, pad))), pos=jnp.pad(pos, ((0, 0), (0, pad))),
        length=jnp.asarray(ids.shape[1], jnp.int32), next_pos=mask.sum(1, dtype=jnp.int32),
        last_hidden=last_h)


@functools.partial(jax.jit, static_argnames=("cfg", "update"))
def _extend(cfg, w, cache, ids, mask, update):
    hid, last_h, _, new_cache = _run(cfg, w, ids, mask, cache, update)
    return ExtendOutput(hid, last_h, new_cache)


def _project(w, hidden, positions, token_ids):
    if positions is not None:
        idx = positions.reshape(positions.shape[0], -1)
        hidden = jnp.take_along_axis(hidden, idx[..., None], axis=1).reshape(
            positions.shape + hidden.shape[-1:])
    table = w["lm_head"] if "lm_head" in w else w["embed"]
    if token_ids is not None:
        table = jnp.take(table, token_ids, axis=0)
    return jnp.einsum("...d,vd->...v", hidden, table, preferred_element_type=jnp.float32)


_project_jit = jax.jit(_project)


# ------------------------------------------------------------------------- module
def _param_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    L, D, F = cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size
    hq, hk = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    s = {"embed": (cfg.vocab_size, D), "norm": (D,), "attn_norm": (L, D), "mlp_norm": (L, D),
         "wq": (L, hq, D), "wk": (L, hk, D), "wv": (L, hk, D), "wo": (L, D, hq),
         "w_gate": (L, F, D), "w_up": (L, F, D), "w_down": (L, D, F)}
    if not cfg.tie_word_embeddings:
        s["lm_head"] = (cfg.vocab_size, D)
    if cfg.attention_bias:
        s.update(bq=(L, hq), bk=(L, hk), bv=(L, hk))
    if cfg.o_bias:
        s["bo"] = (L, D)
    if cfg.mlp_bias:
        s.update(b_gate=(L, F), b_up=(L, F), b_down=(L, D))
    return s


class LlamaModel(nnx.Module):
    """Llama-family causal decoder; every weight is an ``nnx.Param`` (layers stacked).

    Args:
        config: the :class:`LlamaConfig`.
        dtype: parameter / activation dtype (float32 default; bfloat16 works,
            softmax, norms and logits stay in float32).
        rngs: for random initialisation (normal, std 0.02; norms at one).
        params: optional ready arrays by name (see :func:`load_state_dict`).
    """

    def __init__(self, config: LlamaConfig, *, dtype=jnp.float32, rngs: nnx.Rngs | None = None,
                 params: Mapping[str, Any] | None = None):
        self.config = config
        shapes = _param_shapes(config)
        if params is None:  # NumPy draws: no compilation per parameter shape
            seed = jax.random.randint((rngs or nnx.Rngs(0)).params(), (), 0, 2**31 - 1)
            gen = np.random.default_rng(int(seed))
            params = {n: (np.ones(s, np.float32) if n.endswith("norm") else
                          gen.normal(0.0, 0.02, s).astype(np.float32)) for n, s in shapes.items()}
        missing = set(shapes) - set(params)
        if missing:
            raise ValueError(f"missing parameters: {sorted(missing)}")
        for n, s in shapes.items():
            a = jnp.asarray(params[n], dtype)
            if a.shape != s:
                raise ValueError(f"parameter {n}: shape {a.shape}, expected {s}")
            setattr(self, n, nnx.Param(a))
        self._names = tuple(shapes)

    def weights(self) -> dict[str, jax.Array]:
        """The raw parameter arrays by name (what the jitted functions take)."""
        return {n: getattr(self, n)[...] for n in self._names}

    def hidden(self, ids: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """Final (normed) hidden states ``[B, T, D]`` of a padded batch.

        Args:
            ids: ``[B, T]`` token ids.
            mask: ``[B, T]`` 1 for real tokens (left or right padding); all ones
                when omitted. RoPE positions are ``cumsum(mask) - 1``.
        """
        ids = jnp.asarray(ids, jnp.int32)
        mask = jnp.ones(ids.shape, bool) if mask is None else jnp.asarray(mask, bool)
        return _hidden(self.config, self.weights(), ids, mask)

    def logits_at(self, hidden: jax.Array, positions: jax.Array | None = None,
                  token_ids: jax.Array | None = None) -> jax.Array:
        """Output logits (float32) at chosen positions for chosen vocabulary rows.

        Args:
            hidden: ``[B, T, D]`` (with ``positions``) or ``[..., D]``.
            positions: ``[B]`` or ``[B, K]`` indices into ``T``; ``None``: use
                ``hidden`` as it is.
            token_ids: ``[V']`` vocabulary rows to score (all when ``None``).

        Returns:
            ``[B, V']``, ``[B, K, V']`` or ``[..., V']``.
        """
        return _project_jit(self.weights(), hidden,
                            None if positions is None else jnp.asarray(positions, jnp.int32),
                            None if token_ids is None else jnp.asarray(token_ids, jnp.int32))

    def __call__(self, ids: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """Full logits ``[B, T, V]`` (convenience; judges use :meth:`logits_at`)."""
        return self.logits_at(self.hidden(ids, mask))

    def prefill(self, ids: jax.Array, mask: jax.Array | None = None, *,
                capacity: int | None = None) -> KVCache:
        """Encode a prefix ``[Bc, P]`` into a :class:`KVCache` with ``capacity >= P`` slots."""
        ids = jnp.asarray(ids, jnp.int32)
        mask = jnp.ones(ids.shape, bool) if mask is None else jnp.asarray(mask, bool)
        cap = ids.shape[1] if capacity is None else int(capacity)
        if cap < ids.shape[1]:
            raise ValueError(f"capacity {cap} < prefix length {ids.shape[1]}")
        return _prefill(self.config, self.weights(), ids, mask, cap)

    def extend(self, cache: KVCache, ids: jax.Array, mask: jax.Array | None = None, *,
               update: bool = False) -> ExtendOutput:
        """Run continuations ``[B, T]`` after the cached prefix.

        A batch-1 cache is shared by all ``B`` rows without being copied. With
        ``update=True`` (cache batch ``B`` and ``T`` free slots) the new keys
        and values are written into the returned cache.
        """
        ids = jnp.asarray(ids, jnp.int32)
        mask = jnp.ones(ids.shape, bool) if mask is None else jnp.asarray(mask, bool)
        if cache.k.shape[1] not in (1, ids.shape[0]):
            raise ValueError(f"cache batch {cache.k.shape[1]} does not match batch {ids.shape[0]}")
        if update and not isinstance(cache.length, jax.core.Tracer) and \
                int(cache.length) + ids.shape[1] > cache.k.shape[2]:
            raise ValueError(f"cache full: {int(cache.length)} + {ids.shape[1]} > capacity {cache.k.shape[2]}")
        return _extend(self.config, self.weights(), cache, ids, mask, update)


# ------------------------------------------------------------------------ loading
def _hf_to_params(cfg: LlamaConfig, t: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    def get(name):
        for key in (name, "model." + name if not name.startswith("lm_head") else name):
            if key in t:
                return np.asarray(t[key])
        raise ValueError(f"checkpoint lacks tensor {name!r}")

    def stack(fmt):
        return np.stack([get(fmt.format(i)) for i in range(cfg.num_hidden_layers)])

    a = "model.layers.{}.self_attn."
    m = "model.layers.{}.mlp."
    p = {"embed": get("model.embed_tokens.weight"), "norm": get("model.norm.weight"),
         "attn_norm": stack("model.layers.{}.input_layernorm.weight"),
         "mlp_norm": stack("model.layers.{}.post_attention_layernorm.weight"),
         "wq": stack(a + "q_proj.weight"), "wk": stack(a + "k_proj.weight"),
         "wv": stack(a + "v_proj.weight"), "wo": stack(a + "o_proj.weight"),
         "w_gate": stack(m + "gate_proj.weight"), "w_up": stack(m + "up_proj.weight"),
         "w_down": stack(m + "down_proj.weight")}
    if not cfg.tie_word_embeddings:
        p["lm_head"] = get("lm_head.weight")
    if cfg.attention_bias:
        p.update(bq=stack(a + "q_proj.bias"), bk=stack(a + "k_proj.bias"),
                 bv=stack(a + "v_proj.bias"))
    if cfg.o_bias:
        p["bo"] = stack(a + "o_proj.bias")
    if cfg.mlp_bias:
        p.update(b_gate=stack(m + "gate_proj.bias"), b_up=stack(m + "up_proj.bias"),
                 b_down=stack(m + "down_proj.bias"))
    return p


def load_state_dict(model_or_config: LlamaModel | LlamaConfig,
                    tensors: Mapping[str, np.ndarray], *, dtype=jnp.float32) -> LlamaModel:
    """Map Hugging Face tensor names (``model.layers.N.self_attn.q_proj.weight``...)
    onto a :class:`LlamaModel`.

    Args:
        model_or_config: a model to fill in place, or a config to build one.
        tensors: HF name -> array (``[out, in]`` linear weights as in PyTorch).
        dtype: parameter dtype when building from a config.

    Raises:
        ValueError: a tensor is missing or has the wrong shape.
    """
    if isinstance(model_or_config, LlamaConfig):
        return LlamaModel(model_or_config, dtype=dtype, params=_hf_to_params(model_or_config, tensors))
    model = model_or_config
    params = _hf_to_params(model.config, tensors)
    for n in model._names:
        var = getattr(model, n)
        arr = jnp.asarray(params[n], var[...].dtype)
        if arr.shape != var[...].shape:
            raise ValueError(f"parameter {n}: shape {arr.shape}, expected {var[...].shape}")
        var.set_value(arr)
    return model


# --------------------------------------------------------------------- generation
def _pick(logits, key, greedy, temperature, top_p):
    if greedy:
        return jnp.argmax(logits, -1).astype(jnp.int32)
    logits = logits / temperature
    srt = jnp.sort(logits, -1)[:, ::-1]
    probs = jax.nn.softmax(srt, -1)
    keep = (jnp.cumsum(probs, -1) - probs) < top_p          # always keeps the top token
    thr = jnp.min(jnp.where(keep, srt, jnp.inf), -1, keepdims=True)
    return jax.random.categorical(key, jnp.where(logits >= thr, logits, -jnp.inf)).astype(jnp.int32)


@functools.partial(jax.jit, static_argnames=("cfg", "max_new", "greedy"))
def _generate(cfg, w, ids, mask, rng, temperature, top_p, eos, pad_id, max_new, greedy):
    b = ids.shape[0]
    cache = _prefill(cfg, w, ids, mask, ids.shape[1] + max_new)
    keys = jax.random.split(rng, max_new)
    tok = _pick(_project(w, cache.last_hidden, None, None), keys[0], greedy, temperature, top_p)
    out = jnp.full((b, max_new), pad_id, jnp.int32).at[:, 0].set(tok)
    done = jnp.isin(tok, eos)
    lengths = jnp.ones((b,), jnp.int32)

    def cond(s):
        return (s[0] < max_new) & ~jnp.all(s[4])

    def body(s):
        i, cache, tok, out, done, lengths = s
        _, last_h, _, cache = _run(cfg, w, tok[:, None], jnp.ones((b, 1), bool), cache, True)
        nxt = _pick(_project(w, last_h, None, None), keys[i], greedy, temperature, top_p)
        nxt = jnp.where(done, pad_id, nxt)
        out = out.at[:, i].set(nxt)
        lengths = lengths + (~done).astype(jnp.int32)
        return i + 1, cache, nxt, out, done | jnp.isin(nxt, eos), lengths

    s = jax.lax.while_loop(cond, body, (jnp.int32(1), cache, tok, out, done, lengths))
    return GenerateOutput(s[3], s[5])


def generate(model: LlamaModel, ids: jax.Array, mask: jax.Array | None = None, *,
             max_new_tokens: int, temperature: float = 0.0, top_p: float = 1.0,
             rng: jax.Array | None = None, eos_id: int | Sequence[int] | None = None,
             pad_id: int = 0) -> GenerateOutput:
    """Greedy decoding (``temperature == 0``) or temperature / nucleus sampling.

    Prompts ``[B, T]`` may be left- or right-padded (``mask``). Decoding uses
    the KV cache inside one ``lax.while_loop`` (static ``max_new_tokens``),
    stopping early once every row has produced an ``eos_id`` token.

    Args:
        model: the decoder.
        ids, mask: prompt token ids and 1/0 mask ``[B, T]``.
        max_new_tokens: number of tokens to produce at most.
        temperature: 0 for greedy, else the softmax temperature.
        top_p: nucleus mass (1 keeps the whole distribution).
        rng: PRNG key for sampling (``PRNGKey(0)`` when omitted).
        eos_id: one id or several ids that end a sequence.
        pad_id: filler after the end of a sequence.

    Returns:
        :class:`GenerateOutput` with ``tokens [B, max_new_tokens]`` and ``lengths [B]``.
    """
    ids = jnp.asarray(ids, jnp.int32)
    mask = jnp.ones(ids.shape, bool) if mask is None else jnp.asarray(mask, bool)
    eos = np.atleast_1d(np.asarray([] if eos_id is None else eos_id, np.int32))
    eos = jnp.asarray(np.pad(eos, (0, -len(eos) % 8), constant_values=-1))  # few compiled shapes
    rng = jax.random.PRNGKey(0) if rng is None else rng
    return _generate(model.config, model.weights(), ids, mask, rng, jnp.float32(max(temperature, 1e-6)),
                     jnp.float32(top_p), eos, jnp.int32(pad_id), int(max_new_tokens), temperature <= 0)
