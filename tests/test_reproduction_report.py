"""The reproduction report: generated from stored results, one row checked by an independent recomputation."""

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from jaxrank.data import match_systems
from jaxrank.data.loaders import data_dir
from hanna_raw import read_hanna_raw
from _fixtures_experiments import RESULTS, have_hanna, load_experiment


def _generator():
    return load_experiment("reproduction")


@pytest.mark.skipif(not have_hanna() or not (RESULTS / "hanna_llm_scores.csv").is_file(),
                    reason="HANNA data or stored HANNA results missing")
def test_report_hanna_row_matches_independent_recomputation(tmp_path):
    out = tmp_path / "REPRODUCTION.md"
    assert _generator().main(["--results", str(RESULTS), "--out", str(out), "--boot", "50"]) == 0
    text = out.read_text()
    for heading in ("## LLM Comparative Assessment (LCA)", "## Product of Experts (PoE)", "## G-Eval", "## ZEPO"):
        assert heading in text
    row = next(line for line in text.splitlines() if line.startswith("| Mistral-7B |"))
    reported = float(re.findall(r"\| ([-\d.]+) \[", row)[2])          # the average-probability column

    # independent: raw CSV (csv + json), variant-share p by hand, average probability, scipy Spearman
    rows, stories = read_hanna_raw(data_dir())
    human = {pid: [rec["coherence"] for rec in recs] for pid, recs in stories.items()}
    cols = {name: np.array([json.loads(r[f"Mistral-7B CH {v}"]) for v in (1, 2, 3, 4)]) for name, r in rows.items()}
    rhos = []
    for k, names in enumerate(match_systems()):
        r = np.stack([cols[n][:, k] for n in names])                       # [11, 4]
        share = ((r[:, None, :] > r[None, :, :]) + 0.5 * (r[:, None, :] == r[None, :, :])).mean(-1)
        np.fill_diagonal(share, np.nan)
        avg = np.nanmean(share, 1)
        rho = spearmanr(avg, human[f"P{k}"]).statistic
        if not np.isnan(rho):
            rhos.append(rho)
    assert reported == pytest.approx(np.mean(rhos), abs=1.5e-3)


def test_missing_results_leave_rows_to_fill(tmp_path):
    gen = _generator()
    assert gen.hanna_row(None, "Mistral-7B", "coherence", "win_ratio") == "left to fill"
    assert gen.efficiency_point(None, "win_ratio") == "left to fill"
    assert gen.zepo_rows(tmp_path) == []
    assert gen.store_rows(tmp_path) == [] and gen.geval_rows(tmp_path) == []


def _summeval_coherence_raw():
    """``{(article id, summary id): expert coherence}`` read from the JSONL with ``json`` only."""
    path = data_dir() / "summeval" / "summeval.jsonl"
    rows = (json.loads(line) for line in path.read_text().splitlines())
    return {(r["article_id"], r["summary_id"]): float(r["coherence"]) for r in rows}


@pytest.mark.skipif(not (RESULTS / "stores" / "summeval-coherence-qwen2.5-1.5b.jsonl").is_file(),
                    reason="no stored long run")
def test_store_row_bias_and_accuracy_match_the_raw_records():
    gen = _generator()
    row = next(r for r in gen.store_rows(RESULTS) if r[0].startswith("SummEval COH"))
    recs = [json.loads(x) for x in (RESULTS / "stores" / "summeval-coherence-qwen2.5-1.5b.jsonl").read_text().splitlines()]
    p = np.array([r["p"] for r in recs])
    pa = float(np.mean((p > 0.5) + 0.5 * (p == 0.5)))
    assert f"P(A) {pa:.2f}" in row[4] and f"over {len(recs)} comparisons" in row[4]
    human = _summeval_coherence_raw()
    ha = np.array([human[(r["context"], r["a"])] for r in recs])
    hb = np.array([human[(r["context"], r["b"])] for r in recs])
    decided = ha != hb
    won = ((p > 0.5) + 0.5 * (p == 0.5))[decided]
    acc = float(np.mean(np.where(ha[decided] > hb[decided], won, 1 - won)))
    assert f"pairwise accuracy {acc:.3f}" in row[4]


