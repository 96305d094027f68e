"""Maximum-likelihood Bradley-Terry on the real football results, counts given and raw match rows: jaxrank against evalica.

The men's international results of ``shared/data`` (49,520 matches, 337 teams;
home team in position A, a draw half a win each way, no home advantage) are
aggregated once, outside every timer, into ordered-pair counts: games, wins
of A, draws (``np.bincount``). Two questions:

1. **Steady state on the strongly connected set** (316 teams, 49,463 matches,
   where the ML scores are finite): jaxrank builds ``Comparisons.from_pairs``
   from the NumPy counts and runs ``fit_poe_bradley_terry(eps=0)`` (Newton),
   scores back to NumPy; evalica gets its fastest input prepared outside its
   timer (one row per pair and outcome with the count as ``weights=``, the
   ``Winner`` list built beforehand) and runs ``bradley_terry`` at two
   tolerances: 1e-10, and the loosest of 1e-4 ... 1e-8 at which its scores are
   at least as close as jaxrank's (float32) to the float64 ML optimum (a dense
   NumPy Newton solve, ``_data.ml_float64``); each row gives its max error.
2. **All 337 teams**, not strongly connected (some teams never lost, or never
   won, against the rest: no finite ML scores). jaxrank detects it before the
   first Newton step, warns, and returns the MAP under an ``N(0, 100)`` score
   prior (``jaxrank.scoring.existence``); evalica (no prior or regularisation
   option) returns one constant for every team after 2 iterations: its output
   is checked (``_data.no_answer``) and reported as no answer, without a ratio.

Each round times every method once, alternating, so machine load hits all
alike; the table gives the median and [min, max] over ``--repeats`` rounds
and the median of the per-round ratios. The first call (with compilation) is
reported apart (in parts 3 and 4 it is the first in this process of that path:
shapes an earlier part compiled are reused). ``--busy K`` starts K CPU-spinning processes of its own for the
timed rounds (a reproducible loaded machine); the load average is recorded
either way.

    python benchmarks/football_bt.py [--repeats 15] [--busy 0] [--parts counts rows] [--smoke] [--out FILE]

3. **Raw match rows, evalica's own input form** (parts 3 and 4: the strongly
   connected set's rows and all rows): both get the same Python lists of team
   names, home team first, built outside every timer, with evalica's ``Winner``
   list or jaxrank's ``P(home better)`` (1, 0.5, 0); evalica runs
   ``bradley_terry`` with its defaults (tolerance 1e-6, at most 100 iterations).
   Timed for jaxrank: the names to indices, the rows to ``Comparisons``, the fit
   (``fit_poe_bradley_terry(eps=0)``, the same likelihood, ties half a win) and
   the scores back to NumPy, two ways: ``jaxrank.io.comparisons_from_rows`` (one
   dictionary pass numbers the names, ``np.bincount`` sums the rows of each ordered
   pair into one weighted comparison, exact for this likelihood), the same with
   ``aggregate="unordered"`` (the rows of a pair in either order summed into one
   comparison, exact without a position bias: 7,557 comparisons instead of 12,309;
   left out where the jaxrank measured has no such option) and, as a user
   wrote it before that function existed, a dictionary comprehension and
   ``Comparisons.from_pairs`` with one comparison a row ("per row").

``--smoke`` (5 rounds) writes ``results/football_bt_smoke.{md,csv}``; ``--parts``
picks parts (``counts``, ``rows``; default both).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import sys
import time
import warnings

import numpy as np

import _data
from _report import Report, interleaved, load, machine, spread


def _spin():
    while True:
        pass


@contextlib.contextmanager
def busy(k: int):
    """``k`` CPU-spinning processes while the block runs (ended by their handles afterwards)."""
    procs = [mp.Process(target=_spin, daemon=True) for _ in range(k)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
            p.join()


def jaxrank_fit(i, j, games, won, drawn, n):
    """NumPy counts -> ``fit_poe_bradley_terry(eps=0)`` -> NumPy scores (all timed)."""
    import jaxrank as jr

    c = jr.Comparisons.from_pairs(i, j, ((won + drawn / 2) / games).astype(np.float32), num_items=n,
                                  weight=games.astype(np.float32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sol = jr.fit_poe_bradley_terry(c, eps=0.0)
        scores = np.asarray(sol.scores, np.float64)
    return scores, int(sol.iterations), bool(sol.converged), [str(w.message) for w in caught]


def centred(x):
    x = np.asarray(x, np.float64)
    return x - x.mean()


def one_set(rep, label, counts, n, repeats, k_busy, ref=None):
    """First call and interleaved steady rounds of jaxrank and evalica (two tolerances) on one count set.

    ``ref``: the float64 ML optimum (centred) where one exists; each method's max error against it is reported and
    evalica's second tolerance is the loosest at least as accurate as jaxrank (its default 1e-6 without ``ref``).
    A peer's output that is not an answer (``_data.no_answer``) gets no ratio.
    """
    import evalica

    t0 = time.perf_counter()
    first = jaxrank_fit(*counts, n)
    t_first = time.perf_counter() - t0
    ev_in = _data.evalica_inputs(*counts)
    err = lambda x: float(np.abs(centred(x) - ref).max()) if ref is not None else float("nan")
    e_jr = err(first[0])
    tol = (_data.matched_tolerance(*ev_in, n, ref, e_jr)[0] if ref is not None else 1e-6)
    tols = {"evalica tol 1e-10": 1e-10, f"evalica tol {tol:g}": tol}
    out = {}
    fns = {"jaxrank": lambda: out.update(jaxrank=jaxrank_fit(*counts, n))}
    for k, t in tols.items():
        fns[k] = lambda k=k, t=t: out.update({k: _data.evalica_scores(*ev_in, n, tolerance=t)})
    with busy(k_busy):
        times, loads = interleaved(fns, repeats)
    scores, iters, conv, warned = out["jaxrank"]
    tj = np.asarray(times["jaxrank"])
    table = [["jaxrank `fit_poe_bradley_terry(eps=0)`, steady", spread(tj, 1e3, "{:.1f}"), "1",
              f"{iters} Newton steps, converged {conv}",
              f"{err(scores):.1e}" if ref is not None else "no finite optimum"]]
    answers = {}
    for k in tols:
        s_ev, it_ev = out[k]
        why = _data.no_answer(s_ev, it_ev, 100_000)
        answers[k] = why
        ratio = np.asarray(times[k]) / tj
        table.append([f"evalica {evalica.__version__} `bradley_terry(weights=, tolerance={tols[k]:g})`, steady",
                      spread(times[k], 1e3, "{:.1f}"), why or spread(ratio, 1, "{:.2f}") + "x",
                      f"{it_ev} iterations", "" if why or ref is None else f"{err(s_ev):.1e}"])
        rep.row(part=label, method=k, median_ms=1e3 * np.median(times[k]), min_ms=1e3 * min(times[k]),
                max_ms=1e3 * max(times[k]), ratio_median="" if why else float(np.median(ratio)),
                answer=why or "yes", max_err_vs_f64=err(s_ev), iterations=it_ev,
                load_min=min(loads), load_max=max(loads), busy=k_busy, first_call_ms="")
    table.append(["jaxrank first call (incl. compilation)", f"{1e3 * t_first:.0f}", "", "", ""])
    rep.table(["method", "ms, median [min, max]", "peer time / jaxrank time, median of rounds [min, max]",
               "iterations", "max abs error vs float64 ML optimum (centred)"], table)
    rep.say(f"{repeats} rounds; load average over the rounds {min(loads):.2f}-{max(loads):.2f}"
            f"{f' with {k_busy} spinning processes of this benchmark' if k_busy else ''}. evalica's second "
            + (f"tolerance ({tol:g}) is the loosest of 1e-4 ... 1e-8 whose scores are at least as close to the "
               f"float64 optimum as jaxrank's (chosen untimed)." if ref is not None else
               "tolerance is its default (1e-6): no finite optimum to match an accuracy to here."))
    rep.row(part=label, method="jaxrank", median_ms=1e3 * np.median(tj), min_ms=1e3 * tj.min(),
            max_ms=1e3 * tj.max(), ratio_median=1.0, answer="yes", max_err_vs_f64=err(scores), iterations=iters,
            load_min=min(loads), load_max=max(loads), busy=k_busy, first_call_ms=1e3 * t_first)
    return scores, {k: out[k][0] for k in tols}, answers, warned


def has_unordered() -> bool:
    """This jaxrank's ``comparisons_from_rows`` takes ``aggregate="unordered"`` (older ones read it as ``True``)."""
    import jaxrank as jr

    return "unordered" in (jr.io.comparisons_from_rows.__doc__ or "")


