"""Learnt calibration of judges: monotone maps of the logit margin, per judge.

A judge's probability ``p`` is read through its logit margin ``x = logit p``
(clipped to ``[eps, 1 - eps]`` first). A calibration is a strictly increasing map
``f_j`` per judge ``j``, and the calibrated probability is

    p' = sigmoid(f_j(logit p))                                      (1)

applied to a :class:`~jaxrank.Comparisons` before any scorer (:func:`calibrate`).
Being increasing, ``f_j`` never flips a decision's order of preference among
the judge's outputs; it changes how strongly each output pulls the scores and
moves the decision threshold (positional bias).

Two families, both pytrees of per-judge parameters (leading axis ``J``, the
number of judges), both the identity at :func:`identity_temperature_bias` /
:func:`identity_spline`:

* :class:`TemperatureBias`: ``f_j(x) = a_j x + b_j``, ``a_j = softplus(r_j) > 0``  (2)
* :class:`MonotoneSpline`: piecewise linear in ``x`` with fixed knots
  ``t_1 < ... < t_K`` and ``K + 1`` positive slopes ``c_jm = softplus(r_jm)``,

      f_j(x) = b_j + sum_{m=0}^{K} c_jm [clip(x, t_m, t_{m+1}) - clip(0, t_m, t_{m+1})]   (3)

  with ``t_0 = -inf`` and ``t_{K+1} = +inf``; so ``f_j(0) = b_j`` and the slope on
  segment ``m`` is ``c_jm`` (linear extrapolation beyond the outer knots).

Comparisons of several judges are one ``Comparisons`` with a judge id per
comparison (:func:`concatenate_judges`), so each judge's outputs go through its
own map and a scorer treats all of them as experts of one product.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank.comparisons import Comparisons

__all__ = ["TemperatureBias", "MonotoneSpline", "Calibration", "identity_temperature_bias", "identity_spline",
           "calibrate_logits", "log_derivative", "calibrate", "concatenate_judges", "logit"]

_SOFTPLUS_INV_ONE = float(np.log(np.expm1(1.0)))   # softplus(x) = 1


class TemperatureBias(NamedTuple):
    """Temperature and bias per judge, eq. (2): ``f_j(x) = softplus(raw_scale_j) x + bias_j``.

    Attributes:
        raw_scale: ``[J]`` unconstrained; the slope is ``softplus(raw_scale) > 0``.
        bias: ``[J]`` shift of the logit margin (``-bias / scale`` is the margin read as a tie).
    """

    raw_scale: jax.Array
    bias: jax.Array

    @property
    def scale(self) -> jax.Array:
        """``[J]`` the positive slope ``a = softplus(raw_scale)``."""
        return jax.nn.softplus(self.raw_scale)

    @property
    def num_judges(self) -> int:
        return int(self.bias.shape[-1])


@dataclasses.dataclass(frozen=True)
class MonotoneSpline:
    """Monotone piecewise-linear map of the logit margin per judge, eq. (3).

    Attributes:
        raw_slopes: ``[J, K + 1]`` unconstrained; segment slopes are ``softplus(raw_slopes) > 0``.
        bias: ``[J]`` value at ``x = 0``.
        knots: ``K`` strictly increasing knot positions in logit units (static,
            not learnt; stored as a tuple of floats; a ``ValueError`` otherwise).
    """

    raw_slopes: jax.Array
    bias: jax.Array
    knots: tuple = dataclasses.field(metadata=dict(static=True))

    def __post_init__(self):
        # unsorted knots made two segments overlap (a margin counted in both: the map doubled back on itself)
        object.__setattr__(self, "knots", _check_knots(self.knots))

    @property
    def slopes(self) -> jax.Array:
        """``[J, K + 1]`` positive segment slopes."""
        return jax.nn.softplus(self.raw_slopes)

    @property
    def num_judges(self) -> int:
        return int(self.bias.shape[-1])


jax.tree_util.register_dataclass(MonotoneSpline, data_fields=["raw_slopes", "bias"], meta_fields=["knots"])

Calibration = Union[TemperatureBias, MonotoneSpline]


def identity_temperature_bias(num_judges: int = 1, dtype=jnp.float32) -> TemperatureBias:
    """:class:`TemperatureBias` with ``a = 1, b = 0`` for every judge (eq. 2 is the identity)."""
    _check_num_judges(num_judges)
    return TemperatureBias(jnp.full((num_judges,), _SOFTPLUS_INV_ONE, dtype), jnp.zeros((num_judges,), dtype))


def identity_spline(num_judges: int = 1, knots: Sequence[float] = (-4.0, -2.0, -1.0, 0.0, 1.0, 2.0, 4.0),
                    dtype=jnp.float32) -> MonotoneSpline:
    """:class:`MonotoneSpline` with every slope 1 and bias 0 (eq. 3 is the identity).

    Raises:
        ValueError: ``knots`` empty, not finite or not strictly increasing.
    """
    _check_num_judges(num_judges)
    k = _check_knots(knots)
    return MonotoneSpline(jnp.full((num_judges, len(k) + 1), _SOFTPLUS_INV_ONE, dtype),
                          jnp.zeros((num_judges,), dtype), k)


def _check_knots(knots) -> tuple:
    """``knots`` as a tuple of floats; a ``ValueError`` naming ``knots`` unless non-empty, finite, strictly increasing."""
    try:
        k = np.asarray(knots, np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"knots must be a non-empty, finite, strictly increasing sequence; got {knots!r}") from None
    if k.ndim != 1 or len(k) == 0 or not np.isfinite(k).all() or (np.diff(k) <= 0).any():
        raise ValueError(f"knots must be a non-empty, finite, strictly increasing sequence; got {knots!r}")
    return tuple(float(x) for x in k)


def _check_num_judges(num_judges):
    if not isinstance(num_judges, (int, np.integer)) or num_judges < 1:
        raise ValueError(f"num_judges must be a positive int, got {num_judges!r}")


def logit(p, eps: float = 1e-6) -> jax.Array:
    """``log(p / (1 - p))`` of ``p`` clipped to ``[eps, 1 - eps]`` (finite for p = 0 or 1 when ``eps > 0``).

    Raises:
        ValueError: a concrete ``eps`` outside ``[0, 0.5)`` (at ``0.5`` or above the clip maps every ``p`` to
            one value).
    """
    _check_eps(eps)
    p = jnp.clip(p, eps, 1 - eps)
    return jnp.log(p) - jnp.log1p(-p)


def _check_eps(eps):
    if isinstance(eps, jax.core.Tracer):
        return
    try:
        ok = 0.0 <= float(eps) < 0.5
    except (TypeError, ValueError):
        ok = False
    if not ok or isinstance(eps, bool):
        raise ValueError(f"eps must be a number in [0, 0.5) (p is clipped to [eps, 1 - eps]), got {eps!r}")


def _check_params(params):
    """Every per-judge array of ``params`` has one entry per judge (``bias``'s length); a ``ValueError`` naming the
    field (indexing ``raw_scale[1]`` with judge 2 of ``bias[3]`` clamped silently to judge 0's slope)."""
    if isinstance(params, TemperatureBias):
        shapes = {"raw_scale": np.shape(params.raw_scale), "bias": np.shape(params.bias)}
    elif isinstance(params, MonotoneSpline):
        shapes = {"raw_slopes": np.shape(params.raw_slopes)[:-1], "bias": np.shape(params.bias)}
        if np.ndim(params.raw_slopes) < 2 or np.shape(params.raw_slopes)[-1] != len(params.knots) + 1:
            raise ValueError(f"params.raw_slopes must have shape [J, {len(params.knots) + 1}] (K + 1 segments of "
                             f"{len(params.knots)} knots), got {np.shape(params.raw_slopes)}")
    else:
        raise ValueError(f"params must be a TemperatureBias or MonotoneSpline, got {type(params).__name__}")
    (_, first), *rest = shapes.items()
    if len(first) < 1 or first[-1] < 1 or any(v != first for _, v in rest):
        raise ValueError("params must hold one entry per judge in every field, shape [J] with J >= 1; got "
                         + ", ".join(f"{k} {v}" for k, v in shapes.items()))


def _check_judge_ids(params: Calibration, judge) -> None:
    """``ValueError`` for concrete ``judge`` ids that are no integers or lie outside ``[0, J)``; traced ids pass
    (they cannot be inspected: :func:`jaxrank.learning.fit` calls this on its concrete data before tracing)."""
    if judge is None or isinstance(judge, jax.core.Tracer):
        return
    ids = np.asarray(judge)
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"judge must hold integer judge ids, got dtype {ids.dtype}")
    if ids.size and (ids.min() < 0 or ids.max() >= params.num_judges):
        raise ValueError(f"judge holds id {int(ids.max() if ids.max() >= params.num_judges else ids.min())}, "
                         f"outside [0, {params.num_judges}) for a calibration of {params.num_judges} judges")


def _judge_ids(params: Calibration, x, judge):
    _check_params(params)
    if judge is None:
        return jnp.zeros(jnp.shape(x), jnp.int32)
    _check_judge_ids(params, judge)
    try:
        ok = np.broadcast_shapes(np.shape(judge), np.shape(x)) == np.shape(x)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"judge must be judge ids of shape {np.shape(x)} (one per comparison) or broadcastable to "
                         f"it, got shape {np.shape(judge)}")
    return jnp.broadcast_to(jnp.asarray(judge, jnp.int32), jnp.shape(x))


