"""``jaxrank rank``: a file of pairwise comparisons in, scores and a ranking out.

Options and the file are checked, and the file read, before JAX is imported; the scores come from one
traced program on shapes padded to a few sizes (``jaxrank._batching.bucket_sizes``, the buckets of the
scorers' own entry points), so the persistent compilation cache serves files of different sizes.
"""

from __future__ import annotations

import csv
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from jaxrank import scorer_table   # JAX-free: the scorer names and debias choices for --help
from jaxrank.cli import _common as common
from jaxrank.cli._errors import UsageError

METHODS = tuple(scorer_table.SCORERS)
DEBIAS = scorer_table.DEBIAS


def add_parser(sub):
    """Add the ``rank`` subcommand to the subparsers ``sub``."""
    r = sub.add_parser("rank", help="turn a file of pairwise comparisons into scores and a ranking",
                       description="Rank items from a file of pairwise comparisons: CSV (comma, semicolon or tab), "
                                   "JSON Lines or a JSON array. Read without options: ours (item_a, item_b, p or "
                                   "outcome), Chatbot Arena battles (model_a, model_b, winner) and evalica's "
                                   "(left, right, winner). Without INPUT: the international football results "
                                   "(home team in position A).")
    r.add_argument("input", nargs="?", help="comparison file (.csv/.tsv, .jsonl, .json); default: the football results")
    common.cache_option(r)
    r.add_argument("--method", choices=METHODS, default="poe_bradley_terry",
                   help="poe_bradley_terry: s.e. by the Laplace approximation; poe_gaussian(_hard): s.e. from the "
                        "posterior (W^T D W)^+ scaled by the residual variance sigma^2 = sum w r^2 / "
                        "(R - N + components) (n/a without residual degrees of freedom); others: no s.e.")
    r.add_argument("--debias", choices=DEBIAS, default=None,
                   help="mean/learn: PoE bias terms (beta or gamma; d = s_A - s_B - gamma, so a bias towards "
                        "position A is a negative gamma); threshold: eq. 9-10 reweighting; "
                        "permutation: average both orders (default none; learn for the football default "
                        "with poe_bradley_terry)")
    r.add_argument("--output", "-o", help="write every score (rank, item, score, stderr, games) to this .csv, "
                                          ".json (one array of objects) or .jsonl file (one object a line); with a "
                                          "context column when the input has one; an item in no judged "
                                          "comparison has no rank, score or stderr (empty, or null)")
    r.add_argument("--top", type=int, default=20, help="rows of the ranking to print per context")
    r.add_argument("--score-prior", type=float, default=None,
                   help="poe_bradley_terry: precision of a N(0, 1/lambda) prior on scores (MAP); "
                        "needed for hard 0/1 outcomes, where an undefeated item's ML score is infinite "
                        "(default 0, or 0.1 for the embedded football default)")
    for col in ("item-a", "item-b", "p", "outcome", "score-a", "score-b", "context", "weight"):
        r.add_argument(f"--{col}", help=f"column holding {col.replace('-', ' ')}")


def _default_football(args):
    """Point ``args`` at the football results (no INPUT); ``--debias`` learn unless given (``None`` = not given)."""
    from jaxrank.data import data_dir
    for option in ("p", "outcome"):
        if getattr(args, option):
            raise UsageError(f"jaxrank: --{option} {getattr(args, option)!r} names a column of your INPUT, but no "
                             "INPUT was given: the embedded football results are read from their score columns "
                             f"(home_score, away_score); give the comparison file, or leave out --{option}")
    try:
        args.input = str(data_dir() / "international_football" / "results.csv")
    except FileNotFoundError as e:
        raise SystemExit(f"jaxrank: no INPUT given and the embedded default is missing: {e}")
    args.item_a, args.item_b = args.item_a or "home_team", args.item_b or "away_team"
    args.score_a, args.score_b = args.score_a or "home_score", args.score_b or "away_score"
    if args.method == "poe_bradley_terry":
        args.debias = "learn" if args.debias is None else args.debias      # an explicit --debias none is kept
        args.score_prior = 0.1 if args.score_prior is None else args.score_prior
    args.debias = args.debias or "none"
    print(f"no INPUT given: ranking the embedded default {args.input}\n"
          f"  (home team in position A; --debias {args.debias}"
          + ("" if args.score_prior is None else f"; --score-prior {args.score_prior}") + ")", file=sys.stderr)


