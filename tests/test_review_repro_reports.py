"""The reproduction report and the stored judge reports after review: judges by their registry names, the old
stores' reports regenerated and saying their reading, results without a kept store left out of the comparison,
HANNA mean ratings averaged with ties kept, and the two pairwise accuracies named."""

import json
import re
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import spearmanr

from _fixtures_experiments import RESULTS, ROOT, have_hanna, load_experiment

STORES = RESULTS / "stores"
OLD_STORES = ("summeval-coherence-qwen2.5-0.5b", "summeval-coherence-qwen2.5-1.5b", "topicalchat-coherence-qwen2.5-1.5b")
FORMER = re.compile(r"qwen2\.5-[01]\.5b")


def test_display_name_is_the_registry_name_with_the_stored_one():
    lj = load_experiment("long_judge")
    assert lj.display_name("qwen2.5-1.5b") == "qwen2.5-coder-1.5b (stored as `qwen2.5-1.5b`)"
    assert lj.display_name("qwen2.5-0.5b") == "qwen2.5-coder-0.5b (stored as `qwen2.5-0.5b`)"
    assert lj.display_name("qwen2.5-coder-1.5b") == "qwen2.5-coder-1.5b"
    assert lj.display_name("server:qwen2.5-coder-1.5b") == "server:qwen2.5-coder-1.5b"
    assert lj.display_name("minilm-l6-cos-k20") == "minilm-l6-cos-k20"


def test_reproduction_rows_name_the_coder_models():
    """Every judge cell and ZEPO file cell that names a former Qwen name also names the Coder model."""
    gen = load_experiment("reproduction")
    rows = gen.store_rows(RESULTS) + gen.geval_rows(RESULTS) + gen.pointwise_vs_pairwise_row(RESULTS)
    if not any(FORMER.search(" ".join(r)) for r in rows):
        pytest.skip("no stored result of the former Qwen names")
    for r in rows:
        if FORMER.search(r[1]) or "qwen2.5-0.5b" in r[2]:
            assert r[1].startswith("qwen2.5-coder-"), r[1]
    assert gen.file_cell("zepo_qwen_judge/zepo-summeval-coherence-qwen2.5-0.5b.md").endswith(
        "(judge qwen2.5-coder-0.5b)")
    assert gen.file_cell("zepo-summeval-coherence-smollm2-135m.md") == "zepo-summeval-coherence-smollm2-135m.md"
    text = (ROOT / "experiments" / "REPRODUCTION.md").read_text()
    for line in text.splitlines():
        if line.startswith("|") and FORMER.search(line):
            assert "qwen2.5-coder-" in line, line[:200]


def _spearman_by_hand(recs, human):
    """Mean over contexts of scipy's Spearman of each candidate's average probability of winning (raw)."""
    won = {}
    for r in recs:
        won.setdefault(r["context"], {}).setdefault(r["a"], []).append(r["p"])
        won[r["context"]].setdefault(r["b"], []).append(1 - r["p"])
    rho = []
    for ctx, per in won.items():
        ids = sorted(per)
        h = [human[(ctx, x)] for x in ids]
        s = spearmanr([np.mean(per[x]) for x in ids], h)[0] if len(set(h)) > 1 else np.nan
        if np.isfinite(s):
            rho.append(s)
    return float(np.mean(rho))


def _summeval_human():
    from jaxrank.data.loaders import data_dir

    rows = (json.loads(x) for x in (data_dir() / "summeval" / "summeval.jsonl").read_text().splitlines())
    return {(r["article_id"], r["summary_id"]): float(r["coherence"]) for r in rows}


