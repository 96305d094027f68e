"""Pairwise judging speed: jaxrank's PromptJudge against PyTorch (with and without a KV cache) and llama.cpp.

One SummEval article with its candidates (default all 16, so all 240 ordered
comparisons), the SmolLM2-135M-Instruct judge (GGUF), coherence prompt of the
PoE paper (Table 4) in the model's chat template. Every side reads the same
token ids and computes ``p = softmax(logit_A, logit_B)[0]`` from the two
label-token logits at the last position (METHODS.md §1).

(a) jaxrank: ``PromptJudge.compare`` on all comparisons of the context: the
    article's key/value cache is computed once, then once more per candidate in
    position A, and each comparison runs only candidate B and the question,
    in batches cut where they pad least (``plan_batches``). Timed on a first call (including
    compilation) and on repeated calls (steady state). Float32 weights
    (dequantised from the GGUF's Q4_1 blocks).
(b) PyTorch with the KV cache (``benchmarks/judge_peers.py``,
    ``TorchJudge.cached``): transformers' ``LlamaModel`` with the same
    dequantised float32 weights, batched the same way (prefix once, A once per
    A, right-padded B batches of ``--batch-size`` against the expanded A cache,
    attention mask and position ids), ``torch.inference_mode``.
(c) PyTorch without a cache (``TorchJudge.full_prompt``): one forward pass of the
    whole prompt per comparison, on ``--baseline-comparisons`` of them.
(d) llama.cpp (``llama-cpp-python``, when it is installed): the GGUF file
    itself, its quantised Q4_1 kernels; prefix once, KV cache rewound to the
    prefix per A and to prefix + A per comparison.

The peers' OpenMP threads wait passively (``OMP_WAIT_POLICY=PASSIVE`` unless
set) and each peer runs with 1 thread or all cores, whichever was faster on a
few comparisons (on a shared machine spinning OpenMP threads cost 3-5x).
The timed sides run interleaved, ``--repeats`` times, each repeat with the
machine's load average; reported are the median rate and its range, and the
ratio jaxrank / peer per repeat (median, range), and each side's process CPU time
per comparison (all threads) with the peer / jaxrank ratio of it. A profile of one steady jaxrank
call splits its time into the prefill of the context, the A parts, the B batches,
the projection and host work, with real and padded token counts, the seconds
padding costs (estimated: a stage's seconds times its padded share) and the
B tokens PyTorch's batches run. Writes ``benchmarks/results/judge_speed.md``.

    python benchmarks/judge_speed.py [--candidates 16] [--article 0] [--batch-size 8]
                                     [--repeats 3] [--baseline-comparisons 24] [--answer-prefix auto] [--smoke]

The judge reads its labels after the answer prefix the model itself writes (``--answer-prefix auto``,
:meth:`PromptJudge.prepare`; SmolLM2 answers "Summary A ..."): without it the labels held ~2% of the
answer, so ``p`` compared answers the model hardly gives. The labels' share of the answer is printed.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")    # before torch / llama.cpp load their OpenMP runtime
sys.path.insert(0, str(Path(__file__).parent))
from judge_peers import LlamaCppJudge, TorchJudge, llama_cpp_unavailable  # noqa: E402


def load_now() -> str:
    """The 1/5/15-minute load averages (as ``uptime`` prints them)."""
    return "load %.2f, %.2f, %.2f" % os.getloadavg()


class TimedModel:
    """Wraps a ``LlamaModel``: wall time, calls and real / padded tokens per stage of the judge's path.

    Stages: ``prefix`` (``prefill``), ``per-A`` (``extend(update=True)``),
    ``B batches`` (``extend``), ``projection`` (``logits_at``). Each call is
    waited for (``block_until_ready``) so its time is its own.
    """

    def __init__(self, model):
        import jax

        self._model, self._jax = model, jax
        self.seconds = collections.Counter()
        self.calls = collections.Counter()
        self.real = collections.Counter()
        self.padded = collections.Counter()
        self.shapes: set = set()

    def __getattr__(self, name):
        return getattr(self._model, name)

    def _timed(self, stage, fn, *a, ids=None, mask=None, **kw):
        t0 = time.perf_counter()
        out = self._jax.block_until_ready(fn(*a, **kw))
        self.seconds[stage] += time.perf_counter() - t0
        self.calls[stage] += 1
        if ids is not None:
            self.padded[stage] += int(np.prod(np.shape(ids)))
            self.real[stage] += real_tokens(ids, mask)
            self.shapes.add((stage, np.shape(ids)))
        return out

    def prefill(self, ids, mask=None, **kw):
        return self._timed("prefix", self._model.prefill, ids, mask, ids=ids, mask=mask, **kw)

    def extend(self, cache, ids, mask=None, *, update=False, **kw):
        return self._timed("per-A" if update else "B batches", self._model.extend, cache, ids, mask,
                           ids=ids, mask=mask, update=update, **kw)

    def logits_at(self, *a, **kw):
        return self._timed("projection", self._model.logits_at, *a, **kw)


def prepared_judge(lm, template, context, candidates, *, batch_size: int, answer_prefix: str = "auto"):
    """The benchmarked ``PromptJudge`` with its answer prefix resolved on this context (``"auto"``: the
    words the model writes before the label, :meth:`PromptJudge.prepare`), so the peers read the same ids."""
    from jaxrank.judges.pairwise import PromptJudge

    judge = PromptJudge(lm, template, batch_size=batch_size, answer_prefix=answer_prefix)
    with warnings.catch_warnings():           # the choice is reported in the result's header
        warnings.simplefilter("ignore", UserWarning)
        judge.prepare(context, candidates)
    return judge


def real_tokens(ids, mask) -> int:
    """Unmasked tokens of the rows a batch really holds: trailing rows equal to row 0 (ids and mask) are
    the judge's filler copies (``_forward.padded``) and count as padding, not as real tokens."""
    ids, mask = np.asarray(ids), np.asarray(mask)
    k = len(ids)
    while k > 1 and np.array_equal(ids[k - 1], ids[0]) and np.array_equal(mask[k - 1], mask[0]):
        k -= 1
    return int(mask[:k].sum())


