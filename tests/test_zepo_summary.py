"""experiments/zepo_summary.py: the report parser and the pooled fairness-vs-agreement correlation."""

import csv
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats
from _fixtures_experiments import load_script

ROOT = Path(__file__).resolve().parents[1]


def _load():
    return load_script(ROOT / "experiments" / "zepo_summary.py", "_exp_zepo_summary")


summary = _load()

REPORT = """# ZEPO study: summeval fluency, judge smollm2-135m, paraphraser smollm2-135m

search: 3 contexts x 4 candidates, 36 comparisons per prompt (both orders); 1 epochs x population 4, temperature 0.9, seed 0; held-out contexts 50:54

## Seed vs ZEPO prompt on 4 held-out contexts (96 comparisons per prompt)

| prompt | scorer | debias | fairness | P(A) | Spearman | 95% CI | contexts with a defined Spearman |
|---|---|---|---|---|---|---|---|
| seed | win_ratio | permutation | -0.494 | 0.99 | +0.073 | [-0.270, +0.365] | 4 / 4 |
| ZEPO | win_ratio | permutation | -0.406 | 0.09 | +0.017 | [-0.301, +0.306] | 3 / 4 |

- ZEPO - seed (win_ratio, permutation): -0.057 [-0.341, +0.256] (paired over the 3 contexts where both are defined)

time: search 15 s (120 comparisons judged this run), held-out judging 1 s, total 23 s; load 1.0 1.0 1.0
"""


def test_parse_report_reads_every_field(tmp_path):
    p = tmp_path / "zepo-summeval-fluency-smollm2-135m.md"
    p.write_text(REPORT)
    r = summary.parse_zepo_md(p)
    assert (r["data"], r["aspect"], r["judge"], r["paraphraser"]) == ("summeval", "fluency", "smollm2-135m",
                                                                      "smollm2-135m")
    assert (r["search_contexts"], r["candidates"], r["eval_contexts"], r["eval_range"]) == (3, 4, 4, "50:54")
    assert [x["prompt"] for x in r["rows"]] == ["seed", "ZEPO"]
    assert r["rows"][1]["ci"] == (-0.301, 0.306) and r["rows"][1]["defined"] == "3 / 4"
    assert r["diffs"][("win_ratio", "permutation")] == (-0.057, -0.341, 0.256, 3)
    assert r["time_s"] == 23 and r["judged_this_run"] == 120


def test_parse_report_rejects_other_files_naming_them(tmp_path):
    p = tmp_path / "zepo-x.md"
    p.write_text("# something else\n")
    with pytest.raises(ValueError, match="zepo-x.md"):
        summary.parse_zepo_md(p)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.floats(-0.5, 0), st.floats(-1, 1)), min_size=4, max_size=20, unique_by=lambda t: t[0]))
def test_one_group_correlation_is_scipy_spearman(pts):
    f, s = (np.array(x) for x in zip(*pts))
    if np.ptp(s) == 0:
        return
    r, lo, hi, p, n = summary.pooled_corr({"g": (f, s)}, np.random.default_rng(0), 50, centre=False)
    want = stats.spearmanr(f, s)
    assert n == len(f)
    np.testing.assert_allclose([r, p], [want[0], want[1]], rtol=1e-10, atol=1e-12)


def test_centring_removes_a_between_group_shift():
    rng = np.random.default_rng(1)
    f1, s1 = rng.uniform(-0.5, 0, 12), rng.uniform(-1, 1, 12)
    f2, s2 = f1 + 10.0, s1 + 10.0          # a second "aspect": same prompts, shifted levels
    raw = summary.pooled_corr({"a": (f1, s1), "b": (f2, s2)}, rng, 20, centre=False)[0]
    cen = summary.pooled_corr({"a": (f1, s1), "b": (f2, s2)}, rng, 20, centre=True)[0]
    x = np.concatenate([f1 - f1.mean(), f2 - f2.mean()])
    y = np.concatenate([s1 - s1.mean(), s2 - s2.mean()])
    assert cen == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    assert raw > 0.6 and raw > abs(cen)   # the shift alone makes the raw pooled value large
    with_single = summary.pooled_corr({"a": (f1, s1), "b": (f2, s2), "one": ([-0.3], [0.9])}, rng, 20, centre=True)
    assert with_single[0] == pytest.approx(cen, abs=1e-12) and with_single[4] == 24


def test_main_writes_table_and_plot_from_stored_results(tmp_path):
    run = tmp_path / "a"
    run.mkdir()
    (run / "zepo-summeval-fluency-smollm2-135m.md").write_text(REPORT)
    f = [-0.5, -0.4, -0.3, -0.2, -0.1]
    s = [0.1, 0.3, 0.2, 0.5, 0.4]
    with open(run / "zepo-summeval-fluency-smollm2-135m-prompts.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["epoch", "template_key", "decision_rate", "fairness", "spearman"])
        for k, (x, y) in enumerate(zip(f, s)):
            w.writerow([0, f"t{k}", 0.5, x, y])
    summary.main(["--results", str(tmp_path), "--soft", "", "--bootstrap", "50"])
    text = (tmp_path / "zepo_summary.md").read_text()
    assert f"| summeval fluency / smollm2-135m | 5 | {stats.spearmanr(f, s)[0]:+.2f} |" in text
    assert "-0.057 [-0.341, +0.256] (n=3)" in text
    assert (tmp_path / "zepo_summary.png").stat().st_size > 0
    with pytest.raises(ValueError, match="--results"):
        summary.main(["--results", str(tmp_path / "missing")])
