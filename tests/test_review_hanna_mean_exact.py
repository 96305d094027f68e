"""HANNA's stored LLM ratings averaged exactly (review): the cells are thirds, sixths, ... and a float mean of
them splits exact ties, which moves a Spearman correlation. ``LLMRatings.mean_rating`` and the results built on it
(``hanna_llm_scores.csv``'s mean-rating rows, ``hanna_large_pool.csv``'s mean-rating references) checked against
means of ``fractions.Fraction`` read from the release CSV by hand and ``scipy.stats``."""

import csv
import json
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from _fixtures_experiments import RESULTS, have_hanna
from hanna_raw import read_hanna_raw
from jaxrank.data import LLM_JUDGES, LLMRatings
from jaxrank.data.loaders import data_dir

ASPECTS = {"relevance": "RE", "coherence": "CH", "empathy": "EM", "surprise": "SU", "engagement": "EG",
           "complexity": "CX"}
needs_hanna = pytest.mark.skipif(not have_hanna(), reason="HANNA release absent")


def _frac(x: float) -> Fraction:
    """The fraction a CSV cell stands for: its decimal text's nearest fraction with a denominator up to 2,000
    where that is within 1e-9 (the release's cells are such fractions, a few computed in floating point:
    4.1000000000000005); else (a handful, e.g. 1.0967675200000002) the float itself."""
    f = Fraction(repr(float(x))).limit_denominator(2000)
    return f if abs(float(f) - x) < 1e-9 else Fraction(float(x))


def _ratings(rated, mask=None, valid=None) -> LLMRatings:
    x = np.asarray(rated, np.float64)
    mask = np.ones(x.shape[:-1], bool) if mask is None else np.asarray(mask, bool)
    valid = mask[..., None] & (x >= 1) if valid is None else valid
    return LLMRatings(x, mask, np.zeros(x.shape[:-1], np.float32), [], [], "j", "coherence", valid)


def test_mean_rating_keeps_exact_ties_a_float_mean_splits():
    cells = [[2, 7 / 3, 7 / 3, 5 / 3], [2, 8 / 3, 5 / 3, 2], [4.1000000000000005, 4.1, 3.9, 3.9]]
    assert np.float32(cells)[0].mean() != np.float32(cells)[1].mean()          # the defect: a float32 mean
    m = _ratings([cells]).mean_rating()
    assert m.dtype == np.float64 and m[0, 0] == m[0, 1] == 25 / 12 and m[0, 2] == 4.0
    assert stats.rankdata(m[0])[0] == stats.rankdata(m[0])[1]


def test_mean_rating_valid_only_padding_and_values_that_are_no_small_fraction():
    x = [[[-1, 5, 5, 4], [0.5, -1 / 3, 0.5, 0.5], [0.1234567891234, 1.0, 1.0, 1.0]],
         [[3, 3, 3, 3], [0, 0, 0, 0], [0, 0, 0, 0]]]
    r = _ratings(x, mask=[[True, True, True], [True, False, False]])
    assert r.mean_rating().tolist()[1] == [3.0, 0.0, 0.0]                    # padding: 0
    assert r.mean_rating()[0, 0] == float(Fraction(13, 4))
    assert r.mean_rating()[0, 2] == float((Fraction(0.1234567891234) + 3) / 4)  # no such fraction: its float exactly
    v = r.mean_rating(valid_only=True)
    assert v[0, 0] == float(Fraction(14, 3)) and np.isnan(v[0, 1]) and v[1, 0] == 3.0


def _stories():
    """``(rows, systems)``: the release CSV by ``Model`` and the system of each story (pool order)."""
    from jaxrank.data import match_systems

    rows, _ = read_hanna_raw(data_dir())
    return rows, match_systems()


def _exact(rows, systems, judge, code, column):
    """``(means [K][N] of Fraction, valid-only means (None where no cell >= 1), human [K][N])`` by hand."""
    cols = {v: {s: json.loads(rows[s][f"{judge} {code} {v}"]) for s in rows} for v in (1, 2, 3, 4)}
    human = {s: json.loads(rows[s][column]) for s in rows}
    means, kept, hum = [], [], []
    for k, names in enumerate(systems):
        cells = [[_frac(cols[v][s][k]) for v in (1, 2, 3, 4)] for s in names]
        means.append([sum(c) / 4 for c in cells])
        kept.append([sum(x for x in c if x >= 1) / sum(x >= 1 for x in c) if any(x >= 1 for x in c) else None
                     for c in cells])
        hum.append([float(Fraction(repr(human[s][k])).limit_denominator(12)) for s in names])
    return means, kept, hum


