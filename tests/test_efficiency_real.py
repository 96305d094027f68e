"""One cell of the real judge's efficiency table recomputed by hand from the stored judgements (NumPy/SciPy).

``experiments/efficiency_real.py`` writes ``efficiency_<data>_<judge>.{csv,md}`` from a judgement store.
Here the average-probability Spearman at the full budget (every ordered comparison, so every random
selection is the whole matrix) is recomputed from the raw store lines and the raw human scores in
``$JAXRANK_DATA`` (no jaxrank code): ``s_a = [sum_b p_ab + sum_b (1 - p_ba)] / (2 (N - 1))`` (METHODS.md §2,
avg-prob), ``scipy.stats.spearmanr`` against the human coherence per context, mean over the contexts the
table's markdown names; and so with ``scipy.stats.kendalltau`` (tau-b) and ``scipy.stats.pearsonr`` for the
CSV's ``kendall_tau`` and ``pearson`` columns. Skips when the store, the results or the data are absent.
"""

from __future__ import annotations

import ast
import csv
import json
import os
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kendalltau, pearsonr, spearmanr

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
DATA, STORE, TEMPLATE = ("topicalchat", "topicalchat-coherence-qwen2.5-coder-1.5b-auto.jsonl",
                          "topicalchat-coherence-3f581bd9-4ebd11")
JUDGE = "qwen2.5-coder-1.5b"


def human_coherence(root: Path) -> dict[str, dict[str, float]]:
    """``{context id: {candidate id: coherence}}`` from the raw TopicalChat USR file (contexts C0, C1, ... in
    order of first appearance of their dialogue, candidates by ``system_id``)."""
    recs = json.loads((root / "topicalchat" / "topical_chat.json").read_text())
    order = {src: k for k, src in enumerate(dict.fromkeys(r["source"] for r in recs))}
    out = defaultdict(dict)
    for r in recs:
        scores = r["scores"] if isinstance(r["scores"], dict) else ast.literal_eval(r["scores"])
        out[f"C{order[r['source']]}"][r["system_id"]] = float(scores["coherence"])
    return out


def full_budget_scores():
    """``(n, [(average-probability scores, human scores)] per context of the slice)`` from the raw files."""
    store, template = RESULTS / "stores" / STORE, TEMPLATE
    table = RESULTS / f"efficiency_{DATA}_{JUDGE}.csv"
    md = RESULTS / f"efficiency_{DATA}_{JUDGE}.md"
    root = Path(os.environ.get("JAXRANK_DATA", ""))
    if not (store.is_file() and table.is_file() and md.is_file() and (root / "topicalchat").is_dir()):
        pytest.skip("store, efficiency results or $JAXRANK_DATA/topicalchat absent")
    m = re.search(r"(\d+) contexts x (\d+) candidates.*?Contexts: ([^.]*)\.", md.read_text())
    assert m, "the markdown names its slice"
    n, contexts = int(m.group(2)), [c.strip() for c in m.group(3).split(",")]
    assert int(m.group(1)) == len(contexts)

    sums, counts, order = defaultdict(float), defaultdict(int), defaultdict(list)
    for line in store.read_text().splitlines():
        r = json.loads(line)
        if r["judge"] != JUDGE or r["template"] != template:
            continue
        for cid in (r["a"], r["b"]):
            if cid not in order[r["context"]]:
                order[r["context"]].append(cid)                     # candidates in order of first appearance
        sums[r["context"], r["a"], r["b"]] += r["p"]
        counts[r["context"], r["a"], r["b"]] += 1
    human = human_coherence(root)
    out = []
    for ctx in contexts:
        ids = order[ctx][:n]
        p = np.array([[sums[ctx, a, b] / counts[ctx, a, b] if a != b else np.nan for b in ids] for a in ids])
        assert not np.isnan(p[~np.eye(n, dtype=bool)]).any(), f"{ctx}: every ordered pair judged"
        score = (np.nansum(p, 1) + np.nansum(1 - p, 0)) / (2 * (n - 1))
        out.append((score, np.array([human[ctx][c] for c in ids])))
    return n, out


def full_budget_row(n):
    with open(RESULTS / f"efficiency_{DATA}_{JUDGE}.csv") as fh:
        return next(r for r in csv.DictReader(fh) if r["judge_kind"] == "real" and r["selection"] == "random"
                    and r["scorer"] == "average_probability" and int(r["budget"]) == n * (n - 1))


def test_average_probability_full_budget_by_hand():
    n, pairs = full_budget_scores()
    expected = np.nanmean([spearmanr(x, h).statistic for x, h in pairs])
    row = full_budget_row(n)
    assert float(row["mean"]) == pytest.approx(expected, abs=2e-5)
    assert float(row["std"]) == pytest.approx(0.0, abs=1e-5)     # every selection is the whole matrix


def test_kendall_and_pearson_full_budget_by_hand():
    """The CSV's Kendall tau-b and Pearson cells (mean over contexts of the per-context correlation)."""
    n, pairs = full_budget_scores()
    row = full_budget_row(n)
    if not row.get("kendall_tau"):
        pytest.skip("efficiency CSV written before the Kendall / Pearson columns")
    tau = np.nanmean([kendalltau(x, h).statistic for x, h in pairs])          # tau-b (SciPy's default)
    r = np.nanmean([pearsonr(x, h).statistic if np.ptp(x) > 0 and np.ptp(h) > 0 else np.nan for x, h in pairs])
    assert float(row["kendall_tau"]) == pytest.approx(tau, abs=2e-5)
    assert float(row["pearson"]) == pytest.approx(r, abs=2e-5)
    assert float(row["kendall_tau_ci_lo"]) <= float(row["kendall_tau"]) <= float(row["kendall_tau_ci_hi"])
    assert float(row["pearson_ci_lo"]) <= float(row["pearson"]) <= float(row["pearson_ci_hi"])
