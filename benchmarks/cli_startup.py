"""Whole-process timings of the command line on a small file, against a Python script doing the same with evalica.

Each command runs as a fresh process (as a user calling the command line many
times would), the commands taking turns within every repeat so that a change
of the machine's load falls on all of them alike:

* ``python -c pass`` and ``python -c "import jax"``: the floor;
* ``jaxrank --help`` (the console script's own two lines, ``from jaxrank.cli
  import main; sys.exit(main())``, with this checkout first on the path);
* ``jaxrank rank small.csv -o scores.csv`` (PoE-BT with Laplace standard errors,
  the default) and ``--method bradley_terry`` (the same job as the baseline),
  each with an empty compilation cache (``JAXRANK_CACHE`` pointed at a fresh
  folder: every program compiled) and with a warm one (the folder of an earlier
  run: every program loaded);
* the baseline: ``pandas.read_csv``, ``evalica.bradley_terry`` (its Rust
  solver, the default and fastest), the scores written with ``to_csv``.

``small.csv`` is 4 comparisons of 3 items in evalica's own ``left,right,winner``
layout, read by both without options. Reported: median and range over the
repeats, the load average before and after, and the ratios jaxrank / evalica.
A second part times, inside one process with a warm cache, where ``jaxrank
rank``'s time goes (imports, reading, JAX tracing, lowering, cache retrieval),
from JAX's own monitoring events.

With ``--baseline-root`` another checkout's ``--help`` and cold and warm ``rank``
take their turns too (before/after a change, side by side).

    python benchmarks/cli_startup.py [--repeats 7] [--rows 4] [--smoke] [--baseline-root ../main]
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

from _report import load_line as _load, write_results  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parent.parent
SMALL = "left,right,winner\nx,y,left\ny,z,left\nz,x,right\nx,z,tie\n"
CONSOLE = "import sys; from jaxrank.cli import main; sys.exit(main())"
EVALICA = """
import sys
import evalica
import pandas as pd
df = pd.read_csv(sys.argv[1], dtype=str)
winners = df["winner"].str.lower().map({"left": evalica.Winner.X, "right": evalica.Winner.Y, "tie": evalica.Winner.Draw})
result = evalica.bradley_terry(df["left"], df["right"], winners)
result.scores.rename("score").to_csv(sys.argv[2])
"""


def small_file(rows: int) -> str:
    """The small input: :data:`SMALL` (4 rows), or ``rows`` random rows among 8 items (seed 0)."""
    if rows == 4:
        return SMALL
    import random

    rng = random.Random(0)
    names = [f"m{k}" for k in range(8)]
    out = ["left,right,winner"]
    for _ in range(rows):
        a, b = rng.sample(names, 2)
        out.append(f"{a},{b},{rng.choice(['left', 'right', 'left', 'tie'])}")
    return "\n".join(out) + "\n"


def _timed(argv, env, cwd):
    t0 = time.perf_counter()
    run = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    dt = time.perf_counter() - t0
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({run.returncode}):\n{run.stderr[-2000:]}")
    return dt


def breakdown_worker(small: str, out: str) -> dict:
    """One warm-cache ``jaxrank rank`` inside this process: where the time goes (JAX's monitoring events)."""
    t0 = time.perf_counter()
    import numpy  # noqa: F401
    t1 = time.perf_counter()
    import jax
    t2 = time.perf_counter()
    import jaxrank.cli
    t3 = time.perf_counter()
    events: dict[str, float] = {}
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, secs, **kw: events.__setitem__(name, events.get(name, 0.0) + secs))
    jaxrank.cli.main(["rank", small, "-o", out])
    t4 = time.perf_counter()
    pick = {"trace to jaxpr": "/jax/core/compile/jaxpr_trace_duration",
            "lower to MLIR": "/jax/core/compile/jaxpr_to_mlir_module_duration",
            "compile or load (backend)": "/jax/core/compile/backend_compile_duration",
            "  of which cache retrieval": "/jax/compilation_cache/cache_retrieval_time_sec"}
    return {"import numpy": t1 - t0, "import jax": t2 - t1, "import jaxrank.cli": t3 - t2, "main(rank)": t4 - t3,
            **{k: events.get(v, 0.0) for k, v in pick.items()}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7, help="fresh processes per command (default 7)")
    ap.add_argument("--smoke", action="store_true", help="one repeat, no breakdown: checks the script runs")
    ap.add_argument("--baseline-root", metavar="CHECKOUT",
                    help="another jaxrank checkout (e.g. the main branch) whose --help and warm rank run alongside")
    ap.add_argument("--breakdown-worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help="markdown report (default results/cli_startup[_smoke].md)")
    ap.add_argument("--rows", type=int, default=4,
                    help="comparisons in the small file (default 4: the 4 rows below; more: random rows among "
                         "8 items, seed 0)")
    args = ap.parse_args(argv)
    if args.breakdown_worker:
        print("JSON " + json.dumps(breakdown_worker(*args.breakdown_worker)))
        return
    import numpy as np  # not at the top: the breakdown worker times its import
    repeats = 1 if args.smoke else args.repeats
    if repeats < 1:
        ap.error("--repeats must be >= 1")
    out_md = Path(args.out or Path(__file__).parent / "results" / f"cli_startup{'_smoke' if args.smoke else ''}.md")

    tmp = Path(tempfile.mkdtemp(prefix="cli_startup_"))
    small = tmp / "small.csv"
    small.write_text(small_file(args.rows))
    py = sys.executable
    base = {k: v for k, v in os.environ.items() if k not in ("JAXRANK_CACHE", "JAXRANK_COMPILATION_CACHE")}
    base["PYTHONPATH"] = str(ROOT) + (os.pathsep + base["PYTHONPATH"] if base.get("PYTHONPATH") else "")
    warm_cache = tmp / "warm"
    rank = [py, "-c", CONSOLE, "rank", str(small), "-o", str(tmp / "scores.csv")]
    commands = {
        "python -c pass": ([py, "-c", "pass"], None),
        'python -c "import jax"': ([py, "-c", "import jax"], None),
        "jaxrank --help": ([py, "-c", CONSOLE, "--help"], None),
        "jaxrank rank, cold cache": (rank, "cold"),
        "jaxrank rank, warm cache": (rank, "warm"),
        "jaxrank rank --method bradley_terry, cold cache": (rank + ["--method", "bradley_terry"], "cold"),
        "jaxrank rank --method bradley_terry, warm cache": (rank + ["--method", "bradley_terry"], "warm"),
        "evalica script (pandas read, bradley_terry, to_csv)": ([py, "-c", EVALICA, str(small), str(tmp / "ev.csv")],
                                                                None),
    }
    roots = {name: ROOT for name in commands}
    if args.baseline_root:
        other = Path(args.baseline_root).resolve()
        ours = tmp / "small_ours.csv"  # the same comparisons in the layout every version reads
        ours.write_text(small_file(args.rows).replace("left,right,winner", "item_a,item_b,outcome")
                        .replace(",left\n", ",win\n").replace(",right\n", ",loss\n"))
        rank_ours = [py, "-c", CONSOLE, "rank", str(ours), "-o", str(tmp / "scores_ours.csv")]
        for name, cmd, cache in (("jaxrank --help", [py, "-c", CONSOLE, "--help"], None),
                                 ("jaxrank rank, cold cache", rank_ours, "cold"),
                                 ("jaxrank rank, warm cache", rank_ours, "warm")):
            commands[f"{name} [{other.name} checkout]"] = (cmd, cache)
            roots[f"{name} [{other.name} checkout]"] = other
    env_of = {}
    for name in commands:
        pp = base.get("PYTHONPATH", "").split(os.pathsep, 1)
        env_of[name] = dict(base, PYTHONPATH=os.pathsep.join([str(roots[name])] + pp[1:]))
    # warm the cache (and the OS file cache) once, untimed
    for name, (cmd, cache) in commands.items():
        if cache == "warm" or not args.smoke:
            _timed(cmd, dict(env_of[name], JAXRANK_CACHE=str(warm_cache)), roots[name])
    times = {name: [] for name in commands}
    load_before = _load()
    for rep in range(repeats):
        for name, (cmd, cache) in commands.items():
            env = dict(env_of[name])
            if cache == "cold":
                env["JAXRANK_CACHE"] = tempfile.mkdtemp(prefix="cold_", dir=tmp)
            else:
                env["JAXRANK_CACHE"] = str(warm_cache)
            times[name].append(_timed(cmd, env, roots[name]))
        print(f"  repeat {rep + 1}/{repeats} done (load {_load()})", flush=True)
    load_after = _load()

    med = {k: float(np.median(v)) for k, v in times.items()}
    import jax

    lines = [f"# `jaxrank` start-up and a small `rank`, whole processes, against evalica", "",
             f"Python {sys.version.split()[0]}, jax {jax.__version__}, {os.cpu_count()} CPU cores; "
             f"{repeats} fresh process(es) per command, commands taking turns; load average (1, 5, 15 min) "
             f"{load_before} before, {load_after} after. Input: "
             + ("4 comparisons of 3 items" if args.rows == 4 else f"{args.rows} comparisons of 8 items (seed 0)")
             + " (`left,right,winner`, read by both without options). Command: `python benchmarks/cli_startup.py "
             + " ".join(argv if argv is not None else sys.argv[1:]) + "`.", "",
             "| command | median (s) | min - max (s) | vs `python -c pass` |", "|---|---:|---:|---:|"]
    for name, v in times.items():
        lines.append(f"| {name} | {med[name]:.2f} | {min(v):.2f} - {max(v):.2f} | {med[name] / med['python -c pass']:.0f}x |")
    ev = med["evalica script (pandas read, bradley_terry, to_csv)"]
    jx = med['python -c "import jax"']
    lines += ["", "Ratios of medians, jaxrank / evalica script (below 1: jaxrank faster):", "",
              "| jaxrank command | cold cache | warm cache | warm minus `import jax` process |",
              "|---|---:|---:|---:|"]
    for label, stem in (("`rank` (PoE-BT + Laplace s.e.)", "jaxrank rank"),
                        ("`rank --method bradley_terry`", "jaxrank rank --method bradley_terry")):
        cold, warm = med[f"{stem}, cold cache"], med[f"{stem}, warm cache"]
        lines.append(f"| {label} | {cold / ev:.2f}x | {warm / ev:.2f}x | {warm - jx:+.2f} s |")
    lines += ["", f"`jaxrank --help`: {med['jaxrank --help']:.2f} s, "
              f"{med['jaxrank --help'] / jx:.2f}x of a bare `import jax` process."]
    if args.baseline_root:
        tag = f" [{Path(args.baseline_root).resolve().name} checkout]"
        for name in ("jaxrank --help", "jaxrank rank, cold cache", "jaxrank rank, warm cache"):
            lines.append(f"`{name}`: {med[name + tag]:.2f} s in the {tag[2:-1]} against {med[name]:.2f} s here "
                         f"({med[name + tag] / med[name]:.1f}x faster here; {med[name + tag] / ev:.2f}x and "
                         f"{med[name] / ev:.2f}x the evalica script).")

    if not args.smoke:
        parts = []
        for _ in range(min(repeats, 5)):
            run = subprocess.run([py, __file__, "--breakdown-worker", str(small), str(tmp / "bd.csv")],
                                 capture_output=True, text=True, cwd=ROOT, timeout=600,
                                 env=dict(base, JAXRANK_CACHE=str(warm_cache)))
            if run.returncode != 0:
                raise SystemExit(f"breakdown worker failed:\n{run.stderr[-2000:]}")
            parts.append(json.loads([x for x in run.stdout.splitlines() if x.startswith("JSON ")][-1][5:]))
        lines += ["", f"## Where a warm `jaxrank rank` spends its time (inside one process, median of {len(parts)}; "
                  f"load {_load()})", "", "| phase | median (s) |", "|---|---:|"]
        lines += [f"| {k} | {np.median([p[k] for p in parts]):.3f} |" for k in parts[0]]
    text = "\n".join(lines)
    print(text)
    write_results(out_md.with_suffix(""), lines)


if __name__ == "__main__":
    main()
