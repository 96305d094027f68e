"""The PoE paper's SummEval protocol: jaxrank (one batched call) vs a per-context NumPy/SciPy loop.

Data: the 100 SummEval articles x 16 summaries with their real human scores
(``jaxrank.data``, one aspect, default coherence). The judge is simulated on
the human scores ``h``: for every ordered pair ``(a, b)`` of one article,

    p_ab = sigmoid(K * (h_a - h_b) + BIAS + K * (u_a - u_b) + e_ab),
    u_a ~ N(0, ITEM_NOISE^2),   e_ab ~ N(0, PAIR_NOISE^2)

``u`` is the judge's own per-summary misjudgement (shared by every comparison
of that summary, which is what keeps a real LLM below the humans even with all
240 comparisons), ``e`` the per-prompt noise, ``BIAS`` a position-A bias. Both
are drawn once (the judge is deterministic), with the constants below chosen so
the judge looks like FlanT5-3B on SummEval coherence in the PoE paper: about
66% pairwise accuracy, P(A) about 0.54 and a Spearman of about 0.44 with all
240 comparisons.

For each of ``--repeats`` repeats, every article gets a random subset of
``--budget`` of its 240 ordered pairs (NumPy, without replacement; PoE §4:
100 repeats, R = 48). Scored by win ratio, average probability, Bradley-Terry,
PoE-g, PoE-g-hard and PoE-BT, then summary-level Spearman with the human scores,
averaged over articles (skipping undefined ones) and over repeats.

(a) jaxrank: all articles x repeats in ONE batched call per scorer, shape
    ``[repeats * 100, budget]``; timed end to end (building ``Comparisons``,
    tracing, compiling, scoring, Spearman, mean) on the first call and again on
    a second call (steady state), with ``jax.block_until_ready``.
(b) baseline: a plain loop over (repeat, article), independent of jaxrank, as
    the papers' code does it: NumPy win ratio / average probability;
    Bradley-Terry by the Zermelo/MM iteration (same prior 1/(N-1) virtual wins
    per item per comparison, same stopping rule ``max |r - r_old| / max(1, r)
    < 1e-3``, unit geometric mean per connected component); PoE-g and
    PoE-g-hard by ``np.linalg.lstsq`` (minimum-norm solution: every connected
    component centred, which is what jaxrank returns; the paper's e_1 anchor
    would shift the components of a disconnected subset against each other);
    PoE-BT by ``scipy.optimize.minimize(method="BFGS")`` on the MEAN negative
    log-likelihood with its analytic gradient and default tolerances;
    ``scipy.stats.spearmanr`` per article. Run on the first
    ``--baseline-repeats`` repeats (the same subsets as jaxrank).

Speed ratio = baseline seconds per (article, repeat) / jaxrank seconds per
(article, repeat). Writes ``benchmarks/results/poe_protocol.{md,csv}``
(``poe_protocol_smoke.{md,csv}`` with ``--smoke``).

    python benchmarks/poe_protocol.py [--repeats 100] [--budget 48] [--aspect coherence]
                                      [--baseline-repeats N] [--seed 0] [--smoke]
                                      [--compilation-cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize, stats
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy.special import expit, log_expit

import jaxrank as jr
from jaxrank import metrics, scorer_table
from jaxrank.data import label_matrix, load_dataset
from _report import write_results  # noqa: E402  (benchmarks/ is on sys.path when run as a script)

# ----------------------------------------------------------------- simulated judge
K = 1.0            # slope on the human-score difference (scores are 1-5)
BIAS = 0.3         # position-A bias on the logit
ITEM_NOISE = 2.0   # std of the judge's per-summary misjudgement u (times K)
PAIR_NOISE = 1.5   # std of the per-comparison logit noise e
JUDGE = dict(K=K, BIAS=BIAS, ITEM_NOISE=ITEM_NOISE, PAIR_NOISE=PAIR_NOISE)

SCORERS = tuple(name for name, entry in scorer_table.SCORERS.items() if entry.in_report)   # the report's six
TOL_BT = 1e-3


# =================================================================== data + judge
def simulate_judge(h, seed):
    """``p [C, N(N-1)]`` for the ordered pairs ``(a, b)``; returns ``p, a, b``.

    :func:`jaxrank.simulate_judge` with ``scale = 1`` (so ``K`` is per human-score point):
    ``p = sigmoid(K (h_a - h_b) + BIAS + K (u_a - u_b) + e_ab)``.
    """
    c, n = h.shape
    a, b = np.nonzero(~np.eye(n, dtype=bool))
    params = jr.JudgeParams(slope=K, bias=BIAS, item_noise=ITEM_NOISE, pair_noise=PAIR_NOISE, scale=1.0)
    probs = np.asarray(jr.simulate_judge(jax.random.key(seed), h, np.ones(h.shape, bool), params=params).probs)
    # float32 once, so both sides see bit-identical probabilities (and decisions).
    return probs[:, a, b].astype(np.float32), a, b


def judge_stats(h, p, a, b):
    diff = h[:, a] != h[:, b]
    acc = float(((p > 0.5) == (h[:, a] > h[:, b]))[diff].mean())
    return dict(pairwise_accuracy=acc, p_a=float((p > 0.5).mean()), mean_p=float(p.mean()))


def draw_subsets(num_pairs, contexts, repeats, budget, seed):
    """``[repeats, contexts, budget]`` pair indices, a subset without replacement each."""
    rng = np.random.default_rng(seed + 1)
    sel = np.empty((repeats, contexts, budget), np.int64)
    for r in range(repeats):
        for c in range(contexts):
            sel[r, c] = rng.choice(num_pairs, budget, replace=False)
    return sel


# ========================================================================= jaxrank
def jax_scorer(name):
    return {
        "win_ratio": jr.win_ratio,
        "average_probability": jr.average_probability,
        "bradley_terry": jr.bradley_terry,
        "poe_gaussian": jr.poe_gaussian,
        "poe_gaussian_hard": lambda c: jr.poe_gaussian(c, hard=True),
        "poe_bradley_terry": jr.poe_bradley_terry,
    }[name]


def jax_pipeline(name, i, j, p, gold, n, contexts):
    """From NumPy arrays ``[B, R]`` to (mean Spearman over contexts and repeats, per-problem rho)."""
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    scores = jax_scorer(name)(c)
    rho = metrics.spearman(scores, gold)                                   # [B]
    per_repeat = metrics.context_mean(rho.reshape(-1, contexts), axis=-1)  # [repeats]
    mean = jnp.mean(per_repeat)
    return jax.block_until_ready((mean, rho))


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


ROUND = 1e-3


def tie_merged_spearman(name, c, gold, contexts):
    """Mean Spearman of jaxrank scores rounded to ROUND of each context's max |score| (diagnostic)."""
    s = np.asarray(jax_scorer(name)(c), np.float64)
    if name == "win_ratio":
        s = s - 0.5
    scale = np.maximum(np.abs(s).max(axis=-1, keepdims=True), 1e-30)
    s = np.round(s / scale / ROUND) * ROUND
    rho = metrics.spearman(s.astype(np.float32), gold)
    return float(jnp.mean(metrics.context_mean(rho.reshape(-1, contexts), axis=-1)))


