"""The solver of the Bradley-Terry family: its settings as one object, and a result code per context.

:class:`BradleyTerrySolver` holds every setting of the Newton solver of the
soft Bradley-Terry likelihood (PoE eq. 3; :mod:`jaxrank.scoring.soft_bt`) as
fields, in the style of optimistix's solver objects: it is validated once when
built, hashable (a static argument of ``jax.jit``), and passed to the functions
that solve, rather than seven positional settings. Hard Bradley-Terry
(:func:`jaxrank.bradley_terry`), the Laplace posterior
(:func:`jaxrank.uncertainty.laplace_posterior`) and Laplace-BT selection build on
it. :class:`ProductOfExpertsSolver` is the same for any expert log-density
(:mod:`jaxrank.scoring.experts`, solved by :mod:`jaxrank.scoring.poe`).

Every fit reports a :data:`RESULTS` code per context (an int32 array, usable
under ``vmap``): ``RESULTS.successful``, ``RESULTS.max_steps_reached``,
``RESULTS.line_search_failed`` or (general experts) ``RESULTS.nonconcave``. With ``throw=True`` a fit whose result is
concrete raises :class:`SolverError` for any unsuccessful context.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _validate
from jaxrank.scoring.experts import Expert

__all__ = ["BradleyTerrySolver", "ProductOfExpertsSolver", "PoESettings", "RESULTS", "SolverError",
           "SolverSettings", "debias_mode"]


class _Results:
    """Result codes of a fit, one int32 per context (``solution.result``)."""

    successful = 0
    """The Newton step fell below ``tol`` or the gradient reached its rounding level."""
    max_steps_reached = 1
    """``max_iter`` Newton steps ran out first."""
    line_search_failed = 2
    """A step halved 30 times found no sufficient decrease."""
    nonconcave = 3
    """The point reached is not a maximum: the log-likelihood's Hessian there is not negative definite
    (a non-concave expert, :class:`ProductOfExpertsSolver`)."""

    messages = {0: "successful", 1: "max_steps_reached: max_iter Newton steps ran out before convergence",
                2: "line_search_failed: no step with sufficient decrease",
                3: "nonconcave: the point reached is not a maximum of the log-likelihood (negative curvature)"}

    def message(self, code: int) -> str:
        """A sentence naming ``code``."""
        return self.messages.get(int(code), f"unknown result code {int(code)}")


RESULTS = _Results()
"""The named result codes (``RESULTS.successful``, ``RESULTS.max_steps_reached``, ``RESULTS.line_search_failed``)."""


class SolverError(RuntimeError):
    """A fit with ``throw=True`` left a context unconverged."""


WEIGHT_SCALE_RANGE = (1e-3, 1e3)
"""Mean live weights outside this range are divided out before a fit (soft Bradley-Terry and the general PoE
solver): scaling every weight and both priors by ``1 / m`` leaves the optimum where it is and puts the objective on
the float32 scale the Newton steps, line search and convergence tests are tuned for."""
def _traced_weight_scale(w):
    """:func:`jaxrank.scoring.soft_bt._weight_scale` of a (possibly traced) batch ``w`` ``[B, R]``: the mean positive weight where it lies
    outside :data:`WEIGHT_SCALE_RANGE`, else exactly 1 (so nothing changes, bit for bit), as a scalar of ``w``'s
    dtype.

    Behind ``stop_gradient``: the optimum is the same point for ``(w, priors)`` and ``(w / m, priors / m)``, and
    with ``m`` held fixed the derivative of the divided problem times ``1 / m`` is exactly the undivided one's.
    """
    live = w > 0
    count = jnp.sum(live)
    share = jnp.where(live, w, 0).astype(jnp.promote_types(w.dtype, jnp.float32)) / jnp.maximum(count, 1)
    m = jnp.sum(share)      # the mean as a sum of shares: no overflow near the dtype's largest value
    inside = (count == 0) | ((m >= WEIGHT_SCALE_RANGE[0]) & (m <= WEIGHT_SCALE_RANGE[1])) | ~jnp.isfinite(m)
    return jax.lax.stop_gradient(jnp.where(inside, 1.0, m).astype(w.dtype))


class SolverSettings(NamedTuple):
    """The solver's numeric settings as traced scalars, so changing one never recompiles."""

    eps: jax.Array
    gamma_prior: jax.Array
    score_prior: jax.Array
    tol: jax.Array
    max_iter: jax.Array


