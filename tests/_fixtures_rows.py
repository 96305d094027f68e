"""Raw match rows drawn by hypothesis, shared by the tests of ``jaxrank.io.comparisons_from_rows``."""

import numpy as np
import scipy.optimize
from hypothesis import strategies as st

ROW_LISTS = st.lists(st.tuples(st.integers(0, 5), st.integers(1, 5), st.sampled_from([0.0, 0.5, 1.0, 0.25]),
                               st.sampled_from([0.0, 1.0, 2.5])), min_size=1, max_size=40)
"""Lists of ``(first item, offset to the second, p, weight)`` among 6 text ids (never an item against itself)."""


def row_columns(rows):
    """The columns ``(item_a, item_b, p, weight)`` of drawn rows, items named ``t0`` .. ``t5``."""
    a = [f"t{x}" for x, _, _, _ in rows]
    b = [f"t{(x + d) % 6}" for x, d, _, _ in rows]
    return a, b, [q for _, _, q, _ in rows], [v for _, _, _, v in rows]


def simulated_rows(seed: int, n: int, m: int):
    """``(ia, ib, p)``: ``m`` rows among ``n`` items with Bradley-Terry outcomes of normal scores, 15% ties (p 0.5),
    never an item against itself."""
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    ia = rng.integers(0, n, m)
    ib = (ia + rng.integers(1, n, m)) % n
    u = rng.random(m)
    q = 1 / (1 + np.exp(-(s[ia] - s[ib])))
    return ia, ib, np.where(u < 0.15, 0.5, (u < 0.15 + 0.85 * q).astype(float))


def per_row_ml_scores(ia, ib, p, n: int, weight=None) -> np.ndarray:
    """SciPy's float64 maximum of the per-row Bradley-Terry likelihood (ties half a win), no position bias."""
    w = np.ones(len(p)) if weight is None else np.asarray(weight, np.float64)

    def nll(x):
        d = x[ia] - x[ib]
        f = np.sum(w * (p * np.logaddexp(0, -d) + (1 - p) * np.logaddexp(0, d)))
        g = -w * (p - 1 / (1 + np.exp(-d)))
        return f, np.bincount(ia, g, n) - np.bincount(ib, g, n)

    return scipy.optimize.minimize(nll, np.zeros(n), jac=True, method="BFGS", options={"gtol": 1e-10}).x
