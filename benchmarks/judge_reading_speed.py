"""PromptJudge speed before and after the judge read the model's answer (whole-text tokens, full-vocabulary
label continuations, label mass), in alternating fresh processes.

Each process imports jaxrank from one source tree (``--old TREE``: a checkout of the commit before the
change, e.g. ``git worktree add /tmp/old 32614d3``; the new one is this checkout), loads SmolLM2-135M,
judges one SummEval article's ordered comparisons once (compilation) and then ``--calls`` more times
(steady state), and reports comparisons per second of each steady call. The old and the new code run
in turn, ``--rounds`` times, each round with the machine's load; reported are the median rate per side,
its range, and the per-round ratio new / old. The new code runs twice per round: with the template as it
is (the same prompt as the old code) and with the answer prefix "Summary" (one more token per row).
Writes ``benchmarks/results/judge_reading_speed.md``.

    python benchmarks/judge_reading_speed.py --old /tmp/old [--candidates 8] [--rounds 3] [--calls 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def child(args):
    """One process: steady comparisons per second of the tree it imports from (``--tree``)."""
    sys.path.insert(0, args.tree)             # ahead of the editable install's own finder, which is dropped
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__name__.lower()]
    import jaxrank
    from jaxrank.assessment.run import contexts_of
    from jaxrank.data import load_dataset
    from jaxrank.judges.pairwise import PromptJudge
    from jaxrank.judges.prompts import pairwise_template
    from jaxrank.models import load_model

    cs = contexts_of(load_dataset("summeval"), aspect="coherence", contexts=[0], max_candidates=args.candidates)
    n = len(cs.candidates[0])
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    kw = {} if args.prefix is None else {"answer_prefix": args.prefix, "min_label_mass": 0.0}
    judge = PromptJudge(load_model("smollm2-135m"), pairwise_template("summeval", "coherence"), **kw)
    t0 = time.perf_counter()
    judge.compare(cs.texts[0], cs.candidates[0], i, j)
    first = time.perf_counter() - t0
    rates = []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        judge.compare(cs.texts[0], cs.candidates[0], i, j)
        rates.append(len(i) / (time.perf_counter() - t0))
    print(json.dumps({"tree": str(Path(jaxrank.__file__).resolve().parents[1]), "first_s": first,
                      "rate": float(np.median(rates)), "comparisons": int(len(i))}))


def run_side(tree: Path, args, prefix=None) -> dict:
    env = dict(os.environ, JAXRANK_COMPILATION_CACHE="0")
    cmd = [sys.executable, __file__, "--child", "--tree", str(tree.resolve()), "--candidates", str(args.candidates),
           "--calls", str(args.calls)]
    if prefix is not None:
        cmd += ["--prefix", prefix]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    if Path(res["tree"]) != tree.resolve():
        raise SystemExit(f"the child imported jaxrank from {res['tree']}, not {tree}")
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", default=None, help="source tree of the old code (a git worktree)")
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=2)
    ap.add_argument("--prefix", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--tree", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=str(HERE / "results" / "judge_reading_speed.md"))
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    if not args.old:
        raise SystemExit("--old TREE is required (a checkout of the code before the change)")
    new, old = HERE.parent, Path(args.old)
    sides = {"old": (old, None), "new": (new, None), "new, prefix 'Summary'": (new, "Summary")}
    rates = {k: [] for k in sides}
    firsts = {k: [] for k in sides}
    loads = []
    for r in range(args.rounds):
        loads.append("%.2f" % os.getloadavg()[0])
        for name, (tree, prefix) in sides.items():
            res = run_side(tree, args, prefix)
            rates[name].append(res["rate"])
            firsts[name].append(res["first_s"])
            print(f"round {r + 1}: {name} {res['rate']:.2f} cmp/s (first call {res['first_s']:.1f} s)", flush=True)
    loads.append("%.2f" % os.getloadavg()[0])
    ncmp = args.candidates * (args.candidates - 1)
    lines = ["# PromptJudge speed before and after reading the model's answer", "",
             f"SmolLM2-135M (float32), SummEval article A0, {args.candidates} candidates ({ncmp} ordered "
             f"comparisons per call), {args.rounds} rounds of fresh processes in turn (old, new, new with the "
             f"answer prefix), each one first call (compilation) and {args.calls} steady calls (median rate); "
             f"load average (1 min) before each round and at the end: {', '.join(loads)}.", "",
             "| side | comparisons / s, median [min, max] | ratio to old, median [min, max] | first call s, median |",
             "|---|---|---|---|"]
    for name in sides:
        x = np.array(rates[name])
        ratio = x / np.array(rates["old"])
        lines.append(f"| {name} | {np.median(x):.2f} [{x.min():.2f}, {x.max():.2f}] | {np.median(ratio):.3f} "
                     f"[{ratio.min():.3f}, {ratio.max():.3f}] | {np.median(firsts[name]):.1f} |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