def debias_mode(debias) -> str:
    """The model term of a ``debias`` choice: ``"off"``, ``"mean"`` or ``"learn"``.

    ``False``, ``None`` and ``"none"`` fit no positional bias; ``True`` and
    ``"mean"`` the mean-probability bias (PoE App. A.9); ``"learn"`` a learnt one.

    Raises:
        ValueError: any other value, naming ``debias``.
    """
    if debias is False or debias is None or (isinstance(debias, str) and debias in ("none", "off")):
        return "off"
    if debias is True or (isinstance(debias, str) and debias == "mean"):
        return "mean"
    if isinstance(debias, str) and debias == "learn":
        return "learn"
    raise ValueError(f"debias must be 'none', 'mean' or 'learn' (or False/True); got {debias!r}")


@dataclasses.dataclass(frozen=True)
class BradleyTerrySolver:
    """Newton's method on the soft Bradley-Terry likelihood (PoE eq. 3), its settings as fields.

    Attributes:
        debias: ``"none"``/``False`` (``gamma = 0``), ``"mean"``/``True``
            (``gamma`` from the mean probability, PoE App. A.9) or ``"learn"``
            (``gamma`` fitted jointly).
        eps: probabilities are clipped to ``[eps, 1 - eps]``.
        gamma_prior: precision of the weak ``N(0, 1/gamma_prior)`` prior on a learnt ``gamma``.
        score_prior: precision ``lambda`` of an ``N(0, 1/lambda)`` prior on every
            score (MAP instead of maximum likelihood; 0 = off).
        tol: stop when the Newton step's max-norm is below ``tol``, or the error
            after it, estimated from the contraction of the last two full steps
            (``|step|^2 / |previous step|``), is (``None``:
            ``1e-5`` in float32, ``1e-10`` in float64).
        max_iter: Newton iteration cap.
        throw: raise :class:`SolverError` when a concrete fit leaves a context
            unsuccessful (inside a caller's ``jax.jit`` read ``solution.result``).

    Raises:
        ValueError: a setting out of range, naming it.
    """

    debias: bool | str | None = False
    eps: float = 1e-6
    gamma_prior: float = 1e-6
    score_prior: float = 0.0
    tol: float | None = None
    max_iter: int = 100
    throw: bool = False

    def __post_init__(self):
        debias_mode(self.debias)
        _validate.number("eps", self.eps, low=0.0, high=0.5, high_open=True)
        _validate.number("score_prior", self.score_prior, low=0.0)
        _validate.number("gamma_prior", self.gamma_prior, low=0.0, low_open=True)
        if self.tol is not None:
            _validate.number("tol", self.tol, low=0.0, low_open=True)
        _validate.integer("max_iter", self.max_iter, low=1)
        if not isinstance(self.throw, (bool, np.bool_)):
            raise ValueError(f"throw must be True or False, got {self.throw!r}")
        for name in ("eps", "gamma_prior", "score_prior"):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.tol is not None:
            object.__setattr__(self, "tol", float(self.tol))
        object.__setattr__(self, "max_iter", int(self.max_iter))

    @property
    def mode(self) -> str:
        """The positional-bias term: ``"off"``, ``"mean"`` or ``"learn"``."""
        return debias_mode(self.debias)

    @property
    def checks_existence(self) -> bool:
        """Whether a fit tests for infinite ML scores first (``eps = 0`` and no score prior)."""
        return self.eps == 0 and self.score_prior == 0

    def tolerance(self, dtype) -> float:
        """``tol``, or its default for ``dtype``."""
        if self.tol is not None:
            return self.tol
        return 1e-10 if jnp.dtype(dtype) == jnp.float64 else 1e-5

    def settings(self, dtype) -> SolverSettings:
        """The numeric settings as scalars of ``dtype`` (NumPy: no eager cast program when passed to ``jit``)."""
        f = lambda v: np.asarray(v, dtype)
        return SolverSettings(f(self.eps), f(self.gamma_prior), f(self.score_prior), f(self.tolerance(dtype)),
                              np.asarray(self.max_iter, np.int32))

    def check(self, result) -> None:
        """With ``throw``, raise :class:`SolverError` if a concrete ``result`` has an unsuccessful context."""
        if not self.throw or isinstance(result, jax.core.Tracer):
            return
        codes = np.asarray(result)
        bad = codes != RESULTS.successful
        if bad.any():
            first = np.argwhere(bad)[0]
            where = f" (context {tuple(int(k) for k in first)})" if codes.ndim else ""
            raise SolverError(f"{int(bad.sum())} of {codes.size} contexts unsuccessful{where}: "
                              f"{RESULTS.message(codes[tuple(first)])}")


class PoESettings(NamedTuple):
    """The numeric settings of :class:`ProductOfExpertsSolver` as traced scalars (never recompiled)."""

    score_prior: jax.Array
    theta_prior: jax.Array
    tol: jax.Array
    max_iter: jax.Array


