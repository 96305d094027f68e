"""Peak memory (RSS) and time of every scorer and of ``jaxrank rank`` on sparse pools.

Issue 14: memory must grow as ``O(N + R)`` on a sparse pool, not as ``N^2``. A pool
of ``N`` items has ``R = 10 N`` comparisons between uniformly drawn distinct
pairs, with soft probabilities ``p = sigmoid(s_a - s_b)`` of random true scores
(hard scorers read the decisions ``1[p > 0.5]``).

Every case runs in a fresh Python process (so one case's arrays and compiled
programs never count for another) that imports JAX and jaxrank, builds the pool,
runs the case once and reports its peak resident set size
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``) and the wall time of the call
(compilation included, as a user's first call pays it). The cases:

* ``jax-import``: ``import jax, jaxrank`` and the pool alone: the floor;
* every scorer of ``jaxrank.scorer_table.SCORERS`` through ``scorer_table.score``
  (``max_likelihood_ranking`` is exhaustive over orderings and only for a
  handful of items: left out);
* ``fit_poe``: the general Product-of-Experts solver (``jaxrank.fit_poe``) with
  Thurstone experts (``experts.thurstone()``);
* ``cli-<method>``: ``jaxrank rank pool.csv --method <method> -o scores.csv``
  in-process (the file written first, then read by the command), for
  ``win_ratio``, ``poe_gaussian`` (with its standard errors) and ``poe_bradley_terry`` (the default, with Laplace standard
  errors), compilation cache off.

``--bt-vs-poe N [N ...]`` also times hard BT against PoE-BT on a pool of each ``N`` items in
this process (compiled first, interleaved rounds).

``--root`` picks the checkout whose jaxrank is measured (``PYTHONPATH``), so a
"before" (e.g. ``--root /work/main``) and an "after" run the same script.

``--bt-ab BEFORE AFTER`` with ``--bt-vs-poe N``: hard BT and PoE-BT from two checkouts side by side, each in its
own long-lived process (compiled first), called alternately round after round (one process runs at a time), so
load hits both alike; per round the after / before ratio of hard BT's time and each tree's BT / PoE-BT ratio.

    python benchmarks/memory_scale.py [--sizes 1000 10000] [--repeats 3] [--root ..] [--smoke] [--label after]
    python benchmarks/memory_scale.py --sizes --bt-vs-poe 5000 --bt-ab BEFORE_ROOT AFTER_ROOT --repeats 15 --label ab
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _report import Report, interleaved, load_line, spread   # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parent.parent
CLI_METHODS = ("win_ratio", "poe_bradley_terry", "poe_gaussian")
SKIPPED = ("max_likelihood_ranking",)


def _pool(n, seed=0):
    """``R = 10 N`` distinct-pair comparisons of ``n`` items: ``(i, j, p)`` as NumPy arrays
    (:func:`jaxrank.simulate.sparse_pool`; imported here: the parent process imports no JAX)."""
    from jaxrank.simulate import sparse_pool

    return sparse_pool(n, per_item=10, seed=seed)[:3]


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0   # kB on Linux


def worker(case, n):
    """Run one case in this process; print a JSON line with peak RSS (MB) and seconds."""
    import jax   # deferred: imported inside the measured process only

    import jaxrank as jr
    from jaxrank import scorer_table

    i, j, p = _pool(n)
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n)
    jax.block_until_ready(c.p)
    t0 = time.perf_counter()
    if case == "jax-import":
        pass
    elif case.startswith("cli-"):
        from jaxrank.cli import main
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "pool.csv"
            names = np.char.add("item", np.arange(n).astype(str))
            np.savetxt(path, np.stack([names[i], names[j], p.astype(str)], axis=1), fmt="%s", delimiter=",",
                       header="item_a,item_b,p", comments="")
            t0 = time.perf_counter()
            main(["rank", str(path), "--method", case[4:], "--top", "0", "--no-compilation-cache",
                  "-o", str(Path(tmp) / "scores.csv")])
    elif case == "fit_poe":
        from jaxrank.scoring import experts
        s = np.asarray(jr.fit_poe(c, jr.ProductOfExpertsSolver(experts.thurstone())).scores)
        if not np.all(np.isfinite(s)):
            raise SystemExit(f"{case}: non-finite scores")
    else:
        s = np.asarray(scorer_table.score(case, c))
        if not np.all(np.isfinite(s)):
            raise SystemExit(f"{case}: non-finite scores")
    seconds = time.perf_counter() - t0
    print(json.dumps({"case": case, "n": n, "rss_mb": _rss_mb(), "seconds": seconds}))


def _noisy(i, j, p, seed=1):
    """LLM-like probabilities: the pool's logits plus ``N(0, 1.5^2)`` noise, so decisions contradict the order."""
    rng = np.random.default_rng(seed)
    z = np.log(p / (1 - p)) + rng.normal(0.0, 1.5, p.shape)
    return (1.0 / (1.0 + np.exp(-z))).astype(np.float32)