@pytest.mark.parametrize("stem", OLD_STORES)
def test_old_store_reports_are_regenerated_and_say_their_reading(stem):
    md, store = STORES / f"{stem}.md", STORES / f"{stem}.jsonl"
    if not (md.is_file() and store.is_file()):
        pytest.skip("store absent")
    text = md.read_text()
    recs = [json.loads(x) for x in store.read_text().splitlines()]
    assert not any("label_mass" in r for r in recs)                  # the store is of the old reading
    assert text.count("**Reading.** Old (template") == 2 and "no answer prefix" in text
    assert text.startswith("# qwen2.5-coder-") and "(stored as `qwen2.5-" in text.splitlines()[0]
    assert "Best scorer: poe_gaussian" not in text                   # the stale verdict
    assert text.count("**Agreement as the field reports it.**") == 2
    if stem.startswith("summeval"):
        try:
            human = _summeval_human()
        except FileNotFoundError:
            pytest.skip("no SummEval data")
        row = next(x for x in text.splitlines() if x.startswith("| average_probability | "))
        assert float(row.split("|")[2]) == pytest.approx(_spearman_by_hand(recs, human), abs=1.5e-3)


def test_reading_line_from_the_records():
    lj = load_experiment("long_judge")
    assert lj.reading_line([{"template": "t-1"}]).startswith("**Reading.** Old (template `t-1`)")
    assert "No prompt" in lj.reading_line([{"template": "none"}])
    line = lj.reading_line([{"template": "t-2", "label_mass": m} for m in (0.2, 0.9, 0.5)])
    assert "median 0.500 (min 0.200) over 3 of 3 comparisons" in line


def test_stored_report_accuracy_is_pooled_over_comparisons():
    """The stored report's accuracy (0.495) is pooled over comparisons, recomputed from the raw records; the
    report says so, and efficiency_real's 0.492 is the mean over contexts."""
    stem = "summeval-coherence-qwen2.5-coder-1.5b-auto"
    if not (STORES / f"{stem}.jsonl").is_file():
        pytest.skip("store absent")
    try:
        human = _summeval_human()
    except FileNotFoundError:
        pytest.skip("no SummEval data")
    recs = [json.loads(x) for x in (STORES / f"{stem}.jsonl").read_text().splitlines()]
    right, per = [], {}
    for r in recs:
        ha, hb = human[(r["context"], r["a"])], human[(r["context"], r["b"])]
        if ha != hb:
            ok = (r["p"] > 0.5) == (ha > hb) if r["p"] != 0.5 else 0.5
            right.append(ok)
            per.setdefault(r["context"], []).append(ok)
    text = (STORES / f"{stem}.md").read_text()
    assert f"(before any debiasing): {np.mean(right):.3f} [" in text
    assert "**Pairwise accuracy** below is pooled over the comparisons" in text
    eff = RESULTS / "efficiency_summeval_qwen2.5-coder-1.5b.md"
    if eff.is_file():
        mean_over_contexts = np.mean([np.mean(v) for v in per.values()])
        assert f"| {mean_over_contexts:.3f} [" in eff.read_text()
        assert f"{mean_over_contexts:.3f}" != f"{np.mean(right):.3f}"     # two definitions, two numbers


def test_auto_store_holds_one_reading():
    path = STORES / "summeval-coherence-qwen2.5-coder-1.5b-auto.jsonl"
    if not path.is_file():
        pytest.skip("store absent")
    assert {json.loads(x)["template"] for x in path.read_text().splitlines()} == {"summeval-coherence-cab9ba0e-4ebd11"}


def test_result_without_a_kept_store_is_left_out(tmp_path):
    gen = load_experiment("reproduction")
    md = tmp_path / "efficiency_x.md"
    md.write_text("# Efficiency curves: summeval, store /nonexistent/run/x.jsonl\n")
    assert gen.unkept_store(md) == "/nonexistent/run/x.jsonl"
    outside = tmp_path / "s.jsonl"
    outside.write_text("{}\n")
    md.write_text(f"# Efficiency curves: summeval, store {outside}\n")
    assert gen.unkept_store(md) == str(outside)                      # exists, but not in the repository
    kept = sorted(STORES.glob("*.jsonl"))
    if kept:
        md.write_text(f"# Efficiency curves: summeval, store {kept[0]}\n")
        assert gen.unkept_store(md) is None
    md.write_text("# Efficiency curves of a real judge: from the store `x.jsonl`\n")
    assert gen.unkept_store(md) is None and gen.unkept_store(tmp_path / "absent.md") is None
    text = (ROOT / "experiments" / "REPRODUCTION.md").read_text()
    if gen.unkept_store(RESULTS / "efficiency_summeval_smollm2-135m.md"):
        assert "SmolLM2-135M, local judge store" not in text
        assert "Left out of this comparison: SmolLM2-135M's 3-article SummEval study" in text