def test_pointwise_vs_pairwise_row_matches_a_hand_computation():
    """Each stored comparative-vs-pointwise row: the per-context Spearman of the judge's average probability of
    winning (computed here from the raw store lines) and of its pointwise scores, against SciPy."""
    gen = _generator()
    rows = gen.pointwise_vs_pairwise_row(RESULTS)
    if not rows:
        pytest.skip("no context judged both pointwise and in all pairs by the same judge")
    settings = [s for s in gen.COMPARATIVE_VS_SCORING
                if (RESULTS / s[3]).is_file() and (RESULTS / "stores" / s[2]).is_file()]
    assert len(rows) <= len(settings)
    for row in rows:
        label, judge, store, pointwise, field, method, paper, old, template = next(
            s for s in settings if row[0].startswith(s[0]) and row[1].startswith(f"{s[1]} (local: {s[5]} vs"))
        ctxs = re.search(r"contexts \(([^)]*)\)", row[0]).group(1).split(", ")
        recs = [json.loads(x) for x in (RESULTS / "stores" / store).read_text().splitlines()]
        point_recs = [json.loads(x) for x in (RESULTS / pointwise).read_text().splitlines()]
        pair, point = [], []
        for ctx in ctxs:
            g = [r for r in point_recs if r["context"] == ctx and r["aspect"] == "coherence" and r.get("cot", True)
                 and r.get("reading", "whole-text") == "whole-text"][-1]
            won = {}
            for r in (r for r in recs if r["context"] == ctx and r["a"] in g["candidates"] and r["b"] in g["candidates"]
                      and template in (None, r["template"])):
                won.setdefault(r["a"], []).append(r["p"])          # average probability of winning, by hand
                won.setdefault(r["b"], []).append(1 - r["p"])
            human = dict(zip(g["candidates"], g["human"]))
            ids = sorted(won)
            pair.append(spearmanr([np.mean(won[x]) for x in ids], [human[x] for x in ids])[0])
            point.append(spearmanr(g[field], g["human"])[0])
        assert f"pointwise {np.mean(point):.3f}; pairwise {np.mean(pair):.3f}" in row[3]
        diff = np.asarray(pair) - np.asarray(point)
        m = re.search(r"pairwise - pointwise ([+-][0-9.]+) \[([+-][0-9.]+), ([+-][0-9.]+)\]", row[3])
        assert m, row[3]
        mean, lo, hi = (float(x) for x in m.groups())
        assert mean == pytest.approx(diff.mean(), abs=1e-3)
        # a bootstrap of the mean over contexts lies within the contexts' own range and brackets their mean
        assert diff.min() - 1e-3 <= lo <= mean <= hi <= diff.max() + 1e-3


@pytest.mark.skipif(not (RESULTS / "stores" / "summeval-coherence-qwen2.5-0.5b.jsonl").is_file(),
                    reason="no stored long run")
def test_store_row_order_consistency_matches_the_raw_records():
    gen = _generator()
    row = next(r for r in gen.store_rows(RESULTS) if "qwen2.5-0.5b" in r[1])
    recs = [json.loads(x) for x in (RESULTS / "stores" / "summeval-coherence-qwen2.5-0.5b.jsonl").read_text().splitlines()]
    p = {(r["context"], r["a"], r["b"]): r["p"] for r in recs}
    agree = []
    for (ctx, a, b), q in p.items():     # a pair judged in both orders is consistent if a wins (or loses) both times
        if a < b and (ctx, b, a) in p:
            agree.append((q > 0.5) == (p[(ctx, b, a)] < 0.5))
    assert agree
    assert f"order consistency (self-consistency across the two orders) {np.mean(agree):.3f}" in row[4]


def test_real_judge_efficiency_section_reads_each_csv_cell():
    """The real-judge efficiency section is regenerated from the CSV alone: a cell read back by the csv module."""
    import csv

    path = RESULTS / "efficiency_topicalchat_qwen2.5-coder-1.5b.csv"
    if not path.is_file():
        pytest.skip("no stored real-judge efficiency result")
    rows = list(csv.DictReader(open(path, newline="")))
    full = max(int(r["budget"]) for r in rows if not r["versus"])
    want = next(r for r in rows if r["judge_kind"] == "real" and r["selection"] == "random"
                and r["scorer"] == "poe_bradley_terry" and int(r["budget"]) == full and not r["versus"])
    lines = _generator().real_efficiency_section(RESULTS)
    assert lines[0].startswith("## PoE efficiency with a real judge")
    start = next(k for k, x in enumerate(lines)     # this file's section (not the served judge's, "...-1.5b-server")
                 if x.startswith("### ") and x.rstrip().endswith("topicalchat_qwen2.5-coder-1.5b"))
    row = next(x for x in lines[start:] if x.startswith("| real | poe_bradley_terry |"))
    last = row.strip("|").split("|")[-1].strip()
    assert last.startswith(f"{100 * float(want['mean']):.1f} [{100 * float(want['ci_lo']):.1f},")
    assert any(x.startswith("| greedy - random | poe_bradley_terry |") for x in lines)   # every budget, not one
    assert any(x.startswith("Paper: PoE Tables 7-8 (TopicalChat") for x in lines[start:])   # the paper beside it


