"""experiments/geval.py: the summary of stored G-Eval records against an independent SciPy computation.

Synthetic records (no model): Spearman / Kendall per article from ``scipy.stats``,
articles with constant scores counted apart and left out of the mean, and the
reproduction report's G-Eval rows read from the summary the script writes.
"""

import json
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau, spearmanr
from _fixtures_experiments import load_script

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    return load_script(ROOT / "experiments" / f"{name}.py", name)


def _records(rng, k=6, n=16):
    out = []
    for cot in (True, False):
        for c in range(k):
            human = rng.integers(1, 6, n).astype(float) + rng.normal(0, 0.01, n)
            weighted = human + rng.normal(0, 2.0, n)
            plain = np.full(n, 3.0) if c < 2 else np.clip(np.round(weighted), 1, 5)   # 2 constant articles
            out.append({"aspect": "coherence", "cot": cot, "context": f"A{c}", "human": human.tolist(),
                        "weighted": weighted.tolist(), "plain": plain.tolist(), "steps": "1. Read." if cot else ""})
    return out


def test_summary_matches_scipy_and_counts_constant_articles(tmp_path):
    geval = _load("geval")
    recs = _records(np.random.default_rng(0))
    rows = {(r["cot"], r["score"]): r for r in geval.summarise(recs)}
    for cot in (True, False):
        mine = [r for r in recs if r["cot"] == cot]
        rho = [spearmanr(r["weighted"], r["human"])[0] for r in mine]
        tau = [kendalltau(r["weighted"], r["human"])[0] for r in mine]
        w = rows[(cot, "weighted")]
        assert w["defined"] == 6 and w["constant_scores"] == 0
        np.testing.assert_allclose(w["spearman"], np.mean(rho), atol=1e-5)
        np.testing.assert_allclose(w["kendall"], np.mean(tau), atol=1e-5)
        assert w["spearman_lo"] <= w["spearman"] <= w["spearman_hi"]
        p = rows[(cot, "plain")]
        assert p["defined"] == 4 and p["constant_scores"] == 2
        np.testing.assert_allclose(p["spearman"], np.mean([spearmanr(r["plain"], r["human"])[0] for r in mine[2:]]),
                                   atol=1e-5)
    # the files, and the report's rows read back from the CSV
    stem = tmp_path / "geval" / "geval-summeval-tiny-0.5b"
    stem.parent.mkdir()
    text = geval.write(geval.summarise(recs), recs, "tiny-0.5b", "summeval", stem)
    assert (tmp_path / "geval" / "geval-summeval-tiny-0.5b.csv").is_file()      # the dotted name kept whole
    assert "1. Read." in text and "| coherence | yes | weighted |" in text
    rep = _load("reproduction").geval_rows(tmp_path)
    assert len(rep) == 1 and rep[0][1].startswith("tiny-0.5b")
    assert f"weighted, CoT {rows[(True, 'weighted')]['spearman']:.3f}" in rep[0][3]


def test_summary_of_all_constant_scores_is_stated_not_nan():
    geval = _load("geval")
    recs = _records(np.random.default_rng(1), k=2)          # both articles' plain scores constant
    row = next(r for r in geval.summarise(recs) if r["score"] == "plain")
    assert row["defined"] == 0 and row["constant_scores"] == 2
    assert geval._cell(row, "spearman").startswith("undefined")
    json.dumps(row)                                          # the CSV/JSON writers take it
