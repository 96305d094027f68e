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
with an Armijo backtracking line search that tries the full step first; a
``lax.while_loop`` keeps per-context state, so contexts of a batch converge
independently. Small, dense contexts work on ``[N, N]`` aggregated edges
(``_graph.edges``), so an iteration does no gather or scatter. Gradients
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

_STEPS = 30  # at most 30 halvings of the Newton step (Armijo backtracking)


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


class _Problem(NamedTuple):
    """One context's likelihood data in its edge space (``_graph.edges``)."""

    e: _graph.Edges
    w: jax.Array      # summed comparison weights per edge
    wp: jax.Array     # summed w * clip(p) per edge
    gamma: jax.Array  # the fixed gamma (unused when learnt)


def _problem(c, mode, eps):
    e = _graph.edges(c)
    w, wp = _graph.reduce(e, c.weight, c.weight * _clipped_p(c, eps))
    return _Problem(e, w, wp, _fixed_gamma(c, mode, eps))


def _split(x, pr, mode):
    n = pr.e.num_items
    if mode == "learn":
        return x[:n], x[n]
    return x, pr.gamma


def _nll_p(x, pr, mode, gamma_prior, score_prior):
    # sum_k w [p log sig(d) + (1 - p) log sig(-d)] = sum_k [w log sig(d) - (w - w p) d]
    s, g = _split(x, pr, mode)
    d = _graph.incidence(pr.e, s) - g
    f = -jnp.sum(pr.w * jax.nn.log_sigmoid(d) - (pr.w - pr.wp) * d)
    f = f + 0.5 * score_prior * jnp.sum(s**2)
    if mode == "learn":
        f = f + 0.5 * gamma_prior * g**2
    return f


def _grad_p(x, pr, mode, gamma_prior, score_prior):
    s, g = _split(x, pr, mode)
    r = pr.w * jax.nn.sigmoid(_graph.incidence(pr.e, s) - g) - pr.wp
    gs = _graph.incidence_t(pr.e, r) + score_prior * s
    if mode == "learn":
        return jnp.concatenate([gs, (-jnp.sum(r) + gamma_prior * g)[None]])
    return gs


def _hessian_p(x, pr, mode, gamma_prior, score_prior, proj, floor=1e-12):
    """Exact Hessian plus the per-component anchor ``P`` on the score block.

    ``P`` acts only on per-component constants, along which the gradient is
    always 0 (and the scores stay centred), so it never changes a Newton step
    or the implicit derivative; it only makes the system definite.
    """
    s, g = _split(x, pr, mode)
    q = jax.nn.sigmoid(_graph.incidence(pr.e, s) - g)
    h = pr.w * jnp.maximum(q * (1 - q), floor)
    hss = _graph.laplacian(pr.e, h) + proj + score_prior * jnp.eye(pr.e.num_items, dtype=h.dtype)
    if mode != "learn":
        return hss
    hsg = -_graph.incidence_t(pr.e, h)
    hgg = jnp.sum(h) + gamma_prior
    top = jnp.concatenate([hss, hsg[:, None]], axis=1)
    bottom = jnp.concatenate([hsg, hgg[None]])[None, :]
    return jnp.concatenate([top, bottom], axis=0)


def _nll(x, c, mode, eps, gamma_prior, score_prior):
    """Negative log-likelihood (PoE eq. 3) of ``x = s`` or ``x = [s, gamma]`` for one context."""
    return _nll_p(x, _problem(c, mode, eps), mode, gamma_prior, score_prior)


def _grad(x, c, mode, eps, gamma_prior, score_prior):
    """Gradient of :func:`_nll` in ``x``."""
    return _grad_p(x, _problem(c, mode, eps), mode, gamma_prior, score_prior)


def _hessian(x, c, mode, eps, gamma_prior, score_prior, proj):
    """Hessian of :func:`_nll` in ``x`` plus ``proj`` on the score block."""
    return _hessian_p(x, _problem(c, mode, eps), mode, gamma_prior, score_prior, proj)


def _newton_step(ops, state, mode, gamma_prior, score_prior, tol):
    """One damped Newton step for one context; ``state = (x, f, it, stop, converged)``."""
    pr, proj = ops
    x, f, it, _, _ = state
    dt = x.dtype
    fun = functools.partial(_nll_p, pr=pr, mode=mode, gamma_prior=gamma_prior, score_prior=score_prior)
    g = _grad_p(x, pr, mode, gamma_prior, score_prior)
    # A floor on q(1 - q) keeps the Newton system well conditioned when a comparison
    # saturates (it only damps such steps; the fixed point is unchanged).
    floor = 1e-6 if dt == jnp.float32 else 1e-12
    hess = _hessian_p(x, pr, mode, gamma_prior, score_prior, proj, floor)
    delta = -_graph.psd_solve(hess, g)
    slope = jnp.dot(g, delta)
    # Fall back to a diagonally scaled gradient step if the Newton direction is not a
    # finite descent direction (rounding in a nearly singular system).
    bad = ~(jnp.all(jnp.isfinite(delta)) & (slope < 0))
    safe = -g / (jnp.abs(jnp.diagonal(hess)) + 1.0)
    delta = jnp.where(bad, safe, delta)
    slope = jnp.where(bad, jnp.dot(g, safe), slope)
    rounding = 16 * jnp.finfo(dt).eps
    bound = lambda t: f + 1e-4 * t * slope + rounding * jnp.abs(f)

    # Backtracking (Armijo): the full step is tried first and nearly always
    # accepted, so this usually costs one evaluation of the likelihood.
    def ls_cond(ls):
        t, ft, k = ls
        return ~(ft <= bound(t)) & (k < _STEPS)

    def ls_body(ls):
        t, _, k = ls
        t = 0.5 * t
        return t, fun(x + t * delta), k + 1

    t, ft, _ = jax.lax.while_loop(ls_cond, ls_body, (jnp.ones((), dt), fun(x + delta), jnp.int32(1)))
    ok = ft <= bound(t)
    t = jnp.where(ok, t, 0.0)
    games = _graph.item_sums(pr.e, pr.w, pr.w)
    gtol = 64 * jnp.finfo(dt).eps * jnp.maximum(1.0, jnp.max(games))
    # A step counts towards convergence only if the line search accepted it; a failed
    # search stops the loop unconverged (reported), never as converged.
    converged = (ok & (jnp.max(jnp.abs(t * delta)) < tol)) | (jnp.max(jnp.abs(g), initial=0.0) <= gtol)
    return x + t * delta, jnp.where(ok, ft, f), it + 1, converged | ~ok, converged


