"""Product of soft Bradley-Terry experts with a positional-bias parameter (PoE §3.2, App. A.9).

The negative log-likelihood of scores ``s`` and bias ``gamma`` is

    f(s, gamma) = - sum_k w_k [p_k log sigmoid(d_k) + (1 - p_k) log sigmoid(-d_k)],
    d_k = s_{i_k} - s_{j_k} - gamma                                   (PoE eq. 3)

a convex function whose gradient and Hessian are

    grad_s = W^T D (q - p),   grad_gamma = -1^T D (q - p),   q = sigmoid(d),
    H_ss = W^T D Q W  (a Laplacian weighted by w q (1 - q); METHODS.md §4),
    H_s,gamma = -W^T D Q 1,   H_gamma,gamma = 1^T D Q 1.

``gamma`` is 0 (``debias=False``), the mean-probability value
``log((1 - mean p) / mean p)`` (``debias=True`` or ``"mean"``; METHODS.md §3,
PoE App. A.9), or learnt jointly with ``s`` (``debias="learn"``; with a weak
Gaussian prior of precision ``gamma_prior`` so that ``gamma`` stays defined when
the comparison set cannot identify it).

Each context is solved to tight tolerance by Newton's method on the exact
Laplacian-structured Hessian (anchored per connected component like PoE-g),
with a vectorised Armijo backtracking line search; a ``lax.while_loop`` keeps
per-context state, so contexts of a batch converge independently. Gradients
with respect to ``p`` and ``weight`` use implicit differentiation through the
optimality condition ``grad f(x*) = 0`` (one extra linear solve), never
unrolling the iterations.

``p`` is clipped to ``[eps, 1 - eps]``: with ``p`` exactly 0 or 1 on every
comparison of an item the maximum-likelihood score would be infinite; the clip
keeps it finite (and the largest or smallest) and is otherwise inactive.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrank import _graph
from jaxrank.comparisons import Comparisons

__all__ = ["poe_bradley_terry", "fit_poe_bradley_terry", "SoftBTSolution"]

_STEPS = 12  # line-search candidates 1, 1/2, ..., 2^-11


class SoftBTSolution(NamedTuple):
    """Result of :func:`fit_poe_bradley_terry`.

    Attributes:
        scores: ``[..., N]`` scores, centred per connected component.
        gamma: ``[...]`` positional-bias parameter used or learnt.
        iterations: ``[...]`` Newton iterations per context.
        converged: ``[...]`` whether the last Newton step was below ``tol`` or the
            gradient reached float rounding level (``64 eps max_n games_n``).
        grad_norm: ``[...]`` max-norm of the log-likelihood gradient at the solution.
    """

    scores: jax.Array
    gamma: jax.Array
    iterations: jax.Array
    converged: jax.Array
    grad_norm: jax.Array


def _mode(debias):
    if debias is False or debias is None or debias == "off":
        return "off"
    if debias is True or debias == "mean":
        return "mean"
    if debias == "learn":
        return "learn"
    raise ValueError(f"debias must be False, True, 'mean' or 'learn'; got {debias!r}")


def _clipped_p(c, eps):
    return jnp.clip(c.p, eps, 1 - eps)


def _fixed_gamma(c, mode, eps):
    if mode == "mean":
        pbar = jnp.sum(c.weight * c.p) / jnp.maximum(jnp.sum(c.weight), 1e-30)
        pbar = jnp.clip(pbar, eps, 1 - eps)
        return jnp.log1p(-pbar) - jnp.log(pbar)
    return jnp.zeros((), c.p.dtype)


def _split(x, c, mode, eps):
    n = c.num_items
    if mode == "learn":
        return x[:n], x[n]
    return x, _fixed_gamma(c, mode, eps)


def _nll(x, c, mode, eps, gamma_prior, score_prior):
    s, g = _split(x, c, mode, eps)
    d = _graph.incidence(c, s) - g
    p = _clipped_p(c, eps)
    f = -jnp.sum(c.weight * (p * jax.nn.log_sigmoid(d) + (1 - p) * jax.nn.log_sigmoid(-d)))
    f = f + 0.5 * score_prior * jnp.sum(s**2)
    if mode == "learn":
        f = f + 0.5 * gamma_prior * g**2
    return f


def _grad(x, c, mode, eps, gamma_prior, score_prior):
    s, g = _split(x, c, mode, eps)
    q = jax.nn.sigmoid(_graph.incidence(c, s) - g)
    r = c.weight * (q - _clipped_p(c, eps))
    gs = _graph.incidence_t(c, r) + score_prior * s
    if mode == "learn":
        return jnp.concatenate([gs, (-jnp.sum(r) + gamma_prior * g)[None]])
    return gs


def _hessian(x, c, mode, eps, gamma_prior, score_prior, proj):
    """Exact Hessian plus the per-component anchor ``P`` on the score block.

    ``P`` acts only on per-component constants, along which the gradient is
    always 0 (and the scores stay centred), so it never changes a Newton step
    or the implicit derivative; it only makes the system definite.
    """
    s, g = _split(x, c, mode, eps)
    q = jax.nn.sigmoid(_graph.incidence(c, s) - g)
    h = c.weight * jnp.maximum(q * (1 - q), 1e-12)
    hss = _graph.laplacian(c, h) + proj + score_prior * jnp.eye(c.num_items, dtype=h.dtype)
    if mode != "learn":
        return hss
    hsg = -_graph.incidence_t(c, h)
    hgg = jnp.sum(h) + gamma_prior
    top = jnp.concatenate([hss, hsg[:, None]], axis=1)
    bottom = jnp.concatenate([hsg, hgg[None]])[None, :]
    return jnp.concatenate([top, bottom], axis=0)


def _newton(c, mode, eps, gamma_prior, score_prior, tol, max_iter):
    dt = c.p.dtype
    n = c.num_items + (1 if mode == "learn" else 0)
    proj = _graph.component_projector(_graph.components(c), dt)
    steps = 0.5 ** jnp.arange(_STEPS, dtype=dt)
    kw = dict(c=c, mode=mode, eps=eps, gamma_prior=gamma_prior, score_prior=score_prior)
    fun = functools.partial(_nll, **kw)
    grad = functools.partial(_grad, **kw)
    rounding = 16 * jnp.finfo(dt).eps

    games = _graph.item_sums(c, c.weight, c.weight)
    gtol = 64 * jnp.finfo(dt).eps * jnp.maximum(1.0, jnp.max(games))

    def body(state):
        x, f, it, _, _ = state
        g = grad(x)
        delta = -_graph.psd_solve(_hessian(x, c, mode, eps, gamma_prior, score_prior, proj), g)
        slope = jnp.dot(g, delta)
        trial = jax.vmap(lambda t: fun(x + t * delta))(steps)
        ok = trial <= f + 1e-4 * steps * slope + rounding * jnp.abs(f)
        t = jnp.where(jnp.any(ok), steps[jnp.argmax(ok)], 0.0)
        x_new = x + t * delta
        f_new = jnp.where(t > 0, trial[jnp.argmax(ok)], f)
        converged = (jnp.max(jnp.abs(t * delta)) < tol) | (jnp.max(jnp.abs(g), initial=0.0) <= gtol)
        return x_new, f_new, it + 1, converged | (t == 0), converged

    def cond(state):
        _, _, it, stop, _ = state
        return (~stop) & (it < max_iter)

    x0 = jnp.zeros(n, dt)
    init = (x0, fun(x0), jnp.int32(0), jnp.bool_(False), jnp.bool_(False))
    x, _, it, _, done = jax.lax.while_loop(cond, body, init)
    return x, it, done


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3, 4, 5, 6))
def _argmin(c, mode, eps, gamma_prior, score_prior, tol, max_iter):
    return _newton(c, mode, eps, gamma_prior, score_prior, tol, max_iter)


def _argmin_fwd(c, mode, eps, gamma_prior, score_prior, tol, max_iter):
    out = _newton(c, mode, eps, gamma_prior, score_prior, tol, max_iter)
    return out, (c, out[0])


def _argmin_bwd(mode, eps, gamma_prior, score_prior, tol, max_iter, res, ct):
    # Implicit function theorem on grad f(x*, c) = 0:  dx* = -(H + P)^{-1} d_c grad f.
    c, x = res
    proj = _graph.component_projector(_graph.components(c), x.dtype)
    u = _graph.psd_solve(_hessian(x, c, mode, eps, gamma_prior, score_prior, proj), ct[0])
    _, vjp = jax.vjp(lambda cc: _grad(x, cc, mode, eps, gamma_prior, score_prior), c)
    (ct_c,) = vjp(-u)
    return (ct_c,)


_argmin.defvjp(_argmin_fwd, _argmin_bwd)


def _fit_one(c, mode, eps, gamma_prior, score_prior, tol, max_iter):
    x, it, done = _argmin(c, mode, eps, gamma_prior, score_prior, tol, max_iter)
    s, g = _split(x, c, mode, eps)
    labels = _graph.components(c)
    s = _graph.centre_per_component(jnp.where(c.item_mask, s, 0), labels)
    gn = jnp.max(jnp.abs(_grad(jax.lax.stop_gradient(x), c, mode, eps, gamma_prior, score_prior)))
    return SoftBTSolution(s, g, it, done, gn)


@functools.partial(jax.jit, static_argnames=("mode", "eps", "gamma_prior", "score_prior", "tol", "max_iter"))
def _fit(c, mode, eps, gamma_prior, score_prior, tol, max_iter):
    return _graph.batched(_fit_one, c, mode=mode, eps=eps, gamma_prior=gamma_prior, score_prior=score_prior,
                          tol=tol, max_iter=max_iter)


def _settings(c, debias, eps, gamma_prior, score_prior, tol, max_iter):
    mode = _mode(debias)
    if not 0 <= eps < 0.5:
        raise ValueError(f"eps must be in [0, 0.5), got {eps!r}")
    if not score_prior >= 0:
        raise ValueError(f"score_prior must be >= 0, got {score_prior!r}")
    if not gamma_prior > 0:
        raise ValueError(f"gamma_prior must be > 0, got {gamma_prior!r}")
    if tol is None:
        tol = 1e-10 if c.p.dtype == jnp.float64 else 1e-5
    return mode, float(eps), float(gamma_prior), float(score_prior), float(tol), int(max_iter)


def fit_poe_bradley_terry(c: Comparisons, *, debias=False, eps=1e-6, gamma_prior=1e-6, score_prior=0.0,
                          tol=None, max_iter=100) -> SoftBTSolution:
    """Maximise the soft Bradley-Terry PoE likelihood; report convergence.

    Args:
        c: comparisons, any batch shape.
        debias: ``False`` (``gamma = 0``), ``True``/``"mean"`` (``gamma`` from
            the mean probability, PoE App. A.9) or ``"learn"`` (fit ``gamma``).
        eps: probabilities are clipped to ``[eps, 1 - eps]``.
        gamma_prior: precision of the weak ``N(0, 1/gamma_prior)`` prior on a learnt gamma.
        score_prior: precision ``lambda`` of an optional ``N(0, 1/lambda)`` prior
            on every score (MAP instead of maximum likelihood; 0 = off). Use it
            for hard 0/1 outcomes, where an undefeated item's ML score is infinite.
        tol: stop when the Newton step's max-norm is below ``tol`` (default
            ``1e-5`` in float32, ``1e-10`` in float64).
        max_iter: Newton iteration cap.

    Returns:
        :class:`SoftBTSolution`.
    """
    return _fit(c, *_settings(c, debias, eps, gamma_prior, score_prior, tol, max_iter))


def poe_bradley_terry(c: Comparisons, *, debias=False, eps=1e-6, score_prior=0.0, tol=None,
                      max_iter=100) -> jax.Array:
    """PoE with soft Bradley-Terry experts (PoE-BT, PoE §3.2); see :func:`fit_poe_bradley_terry`.

    Returns:
        ``[..., N]`` scores centred per connected component; items in no
        comparison and padded items get 0. Differentiable in ``p`` and
        ``weight`` by implicit differentiation.
    """
    return fit_poe_bradley_terry(c, debias=debias, eps=eps, score_prior=score_prior, tol=tol,
                                 max_iter=max_iter).scores
