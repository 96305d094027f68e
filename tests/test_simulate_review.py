"""Bad inputs of :mod:`jaxrank.simulate`: mask shapes, a LabelMatrix with a mask, NaN noises, the key; an int
seed as ``key`` gives the draw of ``jax.random.key(seed)`` (as :mod:`jaxrank.bootstrap`)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxrank import simulate
from jaxrank.data.loaders import LabelMatrix

H = np.array([[1.0, 2.0, 3.0, 4.0], [2.0, 1.0, 5.0, 3.0], [4.0, 4.0, 1.0, 2.0]])
M = np.ones(H.shape, bool)


@pytest.fixture(scope="module")
def params():
    return simulate.calibrate_judge(H, M, accuracy=0.7, p_a=0.45, item_noise=0.5)


@pytest.mark.parametrize("mask", [np.ones((3, 3), bool), np.ones((5,), bool), np.ones((2, 4), bool)])
def test_mask_of_another_shape_is_refused(mask, params):
    with pytest.raises(ValueError, match=r"mask must have the shape of labels \(3, 4\)"):
        simulate.calibrate_judge(H, mask, accuracy=0.7)
    with pytest.raises(ValueError, match=r"mask must have the shape of labels \(3, 4\)"):
        simulate.simulate_judge(jax.random.key(0), H, mask, params=params)


def test_a_mask_that_broadcasts_is_the_full_mask(params):
    row = np.array([True, True, False, True])
    a = simulate.simulate_judge(3, H, row, params=params)
    b = simulate.simulate_judge(3, H, np.tile(row, (3, 1)), params=params)
    np.testing.assert_array_equal(np.asarray(a.probs), np.asarray(b.probs))
    assert np.all(np.asarray(a.probs)[:, 2, :] == 0.5) and np.all(np.asarray(a.probs)[:, :, 2] == 0.5)


def test_a_label_matrix_takes_no_mask():
    lm = LabelMatrix(H.astype(np.float32), M, ["a", "b", "c"], [["0", "1", "2", "3"]] * 3)
    with pytest.raises(ValueError, match="mask must be None when labels is a LabelMatrix"):
        simulate.calibrate_judge(lm, M, accuracy=0.7)


@pytest.mark.parametrize("arg", ["item_noise", "pair_noise", "accuracy", "p_a"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), "0.5"])
def test_non_finite_or_non_numeric_targets_and_noises_name_the_argument(arg, value):
    kw = dict(accuracy=0.7, p_a=0.45, item_noise=0.5, pair_noise=1.0)
    kw[arg] = value
    with pytest.raises(ValueError, match=rf"^{arg} must be a"):
        simulate.calibrate_judge(H, M, **kw)


@pytest.mark.parametrize("key", [None, 1.5, "0", True])
def test_key_must_be_a_key_or_an_int(key, params):
    with pytest.raises(ValueError, match="key must be a jax.random key"):
        simulate.simulate_judge(key, H, M, params=params)


def test_an_int_key_is_the_seed_of_jax_random_key(params):
    a = simulate.simulate_judge(7, H, M, params=params)
    b = simulate.simulate_judge(jax.random.key(7), H, M, params=params)
    np.testing.assert_array_equal(np.asarray(a.probs), np.asarray(b.probs))
    assert not np.array_equal(np.asarray(a.probs), np.asarray(simulate.simulate_judge(8, H, M, params=params).probs))