def _start(pr, mode, proj):
    """Least-squares fit of ``s_i - s_j - gamma`` to ``logit(p)`` (one Laplacian solve).

    The soft-BT optimum matches the edges' mean logits wherever the graph lets it;
    starting there saves Newton steps when probabilities are far from 1/2.
    """
    pbar = jnp.clip(pr.wp / jnp.where(pr.w > 0, pr.w, 1), 1e-6, 1 - 1e-6)   # finite even with eps = 0
    z = jnp.where(pr.w > 0, jnp.log(pbar) - jnp.log1p(-pbar) + pr.gamma, 0)
    s = _graph.psd_solve(_graph.laplacian(pr.e, pr.w) + proj, _graph.incidence_t(pr.e, pr.w * z))
    if mode == "learn":
        return jnp.concatenate([s, pr.gamma[None]])
    return s


def _newton(c, proj, mode, eps, gamma_prior, score_prior, tol, max_iter):
    """Newton's method on a batch ``[B]`` of contexts (``_graph.while_per_context``)."""
    pr = jax.vmap(functools.partial(_problem, mode=mode, eps=eps))(c)

    def init(pr1, proj1):
        x0 = _start(pr1, mode, proj1)
        f0 = _nll_p(x0, pr1, mode, gamma_prior, score_prior)
        return x0, f0, jnp.int32(0), jnp.bool_(False), jnp.bool_(False)

    state = jax.vmap(init)(pr, proj)
    cont = lambda st: (~st[3]) & (st[2] < max_iter)
    step = functools.partial(_newton_step, mode=mode, gamma_prior=gamma_prior, score_prior=score_prior, tol=tol)
    x, _, it, _, done = _graph.while_per_context(cont, step, (pr, proj), state)
    return x, it, done


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4, 5, 6, 7))
def _argmin(c, proj, mode, eps, gamma_prior, score_prior, tol, max_iter):
    return _newton(c, proj, mode, eps, gamma_prior, score_prior, tol, max_iter)


def _argmin_fwd(c, proj, mode, eps, gamma_prior, score_prior, tol, max_iter):
    out = _newton(c, proj, mode, eps, gamma_prior, score_prior, tol, max_iter)
    return out, (c, proj, out[0])


def _argmin_bwd(mode, eps, gamma_prior, score_prior, tol, max_iter, res, ct):
    # Implicit function theorem on grad f(x*, c) = 0:  dx* = -(H + P)^{-1} d_c grad f.
    def one(c, proj, x, ctx):
        u = _graph.psd_solve(_hessian(x, c, mode, eps, gamma_prior, score_prior, proj), ctx)
        _, vjp = jax.vjp(lambda cc: _grad(x, cc, mode, eps, gamma_prior, score_prior), c)
        return vjp(-u)[0]

    c, proj, x = res
    return jax.vmap(one)(c, proj, x, ct[0]), jnp.zeros_like(proj)


_argmin.defvjp(_argmin_fwd, _argmin_bwd)


def _finish(c, labels, x, it, done, mode, eps, gamma_prior, score_prior):
    n = c.num_items
    s, g = (x[:n], x[n]) if mode == "learn" else (x, _fixed_gamma(c, mode, eps))
    s = _graph.centre_per_component(jnp.where(c.item_mask, s, 0), labels)
    gn = jnp.max(jnp.abs(_grad(jax.lax.stop_gradient(x), c, mode, eps, gamma_prior, score_prior)))
    return SoftBTSolution(s, g, it, done, gn)


def _fit_flat(c, mode, eps, gamma_prior, score_prior, tol, max_iter):
    labels = jax.vmap(_graph.components)(c)
    proj = jax.vmap(_graph.component_projector, in_axes=(0, None))(labels, c.p.dtype)
    x, it, done = _argmin(c, proj, mode, eps, gamma_prior, score_prior, tol, max_iter)
    fin = functools.partial(_finish, mode=mode, eps=eps, gamma_prior=gamma_prior, score_prior=score_prior)
    return jax.vmap(fin)(c, labels, x, it, done)


def _fit_one(c, mode, eps, gamma_prior, score_prior, tol, max_iter):
    """:class:`SoftBTSolution` of one context (unbatched ``c``)."""
    flat = jax.tree.map(lambda x: x[None], c)
    return jax.tree.map(lambda x: x[0], _fit_flat(flat, mode, eps, gamma_prior, score_prior, tol, max_iter))


@functools.partial(jax.jit, static_argnames=("mode", "eps", "gamma_prior", "score_prior", "tol", "max_iter"))
def _fit(c, mode, eps, gamma_prior, score_prior, tol, max_iter):
    flat, shape = _graph.flatten_batch(c)
    return _graph.unflatten_batch(_fit_flat(flat, mode, eps, gamma_prior, score_prior, tol, max_iter), shape)


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
