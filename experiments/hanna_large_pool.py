"""PoE §5.3 (Table 3, Figure 3): HANNA's 1,056 stories ranked as ONE pool by replayed LLM raters (issue 32).

Every story of HANNA (96 prompts x 11 stories) is an item of one pool of ``N = 1056``; the
human score of a story is the mean of its three raters (``label_matrix``). Each of the five
stored LLM raters of the HANNA release (:data:`jaxrank.data.LLM_JUDGES`, 4 prompt variants
per story, :func:`jaxrank.data.load_llm_ratings`) is replayed as a pairwise judge with the
``variant_share`` probability (:mod:`jaxrank.judges.rating_replay`):
``p(a, b) = (1/4) sum_v [1(r_av > r_bv) + 1/2 1(r_av = r_bv)]``, exactly antisymmetric, so it
has no positional bias. Paper protocol (PoE §4.2, §5.3): symmetric comparisons (both orders of
a pair), nested random subsets of the comparisons for every budget ``R``, several seeds, the
correlation of the scores with the human scores over the whole pool (one context).

* selections (:mod:`jaxrank.selection`): ``random`` (a random spanning tree first, then random
  pairs, both orders) up to ``R = 200,000``; ``greedy`` (D-optimal for PoE-g, PoE eq. 13-16;
  it needs no judge, so one selection per seed serves every rater) up to ``--greedy-max``,
  since each greedy step costs ``O(N^2)``; ``pairs-beamB``: PairS merge sort (Liu et al.
  2024; PoE Table 9) with beam ``B``, whose budget is the number of comparisons it asks.
* scorers (:mod:`jaxrank.scorer_table`): win ratio (PoE eq. 6), average probability,
  BT (eq. 1-2), PoE-g (eq. 7-8), PoE-g-hard, PoE-BT (§3.2); PoE-g and PoE-BT with the
  ``mean`` debias (eq. 12) at ``R = 10N`` only: on an antisymmetric judge with symmetric
  comparisons the mean probability is 1/2 and the bias term is 0, so the debiased scores
  must equal the plain ones (the table shows it).
* correlations: :data:`jaxrank.metrics.CORRELATIONS` (Spearman, Kendall tau-b, Pearson).
* references: the mean stored rating (pointwise; the 4 variants averaged exactly, so that equal
  means tie: :meth:`jaxrank.data.LLMRatings.mean_rating`) and the average probability over all
  ``N(N-1)`` comparisons (``selection = reference``); the human ceiling over the pool (one
  rater against the mean of the other two, per rater; ``judge = human``).

Outputs (``experiments/results/``): ``hanna_large_pool.csv`` (one row per aspect, judge,
selection, seed, budget, scorer), ``.md``, ``.png``; ``_smoke`` suffix with ``--smoke``. The
CSV is written as units finish: a rerun skips what it holds (``--fresh`` starts over);
``--references`` recomputes only the reference rows, in place, and rewrites the report (a minute).

Usage: ``python experiments/hanna_large_pool.py [--smoke] [--seeds 5] [--greedy-seeds 3] [--references]``
"""

from __future__ import annotations

import argparse
import csv
import os
from collections import defaultdict
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jaxrank.data import LLM_JUDGES, load_llm_ratings, match_systems  # noqa: E402
from jaxrank.data.raters import rater_scores  # noqa: E402
from jaxrank.judges.rating_replay import replay_probabilities  # noqa: E402
from jaxrank.metrics import CORRELATIONS  # noqa: E402
from jaxrank.scorer_table import score  # noqa: E402
from jaxrank.selection import gather_comparisons, greedy_comparisons, pairs_rank, random_comparisons  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ASPECTS = ("coherence", "complexity", "surprise")          # the paper's HANNA attributes (COH, CMP, SUR)
N = 1056
BUDGETS = (2 * N, 5 * N, 10 * N, 20 * N, 50 * N, 100 * N, 200_000)
SCORERS = ("win_ratio", "average_probability", "bradley_terry", "poe_gaussian", "poe_gaussian_hard",
           "poe_bradley_terry")
