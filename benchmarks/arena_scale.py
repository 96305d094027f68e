"""Bradley-Terry at Arena scale: jaxrank vs evalica and choix, side by side in one process.

Synthetic Arena-like data: 129 items with strengths ``s ~ N(0, 1)``, ``M``
random ordered pairs (default 10 million), the first item winning with
probability ``sigmoid(s_a - s_b)``. Every method computes the maximum-likelihood
Bradley-Terry scores of the raw outcomes (no prior):

* jaxrank: outcomes aggregated into ``[129, 129]`` win and game counts (one
  ``np.bincount``, timed), then :func:`jaxrank.fit_poe_bradley_terry` with
  ``p = wins / games`` and ``weight = games`` on the 16,512 ordered pairs, which
  is exactly the likelihood of the raw outcomes;
* ``evalica.bradley_terry`` (Rust solver) on the raw outcome arrays;
* ``choix.ilsr_pairwise`` on the list of (winner, loser) pairs.

Inputs are converted to each library's format before its clock starts.
Scores are compared after centring (goal: the same to 1e-4). arena-rank is not
run here: importing it turns on ``jax_enable_x64`` for the whole process, so it
needs its own process and environment.

    python benchmarks/arena_scale.py [--comparisons 10000000] [--items 129] [--smoke]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def simulate(n_items, m, seed):
    rng = np.random.default_rng(seed)
    s = rng.standard_normal(n_items)
    a = rng.integers(0, n_items, m)
    b = (a + rng.integers(1, n_items, m)) % n_items
    y = rng.random(m) < 1 / (1 + np.exp(-(s[a] - s[b])))
    return s, a.astype(np.int32), b.astype(np.int32), y


def jaxrank_fit(a, b, y, n):
    import jaxrank as jr

    flat = a.astype(np.int64) * n + b
    games = np.bincount(flat, minlength=n * n).astype(np.float32)
    wins = np.bincount(flat, weights=y, minlength=n * n).astype(np.float32)
    keep = games > 0
    idx = np.nonzero(keep)[0]
    c = jr.Comparisons.from_pairs(idx // n, idx % n, wins[keep] / games[keep], num_items=n, weight=games[keep])
    sol = jr.fit_poe_bradley_terry(c, eps=0.0)
    return np.asarray(sol.scores, np.float64), bool(sol.converged)


def centre(x):
    x = np.asarray(x, np.float64)
    return x - x.mean()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--comparisons", type=int, default=10_000_000)
    ap.add_argument("--items", type=int, default=129)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="100,000 comparisons")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.smoke:
        args.comparisons = 100_000
    n, m = args.items, args.comparisons
    s, a, b, y = simulate(n, m, args.seed)
    lines = []
    say = lambda t="": (print(t, flush=True), lines.append(t))
    say(f"# Bradley-Terry at Arena scale: {m:,} comparisons among {n} items")
    say()
    res = {}
    t0 = time.perf_counter()
    res["jaxrank (first call, incl. compile)"] = jaxrank_fit(a, b, y, n) + (time.perf_counter() - t0,)
    t0 = time.perf_counter()
    res["jaxrank (steady)"] = jaxrank_fit(a, b, y, n) + (time.perf_counter() - t0,)
    try:
        import evalica

        xs, ys = a.astype(np.int64), b.astype(np.int64)
        winners = np.where(y, evalica.Winner.X, evalica.Winner.Y).tolist()
        t0 = time.perf_counter()
        r = evalica.bradley_terry(xs, ys, winners, tolerance=1e-10, limit=10_000)
        t = time.perf_counter() - t0
        sc = r.scores.reindex(range(n)).to_numpy(np.float64)
        res[f"evalica {evalica.__version__} bradley_terry"] = (np.log(sc), True, t)
    except ImportError:
        say("evalica not installed: pip install evalica")
    try:
        import choix

        data = list(zip(np.where(y, a, b).tolist(), np.where(y, b, a).tolist()))
        t0 = time.perf_counter()
        params = choix.ilsr_pairwise(n, data, alpha=0.0, tol=1e-10, max_iter=10_000)
        res["choix ilsr_pairwise"] = (params, True, time.perf_counter() - t0)
        del data
    except ImportError:
        say("choix not installed: pip install choix")
    ref = centre(res["jaxrank (steady)"][0])
    base = res["jaxrank (steady)"][2]
    say("| method | seconds | time / jaxrank steady | max abs diff of centred scores vs jaxrank |")
    say("|---|---:|---:|---:|")
    for name, (sc, conv, t) in res.items():
        say(f"| {name} | {t:.3f} | {t / base:.1f}x | {np.abs(centre(sc) - ref).max():.1e} |")
    err = np.abs(ref - centre(s)).max()
    say()
    say(f"jaxrank converged: {res['jaxrank (steady)'][1]}; max |score - true strength| = {err:.3f} (sampling error).")
    out = Path(args.out) if args.out else Path(__file__).parent / "results" / \
        ("arena_scale_smoke.md" if args.smoke else "arena_scale.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
