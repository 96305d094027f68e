"""Review of the pointwise judges (11-27): pointwise_comparisons' arguments, rating replay's antisymmetry."""

import numpy as np
import pytest

from jaxrank.judges.pointwise import PointwiseResult, pointwise_comparisons
from jaxrank.judges.rating_replay import replay_probabilities


# ----------------------------------------------------------------------- 6: pointwise_comparisons
def test_pointwise_comparisons_arguments():
    s = np.array([3.0, 3.0, 2.0])
    for scale in (float("inf"), float("nan"), -1.0, 0.0, True, "2"):
        with pytest.raises(ValueError, match="scale must be a finite number > 0"):
            pointwise_comparisons(s, [0, 0], [1, 2], scale=scale)
    with pytest.raises(ValueError, match="^i must be integer indices"):
        pointwise_comparisons(s, [0.9], [2])
    with pytest.raises(ValueError, match="^j must be integer indices"):
        pointwise_comparisons(s, [0], [2.7])
    with pytest.raises(ValueError, match="^i must be integer indices"):
        pointwise_comparisons(s, [True], [False])
    p = pointwise_comparisons(PointwiseResult(s, None, False), np.asarray([0, 0], np.int32), [1, 2], scale=1e6)
    np.testing.assert_array_equal(p, [0.5, 1.0])      # a tie is 1/2 at any finite scale
    assert pointwise_comparisons(s, [], []).shape == (0,)


# ----------------------------------------------------------------------- 10: replay antisymmetry
@pytest.mark.parametrize("method", ["variant_share", "logistic", "gaussian"])
def test_replay_antisymmetric_to_float32_rounding(method):
    """The float32 probabilities of both orders sum to 1 within 2**-24 (the documented bound), and each is
    the formula keeping float32's relative precision, checked by hand for the logistic and the variant share."""
    rng = np.random.default_rng(0)
    r = rng.integers(1, 6, size=(50, 3)).astype(float) + rng.normal(0, 0.3, (50, 3))
    a, b = np.triu_indices(50, 1)
    p = replay_probabilities(r, a, b, method=method).astype(np.float64)
    q = replay_probabilities(r, b, a, method=method).astype(np.float64)
    assert np.abs(p + q - 1).max() <= 2.0 ** -24
    if method == "logistic":
        d = r[a].mean(1) - r[b].mean(1)
        np.testing.assert_allclose(p, 1 / (1 + np.exp(-d)), rtol=2.0 ** -23, atol=0)
    if method == "variant_share":
        share = ((r[a] > r[b]).sum(1) + 0.5 * (r[a] == r[b]).sum(1)) / 3
        np.testing.assert_array_equal(p, share.astype(np.float32).astype(np.float64))
    s = np.array([1.0, 2.5, 4.0, 1.0 + 1e-9])
    i, j = np.triu_indices(4, 1)
    pp = pointwise_comparisons(s, i, j).astype(np.float64) + pointwise_comparisons(s, j, i).astype(np.float64)
    assert np.abs(pp - 1).max() <= 2.0 ** -24
