"""Review fixes of jaxrank.learning's inputs: NaN human scores, NaN scores, and fit's checks of its data.

* A NaN label where ``mask`` is True (``data.label_matrix`` writes NaN for "no score") raises a ``ValueError``
  naming ``labels`` in the ranking losses (it was silently ranked); traced, the context's loss is NaN.
* ``ranking_loss`` skips a context only when its human scores are constant (decided from ``labels`` and
  ``mask``); a NaN score (a diverged fit, a NaN ``p``) makes the loss NaN (it was read as "constant" and skipped,
  so a diverged ``fit`` reported loss 0 with NaN parameters).
* ``fit`` runs ``loss_fn``'s checks of its concrete data before compiling (judge ids outside the calibration's
  range froze the calibration silently).

References are NumPy / SciPy formulations of eq. (L1) and (L2), with scores given directly (``score_fn`` returns
the parameters), never the module's own output.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxrank import calibration as cal
from jaxrank import learning
from jaxrank.comparisons import Comparisons


def given_scores(params, c, judge=None):
    """A score_fn whose scores are its parameters: the losses are checked on known scores."""
    return params


def ref_pairwise(s, h, m, t=1.0):
    """Eq. (L1) of one context in NumPy; None for constant human scores."""
    s, h = np.asarray(s, np.float64)[m], np.asarray(h, np.float64)[m]
    z = (s - s.mean()) / s.std()
    terms = [np.log1p(np.exp(-(z[a] - z[b]) / t)) for a in range(len(s)) for b in range(len(s)) if h[a] > h[b]]
    return np.mean(terms) if terms else None


def ref_soft_spearman(s, h, m, t=0.1):
    """Eq. (L2) of one context: Pearson of sigmoid soft ranks with SciPy's average ranks; None if undefined."""
    s, h = np.asarray(s, np.float64)[m], np.asarray(h, np.float64)[m]
    if np.ptp(h) == 0 or np.ptp(s) == 0:
        return None
    z = (s - s.mean()) / s.std()
    soft = 0.5 + (1 / (1 + np.exp(-(z[:, None] - z[None, :]) / t))).sum(1)
    return stats.pearsonr(soft, stats.rankdata(h))[0]


def ref_ranking_loss(s, h, m, kind):
    vals = []
    for k in range(len(s)):
        v = ref_pairwise(s[k], h[k], m[k]) if kind == "pairwise" else ref_soft_spearman(s[k], h[k], m[k])
        if v is not None:
            vals.append(v if kind == "pairwise" else -v)
    return np.mean(vals)


S = np.array([[0.3, -1.2, 0.8, 2.0], [1.0, 0.5, -0.4, 0.1], [-0.7, 0.2, 1.5, 0.9]], np.float32)
H = np.array([[1.0, 3.0, 2.0, 4.0], [2.0, 2.0, 2.0, 2.0], [4.0, 1.0, 3.0, 2.0]], np.float32)   # context 1 constant
M = np.array([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 0]], bool)
C = Comparisons.from_pairs(np.zeros((3, 1), int), np.ones((3, 1), int), np.full((3, 1), 0.5, np.float32),
                           num_items=4)


@pytest.mark.parametrize("kind", ["pairwise", "spearman"])
def test_constant_human_scores_skipped_against_numpy(kind):
    got = float(learning.ranking_loss(jnp.asarray(S), C, None, jnp.asarray(H), jnp.asarray(M),
                                      score_fn=given_scores, kind=kind))
    np.testing.assert_allclose(got, ref_ranking_loss(S, H, M, kind), rtol=1e-5)


@pytest.mark.parametrize("kind", ["pairwise", "spearman"])
def test_nan_score_propagates(kind):
    s = S.copy()
    s[0, 1] = np.nan                      # a real item's score of a context with distinct human scores
    f = lambda q: learning.ranking_loss(q, C, None, jnp.asarray(H), jnp.asarray(M), score_fn=given_scores, kind=kind)
    assert np.isnan(float(jax.jit(f)(jnp.asarray(s))))
    s = S.copy()
    s[2, 3] = np.nan                      # a padded item's score is never read
    np.testing.assert_allclose(float(jax.jit(f)(jnp.asarray(s))), ref_ranking_loss(S, H, M, kind), rtol=1e-5)


@pytest.mark.parametrize("kind", ["pairwise", "spearman"])
def test_flat_scores_are_no_nan(kind):
    """A judge indifferent on a context (constant finite scores): pairwise reads every pair as a tie, spearman
    (undefined) skips the context; the loss stays a number."""
    s = S.copy()
    s[2, :] = 0.25
    got = float(learning.ranking_loss(jnp.asarray(s), C, None, jnp.asarray(H), jnp.asarray(M),
                                      score_fn=given_scores, kind=kind))
    if kind == "spearman":
        want = -ref_soft_spearman(s[0], H[0], M[0])                 # contexts 1 (labels) and 2 (scores) skipped
    else:
        want = np.mean([ref_pairwise(s[0], H[0], M[0]), np.log(2.0)])   # z = 0: softplus(0) on every pair
    np.testing.assert_allclose(got, want, rtol=1e-5)


