"""Zero-shot objectives of a judge's preferences: how fair a prompt is without labels (zepo §4, App. A).

Each objective is a pure function of a batch of judge outputs ``p = P(A better)``
over the last axis (``[..., R]`` -> ``[...]``, so ``[K, R]`` scores ``K``
candidate prompts at once), with an optional ``weight`` (``0`` for padding:
static shapes and masks, never ragged arrays). Two classes ``Y = {A, B}``,
``J = |Y| = 2``; the decision for a comparison is ``y = A`` when ``p > 0.5``
(a tie, ``p == 0.5``, counts half).

Invalid input is never read as fair: a weighted ``p`` that is NaN or outside
``[0, 1]`` (e.g. logits passed by mistake) makes the objectives of its row NaN,
and so does a row with no weight at all (no comparisons). Padding (weight 0) is
never read, whatever it holds.

* :func:`decision_rate` -- ``p_{I,A} = (1/N) sum_i 1[p(A|x_i, I) > p(B|x_i, I)]`` (zepo §3).
* :func:`fairness` -- ``fair(I) = -(1/J) sum_j |p_S - p_{I,y_j}|`` with the uniform prior
  ``p_S = 1/J`` (zepo eq. 1); ``0`` is perfectly fair, ``-0.5`` all one label.
* :func:`confidence` -- ``(1/N) sum_i sum_j p_ij log p_ij``, minus the mean entropy (zepo App. A).
* :func:`batch_calibration` -- ``|(1/N) sum_i (log p_iA - log p_iB)|`` (Batch Calibration, zepo App. A);
  ``0`` is calibrated (a uniform prior in logit space).
* :func:`context_free_confidence` -- :func:`confidence` of the judge on a content-free input
  ``C(x = [N/A], I)`` (Fair-Prompting; zepo App. A).

``OBJECTIVES`` names each as a quantity to *maximise* in a prompt search (higher =
fairer): fairness and confidence as they are, minus the batch calibration, and
minus the context-free confidence (Fair-Prompting picks the prompt least
confident on content-free input).

These are statistics of judge outputs, like the positional bias of ``debias``,
so they live on the statistics floor; they take raw probability arrays rather
than :class:`~jaxrank.Comparisons` because a prompt search scores many prompts
on the same pairs, with no items or graph involved.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["decision_rate", "fairness", "confidence", "batch_calibration", "context_free_confidence",
           "OBJECTIVES", "objective"]

_EPS = 1e-7


def _weights(p, weight):
    """``(p, w)`` as float arrays of one shape; a ``p`` that is NaN or outside ``[0, 1]`` becomes NaN."""
    p = jnp.asarray(p, jnp.result_type(p, jnp.float32))
    w = jnp.ones_like(p) if weight is None else jnp.broadcast_to(jnp.asarray(weight, p.dtype), p.shape)
    return jnp.where((p >= 0) & (p <= 1), p, jnp.nan), w


def _mean(x, w):
    """Weighted mean over the last axis; padding (``w == 0``) is never read, NaN where no weight is left."""
    total = jnp.sum(w, axis=-1)
    s = jnp.sum(jnp.where(w > 0, w * x, 0), axis=-1)
    return jnp.where(total > 0, s / jnp.where(total > 0, total, 1), jnp.nan)


@jax.jit
def decision_rate(p, weight=None) -> jax.Array:
    """``p_{I,A}``: weighted fraction of comparisons decided for position A (zepo §3).

    Args:
        p: ``[..., R]`` ``P(A better)`` per comparison.
        weight: ``[..., R]`` (or broadcastable) weights, ``0`` for padding; default all 1.

    Returns:
        ``[...]``; a tie ``p == 0.5`` counts half; NaN where every weight is 0 or a
        weighted ``p`` is NaN or outside ``[0, 1]``.
    """
    p, w = _weights(p, weight)
    d = jnp.where(jnp.isnan(p), jnp.nan, jnp.where(p > 0.5, 1.0, jnp.where(p < 0.5, 0.0, 0.5))).astype(p.dtype)
    return _mean(d, w)


@jax.jit
def fairness(p, weight=None) -> jax.Array:
    """``fair(I) = -(1/J) sum_{j=1}^{J} |p_S - p_{I,y_j}|``, ``p_S = 1/J`` (zepo eq. 1, ``J = 2``).

    With two labels ``p_{I,B} = 1 - p_{I,A}``, so this is ``-|1/2 - p_{I,A}|``.

    The paper's equation survives only garbled in its text (``JJj=1 |pS pI,yj|``), and the
    project's ``METHODS.md`` section 6 writes it without the ``1/J``: ``-sum_j |1/J - p_{I,y_j}|``,
    in ``[-1, 0]``. This function keeps the ``1/J`` (the mean over labels), so its values are
    half of that form; the two differ by a constant factor, so the fairest prompt, hence ZEPO's
    search, is the same under both.

    Args:
        p: ``[..., R]`` ``P(A better)`` per comparison (unlabelled pairs, both orders).
        weight: ``[..., R]`` weights, ``0`` for padding.

    Returns:
        ``[...]`` in ``[-0.5, 0]``; ``0`` when half the decisions go to each position;
        NaN for invalid input (see the module docstring).
    """
    ra = decision_rate(p, weight)
    prior = 0.5
    return 0.0 - 0.5 * (jnp.abs(prior - ra) + jnp.abs(prior - (1.0 - ra)))      # 0.0 -: no -0.0


@jax.jit
def confidence(p, weight=None) -> jax.Array:
    """``(1/N) sum_i sum_{j in {A, B}} p_ij log p_ij``: minus the mean entropy (zepo App. A).

    Args:
        p: ``[..., R]`` ``P(A better)``; ``p_iB = 1 - p_iA``.
        weight: ``[..., R]`` weights, ``0`` for padding.

    Returns:
        ``[...]`` in ``[-log 2, 0]``; ``0`` for certain decisions, ``-log 2`` for ``p = 1/2``.
    """
    p, w = _weights(p, weight)
    pa = jnp.clip(p, _EPS, 1 - _EPS)
    pb = 1 - pa
    return _mean(pa * jnp.log(pa) + pb * jnp.log(pb), w)


@jax.jit
def batch_calibration(p, weight=None) -> jax.Array:
    """``|(1/N) sum_i (log p_iA - log p_iB)|``: distance of the mean label log-odds from 0 (zepo App. A).

    Args:
        p: ``[..., R]`` ``P(A better)`` (the softmax of the two label logits, so
            ``log p_A - log p_B`` is their difference).
        weight: ``[..., R]`` weights, ``0`` for padding.

    Returns:
        ``[...]`` ``>= 0``; ``0`` when the log-odds average out.
    """
    p, w = _weights(p, weight)
    pa = jnp.clip(p, _EPS, 1 - _EPS)
    return jnp.abs(_mean(jnp.log(pa) - jnp.log1p(-pa), w))


@jax.jit
def context_free_confidence(p_content_free, weight=None) -> jax.Array:
    """:func:`confidence` of the judge's outputs on a content-free input ``[N/A]`` (Fair-Prompting).

    Args:
        p_content_free: ``[..., R]`` ``P(A better)`` of comparisons whose context and
            candidates are all ``"[N/A]"`` (e.g. both orders of one such pair).
        weight: ``[..., R]`` weights, ``0`` for padding.
    """
    return confidence(p_content_free, weight)


OBJECTIVES = {
    "fairness": lambda p, p_cf, w=None: fairness(p, w),
    "confidence": lambda p, p_cf, w=None: confidence(p, w),
    "calibration": lambda p, p_cf, w=None: -batch_calibration(p, w),
    "context_free": lambda p, p_cf, w=None: -context_free_confidence(p_cf),
}
"""Search objectives to maximise, each ``f(p, p_content_free, weight) -> [...]``."""


def objective(name: str):
    """The search objective ``name`` of :data:`OBJECTIVES`.

    Raises:
        ValueError: an unknown name (lists the known ones).
    """
    if name not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {name!r}")
    return OBJECTIVES[name]