@needs_hanna
def test_load_llm_ratings_keeps_float64_and_mean_rating_is_the_fraction_mean():
    from jaxrank.data import load_llm_ratings

    rows, systems = _stories()
    for judge, aspect in (("Beluga-13B", "coherence"), ("OrcaPlatypus", "surprise"), ("Llama-13B", "relevance")):
        r = load_llm_ratings(judge, aspect, systems=systems)
        assert r.ratings.dtype == np.float64
        means, kept, _ = _exact(rows, systems, judge, ASPECTS[aspect], aspect.capitalize())
        np.testing.assert_array_equal(r.mean_rating(), np.array([[float(m) for m in row] for row in means]))
        v = r.mean_rating(valid_only=True)
        want = np.array([[np.nan if m is None else float(m) for m in row] for row in kept])
        np.testing.assert_array_equal(v, want)


def _rho(pred, human) -> float:
    s = [stats.spearmanr(p, h).statistic for p, h in zip(pred, human)]
    return float(np.nanmean(s))


@needs_hanna
@pytest.mark.skipif(not (RESULTS / "hanna_llm_scores.csv").is_file(), reason="no stored hanna_llm_scores.csv")
def test_stored_mean_rating_rows_are_scipy_spearman_on_fraction_means():
    """Every judge and aspect of ``hanna_llm_scores.csv``: the pointwise rows against SciPy on exact means
    (float32 means gave Beluga-13B coherence 0.531 instead of 0.534)."""
    rows, systems = _stories()
    with open(RESULTS / "hanna_llm_scores.csv", newline="") as f:
        stored = {(r["judge"], r["aspect"], r["scorer"]): float(r["spearman"]) for r in csv.DictReader(f)
                  if r["pairwise_p"] == "-"}
    checked = 0
    for judge in LLM_JUDGES:
        for aspect, code in ASPECTS.items():
            if (judge, aspect, "mean_rating (pointwise)") not in stored:
                continue
            means, kept, human = _exact(rows, systems, judge, code, aspect.capitalize())
            want = _rho([[float(m) for m in row] for row in means], human)
            assert stored[(judge, aspect, "mean_rating (pointwise)")] == pytest.approx(want, abs=1e-6), (judge, aspect)
            on = [[m is not None for m in row] for row in kept]
            want = _rho([[float(m) for m, o in zip(row, o_) if o] for row, o_ in zip(kept, on)],
                        [[h for h, o in zip(row, o_) if o] for row, o_ in zip(human, on)])
            got = stored[(judge, aspect, "mean_rating (pointwise, cells >= 1 only)")]
            assert got == pytest.approx(want, abs=1e-6), (judge, aspect)
            checked += 1
    assert checked >= 1
    if ("Beluga-13B", "coherence", "mean_rating (pointwise)") in stored:
        assert f"{stored[('Beluga-13B', 'coherence', 'mean_rating (pointwise)')]:.3f}" == "0.534"


@needs_hanna
@pytest.mark.skipif(not (RESULTS / "hanna_large_pool.csv").is_file(), reason="no stored hanna_large_pool.csv")
def test_stored_large_pool_mean_rating_references_on_fraction_means():
    """``hanna_large_pool.csv``'s mean-rating reference of every judge and aspect: SciPy's Spearman, Kendall
    tau-b and Pearson over the 1,056 stories between exact means and the human means."""
    rows, systems = _stories()
    with open(RESULTS / "hanna_large_pool.csv", newline="") as f:
        refs = [r for r in csv.DictReader(f) if r["selection"] == "reference"
                and r["scorer"] == "mean_rating (pointwise)"]
    assert refs
    for r in refs:
        means, _, human = _exact(rows, systems, r["judge"], ASPECTS[r["aspect"]], r["aspect"].capitalize())
        x = np.array([float(m) for row in means for m in row])
        h = np.array([v for row in human for v in row])
        assert float(r["spearman"]) == pytest.approx(stats.spearmanr(x, h).statistic, abs=2e-6), r
        assert float(r["kendall_tau"]) == pytest.approx(stats.kendalltau(x, h).statistic, abs=2e-6), r
        assert float(r["pearson"]) == pytest.approx(stats.pearsonr(x, h).statistic, abs=2e-5), r