def _segments(x, knots):
    """``[..., K + 1]`` length of ``[0, x]`` (signed) inside each segment of the knots."""
    lo = jnp.asarray((-jnp.inf,) + knots, x.dtype)
    hi = jnp.asarray(knots + (jnp.inf,), x.dtype)
    return jnp.clip(x[..., None], lo, hi) - jnp.clip(jnp.zeros((), x.dtype), lo, hi)


def _float(x) -> jax.Array:
    """``x`` as a floating array (integer or boolean margins become the default float type)."""
    x = jnp.asarray(x)
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.result_type(float))


def calibrate_logits(params: Calibration, x, judge=None) -> jax.Array:
    """``f_{judge}(x)``: the calibrated logit margin (eq. 2 or 3), elementwise.

    Args:
        params: a :class:`TemperatureBias` or :class:`MonotoneSpline`.
        x: logit margins, any shape (integer margins are cast to float).
        judge: integer judge ids broadcastable to ``x`` (default: judge 0 everywhere).

    Raises:
        ValueError: a concrete ``judge`` id outside ``[0, J)``.
    """
    x = _float(x)
    ids = _judge_ids(params, x, judge)
    if isinstance(params, TemperatureBias):
        return params.scale[ids] * x + params.bias[ids]
    if isinstance(params, MonotoneSpline):
        return params.bias[ids] + jnp.sum(params.slopes[ids] * _segments(x, params.knots), axis=-1)
    raise ValueError(f"params must be a TemperatureBias or MonotoneSpline, got {type(params).__name__}")


