"""Variants of the LLM judge's forward passes side by side with PyTorch, in one process (issue 33).

The same ``PromptJudge`` (SmolLM2-135M, SummEval article 0, coherence template, batch size 8) run as
several variants, interleaved with PyTorch's KV-cache judge (``judge_peers.TorchJudge.cached``, 1
thread) in every repeat:

* ``--costs``: ``batch_cost`` values (0, the CPU default: :func:`~jaxrank.judges.pairwise.plan_batches`
  cuts each A's rows where they pad least; a large cost: few full batches);
* ``--core NAME=PATH``: the decoder's jitted functions (``_prefill``, ``_extend``, ``_project``) taken from
  another copy of ``jaxrank/models/_llama_core.py``, e.g. the file before a change
  (``git show COMMIT:jaxrank/models/_llama_core.py > /tmp/core_before.py``), at the first cost;
* ``--a-costs``: ``_forward.A_BATCH_COST`` values (how the A parts are planned on a CPU: ``none``, one A a
  call padded to the longest A's bucket as before issue 33; a number, the A's cut by ``plan_batches`` with
  that cost per call), at the first cost;
* ``--b-plans NAME=COST:BUCKETS``: the B plan on a CPU (``_forward.CPU_CALL_COST`` and
  ``_forward.CPU_BUCKETS``, ``fine`` or ``coarse``), e.g. ``before=0:coarse now=32:fine``, at the first cost;
* ``--xla NAME=JSON``: the current decoder compiled with XLA options (``jax.jit(compiler_options=)``,
  per program, nothing global), e.g. ``eigen1='{"xla_cpu_multi_thread_eigen": false}'``.

For each variant: max ``|p - p(first variant)|``, the B stage's calls, real and padded tokens and seconds
(``judge_speed.TimedModel``), the rate (median, range) and its ratio to PyTorch per repeat, and the
process's CPU seconds per call (all threads), a measure less sensitive to the machine's load than wall
time. Prints only (the figures and their loads are kept by hand in
``benchmarks/results/judge_speed.notes.md``).

    python benchmarks/judge_plan_check.py [--candidates 8] [--costs 0] [--core before=/tmp/core_before.py]
                                          [--a-costs none,0,256] [--xla NAME=JSON] [--repeats 2] [--smoke]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import inspect
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


class CoreModel:
    """A ``LlamaModel`` whose ``prefill``, ``extend`` and ``logits_at`` run a given decoder core module's
    jitted functions, re-jitted with ``compiler_options`` (``None``: XLA's defaults)."""

    def __init__(self, model, core, compiler_options=None):
        import jax

        def jit(f, static):
            return jax.jit(f.__wrapped__ if hasattr(f, "__wrapped__") else f, static_argnames=static,
                           compiler_options=compiler_options)

        self._model = model
        self._prefill = jit(core._prefill, ("cfg", "capacity", "cache_dtype"))
        self._extend = jit(core._extend, ("cfg", "update", "remat", "last_only") if "last_only" in
                           inspect.signature(core._extend).parameters else ("cfg", "update", "remat"))
        self._project = jit(core._project, ("softcap",))
        self._last_only = "last_only" in inspect.signature(core._extend).parameters

    def __getattr__(self, name):
        return getattr(self._model, name)

    def prefill(self, ids, mask=None, *, capacity=None, cache_dtype=None):
        m = self._model
        cap = np.shape(ids)[1] if capacity is None else int(capacity)
        dt = None if cache_dtype is None else np.dtype(cache_dtype).name
        return self._prefill(m.config, m.weights(), np.asarray(ids, np.int32), np.asarray(mask, bool), cap, dt)

    @property
    def EXTEND_LAST_ONLY(self):          # noqa: N802  (LlamaModel's flag: a core before it has no last_only)
        return self._last_only

    def extend(self, cache, ids, mask=None, *, update=False, **kw):
        m = self._model
        return self._extend(m.config, m.weights(), cache, np.asarray(ids, np.int32), np.asarray(mask, bool), update,
                            **kw)

    def logits_at(self, hidden, positions=None, token_ids=None):
        m = self._model
        return self._project(m.weights(), hidden, None if positions is None else np.asarray(positions, np.int32),
                             None if token_ids is None else np.asarray(token_ids, np.int32), m.config.final_softcap)


def load_core(path):
    """A copy of ``_llama_core.py`` imported as a module of its own (its relative imports made absolute)."""
    text = Path(path).read_text().replace("from ._quant import", "from jaxrank.models._quant import") \
        .replace("from .llama_config import", "from jaxrank.models.llama_config import")
    name = "core_" + Path(path).stem.replace("-", "_")
    spec = importlib.util.spec_from_loader(name, loader=None)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    exec(compile(text, str(path), "exec"), mod.__dict__)
    return mod


def named(pairs):
    out = {}
    for item in pairs or ():
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--costs", default="0", help="batch_cost values, comma-separated")
    ap.add_argument("--core", action="append", help="NAME=PATH: a copy of _llama_core.py run as a variant")
    ap.add_argument("--xla", action="append", help="NAME=JSON: compiler options of a variant of the current core")
    ap.add_argument("--b-plans", action="append", help="NAME=COST:fine|coarse: CPU_CALL_COST and CPU_BUCKETS")
    ap.add_argument("--a-costs", default=None, help="A_BATCH_COST values ('none' or ints), comma-separated")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="3 candidates, one repeat")
    args = ap.parse_args(argv)
    if args.smoke:
        args.candidates, args.repeats = 3, 1
    costs = [int(x) for x in args.costs.split(",")]

    from judge_peers import TorchJudge
    from judge_speed import TimedModel
    from jaxrank.assessment.run import contexts_of
    from jaxrank.data import load_dataset
    from jaxrank.judges.pairwise import PromptJudge
    from jaxrank.judges.prompts import pairwise_template
    from jaxrank.models import llama
    from jaxrank.models.loading import load_model

    cs = contexts_of(load_dataset("summeval"), aspect="coherence", contexts=[0], max_candidates=args.candidates)
    context, cands = cs.texts[0], cs.candidates[0]
    i, j = np.nonzero(~np.eye(len(cands), dtype=bool))
    lm = load_model("smollm2-135m")
    tpl = pairwise_template("summeval", "coherence")
    from jaxrank.judges import _forward

    a_default = _forward.A_BATCH_COST
    models = {f"batch_cost {c}": (lm.model, c) for c in costs}

    b_default = (_forward.CPU_CALL_COST, _forward.CPU_BUCKETS)
    b_plan = {}
    for name, spec in named(args.b_plans).items():
        c, _, kind = spec.partition(":")
        models[name] = (lm.model, costs[0])
        b_plan[name] = (int(c), {"fine": _forward.CPU_BUCKETS, "coarse": _forward.BUCKETS}[kind or "fine"])
    a_cost = {k: a_default for k in models}
    for x in (args.a_costs.split(",") if args.a_costs else []):
        models[f"A_BATCH_COST {x}"] = (lm.model, costs[0])
        a_cost[f"A_BATCH_COST {x}"] = None if x == "none" else int(x)
    for name, path in named(args.core).items():
        models[name] = (CoreModel(lm.model, load_core(path)), costs[0])
    current = load_core(Path(llama.__file__).with_name("_llama_core.py")) if args.xla else None   # as a file
    for name, opts in named(args.xla).items():
        models[name] = (CoreModel(lm.model, current, json.loads(opts)), costs[0])
    a_cost = {k: a_cost.get(k, a_default) for k in models}
    b_plan = {k: b_plan.get(k, b_default) for k in models}

    def setup(k):
        _forward.A_BATCH_COST = a_cost[k]
        _forward.CPU_CALL_COST, _forward.CPU_BUCKETS = b_plan[k]

    timed = {k: TimedModel(m) for k, (m, _) in models.items()}
    judges = {k: PromptJudge(dataclasses.replace(lm, model=timed[k]), tpl, batch_size=8, batch_cost=c)
              for k, (_, c) in models.items()}
    ref, first = None, next(iter(judges))
    for k, judge in judges.items():                   # first calls: compilation, p agreement
        setup(k)
        t0 = time.perf_counter()
        p = judge.compare(context, cands, i, j).p
        ref = p if ref is None else ref
        print(f"{k}: first call {time.perf_counter() - t0:.1f} s; max |p - p({first})| = "
              f"{float(np.abs(p - ref).max()):.1e}", flush=True)
        timed[k].__init__(timed[k]._model)            # count steady calls only
    reading = judges[first].reading
    tj = TorchJudge(lm.path, np.array([reading.ids[0][0], reading.ids[1][0]], np.int32), batch_size=8)
    tj.set_threads(1)
    rates = {k: [] for k in judges} | {"torch": []}
    cpu = {k: [] for k in rates}
    for _ in range(args.repeats):
        print("load", os.getloadavg(), flush=True)
        for k, judge in judges.items():
            setup(k)
            t0, c0 = time.perf_counter(), time.process_time()
            judge.compare(context, cands, i, j)
            rates[k].append(len(i) / (time.perf_counter() - t0))
            cpu[k].append(time.process_time() - c0)
        t0, c0 = time.perf_counter(), time.process_time()
        setup(first)
        pt = tj.cached(judges[first], context, cands, i, j)
        rates["torch"].append(len(i) / (time.perf_counter() - t0))
        cpu["torch"].append(time.process_time() - c0)
    print("load at the end", os.getloadavg(), f"PyTorch max |p - jaxrank p| = {float(np.abs(pt - ref).max()):.1e}")
    b, n = "B batches", args.repeats
    span = lambda v: f"{np.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]"
    for k in judges:
        t = timed[k]
        print(f"{k}: B calls {t.calls[b] // n}, real {t.real[b] // n}, padded {t.padded[b] // n} "
              f"({t.padded[b] / t.real[b] - 1:.0%} extra), B seconds {t.seconds[b] / n:.1f}, per-A seconds "
              f"{t.seconds['per-A'] / n:.1f}; {span(rates[k])}/s, CPU s per call {span(cpu[k])}; ratio to PyTorch "
              "per repeat " + ", ".join(f"{a / q:.2f}" for a, q in zip(rates[k], rates["torch"])))
    print(f"PyTorch KV cache (1 thread): {span(rates['torch'])}/s, CPU s per call {span(cpu['torch'])}")


if __name__ == "__main__":
    main()