def test_exact_mean_keeps_ties():
    """Two of Beluga-13B's stored cells with the same mean, 25/12: float32 and float64 means split them."""
    hc = load_experiment("human_ceiling")
    x = np.array([[2, 7 / 3, 7 / 3, 5 / 3], [2, 8 / 3, 5 / 3, 2]], np.float32)
    assert x.mean(-1)[0] != x.mean(-1)[1]
    assert x.astype(np.float64).mean(-1)[0] != x.astype(np.float64).mean(-1)[1]
    m = hc.exact_mean(x)
    assert m[0] == m[1] == 25 / 12
    y = np.array([[0.1234567, 1.0]])                                  # no fraction with a small denominator
    assert hc.exact_mean(y)[0] == pytest.approx(np.mean(y))


@pytest.mark.skipif(not have_hanna(), reason="HANNA release absent")
def test_human_ceiling_llm_spearman_against_scipy_on_exact_means(monkeypatch):
    """Beluga-13B coherence: the mean over stories of scipy's Spearman between the exact (Fraction) mean of
    its 4 ratings and the human mean; float32 means split ties (0.5310 instead of 0.5339)."""
    from jaxrank.data import load_llm_ratings, match_systems

    hc = load_experiment("human_ceiling")
    monkeypatch.setattr(hc, "LLM_JUDGES", ("Beluga-13B",))
    systems = match_systems()
    (row,) = hc.llm_rows("coherence", boot=20, systems=systems)
    r = load_llm_ratings("Beluga-13B", "coherence", systems=systems)
    rho = []
    for k in range(len(r.context_ids)):
        on = np.asarray(r.mask[k], bool)
        means = [float(sum(Fraction(float(v)).limit_denominator(12) for v in cell) / len(cell))
                 for cell in np.asarray(r.ratings[k])[on]]
        human = [float(Fraction(float(v)).limit_denominator(12)) for v in np.asarray(r.human[k])[on]]
        s = spearmanr(means, human)[0]
        if np.isfinite(s):
            rho.append(s)
    assert row["spearman"] == pytest.approx(np.mean(rho), abs=1e-6)     # (jaxrank's Spearman is float32)
    line = next(x for x in (RESULTS / "human_ceiling.md").read_text().splitlines()
                if x.startswith("| coherence: Beluga-13B |"))
    assert f"{np.mean(rho):+.3f} [" in line


def test_efficiency_real_judge_table_names_its_accuracy():
    er = load_experiment("efficiency_real")
    lca = {k: 0.5 for k in ("p_a", "accuracy", "accuracy_threshold", "accuracy_permutation", "tau", "mean_p")}
    lca.update({f"{k}_ci": (0.4, 0.6) for k in ("p_a", "accuracy", "accuracy_threshold", "accuracy_permutation")})
    res = dict(jm=SimpleNamespace(mask=np.ones((2, 3), bool)), lca=lca, stats=dict(accuracy=0.5, p_a=0.5),
               rows=[], keep=["A0", "A1"], times={})
    args = SimpleNamespace(data="nodata", aspect="coherence", judge="j", store="s.jsonl", template="t", smoke=True,
                           subsets=4, active_seeds=2)
    text = "\n".join(er.markdown(res, [], args))
    assert "| judge | P(A) | accuracy (mean over contexts) |" in text
    assert "pool the accuracy over comparisons" in text and "(pooled over comparisons)" in text
