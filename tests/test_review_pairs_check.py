"""pairs_rank checks its judge's probabilities (review 2, item 4): a NaN or a value outside [0, 1] is a
ValueError naming ``judge``, the bad value and where it is, not a NaN log-likelihood or a log-likelihood above 0.

The valid cases are checked against an independent computation: a perfect judge (``P[a, b] = 1[q_a > q_b]``)
orders the items as a NumPy argsort of ``q``, and the log-likelihood of its comparisons is 0.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxrank as jr

P = np.array([[0.5, 0.9, 0.9], [0.1, 0.5, 0.9], [0.1, 0.1, 0.5]], np.float32)


@pytest.mark.parametrize("value", [np.nan, np.inf, 3.0, -0.2])
def test_bad_dense_judge_is_refused(value):
    bad = P.copy()
    bad[0, 1] = value
    with pytest.raises(ValueError, match=r"judge.*\[0, 1\].*index \(0, 1\)"):
        jr.pairs_rank(bad)
    batch = np.stack([P, bad])                          # in the second context of a batch
    with pytest.raises(ValueError, match=r"judge.*index \(1, 0, 1\)"):
        jr.pairs_rank(batch)


@pytest.mark.parametrize("value", [np.nan, 3.0])
def test_bad_callable_judge_is_refused(value):
    table = jnp.asarray(P)
    judge = lambda a, b: jnp.where((a == 0) & (b == 1), value, table[a, b])   # noqa: E731
    with pytest.raises(ValueError, match=r"judge must return .*\[0, 1\].*pair \(0, 1\)"):
        jr.pairs_rank(judge, num_items=3)


def test_diagonal_and_padded_rows_are_not_checked():
    rng = np.random.default_rng(0)
    q = rng.normal(size=6)
    perfect = (q[:, None] > q[None, :]).astype(np.float32)
    perfect[np.diag_indices(6)] = np.nan                 # never asked (Comparisons.from_matrix ignores it too)
    r = jr.pairs_rank(perfect)
    np.testing.assert_array_equal(np.asarray(r.order), np.argsort(-q))
    assert float(r.log_likelihood) == pytest.approx(0.0, abs=1e-5)
    # a padded item's row and column may hold anything: the judge is never asked about it
    padded = np.full((7, 7), np.nan, np.float32)
    padded[:6, :6] = perfect
    mask = np.arange(7) < 6
    r = jr.pairs_rank(padded, item_mask=mask)
    np.testing.assert_array_equal(np.asarray(r.order), list(np.argsort(-q)) + [6])
    assert np.all(np.isfinite(np.asarray(r.comparisons.p)))


def test_symmetric_checks_each_order_not_only_the_average():
    """p_ab = 1.2, p_ba = 0.3 average to 0.95, inside [0, 1]: each order is checked on its own."""
    judge = lambda a, b: jnp.where(a < b, 1.2, 0.3)   # noqa: E731
    with pytest.raises(ValueError, match="1.2"):
        jr.pairs_rank(judge, num_items=4, symmetric=True)
