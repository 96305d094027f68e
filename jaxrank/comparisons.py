"""The canonical pytree for a set of pairwise comparisons.

One *context* (an article, a dialogue, a story prompt) has ``N`` candidates.
Comparison ``k`` puts candidate ``i[k]`` in position A and ``j[k]`` in position B
and the judge says ``p[k] = P(A is better)`` (METHODS.md §1). ``weight[k]``
multiplies the comparison's contribution everywhere (a weight of 2 is the same
comparison made twice; a weight of 0 is padding). Any number of leading batch
axes (many contexts, many random subsets) are allowed: ``i, j, p, weight`` have
shape ``[..., R]`` and ``item_mask`` has shape ``[..., N]``.

Padding contract (relied on by every scorer and tested):

* a padded comparison has ``weight == 0`` and never changes any result;
* a padded item has ``item_mask == False``, must not appear in a comparison
  with non-zero weight, and gets the scorer's neutral score (0 for log-strength
  scores, 0.5 for ratios).

Validation happens in the ``from_*`` constructors when they are given concrete
arrays (``ValueError`` naming the argument). Inside a caller's own ``jax.jit``
the arrays are tracers and cannot be inspected: the constructors then skip the
checks, and out-of-range indices follow JAX's gather/scatter semantics (clamped
or dropped), so validate before jitting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _batching, _graph

__all__ = ["Comparisons", "stack_contexts"]


def _is_concrete(x: Any) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _as_array(x: Any, dtype):
    """``x`` as a JAX array (cast if needed) or, for host input, a NumPy array cast by NumPy (no compiled
    cast); :meth:`Comparisons.from_pairs` moves all its host arrays to the device in one ``device_put``."""
    if isinstance(x, jax.Array):
        return x if dtype is None or x.dtype == dtype else x.astype(dtype)
    return np.asarray(x) if dtype is None else np.asarray(x, dtype)


def _to_device(*xs):
    """The NumPy arrays among ``xs`` moved to the device in one batched ``jax.device_put`` (each separately
    cost ~25 us; ``jnp.asarray`` would compile a staging program per shape); JAX arrays pass through."""
    host = [k for k, x in enumerate(xs) if isinstance(x, np.ndarray)]
    out = list(xs)
    for k, x in zip(host, jax.device_put([xs[k] for k in host])):
        out[k] = x
    return out


def _check_probabilities(name: str, p: Any) -> None:
    if not _is_concrete(p):
        return
    p = np.asarray(p)
    if not np.issubdtype(p.dtype, np.floating) and not np.issubdtype(p.dtype, np.integer) \
            and p.dtype != bool:
        raise ValueError(f"{name} must be numeric, got dtype {p.dtype}")
    bad = ~np.isfinite(p)
    if bad.any():
        k = np.argwhere(bad)[0]
        raise ValueError(f"{name} has a non-finite value {p[tuple(k)]} at index {tuple(int(x) for x in k)}")
    out = (p < 0) | (p > 1)
    if out.any():
        k = np.argwhere(out)[0]
        raise ValueError(
            f"{name} must lie in [0, 1]; got {p[tuple(k)]} at index {tuple(int(x) for x in k)}")


def _check_indices(name: str, idx: Any, num_items: int) -> None:
    if not _is_concrete(idx):
        return
    idx = np.asarray(idx)
    if idx.size == 0 and (np.issubdtype(idx.dtype, np.floating) or idx.dtype == object):
        return                       # an empty list (NumPy reads [] as float64): no comparisons, nothing to check
    if not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"{name} must hold integer item indices, got dtype {idx.dtype}")
    out = (idx < 0) | (idx >= num_items)
    if out.any():
        k = np.argwhere(out)[0]
        raise ValueError(
            f"{name} has item index {idx[tuple(k)]} at {tuple(int(x) for x in k)}, "
            f"outside [0, num_items={num_items})")


@dataclasses.dataclass(frozen=True)
class Comparisons:
    """A (batch of) set(s) of pairwise comparisons; a JAX pytree.

    Attributes:
        i: int32 ``[..., R]``, the item in position A.
        j: int32 ``[..., R]``, the item in position B.
        p: float ``[..., R]``, ``P(A better)`` in ``[0, 1]``.
        weight: float ``[..., R]``, non-negative; 0 marks padding.
        item_mask: bool ``[..., N]``, False marks padded items.
        num_items: ``N`` (static pytree metadata, so shapes are static under jit).
    """

    i: jax.Array
    j: jax.Array
    p: jax.Array
    weight: jax.Array
    item_mask: jax.Array
    num_items: int = dataclasses.field(metadata=dict(static=True))

    # ----------------------------------------------------------------- shape
    @property
    def batch_shape(self) -> tuple[int, ...]:
        """Leading batch axes (``()`` for a single context)."""
        return tuple(self.i.shape[:-1])

    @property
    def num_comparisons(self) -> int:
        """``R``, the (padded) number of comparisons per context."""
        return int(self.i.shape[-1])

    # ---------------------------------------------------------- constructors
    @classmethod
    def from_pairs(cls, i, j, p, *, num_items: int, weight=None, item_mask=None) -> "Comparisons":
        """Comparisons from index arrays.

        ``R`` may be 0: empty ``i``, ``j`` and ``p`` (lists or arrays) give a set of no comparisons, in
        which every item is unjudged (each its own component; scorers give it the neutral score).

        Args:
            i: ``[..., R]`` items in position A.
            j: ``[..., R]`` items in position B (``i != j`` where the weight is non-zero).
            p: ``[..., R]`` probabilities that A is better, in ``[0, 1]``.
            num_items: number of items ``N`` (padded size for a batch).
            weight: optional ``[..., R]`` non-negative weights (default 1).
            item_mask: optional ``[..., N]`` bool mask of real items (default all True).

        Raises:
            ValueError: on shape mismatches, non-finite or out-of-range ``p``,
                indices outside ``[0, num_items)``, negative or non-finite
                weights, self-comparisons, or comparisons touching masked items
                (checked only for concrete, non-traced inputs).
        """
        if isinstance(num_items, (bool, np.bool_)) or not isinstance(num_items, (int, np.integer)) or num_items < 1:
            raise ValueError(f"num_items must be a positive int, got {num_items!r}")
        num_items = int(num_items)
        _check_indices("i", i, num_items)
        _check_indices("j", j, num_items)
        _check_probabilities("p", p)
        # Concrete host arrays are converted on the host (a device transfer, no compiled cast).
        i = _as_array(i, np.int32)
        j = _as_array(j, np.int32)
        p = _as_array(p, None)
        if not jnp.issubdtype(p.dtype, jnp.floating):
            p = p.astype(jnp.float32)
        if i.shape != j.shape or i.shape != p.shape:
            raise ValueError(f"i, j and p must have the same shape; got {i.shape}, {j.shape}, {p.shape}")
        if i.ndim == 0:
            raise ValueError("i, j and p must have at least one axis (the comparison axis R)")
        if weight is None:
            weight = np.ones(p.shape, p.dtype) if _is_concrete(p) else jnp.ones(p.shape, p.dtype)
        else:
            if _is_concrete(weight):
                w = np.asarray(weight, dtype=float)
                if w.shape != tuple(p.shape):
                    raise ValueError(f"weight must have shape {p.shape}, got {w.shape}")
                if not np.isfinite(w).all() or (w < 0).any():
                    k = np.argwhere(~np.isfinite(w) | (w < 0))[0]
                    raise ValueError(f"weight must be finite and >= 0; got {w[tuple(k)]} at {tuple(int(x) for x in k)}")
            weight = _as_array(weight, p.dtype)
            if weight.shape != p.shape:
                raise ValueError(f"weight must have shape {p.shape}, got {weight.shape}")
        batch = p.shape[:-1]
        all_items = item_mask is None   # every item real: no comparison can touch a masked one
        if item_mask is None:
            item_mask = np.ones(batch + (num_items,), bool)
        else:
            item_mask = _as_array(item_mask, bool)
            if item_mask.shape != batch + (num_items,):
                raise ValueError(f"item_mask must have shape {batch + (num_items,)}, got {item_mask.shape}")
        if all(_is_concrete(x) for x in (i, j, weight, item_mask)):
            ii, jj, ww, mm = (np.asarray(x) for x in (i, j, weight, item_mask))
            live = ww > 0
            selfc = live & (ii == jj)
            if selfc.any():
                k = np.argwhere(selfc)[0]
                raise ValueError(f"i and j: comparison {tuple(int(x) for x in k)} compares item {ii[tuple(k)]} "
                                 f"with itself")
            if all_items:
                touches = np.zeros((), bool)
            elif mm.ndim == 1:
                touches = live & ~(mm[ii] & mm[jj])
            else:
                flat_m = mm.reshape(-1, num_items)
                fi, fj = ii.reshape(len(flat_m), -1), jj.reshape(len(flat_m), -1)
                rows = np.arange(len(flat_m))[:, None]
                touches = (live.reshape(fi.shape) & ~(flat_m[rows, fi] & flat_m[rows, fj])).reshape(ii.shape)
            if touches.any():
                k = np.argwhere(touches)[0]
                raise ValueError(f"comparison {tuple(int(x) for x in k)} has non-zero weight but touches a masked "
                                 f"item (item_mask marks it as padding)")
        i, j, p, weight, item_mask = _to_device(i, j, p, weight, item_mask)
        return cls(i=i, j=j, p=p, weight=weight, item_mask=item_mask, num_items=num_items)

    @classmethod
    def from_matrix(cls, probs, mask=None, *, weight=None) -> "Comparisons":
        """All ordered pairs of a dense ``[..., N, N]`` probability matrix.

        ``probs[..., a, b]`` is ``P(a better than b)`` with ``a`` in position A.
        The result always holds the ``N(N-1)`` off-diagonal pairs (static
        shape); pairs where ``mask`` is False get weight 0. The diagonal is
        ignored (it may hold anything, even NaN).

        Args:
            probs: ``[..., N, N]`` probabilities.
            mask: optional ``[..., N, N]`` bool, which pairs were compared.
            weight: optional ``[..., N, N]`` weights (multiplied by ``mask``).
        """
        probs = jnp.asarray(probs) if not _is_concrete(probs) else np.asarray(probs)
        if probs.ndim < 2 or probs.shape[-1] != probs.shape[-2]:
            raise ValueError(f"probs must have shape [..., N, N], got {probs.shape}")
        n = probs.shape[-1]
        a, b = np.nonzero(~np.eye(n, dtype=bool))
        p = probs[..., a, b]
        if mask is not None:
            mask = (np.asarray(mask) if _is_concrete(mask) else jnp.asarray(mask))
            if mask.shape != probs.shape:
                raise ValueError(f"mask must have shape {probs.shape}, got {mask.shape}")
            m = mask[..., a, b]
        else:
            m = None
        w = None
        if weight is not None:
            w = jnp.asarray(weight)[..., a, b]
        if m is not None:
            w = (jnp.ones(p.shape) if w is None else w) * jnp.asarray(m, float)
            if _is_concrete(p):  # unobserved entries may hold NaN: neutralise them
                p = np.where(np.asarray(m), p, 0.5)
            else:
                p = jnp.where(m, p, 0.5)
        ia = np.broadcast_to(a, p.shape)
        ib = np.broadcast_to(b, p.shape)
        return cls.from_pairs(ia, ib, p, num_items=n, weight=w)

    @classmethod
    def from_decisions(cls, i, j, outcome, *, num_items: int, weight=None, item_mask=None) -> "Comparisons":
        """Comparisons from hard outcomes.

        Args:
            outcome: per comparison, 1 (or ``"win"``) if A won, 0 (``"loss"``)
                if B won, 0.5 (``"tie"``/``"draw"``) for a tie; mapped to ``p``.
        """
        if _is_concrete(outcome):
            o = np.asarray(outcome)
            if o.dtype.kind in "USO":
                table = {"win": 1.0, "w": 1.0, "a": 1.0, "loss": 0.0, "l": 0.0, "b": 0.0,
                         "tie": 0.5, "draw": 0.5, "d": 0.5, "t": 0.5}
                flat = [str(x).strip().lower() for x in o.ravel()]
                bad = [k for k, x in enumerate(flat) if x not in table]
                if bad:
                    raise ValueError(f"outcome[{bad[0]}] = {flat[bad[0]]!r}; expected win/loss/tie")
                o = np.array([table[x] for x in flat], np.float32).reshape(o.shape)
            else:
                o = o.astype(np.float32)
                bad = ~np.isin(o, (0.0, 0.5, 1.0))
                if bad.any():
                    k = np.argwhere(bad)[0]
                    raise ValueError(f"outcome must be 0, 0.5 or 1; got {o[tuple(k)]} at {tuple(int(x) for x in k)}")
            outcome = o
        return cls.from_pairs(i, j, outcome, num_items=num_items, weight=weight, item_mask=item_mask)

    # ------------------------------------------------------------- helpers
    def swapped(self) -> "Comparisons":
        """The same comparisons with positions A and B exchanged (``p -> 1 - p``)."""
        return dataclasses.replace(self, i=self.j, j=self.i, p=1 - self.p)

    def with_p(self, p) -> "Comparisons":
        """A copy with new probabilities (no validation; traced values allowed)."""
        p = jnp.asarray(p)
        if p.shape != self.p.shape:
            raise ValueError(f"p must have shape {self.p.shape}, got {p.shape}")
        return dataclasses.replace(self, p=p)

    def games(self) -> jax.Array:
        """``[..., N]`` total weight of the comparisons each item takes part in (0 flags an unjudged item)."""
        return _batching.batched(_graph.item_sums, self, self.weight, self.weight)

    def components(self) -> jax.Array:
        """``[..., N]`` connected-component label of every item (the smallest item index in it).

        Scores are only comparable within a component: every scorer centres
        each component on its own. Items in no comparison are their own component.
        """
        return _batching.batched(_graph.components, self)

    def is_connected(self) -> jax.Array:
        """``[...]`` True where all real items form one connected comparison graph."""
        labels = self.components()
        return jnp.all(jnp.where(self.item_mask, labels == jnp.argmax(self.item_mask, axis=-1)[..., None], True),
                       axis=-1)


jax.tree_util.register_dataclass(
    Comparisons, data_fields=["i", "j", "p", "weight", "item_mask"], meta_fields=["num_items"])


def stack_contexts(contexts: Sequence[Comparisons], *, num_items: int | None = None,
                   num_comparisons: int | None = None) -> Comparisons:
    """Stack single-context comparison sets of different ``N`` and ``R`` into one padded batch.

    Padded comparisons are self-pairs ``i = j = k mod N_c`` (``k`` the slot, ``N_c`` the context's own items) with
    ``p = 0.5, weight = 0``; padded items get ``item_mask = False``. Scores of the real items are unchanged by
    padding; spreading the padding over the items keeps the scorers' scatter-adds off one address (faster on CPU).

    Args:
        contexts: non-empty sequence of single-context ``Comparisons``.
        num_items: pad items to this size (default: the largest ``N``).
        num_comparisons: pad comparisons to this size (default: the largest ``R``),
            e.g. a fixed bucket so later calls do not recompile.
    """
    contexts = list(contexts)
    if not contexts:
        raise ValueError("contexts is empty: nothing to stack")
    for k, c in enumerate(contexts):
        if not isinstance(c, Comparisons) or c.batch_shape != ():
            raise ValueError(f"contexts[{k}] must be a single-context Comparisons")
    n = max(c.num_items for c in contexts) if num_items is None else num_items
    r = max(c.num_comparisons for c in contexts) if num_comparisons is None else num_comparisons
    if n < max(c.num_items for c in contexts):
        raise ValueError(f"num_items={n} is smaller than a context's {max(c.num_items for c in contexts)} items")
    if r < max(c.num_comparisons for c in contexts):
        raise ValueError(f"num_comparisons={r} is smaller than a context's {max(c.num_comparisons for c in contexts)}")
    dtype = jnp.result_type(*[c.p.dtype for c in contexts])

    def pad(x, size, value):
        x = np.asarray(x)
        return np.concatenate([x, np.full(size - x.shape[-1], value, x.dtype)])

    i = np.stack([_batching.pad_items(np.asarray(c.i), r, c.num_items) for c in contexts])
    j = np.stack([_batching.pad_items(np.asarray(c.j), r, c.num_items) for c in contexts])
    p = np.stack([pad(np.asarray(c.p, dtype), r, 0.5) for c in contexts])
    w = np.stack([pad(np.asarray(c.weight, dtype), r, 0.0) for c in contexts])
    m = np.stack([pad(c.item_mask, n, False) for c in contexts])
    # cast by NumPy and moved in one transfer: ``jnp.asarray`` would compile a small program per array and shape
    arrays = _to_device(i.astype(np.int32), j.astype(np.int32), p.astype(dtype), w.astype(dtype), m.astype(bool))
    return Comparisons(*arrays, num_items=int(n))
