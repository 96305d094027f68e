"""What a newcomer sees: the verdict among tied scorers, counts written as counts, a sane first time estimate.

(The "PyTorch was not found" notice is tested in ``test_own_texts.py``, beside the command it runs.)
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from jaxrank import cli


# ----------------------------------------------------------------------------- the verdict


def _assessment(spearman: dict[str, np.ndarray]):
    """An :class:`Assessment` whose per-context Spearman values are the given ones (the rest from a tiny run)."""
    import jaxrank as jr
    from jaxrank.assessment.report import _bootstrap_mean, assess_comparisons

    n = len(next(iter(spearman.values())))
    c = jr.Comparisons.from_pairs(np.array([0, 1]), np.array([1, 2]), np.array([0.8, 0.7], np.float32), num_items=3)
    rep = assess_comparisons(jr.stack_contexts([c] * n), np.tile([3.0, 2.0, 1.0], (n, 1)), methods=tuple(spearman))
    return dataclasses.replace(
        rep, methods=tuple(spearman), spearman=spearman, mean={m: float(np.mean(v)) for m, v in spearman.items()},
        interval={m: _bootstrap_mean(v, level=0.95, num=2000, seed=0) for m, v in spearman.items()},
        contexts=[f"c{k}" for k in range(n)])


def test_identical_scorers_are_tied_not_ranked():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.6, 20)
    rep = _assessment({"win_ratio": base, "bradley_terry": base.copy(), "poe_gaussian": base.copy()})
    line = rep.verdict_line()
    assert "Best scorer" not in line and "No best scorer: all 3 scorers are tied" in line


def test_a_lead_in_every_context_names_the_best_and_a_lead_within_noise_does_not():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.0, 0.5, 20)
    clear = base + 0.3 + rng.normal(0, 0.05, 20)        # ahead in every context
    noisy = base + 0.02 + 0.3 * (-1.0) ** np.arange(20)  # ahead by 0.02 on average, by far less than its spread
    # the independent yardstick: a paired t-test of each difference from base
    assert stats.ttest_rel(clear, base).pvalue < 1e-6 and stats.ttest_rel(noisy, base).pvalue > 0.3
    assert np.mean(clear) > np.mean(noisy) > np.mean(base)

    best = _assessment({"win_ratio": base, "poe_gaussian": clear}).verdict_line()
    assert best.startswith("**Verdict.** Best scorer: poe_gaussian,")

    tied = _assessment({"win_ratio": base, "poe_gaussian": noisy}).verdict_line()
    assert "Best scorer" not in tied and "No best scorer" in tied

    three = _assessment({"win_ratio": base, "average_probability": base + rng.normal(0, 0.01, 20),
                         "poe_gaussian": clear, "bradley_terry": clear + rng.normal(0, 0.3, 20)})
    line = three.verdict_line()
    top = max(("poe_gaussian", "bradley_terry"), key=lambda m: three.mean[m])
    assert "Best scorer" not in line and f"from the top, {top}" in line
    assert "poe_gaussian (" in line and "bradley_terry (" in line          # the two tied at the top
    assert "win_ratio" not in line and "average_probability" not in line   # clearly behind: not in the tie
    assert "Best scorer" not in three.markdown("t") and line in three.markdown("t")


# ------------------------------------------------------------------------- counts as counts


def test_rank_writes_games_as_counts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(2)
    teams = [f"t{k}" for k in range(6)]
    rows = [(teams[a], teams[b], float(rng.integers(0, 3) / 2)) for a, b in rng.integers(0, 6, (300, 2)) if a != b]
    with (tmp_path / "m.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["item_a", "item_b", "outcome"])
        w.writerows(rows)
    games = Counter([a for a, _, _ in rows] + [b for _, b, _ in rows])
    for out in ("s.csv", "s.jsonl"):
        cli.main(["rank", "m.csv", "--no-compilation-cache", "--output", out])
    with open("s.csv") as fh:
        written = {r["item"]: r["games"] for r in csv.DictReader(fh)}
    assert written == {t: str(games[t]) for t in teams}                   # "626", never "626.0"
    for line in open("s.jsonl"):
        r = json.loads(line)
        assert type(r["games"]) is int and r["games"] == games[r["item"]]


def test_assess_writes_human_scores_as_given(tmp_path, monkeypatch, minilm):
    from test_own_texts import TEXTS, records, write

    monkeypatch.chdir(tmp_path)
    data = write(tmp_path / "t.csv", records())
    cli.main(["assess", "--data", str(data), "--no-progress", "--no-compilation-cache", "-o", "out",
              "--methods", "win_ratio"])
    (scores,) = (tmp_path / "out").glob("*-scores.csv")
    with scores.open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["human"] for r in rows] == [f"{s:g}" for _, c in TEXTS.values() for _, s in c.values()]
    for r in rows:                                     # float32 values in their shortest form: at most 8 digits
        assert len(r["win_ratio"].lstrip("-").replace(".", "")) <= 9, r


# ------------------------------------------------------------------------ the time estimate


def test_first_estimate_leaves_out_the_compiling_batch():
    from jaxrank.assessment.progress import progress_bar

    clock = [0.0]
    out = io.StringIO()
    bar = progress_bar(360, "judging", file=out, mininterval=0, miniters=1)
    bar._time = lambda: clock[0]
    bar.start_t = bar.last_print_t = 0.0

    def remaining(text):
        return text.split("<")[1].split(",")[0]

    clock[0] = 60.0                         # the first batch of 8: a minute, nearly all of it compilation
    bar.update(8)
    assert remaining(str(bar)) == "?"       # no estimate from a batch that compiled
    for k in range(1, 5):                   # then 8 comparisons a second
        clock[0] = 60.0 + k
        bar.update(8)
        n = 8 * (k + 1)
        left = (360 - n) / 8.0              # the steady rate: 8 per second since the first batch
        want = f"{int(left // 60):02d}:{int(left % 60):02d}"
        assert remaining(str(bar)) == want, (k, str(bar))
    # what a plain tqdm bar shows after the first batch, for comparison: hours for a job of under a minute
    from tqdm import tqdm
    plain = tqdm(total=360, file=io.StringIO(), smoothing=0.1)
    plain._time = lambda: clock[0]
    plain.start_t = plain.last_print_t = 0.0
    clock[0] = 60.0
    plain.update(8)
    assert remaining(str(plain)) == "44:00"       # (360 - 8) / (8 / 60 s) = 2640 s
    bar.close()
    plain.close()


def test_progress_bar_on_a_single_batch_ends_cleanly():
    from jaxrank.assessment.progress import progress_bar

    out = io.StringIO()
    with progress_bar(4, "judging", file=out) as bar:
        bar.update(4)
    assert "4/4" in out.getvalue()
