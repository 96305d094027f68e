"""experiments/zepo_summary.py after review: only study reports are read, each run's reading is shown, and the
fairness-agreement correlation's interval is honest where few prompts are off the most common fairness.

Independent checks: the Fisher-z interval against its closed form written out here, the bootstrap's undefined
resamples against the binomial probability that a resample holds only tied fairness values, the bootstrap
interval against ``scipy.stats.bootstrap``, the label mass against the median of the rows written here.
"""

import csv
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


def _load():
    spec = importlib.util.spec_from_file_location("_review_zepo_summary", ROOT / "experiments" / "zepo_summary.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


summary = _load()

HEADER = "# ZEPO study: topicalchat coherence, judge tiny-judge, paraphraser tiny-judge"
REPORT = HEADER + """

search: 2 contexts x 3 candidates, 12 comparisons per prompt (both orders); 1 epochs x population 2, temperature 0.9, seed 0; held-out contexts 0:2
answer prefix: 'Answer:' (from the model's greedy answers; e.g. 'Answer: A')

## Seed vs ZEPO prompt on 2 held-out contexts (12 comparisons per prompt)

| prompt | scorer | debias | fairness | P(A) | Spearman | 95% CI | contexts with a defined Spearman |
|---|---|---|---|---|---|---|---|
| seed | average_probability | none | -0.500 | 1.00 | +0.100 | [-0.200, +0.300] | 2 / 2 |
| ZEPO | average_probability | none | -0.250 | 0.75 | +0.200 | [-0.100, +0.400] | 2 / 2 |

- ZEPO - seed (average_probability, none): +0.100 [-0.100, +0.300] (paired over the 2 contexts where both are defined)

time: search 5 s (10 comparisons judged this run), held-out judging 1 s, total 7 s; load 1.0 1.0 1.0
"""
SEED_INSTR = "Which response is more coherent? Answer A or B."
ZEPO_INSTR = "Compare the two responses for coherence and answer A or B."


def _write_run(folder: Path, with_mass: bool):
    """One study's files as zepo.py writes them; returns the held-out label masses of seed and ZEPO."""
    stem = folder / "zepo-topicalchat-coherence-tiny-judge"
    Path(f"{stem}.md").write_text(REPORT)
    Path(f"{stem}.notes.md").write_text("# Notes: how this run went\n\nwritten by hand\n")
    with open(f"{stem}-prompts.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["epoch", "template_key", "decision_rate", "fairness", "spearman", "instruction"])
        w.writerow([0, "t-seed", 1.0, -0.5, 0.1, SEED_INSTR])
        w.writerow([1, "t-zepo", 0.75, -0.25, 0.2, ZEPO_INSTR])
        w.writerow([1, "t-other", 0.9, -0.4, 0.0, "Say A or B."])
    Path(f"{stem}.json").write_text(json.dumps({"text": "Dialogue: {context}\n" + ZEPO_INSTR, "labels": ["A", "B"]}))
    Path(f"{stem}-log.jsonl").write_text(json.dumps({"event": "config", "contexts": ["S1", "S2"]}) + "\n")
    rng = np.random.default_rng(4)
    want, rows = {}, []
    for name, key in (("seed", "t-seed"), ("ZEPO", "t-zepo"), (None, "t-other")):
        held = []
        for ctx in ("S1", "S2", "H1", "H2", "[N/A]"):      # the search sample, held-out, the content-free probe
            for _ in range(3):
                m = float(rng.uniform(0.1, 1.0))
                rows.append({"judge": "tiny-judge", "template": key, "context": ctx, "p": 0.5,
                             **({"label_mass": m} if with_mass else {})})
                if ctx.startswith("H"):
                    held.append(m)
        if name:
            want[name] = (np.median(held), np.min(held))
    Path(f"{stem}-store.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return want


@pytest.mark.parametrize("with_mass", [True, False])
def test_notes_beside_a_report_are_skipped_and_the_reading_shown(tmp_path, with_mass):
    """The old script raised on the ``.notes.md`` beside a report (rglob("zepo-*.md") matched it)."""
    want = _write_run(tmp_path, with_mass)
    summary.main(["--results", str(tmp_path), "--soft", "", "--bootstrap", "20"])
    text = (tmp_path / "zepo_summary.md").read_text()
    assert "left out: `zepo-topicalchat-coherence-tiny-judge.notes.md`" in text
    rows = [line for line in text.splitlines() if "| tiny-judge | tiny-judge |" in line]
    assert len(rows) == 2 and all("| 'Answer:' (from the model's greedy answers" in r for r in rows)
    for r in rows:
        prompt = "seed" if "| seed |" in r else "ZEPO"
        if with_mass:
            med, lo = want[prompt]
            assert f"| {med:.3f} (min {lo:.3f}, 6 rows) |" in r
        else:
            assert f"| {prompt} | not recorded |" in r


def test_a_report_without_its_header_is_not_read_but_a_broken_report_still_fails(tmp_path):
    (tmp_path / "zepo-x.md").write_text("# something else\n")
    with pytest.raises(ValueError, match="no zepo-\\*.md study report"):
        summary.main(["--results", str(tmp_path), "--soft", ""])
    (tmp_path / "zepo-y.md").write_text(HEADER + "\n\nthe rest is missing\n")    # a study report, cut short
    with pytest.raises(ValueError, match="zepo-y.md: not a ZEPO study report"):
        summary.main(["--results", str(tmp_path), "--soft", ""])


def test_committed_summary_covers_every_stored_study_report():
    """Every study report under results/ is a row of the committed summary, with its reading's column."""
    text = (RESULTS / "zepo_summary.md").read_text()
    assert "| answer prefix |" in text and "| label mass (held-out) |" in text
    reports = [p for p in sorted(RESULTS.rglob("zepo-*.md")) if summary.is_study_report(p)]
    assert len(reports) >= 11
    for p in reports:
        r = summary.parse_zepo_md(p)
        assert f"| {r['data']} | {r['aspect']} | {r['judge']} | {r['paraphraser']} |" in text, p
    assert "qwen2.5-coder-1.5b" in text and "| 95% CI (Fisher z) |" in text


def _fisher(r, n, k=0):
    """Fisher's z interval with the Bonett-Wright variance, written out (math only)."""
    se = math.sqrt((1 + r * r / 2) / (n - 3 - k))
    z = 0.5 * math.log((1 + r) / (1 - r))
    return math.tanh(z - 1.959963984540054 * se), math.tanh(z + 1.959963984540054 * se)


def _tied_group(seed=0):
    """17 prompts, 14 of them at fairness -0.5 (the stored SummEval coherence search's pattern)."""
    rng = np.random.default_rng(seed)
    f = np.array([-0.5] * 14 + [-0.3, -0.2, -0.45])
    s = rng.normal(size=17)
    s[14:] += 1.0
    return f, s


def test_interval_is_fisher_z_closed_form():
    f, s = _tied_group()
    r, lo, hi, p, n = summary.pooled_corr({"g": (f, s)}, np.random.default_rng(0), 50, centre=False)
    want_r, want_p = stats.spearmanr(f, s)
    assert (r, p, n) == (pytest.approx(want_r, abs=1e-12), pytest.approx(want_p, abs=1e-12), 17)
    np.testing.assert_allclose([lo, hi], _fisher(want_r, 17), atol=1e-12)
    rng = np.random.default_rng(2)
    f2, s2 = rng.uniform(-0.5, 0, 9), rng.normal(size=9)
    x = np.concatenate([f - f.mean(), f2 - f2.mean()])
    y = np.concatenate([s - s.mean(), s2 - s2.mean()])
    c = summary.corr_summary({"a": (f, s), "b": (f2, s2)}, rng, 20, centre=True)
    np.testing.assert_allclose(c["ci"], _fisher(stats.spearmanr(x, y)[0], 26, k=1), atol=1e-12)


def test_stored_coherence_search_interval_agrees_with_its_test():
    """The stored SummEval coherence search (17 prompts, 14 at fairness -0.5): p = 0.11, so a 95% interval
    excluding 0 (the old bootstrap's [-0.68, -0.11]) contradicts it; Fisher's includes 0."""
    f, s, seen = [], [], set()
    for path in (RESULTS / "zepo-summeval-coherence-smollm2-135m-prompts.csv",
                 RESULTS / "zepo_qwen_paraphraser" / "zepo-summeval-coherence-smollm2-135m-prompts.csv"):
        for row in summary.read_prompts_csv(path):
            if row["template_key"] not in seen and np.isfinite(row["fairness"]) and np.isfinite(row["spearman"]):
                seen.add(row["template_key"])
                f.append(row["fairness"])
                s.append(row["spearman"])
    assert len(f) == 17 and sum(x == -0.5 for x in f) == 14
    c = summary.corr_summary({"g": (f, s)}, np.random.default_rng(0), 400, centre=False)
    assert c["p"] > 0.05 and c["ci"][0] < 0 < c["ci"][1]
    assert c["modal"] == (14, -0.5) and c["undefined"] > 0
    cells = summary.corr_cells("g", c)
    assert "rests on few distinct values" in cells and f"({c['undefined']} of 400 undefined)" in cells


def test_undefined_resamples_are_counted_at_the_binomial_rate():
    """A resample has no correlation iff it draws only the 14 tied prompts: probability (14/17)^17."""
    f, s = _tied_group(1)
    reps = 4000
    c = summary.corr_summary({"g": (f, s)}, np.random.default_rng(7), reps, centre=False)
    q = (14 / 17) ** 17
    assert abs(c["undefined"] - reps * q) < 5 * math.sqrt(reps * q * (1 - q))


def test_bootstrap_interval_without_ties_matches_scipy():
    rng = np.random.default_rng(11)
    f = rng.normal(size=30)
    s = 0.5 * f + rng.normal(size=30)
    c = summary.corr_summary({"g": (f, s)}, np.random.default_rng(0), 3000, centre=False)
    ref = stats.bootstrap((f, s), lambda a, b: stats.spearmanr(a, b)[0], paired=True, vectorized=False,
                          n_resamples=3000, method="percentile", random_state=1).confidence_interval
    assert c["undefined"] == 0
    np.testing.assert_allclose(c["boot"], [ref.low, ref.high], atol=0.05)