DEBIASED = (("poe_gaussian", "mean"), ("poe_bradley_terry", "mean"))
DEBIAS_BUDGET = 10 * N
FIELDS = ["aspect", "judge", "selection", "seed", "budget", "scorer", "debias", "spearman", "kendall_tau",
          "pearson", "seconds"]
# PoE Table 3 (Spearman x 100), HANNA, rows read as R = 5N, 10N, 20N, 50N: (avg-prob, PoE-BT)
PAPER = {
    "Llama2-7B": {"coherence": [(39.2, 41.3), (40.3, 41.4), (41.1, 41.6), (41.4, 41.6)],
                  "complexity": [(45.7, 47.9), (46.9, 48.2), (47.6, 48.3), (48.0, 48.3)],
                  "surprise": [(32.8, 34.1), (33.6, 34.3), (34.1, 34.5), (34.4, 34.5)]},
    "Llama2-13B": {"coherence": [(39.9, 41.3), (41.2, 41.8), (41.8, 41.9), (42.1, 42.1)],
                   "complexity": [(51.7, 54.6), (53.4, 54.9), (54.3, 55.1), (54.9, 55.1)],
                   "surprise": [(34.6, 36.9), (36.0, 37.2), (36.8, 37.5), (37.2, 37.6)]},
    "Mistral-7B": {"coherence": [(36.6, 38.3), (37.9, 38.6), (38.7, 38.8), (38.9, 38.9)],
                   "complexity": [(47.3, 49.9), (49.0, 50.6), (50.1, 50.9), (50.7, 51.0)],
                   "surprise": [(24.2, 25.5), (25.3, 26.0), (25.9, 26.2), (26.0, 26.1)]},
}
PAPER_BUDGETS = (5 * N, 10 * N, 20 * N, 50 * N)


def pool(judge: str, aspect: str, systems) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(ratings [N, 4], human [N], mean rating [N])``: every story of HANNA in one pool (prompt-major order);
    the mean rating is exact (:meth:`jaxrank.data.LLMRatings.mean_rating`: equal means tie)."""
    r = load_llm_ratings(judge, aspect, systems=systems)
    if not r.mask.all() or r.mask.size != N:
        raise ValueError(f"HANNA pool: expected {N} stories, got {int(r.mask.sum())}")
    return r.ratings.reshape(N, -1), r.human.reshape(N), r.mean_rating().reshape(N)


def reference_rows(P, human, mean) -> list[dict]:
    """The two whole-pool references: the average probability over every ordered pair and the mean rating."""
    return [dict(budget=N * (N - 1), scorer="average_probability", debias="none",
                 **correlations(P.sum(1) - 0.5, human), seconds=0),
            dict(budget=0, scorer="mean_rating (pointwise)", debias="none", **correlations(mean, human), seconds=0)]


def redo_references(path: Path, systems) -> list[dict]:
    """The CSV's rows with every ``reference`` row recomputed in place (the other rows as stored); rewrites it."""
    rows, fresh = read_rows(path), {}
    for r in rows:
        key = (r["aspect"], r["judge"])
        if r["selection"] == "reference" and key not in fresh:
            ratings, human, mean = pool(r["judge"], r["aspect"], systems)
            fresh[key] = {x["scorer"]: x for x in reference_rows(judge_matrix(ratings), human, mean)}
    out = [dict(r, **fresh[(r["aspect"], r["judge"])][r["scorer"]]) if r["selection"] == "reference" else r
           for r in rows]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(out)
    return read_rows(path)


def judge_matrix(ratings) -> np.ndarray:
    """``float32 [N, N]``: ``P[a, b]`` = variant share of ``a`` over ``b`` (diagonal 1/2, never read)."""
    n = len(ratings)
    a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    return replay_probabilities(ratings, a.reshape(-1), b.reshape(-1), method="variant_share").reshape(n, n)


