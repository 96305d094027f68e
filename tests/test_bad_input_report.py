"""``assess_comparisons`` refuses per-context ids of the wrong length and infinite human scores, naming the
argument (jaxrank.assessment.report); a report used to drop a context from its table silently while its
summary used both, and an infinite label made the correlations NaN without a word."""

import numpy as np
import pytest
import scipy.stats

import jaxrank as jr
from jaxrank.assessment.report import assess_comparisons

H = np.array([[3.0, 2.0, 1.0], [1.0, 3.0, 2.0]], np.float32)


def _comparisons():
    """Two contexts of 3 items, all ordered pairs judged by the human order (p = 0.8 for the better)."""
    rows = []
    for h in H:
        pairs = [(a, b) for a in range(3) for b in range(3) if a != b]
        rows.append(jr.Comparisons.from_pairs([a for a, _ in pairs], [b for _, b in pairs],
                                              [0.8 if h[a] > h[b] else 0.2 for a, b in pairs], num_items=3))
    return jr.stack_contexts(rows)


@pytest.mark.parametrize("kw, name", [
    (dict(contexts=["q1"]), "contexts"),
    (dict(contexts=["q1", "q2", "q3"]), "contexts"),
    (dict(contexts="q1q2"), "contexts"),
    (dict(candidates=[["a", "b", "c"]]), "candidates"),
    (dict(candidates=[["a", "b", "c"], ["a", "b"]]), r"candidates\[1\]"),
    (dict(candidates=[["a", "b", "c"], ["a", "b", "c", "d"]]), r"candidates\[1\]"),
    (dict(systems=[["s1", "s2", "s3"]]), "systems"),
])
def test_per_context_ids_of_the_wrong_length_are_refused(kw, name):
    with pytest.raises(ValueError, match=name):
        assess_comparisons(_comparisons(), H, methods=("average_probability",), **kw)


@pytest.mark.parametrize("value", [np.inf, -np.inf, 1e39])
def test_infinite_labels_are_refused(value):
    h = H.astype(np.float64).copy()
    h[1, 2] = value
    with pytest.raises(ValueError, match=r"labels must be finite .* at \(1, 2\)"):
        assess_comparisons(_comparisons(), h, methods=("average_probability",))


def test_nan_labels_still_mean_missing_and_right_ids_give_every_context():
    h = H.copy()
    h[1, 0] = np.nan
    rep = assess_comparisons(_comparisons(), h, methods=("average_probability",), contexts=["q1", "q2"],
                             candidates=[["a", "b", "c"], ["a", "b", "c"]])
    assert rep.contexts == ["q1", "q2"]
    s = rep.scores["average_probability"]
    want = [scipy.stats.spearmanr(s[0], H[0]).statistic, scipy.stats.spearmanr(s[1, 1:], H[1, 1:]).statistic]
    np.testing.assert_allclose(rep.spearman["average_probability"], want, atol=1e-6)
    text = rep.markdown("t")
    assert "q1" in text and "q2" in text