def _check_rank_options(args):
    """Refuse option combinations that do not apply, before reading the file or importing JAX."""
    if args.top < 0:
        raise UsageError("jaxrank: --top must be >= 0")
    if args.score_prior is not None and args.method != "poe_bradley_terry":
        raise UsageError("jaxrank: --score-prior applies to poe_bradley_terry only")
    if args.score_prior is not None and not 0 <= args.score_prior < float("inf"):
        raise UsageError(f"jaxrank: --score-prior must be a finite number >= 0, got {args.score_prior}")
    try:
        scorer_table.check_debias(args.method, args.debias or "none", argument="--debias")
    except ValueError as e:
        raise UsageError(f"jaxrank: {e}")
    if args.output is not None and not args.output.strip():
        raise UsageError("jaxrank: --output is empty; give a .csv, .jsonl or .json file name (or leave it out to "
                         "print the scores)")
    given = {o: getattr(args, o) for o in ("p", "outcome", "score_a", "score_b")}
    if given["p"] and given["outcome"]:
        raise UsageError("jaxrank: give --p (a probability column) or --outcome (a win/loss/tie column), not both")
    if (given["score_a"] or given["score_b"]) and (given["p"] or given["outcome"]):
        raise UsageError("jaxrank: --score-a/--score-b give the outcome from two score columns; leave out "
                         f"--{'p' if given['p'] else 'outcome'}")
    for x, y in (("item_a", "item_b"), ("score_a", "score_b")):
        if getattr(args, x) and getattr(args, x) == getattr(args, y):
            raise UsageError(f"jaxrank: --{x.replace('_', '-')} and --{y.replace('_', '-')} name one column "
                             f"({getattr(args, x)!r}); give the two columns")
    if args.output:
        out = Path(args.output)
        if out.suffix.lower() not in OUTPUT_SUFFIXES:
            raise UsageError(f"jaxrank: --output {out}: write scores to a {', '.join(OUTPUT_SUFFIXES)} file "
                             f"(the suffix chooses the format), not {out.suffix or 'a name without a suffix'}")
        if out.is_dir():
            raise UsageError(f"jaxrank: --output {out} is a directory; give a file name such as {out / 'scores.csv'}")
        if args.input and out.exists() and Path(args.input).exists() and out.resolve() == Path(args.input).resolve():
            raise UsageError(f"jaxrank: --output {out} is the input file; writing the scores there would destroy "
                             "the comparisons: choose another name")
        parent = next((q for q in out.parents if q.exists()), None)
        if parent is not None and not parent.is_dir():
            raise SystemExit(f"jaxrank: --output {out}: {parent} is a file, not a folder; give a path in a folder")
        _check_writable(out, parent)


def _check_writable(out: Path, parent: Path | None) -> None:
    """``--output`` can be written, found before the file is read and scored: an existing file writable, else
    a file can be made in the nearest folder that exists (an unnamed temporary file, gone when closed: no file
    is left behind)."""
    if out.exists():
        if not os.access(out, os.W_OK):
            raise SystemExit(f"jaxrank: --output {out}: the file cannot be written (read-only); choose another name")
        return
    if parent is None:
        return
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as e:
        raise SystemExit(f"jaxrank: --output {out}: no file can be written in {parent} ({e.strerror or e}); "
                         "choose another folder") from None


OUTPUT_SUFFIXES = (".csv", ".jsonl", ".json", ".ndjson")
"""The score files ``jaxrank rank --output`` writes, by suffix."""


SEPARATED_STDERR = 10.0
"""A standard error above this (in score units, where a 1-point gap is a 73% win chance) marks an item whose
maximum-likelihood score runs off: it never lost or never won."""


def _rank_scores(c, method, debias, score_prior):
    """Every number ``jaxrank rank`` prints, from one traced program (a single cache entry, no eager ops)."""
    import jax.numpy as jnp

    import jaxrank as jr
    from jaxrank.scoring.gaussian import residual_variance

    # games, connectivity and P(A) describe the comparisons as given, before any debiasing; connectivity of the
    # judged items only (an item in no judged comparison is its own component but is listed apart, unranked)
    games, labels = c.games(), c.components()
    judged = c.item_mask & (games > 0)
    first = jnp.take_along_axis(labels, jnp.argmax(judged, axis=-1)[..., None], axis=-1)
    connected = jnp.all(jnp.where(judged, labels == first, True), axis=-1)
    out = {"games": games, "connected": connected, "pa": jr.positional_bias(c), "stderr": None}
    c = scorer_table.transform(c, debias)
    if method == "poe_bradley_terry":
        mode = {"mean": "mean", "learn": "learn"}.get(debias, False)
        # one fit; standard errors by the sparse estimate above DENSE_COVARIANCE_MAX_ITEMS items (O(N + R))
        sol, post = jr.laplace_posterior(c, jr.BradleyTerrySolver(debias=mode, score_prior=score_prior),
                                         covariance="auto")
        out.update(scores=sol.scores, stderr=post.stderr, gamma=sol.gamma, converged=sol.converged,
                   iterations=sol.iterations)
    elif method in ("poe_gaussian", "poe_gaussian_hard"):
        mean_beta, hard = debias == "mean", method.endswith("hard")
        post = jr.poe_gaussian_posterior(c, debias=mean_beta, hard=hard, covariance="auto")
        sigma2 = residual_variance(c, post.mean, judged, labels, debias=mean_beta, hard=hard)
        out.update(scores=post.mean, stderr=post.stderr * jnp.sqrt(sigma2)[..., None])
    else:
        entry = scorer_table.SCORERS[method]      # c is transformed already: only the model term is left
        out["scores"] = entry.load()(c, **entry.keywords(debias))
    return out


