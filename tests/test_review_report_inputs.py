"""The report on its inputs (review of the assessment report, items 6, 7, 10, 11 and 15).

* System means equal as rationals but a few float32 ulps apart in float are tied at the system level, as
  SciPy ties the exact means (item 6); distinct means stay distinct.
* One context as ``judge_comparisons`` returns it (``batch_shape ()``) gives the report of a batch of one
  (item 7).
* A context without human scores says so, apart from one whose humans gave constant scores (item 10).
* One scorer: the verdict says there is nothing to compare it with (item 15).
* Bad ``seed`` and ``methods`` are refused naming the argument; one name is one scorer (item 11).
"""

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from jaxrank import metrics
from jaxrank.assessment.report import assess_comparisons
from jaxrank.comparisons import Comparisons, stack_contexts


def _all_pairs(n, rng):
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    p = rng.uniform(0, 1, len(i)).astype(np.float32)
    return Comparisons.from_pairs(i.astype(np.int32), j.astype(np.int32), p, num_items=n)


def _scipy_all(m, h):
    return {"spearman": stats.spearmanr(m, h).statistic, "kendall_tau": stats.kendalltau(m, h).statistic,
            "pearson": stats.pearsonr(m, h).statistic}


# ------------------------------------------------------------------ item 6: system means tied within rounding
def test_system_means_equal_as_fractions_are_tied():
    """Systems 0 and 1 both average 29/72 (from different fractions, stored in float32): their float means
    differ in the last bits, SciPy on the exact means ties them."""
    fr = {0: ["1/3", "5/8", "1/2", "1/4", "1/2", "1/2", "1/2", "1/6", "1/4"],
          1: ["3/8", "1/6", "1/2", "1/2", "1/2", "3/8"],
          2: ["1/2", "3/4"], 3: ["1/8", "1/4", "1/4"], 4: ["5/6", "2/3"]}
    human = {0: 1.0, 1: 3.0, 2: 2.0, 3: 0.5, 4: 4.0}
    rows = [(s, Fraction(x)) for s, xs in fr.items() for x in xs]
    pred = np.array([[np.float32(float(x))] for _, x in rows], np.float32)        # one candidate per context
    sid = np.array([[s] for s, _ in rows])
    gold = np.array([[human[s]] for s, _ in rows], np.float32)
    exact = {s: sum(map(Fraction, xs)) / len(xs) for s, xs in fr.items()}
    assert exact[0] == exact[1] == Fraction(29, 72)
    means64 = {s: pred[sid == s].astype(np.float64).mean() for s in fr}
    assert means64[0] != means64[1]                                       # the float noise the report read
    m = np.array([float(exact[s]) for s in sorted(fr)])
    h = np.array([human[s] for s in sorted(fr)])
    want = _scipy_all(m, h)
    got = metrics.system_level(pred, gold, sid)
    for name, value in want.items():
        assert float(got[name]) == pytest.approx(value, abs=1e-6), name
    # weights (a bootstrap resample) keep the tie: repeated contexts
    w = np.ones(len(rows))
    w[::3] = 2.0
    rep = np.repeat(np.arange(len(rows)), w.astype(int))
    again = metrics.system_level(pred[rep], gold[rep], sid[rep])
    got_w = metrics.system_level(pred, gold, sid, weights=w)
    for name in want:
        assert float(got_w[name]) == pytest.approx(float(again[name]), abs=1e-6), name


def test_distinct_float64_means_stay_distinct():
    """Float64 system means 1e-9 apart are an order, not a tie."""
    pred = np.array([[1.0, 1.0 + 1e-9, 0.5, 2.0]])
    gold = np.array([[2.0, 1.0, 3.0, 4.0]])
    sid = np.arange(4)[None]
    got = metrics.system_level(pred, gold, sid)
    want = _scipy_all(pred[0], gold[0])
    for name, value in want.items():
        assert float(got[name]) == pytest.approx(value, abs=1e-6), name


