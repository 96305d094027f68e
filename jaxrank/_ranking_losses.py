"""The per-context ranking losses against human scores (eqs. L1 and L2 of :mod:`jaxrank.learning`), re-exported by
:mod:`jaxrank.learning`: the pairwise logistic loss and the soft Spearman correlation of standardised scores,
with their input checks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _validate, metrics

__all__ = ["pairwise_logistic_loss", "soft_spearman"]


def _standardise(scores, mask):
    """``z = (s - mean s) / std s`` per context over the real items; ``z = 0``, without a gradient, where the scores
    are constant up to rounding (``std <= 4 n eps max|s|``: a judge indifferent on every pair), as a
    ``rsqrt(var + 1e-12)`` scaled the rounding noise of such a context's scores' derivatives by 1e6 into the
    gradient of the whole batch."""
    scores = jnp.where(mask, scores, 0)            # a padded item's score (NaN, inf) is never read
    n = jnp.maximum(jnp.sum(mask, -1, keepdims=True), 1).astype(scores.dtype)
    mean = jnp.sum(scores, -1, keepdims=True) / n
    var = jnp.sum(jnp.where(mask, scores - mean, 0) ** 2, -1, keepdims=True) / n
    big = jnp.max(jnp.where(mask, jnp.abs(scores), 0), -1, keepdims=True, initial=0)
    flat = jax.lax.stop_gradient(jnp.sqrt(var) <= 4 * n * jnp.finfo(scores.dtype).eps * big)
    return jnp.where(mask & ~flat, (scores - mean) * jax.lax.rsqrt(jnp.where(flat, 1, var)), 0)


def _check_per_item(scores, labels, mask, temperature):
    """``labels`` and a bool ``mask`` of the scores' shape ``[..., N]``, ``temperature > 0``, and no NaN label where
    ``mask`` is True (``ValueError`` naming the argument). Shapes and dtypes are static, so those checks hold under
    ``jit`` too; the NaN check needs concrete ``labels`` and ``mask`` (a traced NaN label makes its context's loss
    NaN instead, :func:`_nan_labels`)."""
    shape = np.shape(scores)
    for name, v in (("labels", labels), ("mask", mask)):
        if np.shape(v) != shape:
            raise ValueError(f"{name} must have the scores' shape {shape} ([contexts, items]), got {np.shape(v)}")
    if jnp.asarray(mask).dtype != bool:
        raise ValueError(f"mask must be a bool array of the real items, got dtype {jnp.asarray(mask).dtype} "
                         "(pass mask.astype(bool))")
    _validate.number("temperature", temperature, low=0.0, low_open=True)
    _check_labels(labels, mask)


def _check_labels(labels, mask) -> None:
    """``ValueError`` naming ``labels`` for a NaN where the concrete ``mask`` is True (traced: unchecked)."""
    if isinstance(labels, jax.core.Tracer) or isinstance(mask, jax.core.Tracer) or labels is None or mask is None:
        return
    lab = np.asarray(labels)
    if np.issubdtype(lab.dtype, np.floating):
        bad = np.isnan(lab) & np.broadcast_to(np.asarray(mask, bool), lab.shape)
        if bad.any():
            k = tuple(int(v) for v in np.argwhere(bad)[0])
            raise ValueError(f"labels has a NaN at index {k} where mask is True: a missing human score must be "
                             "masked out (mask = mask & ~isnan(labels)), not ranked")


def _nan_labels(labels, mask) -> jax.Array:
    """``[...]`` whether a context has a NaN label among its real items (only a traced input gets this far)."""
    return jnp.any(jnp.isnan(labels) & mask, -1)


def _label_pairs(labels, mask) -> jax.Array:
    """``[...]`` the number of real pairs ``(a, b)`` with ``h_a > h_b``: 0 where the human scores are constant."""
    better = (labels[..., :, None] > labels[..., None, :]) & mask[..., :, None] & mask[..., None, :]
    return jnp.sum(better, (-2, -1))


def pairwise_logistic_loss(scores, labels, mask, *, temperature=1.0) -> jax.Array:
    """Eq. (L1) per context: mean over real pairs with ``h_a > h_b`` of ``softplus(-(z_a - z_b) / T)``.

    Args:
        scores, labels: ``[..., N]`` predicted and human scores.
        mask: bool ``[..., N]`` real items.
        temperature: ``T``, on the standardised scores.

    Returns:
        ``[...]``; NaN for a context without two different human scores, and for a context with a NaN score
        (or, traced, a NaN label) among its real items.

    Raises:
        ValueError: ``labels`` or ``mask`` not of the scores' shape, ``mask`` not bool, ``temperature`` not > 0,
            a NaN in concrete ``labels`` where ``mask`` is True (mask missing human scores out).
    """
    _check_per_item(scores, labels, mask, temperature)
    z = _standardise(scores, mask)
    better = (labels[..., :, None] > labels[..., None, :]) & mask[..., :, None] & mask[..., None, :]
    loss = jax.nn.softplus(-(z[..., :, None] - z[..., None, :]) / temperature)
    cnt = jnp.sum(better, (-2, -1))
    per = jnp.where(cnt > 0, jnp.sum(jnp.where(better, loss, 0), (-2, -1)) / jnp.maximum(cnt, 1), jnp.nan)
    return jnp.where(_nan_labels(labels, mask), jnp.nan, per)


def soft_spearman(scores, labels, mask, *, temperature=0.1) -> jax.Array:
    """Eq. (L2) without the sign: Pearson of the soft ranks of ``z`` with the human average ranks, per context.

    Tends to the Spearman correlation as ``T -> 0``. NaN where either side is constant, and where a real item's
    score (or, traced, label) is NaN. Raises ``ValueError`` as :func:`pairwise_logistic_loss`.
    """
    _check_per_item(scores, labels, mask, temperature)
    z = _standardise(scores, mask)
    pair = mask[..., :, None] & mask[..., None, :]
    soft = 0.5 + jnp.sum(jnp.where(pair, jax.nn.sigmoid((z[..., :, None] - z[..., None, :]) / temperature), 0), -1)
    r = metrics.pearson(soft, metrics.average_ranks(labels, where=mask), where=mask)
    return jnp.where(_nan_labels(labels, mask), jnp.nan, r)
