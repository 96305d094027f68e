"""Llama-family decoder in Flax NNX: Llama 2/3, Mistral, Qwen2/2.5, Qwen3, Phi-3, Gemma 2/3, SmolLM2.

Our own implementation (issue 3: the judges run on JAX, not on transformers'
Flax classes). One module covers the family: grouped-query attention (GQA),
rotary position embeddings (RoPE, "rotate half" layout as in Hugging Face
checkpoints) with the checkpoint's own ``rope_theta`` and optional ``linear`` /
``llama3`` scaling, RMSNorm, SwiGLU MLP, q/k/v biases (Qwen2), an optional
sliding window (Mistral), tied or separate output embeddings. Config switches
(:class:`LlamaConfig`) cover the other families: q/k norms (Qwen3), partial
rotary and fused ``qkv_proj`` / ``gate_up_proj`` checkpoint tensors, split on
loading (Phi-3), and Gemma's ``1 + weight`` norms, embedding scale, query
scalar, GeGLU, sandwich norms, soft-capped attention scores and logits,
per-layer sliding windows and local RoPE base (Gemma 2/3). Each family is
checked against transformers' PyTorch model (``tests/test_families.py``).

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

The jitted functional decoder behind :class:`LlamaModel` and :func:`generate`
(and the result types :class:`KVCache`, :class:`ExtendOutput`,
:class:`GenerateOutput`, re-exported here) lives in the private
``_llama_core`` module; :class:`LlamaConfig` (re-exported here) in
:mod:`~jaxrank.models.llama_config`, which both import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ._llama_core import (  # noqa: F401  (_pick: used by the tests; _key_rows: by generate)
    ExtendOutput, GenerateOutput, KVCache, _extend, _generate, _hidden, _key_rows, _pick, _prefill, _project_jit,
)
from . import _quant, _quant_layers
from ._quant import QuantisedWeight  # noqa: F401  (re-exported: weights kept quantised)
from ._weights import check_leftovers, checked_array, float_tensor, release_pages, stacked_param
from .llama_config import SUPPORTED_MODEL_TYPES, SUPPORTED_ROPE_TYPES, LlamaConfig  # noqa: F401  (re-exported)

__all__ = [
    "LlamaConfig", "LlamaModel", "KVCache", "ExtendOutput", "GenerateOutput",
    "load_state_dict", "generate", "bucket_length", "SUPPORTED_MODEL_TYPES", "extend_with_vectors",
    "parameter_shapes", "QuantisedWeight",
]

_SHAPE_ERROR = "parameter {name}: shape {got}, expected {want}"
_FUSED = ("phi3",)
"""Model types whose checkpoints fuse q/k/v (``qkv_proj``) and gate/up (``gate_up_proj``)."""


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
    if cfg.qk_norm:
        s.update(q_norm=(L, cfg.head_dim), k_norm=(L, cfg.head_dim))
    if cfg.sandwich_norms:
        s.update(post_attn_norm=(L, D), post_mlp_norm=(L, D))
    return s


def parameter_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's name and shape (layers stacked): what ``LlamaModel(config, params=...)`` takes.

    For drawing weights elsewhere, e.g. random weights of a real config straight
    on an accelerator (``benchmarks/judge_gpu.py``).
    """
    return dict(_param_shapes(config))


