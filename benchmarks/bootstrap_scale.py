"""Bootstrap of raw outcomes at Arena scale: ``jaxrank.bootstrap_outcomes`` against a loop of evalica.

The data: 129 items with strengths ``s ~ N(0, 1)`` and ``M`` random ordered
pairs (1 million and 10 million), the first item winning with probability
``sigmoid(s_a - s_b)``, aggregated once (outside every timer) into counts per
ordered pair. A replicate draws the ``M`` raw outcomes with replacement: the
counts of the ``2R`` categories (ordered pair, winner) are exactly
``Multinomial(M, n / M)``. Each replicate is fitted by maximum-likelihood BT.

* **jaxrank**: one call of ``bootstrap_outcomes(fit, c, num_replicates=B,
  key=...)``: the replicates are drawn on the device from ``key`` (exact
  conditional binomials, ``jax.random``) and fitted by
  ``fit_poe_bradley_terry(eps=0)`` in ``--chunks`` batched calls of one
  compiled program. Its first call (with compilation) is reported apart.
* **evalica loop**, the fastest peer in its fastest use: per replicate, NumPy's
  exact ``multinomial`` over the categories and ``evalica.bradley_terry`` with
  the counts as ``weights=`` (the ``Winner`` list built once, outside the
  loop); timed on ``--peer-replicates`` replicates and scaled to ``B``. Its
  tolerance matches jaxrank's accuracy (:func:`evalica_tolerance`, as
  ``football_bt.py``): the loosest of 1e-4 ... 1e-8 at which evalica's scores
  on the data are at least as close to the float64 ML optimum as jaxrank's
  (chosen untimed; both errors reported).

Rounds alternate the two, so machine load hits both alike. Also reported:
jaxrank's draws alone (a scorer that only returns the counts) against NumPy's
multinomial for ``B`` replicates; the replicates' standard deviations against
the float64 asymptotic (Fisher) standard errors; evalica on jaxrank's own
first replicates (the same counts must give the same scores).

    python benchmarks/bootstrap_scale.py [--sizes 1000000,10000000] [--replicates 1000] [--repeats 3]
        [--peer-replicates 50] [--chunks 4] [--smoke] [--out FILE]

``--smoke`` (100,000 comparisons, 40 replicates, 2 rounds) writes ``results/bootstrap_scale_smoke.{md,csv}``.
XLA's intra-op thread pool, which JAX sizes to the cores, is a process-wide
setting jaxrank leaves alone; run with ``XLA_FLAGS=intra_op_parallelism_threads=1``
to compare (the header shows the flags).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import _data
from _report import Report, load, machine, spread

N_ITEMS = 129


def fit_and_counts(cc):
    """The bootstrap scorer: ML scores, plus the replicate's counts (to check evalica on the same data)."""
    import jaxrank as jr

    sol = jr.fit_poe_bradley_terry(cc, eps=0.0)
    return sol.scores, sol.converged, cc.weight, cc.p * cc.weight


def counts_only(cc):
    """A scorer that only hands back the replicate's games: times the draws."""
    return cc.weight[..., :1]


def fisher_stderr(i, j, games, scores, n):
    """Float64 standard errors of the centred ML scores: ``sqrt(diag(H^+))``, ``H`` the Fisher information."""
    q = 1 / (1 + np.exp(-(scores[i] - scores[j])))
    h = games * q * (1 - q)
    hess = np.zeros((n, n))
    np.add.at(hess, (i, i), h)
    np.add.at(hess, (j, j), h)
    np.add.at(hess, (i, j), -h)
    np.add.at(hess, (j, i), -h)
    return np.sqrt(np.diag(np.linalg.pinv(hess)))


def evalica_tolerance(i, j, games, won, n, jaxrank_scores):
    """evalica's tolerance matching jaxrank's accuracy on counts without draws: ``(tolerance, evalica's error,
    jaxrank's error)``, errors = max abs difference of centred scores from the float64 ML optimum."""
    drawn = np.zeros_like(won)
    ref = _data.ml_float64(i, j, games, won, drawn, n)
    s = np.asarray(jaxrank_scores, np.float64)
    e_jr = float(np.abs(s - s.mean() - ref).max())
    tol, e_ev = _data.matched_tolerance(*_data.evalica_inputs(i, j, games, won, drawn), n, ref, e_jr)
    return tol, e_ev, e_jr


