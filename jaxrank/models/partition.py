"""Llama-family decoders across a device mesh: tensor-parallel weights, data-parallel batches (GSPMD).

A model whose weights exceed one device runs over a :class:`jax.sharding.Mesh`
with two named axes (by default ``("data", "model")``). Megatron's split of a
transformer layer (Shoeybi et al. 2019, §3): the attention's query/key/value
projections are cut by their output columns, head by head, and the output
projection by its input rows; the MLP's gate and up projections by their
output columns and the down projection by its input rows. With
``W_q = [W_q^1 ... W_q^m]`` (``m`` devices on ``"model"``, ``H / m`` heads each)
and ``W_o = [W_o^1; ...; W_o^m]``, a layer computes

    ``attn(x) = sum_k softmax(x W_q^k (x W_k^k)^T / sqrt(d)) (x W_v^k) W_o^k``,
    ``mlp(x) = sum_k (act(x W_gate^k) * (x W_up^k)) W_down^k``,

so each device works on its own heads and MLP columns and one all-reduce per
block sums the partial outputs. The key/value cache (``[L, B, S, Hkv, Dh]``,
:class:`~jaxrank.models.llama.KVCache`) is split the same way over its heads
on ``"model"`` and over its batch rows on ``"data"``; the comparison batches
are split over ``"data"``. Nothing here writes collectives: the weights are
placed with :func:`jax.device_put`, the cache and the batch are pinned with
:func:`jax.lax.with_sharding_constraint` inside ``jit``, and XLA's SPMD
partitioner (GSPMD) inserts the communication.

* :func:`param_specs` / :func:`param_shardings`: the ``PartitionSpec`` /
  ``NamedSharding`` of every parameter of :meth:`~jaxrank.models.llama.LlamaModel.weights`
  (layers stacked on a leading axis, ``[out, in]`` matrices as in PyTorch).
* :func:`cache_shardings`, :func:`batch_sharding`: the cache's and a batch's.
* :func:`shard_model`: a :class:`ShardedLlama`, a copy of the model with its
  weights on the mesh (the model passed in is left as it is) and ``prefill``,
  ``extend``, ``logits_at`` and ``rows`` that keep caches and batches sharded.

Grouped-query attention with fewer key/value heads than devices on ``"model"``
(``num_key_value_heads % m != 0``): the key/value projections and the cache
are replicated over ``"model"`` (each device keeps every key/value head and its
own query heads). The input and output embeddings (``embed``, ``lm_head``) are
split over their vocabulary rows when ``m`` divides the vocabulary (Megatron's
vocabulary-parallel embedding: one more all-reduce after the lookup); the
norms are replicated. Weights kept quantised (``QuantisedWeight``: codes and
block scales, output rows on axis ``-2``) are split array by array the same
way, a dimension that the axis does not divide (a per-row scale) replicated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

from jaxrank.models.llama import ExtendOutput, KVCache, LlamaConfig, LlamaModel

__all__ = ["DATA_AXIS", "MODEL_AXIS", "gspmd_mesh", "check_mesh", "axis_size", "kv_heads_split", "param_specs",
           "param_shardings", "shard_params", "cache_shardings", "batch_sharding", "ShardedLlama", "shard_model"]

DATA_AXIS = "data"
"""Default mesh axis the comparisons (batch rows) are split over."""
MODEL_AXIS = "model"
"""Default mesh axis the weights (heads, MLP columns) are split over."""

# parameter name -> (the axis of the stacked [L, ...] array split over "model", kind of split)
_SPLIT = {"wq": (1, "q"), "bq": (1, "q"), "wk": (1, "kv"), "wv": (1, "kv"), "bk": (1, "kv"), "bv": (1, "kv"),
          "wo": (2, "q"), "w_gate": (1, "mlp"), "w_up": (1, "mlp"), "b_gate": (1, "mlp"), "b_up": (1, "mlp"),
          "w_down": (2, "mlp"), "lm_head": (0, "vocab"), "embed": (0, "vocab")}
_NDIM = {"wq": 3, "wk": 3, "wv": 3, "wo": 3, "w_gate": 3, "w_up": 3, "w_down": 3, "bq": 2, "bk": 2, "bv": 2,
         "b_gate": 2, "b_up": 2, "lm_head": 2, "embed": 2}


def gspmd_mesh(mesh: Mesh, *, data_axis: str = DATA_AXIS, model_axis: str = MODEL_AXIS) -> Mesh:
    """``mesh`` with automatic axes (GSPMD propagation), after checking its axis names.

    :func:`jax.make_mesh` makes *explicit* axes (sharding in types), under which
    the decoder's head reshapes would need an ``out_sharding`` each; the same
    devices with ``AxisType.Auto`` let the partitioner propagate the weights'
    shardings through them.

    Raises:
        ValueError: ``mesh`` is not a :class:`jax.sharding.Mesh`, or has an axis
            other than ``data_axis`` / ``model_axis`` (an absent one counts as size 1).
    """
    if not isinstance(mesh, Mesh):
        raise ValueError(f"mesh must be a jax.sharding.Mesh (jax.make_mesh((d, m), ('{data_axis}', "
                         f"'{model_axis}'))), got {type(mesh).__name__}")
    other = [a for a in mesh.axis_names if a not in (data_axis, model_axis)]
    if other:
        raise ValueError(f"mesh has axes {tuple(mesh.axis_names)}; a sharded judge uses only {data_axis!r} "
                         f"(comparisons) and {model_axis!r} (weights): rename or drop {other}")
    return _auto(mesh)


def _auto(mesh: Mesh) -> Mesh:
    if all(t == AxisType.Auto for t in mesh.axis_types):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))


def check_mesh(config: LlamaConfig, mesh: Mesh, *, data_axis: str = DATA_AXIS,
               model_axis: str = MODEL_AXIS) -> Mesh:
    """``mesh`` made automatic (:func:`gspmd_mesh`) after checking that it fits ``config``: what a loader
    runs before it reads any weight.

    Raises:
        ValueError: a bad mesh (:func:`gspmd_mesh`: not a mesh, or an axis other than ``data_axis`` /
            ``model_axis``), or a ``model_axis`` size that does not divide the heads or the MLP
            (:func:`param_specs`).
    """
    mesh = gspmd_mesh(mesh, data_axis=data_axis, model_axis=model_axis)
    param_specs(config, {}, mesh, model_axis=model_axis)
    return mesh


def axis_size(mesh: Mesh, axis: str) -> int:
    """Devices along ``axis`` of ``mesh`` (1 when the mesh has no such axis)."""
    return int(mesh.shape[axis]) if axis in mesh.axis_names else 1


def kv_heads_split(config: LlamaConfig, mesh: Mesh, *, model_axis: str = MODEL_AXIS) -> bool:
    """Whether the key/value heads (and the cache) are split over ``model_axis``: ``m | num_key_value_heads``."""
    m = axis_size(mesh, model_axis)
    return m > 1 and config.num_key_value_heads % m == 0


def param_specs(config: LlamaConfig, params: Mapping[str, Any], mesh: Mesh, *,
                model_axis: str = MODEL_AXIS) -> dict[str, P]:
    """The ``PartitionSpec`` of every parameter (names and layout of :meth:`LlamaModel.weights`).

    Query/key/value projections ``[L, H*Dh, D]`` split their output columns over
    ``model_axis`` (whole heads: ``H / m`` per device), the output projection
    ``[L, D, H*Dh]`` its input columns; gate/up ``[L, F, D]`` their rows, down
    ``[L, D, F]`` its columns; the q/k/v and gate/up biases follow their
    matrices. Keys and values are replicated when ``m`` does not divide
    ``num_key_value_heads`` (:func:`kv_heads_split`); ``embed`` and ``lm_head``
    ``[V, D]`` are split over their vocabulary rows when ``m`` divides ``V``;
    everything else (norms, the down/output biases, names not known here) is
    replicated.

    Args:
        config: the model's config.
        params: name -> array (or anything with ``.ndim`` / a shape tuple).
        mesh: the device mesh.
        model_axis: the axis the weights are split over.

    Raises:
        ValueError: ``m`` does not divide ``num_attention_heads`` or
            ``intermediate_size`` (the message names the mesh axis and the count).
    """
    m = axis_size(mesh, model_axis)
    if m > 1 and config.num_attention_heads % m:
        raise ValueError(f"mesh axis {model_axis!r} has {m} devices, which does not divide num_attention_heads="
                         f"{config.num_attention_heads}: each device must hold whole query heads (pick a "
                         f"{model_axis!r} size dividing {config.num_attention_heads})")
    if m > 1 and config.intermediate_size % m:
        raise ValueError(f"mesh axis {model_axis!r} has {m} devices, which does not divide intermediate_size="
                         f"{config.intermediate_size}")
    kv = kv_heads_split(config, mesh, model_axis=model_axis)
    out = {}
    for name, arr in params.items():
        ndim = len(arr) if isinstance(arr, tuple) else np.ndim(arr)
        axis, kind = _SPLIT.get(name, (None, None))
        split = (m > 1 and axis is not None and ndim == _NDIM[name] and (kind != "kv" or kv)
                 and (kind != "vocab" or config.vocab_size % m == 0))
        out[name] = P(*[model_axis if split and d == axis else None for d in range(ndim)])
    return out


def _fit(spec: P, shape: tuple[int, ...], mesh: Mesh) -> P:
    """``spec`` with each mesh axis dropped where it does not divide its dimension of ``shape``."""
    return P(*[a if a is None or (d < len(shape) and shape[d] % axis_size(mesh, a) == 0) else None
               for d, a in enumerate(spec)])


def param_shardings(config: LlamaConfig, params: Mapping[str, Any], mesh: Mesh, *,
                    model_axis: str = MODEL_AXIS) -> dict[str, Any]:
    """:func:`param_specs` as ``NamedSharding`` on ``mesh`` (made automatic, :func:`gspmd_mesh`).

    A parameter that is a pytree of arrays (a quantised weight: codes and block
    scales, each with the output rows on axis ``-2``) gets a matching pytree of
    shardings: each array takes the parameter's spec where its own dimension
    divides by the axis (codes of a row-split input dimension), else that
    dimension is replicated (a per-row scale of width 1).
    """
    if not isinstance(mesh, Mesh):
        raise ValueError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    mesh = _auto(mesh)
    specs = param_specs(config, params, mesh, model_axis=model_axis)
    out = {}
    for n, value in params.items():
        if isinstance(value, (jax.Array, np.ndarray, tuple)):
            out[n] = NamedSharding(mesh, specs[n])
        else:
            out[n] = jax.tree.map(lambda leaf, s=specs[n]: NamedSharding(mesh, _fit(s, np.shape(leaf), mesh)), value)
    return out


def shard_params(config: LlamaConfig, params: Mapping[str, Any], mesh: Mesh, *,
                 model_axis: str = MODEL_AXIS) -> dict[str, jax.Array]:
    """``params`` placed on ``mesh`` by :func:`param_shardings` (host arrays go straight to their shards)."""
    shardings = param_shardings(config, params, mesh, model_axis=model_axis)
    return {n: jax.device_put(a, shardings[n]) for n, a in params.items()}


def _rows_axis(n: int, mesh: Mesh, data_axis: str):
    """``data_axis`` when it splits ``n`` rows evenly, else ``None`` (those rows are replicated)."""
    d = axis_size(mesh, data_axis)
    return data_axis if d > 1 and n % d == 0 else None


def batch_sharding(shape: tuple[int, ...], mesh: Mesh, *, data_axis: str = DATA_AXIS) -> NamedSharding:
    """A ``[B, ...]`` batch split over ``data_axis`` by rows (replicated when ``d`` does not divide ``B``)."""
    return NamedSharding(mesh, P(_rows_axis(shape[0], mesh, data_axis), *([None] * (len(shape) - 1))))


def cache_shardings(cache: KVCache, mesh: Mesh, *, kv_split: bool, data_axis: str = DATA_AXIS,
                    model_axis: str = MODEL_AXIS) -> KVCache:
    """The ``NamedSharding`` of every field of ``cache`` (a :class:`KVCache` of shardings).

    Keys and values ``[L, Bc, S, Hkv, Dh]``: rows over ``data_axis`` (when ``d``
    divides ``Bc``; a batch-1 prefix cache is replicated there), heads over
    ``model_axis`` when ``kv_split``; ``valid``, ``pos``, ``next_pos`` and
    ``last_hidden`` by rows; ``length`` replicated.
    """
    rows = _rows_axis(cache.k.shape[1], mesh, data_axis)
    heads = model_axis if kv_split else None
    ns = lambda *s: NamedSharding(mesh, P(*s))
    return KVCache(k=ns(None, rows, None, heads, None), v=ns(None, rows, None, heads, None), valid=ns(rows, None),
                   pos=ns(rows, None), length=ns(), next_pos=ns(rows), last_hidden=ns(rows, None))


class ShardedLlama:
    """A :class:`~jaxrank.models.llama.LlamaModel` whose weights live on a mesh (:func:`shard_model`).

    Its :meth:`prefill`, :meth:`extend`, :meth:`logits_at` and :meth:`rows`
    compute what the model's own methods do (same arguments), inside ``jit``
    with the cache pinned to :func:`cache_shardings` and every batch to
    :func:`batch_sharding`.

    Attributes:
        model: the sharded copy (an ordinary ``LlamaModel``: anything else that
            runs it, e.g. :func:`~jaxrank.models.llama.generate`, runs on the mesh
            through GSPMD propagation, without the pinned cache).
        config: its config.
        mesh: the mesh (automatic axes).
        data_axis, model_axis: the axis names.
        data_size, model_size: devices along each.
        kv_split: whether the key/value heads are split (:func:`kv_heads_split`).
    """

    def __init__(self, model: LlamaModel, mesh: Mesh, *, data_axis: str = DATA_AXIS,
                 model_axis: str = MODEL_AXIS):
        if not isinstance(model, LlamaModel):
            raise ValueError(f"model must be a LlamaModel (a Llama-family decoder), got {type(model).__name__}")
        if data_axis == model_axis:
            raise ValueError(f"data_axis and model_axis must differ, both are {data_axis!r}")
        self.mesh = gspmd_mesh(mesh, data_axis=data_axis, model_axis=model_axis)
        self.data_axis, self.model_axis = data_axis, model_axis
        self.data_size, self.model_size = axis_size(self.mesh, data_axis), axis_size(self.mesh, model_axis)
        self.config = model.config
        self.kv_split = kv_heads_split(self.config, self.mesh, model_axis=model_axis)
        weights = model.weights()
        shardings = param_shardings(self.config, weights, self.mesh, model_axis=model_axis)
        graphdef, state = nnx.split(model)
        self.model = nnx.merge(graphdef, jax.tree.map(lambda a: a, state))   # new variables, same arrays
        for n, a in weights.items():
            getattr(self.model, n).set_value(jax.device_put(a, shardings[n]))
        self._graphdef = graphdef
        self._vocab_split = self.model_size > 1 and self.config.vocab_size % self.model_size == 0
        self._prefill = jax.jit(self._prefill_fn, static_argnames=("capacity", "cache_dtype"))
        self._extend = jax.jit(self._extend_fn, static_argnames=("update",))
        self._logits = jax.jit(self._logits_fn)
        self._rows = jax.jit(self._rows_fn)

    # ---------------------------------------------------------------- shardings
    def _pin_cache(self, cache: KVCache) -> KVCache:
        return jax.lax.with_sharding_constraint(cache, cache_shardings(
            cache, self.mesh, kv_split=self.kv_split, data_axis=self.data_axis, model_axis=self.model_axis))

    def _pin_rows(self, x):
        return jax.lax.with_sharding_constraint(x, batch_sharding(x.shape, self.mesh, data_axis=self.data_axis))

    def place(self, x) -> jax.Array:
        """A host ``[B, ...]`` batch placed on the mesh, split over the data axis by rows."""
        x = np.asarray(x)
        return jax.device_put(x, batch_sharding(x.shape, self.mesh, data_axis=self.data_axis))

    def weights(self) -> dict[str, jax.Array]:
        """The sharded parameter arrays by name."""
        return self.model.weights()

    # ------------------------------------------------------------------- traced
    def _merged(self, state):
        return nnx.merge(self._graphdef, state)

    def _prefill_fn(self, state, ids, mask, capacity, cache_dtype):
        ids, mask = self._pin_rows(ids), self._pin_rows(mask)
        return self._pin_cache(self._merged(state).prefill(ids, mask, capacity=capacity, cache_dtype=cache_dtype))

    def _extend_fn(self, state, cache, ids, mask, update):
        ids, mask = self._pin_rows(ids), self._pin_rows(mask)
        out = self._merged(state).extend(self._pin_cache(cache), ids, mask, update=update)
        return ExtendOutput(self._pin_rows(out.hidden), self._pin_rows(out.last_hidden),
                            None if out.cache is None else self._pin_cache(out.cache))

    def _logits_fn(self, state, hidden, positions):
        logits = self._merged(state).logits_at(self._pin_rows(hidden), positions)
        vocab = self.model_axis if self._vocab_split else None
        spec = P(_rows_axis(logits.shape[0], self.mesh, self.data_axis), *([None] * (logits.ndim - 2)), vocab)
        return jax.lax.with_sharding_constraint(logits, NamedSharding(self.mesh, spec))

    def _rows_fn(self, cache, index):
        return self._pin_cache(cache.rows(index))

    # ------------------------------------------------------------------- public
    def prefill(self, ids, mask=None, *, capacity: int | None = None, cache_dtype=None) -> KVCache:
        """:meth:`LlamaModel.prefill` on the mesh: the cache split by :func:`cache_shardings`."""
        ids = np.asarray(ids, np.int32)
        mask = np.ones(ids.shape, bool) if mask is None else np.asarray(mask, bool)
        cap = ids.shape[1] if capacity is None else int(capacity)
        if cap < ids.shape[1]:
            raise ValueError(f"capacity {cap} < prefix length {ids.shape[1]}")
        dt = None if cache_dtype is None else np.dtype(cache_dtype).name
        return self._prefill(nnx.state(self.model), self.place(ids), self.place(mask), capacity=cap, cache_dtype=dt)

    def extend(self, cache: KVCache, ids, mask=None, *, update: bool = False) -> ExtendOutput:
        """:meth:`LlamaModel.extend` on the mesh (a batch-1 cache shared by all rows, or one row each)."""
        ids = np.asarray(ids, np.int32)
        mask = np.ones(ids.shape, bool) if mask is None else np.asarray(mask, bool)
        if cache.k.shape[1] not in (1, ids.shape[0]):
            raise ValueError(f"cache batch {cache.k.shape[1]} does not match batch {ids.shape[0]}")
        if update and int(cache.length) + ids.shape[1] > cache.k.shape[2]:
            raise ValueError(f"cache full: {int(cache.length)} + {ids.shape[1]} > capacity {cache.k.shape[2]}")
        return self._extend(nnx.state(self.model), cache, self.place(ids), self.place(mask), update=bool(update))

    def logits_at(self, hidden: jax.Array, positions=None) -> jax.Array:
        """:meth:`LlamaModel.logits_at` over the whole vocabulary, rows over the data axis (and the vocabulary
        over the model axis where the output embedding is split)."""
        pos = None if positions is None else self.place(np.asarray(positions, np.int32))
        return self._logits(nnx.state(self.model), hidden, pos)

    def rows(self, cache: KVCache, index) -> KVCache:
        """:meth:`KVCache.rows` (rows ``index`` of ``cache``, a copy), split by :func:`cache_shardings`."""
        return self._rows(cache, jnp.asarray(np.asarray(index, np.int32)))


def shard_model(model: LlamaModel, mesh: Mesh, *, data_axis: str = DATA_AXIS,
                model_axis: str = MODEL_AXIS) -> ShardedLlama:
    """A copy of ``model`` with its weights split over ``mesh`` (:class:`ShardedLlama`); ``model`` is unchanged.

    Raises:
        ValueError: not a Llama-family model, a bad mesh (:func:`gspmd_mesh`), or a
            ``model_axis`` size that does not divide the heads or the MLP (:func:`param_specs`).
    """
    return ShardedLlama(model, mesh, data_axis=data_axis, model_axis=model_axis)