def run_jaxrank(i_all, j_all, p_all, gold_all, n, contexts):
    """Every scorer's pipeline timed twice (first call, then steady state); metrics compile timed first."""
    jnp.zeros(1).block_until_ready()                       # backend start-up, not counted
    # The metrics (spearman) compile once for all scorers: timed on their own.
    t_metrics, _ = timed(lambda: jax.block_until_ready(
        metrics.context_mean(metrics.spearman(gold_all, gold_all).reshape(-1, contexts), axis=-1)))
    res = {}
    for name in SCORERS:
        t_first, _ = timed(lambda: jax_pipeline(name, i_all, j_all, p_all, gold_all, n, contexts))
        t_second, (mean, rho) = timed(lambda: jax_pipeline(name, i_all, j_all, p_all, gold_all, n, contexts))
        rho = np.asarray(rho, np.float64)
        res[name] = dict(jax_mean=float(mean), jax_rho=rho, t_first=t_first, t_second=t_second,
                         jax_std=float(np.std(np.nanmean(rho.reshape(-1, contexts), axis=1))))
    return t_metrics, res


def argv_common(args):
    return ["--repeats", str(args.repeats), "--budget", str(args.budget), "--aspect", args.aspect,
            "--seed", str(args.seed)]


def fresh_processes(common):
    """jaxrank's part alone in two fresh processes sharing a new persistent compilation cache.

    The first finds the cache empty (a cold start: everything compiles), the
    second loads every program from it (what ``jaxrank.enable_compilation_cache``
    gives any later process). Returns ``{"cold": ..., "warm": ...}`` timings.
    """
    import subprocess
    import sys
    import tempfile

    out = {}
    with tempfile.TemporaryDirectory() as cache:
        for kind in ("cold", "warm"):
            cmd = [sys.executable, __file__, "--jaxrank-only", "--compilation-cache", cache] + common
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
            if run.returncode != 0:
                raise SystemExit(f"fresh-process run failed:\n{run.stderr}")
            line = [x for x in run.stdout.splitlines() if x.startswith("JSON ")][-1]
            out[kind] = json.loads(line[5:])
            d = out[kind]
            print(f"  fresh process, {kind} cache: first {d['t_metrics'] + sum(d['first'].values()):.3f}s  "
                  f"steady {sum(d['steady'].values()):.3f}s", flush=True)
    return out


