"""The soft Bradley-Terry likelihood (PoE eq. 3) of one context in its edge space: objective, gradient, Hessian.

Private to the scoring package: the Newton loop (:mod:`jaxrank.scoring._soft_bt_newton`), hard BT's large
sparse pools (:mod:`jaxrank.scoring._soft_bt_sparse`) and the public API (:mod:`jaxrank.scoring.soft_bt`, whose
module docstring describes the method) share it. The edge-space problem (:class:`_Problem`), the objective in a
form that keeps float32's relative accuracy (:func:`_nll_d`) and its change between two points
(:func:`_nll_change`), the gradient and the Laplacian-structured Hessian.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrank import _graph


def _fixed_gamma(c, mode, eps):
    if mode == "mean":
        total = jnp.sum(c.weight)   # no live comparison: the neutral mean 0.5 (gamma 0), not 0 (gamma +13.8)
        pbar = jnp.where(total > 0, jnp.sum(c.weight * c.p) / jnp.maximum(total, 1e-30), 0.5)
        pbar = jnp.clip(pbar, eps, 1 - eps)
        return jnp.log1p(-pbar) - jnp.log(pbar)
    return jnp.zeros((), c.p.dtype)


class _Problem(NamedTuple):
    """One context's likelihood data in its edge space (``_graph.edges``)."""

    e: _graph.Edges
    w: jax.Array      # summed comparison weights per edge
    wp: jax.Array     # summed w * clip(p) per edge
    wl: jax.Array     # summed w * (1 - clip(p)) per edge (not w - wp: exact when p is near 1)
    gamma: jax.Array  # the fixed gamma (unused when learnt)
    free: jax.Array   # 1 where a learnt gamma is identified by the comparisons, else 0 (gamma held at 0)


def _problem(c, mode, eps):
    e = _graph.edges(c)
    pc = jnp.clip(c.p, eps, 1 - eps)
    w, wp, wl = _graph.reduce(e, c.weight, c.weight * pc, c.weight * (1 - pc))
    free = jnp.ones((), c.p.dtype)
    if mode == "learn":
        # Where no comparison pins gamma down, the likelihood is flat along (s + t phi, gamma + t)
        # and only the weak prior picks gamma = 0: below float32's resolution, so gamma would land
        # wherever the iteration stopped. Decide that exactly from the graph and hold gamma at 0.
        on = jax.lax.stop_gradient(w)
        labels = _graph.components(c, e=e, w=on)
        free = _graph.bias_identified(e, on, labels).astype(c.p.dtype)
    return _Problem(e, w, wp, wl, _fixed_gamma(c, mode, eps), free)


def _residual(d, pr):
    """Edge residuals ``r = w sigmoid(d) - w p`` and the magnitude of their two terms.

    Where the edge's ``p`` is above 1/2 the residual is computed as
    ``w (1 - p) - w sigmoid(-d)``: both terms are small near saturation, so the
    difference keeps its digits (``w sigmoid(d) - w p`` would cancel two numbers
    close to ``w`` and lose them in float32).
    """
    hi = pr.wp > pr.wl
    qa, qb = jax.nn.sigmoid(d), jax.nn.sigmoid(-d)
    r = jnp.where(hi, pr.wl - pr.w * qb, pr.w * qa - pr.wp)
    mag = jnp.where(hi, pr.wl + pr.w * qb, pr.w * qa + pr.wp)
    return r, mag, qa * qb


def _split(x, pr, mode):
    n = pr.e.num_items
    if mode == "learn":
        return x[:n], x[n]
    return x, pr.gamma


def _nll_d(x, d, pr, mode, st):
    """The objective at ``x`` given its edge differences ``d = s_i - s_j - gamma``."""
    s, g = _split(x, pr, mode)
    # -sum_k [w p log sig(d) + w (1 - p) log sig(-d)] = sum_k [w softplus(-|d|) + (w (1 - p) d if d >= 0 else
    # -w p d)]: every term >= 0, so the sum keeps float32's relative accuracy and the line search's
    # allowance of 16 eps |f| covers its rounding. (The form w softplus(-d) + w (1 - p) d cancels two terms
    # of size w |d| where d < 0: near a nearly separable optimum its rounding, ~1e-6, hid decreases of 1e-8,
    # the full Newton step was rejected pass after pass and the error halved every two passes.)
    f = (jnp.sum(pr.w * jax.nn.softplus(-jnp.abs(d)) + jnp.where(d >= 0, pr.wl * d, -pr.wp * d))
         + 0.5 * st.score_prior * jnp.sum(s**2))
    if mode == "learn":
        f = f + 0.5 * st.gamma_prior * g**2
    return f