def test_report_system_level_ties_exact_means():
    """The reviewer's case: six systems over ten contexts; win_ratio's means of sys3 and sys4 are both 29/72.
    The report's system correlations equal SciPy's on the exact (rational) means."""
    rng = np.random.default_rng(3)
    sets, labs, systems = [], [], []
    for c in range(10):
        n = 5 if c % 2 else 4
        sets.append(_all_pairs(n, rng))
        lab = rng.normal(size=n).astype(np.float32)
        if c == 3:
            lab[1] = np.nan
        labs.append(np.pad(lab, (0, 5 - n), constant_values=np.nan))
        systems.append([f"sys{(k + c) % 6}" for k in range(n)])
    labels = np.stack(labs)
    rep = assess_comparisons(stack_contexts(sets), labels, methods=("win_ratio",), systems=systems,
                             num_bootstrap=50)
    s = rep.scores["win_ratio"]
    acc: dict = {}
    for r in range(10):
        for k, sy in enumerate(systems[r]):
            if np.isfinite(labels[r, k]):
                f = Fraction(float(s[r, k])).limit_denominator(100)
                assert np.float32(float(f)) == s[r, k]                     # the fraction is the float32 score
                acc.setdefault(sy, []).append((f, float(labels[r, k])))
    names = sorted(acc)
    m_exact = [sum(f for f, _ in acc[q]) / len(acc[q]) for q in names]
    assert m_exact[3] == m_exact[4] == Fraction(29, 72)
    m = np.array([float(x) for x in m_exact])
    h = np.array([np.mean([y for _, y in acc[q]]) for q in names])
    for name, value in _scipy_all(m, h).items():
        assert rep.system[name]["win_ratio"] == pytest.approx(value, abs=1e-5), name


# ------------------------------------------------------------------ item 7: one unbatched context
def test_one_context_unbatched_gives_the_batch_of_one_report():
    rng = np.random.default_rng(0)
    c = _all_pairs(5, rng)
    h = np.array([1.0, 2.0, 3.0, 5.0, 4.0], np.float32)
    kw = dict(methods=("win_ratio", "average_probability"), num_bootstrap=50)
    one = assess_comparisons(c, h, contexts="q", candidates=list("abcde"), systems=list("xxyyz"), **kw)
    batch = assess_comparisons(stack_contexts([c]), h[None], contexts=["q"], candidates=[list("abcde")],
                               systems=[list("xxyyz")], **kw)
    assert one.contexts == batch.contexts == ["q"]
    assert one.markdown("t") == batch.markdown("t")
    for m in kw["methods"]:
        np.testing.assert_array_equal(one.scores[m], batch.scores[m])
        assert one.scores[m].shape == (1, 5)
        # against SciPy on the one context's scores
        assert one.spearman[m][0] == pytest.approx(stats.spearmanr(one.scores[m][0], h).statistic, abs=1e-6)
        assert one.system["spearman"][m] == pytest.approx(batch.system["spearman"][m])
    # order consistency from the comparisons, by hand: each unordered pair judged both ways
    i, j, p = np.asarray(c.i), np.asarray(c.j), np.asarray(c.p, np.float64)
    q = {(a, b): v for a, b, v in zip(i, j, p)}
    won = {k: (v > 0.5) + 0.5 * (v == 0.5) for k, v in q.items()}
    agree = [1.0 - abs(won[(a, b)] + won[(b, a)] - 1.0) for (a, b) in q if a < b]
    assert one.overall_consistency == pytest.approx(np.mean(agree))
    assert np.isfinite(one.overall_consistency)
    np.testing.assert_array_equal(one.num_items, [5])