# ======================================================================== baseline
def _components(i, j, n):
    adj = coo_matrix((np.ones(len(i)), (i, j)), shape=(n, n))
    return connected_components(adj, directed=False)[1]


def _centre(s, labels):
    mean = np.bincount(labels, s) / np.bincount(labels)
    return s - mean[labels]


def _decisions(p):
    return np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, 0.5))


def np_ratio(i, j, x, n):
    won = np.bincount(i, x, n) + np.bincount(j, 1 - x, n)
    games = np.bincount(i, minlength=n) + np.bincount(j, minlength=n)
    return np.where(games > 0, won / np.maximum(games, 1), 0.5)


def np_win_ratio(i, j, p, n):
    return np_ratio(i, j, _decisions(p), n)


def np_average_probability(i, j, p, n):
    return np_ratio(i, j, p, n)


def np_bradley_terry(i, j, p, n, tol=TOL_BT, max_iter=10_000):
    """Zermelo / MM: ``r_n <- W_n / sum_{k touching n} (a_k + b_k) / (r_i + r_j)``."""
    y = _decisions(p)
    games = np.bincount(i, minlength=n) + np.bincount(j, minlength=n)
    live = games > 0
    prior = 1.0 / max(live.sum() - 1, 1)
    a, b = y + prior, 1 - y + prior
    wins = np.bincount(i, a, n) + np.bincount(j, b, n)
    labels = _components(i, j, n)
    r = np.ones(n)
    it = 0
    for it in range(1, max_iter + 1):
        x = (a + b) / (r[i] + r[j])
        den = np.bincount(i, x, n) + np.bincount(j, x, n)
        s = np.log(np.where(live, wins / np.where(live, den, 1), 1))
        r_new = np.exp(_centre(s, labels))          # unit geometric mean per component
        done = np.max(np.abs(r_new - r) / np.maximum(r_new, 1)) < tol
        r = r_new
        if done:
            break
    return _centre(np.where(live, np.log(r), 0), labels), it


def _incidence(i, j, n):
    w = np.zeros((len(i), n))
    k = np.arange(len(i))
    w[k, i] = 1
    w[k, j] = -1
    return w


def np_poe_gaussian(i, j, p, n, hard=False):
    """Least squares ``W s = p - 1/2``; the minimum-norm solution centres every component."""
    y = (_decisions(p) if hard else p) - 0.5
    return np.linalg.lstsq(_incidence(i, j, n), y, rcond=None)[0]


def np_poe_bradley_terry(i, j, p, n, eps=1e-6):
    """SciPy BFGS on the mean soft-BT negative log-likelihood, analytic gradient."""
    p = np.clip(p, eps, 1 - eps)
    r = len(i)

    def fun(s):
        d = s[i] - s[j]
        f = -np.mean(p * log_expit(d) + (1 - p) * log_expit(-d))
        g = (expit(d) - p) / r
        return f, np.bincount(i, g, n) - np.bincount(j, g, n)

    res = optimize.minimize(fun, np.zeros(n), jac=True, method="BFGS")
    return res.x, res.nit


