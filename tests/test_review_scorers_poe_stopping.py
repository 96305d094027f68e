"""Review: the general PoE Newton solver stops within ``tol`` of the optimum (float32), as soft BT does.

It stopped where the gradient passed its rounding-level test (64 ulps of every term) without the Newton step
from there: a Cauchy expert 8.2e-5 off the optimum (8x tol) and the soft Bradley-Terry expert 2e-5 off,
where :func:`jaxrank.poe_bradley_terry` is 2e-7 off, all reported successful. Yardstick: SciPy's BFGS on
the same objective written in float64 NumPy.
"""

import jax.numpy as jnp
import numpy as np
from scipy.optimize import minimize

import jaxrank as jr
from jaxrank.scoring import experts
from jaxrank.scoring.experts import Expert


def _scipy(nll, n, start):
    r = minimize(lambda x: nll(np.r_[0, x]), start[1:] - start[0], method="BFGS", options=dict(gtol=1e-11))
    s = np.r_[0, r.x]
    return s - s.mean()


def test_cauchy_expert_stops_within_tol_of_the_optimum():
    cauchy = lambda d, p, th: -jnp.log1p(((d - th["alpha"] * (p - 0.5)) / th["scale"]) ** 2)
    expert = Expert(cauchy, {"alpha": 4.0, "scale": 1.0}, name="cauchy")
    rng = np.random.default_rng(8)
    n, r = 6, 18
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    p = rng.uniform(0, 1, r)
    p[:3] = [0.0, 1.0, 1.0]
    sol = jr.fit_poe(jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n),
                     jr.ProductOfExpertsSolver(expert))
    assert int(sol.result) == jr.scoring.RESULTS.successful
    s = np.asarray(sol.scores, np.float64)
    ref = _scipy(lambda x: np.sum(np.log1p((x[i] - x[j] - 4 * (p - 0.5)) ** 2)), n, s)
    assert np.abs(s - ref).max() < 1e-5


def test_soft_bradley_terry_expert_is_as_close_to_the_optimum_as_poe_bradley_terry():
    rng = np.random.default_rng(4)
    n, r = 6, 14
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    p = rng.uniform(0.0, 1.0, r)
    p[:2] = [0.0, 1.0]
    w = rng.uniform(0.5, 2, r)
    c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n, weight=w.astype(np.float32))
    pc = np.clip(p, 1e-6, 1 - 1e-6)

    def nll(s):
        d = s[i] - s[j]
        return np.sum(w * (pc * np.logaddexp(0, -d) + (1 - pc) * np.logaddexp(0, d)))

    ref = _scipy(nll, n, np.zeros(n))
    s = np.asarray(jr.fit_poe(c, jr.ProductOfExpertsSolver(experts.soft_bradley_terry())).scores, np.float64)
    assert np.abs(s - ref).max() < 2e-6