def jaxrank_rows(xs, ys, p, aggregate):
    """Raw rows (names, ``P(A better)``) -> ``fit_poe_bradley_terry(eps=0)`` -> NumPy scores (all timed).

    ``aggregate``: ``True`` (ordered pairs, the default), ``"unordered"`` or ``False`` (a user's own numbering and
    ``from_pairs``, one comparison a row)."""
    import jaxrank as jr

    if aggregate:
        c, names = jr.io.comparisons_from_rows(xs, ys, p, aggregate=aggregate)
    else:   # before comparisons_from_rows: a user's own numbering, one comparison a row
        code = {k: n for n, k in enumerate(dict.fromkeys(xs + ys))}
        names = list(code)
        c = jr.Comparisons.from_pairs(np.fromiter(map(code.__getitem__, xs), np.int32, len(xs)),
                                      np.fromiter(map(code.__getitem__, ys), np.int32, len(ys)),
                                      p.astype(np.float32), num_items=len(names))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sol = jr.fit_poe_bradley_terry(c, eps=0.0)
        scores = np.asarray(sol.scores, np.float64)
    return dict(zip(names, scores)), int(sol.iterations), bool(sol.converged), len(caught)


def evalica_rows(xs, ys, winners):
    """``evalica.bradley_terry`` with its defaults on raw rows: natural-log scores by name, iterations."""
    import evalica

    r = evalica.bradley_terry(xs, ys, winners)
    return dict(zip(r.scores.index, np.log(r.scores.to_numpy(np.float64)))), int(r.iterations)


