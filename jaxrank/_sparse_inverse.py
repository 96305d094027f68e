"""Private: marginal variances ``diag(C)`` of a sparse Laplace precision, ``O(N + R)`` memory.

The precision of one context's centred scores is

    S = W^T diag(h) W + lambda I - B A^{-1} B^T                       (METHODS.md §4)

a Laplacian weighted by the comparisons' curvatures ``h``, an optional score
prior ``lambda``, and the Schur complement of learnt parameters (``gamma`` or an
expert's ``phi``: ``B`` their ``[N, m]`` cross block, ``A`` their ``[m, m]``
block). ``S`` is singular along per-component constants when ``lambda = 0``;
the covariance of the centred scores is ``C = (S + a P)^{-1} (I - P)`` (``P``
the per-component projector, ``_graph.component_projector``; any ``a > 0``).

Its diagonal is estimated without forming ``C`` by Hutchinson's estimator
(Hutchinson 1990; Bekas, Kokiopoulou & Saad 2007):

    diag(C) ~= (1/K) sum_k z_k * (C z_k),       z_k Rademacher (+-1 entries)

each ``C z_k`` one Jacobi-preconditioned conjugate-gradient solve whose matrix
products are a gather and a scatter-add over the comparisons. The estimate is
unbiased, and the error of item ``i`` has standard deviation
``sqrt(sum_{j != i} C_ij^2 / K)``: on sparse random pools with ``d`` comparisons
per item ``C_ii ~ 1/d`` and the off-diagonal mass ``~ 1/d^3``, so the relative
error of a variance is about ``1 / sqrt(d K)`` (tests/test_sparse_stderr.py
measures it against the dense inverse) and of a standard error half that.
Probes are solved ``block`` at a time (``vmap`` over one CG each, ``[block, R]``
memory), blocks one after another (``lax.map``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrank import _graph

CG_TOL = 1e-4
"""Relative residual of each probe's CG solve (far below the estimator's own sampling error)."""


DENSE_COVARIANCE_MAX_ITEMS = 2048
"""``covariance="auto"`` keeps the dense ``[N, N]`` covariance up to this many items (16 MB in float32,
an ``O(N^3)`` factorisation of a second or so), or on a dense pool (``_graph.use_dense``); above, it
estimates the marginal variances by the sparse method (``O(N + R)``)."""

NUM_PROBES = 64
"""Hutchinson probes of the sparse marginal variances (``covariance="diagonal"``)."""


def dense_covariance(num_items: int, num_comparisons: int) -> bool:
    """Whether ``covariance="auto"`` forms the dense covariance for these (static) sizes."""
    return num_items <= DENSE_COVARIANCE_MAX_ITEMS or _graph.use_dense(num_items, num_comparisons)


def covariance_form(covariance: str, num_items: int, num_comparisons: int) -> str:
    """``"dense"`` or ``"diagonal"`` for a ``covariance=`` option (``"auto"`` resolved by :func:`dense_covariance`).

    Raises:
        ValueError: ``covariance`` is not ``"dense"``, ``"diagonal"`` or ``"auto"``.
    """
    if covariance not in ("dense", "diagonal", "auto"):
        raise ValueError(f"covariance must be 'dense', 'diagonal' or 'auto', got {covariance!r}")
    if covariance == "auto":
        return "dense" if dense_covariance(num_items, num_comparisons) else "diagonal"
    return covariance


class PrecisionTerms(NamedTuple):
    """The pieces of ``S`` (module docstring) of one context, ``O(N + R)``.

    Attributes:
        e: the sparse edge space (one entry per comparison).
        h: ``[R]`` curvature of every comparison (0 on padding).
        cross: ``[N, m]`` cross block ``B`` of the learnt parameters (``m`` may be 0).
        corner: ``[m, m]`` their block ``A``.
        score_prior: scalar ``lambda``.
        labels: ``[N]`` connected-component labels (``_graph.components``).
    """

    e: _graph.Edges
    h: jax.Array
    cross: jax.Array
    corner: jax.Array
    score_prior: jax.Array
    labels: jax.Array


def marginal_variances(t: PrecisionTerms, key, num_probes: int, block: int = 16) -> jax.Array:
    """``[N]`` Hutchinson estimate of ``diag(C)`` (module docstring); 0 for items alone in their component.

    Args:
        t: the precision's terms.
        key: a ``jax.random`` key for the probes.
        num_probes: ``K``, rounded up to a multiple of ``block``.
        block: probes solved together (``vmap``).
    """
    e, n = t.e, t.e.num_items
    dt = t.h.dtype
    sizes = _graph.component_sizes(t.labels, dt)
    pmean = lambda v: _graph.component_mean(v, t.labels, sizes)
    deg = _graph.item_sums(e, t.h, t.h)
    a = jnp.maximum(jnp.sum(deg) / n, jnp.finfo(dt).tiny)   # the mean curvature: P on S's scale
    m = t.cross.shape[1]
    corner_inv = jnp.linalg.inv(t.corner) if m else t.corner

    def matvec(v):
        out = _graph.incidence_t(e, t.h * _graph.incidence(e, v)) + t.score_prior * v + a * pmean(v)
        if m:
            out = out - t.cross @ (corner_inv @ (t.cross.T @ v))
        return out

    diag = deg + t.score_prior + a / sizes
    if m:
        diag = diag - jnp.einsum("na,ab,nb->n", t.cross, corner_inv, t.cross)
    diag = jnp.maximum(diag, jnp.finfo(dt).tiny)

    def solve(z):
        zc = z - pmean(z)
        x, _ = jax.scipy.sparse.linalg.cg(matvec, zc, tol=CG_TOL, maxiter=n + 1, M=lambda u: u / diag)
        return zc * (x - pmean(x))

    blocks = -(-num_probes // block)
    keys = jax.random.split(key, blocks)

    def one_block(k):
        z = jax.random.rademacher(k, (block, n), dt)
        return jnp.sum(jax.vmap(solve)(z), axis=0)

    total = jnp.sum(jax.lax.map(one_block, keys), axis=0)
    var = total / (blocks * block)
    return jnp.where(sizes > 1, jnp.maximum(var, 0), 0)