@functools.lru_cache(maxsize=None)
def _rank_program(method, debias, score_prior, exported, options=()):
    """The jitted program of :func:`_rank_scores` for these settings, of the arrays of a ``Comparisons``.

    With ``exported`` its traced program and its compiled executable are kept on disk beside the compilation
    cache (:class:`jaxrank.compilation.ExportedProgram`), so a later process neither traces, lowers nor compiles it.
    ``options``: XLA compiler options as sorted pairs (``_batching.compiler_options``: a small bucket is
    compiled without LLVM's optimisations).
    """
    import jax

    from jaxrank.compilation import ExportedProgram, compiled_directory

    def program(i, j, p, weight, item_mask):
        from jaxrank.comparisons import Comparisons   # traced only on a cache miss: JAX-heavy imports stay out

        c = Comparisons(i=i, j=j, p=p, weight=weight, item_mask=item_mask, num_items=item_mask.shape[-1])
        out = _rank_scores(c, method, debias, score_prior)
        return {k: v for k, v in out.items() if v is not None}

    opts = dict(options) or None
    if exported:
        return ExportedProgram(program, name=f"rank-{method}-{debias}-{score_prior!r}", compiler_options=opts,
                               executables=compiled_directory())
    return jax.jit(program, compiler_options=opts)


def _score(c, method, debias, score_prior, *, exported=True):
    """Scores ``[K, N]`` (and s.e., games, ...) of ``c``, computed on shapes padded to their bucket (``_batching.bucket_sizes``).

    One context (``K = 1``, every file without a context column) runs a program of unbatched arrays: traced
    without ``vmap`` its loops keep scalar conditions (no ``select`` of every carried array per pass), which
    halves its tracing and shortens its compilation on a cold cache; the context axis is put back on the host.
    """
    import numpy as np

    from jaxrank import _batching

    n, r = c.num_items, c.num_comparisons
    cp = _batching.pad(c, *_batching.bucket_sizes(n, r))
    arrays = [np.asarray(x) for x in (cp.i, cp.j, cp.p, cp.weight, cp.item_mask)]
    single = c.batch_shape == (1,)
    if single:
        arrays = [x[0] for x in arrays]
    options = tuple(sorted((_batching.compiler_options(cp.num_items, cp.i.size) or {}).items()))
    program = _rank_program(method, debias, float(score_prior), bool(exported), options)
    out = program(*arrays)
    out = {k: np.asarray(v)[None] if single else np.asarray(v) for k, v in out.items()}
    out.setdefault("stderr", None)
    for k in ("scores", "stderr", "games"):
        if out[k] is not None:
            out[k] = out[k][..., :n]
    return out