def one_size(rep, m, args):
    import jax
    import evalica

    import jaxrank as jr

    n, B = N_ITEMS, args.replicates
    _, a, b, y = _data.simulate(n, m, args.seed)
    i, j, games, won, _ = _data.counts(a, b, y.astype(np.float64), n)
    c = jr.Comparisons.from_pairs(i, j, (won / games).astype(np.float32), num_items=n, weight=games.astype(np.float32))
    cats = np.stack([won, games - won], -1).reshape(-1)
    live = np.nonzero(cats)[0]
    xs, ys, winners, _ = _data.evalica_inputs(i, j, games, won, np.zeros_like(won))
    tol, e_ev, e_jr = evalica_tolerance(i, j, games, won, n, jr.poe_bradley_terry(c, eps=0.0))

    def jaxrank_call(seed):
        out = jr.bootstrap_outcomes(fit_and_counts, c, num_replicates=B, key=jax.random.key(seed), chunks=args.chunks)
        return jax.block_until_ready(out)

    def evalica_loop(rng, k):
        for _ in range(k):
            r = np.zeros(cats.size)
            r[live] = rng.multinomial(m, cats[live] / m)
            r = r.reshape(-1, 2)
            _data.evalica_scores(xs, ys, winners, np.concatenate([r[:, 0], r[:, 1]]), n, tolerance=tol)

    t0 = time.perf_counter()
    jaxrank_call(0)
    t_first = time.perf_counter() - t0
    t_jr, t_ev, loads = [], [], []
    rng = np.random.default_rng(args.seed + 1)
    for r in range(args.repeats):
        t0 = time.perf_counter()
        out = jaxrank_call(r + 1)
        t_jr.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        evalica_loop(rng, args.peer_replicates)
        t_ev.append((time.perf_counter() - t0) * B / args.peer_replicates)
        loads.append(load())
    # the draws alone: jaxrank on the device against NumPy on the host
    jax.block_until_ready(jr.bootstrap_outcomes(counts_only, c, num_replicates=B, key=jax.random.key(0),
                                                chunks=args.chunks))
    t0 = time.perf_counter()
    jax.block_until_ready(jr.bootstrap_outcomes(counts_only, c, num_replicates=B, key=jax.random.key(1),
                                                chunks=args.chunks))
    t_draw_jr = time.perf_counter() - t0
    t0 = time.perf_counter()
    np.random.default_rng(0).multinomial(m, cats[live] / m, size=B)
    t_draw_np = time.perf_counter() - t0

    ratio = np.asarray(t_ev) / np.asarray(t_jr)
    rep.say(f"## {m:,} comparisons among {n} items ({len(i):,} ordered pairs, {len(live):,} categories), {B} replicates")
    rep.say()
    rep.table(["method", "seconds for all replicates, median [min, max]", "evalica loop / jaxrank, median of rounds"], [
        [f"jaxrank `bootstrap_outcomes` (device draws + batched ML fit), steady", spread(t_jr, 1, "{:.2f}"),
         f"{np.median(ratio):.2f}x [{ratio.min():.2f}, {ratio.max():.2f}]"],
        [f"evalica {evalica.__version__} loop: NumPy `multinomial` + `bradley_terry(weights=, tolerance={tol:g})` "
         f"per replicate ({args.peer_replicates} timed, x {B / args.peer_replicates:g})", spread(t_ev, 1, "{:.2f}"),
         "1"],
        ["jaxrank first call (incl. compilation)", f"{t_first:.2f}", ""],
        [f"draws alone: jaxrank on the device ({B} replicates)", f"{t_draw_jr:.2f}", ""],
        [f"draws alone: NumPy `multinomial` ({B} replicates)", f"{t_draw_np:.2f}", ""],
    ])
    scores, conv, G, W = (np.asarray(x) for x in out)
    diff = 0.0
    for r in range(min(5, B)):
        s, _ = _data.evalica_scores(xs, ys, winners, np.concatenate([W[r], G[r] - W[r]]).astype(np.float64), n,
                                    tolerance=tol)
        diff = max(diff, np.abs((s - s.mean()) - (scores[r] - scores[r].mean())).max())
    est = np.asarray(jr.poe_bradley_terry(c, eps=0.0), np.float64)
    sd_ratio = np.std(scores, axis=0, ddof=1) / fisher_stderr(i, j, games, est, n)
    rep.say(f"evalica's tolerance {tol:g}: the loosest of 1e-4 ... 1e-8 whose scores on the data are at least as "
            f"close to the float64 ML optimum as jaxrank's (max abs error of centred scores: evalica {e_ev:.1e}, "
            f"jaxrank {e_jr:.1e}; chosen untimed).")
    rep.say(f"{args.repeats} rounds; load average over the rounds {min(loads):.2f}-{max(loads):.2f}. All {B} jaxrank "
            f"replicates converged: {bool(conv.all())}; every replicate holds {m:,} outcomes: "
            f"{bool(np.all(G.sum(1) == m))}. evalica on jaxrank's first {min(5, B)} replicates: max abs difference of "
            f"centred scores {diff:.1e}. Replicate standard deviation / float64 asymptotic standard error, mean "
            f"[min, max] over items: {sd_ratio.mean():.3f} [{sd_ratio.min():.3f}, {sd_ratio.max():.3f}] (Monte Carlo "
            f"error of one item's ratio about {100 / np.sqrt(2 * (B - 1)):.1f}%).")
    rep.say()
    for name, ts in (("jaxrank", t_jr), ("evalica loop", t_ev)):
        rep.row(comparisons=m, replicates=B, method=name, median_s=float(np.median(ts)), min_s=min(ts), max_s=max(ts),
                ratio_median=float(np.median(ratio)) if name == "jaxrank" else 1.0, first_call_s=t_first if
                name == "jaxrank" else "", draws_s=t_draw_jr if name == "jaxrank" else t_draw_np,
                load_min=min(loads), load_max=max(loads), evalica_tolerance=tol,
                max_abs_error=e_jr if name == "jaxrank" else e_ev)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,10000000", help="comma-separated numbers of comparisons")
    ap.add_argument("--replicates", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3, help="rounds (jaxrank call + evalica loop)")
    ap.add_argument("--peer-replicates", type=int, default=50, help="evalica loop: replicates timed per round")
    ap.add_argument("--chunks", type=int, default=4, help="jaxrank: batched calls per bootstrap")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="100,000 comparisons, 40 replicates, 2 rounds")
    ap.add_argument("--out", default=None, help="output path without suffix (default results/bootstrap_scale)")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    if args.smoke:
        sizes, args.replicates, args.repeats, args.peer_replicates, args.chunks = [100_000], 40, 2, 10, 2
    rep = Report("bootstrap_scale", smoke=args.smoke, out=args.out)
    rep.say("# Bootstrap of raw outcomes: jaxrank (draws on the device) against a loop of evalica")
    rep.say()
    rep.say(machine() + ". See the module docstring for what is timed.")
    rep.say()
    for m in sizes:
        one_size(rep, m, args)
    rep.write()


if __name__ == "__main__":
    main()