def rows_set(rep, label, xs, ys, outcome, repeats, k_busy, ref=None):
    """Raw rows: first calls, then interleaved steady rounds of evalica (defaults) and jaxrank's paths.

    ``ref``: the float64 ML optimum by team name (centred), where one exists."""
    import evalica

    p = np.asarray(outcome, np.float64)
    winners = [evalica.Winner.X if o == 1 else (evalica.Winner.Y if o == 0 else evalica.Winner.Draw) for o in p]
    aggs = {"rows": True, "unordered": "unordered", "per row": False}
    if not has_unordered():
        del aggs["unordered"]
    first = {}
    for k, agg in aggs.items():
        t0 = time.perf_counter()
        jaxrank_rows(xs, ys, p, agg)
        first[k] = time.perf_counter() - t0
    out = {}
    fns = {"evalica": lambda: out.update(evalica=evalica_rows(xs, ys, winners))}
    for k, agg in aggs.items():
        fns[k] = lambda k=k, agg=agg: out.update({k: jaxrank_rows(xs, ys, p, agg)})
    with busy(k_busy):
        times, loads = interleaved(fns, repeats)
    ev = np.asarray(times["evalica"])
    s_ev, ev_iters = out["evalica"]
    why = _data.no_answer(list(s_ev.values()))     # stopping at its cap of 100 is an answer: its error is shown
    err = (lambda d: f"{np.abs(centred([d[k] for k in ref]) - centred(list(ref.values()))).max():.1e}"
           if ref is not None else "")
    names = {"rows": "jaxrank `io.comparisons_from_rows` + `fit_poe_bradley_terry(eps=0)`, steady",
             "unordered": "jaxrank `io.comparisons_from_rows(aggregate=\"unordered\")` + the same fit, steady",
             "per row": "jaxrank per row (dict numbering, `from_pairs`, one comparison a row), steady"}
    table = []
    for k in aggs:
        table.append([names[k], spread(times[k], 1e3, "{:.1f}"),
                      "" if why else spread(ev / np.asarray(times[k]), 1, "{:.2f}") + "x", err(out[k][0])])
    table.append([f"evalica {evalica.__version__} `bradley_terry(xs, ys, winners)`, defaults, steady",
                  spread(ev, 1e3, "{:.1f}"), why or "1", "" if why else err(s_ev)])
    table.append([f"jaxrank first calls in this process (incl. compilation, but shapes compiled by earlier parts "
                  f"of this run are reused): {', '.join(aggs)}", ", ".join(f"{1e3 * first[k]:.0f}" for k in aggs),
                  "", ""])
    rep.table(["method", "ms, median [min, max]", "evalica / jaxrank, median of rounds [min, max]",
               "max abs error vs float64 ML optimum (centred)"], table)
    s_rows, it_rows, conv_rows, warned = out["rows"]
    s_per, it_per, conv_per, _ = out["per row"]
    order = list(s_rows)
    cen = lambda d: centred([d[k] for k in order])
    rep.say(f"{repeats} rounds; load average over the rounds {min(loads):.2f}-{max(loads):.2f}"
            f"{f' with {k_busy} spinning processes of this benchmark' if k_busy else ''}. jaxrank: {it_rows} "
            f"Newton steps on the summed pairs (converged {conv_rows}), {it_per} per row (converged {conv_per}), "
            f"{warned} warning(s) a call; evalica: {ev_iters} iterations{' (its default cap)' if ev_iters >= 100 else ''}. Max abs difference of centred scores, "
            f"summed pairs vs per row: {np.abs(cen(s_rows) - cen(s_per)).max():.1e}"
            + (f"; unordered vs per row: {np.abs(cen(out['unordered'][0]) - cen(s_per)).max():.1e} "
               f"({out['unordered'][1]} Newton steps)" if "unordered" in out else "")
            + (f"; summed pairs vs evalica: {np.nanmax(np.abs(cen(s_rows) - cen(s_ev))):.1e}." if not why else
               f". evalica returns {why}: not timed as an answer, no ratio."))
    for k in list(aggs) + ["evalica"]:
        t = np.asarray(times[k])
        rep.row(part=label, method=k, median_ms=1e3 * np.median(t), min_ms=1e3 * t.min(), max_ms=1e3 * t.max(),
                ratio_median="" if why else float(np.median(ev / t)), answer=why or "yes", load_min=min(loads), load_max=max(loads), busy=k_busy,
                first_call_ms=1e3 * first[k] if k != "evalica" else "")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--busy", type=int, default=0, help="CPU-spinning processes during the timed rounds")
    ap.add_argument("--smoke", action="store_true", help="5 rounds")
    ap.add_argument("--parts", nargs="*", choices=("counts", "rows"), default=["counts", "rows"],
                    help="counts given (parts 1, 2) and/or raw match rows (parts 3, 4)")
    ap.add_argument("--out", default=None, help="output path without suffix (default results/football_bt)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.repeats = min(args.repeats, 5)
    rep = Report("football_bt", smoke=args.smoke, out=args.out)
    rep.say("# Football Bradley-Terry, counts given and raw match rows: jaxrank against evalica")
    rep.say()
    rep.say(machine() + f". Command: `python benchmarks/football_bt.py {' '.join(argv if argv is not None else sys.argv[1:])}`"
            f" ({args.repeats} interleaved rounds). See the module docstring for what is timed.")
    rep.say()
    a, b, o, names = _data.football()
    n_all = len(names)
    sa, sb, so, keep = _data.strongly_connected(a, b, o, n_all)
    n_scc = len(keep)

    if "counts" in args.parts:
        rep.say(f"## 1. Strongly connected set: {len(sa):,} matches among {n_scc} teams (ML scores finite)")
        rep.say()
        scc_counts = _data.counts(sa, sb, so, n_scc)
        ref = _data.ml_float64(*scc_counts, n_scc)
        s_jr, s_ev, why, warned = one_set(rep, "strongly connected", scc_counts, n_scc, args.repeats, args.busy,
                                          ref=ref)
        rep.say(f"jaxrank warnings: {len(warned)}. The float64 optimum is a dense NumPy Newton solve "
                f"(`_data.ml_float64`, steps below 1e-13).")
        rep.say()

        rep.say(f"## 2. All {n_all} teams, {len(a):,} matches (not strongly connected: no finite ML scores)")
        rep.say()
        m_jr, m_ev, why, warned = one_set(rep, "all teams", _data.counts(a, b, o, n_all), n_all, args.repeats,
                                          args.busy)
        rep.say("jaxrank's warning (once per call): " + (f"`{warned[0]}`" if warned else "none (unexpected)"))
        rep.say()
        sub = centred(m_jr[keep])
        ev_says = "; ".join(
            f"{k}: {w}" + (f", every team {v[0]:.4f}" if "constant" in w else "") if w else f"{k}: an answer"
            for (k, w), v in zip(why.items(), m_ev.values()))
        rep.say(f"On the {n_scc} strongly connected teams, jaxrank's MAP scores (centred on them) differ from their "
                f"ML scores by at most {np.abs(sub - centred(s_jr)).max():.3f}; outside it, jaxrank's scores span "
                f"[{np.delete(m_jr, keep).min():.2f}, {np.delete(m_jr, keep).max():.2f}] against "
                f"[{m_jr[keep].min():.2f}, {m_jr[keep].max():.2f}] inside. evalica ({ev_says}) has no option for "
                f"such data (its `bradley_terry` takes no prior or regularisation), so no ratio is given here.")
        rep.say()
        top = np.argsort(-s_jr)[:5]
        rep.say("jaxrank's top 5 (strongly connected set): " + ", ".join(
            f"{names[keep[t]]} {s_jr[t] - s_jr.mean():+.2f}" for t in top) + f". Load now {load():.2f}.")
        rep.say()
    if "rows" in args.parts:
        team = np.asarray(names, object)
        sel = np.isin(a, keep) & np.isin(b, keep)
        ref_names = dict(zip(team[keep], _data.ml_float64(*_data.counts(sa, sb, so, n_scc), n_scc)))
        for part, (ra, rb, ro, what) in (("3", (a[sel], b[sel], o[sel], f"strongly connected set, {sel.sum():,} rows "
                                                f"among {n_scc} teams")),
                                         ("4", (a, b, o, f"all {n_all} teams, {len(a):,} rows"))):
            rep.say(f"## {part}. Raw match rows, evalica's input form: {what}")
            rep.say()
            rows_set(rep, "rows, " + ("strongly connected" if part == "3" else "all teams"), team[ra].tolist(),
                     team[rb].tolist(), ro, args.repeats, args.busy, ref=ref_names if part == "3" else None)
            rep.say()
    rep.write()


if __name__ == "__main__":
    main()