def diverged_setup():
    rng = np.random.default_rng(0)
    n = 4
    ii, jj = np.nonzero(~np.eye(n, dtype=bool))
    p = rng.uniform(0.05, 0.95, (2, len(ii))).astype(np.float32)
    c = Comparisons.from_pairs(np.broadcast_to(ii, p.shape), np.broadcast_to(jj, p.shape), p, num_items=n)
    p[0, 0] = np.nan                      # what a diverged calibration hands the scorer (with_p does not check)
    return c.with_p(jnp.asarray(p)), jnp.asarray([[1.0, 2, 3, 4], [4, 3, 2, 1]]), jnp.ones((2, n), bool)


def test_nan_p_gives_nan_loss_not_zero():
    c, lab, mask = diverged_setup()
    tb = cal.identity_temperature_bias(1)
    assert np.isnan(float(learning.ranking_loss(tb, c, None, lab, mask)))
    res = learning.fit(learning.ranking_loss, tb, c, None, lab, mask, steps=3)
    assert np.isnan(np.asarray(res.losses)).all()          # was [0.60, 0, 0] with NaN parameters


@pytest.mark.parametrize("fn", [learning.pairwise_logistic_loss, learning.soft_spearman])
def test_nan_label_under_mask_raises(fn):
    h = H.copy()
    h[0, 2] = np.nan
    with pytest.raises(ValueError, match=r"labels has a NaN at index \(0, 2\)"):
        fn(jnp.asarray(S), jnp.asarray(h), jnp.asarray(M))
    with pytest.raises(ValueError, match="labels"):
        learning.ranking_loss(jnp.asarray(S), C, None, jnp.asarray(h), jnp.asarray(M), score_fn=given_scores)
    with pytest.raises(ValueError, match="labels"):
        jax.grad(lambda q: learning.ranking_loss(q, C, None, jnp.asarray(h), jnp.asarray(M),
                                                 score_fn=given_scores))(jnp.asarray(S))
    with pytest.raises(ValueError, match="labels"):
        learning.fit(learning.ranking_loss, cal.identity_temperature_bias(1), C, None, jnp.asarray(h),
                     jnp.asarray(M), steps=2)
    traced = jax.jit(fn)(jnp.asarray(S), jnp.asarray(h), jnp.asarray(M))   # cannot be inspected: NaN, not a number
    assert np.isnan(np.asarray(traced)[0]) and np.isfinite(np.asarray(traced)[2])


@pytest.mark.parametrize("kind", ["pairwise", "spearman"])
def test_masked_out_nan_label_is_fine(kind):
    h, m = H.copy(), M.copy()
    h[0, 2], m[0, 2] = np.nan, False
    got = float(learning.ranking_loss(jnp.asarray(S), C, None, jnp.asarray(h), jnp.asarray(m),
                                      score_fn=given_scores, kind=kind))
    np.testing.assert_allclose(got, ref_ranking_loss(S, np.nan_to_num(h), m, kind), rtol=1e-5, atol=1e-6)
    traced = jax.jit(lambda q, lab: learning.ranking_loss(q, C, None, lab, jnp.asarray(M), score_fn=given_scores,
                                                          kind=kind))(jnp.asarray(S), jnp.asarray(h))
    assert np.isnan(float(traced))          # traced NaN label under mask: the loss is NaN, never skipped


@pytest.mark.parametrize("bad", [2, -1])
def test_fit_checks_judge_ids(bad):
    rng = np.random.default_rng(0)
    n, r = 4, 10
    i = rng.integers(0, n, (2, r))
    j = (i + 1 + rng.integers(0, n - 1, (2, r))) % n
    c = Comparisons.from_pairs(i, j, rng.uniform(0.05, 0.95, (2, r)).astype(np.float32), num_items=n)
    judge = np.full((2, r), bad)
    ep = learning.EvidenceParams(cal.identity_temperature_bias(2), jnp.zeros(()))
    with pytest.raises(ValueError, match=f"judge holds id {bad}, outside"):
        learning.fit(learning.marginal_nll, ep, c, judge, steps=3)
    with pytest.raises(ValueError, match=f"judge holds id {bad}, outside"):
        learning.fit(learning.ranking_loss, cal.identity_temperature_bias(2), c, judge,
                     jnp.asarray(rng.standard_normal((2, n))), jnp.ones((2, n), bool), steps=3)
    ok = learning.fit(learning.marginal_nll, ep, c, np.ones((2, r), int), steps=3)   # in range: fits, finite
    assert np.isfinite(np.asarray(ok.losses)).all()
