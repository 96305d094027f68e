"""``jaxrank.studies.efficiency_curves(..., correlations=...)``: Kendall tau-b and Pearson per context beside
Spearman (METHODS.md §7), checked against SciPy on scores recomputed from the first ``R`` comparisons."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import stats

from jaxrank import Comparisons, studies


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(4)
    labels = rng.integers(1, 6, (5, 6)).astype(np.float32)       # ties in the human scores (tau-b's case)
    jm = studies.simulated_judge(labels, np.ones((5, 6), bool), accuracy=0.7, p_a=0.45, seed=2)
    sel = studies.select_nested(jm, num_subsets=3, max_budget=30, key=jax.random.key(5))
    return jm, sel, [5, 12, 30]


def test_three_correlations_equal_scipy(case):
    jm, sel, budgets = case
    names = ("spearman", "kendall_tau", "pearson")
    got = studies.efficiency_curves(sel, jm.labels, jm.mask, budgets, ["average_probability", "win_ratio"],
                                    chunk=40, correlations=names)
    assert set(got) == set(names)
    ref = {"spearman": lambda x, y: stats.spearmanr(x, y)[0], "kendall_tau": lambda x, y: stats.kendalltau(x, y)[0],
           "pearson": lambda x, y: stats.pearsonr(x, y)[0] if np.ptp(x) > 0 else np.nan}
    for scorer in ("average_probability", "win_ratio"):
        for k, r in enumerate(budgets):
            c = Comparisons.from_pairs(sel.i[..., :r], sel.j[..., :r], sel.p[..., :r], num_items=6)
            s = np.asarray(studies.SCORERS[scorer](c), np.float64)               # [S, C, N]
            for m in names:
                want = [np.nanmean([ref[m](s[a, b], jm.labels[b]) for b in range(5)]) for a in range(3)]
                np.testing.assert_allclose(got[m][scorer][k], want, atol=1e-5, err_msg=f"{m} {scorer} R={r}")


def test_default_output_unchanged_and_bad_name(case):
    jm, sel, budgets = case
    old = studies.efficiency_curves(sel, jm.labels, jm.mask, budgets, ["poe_gaussian"], chunk=40)
    new = studies.efficiency_curves(sel, jm.labels, jm.mask, budgets, ["poe_gaussian"], chunk=40,
                                    correlations=["spearman"])
    assert set(old) == {"poe_gaussian"} and old["poe_gaussian"].shape == (3, 3)
    np.testing.assert_array_equal(old["poe_gaussian"], new["spearman"]["poe_gaussian"])
    with pytest.raises(ValueError, match="unknown correlation"):
        studies.efficiency_curves(sel, jm.labels, jm.mask, budgets, ["poe_gaussian"], correlations=["kendall"])
