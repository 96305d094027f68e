"""Private: the per-context algebra of the general PoE solver (:mod:`jaxrank.scoring.poe`).

For one context with an expert ``log q(d | p, theta)``: the objective ``F(s, phi)``
of ``poe``'s docstring, every comparison's derivatives of ``w log q`` in
``z = (d, phi)`` by elementwise autodiff, the gradient, the Hessian (a Laplacian
weighted by the curvatures, plus the learnt parameters' rows), the Newton
direction by conjugate gradients for large pools, and the maximum test.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrank import _graph
from jaxrank.scoring.experts import EPS, Expert


class Ops(NamedTuple):
    """One context's data: its comparisons (sparse edge space) and parameters."""

    e: _graph.Edges
    p: jax.Array        # p; on comparisons of weight 0 clipped to [EPS, 1 - EPS] (an expert never sees 0 or 1 there)
    w: jax.Array
    theta: dict         # theta after expert.from_context; learnt entries hold the start / prior mean
    labels: jax.Array   # connected components (the projector P is built from them only beside a dense Hessian)
    prior: jax.Array    # this context's score-prior precision


def make_ops(c, theta, labels, prior, expert: Expert) -> Ops:
    w = c.weight
    # a comparison of weight 0 keeps its p (the derivative in its weight is -log q there), clipped to the open
    # interval so that log q stays finite for an expert that takes log p
    p = jnp.where(w > 0, c.p, jnp.clip(c.p, EPS, 1 - EPS).astype(c.p.dtype))
    if expert.from_context is not None:
        theta = expert.from_context(p, w, theta)
    theta = {k: jnp.asarray(v, c.p.dtype) for k, v in theta.items()}
    return Ops(_graph.edges(c, dense=False), p, w, theta, labels, prior)


def centre_scores(g, ops: Ops):
    """``g`` with its score block projected off per-component constants (``g_s - P g_s``, ``O(N)``)."""
    n = ops.e.num_items
    return g.at[:n].set(_graph.centre_per_component(g[:n], ops.labels))


def theta_at(x, ops, expert):
    n = ops.e.num_items
    return {**ops.theta, **{k: x[n + a] for a, k in enumerate(expert.learnt)}}


def phi0(ops, expert):
    return jnp.stack([ops.theta[k] for k in expert.learnt]) if expert.learnt else jnp.zeros(0, ops.p.dtype)


def objective(x, ops: Ops, expert: Expert, st) -> jax.Array:
    """``F(x)`` of one context at ``x = [s, phi]`` (the module docstring's equation)."""
    n = ops.e.num_items
    d = _graph.incidence(ops.e, x[:n])
    ll = expert.log_density(d, ops.p, theta_at(x, ops, expert))
    # w * log q on every comparison (its derivative in w is log q, at w = 0 too); a comparison of weight 0 whose
    # log q is not finite adds 0
    ll = jnp.where((ops.w > 0) | jnp.isfinite(ll), ll, 0)
    f = -jnp.sum(ops.w * ll) + 0.5 * ops.prior * jnp.sum(x[:n] ** 2)
    return f + 0.5 * st.theta_prior * jnp.sum((x[n:] - phi0(ops, expert)) ** 2)


class Local(NamedTuple):
    """Per-comparison derivatives of ``w log q`` in ``z = (d, phi)``."""

    d: jax.Array        # [R] score differences
    value: jax.Array    # [R] w log q
    g: jax.Array        # [R, 1 + m]  w d log q / dz
    h: jax.Array        # [R, 1 + m, 1 + m]  w d^2 log q / dz^2