def _write_scores(path, rows):
    """Write the score rows by suffix: ``.json`` one JSON array of objects, ``.jsonl``/``.ndjson`` JSON Lines,
    else CSV (``None`` an empty field); no ``context`` field for one unnamed context."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if all(r["context"] == "" for r in rows):
        rows = [{k: v for k, v in r.items() if k != "context"} for r in rows]
    if out.suffix.lower() == ".json":
        out.write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")   # one object a line
    elif out.suffix.lower() in (".jsonl", ".ndjson"):
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        with out.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    print(f"\nwrote {len(rows)} scores to {out}")


def run(args):
    """Run ``jaxrank rank``."""
    import numpy as np

    _check_rank_options(args)
    if args.input is None:
        _default_football(args)
    args.debias = args.debias or "none"                  # not given: none
    t0 = time.perf_counter()
    from jaxrank.io import read_comparisons
    try:
        table = read_comparisons(args.input, item_a=args.item_a, item_b=args.item_b, p=args.p,
                                 outcome=args.outcome, score_a=args.score_a, score_b=args.score_b,
                                 context=args.context, weight=args.weight)
    except (ValueError, FileNotFoundError) as e:
        raise UsageError(f"jaxrank: {e}")
    except OSError as e:                  # an INPUT that cannot be read (permissions, a device): a usage error too
        raise UsageError(f"jaxrank: {e.filename or args.input}: cannot be read ({e.strerror or e})") from None
    c = table.comparisons
    t1 = time.perf_counter()
    cached = common.enable_cache(args)
    with common.old_objects_frozen():
        res = _score(c, args.method, args.debias, args.score_prior or 0.0, exported=cached)
    t2 = time.perf_counter()
    scores, stderr, games = res["scores"], res["stderr"], res["games"]
    n_cmp = int(np.sum(np.asarray(c.weight) > 0))
    print(f"{n_cmp} comparisons, {sum(len(x) for x in table.items)} items, {len(table.contexts)} context(s); "
          f"read {t1 - t0:.2f} s, scored ({args.method}) {t2 - t1:.2f} s")
    rows = []
    for k, ctx in enumerate(table.contexts):
        names = table.items[k]
        # an item in no judged comparison (only weight-0 rows) has no evidence: listed after the ranked ones
        judged = np.asarray(games[k, :len(names)]) > 0
        order = np.argsort(-scores[k, :len(names)], kind="stable")
        unjudged = order[~judged[order]]
        order = order[judged[order]]
        head = f"context {ctx!r}: " if ctx else ""
        weighted = bool(np.any(np.asarray(c.weight[k]) > 0))
        info = f"P(A) = {res['pa'][k]:.3f}" if weighted else "P(A) = n/a (every comparison has weight 0)"
        if "gamma" in res and args.debias in ("mean", "learn"):     # gamma is shown only where it was fitted
            info += f", gamma = {res['gamma'][k]:+.3f} (negative: position A favoured)"
        if "converged" in res:
            info += f", converged = {bool(res['converged'][k])}"
        print(f"\n{head}{len(names)} items, {info}")
        if stderr is not None and not args.score_prior:
            se = np.asarray(stderr[k, :len(names)])
            wild = (se > SEPARATED_STDERR) & judged
            if wild.any():
                print(f"  warning: {int(wild.sum())} item(s) never lost or never won against the others, so their "
                      f"scores run off without bound (s.e. up to {float(np.max(se[wild])):.1f}); "
                      "their ranks mean little: add --score-prior 1 (a Gaussian prior on the scores) to rank "
                      "them by the evidence")
        if not res["connected"][k]:
            print("  warning: the comparison graph is disconnected; scores are centred per connected "
                  "component and only comparable within one")
        print(f"  {'rank':>4}  {'item':<32} {'score':>9} {'± s.e.' if stderr is not None else '':>8} {'games':>7}")
        no_se = stderr is not None and len(order) and bool(np.all(np.isnan(stderr[k, order])))
        if no_se:
            print("  s.e. n/a: as many free scores as judged comparisons, so no residual to estimate the judge's "
                  "noise sigma from")
        for rank, n in enumerate(order, 1):
            se = "" if stderr is None else "n/a" if np.isnan(stderr[k, n]) else f"{stderr[k, n]:8.3f}"
            if rank <= args.top:
                print(f"  {rank:>4}  {names[n][:32]:<32} {scores[k, n]:9.3f} {se:>8} {games[k, n]:7.0f}")
            rows.append({"context": ctx, "rank": rank, "item": names[n], "score": float(scores[k, n]),
                         "stderr": None if stderr is None or np.isnan(stderr[k, n]) else float(stderr[k, n]),
                         "games": float(games[k, n]) if games[k, n] % 1 else int(games[k, n])})
        for shown, n in enumerate(unjudged):
            if shown < args.top:
                print(f"  {'-':>4}  {names[n][:32]:<32} {'n/a':>9} {'' if stderr is None else 'n/a':>8} {0:7.0f}")
            rows.append({"context": ctx, "rank": None, "item": names[n], "score": None, "stderr": None, "games": 0})
        if len(unjudged):
            more = f" ({len(unjudged) - args.top} not shown)" if len(unjudged) > args.top else ""
            print(f"  {len(unjudged)} item(s) in no judged comparison (only weight-0 rows){more}: no evidence, so "
                  f"not ranked among the judged items; score{'' if stderr is None else ' and s.e.'} n/a")
    if args.top and stderr is not None:
        how = ("PoE-g posterior (W^T D W)^+ times the residual\n  variance sigma^2 = sum w r^2 / "
               "(R - N + components)" if args.method.startswith("poe_gaussian") else "Laplace approximation")
        print(f"\n  s.e. = standard error of the score ({how}); an item with few games has a "
              "large one,\n  so its rank is uncertain: scores within about 2 s.e. of each other are not "
              "clearly ordered.")
    if args.output:
        _write_scores(args.output, rows)

