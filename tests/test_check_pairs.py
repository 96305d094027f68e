"""The judges' shared check of comparison indices (``jaxrank.judges.judgement.check_pairs``)."""

import numpy as np
import pytest

from jaxrank.judges.judgement import check_pairs

CANDS = ["one", "two", "three"]


@pytest.mark.parametrize("bad", [[0.9], np.array([1.0]), [True], np.array([0.0, 2.7])])
def test_non_integer_indices_are_refused_not_truncated(bad):
    """``0.9`` used to be read as candidate 0 and ``True`` as 1: both name the argument now."""
    with pytest.raises(ValueError, match="i must hold integer candidate indices"):
        check_pairs(CANDS, bad, [2] * len(bad))
    with pytest.raises(ValueError, match="j must hold integer candidate indices"):
        check_pairs(CANDS, [2] * len(bad), bad)


def test_integer_lists_arrays_and_empty_pairs_are_read():
    i, j = check_pairs(CANDS, [0, 2], np.array([1, 0], np.int32))
    np.testing.assert_array_equal(i, [0, 2])
    np.testing.assert_array_equal(j, [1, 0])
    assert i.dtype == np.int64 and j.dtype == np.int64
    i, j = check_pairs(CANDS, [], [])
    assert i.size == 0 and j.size == 0
