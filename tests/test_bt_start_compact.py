"""The hot-edge compaction of hard BT's CG operator (``_soft_bt_sparse._first_true``, issue 33 part f) against NumPy.

``_first_true(on, k)`` must be ``jnp.nonzero(on, size=k, fill_value=0)[0]``: the first ``k`` indices of the true
entries in ascending order, then zeros; checked against ``np.flatnonzero`` for sparse, dense, empty and overfull
masks, under ``jit`` with one trace for every mask of one shape.
"""

import jax
import numpy as np
import pytest

from jaxrank.scoring import _soft_bt_sparse as sparse


def _numpy(on, k):
    idx = np.flatnonzero(on)[:k]
    return np.concatenate([idx, np.zeros(k - idx.size, idx.dtype)])


@pytest.mark.parametrize("size,k,share", [(65536, 19660, 0.18), (1000, 300, 0.0), (1000, 300, 1.0), (1000, 300, 0.5),
                                          (7, 3, 0.4), (1, 1, 1.0)])
def test_first_true_is_numpy_flatnonzero(size, k, share):
    on = np.random.default_rng(size + k).random(size) < share
    np.testing.assert_array_equal(np.asarray(sparse._first_true(on, k)), _numpy(on, k))


def test_first_true_traces_once_per_shape():
    traces = []

    @jax.jit
    def f(on):
        traces.append(1)
        return sparse._first_true(on, 40)

    rng = np.random.default_rng(0)
    for share in (0.05, 0.3, 0.9):
        on = rng.random(200) < share
        np.testing.assert_array_equal(np.asarray(f(on)), _numpy(on, 40))
    assert len(traces) == 1
