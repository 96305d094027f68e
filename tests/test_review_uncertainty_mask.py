"""rank_intervals / ranking_confidence on a padded batch: the posterior carries its item mask (review 2, item 2).

Independent references: the ranks of the posterior means by a NumPy argsort, the "adjacent" confidence in
closed form with SciPy (``mean_k Phi((m_a - m_b) / sd(s_a - s_b))`` over the adjacent pairs of the mean
ranking, METHODS.md §4), and the same context scored alone (no padding). An item in no comparison is
unidentified: its rank can be any of ``1..n`` (median and mean ``(n + 1) / 2`` of a uniform rank).
"""

import jax
import numpy as np
import pytest
from scipy.stats import norm

import jaxrank as jr

N_SAMPLES = 4000


def _contexts():
    a = jr.Comparisons.from_pairs([0, 1, 2, 3], [1, 2, 3, 0], [0.9, 0.8, 0.7, 0.2], num_items=4)
    b = jr.Comparisons.from_pairs([0, 1], [1, 2], [0.9, 0.8], num_items=3)
    return a, b


def _numpy_ranks(m):
    """Rank 1 = the highest mean (NumPy argsort; the means here have no ties)."""
    r = np.empty(len(m), int)
    r[np.argsort(-np.asarray(m, float))] = np.arange(1, len(m) + 1)
    return r


def _adjacent(m, cov):
    m, cov = np.asarray(m, float), np.asarray(cov, float)
    o = np.argsort(-m)
    return np.mean([norm.cdf((m[x] - m[y]) / np.sqrt(cov[x, x] + cov[y, y] - 2 * cov[x, y]))
                    for x, y in zip(o[:-1], o[1:])])


@pytest.mark.parametrize("fit", ["laplace", "gaussian"])
def test_padded_batch_ranks_each_context_as_alone(fit):
    a, b = _contexts()
    posterior = jr.laplace_bradley_terry if fit == "laplace" else jr.poe_gaussian_posterior
    post = posterior(jr.stack_contexts([a, b]))
    key = jax.random.key(0)

    @jax.jit
    def both(p):
        return (jr.rank_intervals(p, key=key, num_samples=N_SAMPLES),
                jr.ranking_confidence(p, rule="adjacent"),
                jr.ranking_confidence(p, key=key, num_samples=N_SAMPLES))

    ri, adj, sp = both(post)
    for k, ctx in enumerate((a, b)):
        alone = posterior(ctx)
        n = ctx.num_items
        ri1 = jr.rank_intervals(alone, key=key, num_samples=N_SAMPLES)
        want = _numpy_ranks(np.asarray(alone.mean))
        np.testing.assert_array_equal(np.asarray(ri1.rank), want)
        np.testing.assert_array_equal(np.asarray(ri.rank[k, :n]), want)
        np.testing.assert_array_equal(np.asarray(ri.rank[k, n:]), 0)        # padding: rank 0
        np.testing.assert_array_equal(np.asarray(ri.lower[k, :n]), np.asarray(ri1.lower))
        np.testing.assert_array_equal(np.asarray(ri.upper[k, :n]), np.asarray(ri1.upper))
        assert np.asarray(ri.upper[k, :n]).max() <= n
        np.testing.assert_allclose(np.asarray(ri.mean[k, :n]), np.asarray(ri1.mean), atol=0.06)   # Monte Carlo
        np.testing.assert_allclose(float(adj[k]), _adjacent(alone.mean, alone.covariance), rtol=1e-4)
        sp1 = jr.ranking_confidence(alone, key=key, num_samples=N_SAMPLES)
        assert abs(float(sp[k]) - float(sp1)) < 0.03
    np.testing.assert_array_equal(np.asarray(post.item_mask), [[1, 1, 1, 1], [1, 1, 1, 0]])
    # the default is the posterior's mask: the same draws as an explicit where=
    np.testing.assert_array_equal(np.asarray(sp), np.asarray(jr.ranking_confidence(
        post, key=key, num_samples=N_SAMPLES, where=np.asarray(post.item_mask))))


def test_vmap_and_old_constructor_still_work():
    a, b = _contexts()
    post = jr.laplace_bradley_terry(jr.stack_contexts([a, b]))
    adj = jax.vmap(lambda p: jr.ranking_confidence(p, rule="adjacent"))(post)
    np.testing.assert_allclose(np.asarray(adj[1]), _adjacent(jr.laplace_bradley_terry(b).mean,
                                                             jr.laplace_bradley_terry(b).covariance), rtol=1e-4)
    three = jr.GaussianPosterior(post.mean[0], post.covariance[0], post.precision[0])   # no mask: every item real
    assert three.item_mask is None
    ri = jr.rank_intervals(three, key=jax.random.key(0), num_samples=64)
    np.testing.assert_array_equal(np.asarray(ri.rank), _numpy_ranks(post.mean[0]))


@pytest.mark.parametrize("fit", ["laplace", "gaussian"])
def test_unjudged_item_gets_the_full_interval(fit):
    # item 3 is real but in no comparison: its score is unidentified
    c = jr.Comparisons.from_pairs([0, 1], [1, 2], [0.9, 0.8], num_items=4)
    post = (jr.laplace_bradley_terry if fit == "laplace" else jr.poe_gaussian_posterior)(c)
    ri = jr.rank_intervals(post, key=jax.random.key(0), num_samples=500)
    assert int(ri.lower[3]) == 1 and int(ri.upper[3]) == 4
    assert float(ri.median[3]) == 2.5 and float(ri.mean[3]) == 2.5            # uniform rank on 1..4
    np.testing.assert_array_equal(np.asarray(ri.rank), _numpy_ranks(post.mean))
    # in a padded batch beside a larger context: n counts the real items only
    big = jr.Comparisons.from_pairs([0, 1, 2, 3, 4], [1, 2, 3, 4, 5], [0.9] * 5, num_items=6)
    bp = (jr.laplace_bradley_terry if fit == "laplace" else jr.poe_gaussian_posterior)(jr.stack_contexts([c, big]))
    rb = jr.rank_intervals(bp, key=jax.random.key(0), num_samples=500)
    assert int(rb.lower[0, 3]) == 1 and int(rb.upper[0, 3]) == 4 and float(rb.mean[0, 3]) == 2.5
    np.testing.assert_array_equal(np.asarray(rb.rank[0]), list(_numpy_ranks(post.mean)) + [0, 0])