class LlamaModel(nnx.Module):
    """Llama-family causal decoder; every weight is an ``nnx.Param`` (layers stacked).

    Args:
        config: the :class:`LlamaConfig`.
        dtype: parameter dtype (float32 default). With bfloat16 weights the
            residual stream, norms, softmax and logits stay float32; the matrix
            products run in bfloat16 with float32 accumulation.
        rngs: for random initialisation (normal, std 0.02; norm gains at one,
            i.e. weights at ``1 - norm_offset``).
        params: optional ready arrays by name (see :func:`load_state_dict`); a linear weight or the
            embedding may be a ``QuantisedWeight`` (kept quantised, dequantised inside the matrix
            products: :func:`jaxrank.models.load_model` with ``weights="quantised"``).
    """

    def __init__(self, config: LlamaConfig, *, dtype=jnp.float32, rngs: nnx.Rngs | None = None,
                 params: Mapping[str, Any] | None = None):
        self.config = config
        shapes = _param_shapes(config)
        if params is None:  # NumPy draws: no compilation per parameter shape
            seed = jax.random.randint((rngs or nnx.Rngs(0)).params(), (), 0, 2**31 - 1)
            gen = np.random.default_rng(int(seed))
            params = {n: (np.full(s, 1.0 - config.norm_offset, np.float32) if n.endswith("norm") else
                          gen.normal(0.0, 0.02, s).astype(np.float32)) for n, s in shapes.items()}
        missing = set(shapes) - set(params)
        if missing:
            raise ValueError(f"missing parameters: {sorted(missing)}")
        for n, s in shapes.items():
            setattr(self, n, nnx.Param(_checked(n, params[n], s, dtype)))
        self._names = tuple(shapes)

    def weights(self) -> dict[str, jax.Array]:
        """The raw parameter arrays by name (what the jitted functions take; quantised weights as
        ``QuantisedWeight`` pytrees)."""
        return {n: getattr(self, n).get_value() for n in self._names}

    @property
    def quantised(self) -> bool:
        """Whether any weight is kept quantised."""
        return any(isinstance(v, QuantisedWeight) for v in self.weights().values())

    def hidden(self, ids: jax.Array, mask: jax.Array | None = None, *, vectors: jax.Array | None = None,
               vector_index: jax.Array | None = None) -> jax.Array:
        """Final (normed) hidden states ``[B, T, D]`` of a padded batch.

        Args:
            ids: ``[B, T]`` token ids.
            mask: ``[B, T]`` 1 for real tokens (left or right padding); all ones
                when omitted. RoPE positions are ``cumsum(mask) - 1``.
            vectors, vector_index: the input-embedding path: ``[k, D]`` input
                vectors and ``[B, T]`` slots (``-1`` elsewhere); a slot ``t`` with
                ``vector_index[b, t] = m >= 0`` reads ``vectors[m]`` instead of the
                embedding of ``ids[b, t]`` (soft prompts).
        """
        ids = jnp.asarray(ids, jnp.int32)
        mask = jnp.ones(ids.shape, bool) if mask is None else jnp.asarray(mask, bool)
        vectors, vector_index = _checked_vectors(self.config, ids, vectors, vector_index)
        return _hidden(self.config, self.weights(), ids, mask, vectors, vector_index)

    def logits_at(self, hidden: jax.Array, positions: jax.Array | None = None,
                  token_ids: jax.Array | None = None) -> jax.Array:
        """Output logits (float32) at chosen positions for chosen vocabulary rows (soft-capped
        where the config says so: Gemma 2).

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
                            None if token_ids is None else jnp.asarray(token_ids, jnp.int32),
                            self.config.final_softcap)

    def __call__(self, ids: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        """Full logits ``[B, T, V]`` (convenience; judges use :meth:`logits_at`)."""
        return self.logits_at(self.hidden(ids, mask))

    def prefill(self, ids: jax.Array, mask: jax.Array | None = None, *,
                capacity: int | None = None, cache_dtype=None) -> KVCache:
        """Encode a prefix ``[Bc, P]`` into a :class:`KVCache` with ``capacity >= P`` slots.

        ``cache_dtype``: keys and values stored in this dtype (default float32,
        as computed); ``jnp.bfloat16`` halves the cache, and continuations then
        read it in bfloat16 with float32 accumulation.
        """
        ids = jnp.asarray(ids, jnp.int32)
        mask = jnp.ones(ids.shape, bool) if mask is None else jnp.asarray(mask, bool)
        cap = ids.shape[1] if capacity is None else int(capacity)
        if cap < ids.shape[1]:
            raise ValueError(f"capacity {cap} < prefix length {ids.shape[1]}")
        dt = None if cache_dtype is None else np.dtype(cache_dtype).name
        return _prefill(self.config, self.weights(), ids, mask, cap, dt)

    EXTEND_LAST_ONLY = True
    """:meth:`extend` takes ``last_only`` (a sharded model's may not)."""

    def extend(self, cache: KVCache, ids: jax.Array, mask: jax.Array | None = None, *,
               update: bool = False, vectors: jax.Array | None = None,
               vector_index: jax.Array | None = None, last_only: bool = False) -> ExtendOutput:
        """Run continuations ``[B, T]`` after the cached prefix.

        A batch-1 cache is shared by all ``B`` rows without being copied. With
        ``update=True`` (cache batch ``B`` and ``T`` free slots) the new keys
        and values are written into the returned cache. ``vectors`` /
        ``vector_index``: learnt input vectors in marked slots, as in :meth:`hidden`.
        ``last_only``: only ``last_hidden`` is wanted; the last layer runs its queries, attention
        output and MLP at each row's last real token alone, and ``hidden`` is ``[B, 1, D]`` (those
        tokens' final hidden states). ``last_hidden`` and the cache are the full pass's.
        """
        ids = jnp.asarray(ids, jnp.int32)
        mask = jnp.ones(ids.shape, bool) if mask is None else jnp.asarray(mask, bool)
        vectors, vector_index = _checked_vectors(self.config, ids, vectors, vector_index)
        if cache.k.shape[1] not in (1, ids.shape[0]):
            raise ValueError(f"cache batch {cache.k.shape[1]} does not match batch {ids.shape[0]}")
        if update and not isinstance(cache.length, jax.core.Tracer) and \
                int(cache.length) + ids.shape[1] > cache.k.shape[2]:
            raise ValueError(f"cache full: {int(cache.length)} + {ids.shape[1]} > capacity {cache.k.shape[2]}")
        return _extend(self.config, self.weights(), cache, ids, mask, update, vectors, vector_index,
                       last_only=bool(last_only))


def _checked(name, value, shape, dtype):
    """``value`` as a parameter: a quantised weight kept as it is (on the device), else cast to ``dtype``."""
    if isinstance(value, QuantisedWeight):
        if tuple(value.shape) != tuple(shape):
            raise ValueError(_SHAPE_ERROR.format(name=name, got=tuple(value.shape), want=tuple(shape)))
        return _quant.to_device(value)
    return checked_array(name, value, shape, dtype, _SHAPE_ERROR)


def _stack(getters: list, dtype):
    """The ``L`` layer tensors stacked: quantised weights stay quantised (``_quant_layers.stack``), arrays go
    through :func:`~jaxrank.models._weights.stacked_param` (one host buffer in ``dtype``)."""
    first = getters[0]()
    if isinstance(first, QuantisedWeight):
        return _quant_layers.stack_layers([lambda: first] + list(getters[1:]))
    return stacked_param([lambda: first] + list(getters[1:]), dtype)


def _checked_vectors(cfg: LlamaConfig, ids, vectors, vector_index):
    """``(vectors, vector_index)`` as arrays after checking their shapes (``(None, None)`` for none)."""
    if vectors is None and vector_index is None:
        return None, None
    if vectors is None or vector_index is None:
        raise ValueError("vectors and vector_index go together: pass both or neither")
    vectors = jnp.asarray(vectors)
    vector_index = jnp.asarray(vector_index, jnp.int32)
    if vectors.ndim != 2 or vectors.shape[1] != cfg.hidden_size:
        raise ValueError(f"vectors must be [k, {cfg.hidden_size}], got {tuple(vectors.shape)}")
    if vector_index.shape != ids.shape:
        raise ValueError(f"vector_index must have the shape of ids {tuple(ids.shape)}, "
                         f"got {tuple(vector_index.shape)}")
    if vectors.shape[0] == 0:
        return None, None
    return vectors, vector_index


def extend_with_vectors(config: LlamaConfig, weights: Mapping[str, jax.Array], cache: KVCache, ids: jax.Array,
                        mask: jax.Array, vectors: jax.Array, vector_index: jax.Array, *,
                        remat: bool = False) -> ExtendOutput:
    """Functional :meth:`LlamaModel.extend` with learnt input vectors, for gradients.

    A pure function of its arrays (the weights are an argument, not constants
    closed over), so ``jax.grad`` / ``jax.jit`` of a loss built on it
    differentiate with respect to ``vectors`` (and anything else passed in) and
    compile once per shape. Slot ``t`` of row ``b`` reads ``vectors[m]`` where
    ``vector_index[b, t] = m >= 0``, else the embedding of ``ids[b, t]``.

    Args:
        config: the model's config (static).
        weights: :meth:`LlamaModel.weights` (wrap in ``jax.lax.stop_gradient``
            to keep the model frozen).
        cache: a prefix cache (:meth:`LlamaModel.prefill`), batch 1 or ``B``.
        ids, mask: ``[B, T]`` continuation tokens and their mask.
        vectors: ``[k, D]``; vector_index: ``[B, T]`` int, ``-1`` for token slots.
        remat: recompute each layer in the backward pass (less memory).

    Returns:
        :class:`ExtendOutput` (``cache`` is ``None``).
    """
    if vectors.shape[0] == 0:
        vectors = vector_index = None
    return _extend(config, weights, cache, ids, mask, False, vectors, vector_index, remat)


# ------------------------------------------------------------------------ loading
def _hf_to_params(cfg: LlamaConfig, t: Mapping[str, np.ndarray], dtype=jnp.float32) -> dict[str, jax.Array]:
    """Parameters in ``dtype``, built one at a time (lean: see :func:`load_state_dict`); an integer
    tensor is refused, tensors left over reported (:func:`~jaxrank.models._weights.check_leftovers`)."""
    used: set[str] = set()

    def key_of(name):
        for key in (name, "model." + name if not name.startswith("lm_head") else name):
            if key in t:
                used.add(key)
                return key
        raise ValueError(f"checkpoint lacks tensor {name!r}")

    def read(key):
        return float_tensor(key, t[key])

    def get(name):
        value = read(key_of(name))
        if isinstance(value, QuantisedWeight):
            return _quant.to_device(value)
        arr = np.asarray(value)
        out = jax.device_put(arr.astype(np.dtype(dtype), copy=False))
        release_pages(arr)
        return out

    def stack(fmt, rows=None):
        keys = [key_of(fmt.format(i)) for i in range(cfg.num_hidden_layers)]
        if rows is None:
            return _stack([lambda k=k: read(k) for k in keys], dtype)
        return _stack([lambda k=k: _rows(read(k), rows) for k in keys], dtype)

    a = "model.layers.{}.self_attn."
    m = "model.layers.{}.mlp."
    ln = "model.layers.{}."
    p = {"embed": get("model.embed_tokens.weight"), "norm": get("model.norm.weight"),
         "attn_norm": stack(ln + "input_layernorm.weight"), "wo": stack(a + "o_proj.weight"),
         "w_down": stack(m + "down_proj.weight")}
    if cfg.model_type in _FUSED:     # Phi-3: one qkv_proj [q; k; v] and one gate_up_proj [gate; up]
        hq, hk, f = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim, \
            cfg.intermediate_size
        p.update(wq=stack(a + "qkv_proj.weight", slice(0, hq)), wk=stack(a + "qkv_proj.weight", slice(hq, hq + hk)),
                 wv=stack(a + "qkv_proj.weight", slice(hq + hk, hq + 2 * hk)),
                 w_gate=stack(m + "gate_up_proj.weight", slice(0, f)),
                 w_up=stack(m + "gate_up_proj.weight", slice(f, 2 * f)))
    else:
        p.update(wq=stack(a + "q_proj.weight"), wk=stack(a + "k_proj.weight"), wv=stack(a + "v_proj.weight"),
                 w_gate=stack(m + "gate_proj.weight"), w_up=stack(m + "up_proj.weight"))
    if cfg.sandwich_norms:           # Gemma: post_attention_layernorm is the attention output's own norm
        p.update(post_attn_norm=stack(ln + "post_attention_layernorm.weight"),
                 mlp_norm=stack(ln + "pre_feedforward_layernorm.weight"),
                 post_mlp_norm=stack(ln + "post_feedforward_layernorm.weight"))
    else:
        p["mlp_norm"] = stack(ln + "post_attention_layernorm.weight")
    if cfg.qk_norm:
        p.update(q_norm=stack(a + "q_norm.weight"), k_norm=stack(a + "k_norm.weight"))
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
    check_leftovers([k for k in t if k not in used and not k.endswith("rotary_emb.inv_freq")
                     and not (k == "lm_head.weight" and cfg.tie_word_embeddings)], owner=cfg.model_type)
    return p


def _rows(value, rows):
    """Rows ``rows`` of a checkpoint tensor ``[out, in]`` (quantised or not)."""
    if isinstance(value, QuantisedWeight):
        return value.map(lambda a: np.asarray(a)[rows])
    return np.asarray(value)[rows]


def load_state_dict(model_or_config: LlamaModel | LlamaConfig,
                    tensors: Mapping[str, np.ndarray], *, dtype=jnp.float32, mesh=None) -> LlamaModel:
    """Map Hugging Face tensor names (``model.layers.N.self_attn.q_proj.weight``...)
    onto a :class:`LlamaModel`.

    Lean: each parameter is built on its own, the ``L`` layer tensors of a
    stacked parameter read one at a time (``tensors`` may be lazy, e.g. the
    dequantising mapping of :func:`jaxrank.models.gguf.gguf_tensors`) and cast
    into one host buffer of the target dtype that moves to the device and is
    dropped before the next parameter. Peak host memory is about the loaded
    weights in ``dtype`` plus one stacked parameter plus one float32 tensor.

    Args:
        model_or_config: a model to fill in place, or a config to build one.
        tensors: HF name -> array (``[out, in]`` linear weights as in PyTorch) or
            ``QuantisedWeight`` (kept quantised; layers of mixed formats are brought to one form);
            memory-mapped arrays have their pages released once copied.
        dtype: parameter dtype when building from a config.
        mesh: a ``jax.sharding.Mesh`` (axes ``"data"``, ``"model"``) to build the model on, from a config:
            each parameter is built in host memory (the CPU device) and then placed straight onto the
            mesh by :func:`jaxrank.models.partition.param_shardings` (q/k/v, gate/up by output rows, o/down
            by input columns, embeddings by vocabulary rows), its host copy dropped before the next; no
            accelerator ever holds the whole model, so a model larger than one device loads. Host memory
            holds the weights in ``dtype`` once while loading.

    Tensors no parameter takes are reported with a ``UserWarning`` (a tied checkpoint's
    ``lm_head.weight`` and RoPE ``inv_freq`` buffers excepted).

    Raises:
        ValueError: a tensor is missing, has the wrong shape or an integer dtype; the checkpoint holds
            quantisation tensors (``*_scale``, ``*_zero_point``...); or ``mesh`` is not a mesh with axes
            ``"data"`` / ``"model"`` only (:func:`~jaxrank.models.partition.gspmd_mesh`) or does not fit
            the model (:func:`~jaxrank.models.partition.param_specs`), checked before any tensor is read.
    """
    if isinstance(model_or_config, LlamaConfig) and mesh is not None:
        from jaxrank.models.partition import check_mesh, param_shardings   # partition imports this module

        mesh = check_mesh(model_or_config, mesh)
        with jax.default_device(jax.devices("cpu")[0]):
            params = _hf_to_params(model_or_config, tensors, dtype)
        for n in list(params):
            value = params.pop(n)
            params[n] = jax.device_put(value, param_shardings(model_or_config, {n: value}, mesh)[n])
            del value
        return LlamaModel(model_or_config, dtype=dtype, params=params)
    if mesh is not None:
        raise ValueError("mesh: give a config to build the model on the mesh (a model is filled in place)")
    if isinstance(model_or_config, LlamaConfig):
        return LlamaModel(model_or_config, dtype=dtype, params=_hf_to_params(model_or_config, tensors, dtype))
    model = model_or_config
    params = _hf_to_params(model.config, tensors, model.attn_norm.get_value().dtype)
    for n in model._names:
        var = getattr(model, n)
        var.set_value(_checked(n, params[n], var.get_value().shape, var.get_value().dtype))
    return model


# --------------------------------------------------------------------- generation
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
        rng: PRNG key for sampling (``PRNGKey(0)`` when omitted), or one key per
            row (``[B, 2]``, or ``[B]`` typed keys): row ``r`` then samples step ``s``
            with ``fold_in(rng[r], s)`` alone, so its tokens do not depend on the
            other rows of the batch.
        eos_id: one id or several ids that end a sequence.
        pad_id: filler after the end of a sequence.

    Returns:
        :class:`GenerateOutput` with ``tokens [B, max_new_tokens]`` and ``lengths [B]``.
    """
    ids = jnp.asarray(ids, jnp.int32)
    mask = jnp.ones(ids.shape, bool) if mask is None else jnp.asarray(mask, bool)
    eos = np.atleast_1d(np.asarray([] if eos_id is None else eos_id, np.int32))
    eos = jnp.asarray(np.pad(eos, (0, -len(eos) % 8), constant_values=-1))  # few compiled shapes
    rng = jax.random.PRNGKey(0) if rng is None else rng if isinstance(rng, jax.Array) else jnp.asarray(rng)
    if _key_rows(rng) and rng.shape[0] != ids.shape[0]:
        raise ValueError(f"rng holds {rng.shape[0]} keys for {ids.shape[0]} rows")
    return _generate(model.config, model.weights(), ids, mask, rng, jnp.float32(max(temperature, 1e-6)),
                     jnp.float32(top_p), eos, jnp.int32(pad_id), int(max_new_tokens), temperature <= 0)