def _tables():
    return load_experiment("reproduction_tables")


def test_pairs_table_cells_are_the_csv_rows():
    """PoE Table 9 beside ours: a PairS cell and its comparison count read back from the raw CSV rows."""
    import csv

    path = RESULTS / "hanna_large_pool.csv"
    if not path.is_file():
        pytest.skip("no stored HANNA pool run")
    rows = [r for r in csv.DictReader(open(path, newline="")) if r["judge"] == "Mistral-7B"
            and r["selection"] == "pairs-beam1" and r["aspect"] == "coherence"]
    if not rows:
        pytest.skip("no PairS run stored")
    lines = _tables().pairs_section(RESULTS)
    assert lines[0].startswith("## PoE Table 9")
    assert "| paper Mistral-7B | PairS-beam | - | 33 | 31 | 27 |" in lines      # PoE Table 9, HANNA columns
    pairs = next(r for r in rows if r["scorer"] == "pairs")
    row = next(x for x in lines if x.startswith("| ours Mistral-7B | PairS (beam1) |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2].split("/")[0] == f"{int(pairs['budget']):,}"
    assert cells[3] == f"{100 * float(pairs['spearman']):.1f}"                # one seed: the row itself


def test_judge_table_bias_and_accuracy_by_hand_from_the_store():
    """LCA Tables 5-7 of the TopicalChat judge: P(A) and accuracy recomputed from the raw store lines and the
    raw TopicalChat file (json only), over the contexts its efficiency markdown names."""
    import os

    from test_efficiency_real import DATA, JUDGE, STORE, TEMPLATE, human_coherence

    md = RESULTS / f"efficiency_{DATA}_{JUDGE}.md"
    root = Path(os.environ.get("JAXRANK_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    if not (md.is_file() and (RESULTS / "stores" / STORE).is_file() and (root / "topicalchat").is_dir()):
        pytest.skip("store, efficiency results or $JAXRANK_DATA/topicalchat absent")
    m = re.search(r"(\d+) contexts x (\d+) candidates.*?Contexts: ([^.]*)\.", md.read_text())
    n, contexts = int(m.group(2)), [c.strip() for c in m.group(3).split(",")]
    human = human_coherence(root)
    p, order = {}, {}
    for line in (RESULTS / "stores" / STORE).read_text().splitlines():
        r = json.loads(line)
        if r["judge"] == JUDGE and r["template"] == TEMPLATE:
            p[(r["context"], r["a"], r["b"])] = r["p"]
            seen = order.setdefault(r["context"], [])
            seen += [c for c in (r["a"], r["b"]) if c not in seen]      # candidates in order of first appearance
    pa, acc = [], []
    for ctx in contexts:
        ids = order[ctx][:n]
        pairs = [(a, b) for a in ids for b in ids if a != b]
        pa.append(np.mean([p[(ctx, a, b)] > 0.5 for a, b in pairs]))
        real = [(a, b) for a, b in pairs if human[ctx][a] != human[ctx][b]]
        acc.append(np.mean([(p[(ctx, a, b)] > 0.5) == (human[ctx][a] > human[ctx][b]) for a, b in real]))
    row = next(x for x in _tables().judges_section(RESULTS) if x.startswith(f"| topicalchat COH | {JUDGE} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == f"{len(contexts)} x {n}"
    assert cells[3].startswith(f"{np.mean(pa):.3f} [") and cells[4].startswith(f"{np.mean(acc):.3f} [")


def test_ceiling_beside_the_topicalchat_judge_by_hand():
    """The ceiling printed beside the TopicalChat judges (USR PersonaChat, 'Maintains Context'), recomputed from
    the raw file: per dialogue, each rater against the mean of the other two (scipy), mean over raters, then
    over the dialogues where it is defined."""
    from jaxrank.data.loaders import data_dir as _dd

    path = _dd() / "personachat_usr" / "topicalchat_usr.json"
    if not path.is_file() or not (RESULTS / "human_ceiling.csv").is_file():
        pytest.skip("PersonaChat USR data or human_ceiling.csv absent")
    per = []
    for rec in json.loads(path.read_text()):
        scores = np.array([r["Maintains Context"] for r in rec["responses"]], float)     # [5 responses, 3 raters]
        with warnings.catch_warnings():       # a rater who gave all 5 responses one score: undefined, skipped
            warnings.simplefilter("ignore")
            vals = [spearmanr(scores[:, k], np.delete(scores, k, 1).mean(1)).statistic for k in range(3)]
        vals = [v for v in vals if np.isfinite(v)]
        if vals:
            per.append(np.mean(vals))
    lines = _tables().judges_section(RESULTS)
    rows = [x for x in lines if x.startswith("| topicalchat COH |") and "personachat maintains_context" in x]
    assert rows, "a ceiling beside every TopicalChat judge"
    assert all(f"{np.mean(per):+.3f} [" in x for x in rows)


def test_greedy_minus_random_at_every_budget_from_the_csv():
    """The simulated study's greedy minus random, every budget: one cell by hand from the CSV rows."""
    import csv

    path = RESULTS / "efficiency_summeval_sim-acc686-pa37.csv"
    if not path.is_file():
        pytest.skip("no stored simulated study")
    rows = list(csv.DictReader(open(path, newline="")))
    for sym, greedy, random in ((True, "greedy_symmetric", "symmetric"), (False, "greedy", "main")):
        pick = lambda study, sel, b: float(next(
            r["mean"] for r in rows if r["aspect"] == "coherence" and r["study"] == study and r["selection"] == sel
            and r["symmetric"] == str(sym) and r["scorer"] == "poe_gaussian" and int(r["budget"]) == b))
        lines = _tables().greedy_table(rows, symmetric=sym)
        budgets = [int(x) for x in re.findall(r"R = (\d+)", lines[0])]
        greedy_budgets = {int(r["budget"]) for r in rows if r["study"] == greedy and r["aspect"] == "coherence"}
        assert set(budgets) == greedy_budgets                 # every budget greedy was run at, not a chosen one
        row = next(x for x in lines if x.startswith("| poe_gaussian |")).strip("|").split("|")[1:]
        for b, cell in zip(budgets, row):
            assert cell.strip() == f"{100 * (pick(greedy, 'greedy', b) - pick(random, 'random', b)):+.1f}"
    section = "\n".join(_tables().greedy_section(rows))     # PoE's protocol first, each table labelled
    assert section.index("Symmetric (PoE's protocol):") < section.index("Non-symmetric (not the paper's protocol):")


def test_real_judge_agreement_table_reads_kendall_and_pearson(tmp_path):
    """Kendall tau-b and Pearson at the full budget are printed from the CSV's columns, and only where a CSV
    has them (a CSV written before them gives no table)."""
    import csv

    path = RESULTS / "efficiency_topicalchat_qwen2.5-coder-1.5b.csv"
    if not path.is_file():
        pytest.skip("no stored real-judge efficiency result")
    rows = list(csv.DictReader(open(path, newline="")))
    if "kendall_tau" not in rows[0]:
        pytest.skip("efficiency CSV written before the Kendall / Pearson columns")
    full = max(int(r["budget"]) for r in rows if not r["versus"])
    want = next(r for r in rows if r["judge_kind"] == "real" and r["selection"] == "random"
                and r["scorer"] == "average_probability" and int(r["budget"]) == full and not r["versus"])
    mod = load_experiment("efficiency_real")
    lines = mod.reproduction_section(path)
    row = next(x for x in lines if x.startswith("| average_probability | "))
    sp, kt, pe = (c.strip() for c in row.strip("|").split("|")[1:])
    assert sp.startswith(f"{100 * float(want['mean']):.1f} [")
    assert kt == (f"{100 * float(want['kendall_tau']):.1f} [{100 * float(want['kendall_tau_ci_lo']):.1f}, "
                  f"{100 * float(want['kendall_tau_ci_hi']):.1f}]")
    assert pe.startswith(f"{100 * float(want['pearson']):.1f} [{100 * float(want['pearson_ci_lo']):.1f},")
    old = tmp_path / "efficiency_old.csv"
    keep = [k for k in rows[0] if not k.startswith(("kendall_tau", "pearson"))]
    with open(old, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keep, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    assert not any("Kendall tau-b" in x for x in mod.reproduction_section(old))