def _nll_change(x, d, step, d_new, pr, mode, st):
    """``(f(x + step) - f(x), sum of the magnitudes of its terms)`` from per-edge changes, for edge
    differences ``d`` at ``x`` and ``d_new`` at ``x + step`` (score prior only; ``mode`` ``"off"``).

    ``f`` is ``sum_k w softplus(-d) + (1 - p) w d`` (:func:`_nll_d`); each edge's change is
    ``w [softplus(-d_new) - softplus(-d)] + w (1 - p) (d_new - d)`` with ``d_new - d`` from ``step``
    itself, and ``softplus(u') - softplus(u) = (u' - u) + softplus(-u') - softplus(-u)`` where both
    are positive, so no term subtracts two large numbers: the change of a loosely held item
    (~1e-7) is resolved where ``f`` itself (~1e3) is only known to ~1e-4 in float32.
    """
    dd = _diffs(step, pr, mode)        # linear in x: the exact change of each edge's difference
    u, u_new = -d, -d_new
    both = jnp.minimum(u, u_new) > 0
    sp = jnp.where(both, -dd + jax.nn.softplus(-u_new) - jax.nn.softplus(-u),
                   jax.nn.softplus(u_new) - jax.nn.softplus(u))
    # the slope's coefficient as the gradient has it (:func:`_residual`: ``w (1 - p)`` where ``p > 1/2``,
    # else ``w - w p``), so the change's derivative is exactly the gradient's (w - w p alone is off by
    # its rounding, ~1e-7 per edge, which summed over 10^5 edges outweighed the changes it judges)
    coef = jnp.where(pr.wp > pr.wl, pr.wl, pr.w - pr.wp)
    terms = pr.w * sp + coef * dd
    s, s_new = _split(x, pr, mode)[0], _split(x + step, pr, mode)[0]
    from_prior = 0.5 * st.score_prior * jnp.sum((s_new - s) * (s_new + s))
    return jnp.sum(terms) + from_prior, jnp.sum(jnp.abs(terms)) + jnp.abs(from_prior)


def _diffs(x, pr, mode):
    s, g = _split(x, pr, mode)
    return _graph.incidence(pr.e, s) - pr.free * g


def _nll_p(x, pr, mode, st):
    return _nll_d(x, _diffs(x, pr, mode), pr, mode, st)


def _grad_from(x, wt_r, sum_r, mode, st):
    """Gradient from ``W^T r`` and ``1^T r`` of the edge residuals ``r = w q - w p``:
    ``[W^T r + lambda s, -1^T r + lambda_g gamma]``."""
    n = wt_r.shape[0]
    gs = wt_r + st.score_prior * x[:n]
    if mode == "learn":
        return jnp.concatenate([gs, (-sum_r + st.gamma_prior * x[n])[None]])
    return gs


def _hessian_from(lap, wt_h, sum_h, mode, st, proj):
    """``[[L(h) + lambda I + P, -W^T h], [-h^T W, 1^T h + lambda_g]]`` (the last row/column if learnt).

    ``P`` (the per-component projector) acts only on per-component constants,
    along which the gradient is always 0 (and the scores stay centred), so it
    never changes a Newton step or the implicit derivative; it only makes the
    system definite.
    """
    n = lap.shape[0]
    hss = lap + proj + st.score_prior * jnp.eye(n, dtype=lap.dtype)
    if mode != "learn":
        return hss
    hsg = -wt_h
    hgg = sum_h + st.gamma_prior
    top = jnp.concatenate([hss, hsg[:, None]], axis=1)
    bottom = jnp.concatenate([hsg, hgg[None]])[None, :]
    return jnp.concatenate([top, bottom], axis=0)


def _grad_r(x, r, pr, mode, st):
    return _grad_from(x, _graph.incidence_t(pr.e, r), pr.free * jnp.sum(r), mode, st)


def _grad_p(x, pr, mode, st):
    return _grad_r(x, _residual(_diffs(x, pr, mode), pr)[0], pr, mode, st)


def _hessian_h(h, pr, mode, st, proj):
    wt_h = pr.free * _graph.incidence_t(pr.e, h) if mode == "learn" else None
    return _hessian_from(_graph.laplacian(pr.e, h), wt_h, pr.free * jnp.sum(h), mode, st, proj)


def _hessian_p(x, pr, mode, st, proj, floor=1e-12):
    q = jax.nn.sigmoid(_diffs(x, pr, mode))
    return _hessian_h(pr.w * jnp.maximum(q * (1 - q), floor), pr, mode, st, proj)


def _nll(x, c, mode, st):
    """Negative log-likelihood (PoE eq. 3) of ``x = s`` or ``x = [s, gamma]`` for one context."""
    return _nll_p(x, _problem(c, mode, st.eps), mode, st)


def _grad(x, c, mode, st):
    """Gradient of :func:`_nll` in ``x``."""
    return _grad_p(x, _problem(c, mode, st.eps), mode, st)


def _hessian(x, c, mode, st, proj):
    """Hessian of :func:`_nll` in ``x`` plus ``proj`` on the score block."""
    return _hessian_p(x, _problem(c, mode, st.eps), mode, st, proj)