def selection_key(seed: int, selection: str):
    """The key of one seed's selection: the same subsets for every rater and aspect (common random numbers)."""
    return jax.random.fold_in(jax.random.key(seed), {"random": 0, "greedy": 1}.get(selection, 2))


def random_selection(seed: int, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """Nested symmetric random selection: its first ``R`` slots are the selection of budget ``R``."""
    i, j = random_comparisons(selection_key(seed, "random"), N, budget, symmetric=True)
    return np.asarray(i), np.asarray(j)


def greedy_selection(seed: int, budget: int, cache: Path) -> tuple[np.ndarray, np.ndarray]:
    """Greedy symmetric selection (cached on disk: minutes per seed at N = 1056)."""
    file = cache / f"greedy_N{N}_R{budget}_seed{seed}.npz"
    if file.is_file():
        z = np.load(file)
        return z["i"], z["j"]
    i, j = greedy_comparisons(selection_key(seed, "greedy"), N, budget, symmetric=True)
    i, j = np.asarray(i), np.asarray(j)
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(file, i=i, j=j)
    return i, j


def correlations(scores, human) -> dict[str, float]:
    """Every correlation of :data:`jaxrank.metrics.CORRELATIONS` over the whole pool."""
    s = jnp.asarray(scores, jnp.float32)
    return {m: float(f(s, jnp.asarray(human, jnp.float32))) for m, f in CORRELATIONS.items()}


def score_selection(P, human, i, j, budgets, *, debias_budget: int | None) -> list[dict]:
    """Rows ``{budget, scorer, debias, correlations..., seconds}`` of one nested selection ``(i, j)``."""
    c = gather_comparisons(jnp.asarray(P), jnp.asarray(i), jnp.asarray(j))
    rows = []
    for r in budgets:
        cut = jax.tree.map(lambda x: x[:r] if x.ndim == 1 else x, c)
        todo = [(s, "none") for s in SCORERS] + (list(DEBIASED) if r == debias_budget else [])
        for name, debias in todo:
            t = time.perf_counter()
            s = np.asarray(score(name, cut, debias))
            rows.append(dict(budget=r, scorer=name, debias=debias, **correlations(s, human),
                             seconds=round(time.perf_counter() - t, 3)))
    return rows


def pairs_rows(P, human, seed: int, beam: int) -> list[dict]:
    """PairS (beam ``beam``, shuffled start) and PoE-BT / average probability on the comparisons it made."""
    t = time.perf_counter()
    res = pairs_rank(jnp.asarray(P), beam_size=beam, key=selection_key(seed, "pairs"))
    sec = time.perf_counter() - t
    count = int(res.num_comparisons)
    rows = [dict(budget=count, scorer="pairs", debias="none", **correlations(res.scores, human), seconds=round(sec, 3))]
    for name in ("average_probability", "poe_bradley_terry"):
        t = time.perf_counter()
        s = np.asarray(score(name, res.comparisons))
        rows.append(dict(budget=count, scorer=name, debias="none", **correlations(s, human),
                         seconds=round(time.perf_counter() - t, 3)))
    return rows


def ceiling_rows(aspect: str) -> list[dict]:
    """The human ceiling over the pool: rater ``k`` against the mean of the other two, per rater."""
    sc = rater_scores("hanna", aspect).scores.reshape(N, -1)
    rows = []
    for k in range(sc.shape[1]):
        others = np.delete(sc, k, axis=1).mean(1)
        rows.append(dict(aspect=aspect, judge="human", selection="ceiling", seed=k, budget=0,
                         scorer="one rater vs the others", debias="none",
                         **correlations(sc[:, k], others), seconds=0))
    return rows


def read_rows(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="one rater, one aspect, two small budgets (a minute)")
    ap.add_argument("--seeds", type=int, default=5, help="random selections (seeds) per budget")
    ap.add_argument("--greedy-seeds", type=int, default=3, help="greedy selections (seeds)")
    ap.add_argument("--greedy-max", type=int, default=10 * N, help="largest greedy budget")
    ap.add_argument("--pairs-beams", default="1,5", help="PairS beam sizes (comma-separated; empty: none)")
    ap.add_argument("--judges", default=",".join(LLM_JUDGES))
    ap.add_argument("--aspects", default=",".join(ASPECTS))
    ap.add_argument("--out", default=str(RESULTS), help="output folder")
    ap.add_argument("--fresh", action="store_true", help="ignore (and overwrite) a partial CSV")
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md and .png from the CSV (seconds)")
    ap.add_argument("--references", action="store_true",
                    help="recompute the CSV's reference rows in place and rewrite the report (a minute)")
    args = ap.parse_args(argv)
    judges, aspects = args.judges.split(","), args.aspects.split(",")
    budgets, seeds, gseeds = BUDGETS, args.seeds, args.greedy_seeds
    greedy_budgets = [r for r in BUDGETS if r <= args.greedy_max]
    beams = [int(b) for b in args.pairs_beams.split(",") if b]
    if args.smoke:
        judges, aspects, budgets, seeds, gseeds, greedy_budgets, beams = (
            ["ChatGPT"], ["coherence"], BUDGETS[:2], 2, 1, [2 * N], [1])
    suffix = "_smoke" if args.smoke else ""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"hanna_large_pool{suffix}.csv"
    if args.report_only:
        write_report(read_rows(path), out, suffix, elapsed=float("nan"), load=os.getloadavg(), units=0)
        return 0
    if args.references:
        write_report(redo_references(path, match_systems()), out, suffix, elapsed=float("nan"),
                     load=os.getloadavg(), units=0)
        print(f"wrote {path} (reference rows) and {out}/hanna_large_pool{suffix}.{{md,png}}")
        return 0
    rows = [] if args.fresh else read_rows(path)
    done = {(r["aspect"], r["judge"], r["selection"], str(r["seed"])) for r in rows}
    if args.fresh or not path.is_file():
        with open(path, "w", newline="") as f:
            csv.DictWriter(f, fieldnames=FIELDS).writeheader()
    cache = Path(tempfile.gettempdir()) / "jaxrank_hanna_large_pool"
    units = [(a, jd, sel, s)      # selection-major: the random table (the paper's) is complete first
             for sel, ns in (("random", seeds), ("greedy", gseeds), *((f"pairs-beam{b}", 1) for b in beams))
             for a in aspects for jd in judges for s in range(ns)]
    todo = [u for u in units if (u[0], u[1], u[2], str(u[3])) not in done]
    t0 = time.perf_counter()
    systems = match_systems()

    def append(new: list[dict]) -> None:
        with open(path, "a", newline="") as f:
            csv.DictWriter(f, fieldnames=FIELDS).writerows(new)
        rows.extend(new)

    for a in aspects:
        if (a, "human", "ceiling", "0") not in done:
            append(ceiling_rows(a))
    rand = {s: random_selection(s, max(budgets)) for s in range(seeds)}
    mats: dict[tuple[str, str], tuple] = {}
    bar = tqdm(todo, desc="large pool", unit="unit", mininterval=5)
    for aspect, judge, sel, seed in bar:
        bar.set_postfix_str(f"{judge} {aspect} {sel} {seed}")
        if (aspect, judge) not in mats:
            ratings, human, mean = pool(judge, aspect, systems)
            P = judge_matrix(ratings)
            mats[(aspect, judge)] = (P, human)
            ref = reference_rows(P, human, mean)
            if (aspect, judge, "reference", "0") not in done:
                append([dict(aspect=aspect, judge=judge, selection="reference", seed=0, **r) for r in ref])
        P, human = mats[(aspect, judge)]
        if sel == "random":
            got = score_selection(P, human, *rand[seed], budgets, debias_budget=DEBIAS_BUDGET)
        elif sel == "greedy":
            got = score_selection(P, human, *greedy_selection(seed, max(greedy_budgets), cache), greedy_budgets,
                                  debias_budget=DEBIAS_BUDGET)
        else:
            got = pairs_rows(P, human, seed, int(sel.removeprefix("pairs-beam")))
        append([dict(aspect=aspect, judge=judge, selection=sel, seed=seed, **r) for r in got])
    elapsed = time.perf_counter() - t0
    load = os.getloadavg()
    print(f"{len(todo)} units in {elapsed:.0f} s (load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})")
    write_report(read_rows(path), out, suffix, elapsed=elapsed, load=load, units=len(todo))
    print(f"wrote {out}/hanna_large_pool{suffix}.{{csv,md,png}}")
    return 0


def interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: Student-t interval of the mean over seeds (``low = high = mean`` for one seed)."""
    x = np.asarray(values, np.float64)
    m = float(x.mean())
    if len(x) < 2:
        return m, m, m
    h = float(stats.t.ppf(0.5 + level / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x)))
    return m, m - h, m + h


LABELS = {"win_ratio": "win ratio", "average_probability": "avg prob", "bradley_terry": "BT",
          "poe_gaussian": "PoE-g", "poe_gaussian_hard": "PoE-g-hard", "poe_bradley_terry": "PoE-BT", "pairs": "PairS"}


def summary(rows: list[dict], metric: str = "spearman") -> dict[tuple, tuple]:
    """``{(aspect, judge, selection, budget, scorer, debias): (mean, low, high, seeds)}`` over seeds.

    PairS rows (their budget differs per seed) are keyed with budget ``-1``; their mean budget is
    under the key's scorer ``"@budget"``.
    """
    groups, budgets = defaultdict(list), defaultdict(list)
    for r in rows:
        pairs = r["selection"].startswith("pairs")
        key = (r["aspect"], r["judge"], r["selection"], -1 if pairs else int(r["budget"]), r["scorer"], r["debias"])
        groups[key].append(float(r[metric]))
        if pairs:
            budgets[key[:4] + ("@budget", "none")].append(float(r["budget"]))
    out = {k: (*interval(v), len(v)) for k, v in groups.items()}
    out.update({k: (*interval(v), len(v)) for k, v in budgets.items()})
    return out


def cell(s, key, scale: float = 100.0) -> str:
    """``"43.1 [42.5, 43.7]"`` (x 100), or "-"."""
    if key not in s:
        return "-"
    m, lo, hi, n = s[key]
    return f"{scale * m:.1f}" if n < 2 else f"{scale * m:.1f} [{scale * lo:.1f}, {scale * hi:.1f}]"


def write_report(rows: list[dict], out: Path, suffix: str, *, elapsed: float, load, units: int) -> None:
    """``hanna_large_pool{suffix}.md`` and ``.png`` from the CSV rows."""
    sp = summary(rows)
    aspects = list(dict.fromkeys(r["aspect"] for r in rows))
    judges = [j for j in dict.fromkeys(r["judge"] for r in rows) if j != "human"]
    rb = sorted({int(r["budget"]) for r in rows if r["selection"] == "random"})
    gb = sorted({int(r["budget"]) for r in rows if r["selection"] == "greedy"})
    nseeds = {sel: len({r["seed"] for r in rows if r["selection"] == sel}) for sel in ("random", "greedy")}
    head = lambda bs: "| rater | scorer | " + " | ".join(f"{b:,} ({b / N:.0f}N)" if b % N == 0 else f"{b:,}"
                                                            for b in bs) + " |"
    L = ["# HANNA as one pool of 1,056 stories: stored LLM ratings replayed as judges (PoE §5.3, Table 3)", "",
         "Generated by `experiments/hanna_large_pool.py` (do not edit by hand). Spearman x 100 of the scores "
         "of all 1,056 stories against the human mean per story, over the whole pool; mean over seeds "
         "[95 % Student-t interval over seeds] (random: "
         f"{nseeds['random']} seeds, greedy: {nseeds['greedy']}). Comparisons are symmetric (both orders of a "
         "pair), nested over budgets. The judge is a **stored rating replayed** (variant share of the 4 "
         "prompt variants, exactly antisymmetric): not the paper's pairwise-prompted LLM probabilities. "
         + (f"Run: {units} units in {elapsed:.0f} s, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
          "(2 cores shared)." if units else "Run time and load: `hanna_large_pool.notes.md`.")
         + f" Scoring time summed over the CSV: {sum(float(r['seconds']) for r in rows):.0f} s.", ""]
    for aspect in aspects:
        ceil = cell(sp, (aspect, "human", "ceiling", 0, "one rater vs the others", "none"))
        L += [f"## {aspect}: random selection", "",
              f"Human ceiling over the pool (one rater vs the mean of the other two; mean over the 3 raters "
              f"[t interval]): {ceil}. References per rater: the mean stored rating (pointwise) and average "
              "probability over all N(N-1) comparisons.", "", head(rb) + " mean rating | all pairs |",
              "|---|---|" + "---|" * (len(rb) + 2)]
        for j in judges:
            for sc in SCORERS:
                ref = (f" {cell(sp, (aspect, j, 'reference', 0, 'mean_rating (pointwise)', 'none'))} | "
                       f"{cell(sp, (aspect, j, 'reference', N * (N - 1), 'average_probability', 'none'))} |"
                       if sc == "average_probability" else " | |")
                L.append(f"| {j} | {LABELS[sc]} | " + " | ".join(cell(sp, (aspect, j, "random", b, sc, "none"))
                                                             for b in rb) + " |" + ref)
        L += ["", f"### {aspect}: greedy selection (D-optimal, PoE eq. 13-16) vs random, and debias at R = "
              f"{DEBIAS_BUDGET:,}", "", "| rater | scorer | " + " | ".join(f"greedy {b:,}" for b in gb)
              + " | PoE-g debiased (random) | PoE-BT debiased (random) |", "|---|---|" + "---|" * (len(gb) + 2)]
        for j in judges:
            for sc in ("win_ratio", "average_probability", "poe_gaussian", "poe_bradley_terry"):
                deb = (f" {cell(sp, (aspect, j, 'random', DEBIAS_BUDGET, 'poe_gaussian', 'mean'))} | "
                       f"{cell(sp, (aspect, j, 'random', DEBIAS_BUDGET, 'poe_bradley_terry', 'mean'))} |"
                       if sc == "poe_bradley_terry" else " | |")
                L.append(f"| {j} | {LABELS[sc]} | " + " | ".join(cell(sp, (aspect, j, "greedy", b, sc, "none"))
                                                             for b in gb) + " |" + deb)
        pairs = sorted({r["selection"] for r in rows if r["selection"].startswith("pairs") and r["aspect"] == aspect})
        if pairs:
            L += ["", f"### {aspect}: PairS (merge sort, PoE Table 9) and PoE-BT on the comparisons PairS made",
                  "", "| rater | PairS | comparisons | PairS rank | avg prob on them | PoE-BT on them | "
                  "PoE-BT random at 10N |", "|---|---|---|---|---|---|---|"]
            for j in judges:
                for p in pairs:
                    nb = sp.get((aspect, j, p, -1, "@budget", "none"))
                    L.append(f"| {j} | {p} | {nb[0]:,.0f} | " if nb else f"| {j} | {p} | - | ")
                    L[-1] += " | ".join(cell(sp, (aspect, j, p, -1, s, "none"))
                                        for s in ("pairs", "average_probability", "poe_bradley_terry"))
                    L[-1] += f" | {cell(sp, (aspect, j, 'random', 10 * N, 'poe_bradley_terry', 'none'))} |"
        L.append("")
    L += ["## Beside the paper's Table 3 (avg prob / PoE-BT, Spearman x 100)", "",
          "The paper's judges are pairwise-prompted Llama2-7B/13B-chat and Mistral-7B-Instruct; ours are the "
          "HANNA release's stored 1-5 ratings of Mistral-7B and Llama-13B replayed (variant share), so the "
          "number of a row is **not** the paper's (a different judge signal); only the shape compares: PoE-BT "
          "above avg prob at few comparisons, the gap closing with R. The paper's rows are read as R = 5N, "
          "10N, 20N, 50N (its text keeps the values of the rows, not their R; '5 and 50 comparisons per item' "
          "names the first and last).", "",
          "| aspect | R | paper Llama2-7B | paper Llama2-13B | paper Mistral-7B | ours Llama-13B (stored) | "
          "ours Mistral-7B (stored) |", "|---|---|---|---|---|---|---|"]
    for aspect in aspects:
        for k, b in enumerate(PAPER_BUDGETS):
            paper = [f"{PAPER[m][aspect][k][0]:.1f} / {PAPER[m][aspect][k][1]:.1f}" if aspect in PAPER[m] else "-"
                     for m in ("Llama2-7B", "Llama2-13B", "Mistral-7B")]
            ours = [f"{cell(sp, (aspect, j, 'random', b, 'average_probability', 'none'))} / "
                    f"{cell(sp, (aspect, j, 'random', b, 'poe_bradley_terry', 'none'))}"
                    for j in ("Llama-13B", "Mistral-7B")]
            L.append(f"| {aspect} | {b:,} ({b // N}N) | " + " | ".join(paper + ours) + " |")
    L += ["", "## Kendall tau-b and Pearson (x 100) at R = 20N and the largest budget, random selection", "",
          "| aspect | rater | scorer | " + " | ".join(f"{m} {b:,}" for m in ("Kendall", "Pearson")
                                                   for b in (20 * N, rb[-1] if rb else 0)) + " |", "|---|---|---|" + "---|" * 4]
    sk, spr = summary(rows, "kendall_tau"), summary(rows, "pearson")
    for aspect in aspects:
        for j in judges:
            for sc in ("win_ratio", "average_probability", "poe_bradley_terry"):
                L.append(f"| {aspect} | {j} | {LABELS[sc]} | " + " | ".join(
                    cell(s, (aspect, j, "random", b, sc, "none")) for s in (sk, spr) for b in (20 * N, rb[-1] if rb else 0))
                    + " |")
    (out / f"hanna_large_pool{suffix}.md").write_text("\n".join(L) + "\n")
    plot(sp, aspects, judges, rb, out / f"hanna_large_pool{suffix}.png")


def plot(sp, aspects, judges, budgets, file: Path) -> None:
    """Figure 3's shape: Spearman vs comparisons per rater, PoE-BT (solid) and avg prob (dashed); paper x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(aspects), figsize=(5 * len(aspects), 4.2), squeeze=False)
    for ax, aspect in zip(axes[0], aspects):
        for k, j in enumerate(judges):
            for sc, style in (("poe_bradley_terry", "-"), ("average_probability", "--"), ("win_ratio", ":")):
                pts = [(b, sp[(aspect, j, "random", b, sc, "none")]) for b in budgets
                       if (aspect, j, "random", b, sc, "none") in sp]
                if pts:
                    ax.plot([b for b, _ in pts], [v[0] for _, v in pts], style, color=f"C{k}",
                            label=f"{j} {LABELS[sc]}" if k == 0 or sc == "poe_bradley_terry" else None)
                    ax.fill_between([b for b, _ in pts], [v[1] for _, v in pts], [v[2] for _, v in pts],
                                    color=f"C{k}", alpha=0.15)
        for m, marker in (("Mistral-7B", "x"), ("Llama2-13B", "+")):
            if aspect in PAPER[m]:
                ax.plot(PAPER_BUDGETS, [v[1] / 100 for v in PAPER[m][aspect]], marker, color="k",
                        label=f"paper {m} PoE-BT")
        ax.set_xscale("log")
        ax.set_xlabel("comparisons R (symmetric)")
        ax.set_title(f"HANNA {aspect}, one pool of {N}")
    axes[0][0].set_ylabel("Spearman vs human mean")
    axes[0][-1].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(file, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