def local_derivatives(x, ops: Ops, expert: Expert) -> Local:
    """Values, gradients and Hessians of every comparison's ``w log q`` (elementwise autodiff, no vmap)."""
    n, m = ops.e.num_items, len(expert.learnt)
    d = _graph.incidence(ops.e, x[:n])
    zs = (d,) + tuple(jnp.broadcast_to(x[n + a], d.shape) for a in range(m))

    def ll(*z):
        return expert.log_density(z[0], ops.p, {**ops.theta, **dict(zip(expert.learnt, z[1:]))})

    grad = jax.grad(lambda *z: jnp.sum(ll(*z)), argnums=tuple(range(m + 1)))
    one, zero = jnp.ones_like(d), jnp.zeros_like(d)
    cols = []
    for a in range(m + 1):
        g, col = jax.jvp(grad, zs, tuple(one if b == a else zero for b in range(m + 1)))
        cols.append(jnp.stack(col, axis=-1))
    wk = jnp.where(ops.w > 0, ops.w, 0)
    clean = lambda v: jnp.where((ops.w > 0).reshape(ops.w.shape + (1,) * (v.ndim - 1)), v, 0)
    return Local(d, clean(wk * ll(*zs)), clean(wk[:, None] * jnp.stack(g, axis=-1)),
                  clean(wk[:, None, None] * jnp.stack(cols, axis=-1)))


def gradient(x, loc: Local, ops: Ops, expert, st, wt_g=None):
    """``grad F`` at ``x`` (``wt_g = W^T (w g)`` if the caller has it)."""
    n = ops.e.num_items
    wt_g = _graph.incidence_t(ops.e, loc.g[:, 0]) if wt_g is None else wt_g
    gs = -wt_g + ops.prior * x[:n]
    gphi = -jnp.sum(loc.g[:, 1:], axis=0) + st.theta_prior * (x[n:] - phi0(ops, expert))
    return jnp.concatenate([gs, gphi])


def objective_from(x, loc: Local, ops: Ops, expert, st):
    """:func:`objective` from the comparisons' values already in ``loc``."""
    n = ops.e.num_items
    f = -jnp.sum(loc.value) + 0.5 * ops.prior * jnp.sum(x[:n] ** 2)
    return f + 0.5 * st.theta_prior * jnp.sum((x[n:] - phi0(ops, expert)) ** 2)


def projector_scale(curv, n):
    """The mean weighted degree ``sum_k 2 |curv_k| / n`` (1 where it is 0): the anchor ``P`` on the scale of the
    Laplacian it is added to. ``L + P`` with curvatures ``1e-8`` (a Gaussian expert's ``sigma = 1e4``) lost ``L``
    to float32's rounding of ``P``'s ``1 / n`` (scores 2.8e-2 off); ``(L + a P)^{-1} g = L^+ g + P g / a`` is the
    same solution for the centred right-hand sides of a Newton step."""
    a = jnp.sum(2 * jnp.abs(curv)) / n
    return jnp.where((a > 0) & jnp.isfinite(a), a, jnp.ones_like(a))


def hessian_matrix(curv, loc: Local, ops: Ops, st, proj_scale=1.0):
    """``[[L(curv) + lambda I + a P, H_s,phi], [H_phi,s, H_phi,phi]]`` (dense; ``a = proj_scale``)."""
    n, m = ops.e.num_items, loc.g.shape[1] - 1
    proj = proj_scale * _graph.component_projector(ops.labels, curv.dtype)
    hss = _graph.laplacian(ops.e, curv) + proj + ops.prior * jnp.eye(n, dtype=curv.dtype)
    if m == 0:
        return hss
    hsp = jnp.stack([-_graph.incidence_t(ops.e, loc.h[:, 0, 1 + a]) for a in range(m)], axis=1)
    hpp = -jnp.sum(loc.h[:, 1:, 1:], axis=0) + st.theta_prior * jnp.eye(m, dtype=curv.dtype)
    return jnp.block([[hss, hsp], [hsp.T, hpp]])