def log_derivative(params: Calibration, x, judge=None) -> jax.Array:
    """``log f'_{judge}(x)``, elementwise: the log-Jacobian of eq. (2) or (3) (the slope of ``x``'s segment)."""
    x = _float(x)
    ids = _judge_ids(params, x, judge)
    if isinstance(params, TemperatureBias):
        return jnp.log(params.scale[ids])
    if isinstance(params, MonotoneSpline):
        seg = jnp.searchsorted(jnp.asarray(params.knots, x.dtype), x, side="right")
        return jnp.log(params.slopes[ids, seg])
    raise ValueError(f"params must be a TemperatureBias or MonotoneSpline, got {type(params).__name__}")


def calibrate(params: Calibration, c: Comparisons, judge=None, *, eps: float = 1e-6) -> Comparisons:
    """``c`` with every ``p`` replaced by ``sigmoid(f_{judge}(logit p))`` (eq. 1); any batch shape, traceable.

    Args:
        params: the calibration.
        c: comparisons ``[..., R]``.
        judge: integer ``[..., R]`` judge id per comparison (broadcastable; default 0).
        eps: ``p`` is clipped to ``[eps, 1 - eps]`` before the logit, in ``[0, 0.5)``.

    Raises:
        ValueError: ``eps`` outside ``[0, 0.5)``; bad ``params`` or ``judge`` (as :func:`calibrate_logits`).
    """
    return c.with_p(jax.nn.sigmoid(calibrate_logits(params, logit(c.p, eps), judge)).astype(c.p.dtype))


def concatenate_judges(judged: Sequence[Comparisons]) -> tuple[Comparisons, jax.Array]:
    """The comparisons of several judges of the same contexts as one set, and the judge id of every comparison.

    Args:
        judged: ``J`` comparison sets ``[..., R_j]`` of the same batch shape and ``num_items``
            (judge ``j``'s comparisons of each context).

    Returns:
        ``(c, judge)``: ``c [..., sum R_j]`` (concatenated along the comparison axis;
        ``item_mask`` the union) and int32 ``judge [..., sum R_j]``.

    Raises:
        ValueError: no sets, or sets of different batch shapes or ``num_items``.
    """
    judged = list(judged)
    if not judged:
        raise ValueError("judged is empty: pass one Comparisons per judge")
    first = judged[0]
    for k, c in enumerate(judged):
        if not isinstance(c, Comparisons):
            raise ValueError(f"judged[{k}] must be a Comparisons, got {type(c).__name__}")
        if c.batch_shape != first.batch_shape or c.num_items != first.num_items:
            raise ValueError(f"judged[{k}] has batch shape {c.batch_shape} and {c.num_items} items; judged[0] has "
                             f"{first.batch_shape} and {first.num_items}")
    cat = lambda name: jnp.concatenate([getattr(c, name) for c in judged], axis=-1)
    mask = first.item_mask
    for c in judged[1:]:
        mask = mask | c.item_mask
    judge = jnp.concatenate([jnp.full(c.p.shape, k, jnp.int32) for k, c in enumerate(judged)], axis=-1)
    out = Comparisons(i=cat("i"), j=cat("j"), p=cat("p"), weight=cat("weight"), item_mask=mask,
                      num_items=first.num_items)
    return out, judge
