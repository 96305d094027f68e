"""The main job's judging time (``jaxrank assess`` with its default judge), before and after, and where it goes.

The main job judges SummEval relevance, all 100 articles x 16 summaries, every ordered pair
(24,000 comparisons of 1,648 distinct texts), with the MiniLM-L6 similarity judge. This script
times its judging step, :func:`jaxrank.assessment.judge_contexts` as ``jaxrank assess`` calls it
(the judge made as the command line makes it, ``SimilarityJudge(model, batch_size=8)``, a fresh
store, no progress bar), for two copies of jaxrank side by side:

* ``before``: a checkout of the old code (``git worktree add /tmp/mj-before COMMIT``), given as
  ``--before /tmp/mj-before``;
* ``after``: the jaxrank this script sits in (``--after``, default the repository root).

Each timed run is a fresh Python process (``python benchmarks/main_job_speed.py --worker ROOT``
imports jaxrank from ``ROOT``): it loads the data and the model (not timed), then times
``judge_contexts`` into an empty store in a temporary folder, with no persistent compilation cache
(a first run: every shape compiles, as on a user's first ``jaxrank assess``). Beside the wall time,
the process's CPU seconds (all its threads): on a shared machine the wall time is mostly the share
of the cores the run gets. The two sides run interleaved, ``--repeats`` rounds, each with the load
average at its end; reported are the median and the range. Every run's judgements are compared
with the first ``before`` run's: the largest ``|p_after - p_before|`` over the same keys, and
whether the store keys are the same. Each side's encoder statistics (texts, passes, shapes, tokens with and
without padding) and the number of programs its encoder compiled (one per shape).

A further run of each side under ``cProfile`` splits the judging time into parts (the profiler
slows Python-heavy parts, so the parts are shares of a profiled run, not of the timed ones):
XLA compilation, JAX tracing and dispatch, the encoder's compute (waiting for results),
tokenising, per-comparison Python (records), store writes, planning the comparisons and
building keys, and reading the store back.

    python benchmarks/main_job_speed.py --before /tmp/mj-before [--repeats 3] [--contexts 0:100] [--smoke]

``--smoke``: 2 articles x 4 summaries, one round; writes ``results/main_job_speed_smoke.{md,csv}``.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))


def _parts(stats) -> dict:
    """Seconds per part of a profiled judging run (pstats of ``judge_contexts``)."""

    def find(pred, field):
        out = 0.0
        for (path, _line, fn), (_cc, _nc, tt, ct, _callers) in stats.stats.items():
            if pred(path.replace(os.sep, "/"), fn):
                out += tt if field == "tt" else ct
        return out

    cum = lambda tail, fn: find(lambda p, f: p.endswith(tail) and f == fn, "ct")   # noqa: E731
    total = cum("assessment/run.py", "judge_contexts")
    compile_s = find(lambda p, f: p.endswith("jax/_src/compiler.py") and f == "backend_compile_and_load", "tt")
    wait_s = find(lambda p, f: p == "~" and f == "<built-in method numpy.asarray>", "tt")
    tokenize = cum("judges/similarity.py", "_tokens")
    chunk = cum("assessment/run.py", "judge_chunk")
    compare = cum("judges/similarity.py", "compare")
    append = cum("assessment/store.py", "append")
    prefetch = cum("judges/similarity.py", "prefetch")
    read = cum("assessment/store.py", "comparisons")
    # the embedding: before, inside compare (SimilarityJudge.embed); after, in prefetch
    embedding = cum("judges/similarity.py", "_encode_missing") or cum("judges/similarity.py", "embed")
    parts = {
        "XLA compilation": compile_s,
        "encoder compute (waiting for results)": wait_s,
        "JAX tracing, lowering and dispatch (Python)": embedding - compile_s - wait_s - tokenize,
        "tokenising": tokenize,
        "cosines and p (judge, after embedding)": compare - (embedding - prefetch if prefetch else embedding),
        "records of comparisons (Python per comparison)": chunk - compare - append,
        "store writes (JSON lines, lock, fsync)": append,
        "planning, keys and hashes (before judging)": total - chunk - prefetch - read,
        "reading the store back": read,
    }
    parts["total (profiled)"] = total
    return parts


def worker(root: str, out: str, contexts: str, candidates: int | None, profile: bool) -> None:
    """One timed (or profiled) judging run of the jaxrank at ``root``; writes a JSON summary to ``out``."""
    sys.path.insert(0, root)
    import jaxrank
    from jaxrank.assessment.run import contexts_of, judge_contexts
    from jaxrank.data import load_dataset
    from jaxrank.judges.similarity import SimilarityJudge
    from jaxrank.models.loading import load_model

    assert Path(jaxrank.__file__).resolve().is_relative_to(Path(root).resolve()), jaxrank.__file__
    cs = contexts_of(load_dataset("summeval"), aspect="relevance", contexts=contexts, max_candidates=candidates)
    judge = SimilarityJudge(load_model("minilm-l6"), batch_size=8)      # as jaxrank assess makes it
    judge.fingerprint                                                    # the model's fingerprint is cached
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store.jsonl"
        prof = None
        if profile:
            import cProfile

            prof = cProfile.Profile()
            prof.enable()
        import warnings

        t0, c0 = time.perf_counter(), time.process_time()

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            judge_contexts(judge, cs, store, progress=False)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        if prof is not None:
            prof.disable()
        recs = [json.loads(line) for line in store.read_text().splitlines() if line.strip()]
    keys = {"|".join(str(r[f]) for f in ("judge", "template", "context", "a", "b", "fingerprint", "context_sha",
                                         "a_sha", "b_sha")): r["p"] for r in recs}
    summary = {"seconds": seconds, "cpu_seconds": cpu, "load": os.getloadavg()[0], "comparisons": len(recs),
               "texts": len(set(cs.texts) | {t for c in cs.candidates for t in c}), "p": keys,
               "jaxrank": str(Path(jaxrank.__file__).parent)}
    stats = getattr(judge, "stats", None)
    if stats is not None:
        summary["compiled"] = len(stats.shapes)     # one program per shape (tests/test_packing.py: the jit cache)
        summary["encoder"] = {"texts": stats.texts, "passes": stats.passes, "tokens": stats.tokens,
                              "padded_tokens": stats.padded_tokens, "shapes": sorted(stats.shapes),
                              "tokenize_s": stats.tokenize_s, "dispatch_s": stats.dispatch_s,
                              "wait_s": stats.wait_s}
    if prof is not None:
        import pstats

        summary["parts"] = _parts(pstats.Stats(prof))
    Path(out).write_text(json.dumps(summary))


def run_side(root: str, args, profile: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        cmd = [sys.executable, __file__, "--worker", root, "--worker-out", str(out), "--contexts", args.contexts]
        if args.candidates:
            cmd += ["--candidates", str(args.candidates)]
        if profile:
            cmd.append("--profile")
        env = dict(os.environ, JAXRANK_COMPILATION_CACHE="0", JAX_ENABLE_COMPILATION_CACHE="false")
        subprocess.run(cmd, check=True, env=env)
        return json.loads(out.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default="/tmp/mj-before", help="root of the old checkout (git worktree add)")
    ap.add_argument("--after", default=str(ROOT), help="root of the new code (default: this repository)")
    ap.add_argument("--contexts", default="0:100", help="SummEval articles (positions), as jaxrank assess --contexts")
    ap.add_argument("--candidates", type=int, default=None, help="summaries per article (default all 16)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-profile", action="store_true", help="leave out the profiled runs (the breakdown)")
    ap.add_argument("--smoke", action="store_true", help="2 articles x 4 summaries, one round")
    ap.add_argument("--out", default=None)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.worker_out, args.contexts, args.candidates, args.profile)
        return
    if args.smoke:
        args.contexts, args.candidates, args.repeats = "0:2", 4, 1
    if not Path(args.before, "jaxrank").is_dir():
        raise SystemExit(f"--before {args.before}: no jaxrank there; make it with "
                         f"git worktree add {args.before} <commit before the change>")

    from _report import Report, machine, spread

    def commit(root):
        r = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "jaxrank"], capture_output=True,
                               text=True).stdout.strip()
        return (r.stdout.strip() or "?") + (" + uncommitted changes" if dirty else "")

    rep = Report("main_job_speed", smoke=args.smoke, out=args.out)
    sides = {"before": args.before, "after": args.after}
    rep.say("# The main job's judging time, before and after (benchmarks/main_job_speed.py)")
    rep.say()
    rep.say(f"`judge_contexts` of SummEval relevance, articles `{args.contexts}`, "
            f"{args.candidates or 'all 16'} summaries each, every ordered pair, MiniLM-L6 similarity judge "
            "(batch size 8, as `jaxrank assess` makes it), into a fresh store; a fresh process per run, no "
            "persistent compilation cache (every shape compiles). Model and data loading are not timed.")
    rep.say()
    rep.say(f"- before: `{args.before}` (commit {commit(args.before)})")
    rep.say(f"- after: `{args.after}` (commit {commit(args.after)})")
    rep.say(f"- {machine()}")
    rep.say()

    runs = {k: [] for k in sides}
    for r in range(args.repeats):
        for name, root in sides.items():
            res = run_side(root, args)
            runs[name].append(res)
            print(f"round {r + 1} {name}: {res['seconds']:.1f} s, load {res['load']:.2f}", flush=True)
            rep.row(part="timed", side=name, round=r + 1, seconds=res["seconds"], cpu_seconds=res["cpu_seconds"],
                    load=res["load"],
                    comparisons=res["comparisons"], rate=res["comparisons"] / res["seconds"])

    ref = runs["before"][0]["p"]
    rows = []
    for name in sides:
        ts = [x["seconds"] for x in runs[name]]
        loads = [x["load"] for x in runs[name]]
        n = runs[name][0]["comparisons"]
        same_keys = all(set(x["p"]) == set(ref) for x in runs[name])
        dp = max(max(abs(x["p"][k] - ref[k]) for k in ref) for x in runs[name]) if same_keys else float("nan")
        cpus = [x["cpu_seconds"] for x in runs[name]]
        rows.append([name, f"{spread(ts, fmt='{:.1f}')}", spread(cpus, fmt="{:.1f}"),
                     spread([n / t for t in ts], fmt="{:.0f}"),
                     f"{min(loads):.1f}-{max(loads):.1f}", n, runs[name][0]["texts"],
                     "yes" if same_keys else "NO", f"{dp:.1e}"])
        rep.row(part="summary", side=name, seconds_median=float(np.median(ts)), seconds_min=min(ts),
                seconds_max=max(ts), rate_median=float(np.median([n / t for t in ts])), comparisons=n,
                same_keys=same_keys, max_abs_dp=dp)
    rep.table(["side", "judging s, median [range]", "CPU s of the process", "comparisons/s", "load (1 min)", "comparisons",
               "distinct texts", "same store keys as before", "max abs p - p_before"], rows)
    tb = [x["seconds"] for x in runs["before"]]
    ta = [x["seconds"] for x in runs["after"]]
    ratios = [b / a for b, a in zip(tb, ta)]
    rep.say(f"Speed-up before / after, per round: {spread(ratios, fmt='{:.1f}')}x.")
    rep.say()

    for name in sides:
        enc = runs[name][0].get("encoder")
        if not enc:
            continue
        rep.say(f"{name.capitalize()}, the encoder (first round): {enc['texts']} texts in {enc['passes']} passes of "
                f"{len(enc['shapes'])} shapes (rows x length: "
                f"{', '.join(f'{a}x{b}' for a, b in enc['shapes'])}); {enc['tokens']:,} tokens, "
                f"{enc['padded_tokens']:,} with padding ({enc['padded_tokens'] / max(enc['tokens'], 1) - 1:.0%} "
                f"more); tokenising {enc['tokenize_s']:.1f} s, dispatch (tracing and compiling) "
                f"{enc['dispatch_s']:.1f} s, waiting for the encoder {enc['wait_s']:.1f} s.")
        rep.say()
    for name in sides:
        if "compiled" in runs[name][0]:
            rep.say(f"- {name}: the encoder compiled {runs[name][0]['compiled']} program(s) "
                    f"(one per (rows, length) shape; tests/test_packing.py checks one compile per shape with the jit cache)")
    rep.say()

    if not args.no_profile:
        prof = {name: run_side(root, args, profile=True) for name, root in sides.items()}
        names = list(prof["before"]["parts"])
        rep.say("Where the judging time goes (one run of each side under cProfile, seconds; the profiler "
                "slows Python-heavy parts):")
        rep.say()
        trows = []
        for part in names:
            b, a = prof["before"]["parts"][part], prof["after"]["parts"][part]
            trows.append([part, f"{b:.1f}", f"{a:.1f}"])
            rep.row(part="profile", name=part, before_s=b, after_s=a)
        trows.append(["load (1 min) at the end", f"{prof['before']['load']:.1f}", f"{prof['after']['load']:.1f}"])
        rep.table(["part", "before, s", "after, s"], trows)
    rep.write()


if __name__ == "__main__":
    main()
