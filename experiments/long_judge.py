"""A long, resumable judging run: every ordered comparison of a data set's contexts, one context at a time.

Judges all ``N(N-1)`` ordered comparisons (both orders) of each context in
turn with a registered LLM judge (:class:`~jaxrank.judges.PromptJudge`, the
prefix-cached batched path) into a :class:`~jaxrank.assessment.store.JudgementStore`,
stopping before a context it would not finish by ``--until`` (UTC, ``HH:MM``).
A later run with the same arguments skips what the store already holds and
goes on with the next contexts (SummEval, TopicalChat, ...: ``--data``). At
the end it writes next to the store (``.md``) and prints the assessment of
everything in the store: positional bias, order consistency, pairwise
accuracy against the humans, Spearman per scorer with an interval over
contexts, raw and with both orders averaged.

    nice -n 15 python experiments/long_judge.py --judge qwen2.5-1.5b --aspect coherence \\
        --dtype float32 --batch-size 4 --until 21:35 \\
        --store experiments/results/stores/summeval-coherence-qwen2.5-1.5b.jsonl

With ``--base-url`` the judge is behind an OpenAI-compatible server
(:class:`~jaxrank.judges.server.ServerJudge`, e.g. llama.cpp's ``python -m
llama_cpp.server`` serving the registry's GGUF under the alias ``--judge``): the
same prompt (the model's chat template, read from the registry's GGUF, rendered
by the client on the completions endpoint, and ``--answer-prefix``), ``p`` from
the top-20 log-probabilities of the first answer token; ``--batch-size``
requests in flight. Its store keys are ``server:<judge>``:

    python experiments/long_judge.py --data topicalchat --judge qwen2.5-coder-1.5b --answer-prefix Response \\
        --base-url http://127.0.0.1:8731/v1 --batch-size 2 --contexts 0:14 \\
        --store experiments/results/stores/topicalchat-coherence-qwen2.5-coder-1.5b-server.jsonl
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from pathlib import Path

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
    ap.add_argument("--contexts", default=None, help="slice of contexts, e.g. 0:30 (default all)")
    ap.add_argument("--max-candidates", type=int, default=None, help="first N candidates of each context")
    ap.add_argument("--answer-prefix", default=None,
                    help="text before the label in the answer: 'auto' (the model's own), '' (none) or a word "
                         "(default: the judge's default)")
    ap.add_argument("--expect-template", default=None,
                    help="stop unless the judge's template key (the prompt and its reading) is this one, so a "
                         "run continues a store's judgements instead of starting new ones beside them")
    ap.add_argument("--base-url", default=None,
                    help="judge through this OpenAI-compatible server (serving --judge under that name)")
    ap.add_argument("--report-only", action="store_true", help="only print P(A) and accuracy of the store")
    return ap.parse_args(argv)


def deadline(hhmm: str | None) -> float:
    if not hhmm:
        return float("inf")
    h, m = (int(x) for x in hhmm.split(":"))
    now = dt.datetime.now(dt.timezone.utc)
    at = now.replace(hour=h, minute=m, second=0, microsecond=0)
    if at <= now:               # a time of day already past means tomorrow's (a run started before midnight)
        at += dt.timedelta(days=1)
    return at.timestamp()


def current_name(judge_name: str) -> str:
    """The registry's current name of a stored judge name (:data:`jaxrank.models.registry.ALIASES`; a
    ``server:`` prefix kept): ``qwen2.5-1.5b``, the name the early stores were written under, is
    ``qwen2.5-coder-1.5b``; any other name is returned as it is."""
    from jaxrank.models.registry import ALIASES

    prefix = "server:" if judge_name.startswith("server:") else ""
    base = judge_name.removeprefix(prefix)
    return prefix + ALIASES.get(base, base)


def display_name(judge_name: str) -> str:
    """The judge as the reports name it: :func:`current_name`, and the stored name where they differ
    (``qwen2.5-coder-1.5b (stored as `qwen2.5-1.5b`)``)."""
    current = current_name(judge_name)
    return judge_name if current == judge_name else f"{current} (stored as `{judge_name}`)"


def reading_line(records: list[dict]) -> str:
    """What the store's judgements read, from its records: the old reading (no ``label_mass`` recorded), a
    judge without a prompt (template ``none``), or the label mass as recorded (median, min)."""
    keys = sorted({str(r.get("template")) for r in records})
    if keys == ["none"]:
        return "**Reading.** No prompt (template `none`: not a language model's answer), so no label mass."
    mass = np.array([r["label_mass"] for r in records if r.get("label_mass") is not None], np.float64)
    if not len(mass):
        return (f"**Reading.** Old (template `{', '.join(keys)}`): judged before the judge read the model's "
                "answer: the labels' probabilities read at the first answer token, right after the assistant "
                "header, with no answer prefix (`label_reading.md`'s 'old (first token, piecewise)'). The store "
                "records no label mass; read again that way, the labels held 0.1-3% of the answer there "
                "(`label_reading.md`). Not a result of the judge.")
    return (f"**Reading.** Template `{', '.join(keys)}`; label mass (the labels' share of the model's answer at "
            f"the answer position), as recorded: median {np.median(mass):.3f} (min {mass.min():.3f}) over "
            f"{len(mass)} of {len(records)} comparisons.")


ACCURACY_WORDS = ("**Pairwise accuracy** below is pooled over the comparisons (every comparison of candidates "
                  "with different human scores counts once, whatever its context), not the mean over contexts "
                  "of per-context accuracies that `efficiency_real.py`'s judge table gives.")
"""How the stored reports' pairwise accuracy is defined (two definitions are printed in the results)."""


