"""The ``jaxrank`` command line: a thin layer over the Python API.

    jaxrank rank [INPUT] [--method M] [--debias D] [--output FILE] [--top K] [column options]
    jaxrank judge  --data summeval --aspect coherence --judge smollm2-135m [--contexts 0:5]
                   [--candidates N] [--budget 48 --selection random] [--store FILE]
    jaxrank assess (the same options) [--methods ...] [--debias ...] [--output DIR]
    jaxrank assess --active [--budget B] [--active-batch K] [--rank-confidence 0.9]
                   [--stop-rule spearman|adjacent] (the other assess options)

``judge`` writes every judgement to a resumable store as it is produced;
``assess`` = judge + aggregate with every scorer + report (Spearman with the
human scores, positional bias P(A), pairwise accuracy, verdict). Without
options, ``assess`` runs the embedded default: all 100 SummEval articles x 16
summaries, relevance, the MiniLM-L6 similarity judge (chosen by measurement).
``assess --active`` asks the judge, per context, only for the most informative
comparisons in batches (:func:`jaxrank.assessment.active_judge_contexts`) until the
budget is spent or the Laplace posterior is confident enough of the ranking,
through the same resumable store, and reports the comparisons used.

Without INPUT, ranks the embedded default: the international football results
of the shared data folder (49k real matches, 337 teams), with the home side in
position A, so that a learnt positional bias is the home advantage.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import os
import sys
import time
from pathlib import Path

from jaxrank import scorer_table   # JAX-free: the scorer names and debias choices for --help


METHODS = tuple(scorer_table.SCORERS)
DEBIAS = scorer_table.DEBIAS
DEFAULT_JUDGE, DEFAULT_ASPECT = "minilm-l6", "relevance"
"""The embedded default of ``judge``/``assess``, chosen by measurement (README, "The main job"): on
SummEval the MiniLM similarity judge agrees with the humans (relevance: Spearman +0.29, 95% interval
[+0.23, +0.34] over 100 articles) where SmolLM2-135M is at chance within the same time."""


def _cache_option(p):
    p.add_argument("--no-compilation-cache", dest="compilation_cache", action="store_false",
                   help="do not keep compiled programs on disk (default: kept in ~/.cache/jaxrank/xla, or "
                        "$JAXRANK_CACHE/xla, so a later run skips XLA compilation; "
                        "JAXRANK_COMPILATION_CACHE=0 also turns it off)")


def _parser():
    ap = argparse.ArgumentParser(prog="jaxrank", description="LLM comparative assessment in JAX.")
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("rank", help="turn a file of pairwise comparisons into scores and a ranking",
                       description="Rank items from a file of pairwise comparisons: CSV (comma, semicolon or tab), "
                                   "JSON Lines or a JSON array. Read without options: ours (item_a, item_b, p or "
                                   "outcome), Chatbot Arena battles (model_a, model_b, winner) and evalica's "
                                   "(left, right, winner). Without INPUT: the international football results "
                                   "(home team in position A).")
    r.add_argument("input", nargs="?", help="comparison file (.csv/.tsv, .jsonl, .json); default: the football results")
    _cache_option(r)
    r.add_argument("--method", choices=METHODS, default="poe_bradley_terry")
    r.add_argument("--debias", choices=DEBIAS, default="none",
                   help="mean/learn: PoE bias terms (beta or gamma; d = s_A - s_B - gamma, so a bias towards "
                        "position A is a negative gamma); threshold: eq. 9-10 reweighting; "
                        "permutation: average both orders")
    r.add_argument("--output", "-o", help="write every score (rank, item, score, stderr, games) to this .csv or "
                                          ".jsonl file; with a context column when the input has one")
    r.add_argument("--top", type=int, default=20, help="rows of the ranking to print per context")
    r.add_argument("--score-prior", type=float, default=None,
                   help="poe_bradley_terry: precision of a N(0, 1/lambda) prior on scores (MAP); "
                        "needed for hard 0/1 outcomes, where an undefeated item's ML score is infinite "
                        "(default 0, or 0.1 for the embedded football default)")
    for col in ("item-a", "item-b", "p", "outcome", "score-a", "score-b", "context", "weight"):
        r.add_argument(f"--{col}", help=f"column holding {col.replace('-', ' ')}")
    for name, helptext in (("judge", "judge comparisons of a data set with an LLM into a resumable store"),
                           ("assess", "judge + aggregate + report agreement with human scores")):
        j = sub.add_parser(name, help=helptext, description=helptext)
        _cache_option(j)
        j.add_argument("--data", default="summeval", help="data set name (default summeval)")
        j.add_argument("--aspect", default=DEFAULT_ASPECT,
                       help=f"human aspect / prompt attribute (default {DEFAULT_ASPECT})")
        j.add_argument("--judge", default=DEFAULT_JUDGE,
                       help="registry name (minilm-l6 = similarity judge, the default; smollm2-135m and "
                            "qwen2.5-0.5b = LLM judges), a Hugging Face checkpoint directory or a .gguf file")
        j.add_argument("--contexts", default=":", help="contexts by position: START:STOP or i,j,k (default all)")
        j.add_argument("--candidates", type=int, default=None,
                       help="only the first N candidates of each context (default all)")
        j.add_argument("--budget", type=int, default=None, help="comparisons per context (default all N(N-1))")
        j.add_argument("--selection", choices=("random", "no_repeat", "symmetric"), default=None,
                       help="how a --budget subset is drawn (default random)")
        j.add_argument("--seed", type=int, default=0)
        j.add_argument("--template", choices=("poe", "zepo"), default="poe", help="prompt style")
        j.add_argument("--soft-prompt", default=None, metavar="FILE",
                       help="learnt input vectors (safetensors, experiments/soft_prompt.py) for an LLM judge")
        j.add_argument("--batch-size", type=int, default=8)
        j.add_argument("--store", help="judgement store (.jsonl); default results/judgements/DATA-ASPECT-JUDGE.jsonl")
        j.add_argument("--no-progress", action="store_true", help="no progress bar")
        if name == "assess":
            j.add_argument("--methods", default=",".join(_report_methods()),
                           help="comma-separated scorers (default: all but max_likelihood_ranking)")
            j.add_argument("--debias", choices=("none",) + scorer_table.TRANSFORMS, default="none")
            j.add_argument("--output", "-o", default="results", help="folder for the report and scores")
            j.add_argument("--active", action="store_true",
                           help="active assessment: ask for the most informative comparisons in batches until "
                                "--budget (default N(N-1)) or --rank-confidence is reached")
            j.add_argument("--active-batch", type=int, default=None,
                           help="--active: comparisons asked per round (default 4)")
            j.add_argument("--rank-confidence", type=_confidence, default=None,
                           help="--active: stop a context when the posterior's confidence in its ranking reaches "
                                "this, in (-1, 1) (default 0.9; 'none': run to the budget)")
            j.add_argument("--stop-rule", choices=("spearman", "adjacent"), default=None,
                           help="--active: confidence = expected Spearman under the Laplace posterior (default), "
                                "or mean P(correct order) of adjacent items")
    return ap


def _confidence(text):
    if text.strip().lower() in ("none", "off"):
        return "none"
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or 'none': {text!r}") from None


def _report_methods():
    return tuple(name for name, entry in scorer_table.SCORERS.items() if entry.in_report)


def _make_judge(args):
    from jaxrank.models.loading import load_model
    from jaxrank.judges.pairwise import PromptJudge
    from jaxrank.judges.prompts import pairwise_template
    from jaxrank.judges.soft_prompt import SoftPrompt

    try:
        template = pairwise_template(args.data, args.aspect, style=args.template)
        soft = SoftPrompt.load(args.soft_prompt) if getattr(args, "soft_prompt", None) else None
        lm = load_model(args.judge)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"jaxrank: {e}")
    if lm.architecture == "bert":
        if soft is not None:
            raise SystemExit("jaxrank: --soft-prompt needs an LLM judge (a Llama-family model), not an encoder")
        from jaxrank.judges.similarity import SimilarityJudge
        return SimilarityJudge(lm, batch_size=args.batch_size)
    try:
        return PromptJudge(lm, template, batch_size=args.batch_size, soft_prompt=soft)
    except ValueError as e:
        raise SystemExit(f"jaxrank: --soft-prompt: {e}")


def _contexts(args):
    from jaxrank.data import load_dataset
    from jaxrank.assessment.run import contexts_of

    if args.data == "summeval" and args.judge == DEFAULT_JUDGE and args.aspect == DEFAULT_ASPECT and \
            args.contexts == ":" and args.candidates is None and args.budget is None:
        print("embedded default: SummEval relevance, all 100 articles x 16 summaries, all 240 ordered comparisons "
              "each, MiniLM-L6 similarity judge (the most informative judge that runs here in minutes; "
              "--judge smollm2-135m for the LLM judge)", file=sys.stderr)
    try:
        ds = load_dataset(args.data)
        cs = contexts_of(ds, aspect=args.aspect, contexts=args.contexts, max_candidates=args.candidates)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"jaxrank: {e}")
    if args.budget is not None and args.budget < 1:
        raise SystemExit("jaxrank: --budget must be >= 1")
    return cs


def _store_path(args, judge):
    return args.store or f"results/judgements/{args.data}-{args.aspect}-{judge.name}.jsonl"


def _judge(args):
    import numpy as np

    from jaxrank.assessment.run import judge_contexts

    cs = _contexts(args)
    judge = _make_judge(args)
    store = _store_path(args, judge)
    t0 = time.perf_counter()
    sel = judge_contexts(judge, cs, store, budget=args.budget, selection=args.selection or "random",
                         seed=args.seed, progress=not args.no_progress)
    n = int(np.sum(np.asarray(sel.comparisons.weight) > 0))
    print(f"{n} judgements of {len(cs.ids)} contexts in {store} ({time.perf_counter() - t0:.1f} s)")
    return cs, sel


def _active_options(args):
    """Check the --active options before loading data or model; fill in their defaults."""
    given = [f"--{n.replace('_', '-')}" for n in ("active_batch", "rank_confidence", "stop_rule")
             if getattr(args, n) is not None]
    if not args.active:
        if given:
            raise SystemExit(f"jaxrank: {', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to --active only")
        return
    if args.selection is not None:
        raise SystemExit(f"jaxrank: --selection {args.selection} cannot be combined with --active, which "
                         "chooses the comparisons itself")
    args.active_batch = 4 if args.active_batch is None else args.active_batch
    if args.active_batch < 1:
        raise SystemExit(f"jaxrank: --active-batch must be >= 1, got {args.active_batch}")
    conf = 0.9 if args.rank_confidence is None else args.rank_confidence
    args.rank_confidence = None if conf == "none" else conf
    if args.rank_confidence is not None and not -1 < args.rank_confidence < 1:
        raise SystemExit(f"jaxrank: --rank-confidence must lie in (-1, 1) (or be 'none' to run to the budget), "
                         f"got {args.rank_confidence:g}")
    args.stop_rule = args.stop_rule or "spearman"


def _judge_active(args):
    from jaxrank.assessment.active import active_judge_contexts, check_active

    cs = _contexts(args)
    settings = dict(budget=args.budget, batch_size=args.active_batch, rank_confidence=args.rank_confidence,
                    stop_rule=args.stop_rule)
    try:
        check_active(cs, **settings)
    except ValueError as e:
        raise SystemExit(f"jaxrank: --active: {e}")
    judge = _make_judge(args)
    store = _store_path(args, judge)
    t0 = time.perf_counter()
    run = active_judge_contexts(judge, cs, store, seed=args.seed, progress=not args.no_progress, **settings)
    print(f"{int(run.num_comparisons.sum())} comparisons of {len(cs.ids)} contexts ({run.judged} judged now, "
          f"{run.replayed} from the store {store}; {time.perf_counter() - t0:.1f} s)")
    return cs, run.selection, run


def _assess(args):
    import numpy as np

    from jaxrank.assessment.report import assess_comparisons

    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    _active_options(args)
    run = None
    if args.active:
        cs, sel, run = _judge_active(args)
    else:
        cs, sel = _judge(args)
    pos = {c: k for k, c in enumerate(cs.ids)}
    labels = np.full(np.asarray(sel.comparisons.item_mask).shape, np.nan, np.float32)
    for r, ctx in enumerate(sel.contexts):
        k = pos[ctx]
        index = {cid: n for n, cid in enumerate(cs.candidate_ids[k])}
        for n, cid in enumerate(sel.candidates[r]):
            labels[r, n] = cs.labels[k][index[cid]]
    try:
        rep = assess_comparisons(sel.comparisons, labels, contexts=sel.contexts, methods=methods,
                                 debias=args.debias)
    except ValueError as e:
        raise SystemExit(f"jaxrank: {e}")
    extra = {}
    if run:
        extra = {"used / all": [f"{run.num_comparisons[r]} / {run.full[r]}" for r in range(len(rep.contexts))],
                 "stopped": [str(run.stopped[r]) for r in range(len(rep.contexts))],
                 "confidence": [f"{run.confidence[r]:.3f}" for r in range(len(rep.contexts))]}
    title = f"{args.data} {args.aspect}: judge {args.judge}, {len(sel.contexts)} contexts"
    text = rep.markdown(title, preamble=[run.summary(), ""] if run else [], extra=extra)
    print("\n" + text)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"assess-{args.data}-{args.aspect}-{Path(str(args.judge)).name}" + ("-active" if run else "")
    (out / f"{stem}.md").write_text(text + "\n")
    with (out / f"{stem}-scores.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["context", "candidate", "human"] + list(methods) +
                   (["comparisons", "stopped", "confidence"] if run else []))
        for r, ctx in enumerate(sel.contexts):
            act = [int(run.num_comparisons[r]), run.stopped[r], float(run.confidence[r])] if run else []
            for n, cid in enumerate(sel.candidates[r]):
                w.writerow([ctx, cid, float(labels[r, n])] + [float(rep.scores[m][r, n]) for m in methods] + act)
    print(f"\nwrote {out / (stem + '.md')} and {out / (stem + '-scores.csv')}")


def _default_football(args):
    from jaxrank.data import data_dir
    try:
        args.input = str(data_dir() / "international_football" / "results.csv")
    except FileNotFoundError as e:
        raise SystemExit(f"jaxrank: no INPUT given and the embedded default is missing: {e}")
    args.item_a, args.item_b = args.item_a or "home_team", args.item_b or "away_team"
    args.score_a, args.score_b = args.score_a or "home_score", args.score_b or "away_score"
    if args.method == "poe_bradley_terry":
        args.debias = "learn" if args.debias == "none" else args.debias
        args.score_prior = 0.1 if args.score_prior is None else args.score_prior
    print(f"no INPUT given: ranking the embedded default {args.input}\n"
          f"  (home team in position A; --debias {args.debias}"
          + ("" if args.score_prior is None else f"; --score-prior {args.score_prior}") + ")", file=sys.stderr)


def _check_rank_options(args):
    """Refuse option combinations that do not apply, before reading the file or importing JAX."""
    if args.top < 0:
        raise SystemExit("jaxrank: --top must be >= 0")
    if args.score_prior is not None and args.method != "poe_bradley_terry":
        raise SystemExit("jaxrank: --score-prior applies to poe_bradley_terry only")
    if args.score_prior is not None and not args.score_prior >= 0:
        raise SystemExit(f"jaxrank: --score-prior must be >= 0, got {args.score_prior}")
    try:
        scorer_table.check_debias(args.method, args.debias, argument="--debias")
    except ValueError as e:
        raise SystemExit(f"jaxrank: {e}")


def _bucket(n, least):
    """The smallest size of the form ``2^k`` or ``3 * 2^k`` that is at least ``max(n, least)``.

    Padding to these sizes lets files of different sizes share one compiled
    program (and one entry of the persistent compilation cache), less than
    1.5 times the size needed.
    """
    size = least
    while size < n:
        size = size // 2 * 3 if size & (size - 1) == 0 else size // 3 * 4
    return size


def _padded(c, num_items, num_comparisons):
    """``c`` with padded items (masked) and padded comparisons (weight 0): scores of real items unchanged."""
    import numpy as np

    from jaxrank.comparisons import Comparisons

    def pad(x, size, value):
        x = np.asarray(x)
        return np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, size - x.shape[-1])], constant_values=value)

    r = num_comparisons
    return Comparisons(i=pad(c.i, r, 0), j=pad(c.j, r, 0), p=pad(c.p, r, 0.5), weight=pad(c.weight, r, 0),
                       item_mask=pad(c.item_mask, num_items, False), num_items=num_items)


def _rank_scores(c, method, debias, score_prior):
    """Every number ``jaxrank rank`` prints, from one traced program (a single cache entry, no eager ops)."""
    import jaxrank as jr

    # games, connectivity and P(A) describe the comparisons as given, before any debiasing
    out = {"games": c.games(), "connected": c.is_connected(), "pa": jr.positional_bias(c), "stderr": None}
    c = scorer_table.transform(c, debias)
    if method == "poe_bradley_terry":
        mode = {"mean": "mean", "learn": "learn"}.get(debias, False)
        sol, post = jr.laplace_posterior(c, jr.BradleyTerrySolver(debias=mode, score_prior=score_prior))   # one fit
        out.update(scores=sol.scores, stderr=post.stderr, gamma=sol.gamma, converged=sol.converged,
                   iterations=sol.iterations)
    elif method in ("poe_gaussian", "poe_gaussian_hard"):
        post = jr.poe_gaussian_posterior(c, debias=debias == "mean", hard=method.endswith("hard"))
        out.update(scores=post.mean, stderr=post.stderr)
    else:
        entry = scorer_table.SCORERS[method]      # c is transformed already: only the model term is left
        out["scores"] = entry.load()(c, **entry.keywords(debias))
    return out


@functools.lru_cache(maxsize=None)
def _rank_program():
    import jax
    return jax.jit(_rank_scores, static_argnames=("method", "debias", "score_prior"))


def _score(c, method, debias, score_prior):
    """Scores ``[K, N]`` (and s.e., games, ...) of ``c``, computed on shapes padded to :func:`_bucket` sizes."""
    import numpy as np

    n, r = c.num_items, c.num_comparisons
    out = _rank_program()(_padded(c, _bucket(n, 8), _bucket(r, 16)), method=method, debias=debias,
                          score_prior=float(score_prior))
    out = {k: (None if v is None else np.asarray(v)) for k, v in out.items()}
    for k in ("scores", "stderr", "games"):
        if out[k] is not None:
            out[k] = out[k][..., :n]
    return out


def _write_scores(path, rows):
    """Write the score rows as CSV or JSON Lines (by suffix); no ``context`` field for one unnamed context."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if all(r["context"] == "" for r in rows):
        rows = [{k: v for k, v in r.items() if k != "context"} for r in rows]
    if out.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        with out.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    print(f"\nwrote {len(rows)} scores to {out}")


