"""Bradley-Terry at Arena scale: jaxrank against evalica, choix and arena-rank.

Two parts, each ending in a table of seconds and of the largest difference of
centred scores against jaxrank (goal: the same scores to 1e-4, and jaxrank faster
than every peer, count aggregation included).

**1. Synthetic Arena-scale set.** 129 items with strengths ``s ~ N(0, 1)``,
``M`` random ordered pairs (default 10 million), the first item winning with
probability ``sigmoid(s_a - s_b)``. Every method computes the maximum-likelihood
Bradley-Terry scores of the raw outcomes (no prior):

* jaxrank: outcomes aggregated into ``[N, N]`` win and game counts (``np.bincount``,
  timed), then :func:`jaxrank.fit_poe_bradley_terry` (``eps=0``) with
  ``p = wins / games`` and ``weight = games`` on the observed ordered pairs,
  which is exactly the likelihood of the raw outcomes;
* ``evalica.bradley_terry`` (Rust) on the raw outcome arrays (with ``index=``, so
  it does not build its own index from 20M Python objects), and a second row
  with the same ``np.bincount`` aggregation as jaxrank (timed) and the counts
  passed as evalica ``weights=`` (its fastest use);
* ``choix.ilsr_pairwise`` on the list of (winner, loser) pairs (choix has no weights), at the loosest
  tolerance of 1e-4 ... 1e-8 at which it is at least as accurate as jaxrank (chosen untimed);
* arena-rank's ``BradleyTerry`` (L-BFGS in JAX, float64) in its own process
  (``benchmarks/arena_worker.py``, run with the Python given by ``--arena-python``;
  skipped with a note without it): importing arena-rank turns on
  ``jax_enable_x64`` for the whole process. Timed inside that process: its own
  aggregation ``PairDataset.from_pandas`` plus ``fit`` (interpreter start-up,
  imports and building the DataFrame are not). Its default stopping rule
  (``ftol = gtol = 1e-9``) stops 1.7e-2 away from the optimum on football, so it
  runs with ``ftol=0, gtol=1e-10`` (``--arena-ftol``, ``--arena-gtol``).

Conversions into each library's input format (Python lists, ``Winner`` enums,
tuples) are done before its clock starts; the aggregation steps named above are
timed. jaxrank, evalica and choix run in interleaved rounds (every method once a
round, ``--repeats``, default 5): median [min, max] seconds and the median of the
per-round ratios to jaxrank; jaxrank's first call (with compilation) is reported
apart. evalica runs at tolerance 1e-10 and at the loosest tolerance at which it
is at least as accurate as jaxrank; every row gives its max error against the
float64 ML optimum, and a row whose scores are no answer (constant, non-finite,
not converged) says so instead of a ratio. arena-rank reports its first call (with compilation) and a
second call from its own process (not interleaved).

**2. International football**: the real men's results of ``shared/data``
(49,520 matches, 337 teams), read with :func:`jaxrank.io.read_comparisons`, home
team in position A (plain BT, no home advantage, since the peers have none).
Draws are half a win each way for every library, so all maximise the same
likelihood: jaxrank aggregates ``p = (wins + draws / 2) / games``; evalica takes
``Winner.Draw`` with ``tie_weight=0.5`` (its default), on the raw rows and on
aggregated ``weights=``; arena-rank takes outcome ``0.5``; choix has no ties, so
it gets the multiset in which every decisive match appears twice and every draw
once each way: its log-likelihood is exactly twice the others', with the same
maximiser. Maximum-likelihood BT does not exist on the whole set (some teams
never lost, or never won, against the rest), so every library gets the largest
strongly connected set of teams (edge loser -> winner, a draw both ways; the ML
scores are finite exactly when that graph is strongly connected: 316 teams) and
the matches among them; no prior or regulariser.

The bootstrap of the raw outcomes is ``benchmarks/bootstrap_scale.py``, and the
football steady state with repeats, load and the all-337-teams case is
``benchmarks/football_bt.py``.

    python benchmarks/arena_scale.py [--comparisons 10000000] [--items 129]
        [--repeats 5] [--arena-python /work/arena-venv/bin/python] [--skip synthetic,football]
        [--smoke] [--out FILE]

``--smoke`` (100,000 comparisons, arena-rank on the synthetic set only) writes
``results/arena_scale_smoke.md``; the full run ``results/arena_scale.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import _data
import _report

HERE = Path(__file__).resolve().parent


# ====================================================================== fits
def aggregate(a, b, outcome, n):
    """Raw outcomes -> observed ordered-pair cells: flat cell index, games, wins of ``a`` (draw = 1/2)."""
    flat = a.astype(np.int64) * n + b
    games = np.bincount(flat, minlength=n * n)
    wins = np.bincount(flat, weights=outcome, minlength=n * n)
    idx = np.nonzero(games)[0]
    return idx, games[idx].astype(np.float64), wins[idx]


def jaxrank_fit(a, b, outcome, n):
    """Aggregate, then ML soft BT (``eps=0``): the same likelihood as the raw outcomes."""
    import jaxrank as jr

    idx, games, wins = aggregate(a, b, outcome, n)
    c = jr.Comparisons.from_pairs(idx // n, idx % n, (wins / games).astype(np.float32), num_items=n,
                                  weight=games.astype(np.float32))
    sol = jr.fit_poe_bradley_terry(c, eps=0.0)
    return np.asarray(sol.scores, np.float64), bool(sol.converged), int(sol.iterations)


def evalica_prepare(a, b, outcome, n):
    import evalica
    import pandas as pd

    w = np.full(len(a), evalica.Winner.Draw, dtype=object)
    w[outcome == 1] = evalica.Winner.X
    w[outcome == 0] = evalica.Winner.Y
    return a.astype(np.int64), b.astype(np.int64), w.tolist(), pd.Index(range(n))


def evalica_fit(xs, ys, winners, index, weights=None, tolerance=1e-10):
    import evalica

    r = evalica.bradley_terry(xs, ys, winners, index=index, weights=weights, tolerance=tolerance, limit=100_000)
    sc = r.scores.reindex(index).to_numpy(np.float64)
    return np.log(sc), r.iterations < 100_000, int(r.iterations)


def evalica_aggregated(a, b, outcome, n, index, draws, tolerance=1e-10):
    """The same ``np.bincount`` aggregation as jaxrank, then evalica with ``weights=`` (timed together)."""
    import evalica

    flat = a.astype(np.int64) * n + b
    games = np.bincount(flat, minlength=n * n)
    won = np.bincount(flat, weights=outcome == 1, minlength=n * n)
    drawn = np.bincount(flat, weights=outcome == 0.5, minlength=n * n) if draws else np.zeros(n * n)
    idx = np.nonzero(games)[0]
    cats = [(evalica.Winner.X, won[idx]), (evalica.Winner.Y, games[idx] - won[idx] - drawn[idx])]
    if draws:
        cats.append((evalica.Winner.Draw, drawn[idx]))
    xs = np.tile(idx // n, len(cats))
    ys = np.tile(idx % n, len(cats))
    winners = [w for w, v in cats for _ in range(len(v))]
    weights = np.concatenate([v for _, v in cats])
    return evalica_fit(xs, ys, winners, index, weights, tolerance)


def choix_prepare(a, b, outcome):
    """(winner, loser) multiset: decisive matches twice, draws once each way (see the docstring)."""
    dec = outcome != 0.5
    win = np.where(outcome == 1, a, b)[dec]
    lose = np.where(outcome == 1, b, a)[dec]
    dr = ~dec
    if dr.any():
        win = np.concatenate([win, win, a[dr], b[dr]])
        lose = np.concatenate([lose, lose, b[dr], a[dr]])
    return list(zip(win.tolist(), lose.tolist()))


def choix_fit(data, n, tol=1e-10):
    import choix

    return choix.ilsr_pairwise(n, data, alpha=0.0, tol=tol, max_iter=100_000), True, -1


def choix_tolerance(data, n, ref, target, tolerances=(1e-4, 1e-5, 1e-6, 1e-7, 1e-8)):
    """The loosest ``choix`` tolerance whose centred scores are within ``target`` of ``ref`` (untimed), as
    :func:`_data.matched_tolerance` for evalica: ``(tolerance, max abs error)``, the strictest tried if none."""
    for tol in tolerances:
        err = float(np.abs(centre(choix_fit(data, n, tol)[0]) - ref).max())
        if err <= target:
            break
    return tol, err


def arena_run(python, a, b, outcome, n, repeats, ftol, gtol, say):
    """arena-rank's BradleyTerry in its own process; ``None`` (with a note) when unavailable."""
    if not python:
        say("arena-rank skipped: pass --arena-python PATH, a Python with `pip install arena-rank` "
            "(its own environment: it turns on jax_enable_x64 when imported).")
        say()
        return None
    with tempfile.TemporaryDirectory() as d:
        data, out = os.path.join(d, "data.npz"), os.path.join(d, "out.json")
        np.savez(data, a=a, b=b, outcome=outcome.astype(np.float64), n_items=n, ftol=ftol, gtol=gtol,
                 max_iter=100_000, repeats=repeats)
        t0 = time.perf_counter()
        p = subprocess.run([python, str(HERE / "arena_worker.py"), data, out], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            say(f"arena-rank skipped: the worker failed with {python}: {p.stderr.strip().splitlines()[-1:]}")
            say()
            return None
        res = json.loads(Path(out).read_text())
    res["wall_s"] = wall
    return res


def _version(dist):
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return ""


def centre(x):
    x = np.asarray(x, np.float64)
    return x - x.mean()


# ====================================================================== one comparison set
def compare(name, a, b, outcome, n, args, say, draws, arena=True):
    """Every library on one data set, interleaved rounds; returns ``label -> (scores, converged, iters, times)``.

    evalica runs at tolerance 1e-10 and at the loosest tolerance at which it is at least as close to the float64
    ML optimum as jaxrank (chosen untimed); every row's max error against that optimum is reported.
    """
    res = {}
    t0 = time.perf_counter()
    res["jaxrank, first call (incl. compilation)"] = jaxrank_fit(a, b, outcome, n) + ([time.perf_counter() - t0],)
    ref = _data.ml_float64(*_data.counts(a, b, outcome, n), n)
    err = lambda sc: float(np.abs(centre(sc) - ref).max())
    e_jr = err(res["jaxrank, first call (incl. compilation)"][0])
    fns, out, tol, tol_c = {"jaxrank, steady": lambda: jaxrank_fit(a, b, outcome, n)}, {}, float("nan"), float("nan")
    try:
        import evalica

        xs, ys, winners, index = evalica_prepare(a, b, outcome, n)
        tol, _ = _data.matched_tolerance(*_data.evalica_inputs(*_data.counts(a, b, outcome, n)), n, ref, e_jr)
        for t in (1e-10, tol):
            fns[f"evalica {evalica.__version__} bradley_terry, raw rows, tolerance {t:g}"] = (
                lambda t=t: evalica_fit(xs, ys, winners, index, tolerance=t))
            fns[f"evalica {evalica.__version__}, np.bincount + weights=, tolerance {t:g}"] = (
                lambda t=t: evalica_aggregated(a, b, outcome, n, index, draws, t))
    except ImportError:
        say("evalica not installed: pip install evalica")
    try:
        import choix  # noqa: F401  (present?)

        data = choix_prepare(a, b, outcome)
        tol_c, _ = choix_tolerance(data, n, ref, e_jr)
        fns[f"choix {_version('choix')} ilsr_pairwise, tol {tol_c:g}"] = lambda: choix_fit(data, n, tol_c)
    except ImportError:
        say("choix not installed: pip install choix")
    timed = {k: (lambda f=f, k=k: out.update({k: f()})) for k, f in fns.items()}
    times, loads = _report.interleaved(timed, args.repeats)
    for k in fns:
        res[k] = out[k] + (times[k],)
    ar = None
    if arena:
        ar = arena_run(args.arena_python, a, b, outcome, n, args.arena_repeats, args.arena_ftol, args.arena_gtol,
                       say)
    elif args.arena_python:
        say("arena-rank not run on this set in --smoke (it is run on the synthetic set).")
        say()
    if ar is not None:
        for k, r in enumerate(ar["runs"]):
            label = "first call (incl. compilation)" if k == 0 else "second call"
            res[f"arena-rank {ar['arena_rank']} BradleyTerry, {label} (own process, not interleaved)"] = (
                np.asarray(ar["scores"]), True, -1, [r["total_s"]])
        agg = ", ".join(f"{r['aggregate_s']:.2f} + {r['fit_s']:.2f} s" for r in ar["runs"])
    base = np.asarray(times["jaxrank, steady"])
    say(f"| {name}: method | seconds, median [min, max] | time / jaxrank steady, median of rounds [min, max] | "
        "iterations | max abs error of centred scores vs float64 ML optimum |")
    say("|---|---:|---:|---:|---:|")
    for label, (sc, conv, it, t) in res.items():
        why = _data.no_answer(sc) or ("" if conv else "no answer (NOT converged)")
        t = np.asarray(t)
        if label in times:
            ratio = _report.spread(t / base, 1, "{:.1f}") + "x"
        else:   # one call, not a round: against jaxrank's median
            ratio = f"{t[0] / np.median(base):.1f}x (vs jaxrank's median)"
        say(f"| {label} | {_report.spread(t)} | {why or ratio} | {it if it >= 0 else ''} | "
            f"{'' if why else f'{err(sc):.1e}'} |")
    say()
    say(f"{args.repeats} interleaved rounds (every method once a round); load average over the rounds "
        f"{min(loads):.2f}-{max(loads):.2f}. jaxrank: float32 Newton. Peers' stopping rules: evalica tolerance "
        f"1e-10 and {tol:g} (the loosest of 1e-4 ... 1e-8 at least as accurate as jaxrank, chosen untimed); choix "
        f"tol {tol_c:g} (chosen the same way); arena-rank L-BFGS ftol {args.arena_ftol:g}, gtol "
        f"{args.arena_gtol:g}. The float64 optimum is a dense NumPy Newton solve on the counts (`_data.ml_float64`).")
    if ar is not None:
        say(f"arena-rank ({ar['arena_rank']}, jax {ar['jax']}, x64 {ar['x64']}) per call, aggregation + fit: {agg}; "
            f"{ar['runs'][0]['rows']:,} aggregated rows; the worker process took {ar['wall_s']:.1f} s in all "
            "(with interpreter start-up and imports).")
    return res


# ====================================================================== main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--comparisons", type=int, default=10_000_000)
    ap.add_argument("--items", type=int, default=129)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arena-python", default=None,
                    help="a Python where `pip install arena-rank` was done (default: skip arena-rank)")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds of every in-process method")
    ap.add_argument("--arena-repeats", type=int, default=2)
    ap.add_argument("--arena-ftol", type=float, default=0.0,
                    help="arena-rank L-BFGS ftol (its default 1e-9 stops early: 1.7e-2 off on football)")
    ap.add_argument("--arena-gtol", type=float, default=1e-10, help="arena-rank L-BFGS gtol (its default 1e-9)")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: synthetic,football")
    ap.add_argument("--smoke", action="store_true",
                    help="100,000 comparisons, one arena-rank call, on the synthetic set only")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.smoke:
        args.comparisons, args.arena_repeats, args.repeats = 100_000, 1, 3
    skip = set(filter(None, args.skip.split(",")))
    n, m = args.items, args.comparisons
    lines = []

    def say(t=""):
        print(t, flush=True)
        lines.append(t)

    load0 = os.getloadavg()[0]
    import jax
    say(f"# Bradley-Terry at Arena scale: {m:,} comparisons among {n} items; football")
    say()
    say(f"{os.cpu_count()} CPU cores, jax {jax.__version__} ({jax.default_backend()}); {_report.jaxrank_source()}. "
        "Seconds are wall-clock in this process (arena-rank: inside its worker process). See the module "
        "docstring for what is timed.")
    say()
    s, a, b, y = _data.simulate(n, m, args.seed)
    if "synthetic" not in skip:
        say(f"## 1. Synthetic: {m:,} comparisons among {n} items")
        say()
        res = compare("synthetic", a, b, y.astype(np.float64), n, args, say, draws=False)
        err = np.abs(centre(res["jaxrank, steady"][0]) - centre(s)).max()
        say(f"max |jaxrank score - true strength| = {err:.3f} (sampling error).")
        say()
    if "football" not in skip:
        fa, fb, fo, names = _data.football()
        n0 = len(names)
        fa, fb, fo, keep = _data.strongly_connected(fa, fb, fo, n0)
        nk = len(keep)
        say(f"## 2. International football: {len(fa):,} of 49,520 matches among the {nk} of {n0} teams "
            "in the largest strongly connected set")
        say()
        say(f"Home team in position A; {int((fo == 1).sum()):,} home wins, {int((fo == 0.5).sum()):,} draws, "
            f"{int((fo == 0).sum()):,} away wins; draws count half a win each way for every library "
            "(choix: decisive matches twice, draws once each way).")
        say()
        res = compare("football", fa, fb, fo, nk, args, say, draws=True, arena=not args.smoke)
        sc = res["jaxrank, steady"][0]
        top = np.argsort(-sc)[:5]
        say("jaxrank's top 5: " + ", ".join(f"{names[keep[t]]} {sc[t] - sc.mean():+.2f}" for t in top) + ".")
        say()
    say(f"Load average (1 min) at the start {load0:.2f}, at the end {os.getloadavg()[0]:.2f} "
        f"(on {os.cpu_count()} cores; other jobs on the machine slow every row).")
    out = Path(args.out) if args.out else HERE / "results" / (
        "arena_scale_smoke.md" if args.smoke else "arena_scale.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