def report(store_path, judge_name, data, aspect, template=None):
    """Write (next to the store, as .md) and print the judge's bias and its agreement with the humans.

    Through :func:`jaxrank.assessment.report.assess_comparisons` (``_common.assess_store``),
    once on the raw comparisons and once after averaging both orders
    (``debias="permutation"``), so an always-"A" judge (accuracy exactly 0.5 raw)
    shows what its probabilities still say once the position is averaged out. Each part names the
    judge by its current registry name (:func:`display_name`), the reading of its records
    (:func:`reading_line`) and how its pairwise accuracy is pooled (:data:`ACCURACY_WORDS`).
    """
    from _common import assess_store

    from jaxrank.assessment.store import JudgementStore

    parts = []
    for debias in ("none", "permutation"):
        a, _ = assess_store(store_path, data=data, aspect=aspect, judge=judge_name, debias=debias, template=template)
        if a is None:
            print(f"{judge_name}: no comparisons in {store_path}", flush=True)
            return
        recs = JudgementStore(store_path).records(judge=judge_name, template=template)
        judge_name = judge_name or recs[0]["judge"]
        parts.append(a.markdown(f"{display_name(judge_name)} on {len(a.contexts)} {data} {aspect} contexts, "
                                f"debias={debias}",
                                preamble=[f"Store: `{Path(store_path).name}` (generated by "
                                          "`experiments/long_judge.py --report-only`).", "",
                                          reading_line(recs), "", ACCURACY_WORDS, ""]))
    text = "\n".join(parts)
    Path(store_path).with_suffix(".md").write_text(text)
    print(text, flush=True)


def server_judge(args, template):
    """The judge behind ``--base-url``: :class:`~jaxrank.judges.server.ServerJudge` reading the in-process judge's
    prompt (the chat template of the registry's model, rendered by the client; ``--answer-prefix``)."""
    import jinja2.ext  # noqa: F401  (server.render_chat_template names jinja2.ext but imports only jinja2)

    from jaxrank.judges.server import ServerJudge
    from jaxrank.models.gguf import read_gguf
    from jaxrank.models.registry import resolve

    if args.answer_prefix in (None, "auto"):
        raise SystemExit("--base-url needs --answer-prefix WORD or '' (a server judge cannot choose 'auto')")
    meta, _ = read_gguf(resolve(args.judge))
    return ServerJudge(args.base_url, args.judge, template, answer_prefix=args.answer_prefix,
                       chat_template=meta.get("tokenizer.chat_template"), max_concurrency=args.batch_size,
                       logprobs=True, timeout=600.0)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import jax.numpy as jnp

    from jaxrank.assessment.run import contexts_of, judge_contexts
    from jaxrank.data import load_dataset

    cs = contexts_of(load_dataset(args.data), aspect=args.aspect, contexts=args.contexts,
                     max_candidates=args.max_candidates)
    name, key = args.judge, args.expect_template
    if not args.report_only:
        from jaxrank.judges.pairwise import PromptJudge
        from jaxrank.judges.prompts import pairwise_template
        from jaxrank.models.loading import load_model

        import resource

        stop = deadline(args.until)
        kw = {} if args.answer_prefix is None else dict(answer_prefix=args.answer_prefix)
        if args.base_url:
            judge = server_judge(args, pairwise_template(args.data, args.aspect))
        else:
            jnp.zeros(1).block_until_ready()
            base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
            t0 = time.time()
            lm = load_model(args.judge, dtype=getattr(jnp, args.dtype))
            weights = sum(int(w.nbytes) for w in lm.model.weights().values()) / 2**20
            extra = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10 - base
            print(f"loaded {lm.name} ({args.dtype}) in {time.time() - t0:.0f} s; peak RSS - JAX baseline "
                  f"{extra:.0f} MiB for {weights:.0f} MiB of weights ({extra / weights:.2f}x)", flush=True)
            judge = PromptJudge(lm, pairwise_template(args.data, args.aspect), batch_size=args.batch_size, **kw)
        from jaxrank.assessment.run import prepare_judge, template_key
        from jaxrank.assessment.store import JudgementStore

        name = judge.name
        prepare_judge(judge, cs)
        key = template_key(judge)
        print(f"template key {key} (answer prefix {judge.template.answer_prefix!r})", flush=True)
        if args.expect_template and key != args.expect_template:
            raise SystemExit(f"template key {key} is not --expect-template {args.expect_template}: stopping")
        store = JudgementStore(args.store)
        per_context = None
        for k in range(len(cs.ids)):
            t1 = time.time()
            if per_context is not None and t1 + per_context > stop:
                print(f"stopping before context {k}: it would end after --until", flush=True)
                break
            before = len(store.records(judge=name, template=key))
            judge_contexts(judge, cs, store, progress=False, positions=[k])
            took = time.time() - t1
            new = len(store.records(judge=name, template=key)) - before
            if new:   # a context judged now (not only read back from the store)
                per_context = took if per_context is None else 0.5 * (per_context + took)
            load = os.getloadavg()[0]
            print(f"{time.strftime('%H:%M:%S', time.gmtime())} context {k} ({cs.ids[k]}): {new} new comparisons "
                  f"in {took:.0f} s" + (f" ({took / new:.2f} s each)" if new else "") + f"; load {load:.1f}",
                  flush=True)
    report(args.store, name, args.data, args.aspect, key)


if __name__ == "__main__":
    main()
