"""XLA:CPU compiler options for jaxrank's programs: compile time and run time, against XLA's defaults.

``--options`` (a JSON dict of XLA debug options, default LLVM optimisation
level 1) is measured against XLA's defaults on the programs of the PoE protocol
(10,000 contexts of 16 items and 48 comparisons: the soft-BT Newton solver,
PoE-g, the counting scorers, Spearman) and on a 1056-item soft-BT pool (26,000
comparisons). jaxrank compiles with XLA's defaults: level 1 measured 0.99x-1.11x
the compile time and 0.66x-1.18x the run time over three runs of this script
(``results/compile_options.md``), although single in-process comparisons had
suggested 15% less compilation.

A compilation in a process that has already compiled something is faster
(warm caches in XLA and LLVM), so every (options, repeat) pair runs in its own
fresh process, the two settings alternating; each process lowers every program
once, compiles it with its setting and times 5 runs. Reported: medians over
``--repeats`` processes, and the ratio default / jaxrank.

    python benchmarks/compile_options.py [--repeats 3] [--options '{"xla_backend_optimization_level": 1}']
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def worker(options: dict) -> dict:
    import jax
    import jax.numpy as jnp

    import jaxrank as jr
    from jaxrank import metrics
    from jaxrank.scoring import counting, gaussian, soft_bt
    rng = np.random.default_rng(0)

    def problem(b, r, n):
        i = rng.integers(0, n, (b, r)); j = (i + rng.integers(1, n, (b, r))) % n
        s = rng.normal(size=(b, n))
        p = 1 / (1 + np.exp(-(np.take_along_axis(s, i, 1) - np.take_along_axis(s, j, 1))))
        return jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n), s.astype(np.float32)

    small, s_small = problem(10_000, 48, 16)
    large, _ = problem(1, 26_000, 1056)
    st = soft_bt._traced(np.float32, 1e-6, 1e-6, 0.0, 1e-5, 100)
    programs = {
        "soft-BT solver, 10,000 x 16": (soft_bt._fit, (small, st), dict(mode="off")),
        "PoE-g, 10,000 x 16": (gaussian._solve, (small, False, False, 1.0), dict(with_cov=False)),
        "win ratio / avg. prob., 10,000 x 16": (counting._counting, (small, 0.5, True), {}),
        "Spearman, 10,000 x 16": (metrics.spearman, (s_small, s_small[:, ::-1].copy()), {}),
        "soft-BT solver, 1 x 1056": (soft_bt._fit, (large, st), dict(mode="off")),
    }
    jnp.zeros(1).block_until_ready()
    out = {}
    for name, (fn, args, kw) in programs.items():
        lowered = fn.lower(*args, **kw)
        t0 = time.perf_counter()
        exe = lowered.compile(compiler_options=options) if options else lowered.compile()
        t_compile = time.perf_counter() - t0
        jax.block_until_ready(exe(*args))
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            jax.block_until_ready(exe(*args))
            runs.append(time.perf_counter() - t0)
        out[name] = dict(compile=t_compile, run=float(np.median(runs)))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per setting (default 3)")
    ap.add_argument("--options", default='{"xla_backend_optimization_level": 1}',
                    help="JSON dict of XLA options to compare with the defaults")
    ap.add_argument("--worker", metavar="JSON", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "compile_options.md"))
    args = ap.parse_args(argv)
    if args.worker is not None:
        print("JSON " + json.dumps(worker(json.loads(args.worker))))
        return
    options = json.loads(args.options)
    if not isinstance(options, dict):
        ap.error("--options must be a JSON object")
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    env = dict(__import__("os").environ, JAXRANK_COMPILATION_CACHE="0")
    results = {"default": [], "options": []}
    settings = {"default": {}, "options": options}
    for rep in range(args.repeats):
        for setting in (("default", "options") if rep % 2 == 0 else ("options", "default")):
            run = subprocess.run([sys.executable, __file__, "--worker", json.dumps(settings[setting])],
                                 capture_output=True, text=True, env=env, timeout=900)
            if run.returncode != 0:
                raise SystemExit(f"worker failed:\n{run.stderr}")
            line = [x for x in run.stdout.splitlines() if x.startswith("JSON ")][-1]
            results[setting].append(json.loads(line[5:]))
            print(f"  repeat {rep + 1}, {setting}: done", flush=True)

    import jax

    med = lambda setting, name, key: float(np.median([r[name][key] for r in results[setting]]))
    lines = [f"# XLA:CPU compiler options: XLA defaults vs {options}", "",
             f"jax {jax.__version__}; medians over {args.repeats} fresh processes per setting.", "",
             "| program | compile default (s) | compile options (s) | ratio | run default (s) | run options (s) | ratio |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    tot = {"default": 0.0, "options": 0.0}
    for name in results["default"][0]:
        cd, cj = med("default", name, "compile"), med("options", name, "compile")
        rd, rj = med("default", name, "run"), med("options", name, "run")
        tot["default"] += cd
        tot["options"] += cj
        lines.append(f"| {name} | {cd:.3f} | {cj:.3f} | {cd / cj:.2f}x | {rd:.4f} | {rj:.4f} | {rd / rj:.2f}x |")
    lines += ["", f"Compilation over all programs: {tot['default']:.2f} s default, {tot['options']:.2f} s with the "
              f"options ({tot['default'] / tot['options']:.2f}x)."]
    text = "\n".join(lines)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
