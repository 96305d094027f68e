"""PoE §5.3 on HANNA as one pool (experiments/hanna_large_pool.py): cells of the stored CSV recomputed by
hand from the release files (csv, json, NumPy, SciPy), and the reproduction report's section regenerated
from the CSV."""

import json

import numpy as np
import pytest
from scipy import stats

from hanna_raw import read_hanna_raw
from jaxrank.data import match_systems
from jaxrank.data.loaders import data_dir
from _fixtures_experiments import RESULTS, ROOT, have_hanna, load_experiment

CSV = RESULTS / "hanna_large_pool.csv"
N = 1056

needs = pytest.mark.skipif(not have_hanna() or not CSV.is_file(), reason="HANNA data or the stored large-pool CSV missing")


def _rows(**match):
    import csv

    with open(CSV, newline="") as f:
        return [r for r in csv.DictReader(f) if all(r[k] == str(v) for k, v in match.items())]


def _raw_pool(judge: str, code: str, column: str):
    """``(ratings [N, 4], human [N])`` from the release CSV, in the pool order of the script (prompt-major, the
    stories of a prompt in ``hanna.jsonl`` order; the system of each story from ``match_systems``)."""
    rows, _ = read_hanna_raw(data_dir())
    systems = match_systems()
    ratings = np.array([[[json.loads(rows[s][f"{judge} {code} {v}"])[k] for v in (1, 2, 3, 4)] for s in names]
                        for k, names in enumerate(systems)], np.float64).reshape(N, 4)
    human = np.array([[json.loads(rows[s][column])[k] for s in names] for k, names in enumerate(systems)],
                     np.float64).reshape(N)
    return ratings, human


@needs
def test_average_probability_cell_by_hand():
    """ChatGPT, coherence, seed 0, the smallest budget: variant share and average probability in NumPy."""
    row = _rows(aspect="coherence", judge="ChatGPT", selection="random", seed=0, scorer="average_probability",
                debias="none", budget=2 * N)
    assert len(row) == 1
    lp = load_experiment("hanna_large_pool")
    i, j = lp.random_selection(0, max(lp.BUDGETS))           # the library's selection: plumbing only
    i, j = i[: 2 * N], j[: 2 * N]
    ratings, human = _raw_pool("ChatGPT", "CH", "Coherence")
    ra, rb = ratings[i], ratings[j]
    p = ((ra > rb) + 0.5 * (ra == rb)).mean(1)               # P(i beats j): share of the 4 variants
    won = np.bincount(i, p, N) + np.bincount(j, 1 - p, N)
    games = np.bincount(i, minlength=N) + np.bincount(j, minlength=N)
    assert games.min() > 0
    rho = stats.spearmanr(won / games, human).statistic
    assert float(row[0]["spearman"]) == pytest.approx(rho, abs=1e-4)
    assert float(row[0]["kendall_tau"]) == pytest.approx(stats.kendalltau(won / games, human).statistic, abs=1e-4)
    # the whole-pool reference: every ordered pair, i.e. the row mean of the variant-share matrix
    ref = _rows(aspect="coherence", judge="ChatGPT", selection="reference", scorer="average_probability")
    P = ((ratings[:, None] > ratings[None]) + 0.5 * (ratings[:, None] == ratings[None])).mean(-1)
    full = (P.sum(1) - 0.5) / (N - 1)
    assert float(ref[0]["spearman"]) == pytest.approx(stats.spearmanr(full, human).statistic, abs=1e-4)


@needs
def test_pool_human_ceiling_by_hand():
    """One HANNA rater against the mean of the other two over all 1,056 stories (order-free: raw CSV rows)."""
    rows, _ = read_hanna_raw(data_dir())
    for aspect, code in (("coherence", "CH"), ("complexity", "CX")):
        got = _rows(aspect=aspect, judge="human", selection="ceiling")
        if not got:
            continue
        sc = np.array([[json.loads(r[f"Human {k} {code}"]) for k in (1, 2, 3)] for r in rows.values()],
                      np.float64)                              # [systems, 3, prompts]
        sc = sc.transpose(0, 2, 1).reshape(-1, 3)
        assert len(got) == 3 and sc.shape == (N, 3)
        for r in got:
            k = int(r["seed"])
            others = np.delete(sc, k, axis=1).mean(1)
            assert float(r["spearman"]) == pytest.approx(stats.spearmanr(sc[:, k], others).statistic, abs=1e-4)
            assert float(r["pearson"]) == pytest.approx(stats.pearsonr(sc[:, k], others).statistic, abs=1e-4)


@needs
def test_reproduction_regenerates_the_large_pool_section(tmp_path):
    gen = load_experiment("reproduction")
    section = "\n".join(gen.large_pool_section(RESULTS))
    # one cell recomputed from the CSV: Mistral-7B, coherence, R = 5N, PoE-BT, mean and t interval over seeds
    x = np.array([float(r["spearman"]) for r in _rows(aspect="coherence", judge="Mistral-7B", selection="random",
                                                       budget=5 * N, scorer="poe_bradley_terry", debias="none")])
    assert len(x) >= 2
    h = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    want = f"{100 * x.mean():.1f} [{100 * (x.mean() - h):.1f}, {100 * (x.mean() + h):.1f}]"
    assert f"| coherence | 5N | 36.6 / 38.3 | " in section and want in section
    # the stored report holds exactly the section the generator writes from the CSV
    assert section in (ROOT / "experiments" / "REPRODUCTION.md").read_text()
    missing = "\n".join(gen.large_pool_section(tmp_path))
    assert "left to fill" in missing