def bt_vs_poe(n, repeats, rep):
    """Hard BT against PoE-BT on sparse pools of ``n`` items, interleaved in this process (compiled first).

    Two pools on the same pairs: the memory cases' pool, whose decisions ``1[p > 0.5]``
    all follow one latent order (separable: hard BT's fixed point is set by its
    ``1/(N-1)`` prior alone, scores spread over ~140 log-units, Newton's slowest
    case), and the same pairs with noisy, LLM-like probabilities (:func:`_noisy`).
    """
    import jax   # deferred: the parent of the memory cases imports no JAX (nothing of it counts in theirs)

    import jaxrank as jr

    i, j, p = _pool(n)
    for label, pp in (("separable decisions (one latent order)", p), ("noisy LLM-like probabilities", _noisy(i, j, p))):
        c = jr.Comparisons.from_pairs(i, j, pp, num_items=n)
        fits = {"bradley_terry": lambda: jr.fit_bradley_terry(c), "poe_bradley_terry": lambda: jr.fit_poe_bradley_terry(c)}
        first = {k: jax.block_until_ready(f()) for k, f in fits.items()}   # compile
        its = {k: f"{int(v.iterations)}{'' if bool(v.converged) else ' (unconverged)'}" for k, v in first.items()}
        fns = {k: (lambda f=f: jax.block_until_ready(f())) for k, f in fits.items()}
        times, loads = interleaved(fns, repeats)
        bt, poe = np.asarray(times["bradley_terry"]), np.asarray(times["poe_bradley_terry"])
        rep.say(f"## Hard BT against PoE-BT, {n} items, {10 * n} comparisons, {label} "
                f"(compiled; {repeats} interleaved rounds)")
        rep.say()
        rep.table(["scorer", "Newton steps", "seconds median [min, max]"],
                  [["bradley_terry (Newton on smoothed decisions)", its["bradley_terry"], spread(bt)],
                   ["poe_bradley_terry", its["poe_bradley_terry"], spread(poe)],
                   ["ratio BT / PoE-BT (per round)", "", spread(bt / poe, fmt="{:.1f}")]])
        rep.say(f"load per round: {', '.join(f'{x:.2f}' for x in loads)}")
        rep.say()
        rep.row(part="bt_vs_poe", pool=label, n=n, bt_seconds=float(np.median(bt)), poe_seconds=float(np.median(poe)),
                ratio=float(np.median(bt / poe)))


def ab_worker(n, noisy):
    """One tree's side of ``--bt-ab``: build the pool, compile both fits, then time one call of each per line read."""
    import jax   # deferred: imported in the measured process only

    import jaxrank as jr

    i, j, p = _pool(n)
    c = jr.Comparisons.from_pairs(i, j, _noisy(i, j, p) if noisy else p, num_items=n)
    fits = {"bt": lambda: jr.fit_bradley_terry(c), "poe": lambda: jr.fit_poe_bradley_terry(c)}
    first = {k: jax.block_until_ready(f()) for k, f in fits.items()}
    print(json.dumps({"ready": True, "source": str(Path(jr.__file__).parent), "bt_steps": int(first["bt"].iterations), "poe_steps": int(first["poe"].iterations),
                      "scores": np.asarray(first["bt"].scores, np.float64).tolist(),
                      "poe_scores": np.asarray(first["poe"].scores, np.float64).tolist()}), flush=True)
    for _ in sys.stdin:
        out = {}
        for k, f in fits.items():
            t0 = time.perf_counter()
            jax.block_until_ready(f())
            out[k] = time.perf_counter() - t0
        print(json.dumps(out), flush=True)


