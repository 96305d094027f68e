"""A long, resumable judging run: every ordered comparison of SummEval contexts, one context at a time.

Judges all ``N(N-1)`` ordered comparisons (both orders) of each context in
turn with a registered LLM judge (:class:`~jaxrank.judges.PromptJudge`, the
prefix-cached batched path) into a :class:`~jaxrank.assessment.store.JudgementStore`,
stopping before a context it would not finish by ``--until`` (UTC, ``HH:MM``).
A later run with the same arguments skips what the store already holds and
goes on with the next contexts. At the end it prints the positional bias
``P(A)`` (mean ``p`` over the judged comparisons) and the pairwise accuracy
against the human scores (ties left out) over everything in the store.

    nice -n 15 python experiments/long_judge.py --judge qwen2.5-1.5b --aspect coherence \\
        --dtype float32 --batch-size 4 --until 21:35 \\
        --store experiments/results/stores/summeval-coherence-qwen2.5-1.5b.jsonl
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time

import numpy as np


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="summeval")
    ap.add_argument("--aspect", default="coherence")
    ap.add_argument("--judge", default="qwen2.5-1.5b", help="registry name or model path")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="weight dtype")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--store", required=True, help="judgement store (.jsonl), created or continued")
    ap.add_argument("--until", default=None, help="UTC HH:MM after which no new context is started")
    ap.add_argument("--report-only", action="store_true", help="only print P(A) and accuracy of the store")
    return ap.parse_args(argv)


def deadline(hhmm: str | None) -> float:
    if not hhmm:
        return float("inf")
    h, m = (int(x) for x in hhmm.split(":"))
    now = dt.datetime.now(dt.timezone.utc)
    return now.replace(hour=h, minute=m, second=0, microsecond=0).timestamp()


def report(store_path, cs, judge_name):
    """``(comparisons, P(A), accuracy)`` over the store's records of ``judge_name`` on ``cs``."""
    from jaxrank.assessment.store import JudgementStore

    labels = {cs.ids[k]: dict(zip(cs.candidate_ids[k], cs.labels[k])) for k in range(len(cs.ids))}
    recs = [r for r in JudgementStore(store_path).records(judge=judge_name) if r["context"] in labels]
    if not recs:
        return 0, float("nan"), float("nan")
    p = np.array([r["p"] for r in recs])
    dh = np.array([labels[r["context"]][r["a"]] - labels[r["context"]][r["b"]] for r in recs])
    decided = dh != 0
    acc = float(np.mean((p[decided] > 0.5) == (dh[decided] > 0))) if decided.any() else float("nan")
    return len(recs), float(p.mean()), acc


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import jax.numpy as jnp

    from jaxrank.assessment.run import contexts_of, judge_contexts
    from jaxrank.data import load_dataset

    cs = contexts_of(load_dataset(args.data), aspect=args.aspect)
    name = args.judge
    if not args.report_only:
        from jaxrank.judges.pairwise import PromptJudge
        from jaxrank.judges.prompts import pairwise_template
        from jaxrank.models.loading import load_model

        import resource

        stop = deadline(args.until)
        jnp.zeros(1).block_until_ready()
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
        t0 = time.time()
        lm = load_model(args.judge, dtype=getattr(jnp, args.dtype))
        weights = sum(int(w.nbytes) for w in lm.model.weights().values()) / 2**20
        extra = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10 - base
        print(f"loaded {lm.name} ({args.dtype}) in {time.time() - t0:.0f} s; peak RSS - JAX baseline "
              f"{extra:.0f} MiB for {weights:.0f} MiB of weights ({extra / weights:.2f}x)", flush=True)
        judge = PromptJudge(lm, pairwise_template(args.data, args.aspect), batch_size=args.batch_size)
        name = judge.name
        per_context = None
        for k in range(len(cs.ids)):
            t1 = time.time()
            if per_context is not None and t1 + per_context > stop:
                print(f"stopping before context {k}: it would end after --until", flush=True)
                break
            one = contexts_of(load_dataset(args.data), aspect=args.aspect, contexts=[k])
            judge_contexts(judge, one, args.store, progress=False)
            took = time.time() - t1
            if took > 5:   # a context judged now (not only read back from the store)
                per_context = took if per_context is None else 0.5 * (per_context + took)
            print(f"context {k} ({cs.ids[k]}): {took:.0f} s", flush=True)
    n, pa, acc = report(args.store, cs, name)
    print(f"{name} on {args.data} {args.aspect}: {n} comparisons; P(A) = {pa:.3f}; "
          f"pairwise accuracy vs humans (ties left out) = {acc:.3f}", flush=True)


if __name__ == "__main__":
    main()
