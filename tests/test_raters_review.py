"""``human_ceiling(contexts=, candidates=)``: candidates without contexts, a candidates list of another length
and repeated ids are refused by name (they were ignored, truncated by ``zip`` or double-counted); a valid
restriction equals the ceiling recomputed by hand on the same rows."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from jaxrank.data.loaders import data_dir
from jaxrank.data.raters import human_ceiling, rater_scores

try:
    HAVE = (data_dir() / "personachat_usr" / "topicalchat_usr.json").is_file()
except FileNotFoundError:
    HAVE = False
pytestmark = pytest.mark.skipif(not HAVE, reason="PersonaChat data not present")


@pytest.fixture(scope="module")
def rs():
    return rater_scores("personachat", "overall")


def _ceiling(**kw):
    return human_ceiling("personachat", "overall", num_bootstrap=20, **kw)


def test_candidates_without_contexts_is_refused(rs):
    with pytest.raises(ValueError, match="candidates needs contexts"):
        _ceiling(candidates=[rs.candidate_ids[0][:2]])


@pytest.mark.parametrize("num_lists", [3, 11])
def test_candidates_must_hold_one_list_per_context(rs, num_lists):
    ctx = rs.context_ids[:10]
    with pytest.raises(ValueError, match=rf"one list per context of contexts \(10\), got {num_lists}"):
        _ceiling(contexts=ctx, candidates=[rs.candidate_ids[0][:3]] * num_lists)


def test_repeated_contexts_or_candidates_are_refused(rs):
    ctx = rs.context_ids[:2]
    with pytest.raises(ValueError, match="contexts repeats"):
        _ceiling(contexts=ctx + ctx)
    ids = rs.candidate_ids[0]
    with pytest.raises(ValueError, match="repeats"):
        _ceiling(contexts=ctx[:1], candidates=[[ids[0], ids[0], ids[1]]])
    with pytest.raises(ValueError, match="contexts must be a list"):
        _ceiling(contexts=ctx[0])


def test_a_valid_restriction_is_the_ceiling_by_hand(rs):
    ctx = [rs.context_ids[k] for k in (4, 1, 7)]
    cands = [rs.candidate_ids[k][:4] for k in (4, 1, 7)]
    got = _ceiling(contexts=ctx, candidates=cands)
    want = []
    for k in (4, 1, 7):
        x = np.asarray(rs.scores[k, :4], float)                # [4 candidates, K raters]
        vals = []
        for r in range(x.shape[1]):
            others = np.delete(x, r, axis=1).mean(1)
            v = stats.spearmanr(x[:, r], others)[0] if np.ptp(x[:, r]) > 0 and np.ptp(others) > 0 else np.nan
            if np.isfinite(v):
                vals.append(v)
        want.append(np.mean(vals) if vals else np.nan)
    np.testing.assert_allclose(got.per_context["spearman"], want, atol=1e-6)
    assert got.contexts == ctx