def bt_ab(n, roots, repeats, rep):
    """``--bt-ab``: hard BT (and PoE-BT) of two checkouts, alternate calls of two long-lived processes."""
    for noisy in (False, True):
        procs = []
        for root in roots:
            env = dict(os.environ, PYTHONPATH=str(root), JAXRANK_COMPILATION_CACHE="0")
            procs.append(subprocess.Popen([sys.executable, __file__, "--ab-worker", str(n), str(int(noisy))],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env))
        heads = []
        for pr in procs:
            line = pr.stdout.readline()
            while line and not line.startswith("{"):
                line = pr.stdout.readline()
            heads.append(json.loads(line))
        diff = float(np.max(np.abs(np.asarray(heads[0]["scores"]) - np.asarray(heads[1]["scores"]))))
        poe_diff = float(np.max(np.abs(np.asarray(heads[0]["poe_scores"]) - np.asarray(heads[1]["poe_scores"]))))
        times = [{"bt": [], "poe": []} for _ in procs]
        loads = []
        for r in range(repeats):
            order = (0, 1) if r % 2 == 0 else (1, 0)
            for k in order:
                procs[k].stdin.write("go\n")
                procs[k].stdin.flush()
                got = json.loads(procs[k].stdout.readline())
                for key in ("bt", "poe"):
                    times[k][key].append(got[key])
            loads.append(os.getloadavg()[0])
        for pr in procs:
            pr.stdin.close()
            pr.wait()
        bt = [np.asarray(t["bt"]) for t in times]
        poe = [np.asarray(t["poe"]) for t in times]
        label = "noisy LLM-like probabilities" if noisy else "separable decisions (one latent order)"
        rep.say(f"## Hard BT, before against after, {n} items, {10 * n} comparisons, {label} "
                f"({repeats} alternating rounds, one process per tree)")
        rep.say()
        rep.say(f"before `{heads[0]['source']}`, after `{heads[1]['source']}`; Newton steps {heads[0]['bt_steps']} / {heads[1]['bt_steps']} "
                f"(PoE-BT {heads[0]['poe_steps']} / {heads[1]['poe_steps']}); max |score difference| {diff:.2g} (PoE-BT {poe_diff:.2g})")
        rep.say()
        rep.table(["measure", "before", "after"],
                  [["hard BT ms median [min, max]", spread(bt[0], 1e3, "{:.1f}"), spread(bt[1], 1e3, "{:.1f}")],
                   ["PoE-BT ms median [min, max]", spread(poe[0], 1e3, "{:.1f}"), spread(poe[1], 1e3, "{:.1f}")],
                   ["BT / PoE-BT per round", spread(bt[0] / poe[0], fmt="{:.2f}"), spread(bt[1] / poe[1], fmt="{:.2f}")],
                   ["hard BT after / before per round", "", spread(bt[1] / bt[0], fmt="{:.3f}")],
                   ["rounds where hard BT after is faster", "", f"{np.mean(bt[1] < bt[0]):.0%}"],
                   ["PoE-BT after / before per round", "", spread(poe[1] / poe[0], fmt="{:.3f}")],
                   ["rounds where PoE-BT after is faster", "", f"{np.mean(poe[1] < poe[0]):.0%}"]])
        rep.say(f"load per round: {', '.join(f'{x:.2f}' for x in loads)}")
        rep.say()
        rep.row(part="bt_ab", pool=label, n=n, bt_before=float(np.median(bt[0])), bt_after=float(np.median(bt[1])),
                poe_before=float(np.median(poe[0])), poe_after=float(np.median(poe[1])),
                ratio_before=float(np.median(bt[0] / poe[0])), ratio_after=float(np.median(bt[1] / poe[1])),
                after_over_before=float(np.median(bt[1] / bt[0])), poe_after_over_before=float(np.median(poe[1] / poe[0])),
                max_score_diff=diff, max_poe_score_diff=poe_diff)


def combine(before, after):
    """``results/memory_scale.md``: the rows of the ``before`` and ``after`` runs side by side (their CSVs)."""
    import csv

    from _report import RESULTS, write_results

    def rows(label):
        out = {}
        for path in sorted(RESULTS.glob(f"memory_scale_{label}*.csv")):
            for r in csv.DictReader(path.open()):
                if r.get("case"):
                    out[(int(r["n"]), r["case"])] = r
        return out

    b, a = rows(before), rows(after)
    fmt = lambda r, k: "-" if r is None else (r.get("error") or f"{float(r[k]):.{0 if k == 'rss_mb' else 2}f}")
    lines = [f"# Peak memory (RSS, MB) and time (s) on sparse pools (R = 10 N): {before} against {after}", "",
             f"From `memory_scale_{before}*.md` and `memory_scale_{after}*.md` (each with its command, repeats and "
             "load); one fresh process per case, compilation included; where a case was re-run, the file later "
             "by name wins (`_1k_cli`: the command-line cases re-run at 1k with no other job of ours running).", "",
             "| items N | case | RSS before | RSS after | s before | s after |", "|---|---|---:|---:|---:|---:|"]
    for key in sorted(set(b) | set(a)):
        rb, ra = b.get(key), a.get(key)
        lines.append(f"| {key[0]} | {key[1]} | {fmt(rb, 'rss_mb')} | {fmt(ra, 'rss_mb')} | "
                     f"{fmt(rb, 'seconds')} | {fmt(ra, 'seconds')} |")
    write_results("memory_scale", lines)