@dataclasses.dataclass(frozen=True)
class ProductOfExpertsSolver:
    """Maximise ``sum_k w_k log q(s_i - s_j | p_k, theta)`` (PoE eq. 2-3) for any :class:`Expert`; settings as fields.

    Attributes:
        expert: the :class:`jaxrank.scoring.experts.Expert`.
        method: ``"newton"`` (Newton's method on the weighted-Laplacian Hessian,
            the curvature ``-d^2 log q / dd^2`` from autodiff, Armijo backtracking)
            or ``"lbfgs"`` (``optax.lbfgs``, for experts whose curvature is
            unavailable or unhelpful).
        score_prior: precision ``lambda`` of an ``N(0, 1/lambda)`` prior on every
            score (MAP; 0 = off).
        theta_prior: precision of the weak Gaussian prior on each learnt
            parameter, centred on its value in ``theta``.
        tol: stop when the Newton step's max-norm (Newton), or the gradient's
            max-norm relative to the mean comparison weight per item (L-BFGS), is below
            ``tol`` (``None``: ``1e-5`` in float32, ``1e-10`` in float64).
        max_iter: iteration cap.
        throw: raise :class:`SolverError` when a concrete solve leaves a context
            unsuccessful (inside a caller's ``jax.jit`` read ``solution.result``).

    Raises:
        ValueError: a setting out of range, naming it.
    """

    expert: Expert
    method: str = "newton"
    score_prior: float = 0.0
    theta_prior: float = 1e-6
    tol: float | None = None
    max_iter: int = 100
    throw: bool = False

    def __post_init__(self):
        if not isinstance(self.expert, Expert):
            raise ValueError(f"expert must be a jaxrank.scoring.experts.Expert, got {type(self.expert).__name__}")
        if self.method not in ("newton", "lbfgs"):
            raise ValueError(f"method must be 'newton' or 'lbfgs', got {self.method!r}")
        _validate.number("score_prior", self.score_prior, low=0.0)
        _validate.number("theta_prior", self.theta_prior, low=0.0, low_open=True)
        if self.tol is not None:
            _validate.number("tol", self.tol, low=0.0, low_open=True)
        _validate.integer("max_iter", self.max_iter, low=1)
        if not isinstance(self.throw, (bool, np.bool_)):
            raise ValueError(f"throw must be True or False, got {self.throw!r}")
        for name in ("score_prior", "theta_prior"):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.tol is not None:
            object.__setattr__(self, "tol", float(self.tol))
        object.__setattr__(self, "max_iter", int(self.max_iter))

    tolerance = BradleyTerrySolver.tolerance
    check = BradleyTerrySolver.check

    def settings(self, dtype) -> PoESettings:
        """The numeric settings as NumPy scalars of ``dtype`` (traced by ``jit``: changing one never recompiles)."""
        f = lambda v: np.asarray(v, dtype)
        return PoESettings(f(self.score_prior), f(self.theta_prior), f(self.tolerance(dtype)),
                           np.asarray(self.max_iter, np.int32))

    def theta(self, theta: Mapping | None, dtype, num_comparisons: int | None = None) -> dict:
        """``theta`` (default: the expert's) as arrays of ``dtype``, with the expert's defaults for missing keys.

        Args:
            theta: the override, or ``None``.
            dtype: the comparisons' float dtype.
            num_comparisons: the comparisons' ``R``: an array entry must then be one value
                per comparison (shape ``[R]``, or broadcasting to it).

        Raises:
            ValueError: a key the expert does not have, a learnt entry that is not a scalar,
                an entry that is NaN or outside the expert's ``bounds``, or of a shape that
                does not broadcast to ``[R]``, naming it.
        """
        base = dict(self.expert.theta)
        if theta is not None:
            if not isinstance(theta, Mapping):
                raise ValueError(f"theta must be a dict of parameters, got {type(theta).__name__}")
            extra = sorted(set(theta) - set(base))
            if extra:
                raise ValueError(f"theta has keys {extra} that expert {self.expert.name!r} does not have "
                                 f"(its keys: {sorted(base)})")
            self.expert.check_theta(theta)
            base.update(theta)
        out = {k: (v.astype(dtype) if isinstance(v, jax.Array) else np.asarray(v, dtype)) for k, v in base.items()}
        for k in self.expert.learnt:
            if np.ndim(out[k]) != 0:
                raise ValueError(f"theta[{k!r}] is learnt and must be a scalar, got shape {np.shape(out[k])}")
        if num_comparisons is not None:
            for k, v in out.items():
                try:
                    ok = np.broadcast_shapes(np.shape(v), (num_comparisons,)) == (num_comparisons,)
                except ValueError:
                    ok = False
                if not ok:
                    raise ValueError(f"theta[{k!r}] must be a scalar or one value per comparison, shape "
                                     f"({num_comparisons},); got shape {np.shape(v)}")
        return out