def direction_dense(g, curv, loc: Local, ops: Ops, st):
    """The Newton direction ``-H^{-1} g`` (dense; ``H`` as :func:`hessian_matrix` with the anchor scaled by
    :func:`projector_scale`, ``g``'s score block centred per component), and ``H``'s diagonal.

    With learnt parameters, by block elimination with their Schur complement in residual form,
    ``S = theta_prior I + sum_k e_k + R^T diag(curv) R + X^T (P + lambda I) X``: ``X = A^{-1} H_s,phi``
    (``A`` the score block), ``u_k = -h_dphi,k / curv_k``, ``R = u - W X`` (the residual of the weighted
    least-squares fit of ``u`` by score differences) and ``e_k = -h_phiphi,k - h_dphi,k h_dphi,k^T / curv_k``
    each comparison's own Schur complement (0 where it is at the rounding level of its terms: a Gaussian
    in ``d - a phi``). Every term is a sum of non-negative parts, so a parameter that only its prior fixes
    (a learnt bias on a tree of comparisons, where ``R = 0``) gets ``S = theta_prior``, not the float32
    rounding of ``H_phi,phi - H_phi,s A^{-1} H_s,phi`` (a difference of two numbers ``1e6`` times larger).
    """
    n, m = ops.e.num_items, loc.g.shape[1] - 1
    dt = curv.dtype
    proj = projector_scale(curv, n) * _graph.component_projector(ops.labels, dt)
    a = _graph.laplacian(ops.e, curv) + proj + ops.prior * jnp.eye(n, dtype=dt)
    if m == 0:
        return -_graph.psd_solve(a, g), jnp.diagonal(a)
    hdp, hpp = loc.h[:, 0, 1:], loc.h[:, 1:, 1:]
    hsp = jnp.stack([-_graph.incidence_t(ops.e, hdp[:, k]) for k in range(m)], axis=1)
    factor = _graph.psd_factor(a)
    sol = _graph.factor_solve(factor, jnp.concatenate([g[:n, None], hsp], axis=1))
    y, xx = sol[:, 0], sol[:, 1:]
    live = curv > 0
    safe_c = jnp.where(live, curv, 1)
    u = jnp.where(live[:, None], -hdp / safe_c[:, None], 0)
    res = u - _graph.incidence(ops.e, xx)
    own = -hpp - jnp.where(live[:, None, None], hdp[:, :, None] * hdp[:, None, :] / safe_c[:, None, None], 0)
    level = 8 * jnp.finfo(dt).eps * (jnp.abs(hpp) + jnp.abs(hdp[:, :, None] * hdp[:, None, :]) / safe_c[:, None, None])
    own = jnp.where(jnp.abs(own) <= level, 0, own)
    schur = (st.theta_prior * jnp.eye(m, dtype=dt) + jnp.sum(own, axis=0) + res.T @ (curv[:, None] * res)
             + xx.T @ (proj @ xx) + ops.prior * xx.T @ xx)
    reduced = g[n:] - hsp.T @ y
    step_phi = -jnp.linalg.solve(schur, reduced)
    step_s = -y - xx @ step_phi
    hpp_full = -jnp.sum(hpp, axis=0) + st.theta_prior * jnp.eye(m, dtype=dt)
    return jnp.concatenate([step_s, step_phi]), jnp.concatenate([jnp.diagonal(a), jnp.diagonal(hpp_full)])


def direction_cg(g_c, curv, loc, ops, st):
    """The Newton direction by Jacobi-preconditioned CG, the Hessian applied matrix-free."""
    e, n, m = ops.e, ops.e.num_items, loc.g.shape[1] - 1
    size = _graph.component_sizes(ops.labels, curv.dtype)
    pmean = functools.partial(_graph.component_mean, labels=ops.labels, sizes=size)
    hsp = [-loc.h[:, 0, 1 + a] for a in range(m)]
    hpp = -jnp.sum(loc.h[:, 1:, 1:], axis=0) + st.theta_prior * jnp.eye(m, dtype=curv.dtype)

    def matvec(u):
        v, t = u[:n], u[n:]
        top = _graph.incidence_t(e, curv * _graph.incidence(e, v)) + pmean(v) + ops.prior * v
        wv = _graph.incidence(e, v)
        for a in range(m):
            top = top + _graph.incidence_t(e, hsp[a]) * t[a]
        bottom = jnp.stack([jnp.dot(hsp[a], wv) for a in range(m)]) + hpp @ t if m else t
        return jnp.concatenate([top, bottom])

    deg = _graph.item_sums(e, curv, curv)
    diag = jnp.concatenate([deg + 1 / size + ops.prior, jnp.diagonal(hpp)])
    tol = 1e-5 if curv.dtype == jnp.float32 else 1e-10
    x, _ = jax.scipy.sparse.linalg.cg(matvec, -g_c, tol=tol, maxiter=n + m + 1, M=lambda u: u / diag)
    return x.at[:n].add(-pmean(x[:n])), diag