def _run_case(case, n, root, timeout):
    env = dict(os.environ, PYTHONPATH=str(root), JAXRANK_COMPILATION_CACHE="0")
    try:
        out = subprocess.run([sys.executable, __file__, "--worker", case, str(n)], capture_output=True,
                             text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"case": case, "n": n, "error": f"timeout {timeout} s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        err = (out.stderr.strip().splitlines() or ["?"])[-1][:120]
        return {"case": case, "n": n, "error": f"exit {out.returncode}: {err}"}
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000, 10000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--root", default=str(ROOT), help="checkout whose jaxrank is measured")
    ap.add_argument("--label", default="", help="suffix of the results file (e.g. before, after)")
    ap.add_argument("--cases", nargs="*", help="only these cases")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per case before it counts as failed")
    ap.add_argument("--smoke", action="store_true", help="200 items, one repeat, two scorers: seconds")
    ap.add_argument("--bt-vs-poe", type=int, nargs="*", default=[], metavar="N",
                    help="also time hard BT against PoE-BT on N items in this process (issue 14: 5000; "
                         "sizes above 10,000 get at most 3 rounds)")
    ap.add_argument("--combine", nargs=2, metavar=("BEFORE", "AFTER"),
                    help="only write results/memory_scale.md from the runs labelled BEFORE* and AFTER*")
    ap.add_argument("--bt-ab", nargs=2, metavar=("BEFORE", "AFTER"),
                    help="with --bt-vs-poe: hard BT of two checkouts in alternate calls of two processes (no "
                         "memory cases unless --sizes are given)")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--ab-worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]))
        return
    if args.ab_worker:
        ab_worker(int(args.ab_worker[0]), bool(int(args.ab_worker[1])))
        return
    if args.combine:
        combine(*args.combine)
        return
    sys.path.insert(0, str(args.root))
    from jaxrank import scorer_table   # JAX-free: the names only

    cases = (["jax-import"] + [k for k in scorer_table.SCORERS if k not in SKIPPED] + ["fit_poe"]
             + [f"cli-{m}" for m in CLI_METHODS])
    if args.smoke:
        args.sizes, args.repeats, cases = [200], 1, ["jax-import", "win_ratio", "cli-win_ratio"]
        args.bt_vs_poe = [200] if args.bt_vs_poe else []
    if args.cases:
        cases = [k for k in cases if k in args.cases]
    name = "memory_scale" + (f"_{args.label}" if args.label else "")
    rep = Report(name, smoke=args.smoke)
    rep.say(f"# Peak memory and time on sparse pools (R = 10 N){' — ' + args.label if args.label else ''}")
    rep.say()
    if args.bt_ab and not args.sizes:
        rep.say(f"`memory_scale.py {' '.join(sys.argv[1:])}`: compiled calls only (no memory cases); "
                f"load (1/5/15 min) {load_line()} at the start.")
    else:
        rep.say(f"jaxrank from `{args.root}`; every case a fresh process; peak RSS (ru_maxrss) in MB and the "
                f"wall time of the call (compilation included); median [min, max] over {args.repeats} repeat(s); "
                f"load (1/5/15 min) {load_line()} at the start.")
    rep.say()
    rows = []
    for n in args.sizes:
        for case in cases:
            runs = [_run_case(case, n, args.root, args.timeout) for _ in range(args.repeats)]
            ok = [r for r in runs if "error" not in r]
            if not ok:
                rows.append([n, case, runs[0]["error"], "", load_line()])
                rep.row(n=n, case=case, error=runs[0]["error"])
            else:
                rss, sec = [r["rss_mb"] for r in ok], [r["seconds"] for r in ok]
                rows.append([n, case, spread(rss, fmt="{:.0f}"), spread(sec, fmt="{:.2f}"), load_line()])
                rep.row(n=n, case=case, rss_mb=float(np.median(rss)), seconds=float(np.median(sec)),
                        repeats=len(ok))
            print(rows[-1], file=sys.stderr, flush=True)
    if rows:
        rep.table(["items N", "case", "peak RSS MB", "seconds", "load after"], rows)
    for n in args.bt_vs_poe:
        if args.bt_ab:
            bt_ab(n, args.bt_ab, args.repeats, rep)
        else:
            bt_vs_poe(n, args.repeats if n <= 10_000 else min(args.repeats, 3), rep)
    rep.write()


if __name__ == "__main__":
    main()
