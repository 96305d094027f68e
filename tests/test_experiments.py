"""The papers' experiments: efficiency curves and judge vs human (smoke runs + independent checks)."""

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxrank import Comparisons, data, studies as ex
from jaxrank.assessment.store import JudgementStore
from jaxrank.simulate import judge_stats
from _fixtures_experiments import load_script

ROOT = Path(__file__).resolve().parents[1]


def _script(name):
    return load_script(ROOT / "experiments" / f"{name}.py", f"_exp_{name}")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("eff")
    rows = _script("efficiency").main(["--smoke", "--aspects", "coherence", "--out", str(out)])
    return out, rows


def test_efficiency_smoke_files(smoke):
    out, rows = smoke
    stem = "efficiency_summeval_sim-acc686-pa37_smoke"
    for suffix in (".csv", ".md", ".png", "_coherence_variants.png"):
        assert (out / f"{stem}{suffix}").stat().st_size > 0
    md = (out / f"{stem}.md").read_text()
    assert "## Findings" in md and "PoE (best of PoE-g, PoE-BT) > average probability > win ratio" in md
    studies = {r["study"] for r in rows}
    assert studies == {"main", "symmetric", "greedy", "unbiased"}
    assert all(r["budget"] % 2 == 0 and r["budget"] >= 30 for r in rows if r["study"] == "symmetric")
    assert max(r["budget"] for r in rows if r["study"] == "greedy") == 120   # greedy never repeats a pair
    assert {r["budget"] for r in rows if r["study"] == "main"} == set(range(15, 241, 15)) | {48}
    assert all(r["subsets"] == 3 for r in rows)


def test_efficiency_full_budget_against_independent_computation(smoke):
    """At R = N(N-1) every subset is the whole set: std 0, PoE-g = average probability = a SciPy computation."""
    _, rows = smoke
    full = [r for r in rows if r["budget"] == 240 and r["study"] in ("main", "symmetric", "unbiased")]
    assert full and all(r["std"] < 1e-6 for r in full)
    at = {(r["study"], r["scorer"]): r["mean"] for r in full}
    assert at["main", "poe_gaussian"] == pytest.approx(at["main", "average_probability"], abs=1e-6)
    assert at["symmetric", "poe_gaussian"] == pytest.approx(at["main", "average_probability"], abs=1e-6)
    # independent: the same simulated judge (first 8 contexts, seed 0), average probability in NumPy, SciPy Spearman
    lm = data.label_matrix(data.load_dataset("summeval"), "coherence")
    judge = ex.simulated_judge(lm.labels[:8], lm.mask[:8], accuracy=0.686, p_a=0.37, seed=0)
    p = judge.probs.astype(np.float64)
    off = ~np.eye(16, dtype=bool)
    avg = (np.where(off, p, 0).sum(2) + np.where(off, 1 - p, 0).sum(1)) / 30
    rho = [stats.spearmanr(a, h)[0] for a, h in zip(avg, judge.labels)]
    assert at["main", "average_probability"] == pytest.approx(np.nanmean(rho), abs=1e-5)


def test_nested_weight_masks_equal_truncated_selections():
    """A budget as a weight mask on a nested selection = scoring the first R comparisons directly."""
    rng = np.random.default_rng(0)
    labels = rng.integers(1, 6, (5, 6)).astype(np.float32)
    judge = ex.simulated_judge(labels, np.ones((5, 6), bool), accuracy=0.7, p_a=0.45, seed=3)
    sel = ex.select_nested(judge, num_subsets=4, max_budget=30, key=jax.random.key(1))
    budgets = [5, 12, 30]
    curves = ex.efficiency_curves(sel, judge.labels, judge.mask, budgets, ["poe_gaussian", "win_ratio"], chunk=40)
    for name, fn in (("poe_gaussian", ex.SCORERS["poe_gaussian"]), ("win_ratio", ex.SCORERS["win_ratio"])):
        for k, r in enumerate(budgets):
            c = Comparisons.from_pairs(sel.i[..., :r], sel.j[..., :r], sel.p[..., :r], num_items=6)
            s = np.asarray(fn(c), np.float64)
            want = [np.nanmean([stats.spearmanr(s[a, b], labels[b])[0] for b in range(5)]) for a in range(4)]
            np.testing.assert_allclose(curves[name][k], want, atol=1e-5)
    assert bool(jnp.all(sel.weight[..., :5] > 0))


def test_budget_grid_and_binned_mean():
    assert ex.budget_grid(16, extra=[48]) == sorted(set(range(15, 241, 15)) | {48})
    assert ex.budget_grid(16, extra=[47], symmetric=True)[:3] == [30, 46, 48]
    assert ex.budget_grid(16, most=120)[-1] == 120
    rows = ex.binned_mean(np.array([-1, -1, 0, 1, 1.0]), np.array([0.1, 0.3, 0.5, 0.6, 1.0]))
    assert [(r["dh"], r["count"]) for r in rows] == [(-1, 2), (0, 1), (1, 2)]
    assert rows[0]["mean_p"] == pytest.approx(0.2) and rows[2]["frac_a"] == 1.0
    many = ex.binned_mean(np.linspace(-3, 3, 1000), np.full(1000, 0.5), num_bins=10)
    assert len(many) == 10 and sum(r["count"] for r in many) == 1000