def np_scorer(name):
    return {
        "win_ratio": np_win_ratio,
        "average_probability": np_average_probability,
        "bradley_terry": lambda i, j, p, n: np_bradley_terry(i, j, p, n)[0],
        "poe_gaussian": np_poe_gaussian,
        "poe_gaussian_hard": lambda i, j, p, n: np_poe_gaussian(i, j, p, n, hard=True),
        "poe_bradley_terry": lambda i, j, p, n: np_poe_bradley_terry(i, j, p, n)[0],
    }[name]


def baseline_pipeline(name, i, j, p, gold, n, contexts):
    """Loop over problems; returns (mean over contexts then repeats, per-problem rho)."""
    fn = np_scorer(name)
    rho = np.empty(len(i))
    for k in range(len(i)):
        s = fn(i[k], j[k], p[k], n)
        rho[k] = stats.spearmanr(s, gold[k])[0]
    return float(np.mean(np.nanmean(rho.reshape(-1, contexts), axis=1))), rho


# ============================================================================ main
def fmt_t(t):
    return f"{t:.3f}" if t < 100 else f"{t:.1f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=100, help="random subsets per article (default 100)")
    ap.add_argument("--budget", type=int, default=48, help="comparisons per article, of N(N-1) (default 48)")
    ap.add_argument("--aspect", default="coherence", help="SummEval aspect (default coherence)")
    ap.add_argument("--baseline-repeats", type=int, default=None,
                    help="repeats the NumPy/SciPy baseline runs, the first ones of jaxrank's "
                         "(default: all of them; ~10 ms per article-repeat, so ~2 min for 100 repeats)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the judge and of the subsets")
    ap.add_argument("--smoke", action="store_true", help="tiny fast run for CI (2 repeats, baseline on 1)")
    ap.add_argument("--compilation-cache", metavar="DIR", default=None,
                    help="JAX persistent compilation cache folder (jaxrank.enable_compilation_cache): a second "
                         "run of the script then loads the compiled scorers instead of compiling them "
                         "(off by default)")
    ap.add_argument("--no-fresh-processes", dest="fresh_processes", action="store_false",
                    help="skip timing jaxrank again in two fresh processes (cold, then warm compilation cache)")
    ap.add_argument("--jaxrank-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help="output stem (default benchmarks/results/poe_protocol[_smoke])")
    args = ap.parse_args(argv)
    if args.smoke:
        args.repeats = min(args.repeats, 2)
        args.baseline_repeats = 1 if args.baseline_repeats is None else min(args.baseline_repeats, args.repeats)
    if args.baseline_repeats is None:
        args.baseline_repeats = args.repeats
    if not 1 <= args.baseline_repeats <= args.repeats:
        ap.error("--baseline-repeats must be in [1, --repeats]")
    stem = Path(args.out) if args.out else \
        Path(__file__).parent / "results" / ("poe_protocol_smoke" if args.smoke else "poe_protocol")
    warnings.filterwarnings("ignore", category=stats.ConstantInputWarning)
    if args.compilation_cache:
        jr.enable_compilation_cache(args.compilation_cache)

    # ------------------------------------------------------------ data and judge
    lm = label_matrix(load_dataset("summeval"), args.aspect)
    if not lm.mask.all():
        raise SystemExit("expected an unpadded SummEval label matrix")
    h = lm.labels.astype(np.float64)
    contexts, n = h.shape
    p_full, pa, pb = simulate_judge(h, args.seed)
    num_pairs = len(pa)
    if not 1 <= args.budget <= num_pairs:
        ap.error(f"--budget must be in [1, {num_pairs}]")
    js = judge_stats(h, p_full, pa, pb)
    out = []
    say = lambda s="": (print(s, flush=True), out.append(s))
    say(f"# PoE protocol: SummEval {args.aspect}, {contexts} articles x {n} summaries, "
        f"R = {args.budget} of {num_pairs}, {args.repeats} repeats")
    say()
    say(f"Simulated judge: p = sigmoid(K (h_a - h_b) + BIAS + K (u_a - u_b) + e_ab), "
        f"K = {K}, BIAS = {BIAS}, u ~ N(0, {ITEM_NOISE}^2) per summary, e ~ N(0, {PAIR_NOISE}^2) "
        f"per ordered pair, seed {args.seed}.")
    say(f"Judge: pairwise accuracy {js['pairwise_accuracy']:.3f} (ordered pairs with different human "
        f"scores), P(A) = {js['p_a']:.3f}, mean p = {js['mean_p']:.3f}.")
    say(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores, "
        f"jax {jax.__version__} on {jax.devices()[0].platform}, numpy {np.__version__}"
        + (f", persistent compilation cache {args.compilation_cache}." if args.compilation_cache else "."))
    say()

    sel = draw_subsets(num_pairs, contexts, args.repeats, args.budget, args.seed)   # [Rep, C, R]
    # Row k = repeat * contexts + context.
    i_all = pa[sel].reshape(-1, args.budget).astype(np.int32)
    j_all = pb[sel].reshape(-1, args.budget).astype(np.int32)
    p_all = np.take_along_axis(p_full[None], sel, axis=2).reshape(-1, args.budget)
    gold_all = np.tile(h, (args.repeats, 1)).astype(np.float32)
    nb = args.baseline_repeats * contexts
    problems = args.repeats * contexts

    # ---------------------------------------------------------------- jaxrank
    t_metrics, res = run_jaxrank(i_all, j_all, p_all, gold_all, n, contexts)
    if args.jaxrank_only:
        print("JSON " + json.dumps(dict(t_metrics=t_metrics, first={k: v["t_first"] for k, v in res.items()},
                                        steady={k: v["t_second"] for k, v in res.items()})))
        return
    for name, r in res.items():
        print(f"  jaxrank {name:20s} rho={r['jax_mean']:.4f}  first {r['t_first']:.3f}s  "
              f"second {r['t_second']:.3f}s", flush=True)
    fresh = fresh_processes(argv_common(args)) if args.fresh_processes else None

    # ---------------------------------------------------------------- baseline
    i_b = i_all[:nb].astype(np.int64)
    j_b = j_all[:nb].astype(np.int64)
    p_b = p_all[:nb].astype(np.float64)
    gold_b = gold_all[:nb].astype(np.float64)
    for name in SCORERS:
        t_base, (bmean, brho) = timed(lambda: baseline_pipeline(name, i_b, j_b, p_b, gold_b, n, contexts))
        r = res[name]
        jr_same = float(np.mean(np.nanmean(r["jax_rho"][:nb].reshape(-1, contexts), axis=1)))
        d = np.abs(r["jax_rho"][:nb] - brho)
        both_nan = np.isnan(r["jax_rho"][:nb]) & np.isnan(brho)
        r.update(base_mean=bmean, jax_same=jr_same, diff=abs(jr_same - bmean), t_base=t_base,
                 n_differ=int(np.sum(~both_nan & ~(d <= 1e-6))), max_ctx_diff=float(np.nanmax(d)))
        print(f"  baseline {name:20s} rho={bmean:.4f}  {t_base:.2f}s", flush=True)

    # ------------------------------------------------------------------ table
    per = lambda t, k: t / k * 1e6   # microseconds per (article, repeat)
    rows = []
    for name in SCORERS:
        r = res[name]
        rows.append(dict(
            scorer=name, spearman_jaxrank=r["jax_mean"], std_over_repeats=r["jax_std"],
            spearman_jaxrank_same_subsets=r["jax_same"], spearman_baseline=r["base_mean"],
            abs_diff=r["diff"], problems_differing=r["n_differ"], max_problem_diff=r["max_ctx_diff"],
            t_jaxrank_first_s=r["t_first"], t_jaxrank_steady_s=r["t_second"], t_baseline_s=r["t_base"],
            us_jaxrank_first=per(r["t_first"], problems), us_jaxrank_steady=per(r["t_second"], problems),
            us_baseline=per(r["t_base"], nb),
            ratio_first=per(r["t_base"], nb) / per(r["t_first"], problems),
            ratio_steady=per(r["t_base"], nb) / per(r["t_second"], problems)))
    tf = sum(res[s]["t_first"] for s in SCORERS) + t_metrics
    ts = sum(res[s]["t_second"] for s in SCORERS)
    tb = sum(res[s]["t_base"] for s in SCORERS)
    rows.append(dict(
        scorer="all (sum; first incl. metrics compile)", spearman_jaxrank=np.nan, std_over_repeats=np.nan,
        spearman_jaxrank_same_subsets=np.nan, spearman_baseline=np.nan,
        abs_diff=max(r["abs_diff"] for r in rows), problems_differing=sum(r["problems_differing"] for r in rows),
        max_problem_diff=max(r["max_problem_diff"] for r in rows),
        t_jaxrank_first_s=tf, t_jaxrank_steady_s=ts, t_baseline_s=tb,
        us_jaxrank_first=per(tf, problems), us_jaxrank_steady=per(ts, problems), us_baseline=per(tb, nb),
        ratio_first=per(tb, nb) / per(tf, problems), ratio_steady=per(tb, nb) / per(ts, problems)))

    say(f"jaxrank: one batched call per scorer on [{problems}, {args.budget}] "
        f"({args.repeats} repeats x {contexts} articles). Baseline: per-article NumPy/SciPy loop on the first "
        f"{args.baseline_repeats} repeat(s) ({nb} problems, the same subsets); Spearman difference on those "
        f"same subsets. Times in seconds for the whole run; ratio = baseline time per problem / jaxrank time "
        f"per problem. 'first' = first call incl. building Comparisons, tracing and compiling; 'steady' = "
        f"second call. Spearman metrics compile (first call) {t_metrics:.3f}s, counted in the 'all' row.")
    say()
    say("| scorer | Spearman jaxrank (all repeats) | Spearman jaxrank / baseline (same subsets) | abs diff | "
        "problems differing | jaxrank first (s) | jaxrank steady (s) | baseline (s) | "
        "ratio first | ratio steady |")
    say("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        sp = "" if np.isnan(r["spearman_jaxrank"]) else \
            f"{r['spearman_jaxrank']:.4f} ± {r['std_over_repeats']:.4f}"
        same = "" if np.isnan(r["spearman_baseline"]) else \
            f"{r['spearman_jaxrank_same_subsets']:.4f} / {r['spearman_baseline']:.4f}"
        say(f"| {r['scorer']} | {sp} | {same} | {r['abs_diff']:.5f} | {r['problems_differing']} | "
            f"{fmt_t(r['t_jaxrank_first_s'])} | {fmt_t(r['t_jaxrank_steady_s'])} | {fmt_t(r['t_baseline_s'])} | "
            f"{r['ratio_first']:.3g}x | {r['ratio_steady']:.3g}x |")
    say()
    say("(± = std over repeats of the per-repeat mean; 'problems differing' = (repeat, article) pairs whose "
        "Spearman differs by > 1e-6 between jaxrank and the baseline.)")
    say()
    total = rows[-1]
    worst = max(rows[:-1], key=lambda r: r["abs_diff"])
    say(f"Goal |diff| < 0.005: {'met' if worst['abs_diff'] < 0.005 else 'MISSED'} "
        f"(largest {worst['abs_diff']:.5f}, {worst['scorer']}).")
    verdict = ("not assessed in a smoke run" if args.smoke else
               "met" if total['ratio_steady'] >= 100 else "MISSED")
    say(f"Goal speed ratio >= 100x end to end over all scorers (NumPy arrays -> Comparisons -> scores -> "
        f"Spearman per article -> mean): {verdict} in steady state "
        f"({total['ratio_steady']:.3g}x); the first call in this process, XLA compilation included, "
        f"{total['ratio_first']:.3g}x ({total['us_baseline']:.0f} us/problem baseline vs "
        f"{total['us_jaxrank_steady']:.1f} / {total['us_jaxrank_first']:.1f} us/problem jaxrank).")
    if fresh:
        for kind, label in (("cold", "empty compilation cache (a cold start)"),
                            ("warm", "warm persistent compilation cache (jaxrank.enable_compilation_cache, "
                                     "any later process)")):
            d = fresh[kind]
            tf_k = d["t_metrics"] + sum(d["first"].values())
            ts_k = sum(d["steady"].values())
            say(f"Fresh process, {label}: first call {tf_k:.3f}s = {per(tb, nb) / per(tf_k, problems):.3g}x "
                f"end to end, steady {ts_k:.3f}s = {per(tb, nb) / per(ts_k, problems):.3g}x (by scorer, first: "
                + ", ".join(f"{k} {v:.2f}s" for k, v in d["first"].items()) + f", metrics {d['t_metrics']:.2f}s).")
    share = sorted(((res[s]["t_first"], s) for s in SCORERS), reverse=True)
    say("jaxrank first-call time by scorer (compile = first - steady): " + ", ".join(
        f"{s} {t:.2f}s ({t - res[s]['t_second']:.2f}s compile)" for t, s in share)
        + f", metrics compile {t_metrics:.2f}s.")
    bshare = sorted(((res[s]["t_base"], s) for s in SCORERS), reverse=True)
    say("baseline time by scorer: " + ", ".join(f"{s} {t:.1f}s ({100 * t / tb:.0f}%)" for t, s in bshare) + ".")

    # --------------------------------------------- diagnostics (not timed)
    cb = jr.Comparisons.from_pairs(i_all, j_all, p_all, num_items=n)
    bt = jr.fit_bradley_terry(cb)
    bt_newman = jr.fit_bradley_terry(cb, method="newman")
    sbt = jr.fit_poe_bradley_terry(cb)
    conn = np.asarray(cb.is_connected())
    zit = [np_bradley_terry(i_b[k], j_b[k], p_b[k], n)[1] for k in range(min(nb, 300))]
    bit = [np_poe_bradley_terry(i_b[k], j_b[k], p_b[k], n)[1] for k in range(min(nb, 300))]
    say(f"Diagnostics: {100 * (1 - conn.mean()):.1f}% of subsets leave the comparison graph disconnected; "
        f"jaxrank BT Newton iterations mean {float(bt.iterations.mean()):.1f} max {int(bt.iterations.max())}, "
        f"converged {100 * float(bt.converged.mean()):.1f}% (Newman's iteration: mean "
        f"{float(bt_newman.iterations.mean()):.1f} max {int(bt_newman.iterations.max())}, max score difference "
        f"{float(jnp.max(jnp.abs(bt.scores - bt_newman.scores))):.1e}); baseline Zermelo iterations mean {np.mean(zit):.1f} "
        f"max {np.max(zit)}; jaxrank PoE-BT Newton iterations mean {float(sbt.iterations.mean()):.1f} "
        f"max {int(sbt.iterations.max())}, converged {100 * float(sbt.converged.mean()):.1f}%; "
        f"SciPy BFGS iterations mean {np.mean(bit):.1f} max {np.max(bit)} (first {min(nb, 300)} problems).")

    hard = ("win_ratio", "bradley_terry", "poe_gaussian_hard")
    soft = ("average_probability", "poe_gaussian", "poe_bradley_terry")
    say(f"Hard-decision scorers hold exact ties (equal win records) that float rounding splits at the "
        f"1e-7 level; Spearman with scores rounded to {ROUND:g} of each context's max |score| (ties "
        f"merged), R = {args.budget}: " + ", ".join(
            f"{s} {tie_merged_spearman(s, cb, gold_all, contexts):.4f} (unrounded {res[s]['jax_mean']:.4f})"
            for s in hard) + ".")

    # ------------------------------------- sanity: all R = 240 comparisons
    full_i = np.broadcast_to(pa, (contexts, num_pairs)).astype(np.int32)
    full_j = np.broadcast_to(pb, (contexts, num_pairs)).astype(np.int32)
    gold = h.astype(np.float32)
    full = {s: float(jax_pipeline(s, full_i, full_j, p_full, gold, n, contexts)[0]) for s in SCORERS}
    cf = jr.Comparisons.from_pairs(full_i, full_j, p_full, num_items=n)
    merged = {s: tie_merged_spearman(s, cf, gold, contexts) for s in hard}
    rng_ = lambda d, names: max(d[s] for s in names) - min(d[s] for s in names)
    say()
    say(f"Sanity, all R = {num_pairs} comparisons (jaxrank): " + ", ".join(f"{s} {v:.4f}" for s, v in full.items())
        + f"; spread {rng_(full, SCORERS):.4f} (soft scorers {rng_(full, soft):.4f}, hard {rng_(full, hard):.4f}; "
        f"hard with ties merged: " + ", ".join(f"{s} {v:.4f}" for s, v in merged.items())
        + f", spread {rng_(merged, hard):.4f}). With every pair compared, PoE-g = average probability and "
        f"PoE-g-hard = win ratio exactly (PoE App. A.3) and BT orders items by wins, so the two groups "
        f"must agree within themselves; soft vs hard differ by the information lost in thresholding.")

    write_results(stem, out, rows)


if __name__ == "__main__":
    main()