def stats(values) -> str:
    v = np.asarray(values, float)
    return f"{np.median(v):.3f} [{v.min():.3f}-{v.max():.3f}]" if len(v) > 1 else f"{v[0]:.3f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--judge", default="smollm2-135m")
    ap.add_argument("--article", type=int, default=0, help="SummEval article (position)")
    ap.add_argument("--candidates", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--baseline-comparisons", type=int, default=24,
                    help="comparisons the no-cache PyTorch loop runs per repeat (it is the slow side)")
    ap.add_argument("--no-llama-cpp", action="store_true", help="leave llama.cpp out even when installed")
    ap.add_argument("--smoke", action="store_true", help="3 candidates, one repeat, no-cache loop on 2, peers on all cores")
    ap.add_argument("--answer-prefix", default="auto",
                    help="the judge's answer prefix: 'auto' (found from the model's answers, the default), or the "
                         "words themselves ('' for none)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.smoke:
        args.candidates, args.repeats = min(args.candidates, 3), 1
        args.baseline_comparisons = min(args.baseline_comparisons, 2)

    import jax

    from jaxrank.data import load_dataset
    from jaxrank.models.loading import load_model
    from jaxrank.judges.pairwise import PromptJudge
    from jaxrank.judges.prompts import pairwise_template
    from jaxrank.assessment.run import contexts_of

    cs = contexts_of(load_dataset("summeval"), aspect="coherence", contexts=[args.article],
                     max_candidates=args.candidates)
    context, cands = cs.texts[0], cs.candidates[0]
    n = len(cands)
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    lm = load_model(args.judge)
    template = pairwise_template("summeval", "coherence")
    judge = prepared_judge(lm, template, context, cands, batch_size=args.batch_size,
                           answer_prefix=args.answer_prefix)
    if not all(len(x) == 1 for x in judge.reading.ids):
        raise SystemExit(f"the peers read one token per label; this template's labels are {judge.reading.texts}")
    labels = np.array([judge.reading.ids[0][0], judge.reading.ids[1][0]], np.int32)

    lines = []
    say = lambda s="": (print(s, flush=True), lines.append(s))
    say(f"# Judge speed: {lm.name}, SummEval article {cs.ids[0]}, {n} candidates, {len(i)} comparisons")
    say()
    say("Command: `python benchmarks/judge_speed.py " + " ".join(sys.argv[1:] if argv is None else argv) + "`")
    say()
    say(f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores (shared with other jobs), jax {jax.__version__}; "
        f"jaxrank weights {lm.model.weights()['wq'].dtype} (dequantised from the GGUF); batch size {args.batch_size}.")
    say(f"Answer prefix {judge.template.answer_prefix!r} (--answer-prefix {args.answer_prefix!r}), labels read as "
        f"{judge.reading.texts!r} (token ids {labels.tolist()}); every side reads these ids.")

    t0 = time.perf_counter()
    first = judge.compare(context, cands, i, j)
    t_first = time.perf_counter() - t0

    peers, notes, runners = {}, [], {}
    nb = min(args.baseline_comparisons, len(i))
    sel = np.random.default_rng(0).permutation(len(i))[:nb]
    try:
        tj = TorchJudge(lm.path, labels, batch_size=args.batch_size)
        import torch
        peers["PyTorch, KV cache, same batching"] = (tj.cached, np.arange(len(i)))
        peers["PyTorch, full prompt per comparison (no cache)"] = (tj.full_prompt, sel)
        runners["PyTorch"] = (tj, tj.cached)
    except ImportError as e:
        notes.append(f"PyTorch rows skipped: {e}.")
    why = "left out (--no-llama-cpp)" if args.no_llama_cpp else llama_cpp_unavailable()
    if why is None:
        lc = LlamaCppJudge(lm.path, labels)
        peers["llama.cpp (llama-cpp-python), KV cache rewound"] = (lc.cached, np.arange(len(i)))
        runners["llama.cpp"] = (lc, lc.cached)
    else:
        notes.append(f"llama.cpp row skipped: {why}.")

    # ------------------------------------------------------------ the peers' best thread count
    chosen = {}
    few = np.flatnonzero(i == i[0])[:args.batch_size]          # one A, one B batch
    for name, (runner, fn) in runners.items():
        options = sorted({1, os.cpu_count() or 1})
        if args.smoke or len(options) == 1:
            continue
        t = collections.defaultdict(list)
        for _ in range(2):
            for n_threads in options:
                runner.set_threads(n_threads)
                t0 = time.perf_counter()
                fn(judge, context, cands, i[few], j[few])
                t[n_threads].append(time.perf_counter() - t0)
        best = min(options, key=lambda k: np.median(t[k]))
        runner.set_threads(best)
        chosen[name] = ", ".join(f"{k} thread(s) {len(few) / np.median(v):.2f}/s" for k, v in t.items())
    if "PyTorch" in runners:
        say(f"PyTorch {torch.__version__}, {tj.threads} thread(s), weights {tj.dtype} (dequantised by transformers).")
    if "llama.cpp" in runners:
        say(f"llama.cpp via llama-cpp-python {lc.version}, {lc.threads} thread(s), the GGUF's own "
            f"quantised weights ({gguf_types(lm.path)}), KV cache f16.")
    say(f"OpenMP threads wait passively (OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}): on a shared "
        "machine spinning threads made both OpenMP peers 3-5x slower.")
    for name, how in chosen.items():
        say(f"{name} thread count chosen on {len(few)} comparisons, best of: {how}.")
    say()

    # ------------------------------------------------------------ timed, interleaved
    rates = collections.defaultdict(list)
    ratios = collections.defaultdict(list)
    cpu = collections.defaultdict(list)           # process CPU ms per comparison (all threads): less load-bound
    cpu_ratios = collections.defaultdict(list)
    agree, loads = {}, []
    for rep in range(args.repeats):
        loads.append(load_now())
        t0, c0 = time.perf_counter(), time.process_time()
        again = judge.compare(context, cands, i, j)
        rj = len(i) / (time.perf_counter() - t0)
        cpu["jaxrank"].append(1e3 * (time.process_time() - c0) / len(i))
        assert np.array_equal(first.p, again.p)
        rates["jaxrank"].append(rj)
        for name, (fn, rows) in peers.items():
            t0, c0 = time.perf_counter(), time.process_time()
            p = fn(judge, context, cands, i[rows], j[rows])
            r = len(rows) / (time.perf_counter() - t0)
            cpu[name].append(1e3 * (time.process_time() - c0) / len(rows))
            cpu_ratios[name].append(cpu[name][-1] / cpu["jaxrank"][-1])
            rates[name].append(r)
            ratios[name].append(rj / r)
            agree[name] = float(np.max(np.abs(p - first.p[rows])))
        print(f"repeat {rep + 1}/{args.repeats}: {loads[-1]}; " +
              ", ".join(f"{k} {v[-1]:.3f}/s" for k, v in rates.items()), flush=True)
    loads.append(load_now())
    if why is None:   # the rewound cache must give what a fresh evaluation of the whole prompt gives
        z = lc.full_prompt_logits(judge.prompt_rows(context, cands, i[:1], j[:1])[0][0])
        rewound = lc.cached(judge, context, cands, i[:1], j[:1])[0]
        notes.append(f"llama.cpp: p from a rewound cache and from the whole prompt in an empty cache differ by "
                     f"{abs(rewound - 1 / (1 + np.exp(z[1] - z[0]))):.1e} (comparison 0); its p differs from "
                     "jaxrank's because it multiplies with the Q4_1 blocks and 8-bit-quantised activations, "
                     "jaxrank and PyTorch with float32 weights dequantised from the same blocks.")

    say(f"Rates in comparisons per second, median [min-max] over {args.repeats} interleaved repeat(s); "
        "ratio = jaxrank's rate / the peer's, per repeat; "
        "CPU ratio = the peer's process CPU time per comparison / jaxrank's, per repeat (all threads of "
        "the process; on a shared machine the load moves it less than the wall time).")
    say()
    say("| | comparisons per repeat | comparisons / s | jaxrank ratio | CPU ms per comparison (all threads) | "
        "jaxrank CPU ratio | max abs p difference vs jaxrank |")
    say("|---|---:|---:|---:|---:|---:|---:|")
    say(f"| jaxrank PromptJudge, first call (incl. compilation) | {len(i)} | {len(i) / t_first:.3f} | | | | |")
    say(f"| jaxrank PromptJudge, steady state | {len(i)} | {stats(rates['jaxrank'])} | 1 | {stats(cpu['jaxrank'])} "
        "| 1 | |")
    for name, (_, rows) in peers.items():
        say(f"| {name} | {len(rows)} | {stats(rates[name])} | {stats(ratios[name])}x | {stats(cpu[name])} | "
            f"{stats(cpu_ratios[name])}x | {agree[name]:.1e} |")
    say()
    say("Machine load (1/5/15 min) before each repeat and at the end: " + "; ".join(loads) + ".")
    for note in notes:
        say(note)

    # ------------------------------------------------------------ where jaxrank's time goes
    timed = TimedModel(lm.model)
    tjudge = PromptJudge(dataclasses.replace(lm, model=timed), template, batch_size=args.batch_size,
                         answer_prefix=judge.template.answer_prefix)
    t0 = time.perf_counter()
    tjudge.compare(context, cands, i, j)
    total = time.perf_counter() - t0
    say()
    say(f"Profile of one steady jaxrank call ({total:.1f} s with every stage waited for; {load_now()}):")
    say()
    say("| stage | calls | real tokens | padded tokens | seconds | share | of which padding (est.) |")
    say("|---|---:|---:|---:|---:|---:|---:|")
    names = {"prefix": "prefill of the context", "per-A": "A parts (context + A, once per A)",
             "B batches": "B batches (B + question, per comparison)", "projection": "projection (label logits)"}
    pad_s = 0.0
    for stage in ("prefix", "per-A", "B batches", "projection"):
        pr, rl = timed.padded[stage], timed.real[stage]
        waste = timed.seconds[stage] * (pr - rl) / pr if pr else 0.0
        pad_s += waste
        say(f"| {names[stage]} | {timed.calls[stage]} | {rl or ''} | {pr or ''} | "
            f"{timed.seconds[stage]:.2f} | {timed.seconds[stage] / total:.0%} | "
            f"{f'{waste:.2f} s' if pr else ''} |")
    host = total - sum(timed.seconds.values())
    say(f"| host (tokenising, grouping, padding, copies) | | | | {host:.2f} | {host / total:.0%} | |")
    real, padded = sum(timed.real.values()), sum(timed.padded.values())
    say()
    say(f"Padding: {padded} tokens run for {real} real ({padded / real - 1:.0%} extra), about {pad_s:.1f} s "
        f"({pad_s / total:.0%}) of the call if a padded token costs what a real one does; "
        f"{len(timed.shapes)} distinct (stage, shape) programs; compilation and first-call work "
        f"about {t_first - len(i) / np.median(rates['jaxrank']):.1f} s (first call minus the median steady call).")
    b_pad = timed.padded["B batches"]
    say(f"B stage: {1e3 * timed.seconds['B batches'] / b_pad:.2f} ms per padded token (the whole call "
        f"{1e3 * total / padded:.2f} ms per padded token); PyTorch's B batches (rows padded to their batch's longest "
        f"row, no buckets) run {torch_b_tokens(judge, context, cands, i, j, args.batch_size)} tokens for the "
        f"{timed.real['B batches']} real ones.")
    for name in peers:
        r = float(np.median(ratios[name]))
        say(f"- {name}: " + (f"jaxrank is {r:.2f}x faster." if r >= 1 else
                             f"jaxrank is {1 / r:.2f}x slower: it needs {1 / r:.2f}x its steady rate to match."))
    mass = np.asarray(first.label_mass)
    say(f"Judge: P(A) = {float(np.mean(first.p > 0.5)):.3f}, mean p = {float(np.mean(first.p)):.3f}; the labels "
        f"hold {np.median(mass):.1%} of the model's answer (median; min {mass.min():.1%}) with answer prefix "
        f"{judge.template.answer_prefix!r}.")
    out = Path(args.out) if args.out else Path(__file__).parent / "results" / \
        ("judge_speed_smoke.md" if args.smoke else "judge_speed.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


def torch_b_tokens(judge, context, candidates, i, j, batch_size) -> int:
    """Tokens PyTorch's KV-cache judge runs in its B batches (``judge_peers.TorchJudge.cached``: each A's
    rows sorted by length, chunks of ``batch_size`` padded to their longest row)."""
    from judge_peers import comparison_groups

    _, groups = comparison_groups(judge, context, candidates, i, j)
    total = 0
    for _, rows in groups:
        lens = sorted(len(b) for _, b in rows)
        for s in range(0, len(lens), batch_size):
            chunk = lens[s:s + batch_size]
            total += len(chunk) * chunk[-1]
    return total


def gguf_types(path) -> str:
    """Tensor types of a GGUF file with their counts (``Q4_1 x 211, F32 x 61``), via the ``gguf`` package."""
    try:
        from gguf import GGUFReader
    except ImportError:
        return "types unknown: the gguf package is missing"
    c = collections.Counter(t.tensor_type.name for t in GGUFReader(str(path)).tensors)
    return ", ".join(f"{k} x {v}" for k, v in c.most_common())


if __name__ == "__main__":
    main()
