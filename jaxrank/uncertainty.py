"""Uncertainty of scores: the Laplace approximation of soft Bradley-Terry (PoE App. A.5).

At the maximum ``s*`` of the soft-BT likelihood, the posterior over scores is
approximated by ``N(s*, H^+)`` with ``H`` the Hessian of the negative
log-likelihood: a Laplacian weighted by ``w_k q_k (1 - q_k)``,
``q_k = sigmoid(s*_i - s*_j - gamma)`` (METHODS.md §4). When ``gamma`` is
learnt jointly, the score block of the joint covariance is used (the Schur
complement ``H_ss - h h^T / h_gg`` is the marginal precision of ``s``).

The Gaussian-expert posterior (PoE eq. 7-8) is :func:`jaxrank.poe_gaussian_posterior`;
both return a :class:`jaxrank.GaussianPosterior`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrank import _graph
from jaxrank.comparisons import Comparisons
from jaxrank.scoring import soft_bt
from jaxrank.scoring.gaussian import GaussianPosterior

__all__ = ["laplace_bradley_terry"]


def _laplace_one(c, mode, eps, gamma_prior, score_prior, tol, max_iter):
    sol = soft_bt._fit_one(c, mode, eps, gamma_prior, score_prior, tol, max_iter)
    n = c.num_items
    proj = _graph.component_projector(_graph.components(c), c.p.dtype)
    x = sol.scores if mode != "learn" else jnp.concatenate([sol.scores, sol.gamma[None]])
    h = soft_bt._hessian(x, c, mode, eps, gamma_prior, score_prior, proj)
    if mode == "learn":
        hsg, hgg = h[:n, n], h[n, n]
        h = h[:n, :n] - jnp.outer(hsg, hsg) / hgg
    eye = jnp.eye(n, dtype=h.dtype)
    # With a score prior (lambda > 0) the precision H + lambda I is definite and
    # (H + lambda I + P)^{-1} - P is still the covariance restricted to centred scores.
    cov = _graph.psd_solve(h, eye) - proj
    return GaussianPosterior(sol.scores, 0.5 * (cov + cov.T), h - proj)


@functools.partial(jax.jit, static_argnames=("mode", "eps", "gamma_prior", "score_prior", "tol", "max_iter"))
def _laplace(c, mode, eps, gamma_prior, score_prior, tol, max_iter):
    return _graph.batched(_laplace_one, c, mode=mode, eps=eps, gamma_prior=gamma_prior,
                          score_prior=score_prior, tol=tol, max_iter=max_iter)


def laplace_bradley_terry(c: Comparisons, *, debias=False, eps=1e-6, gamma_prior=1e-6, score_prior=0.0,
                          tol=None, max_iter=100) -> GaussianPosterior:
    """Laplace approximation of the soft-BT PoE posterior (PoE App. A.5).

    Args:
        c: comparisons, any batch shape.
        debias: as in :func:`jaxrank.poe_bradley_terry`.
        eps, gamma_prior, score_prior, tol, max_iter: solver settings, as in
            :func:`jaxrank.fit_poe_bradley_terry`.

    Returns:
        :class:`jaxrank.GaussianPosterior` with ``mean = s*``, ``precision = H``
        (the weighted Laplacian, singular along per-component constants) and
        ``covariance = H^+`` (the covariance of the centred scores);
        ``.stderr`` gives every score's standard error.
    """
    return _laplace(c, *soft_bt._settings(c, debias, eps, gamma_prior, score_prior, tol, max_iter))