def start_differences(ops: Ops, expert: Expert):
    if expert.start is None:
        return jnp.zeros_like(ops.p)
    return jnp.where(ops.w > 0, expert.start(ops.p, ops.theta), 0)


def start_gradient(ops: Ops, expert: Expert):
    """``-W^T (w d0)``: the gradient at ``s = 0`` of the least-squares fit to the start differences."""
    return -_graph.incidence_t(ops.e, jnp.where(ops.w > 0, ops.w, 0) * start_differences(ops, expert))


def true_hessian(x, ops: Ops, expert: Expert, st):
    loc = local_derivatives(x, ops, expert)
    return hessian_matrix(-loc.h[:, 0, 0], loc, ops, st)


def solve_true_hessian(x, ops: Ops, expert: Expert, st, rhs):
    """``(H + P)^{-1} rhs`` with the true Hessian at ``x``: Cholesky, or CG on large sparse pools (``O(N + R)``).

    The CG solution's score block is centred per component, and the dense one's anchor is scaled by
    :func:`projector_scale` (``a P``): they differ from ``(H + P)^{-1} rhs`` by multiples of ``P rhs_s`` (to
    which every derivative of the gradient in the data is orthogonal, so implicit derivatives are the same).
    """
    loc = local_derivatives(x, ops, expert)
    if _graph.use_cg(ops.e):
        new, _ = direction_cg(-rhs, -loc.h[:, 0, 0], loc, ops, st)
        return new
    curv = -loc.h[:, 0, 0]
    return _graph.psd_solve(hessian_matrix(curv, loc, ops, st, projector_scale(curv, ops.e.num_items)), rhs)


def is_maximum(x, ops, expert, st):
    """Whether the true Hessian (plus the anchor ``P``) at ``x`` is positive definite.

    Dense: its Cholesky factorisation succeeds. Large sparse pools
    (``_graph.use_cg``), ``O(N + R)``: every comparison's curvature is
    non-negative (then the score block is a Laplacian plus ``P``, definite) and
    the learnt parameters' Schur complement ``H_phi,phi - H_phi,s H_ss^{-1} H_s,phi``
    (``m`` CG solves) is definite. A negative curvature there is reported as not
    a maximum (conservative: the score block could still be definite).
    """
    if _graph.use_cg(ops.e):
        loc = local_derivatives(x, ops, expert)
        curv = -loc.h[:, 0, 0]
        n, m = ops.e.num_items, loc.g.shape[1] - 1
        ok = jnp.all(curv >= 0)
        if m:
            scores_only = loc._replace(h=loc.h.at[:, 0, 1:].set(0).at[:, 1:, 0].set(0))
            hsp = jnp.stack([-_graph.incidence_t(ops.e, loc.h[:, 0, 1 + a]) for a in range(m)], axis=1)
            hpp = -jnp.sum(loc.h[:, 1:, 1:], axis=0) + st.theta_prior * jnp.eye(m, dtype=curv.dtype)
            cols = []
            for a in range(m):
                rhs = jnp.concatenate([hsp[:, a], jnp.zeros(m, curv.dtype)])
                cols.append(direction_cg(-rhs, curv, scores_only, ops, st)[0][:n])
            schur = hpp - hsp.T @ jnp.stack(cols, axis=1)
            ok = ok & jnp.all(jnp.linalg.eigvalsh(0.5 * (schur + schur.T)) > 0)
        return ok
    cf, _ = jax.scipy.linalg.cho_factor(true_hessian(x, ops, expert, st), lower=True)
    return jnp.all(jnp.isfinite(jnp.diagonal(cf))) & jnp.all(jnp.diagonal(cf) > 0)
