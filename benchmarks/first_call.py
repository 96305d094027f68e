"""The first call of every scorer on a new pool, each in a fresh process, against evalica (issue 33).

A notebook user meets a new pool size on every new data set; a jitted program is
compiled per shape, so before the bucketing every new size paid a whole
compilation (10-19 s for Bradley-Terry on 2 busy cores). Each measurement here
is a fresh Python process that imports jaxrank, turns on the persistent
compilation cache (``jaxrank.enable_compilation_cache``), builds a pool, and
times the scorer's first call (scores back to NumPy) and the median of 5 calls after it ("steady"):

* **cold cache**: an empty cache folder (every program compiled);
* **warm cache, new size**: the cache of a process that scored a pool of
  another size of the same bucket (``variant 0``); every timed process then
  scores a size never seen before (``variant k`` drops ``k`` items and ``3k``
  comparisons, or ``k`` football matches).

Pools: ``small`` (24 items, 64 comparisons; every scorer), ``synthetic``
(1,000 items, 5,000 soft comparisons of a latent BT order; win ratio, the two
Bradley-Terry scorers and PoE-g) and ``football`` (the men's international
results, 49,520 matches, 337 teams, as ordered-pair counts; Bradley-Terry and
PoE-BT with a score prior of 0.1). evalica's ``bradley_terry`` (its Rust solver)
runs in its own fresh processes on the same pool (decisions ``p > 0.5``; the
football's match rows), timed the same way after its import; its output is
checked to be an answer (``_data.no_answer``): on these pools, not strongly
connected as decisions, it returns one constant for every item, reported as
"no answer (constant scores ...)" in the "answer" column and instead of its
first-call and steady times (in the before/after table too); so is a run that
reaches evalica's default cap of 100 iterations. With
``--baseline-root`` another checkout (the code before a change) takes its turn
in every round, so before and after share the machine's load.

Reported per scorer and pool: median and [min, max] over the processes of the
first call, the import of jaxrank (with the scorer's module) and the whole
process, and the compilation events of the first call (trace, lowering,
backend compile or cache retrieval, from ``jax.monitoring``), and in how many
processes the first call imported ``scipy.linalg`` (jaxlib binds its CPU LAPACK
kernels to SciPy's routines: 0.2 s idle, up to 1 s under load; JAX reports it
inside "lower" when it lowers a program, and a loaded executable that calls
LAPACK pays it outside any event). With a warm cache a scorer's bucket is a
compiled executable on disk (``jaxrank.compilation.ExportedProgram`` with
``executables``): no trace, lowering or compile events at all.

    python benchmarks/first_call.py [--repeats 3] [--baseline-root CHECKOUT] [--smoke]

``--smoke`` (one pool, two scorers, one process each) writes ``results/first_call_smoke.{md,csv}``.

Every process runs a frozen copy of the ``jaxrank`` package (:func:`snapshot`, taken once at the start, one per
checkout), not the checkout itself: a compiled program's key holds a digest of every ``.py`` file of jaxrank, so
an edit anywhere in the package between two processes (another worker's, in a shared checkout) is a new key, and
the next process traces, lowers and compiles its bucket again. That, not the pool, is what the rerun of commit
39a98ba saw ("warm cache, new size" compiling in 1 of 2 processes for Bradley-Terry small and PoE-BT synthetic):
it ran in the shared checkout while other workers edited jaxrank (``jaxrank/assessment/report.py`` was written
between Bradley-Terry's variants 1 and 2). On a frozen copy both variants load with no compile event. Each process
reports the digest of the jaxrank it imported; a process whose digest is not its snapshot's stops the run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _report import Report, load, machine

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve()

SCORERS = ("win_ratio", "average_probability", "bradley_terry", "poe_gaussian", "poe_gaussian_hard",
           "poe_bradley_terry", "max_likelihood_ranking")
POOLS = {"small": SCORERS, "synthetic": ("win_ratio", "bradley_terry", "poe_gaussian", "poe_bradley_terry"),
         "football": ("bradley_terry", "poe_bradley_terry")}
EVENTS = {"trace": "/jax/core/compile/jaxpr_trace_duration",
          "lower": "/jax/core/compile/jaxpr_to_mlir_module_duration",
          "compile": "/jax/core/compile/backend_compile_duration",
          "cache_get": "/jax/compilation_cache/cache_retrieval_time_sec"}


def source_digest(package: Path) -> str:
    """SHA-256 of every ``.py`` file under ``package`` (its path relative to ``package`` and its content), as the
    key of a compiled program digests jaxrank's source: equal digests, equal keys."""
    h = hashlib.sha256()
    for f in sorted(Path(package).rglob("*.py")):
        h.update(str(f.relative_to(package)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def snapshot(root: Path, dest: Path) -> Path:
    """A frozen copy of ``root``'s ``jaxrank`` package in ``dest`` (without ``__pycache__``): the folder to put on
    ``PYTHONPATH``, so later edits of ``root`` change no process of this run (see the module docstring)."""
    dest = Path(dest)
    shutil.copytree(Path(root) / "jaxrank", dest / "jaxrank", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def pool(name: str, variant: int):
    """``(i, j, p, weight, n)`` of a pool: NumPy arrays, ``variant`` items/comparisons (or matches) fewer."""
    if name in ("synthetic", "small"):
        n, r = (1000, 5000) if name == "synthetic" else (24, 64)
        n, r = n - variant, r - 3 * variant
        rng = np.random.default_rng(0)
        s = rng.standard_normal(n)
        i = rng.integers(0, n, r)
        j = (i + rng.integers(1, n, r)) % n
        p = 1 / (1 + np.exp(-(s[i] - s[j])))
        return i.astype(np.int32), j.astype(np.int32), p.astype(np.float32), np.ones(r, np.float32), n
    sys.path.insert(0, str(HERE.parent))
    import _data

    a, b, outcome, teams = _data.football()
    keep = len(a) - variant
    i, j, games, won, drawn = _data.counts(a[:keep], b[:keep], outcome[:keep], len(teams))
    return i, j, ((won + drawn / 2) / games).astype(np.float32), games.astype(np.float32), len(teams)


def football_rows(variant: int):
    """The football's match rows (evalica's own input): home, away, outcome 1 / 0.5 / 0."""
    sys.path.insert(0, str(HERE.parent))
    import _data

    a, b, outcome, teams = _data.football()
    keep = len(a) - variant
    return a[:keep], b[:keep], outcome[:keep]


STEADY_CALLS = 5
EVALICA_LIMIT = 100
"""evalica's default cap on iterations (``bradley_terry(limit=100)``): reaching it is no answer."""


def _steady(f) -> float:
    """Median seconds of :data:`STEADY_CALLS` calls of ``f`` after its first."""
    ts = []
    for _ in range(STEADY_CALLS):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


def worker(tool: str, scorer: str, pool_name: str, variant: int, cache: str) -> dict:
    """One fresh process's measurement (printed as JSON by ``--worker``)."""
    t0 = time.perf_counter()
    if tool == "evalica":
        import evalica
        import pandas as pd
        t1 = time.perf_counter()
        if pool_name == "football":
            a, b, outcome = football_rows(variant)
            win = {1.0: evalica.Winner.X, 0.5: evalica.Winner.Draw, 0.0: evalica.Winner.Y}
            xs, ys, ws = pd.Series(a), pd.Series(b), [win[float(o)] for o in outcome]
        else:
            i, j, p, _, _ = pool(pool_name, variant)
            xs, ys = pd.Series(i), pd.Series(j)
            ws = [evalica.Winner.X if q > 0.5 else evalica.Winner.Y if q < 0.5 else evalica.Winner.Draw for q in p]
        t2 = time.perf_counter()
        r = evalica.bradley_terry(xs, ys, ws)
        scores = np.asarray(r.scores)
        t3 = time.perf_counter()
        steady = _steady(lambda: np.asarray(evalica.bradley_terry(xs, ys, ws).scores))
        sys.path.insert(0, str(HERE.parent))
        import _data

        why = _data.no_answer(np.log(scores), int(r.iterations), EVALICA_LIMIT)
        return {"import": t1 - t0, "first": t3 - t2, "steady": steady, "answer": why or "yes"}
    import jax

    import jaxrank as jr
    fn = jr.SCORERS[scorer]                       # the scorer's module is imported here (lazy facade)
    jr.enable_compilation_cache(cache)
    t1 = time.perf_counter()
    events: dict[str, float] = {}
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, secs, **kw: events.__setitem__(name, events.get(name, 0.0) + secs))
    i, j, p, w, n = pool(pool_name, variant)
    t2 = time.perf_counter()
    c = jr.Comparisons.from_pairs(i, j, p, num_items=n, weight=w)
    kw = {"score_prior": 0.1} if pool_name == "football" and scorer == "poe_bradley_terry" else {}
    scipy_before = "scipy.linalg" in sys.modules
    np.asarray(fn(c, **kw))
    t3 = time.perf_counter()
    first_events = {k: events.get(v, 0.0) for k, v in EVENTS.items()}
    first_events["scipy"] = float("scipy.linalg" in sys.modules and not scipy_before)
    steady = _steady(lambda: np.asarray(fn(c, **kw)))
    return {"import": t1 - t0, "first": t3 - t2, "steady": steady, **first_events,
            "source": source_digest(Path(jr.__file__).parent)}


def _run(tool, scorer, pool_name, variant, cache, root, code=None):
    """One worker in a fresh process, importing jaxrank from ``code`` (a :func:`snapshot`; default ``root``),
    in the folder ``root``; with ``code``, a process that imported other source stops the run."""
    code = Path(code) if code is not None else Path(root)
    env = {k: v for k, v in os.environ.items() if k not in ("JAXRANK_CACHE", "JAXRANK_COMPILATION_CACHE")}
    if "JAXRANK_DATA" not in env and (ROOT.parent / "shared" / "data").is_dir():
        env["JAXRANK_DATA"] = str(ROOT.parent / "shared" / "data")     # the football for another checkout too
    env["PYTHONPATH"] = os.pathsep.join([str(code)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, str(HERE), "--worker", tool, scorer, pool_name, str(variant), str(cache)],
                         capture_output=True, text=True, env=env, cwd=root, timeout=900)
    wall = time.perf_counter() - t0
    if run.returncode != 0:
        raise SystemExit(f"worker {tool} {scorer} {pool_name} {variant} failed:\n{run.stderr[-3000:]}")
    out = json.loads([x for x in run.stdout.splitlines() if x.startswith("JSON ")][-1][5:])
    if "source" in out and out["source"] != source_digest(code / "jaxrank"):
        raise SystemExit(f"worker {tool} {scorer} {pool_name} {variant} imported a jaxrank other than {code}")
    return dict(out, process=wall, load=load())


def answer_or(runs, cell):
    """``cell`` (a time) when every run gave an answer, else why not: a peer's non-answer is never timed."""
    why = sorted({r.get("answer", "yes") for r in runs} - {"yes"})
    return "; ".join(why) if why else cell


def _cell(xs, fmt="{:.2f}"):
    xs = np.asarray(xs)
    if len(xs) == 1:
        return fmt.format(xs[0])
    return f"{fmt.format(np.median(xs))} [{fmt.format(xs.min())}-{fmt.format(xs.max())}]"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per scorer, pool and cache state")
    ap.add_argument("--baseline-root", metavar="CHECKOUT", help="another checkout (before a change), side by side")
    ap.add_argument("--pools", default=",".join(POOLS), help="comma-separated pools (default: all)")
    ap.add_argument("--smoke", action="store_true", help="the small pool, two scorers, one process each")
    ap.add_argument("--out", default=None, help="results stem (default results/first_call[_smoke])")
    ap.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        tool, scorer, pool_name, variant, cache = args.worker
        print("JSON " + json.dumps(worker(tool, scorer, pool_name, int(variant), cache)))
        return
    repeats = 1 if args.smoke else args.repeats
    if repeats < 1:
        ap.error("--repeats must be >= 1")
    pools = {"small": ("win_ratio", "poe_bradley_terry")} if args.smoke else \
        {p: POOLS[p] for p in args.pools.split(",")}
    roots = {"after": ROOT}
    if args.baseline_root:
        roots = {"before": Path(args.baseline_root).resolve(), "after": ROOT}
    rep = Report("first_call", smoke=args.smoke, out=args.out)
    rep.say("# The first call of every scorer on a new pool, fresh processes, against evalica")
    rep.say()
    rep.say(f"{machine()}. {repeats} fresh process(es) per scorer, pool and cache state"
            + (f"; before = {roots['before']}" if "before" in roots else "") + ". Command: `python "
            f"benchmarks/first_call.py {' '.join(argv if argv is not None else sys.argv[1:])}`.")
    rep.say()
    tmp = Path(tempfile.mkdtemp(prefix="first_call_"))
    codes = {v: snapshot(r, tmp / f"code-{v}") for v, r in roots.items()}
    rep.say("Every process imports a copy of the checkout's `jaxrank` taken at the start (source digest "
            + ", ".join(f"{v} {source_digest(c / 'jaxrank')[:12]}" for v, c in codes.items())
            + "): edits made during the run change no key.")
    rep.say()
    results = []
    for pool_name, scorers in pools.items():
        ev = [_run("evalica", "bradley_terry", pool_name, k + 1, "-", ROOT) for k in range(repeats)]
        results.append(("evalica", "bradley_terry", pool_name, "fresh process", ev))
        for scorer in scorers:
            caches = {v: tmp / f"{v}-{pool_name}-{scorer}" / "xla" for v in roots}
            cold = {v: [_run("jaxrank", scorer, pool_name, 0, caches[v], r, codes[v])] for v, r in roots.items()}
            warm = {v: [] for v in roots}
            for k in range(repeats):                    # before and after take turns: the same load
                for v, r in roots.items():
                    warm[v].append(_run("jaxrank", scorer, pool_name, k + 1, caches[v], r, codes[v]))
            for v in roots:
                results.append((v, scorer, pool_name, "cold cache", cold[v]))
                results.append((v, scorer, pool_name, "warm cache, new size", warm[v]))
            print(f"  {pool_name} {scorer} done (load {load():.1f})", flush=True)
    header = ["code", "scorer", "pool", "cache", "first call (s)", "import (s)", "process (s)", "trace (s)",
              "lower (s)", "compile or load (s)", "SciPy imported", "steady (ms), median of 5 calls", "answer",
              "load"]
    rows = []
    for code, scorer, pool_name, cache, runs in results:
        get = lambda k: [r.get(k, 0.0) for r in runs]
        rows.append([code, scorer, pool_name, cache, answer_or(runs, _cell(get("first"))), _cell(get("import")),
                     _cell(get("process")), _cell(get("trace")), _cell(get("lower")), _cell(get("compile")),
                     f"{int(sum(get('scipy')))}/{len(runs)}",
                     answer_or(runs, _cell(np.asarray(get("steady")) * 1e3, "{:.1f}")),
                     "; ".join(sorted({r.get("answer", "yes") for r in runs})), _cell(get("load"), "{:.1f}")])
        for k, r in enumerate(runs):
            rep.row(code=code, scorer=scorer, pool=pool_name, cache=cache, process_index=k,
                    **{key: (val if isinstance(val, str) else float(val)) for key, val in r.items()})
    rep.table(header, rows)
    if "before" in roots:
        rep.say("First call on a new size with a warm cache, median seconds (before -> after, and the ratio):")
        rep.say()
        table = []
        for pool_name, scorers in pools.items():
            ev = next(r for c, s, p, _, r in results if c == "evalica" and p == pool_name)
            for scorer in scorers:
                med = {c: np.median([x["first"] for x in r]) for c, s, p, cache, r in results
                       if s == scorer and p == pool_name and cache == "warm cache, new size"}
                table.append([scorer, pool_name, f"{med['before']:.2f}", f"{med['after']:.2f}",
                              f"{med['before'] / med['after']:.1f}x",
                              answer_or(ev, f"{np.median([x['first'] for x in ev]):.3f}")])
        rep.table(["scorer", "pool", "before (s)", "after (s)", "faster", "evalica first call (s)"], table)
    rep.write()


if __name__ == "__main__":
    main()