# ------------------------------------------------------------------ item 10: no human scores vs constant ones
def test_contexts_without_human_scores_are_not_called_constant():
    rng = np.random.default_rng(0)
    sets = [_all_pairs(4, rng) for _ in range(4)]
    labels = np.array([[1, 2, 3, 4], [3, 3, 3, 3], [np.nan] * 4, [2, np.nan, np.nan, np.nan]], np.float32)
    rep = assess_comparisons(stack_contexts(sets), labels, contexts=["ok", "flat", "none", "single"],
                             methods=("win_ratio",), num_bootstrap=50)
    notes = "\n".join(rep.notes())
    assert "no human scores in 1 of 4 contexts (none)" in notes
    assert "humans gave constant scores in 1 of 4 contexts (flat)" in notes
    assert "a single human score in 1 of 4 contexts (single)" in notes
    rows = {line.split("|")[1].strip(): line for line in rep.context_table().splitlines()[2:]}
    assert rows["none"].rstrip().endswith("| no humans |")
    assert rows["flat"].rstrip().endswith("| const (humans) |")
    assert rows["single"].rstrip().endswith("| one human |")
    np.testing.assert_array_equal(rep.human_counts, [4, 4, 0, 1])
    assert np.isnan(rep.spearman["win_ratio"][1:]).all()


# ------------------------------------------------------------------ item 15: one scorer
def _five_contexts(rng=None):
    rng = rng or np.random.default_rng(1)
    sets = [_all_pairs(4, rng) for _ in range(6)]
    labels = np.tile(np.array([1, 2, 3, 4], np.float32), (6, 1))
    return stack_contexts(sets), labels


def test_one_scorer_verdict_compares_with_no_other():
    c, labels = _five_contexts()
    rep = assess_comparisons(c, labels, methods=("win_ratio",), num_bootstrap=50)
    line = rep.verdict_line()
    assert "ahead of every other" not in line and "Best scorer" not in line
    assert line.startswith("**Verdict.** One scorer: win_ratio") and "no other scorer" in line
    two = assess_comparisons(c, labels, methods=("win_ratio", "average_probability"), num_bootstrap=50)
    two.spearman["average_probability"] = np.full(6, np.nan)          # as if undefined everywhere
    two.mean["average_probability"] = float("nan")
    line = two.verdict_line()
    assert "ahead of every other" not in line
    assert "Only win_ratio has a defined mean Spearman" in line and "average_probability" in line


# ------------------------------------------------------------------ item 11: bad seed and methods
@pytest.mark.parametrize("humans", [True, False])
def test_bad_seed_names_seed(humans):
    c, labels = _five_contexts()
    if not humans:
        labels = np.full_like(labels, np.nan)
    for seed in (-1, 1.5, True, "0"):
        with pytest.raises(ValueError, match="seed"):
            assess_comparisons(c, labels, methods=("win_ratio",), seed=seed, num_bootstrap=10)


def test_bad_methods_name_methods():
    c, labels = _five_contexts()
    for methods, words in (((), "methods is empty"), ([], "methods is empty"), (5, "methods must be"),
                           (("win_ratio", "nope"), r"methods: unknown \['nope'\]"),
                           (("win_ratio", 3), r"methods: unknown \[3\]"),
                           (("win_ratio", "win_ratio"), "more than once")):
        with pytest.raises(ValueError, match=words):
            assess_comparisons(c, labels, methods=methods, num_bootstrap=10)
    one = assess_comparisons(c, labels, methods="win_ratio", num_bootstrap=50)
    ref = assess_comparisons(c, labels, methods=("win_ratio",), num_bootstrap=50)
    assert one.methods == ("win_ratio",)
    assert one.markdown("t") == ref.markdown("t")


def test_bad_comparisons_named():
    _, labels = _five_contexts()
    with pytest.raises(ValueError, match="comparisons must be a jaxrank.Comparisons"):
        assess_comparisons(np.zeros((6, 4)), labels)
    rng = np.random.default_rng(0)
    c = stack_contexts([_all_pairs(4, rng)] * 4)
    c2 = Comparisons(c.i.reshape(2, 2, -1), c.j.reshape(2, 2, -1), c.p.reshape(2, 2, -1),
                     c.weight.reshape(2, 2, -1), c.item_mask.reshape(2, 2, -1), num_items=4)
    with pytest.raises(ValueError, match="comparisons must be one context or a \\[C\\] batch"):
        assess_comparisons(c2, labels[:4].reshape(2, 2, 4))