def _rank(args):
    import numpy as np

    _check_rank_options(args)
    if args.input is None:
        _default_football(args)
    t0 = time.perf_counter()
    from jaxrank.io import read_comparisons
    try:
        table = read_comparisons(args.input, item_a=args.item_a, item_b=args.item_b, p=args.p,
                                 outcome=args.outcome, score_a=args.score_a, score_b=args.score_b,
                                 context=args.context, weight=args.weight)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"jaxrank: {e}")
    c = table.comparisons
    t1 = time.perf_counter()
    _enable_cache(args)
    res = _score(c, args.method, args.debias, args.score_prior or 0.0)
    t2 = time.perf_counter()
    scores, stderr, games = res["scores"], res["stderr"], res["games"]
    n_cmp = int(np.sum(np.asarray(c.weight) > 0))
    print(f"{n_cmp} comparisons, {sum(len(x) for x in table.items)} items, {len(table.contexts)} context(s); "
          f"read {t1 - t0:.2f} s, scored ({args.method}) {t2 - t1:.2f} s")
    rows = []
    for k, ctx in enumerate(table.contexts):
        names = table.items[k]
        order = np.argsort(-scores[k, :len(names)], kind="stable")
        head = f"context {ctx!r}: " if ctx else ""
        info = f"P(A) = {res['pa'][k]:.3f}"
        if "gamma" in res:
            info += (f", gamma = {res['gamma'][k]:+.3f} (negative: position A favoured), "
                     f"converged = {bool(res['converged'][k])}")
        print(f"\n{head}{len(names)} items, {info}")
        if not res["connected"][k]:
            print("  warning: the comparison graph is disconnected; scores are centred per connected "
                  "component and only comparable within one")
        print(f"  {'rank':>4}  {'item':<32} {'score':>9} {'± s.e.' if stderr is not None else '':>8} {'games':>7}")
        for rank, n in enumerate(order, 1):
            se = "" if stderr is None else f"{stderr[k, n]:8.3f}"
            if rank <= args.top:
                print(f"  {rank:>4}  {names[n][:32]:<32} {scores[k, n]:9.3f} {se:>8} {games[k, n]:7.0f}")
            rows.append({"context": ctx, "rank": rank, "item": names[n], "score": float(scores[k, n]),
                         "stderr": None if stderr is None else float(stderr[k, n]), "games": float(games[k, n])})
    if args.top and stderr is not None:
        print("\n  s.e. = standard error of the score (Laplace approximation); an item with few games has a "
              "large one,\n  so its rank is uncertain: scores within about 2 s.e. of each other are not "
              "clearly ordered.")
    if args.output:
        _write_scores(args.output, rows)


def _enable_cache(args):
    if args.compilation_cache and os.environ.get("JAXRANK_COMPILATION_CACHE", "1") != "0":
        from jaxrank.compilation import enable_compilation_cache
        enable_compilation_cache()


def main(argv=None):
    args = _parser().parse_args(argv)
    if args.command == "rank":  # its options and file are checked before JAX is imported
        _rank(args)
        return
    _enable_cache(args)
    if args.command == "judge":
        _judge(args)
    elif args.command == "assess":
        _assess(args)


if __name__ == "__main__":
    main()
