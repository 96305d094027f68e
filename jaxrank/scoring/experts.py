"""Experts of a Product of Experts: log-densities of a score difference that users write.

An expert (PoE eq. 2) is a density ``q(d | p, theta)`` over the score difference
``d = s_i - s_j`` of one comparison, given the judge's output ``p`` and parameters
``theta`` (a dict of scalars or arrays, a pytree). The product over comparisons
``k`` with weights ``w_k``,

    log p(s | C) = sum_k w_k log q(s_{i_k} - s_{j_k} | p_k, theta) + const,   (PoE eq. 2-3)

is maximised by :func:`jaxrank.scoring.poe.solve`. An :class:`Expert` holds the
pure function ``log_density(d, p, theta)`` (elementwise in ``d`` and ``p``),
the default ``theta``, and optionally which entries of ``theta`` are fitted with
the scores (``learnt``), a per-context rule for others (``from_context``, e.g.
the mean-probability debias) and a starting difference (``start``). It is a
frozen dataclass, hashable (a static ``jit`` argument) with its default ``theta``
left out of the hash: the solver passes ``theta`` as a traced argument, so new
values never recompile.

Writing one takes a few lines::

    def cauchy(d, p, theta):               # heavy-tailed: a few wild judgements matter less
        z = (d - theta["alpha"] * (p - theta["offset"])) / theta["scale"]
        return -jnp.log1p(z**2)

    def mean_offset(p, weight, theta):     # per context; weigh by weight (padding has weight 0)
        return {**theta, "offset": jnp.sum(weight * p) / jnp.sum(weight)}

    expert = Expert(cauchy, {"alpha": 4.0, "scale": 1.0, "offset": 0.5}, name="cauchy",
                    from_context=mean_offset)

Built-ins: :func:`soft_bradley_terry` (PoE §3.2, App. A.9; = :func:`jaxrank.poe_bradley_terry`),
:func:`gaussian` (PoE eq. 11-12; = :func:`jaxrank.poe_gaussian`), :func:`thurstone`
(probit, Thurstone's case V) and :func:`heteroscedastic_gaussian` (variance growing
with the expert's mean).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _validate

__all__ = ["Expert", "soft_bradley_terry", "gaussian", "thurstone", "heteroscedastic_gaussian", "EPS"]

EPS = 1e-6
"""Built-in experts of probabilities clip ``p`` to ``[EPS, 1 - EPS]`` (as :class:`jaxrank.BradleyTerrySolver`)."""


@dataclasses.dataclass(frozen=True)
class Expert:
    """A log-density ``log q(d | p, theta)`` of the score difference ``d = s_i - s_j`` (PoE eq. 2).

    Attributes:
        log_density: ``(d, p, theta) -> log q``, pure and elementwise in ``d`` and
            ``p`` (broadcasting arrays of one shape); twice differentiable in ``d``
            and in the learnt entries of ``theta``. Constants in ``d`` may be dropped.
        theta: default parameters, a dict ``name -> float or array`` (not part of
            the hash: a solve takes ``theta=`` to override it without recompiling).
        name: a label.
        learnt: names of scalar entries of ``theta`` fitted jointly with the scores
            (their value in ``theta`` is the start and the mean of a weak Gaussian
            prior, :attr:`ProductOfExpertsSolver.theta_prior`).
        from_context: optional ``(p, weight, theta) -> theta``, applied per context
            before solving (e.g. a bias from the context's mean probability); must
            be differentiable where gradients are wanted. It must ignore comparisons
            of weight 0: a solve outside ``jit`` pads every context to a bucket with
            comparisons ``p = 0.5``, ``weight = 0`` (as :func:`jaxrank.stack_contexts`
            pads), so weigh by ``weight`` (``sum(weight * p) / sum(weight)``, not
            ``mean(p)``) for the same result eagerly and under ``jit``.
        start: optional ``(p, theta) -> d``: differences to start from (their
            weighted least-squares fit is the first iterate); default ``d = 0``.
        concave: the author's statement that ``log q`` is concave in ``d`` for every
            ``p`` (documentation; the solver checks curvature whatever it says).
        quadratic: ``log q`` is quadratic in ``d`` and the learnt parameters (a
            Gaussian in ``d``): without learnt parameters the Newton solver then
            takes one exact step from ``d = 0`` and stops, as a closed form would
            (with them it iterates, each step exact up to rounding).
        bounds: ``(name, low, closed)`` triples: every concrete value of
            ``theta[name]`` (the default and any override) must be finite and
            ``> low`` (``>= low`` if ``closed``; ``low = -inf``: finite only).

    Raises:
        ValueError: ``log_density`` not callable, ``theta`` not a dict of numbers
            or arrays, a ``learnt`` name not in ``theta``, or a ``theta`` entry
            NaN or outside its ``bounds``, naming it.
    """

    log_density: Callable
    theta: Mapping = dataclasses.field(default_factory=dict, compare=False)
    name: str = "expert"
    learnt: tuple[str, ...] = ()
    from_context: Callable | None = None
    start: Callable | None = None
    concave: bool = True
    quadratic: bool = False
    bounds: tuple = ()

    def __post_init__(self):
        if not callable(self.log_density):
            raise ValueError(f"log_density must be callable, got {type(self.log_density).__name__}")
        if not isinstance(self.theta, Mapping):
            raise ValueError(f"theta must be a dict of parameters, got {type(self.theta).__name__}")
        theta = {}
        for k, v in self.theta.items():
            if not isinstance(k, str):
                raise ValueError(f"theta keys must be str, got {k!r}")
            a = np.asarray(v) if not isinstance(v, jax.Array) else v
            if not jnp.issubdtype(a.dtype, jnp.number):
                raise ValueError(f"theta[{k!r}] must be numeric, got {v!r}")
            theta[k] = v
        bounds = tuple((str(k), float(lo), bool(closed)) for k, lo, closed in self.bounds)
        for k, _, _ in bounds:
            if k not in theta:
                raise ValueError(f"bounds names {k!r}, which is not in theta (keys {sorted(theta)})")
        object.__setattr__(self, "bounds", bounds)
        self.check_theta(theta)
        object.__setattr__(self, "theta", theta)
        learnt = (self.learnt,) if isinstance(self.learnt, str) else tuple(self.learnt)
        for k in learnt:
            if k not in theta:
                raise ValueError(f"learnt names {k!r}, which is not in theta (keys {sorted(theta)})")
            if np.ndim(theta[k]) != 0:
                raise ValueError(f"learnt parameter theta[{k!r}] must be a scalar, got shape {np.shape(theta[k])}")
        object.__setattr__(self, "learnt", learnt)
        for name in ("from_context", "start"):
            f = getattr(self, name)
            if f is not None and not callable(f):
                raise ValueError(f"{name} must be callable or None, got {type(f).__name__}")

    def check_theta(self, theta: Mapping) -> None:
        """Raise ``ValueError`` naming an entry of ``theta`` that is NaN or outside :attr:`bounds`.

        Traced entries (inside a caller's ``jit``) cannot be inspected and pass unchecked.
        """
        bounds = {k: (lo, closed) for k, lo, closed in self.bounds}
        for k, v in theta.items():
            if isinstance(v, jax.core.Tracer):
                continue
            a = np.asarray(v)
            if not np.issubdtype(a.dtype, np.number):
                raise ValueError(f"theta[{k!r}] must be numeric, got {v!r}")
            a = a.astype(np.float64)
            bad = np.isnan(a)
            if k in bounds:
                lo, closed = bounds[k]
                bad |= ~np.isfinite(a) | ((a < lo) if closed else (a <= lo))
            if np.any(bad):
                lo, closed = bounds.get(k, (None, False))
                if lo is None:
                    where = "a number (not NaN)"
                elif np.isfinite(lo):
                    where = f"a finite number {'>=' if closed else '>'} {lo:g}"
                else:
                    where = "a finite number"
                got = a[tuple(np.argwhere(bad)[0])] if a.ndim else a
                raise ValueError(f"theta[{k!r}] of expert {self.name!r} must be {where}, got {float(got)!r}")

    def replace(self, **changes) -> "Expert":
        """A copy with fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)


def _clip(p):
    return jnp.clip(p, EPS, 1 - EPS)


def _weighted_mean_p(p, weight):
    """The weighted mean of ``p``; the neutral 0.5 (no positional bias: ``gamma = 0``, ``beta = 0.5``) for a
    context without live comparisons (total weight 0), where the mean of nothing was 0 (``gamma = +13.8``)."""
    total = jnp.sum(weight)
    return jnp.where(total > 0, jnp.sum(weight * p) / jnp.maximum(total, 1e-30), 0.5).astype(p.dtype)


# ------------------------------------------------------------------ soft Bradley-Terry
def _bt_log_density(d, p, theta):
    # p log sigmoid(d - gamma) + (1 - p) log sigmoid(gamma - d)   (PoE eq. 3); in this form the
    # derivative p sigmoid(-z) - (1 - p) sigmoid(z) has no cancellation when saturated
    p = _clip(p)
    z = d - theta["gamma"]
    return p * jax.nn.log_sigmoid(z) + (1 - p) * jax.nn.log_sigmoid(-z)


def _bt_mean_gamma(p, weight, theta):
    # sigmoid(-gamma) = mean p  (PoE App. A.9)
    pbar = _clip(_weighted_mean_p(p, weight))
    return {**theta, "gamma": jnp.log1p(-pbar) - jnp.log(pbar)}


def _bt_start(p, theta):
    pc = jnp.clip(p, 0.01, 0.99)
    return jnp.log(pc) - jnp.log1p(-pc) + theta["gamma"]


def soft_bradley_terry(debias="none", gamma: float = 0.0) -> Expert:
    """The soft Bradley-Terry expert ``p log sigmoid(d - gamma) + (1 - p) log sigmoid(gamma - d)`` (PoE eq. 3).

    Args:
        debias: ``"none"``/``False`` (``gamma`` fixed), ``"mean"``/``True``
            (``gamma = log((1 - mean p) / mean p)`` per context, PoE App. A.9) or
            ``"learn"`` (``gamma`` fitted with the scores).
        gamma: the fixed positional bias (or the start of a learnt one).

    Returns:
        An :class:`Expert`; solved, it gives :func:`jaxrank.poe_bradley_terry`.
    """
    mode = _debias(debias, ("none", "mean", "learn"))
    _validate.number("gamma", gamma)
    return Expert(_bt_log_density, {"gamma": float(gamma)}, name=f"soft_bradley_terry[{mode}]",
                  learnt=("gamma",) if mode == "learn" else (),
                  from_context=_bt_mean_gamma if mode == "mean" else None, start=_bt_start,
                  bounds=(("gamma", -np.inf, False),))


# ------------------------------------------------------------------ Gaussian
def _gaussian_log_density(d, p, theta):
    # log N(d; alpha (p - beta), sigma^2), constants dropped   (PoE eq. 4, 11)
    r = d - theta["alpha"] * (p - theta["beta"])
    return -0.5 * r**2 / theta["sigma"] ** 2


def _gaussian_mean_beta(p, weight, theta):
    # beta = mean p  (PoE eq. 12, App. A.8)
    return {**theta, "beta": _weighted_mean_p(p, weight)}


def _gaussian_start(p, theta):
    return theta["alpha"] * (p - theta["beta"])


def gaussian(debias="none", alpha: float = 1.0, beta: float = 0.5, sigma: float = 1.0) -> Expert:
    """The linear-Gaussian expert ``d ~ N(alpha (p - beta), sigma^2)`` (PoE eq. 4, 11).

    Args:
        debias: ``"none"``/``False`` (``beta`` fixed), ``"mean"``/``True``
            (``beta`` = the context's weighted mean ``p``, PoE eq. 12) or ``"learn"``
            (``beta`` fitted with the scores).
        alpha, beta, sigma: the mean's slope and offset and the standard deviation.

    Returns:
        An :class:`Expert`; solved, it gives :func:`jaxrank.poe_gaussian` (and with
        the Laplace posterior, :func:`jaxrank.poe_gaussian_posterior` times ``sigma^2``).
    """
    mode = _debias(debias, ("none", "mean", "learn"))
    _validate.number("alpha", alpha, low=0.0, low_open=True)
    _validate.number("beta", beta)
    _validate.number("sigma", sigma, low=0.0, low_open=True)
    return Expert(_gaussian_log_density, {"alpha": float(alpha), "beta": float(beta), "sigma": float(sigma)},
                  name=f"gaussian[{mode}]", learnt=("beta",) if mode == "learn" else (),
                  from_context=_gaussian_mean_beta if mode == "mean" else None, start=_gaussian_start,
                  quadratic=True, bounds=(("alpha", 0.0, False), ("beta", -np.inf, False), ("sigma", 0.0, False)))


# ------------------------------------------------------------------ Thurstone (probit)
def _thurstone_log_density(d, p, theta):
    # p log Phi((d - gamma) / scale) + (1 - p) log Phi((gamma - d) / scale)
    p = _clip(p)
    z = (d - theta["gamma"]) / theta["scale"]
    return p * jax.scipy.special.log_ndtr(z) + (1 - p) * jax.scipy.special.log_ndtr(-z)


def _thurstone_start(p, theta):
    return theta["scale"] * jax.scipy.special.ndtri(jnp.clip(p, 0.01, 0.99)) + theta["gamma"]


def thurstone(debias="none", gamma: float = 0.0, scale: float = 1.0) -> Expert:
    """Thurstone's case V (probit) expert: ``P(A better) = Phi((d - gamma) / scale)``, soft labels ``p``.

    ``p log Phi(z) + (1 - p) log Phi(-z)``, ``z = (d - gamma) / scale``: concave
    in ``d`` (``log Phi`` is log-concave). ``debias`` as in :func:`soft_bradley_terry`
    (``"mean"`` sets ``Phi(-gamma / scale) = mean p``).
    """
    mode = _debias(debias, ("none", "mean", "learn"))
    _validate.number("gamma", gamma)
    _validate.number("scale", scale, low=0.0, low_open=True)
    return Expert(_thurstone_log_density, {"gamma": float(gamma), "scale": float(scale)},
                  name=f"thurstone[{mode}]", learnt=("gamma",) if mode == "learn" else (),
                  from_context=_thurstone_mean_gamma if mode == "mean" else None, start=_thurstone_start,
                  bounds=(("gamma", -np.inf, False), ("scale", 0.0, False)))


def _thurstone_mean_gamma(p, weight, theta):
    pbar = _clip(_weighted_mean_p(p, weight))
    return {**theta, "gamma": -theta["scale"] * jax.scipy.special.ndtri(pbar)}


# ------------------------------------------------------------------ heteroscedastic Gaussian
def _hetero_log_density(d, p, theta):
    # log N(d; mu, v), mu = alpha (p - beta), v = sigma^2 + kappa mu^2
    mu = theta["alpha"] * (p - theta["beta"])
    v = theta["sigma"] ** 2 + theta["kappa"] * mu**2
    return -0.5 * (d - mu) ** 2 / v - 0.5 * jnp.log(v)


def heteroscedastic_gaussian(alpha: float = 1.0, beta: float = 0.5, sigma: float = 1.0,
                             kappa: float = 1.0) -> Expert:
    """A Gaussian expert with p-dependent variance: ``d ~ N(mu, sigma^2 + kappa mu^2)``, ``mu = alpha (p - beta)``.

    A confident judgement (``p`` far from ``beta``) says more about the sign of
    ``d`` than about its size: its variance grows with its mean. Quadratic in ``d``
    (the Newton solve converges in one step); ``kappa = 0`` is :func:`gaussian`.
    """
    _validate.number("alpha", alpha, low=0.0, low_open=True)
    _validate.number("beta", beta)
    _validate.number("sigma", sigma, low=0.0, low_open=True)
    _validate.number("kappa", kappa, low=0.0)
    return Expert(_hetero_log_density, {"alpha": float(alpha), "beta": float(beta), "sigma": float(sigma),
                                        "kappa": float(kappa)}, name="heteroscedastic_gaussian",
                  start=_gaussian_start, quadratic=True,
                  bounds=(("alpha", 0.0, False), ("beta", -np.inf, False), ("sigma", 0.0, False),
                          ("kappa", 0.0, True)))


def _debias(debias, allowed):
    if debias is False or debias is None or debias == "none":
        mode = "none"
    elif debias is True or debias == "mean":
        mode = "mean"
    elif debias == "learn":
        mode = "learn"
    else:
        mode = None
    if mode not in allowed:
        raise ValueError(f"debias must be one of {allowed} (or False/True); got {debias!r}")
    return mode