def _toy_store(path, contexts=("A0", "A1", "A2"), cands=5, drop=0):
    """A complete (or, with ``drop``, incomplete) store: p = sigmoid(h_a - h_b + 0.3 + noise), real SummEval labels."""
    lm = data.label_matrix(data.load_dataset("summeval"), "coherence")
    recs, rng = [], np.random.default_rng(0)
    for ctx in contexts:
        row = lm.context_ids.index(ctx)
        ids = lm.candidate_ids[row][:cands]
        for a in range(cands):
            for b in range(cands):
                if a != b:
                    # jitter: no exact ties in the soft scores (float summation order would break them at random)
                    x = lm.labels[row, a] - lm.labels[row, b] + 0.3 + 0.05 * rng.standard_normal()
                    p = 1 / (1 + math.exp(-x))
                    recs.append(dict(judge="toy", template="t", context=ctx, a=ids[a], b=ids[b], p=p))
    JudgementStore(path).append(recs[drop:])
    return lm


def test_store_judge_and_scripts_on_a_store(tmp_path):
    common = _script("_common")                    # the scripts' glue (experiments/_common.py)
    path = tmp_path / "store.jsonl"
    lm = _toy_store(path)
    judge = common.store_judge(path, judge="toy", data="summeval", aspect="coherence")
    assert judge.complete and judge.probs.shape == (3, 5, 5)
    np.testing.assert_array_equal(judge.labels, lm.labels[:3, :5])
    st = judge_stats(judge.probs, judge.labels, judge.mask)
    assert st["accuracy"] > 0.95           # p follows the human scores
    rows = _script("efficiency").main(["--smoke", "--store", str(path), "--judge", "toy", "--aspects", "coherence",
                                       "--variants", "none", "--scorers", "average_probability,poe_gaussian",
                                       "--out", str(tmp_path)])
    assert {r["budget"] for r in rows} == {4, 8, 12, 16, 20}
    assert all(r["std"] < 1e-6 for r in rows if r["budget"] == 20)
    out = _script("judge_vs_human").main(["--store", str(path), "--judge", "toy", "--out", str(tmp_path),
                                          "--smoke"])
    assert (tmp_path / "judge_vs_human_summeval_coherence_toy_smoke.png").stat().st_size > 0
    assert out["accuracy"] == pytest.approx(st["accuracy"]) and sum(b["count"] for b in out["bins"]) == 60
    # an incomplete store: random orders of the judged comparisons only
    path2 = tmp_path / "partial.jsonl"
    _toy_store(path2, drop=7)
    part = common.store_judge(path2, judge="toy", data="summeval", aspect="coherence")
    assert not part.complete
    r, curves = ex.run_study(part, scorers=["average_probability"], budgets=[4, 20], num_subsets=2)
    assert [x["budget"] for x in r] == [4, 20] and r[1]["std"] < 1e-6    # A0 has 13 of 20: all of them at 20


def test_load_judge_from_a_store_or_simulated(tmp_path):
    common = _script("_common")
    path = tmp_path / "store.jsonl"
    _toy_store(path)
    j, label = common.load_judge(data="summeval", aspect="coherence", contexts="1:3", store=path, judge="toy")
    full = common.store_judge(path, judge="toy", data="summeval", aspect="coherence")
    assert label == "toy" and j.probs.shape[0] == 2
    for a, b in zip(j[:4], full[:4]):
        np.testing.assert_array_equal(a, b[1:3])
    lm = data.label_matrix(data.load_dataset("summeval"), "coherence")
    s, label = common.load_judge(data="summeval", aspect="coherence", contexts=":4", accuracy=0.65, p_a=0.4,
                                 seed=2)
    ref = ex.simulated_judge(lm.labels[:4], lm.mask[:4], accuracy=0.65, p_a=0.4, seed=2)
    assert label == "sim-acc650-pa40"
    for a, b in zip(s[:4], ref[:4]):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="judge's name"):
        common.load_judge(data="summeval", aspect="coherence", store=path)
    with pytest.raises(ValueError, match="contexts must be a slice"):
        common.load_judge(data="summeval", aspect="coherence", contexts="a:b")


def test_label_reading_smoke_against_its_stores(smollm2, tmp_path):
    """experiments/label_reading.py on one SummEval article: the table's label mass, P(A) and the accuracy with
    both orders averaged are recomputed from the stores it wrote (NumPy, by hand)."""
    import csv
    import json
    import warnings

    from jaxrank.data import load_dataset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _script("label_reading").main(["--smoke", "--out", str(tmp_path), "--old", str(tmp_path / "none")])
    rows = list(csv.DictReader(open(tmp_path / "label_reading_smoke.csv")))
    assert [r["reading"] for r in rows] == ["no prefix", "auto prefix 'Summary'"]
    ds = load_dataset("summeval")
    human = {(c, s): h for c, s, h in zip(ds["context_id"], ds["candidate_id"], ds["coherence"])}
    for row, name in zip(rows, ("none", "auto")):
        recs = [json.loads(x) for x in open(tmp_path / "stores" / f"summeval-coherence-smollm2-135m-{name}_smoke.jsonl")]
        assert len(recs) == 6 == int(row["comparisons"])
        mass = np.array([r["label_mass"] for r in recs])
        assert float(row["label_mass_median"]) == pytest.approx(np.median(mass), rel=1e-6)
        assert float(row["p_a"]) == pytest.approx(np.mean([r["p"] > 0.5 for r in recs]))
        p = {(r["a"], r["b"]): r["p"] for r in recs}
        hits = [((p[a, b] + 1 - p[b, a]) / 2 > 0.5) == (human["A0", a] > human["A0", b])
                for a, b in p if a < b and human["A0", a] != human["A0", b]]
        assert float(row["accuracy_both_orders"]) == pytest.approx(np.mean(hits))
    assert float(rows[0]["label_mass_median"]) < 0.5 < float(rows[1]["label_mass_median"])
