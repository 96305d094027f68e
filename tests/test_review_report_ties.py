"""The report's figures on two edge cases (review of the assessment pipeline, items 6 and 7).

* Without human scores, a hard 0/1 judge on a consistent order: the ranking's soft Bradley-Terry fit under
  the weak prior ``N(0, 1/RANK_SCORE_PRIOR)`` matches a SciPy MAP and the Laplace intervals from NumPy, and
  its scores and rank intervals are finite and ordered (without the prior: +-18.9, [-702, 740], ranks 1-4).
* Copies of one text in a context get one score, so the correlations count them as tied (SciPy with ties).
"""

import numpy as np
import pytest
from scipy import optimize, stats

from jaxrank.assessment._report_stats import RANK_SCORE_PRIOR
from jaxrank.assessment.report import assess_comparisons
from jaxrank.comparisons import Comparisons, stack_contexts


def _all_pairs(n):
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    return i, j


@pytest.mark.parametrize("n", [4, 6])
def test_hard_consistent_order_without_humans_gets_finite_ordered_intervals(n):
    i, j = _all_pairs(n)
    p = (i < j).astype(np.float32)                    # item 0 beats everyone: a strict order, hard answers
    c = stack_contexts([Comparisons.from_pairs(i, j, p, num_items=n)] * 2)
    rep = assess_comparisons(c, np.full((2, n), np.nan), candidates=[[f"x{k}" for k in range(n)]] * 2)
    lam = RANK_SCORE_PRIOR
    assert 0 < lam <= 1

    def neg_log_post(s):
        d = s[i] - s[j]
        return (p * np.logaddexp(0, -d) + (1 - p) * np.logaddexp(0, d)).sum() + lam / 2 * s @ s

    s = optimize.minimize(neg_log_post, np.zeros(n), method="BFGS", options={"gtol": 1e-10}).x
    q = 1 / (1 + np.exp(-(s[i] - s[j])))
    h = np.zeros((n, n))
    np.add.at(h, (i, i), q * (1 - q))
    np.add.at(h, (j, j), q * (1 - q))
    np.add.at(h, (i, j), -q * (1 - q))
    np.add.at(h, (j, i), -q * (1 - q))
    centre = np.eye(n) - 1.0 / n
    sd = np.sqrt(np.diag(centre @ np.linalg.inv(h + lam * np.eye(n)) @ centre))
    z = stats.norm.ppf(0.975)
    rk = rep.ranking
    for r in range(2):
        np.testing.assert_allclose(rk["score"][r], s, atol=2e-3)
        np.testing.assert_allclose(rk["lower"][r], s - z * sd, atol=5e-3)
        np.testing.assert_allclose(rk["upper"][r], s + z * sd, atol=5e-3)
        assert np.all(np.isfinite(rk["lower"][r])) and np.all(rk["upper"][r] - rk["lower"][r] < 12)
        assert np.all(np.diff(rk["score"][r]) < 0)
        assert rk["rank"][r].tolist() == list(range(1, n + 1))
        lo, hi = rk["rank_lower"][r], rk["rank_upper"][r]
        assert np.all(np.diff(lo) >= 0) and np.all(np.diff(hi) >= 0)        # ordered
        assert lo[0] == 1 and hi[-1] == n and hi[0] < n and lo[-1] > 1       # the ends are told apart
    assert f"N(0, {1 / lam:g})" in rep.markdown("hard judge")


def _tie_case(seed=0):
    rng = np.random.default_rng(seed)
    n = 6
    i, j = _all_pairs(n)
    latent = np.array([2.0, 1.0, 0.5, 1.0, -0.5, -1.5])       # items 1 and 3: one text, shown twice
    p = 1 / (1 + np.exp(-(latent[i] - latent[j]))) + rng.normal(0, 0.02, i.size)   # float noise of a judge
    p = np.clip(p, 0.01, 0.99).astype(np.float32)
    labels = np.array([[4.0, 3.0, 3.5, 3.0, 2.0, 1.0]], np.float32)
    texts = [["t0", "same", "t2", "same", "t4", "t5"]]
    c = stack_contexts([Comparisons.from_pairs(i, j, p, num_items=n)])
    return c, labels, texts


def test_copies_of_one_text_get_one_score_and_are_tied_in_every_correlation():
    c, labels, texts = _tie_case()
    methods = ("average_probability", "bradley_terry", "win_ratio", "poe_gaussian")
    raw = assess_comparisons(c, labels, methods=methods)
    tied = assess_comparisons(c, labels, methods=methods, texts=texts)
    for m in methods:
        x = np.array(raw.scores[m][0], np.float64)
        assert x[1] != x[3]                                    # the judge's noise splits them
        x[[1, 3]] = x[[1, 3]].mean()                           # one text, one score (NumPy)
        np.testing.assert_allclose(tied.scores[m][0], x, rtol=1e-6)
        assert tied.scores[m][0][1] == tied.scores[m][0][3]
        y = labels[0]
        want = {"spearman": stats.spearmanr(x, y)[0], "kendall_tau": stats.kendalltau(x, y)[0],
                "pearson": stats.pearsonr(x, y)[0]}
        for name, ref in want.items():
            np.testing.assert_allclose(tied.correlations[name][m][0], ref, atol=1e-5)
        np.testing.assert_allclose(tied.spearman[m][0], want["spearman"], atol=1e-5)
    # without the texts Spearman counts the two copies as ordered
    assert any(abs(raw.spearman[m][0] - tied.spearman[m][0]) > 1e-3 for m in methods)


def test_texts_must_have_one_row_per_context():
    c, labels, texts = _tie_case()
    with pytest.raises(ValueError, match="texts"):
        assess_comparisons(c, labels, texts=texts * 2)
