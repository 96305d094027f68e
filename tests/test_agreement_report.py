"""The assess report's agreement as the field reports it: Spearman, Kendall tau-b and Pearson per context, the
system level, and the human ceiling beside the scorers (or the reason there is none)."""

import numpy as np
import pytest
from scipy import stats

import jaxrank as jr
from jaxrank import metrics
from jaxrank.assessment.report import assess_comparisons
from jaxrank.data import label_matrix, load_dataset
from jaxrank.data.loaders import data_dir

try:
    HAVE = (data_dir() / "personachat_usr" / "topicalchat_usr.json").is_file() and \
        (data_dir() / "summeval" / "summeval.jsonl").is_file()
except FileNotFoundError:
    HAVE = False
needs_data = pytest.mark.skipif(not HAVE, reason="data not present")


def _judged(labels, mask, seed=0, noise=1.0):
    """All ordered pairs of each context, judged by a noisy logistic of the human difference."""
    rng = np.random.default_rng(seed)
    cs = []
    for h, m in zip(labels, mask):
        n = int(m.sum())
        i, j = np.nonzero(~np.eye(n, dtype=bool))
        p = 1 / (1 + np.exp(-(h[i] - h[j] + noise * rng.normal(size=len(i)))))
        cs.append(jr.Comparisons.from_pairs(i, j, p, num_items=labels.shape[1]))
    return jr.stack_contexts(cs)


def _first_contexts_report(dataset, aspect, k, *, num_bootstrap):
    """The data set's label matrix and the win-ratio report of :func:`_judged` on its first ``k`` contexts."""
    lm = label_matrix(load_dataset(dataset), aspect)
    rep = assess_comparisons(_judged(lm.labels[:k], lm.mask[:k]), lm.labels[:k], contexts=lm.context_ids[:k],
                             candidates=lm.candidate_ids[:k], dataset=dataset, aspect=aspect,
                             methods=("win_ratio",), num_bootstrap=num_bootstrap)
    return lm, rep


def test_three_correlations_and_system_level_with_given_systems():
    rng = np.random.default_rng(1)
    labels = rng.integers(1, 6, size=(8, 5)).astype(np.float32)
    mask = np.ones(labels.shape, bool)
    systems = [[f"sys{n}" for n in range(5)] for _ in range(8)]
    labels += np.arange(5, dtype=np.float32)[None] * 0.5                      # systems differ
    rep = assess_comparisons(_judged(labels, mask), labels, methods=("win_ratio", "bradley_terry"),
                             systems=systems, num_bootstrap=300)
    for m in rep.methods:
        np.testing.assert_array_equal(rep.correlations["spearman"][m], rep.spearman[m])
        for name, ref in (("kendall_tau", stats.kendalltau), ("pearson", stats.pearsonr)):
            want = [ref(s, h)[0] for s, h in zip(rep.scores[m], labels)]
            np.testing.assert_allclose(rep.correlations[name][m], want, atol=1e-5)
            assert rep.correlation_mean[name][m] == pytest.approx(np.mean(want), abs=1e-5)
            lo, hi = rep.correlation_interval[name][m]
            assert lo <= rep.correlation_mean[name][m] <= hi
        sm, hm = rep.scores[m].mean(0), labels.mean(0)                        # system n = column n
        assert rep.system["spearman"][m] == pytest.approx(stats.spearmanr(sm, hm)[0], abs=1e-5)
        assert rep.system["pearson"][m] == pytest.approx(stats.pearsonr(sm, hm)[0], abs=1e-5)
    assert rep.num_systems == 5 and rep.ceiling is None and rep.ceiling_note is None
    text = rep.markdown("t")
    assert "**Agreement as the field reports it.**" in text and "At the system level (5 systems)" in text
    assert "| scorer | Spearman | Kendall | Pearson | system Spearman | system Kendall | system Pearson |" in text
    assert "human ceiling" not in text.lower()


def test_without_systems_no_system_columns():
    labels = np.array([[3.0, 2.0, 1.0, 4.0]] * 6, np.float32)
    rep = assess_comparisons(_judged(labels, np.ones(labels.shape, bool)), labels, methods=("win_ratio",),
                             num_bootstrap=100)
    text = rep.markdown("t")
    assert "| scorer | Spearman | Kendall | Pearson |" in text and "system Spearman" not in text
    assert rep.system == {} and rep.num_systems == 0


@needs_data
def test_personachat_report_prints_the_ceiling_on_the_same_contexts():
    k = 10
    lm, rep = _first_contexts_report("personachat", "overall", k, num_bootstrap=200)
    h = jr.data.human_ceiling("personachat", "overall", contexts=lm.context_ids[:k], num_bootstrap=200)
    assert rep.ceiling.contexts == lm.context_ids[:k]
    for m in metrics.CORRELATIONS:
        assert rep.ceiling.mean[m] == pytest.approx(h.mean[m])
    assert rep.num_systems == 5
    text = rep.markdown("t")
    assert "| human ceiling (one rater vs the others) | " + f"{h.mean['spearman']:+.3f}" in text
    assert "Human ceiling: personachat overall, one rater against the mean of the others" in text
    assert "on the same 10 contexts" in text


@needs_data
def test_summeval_report_says_what_cannot_be_computed():
    _, rep = _first_contexts_report("summeval", "coherence", 5, num_bootstrap=100)
    text = rep.markdown("t")
    assert rep.ceiling is None and rep.system == {}
    assert ("Human ceiling: not computable from this file: means only (the file holds only the mean of the 3 "
            "experts per summary).") in text
    assert "System level: not computable from this file: summary_id is a position within the article" in text


def test_own_texts_get_no_ceiling_words():
    labels = np.array([[3.0, 2.0, 1.0]] * 5, np.float32)
    rep = assess_comparisons(_judged(labels, np.ones(labels.shape, bool)), labels, methods=("win_ratio",),
                             dataset="mytexts-1a2b3c", aspect="score", contexts=[f"c{k}" for k in range(5)],
                             candidates=[["a", "b", "c"]] * 5, num_bootstrap=100)
    assert rep.ceiling is None and rep.ceiling_note is None and rep.system_note is None
