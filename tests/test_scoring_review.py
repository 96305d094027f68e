"""Review fixes in hard Bradley-Terry and the tie groups, against independent float64 / closed-form references.

* ``_ties.tie_scores``: a tie group does not chain neighbour gaps: it spans at most the tolerance.
"""

from __future__ import annotations

import numpy as np

from jaxrank.comparisons import Comparisons
from jaxrank.scoring import poe_bradley_terry


def test_tie_groups_do_not_chain_small_gaps():
    """A star: leaf ``k`` (of 200) against the hub with ``p = 1/2 + 5e-7 k``. PoE-BT's exact scores are closed
    form, ``s_k - s_hub = logit(p_k)`` (each leaf's only comparison is matched exactly), steps of 2e-6 that a
    float32 solve resolves only roughly. Chaining neighbour gaps merged all 200 leaves into one score (error 2e-4,
    half the leaves' span); a group now spans at most the tolerance, so the error stays at the solve's rounding."""
    m = 200
    n = m + 1
    i, j = np.arange(1, n), np.zeros(m, int)
    p = (0.5 + 5e-7 * np.arange(1, m + 1)).astype(np.float32)
    p64 = p.astype(np.float64)
    truth = np.r_[0.0, np.log(p64 / (1 - p64))]
    truth -= truth.mean()
    c = Comparisons.from_pairs(i.astype(np.int32), j.astype(np.int32), p, num_items=n)
    for kw in ({}, {"eps": 0.0}):
        got = np.asarray(poe_bradley_terry(c, **kw), np.float64)
        assert np.max(np.abs(got - truth)) < 2e-5, kw
        assert len(np.unique(got[1:])) > 20, kw
        # groups still tie only neighbours the solve cannot resolve: each group spans under 2e-5 of the truth
        for v in np.unique(got[1:]):
            assert np.ptp(truth[np.r_[False, got[1:] == v]]) < 2e-5
