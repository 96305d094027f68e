"""Pairwise judging at real model sizes on an accelerator: comparisons/s, tokens/s and MFU.

The GPU machine has no package registry and takes little data along, so the
judges carry **random weights with real configurations** (the numbers of a
comparison are meaningless; their cost is real):

* ``qwen2.5-1.5b``: the registry's Qwen2.5-Coder-1.5B-Instruct configuration,
  read from its GGUF (28 layers, hidden 1536, 12 query / 2 key-value heads,
  MLP 8960);
* ``llama-3-8b``: Meta-Llama-3-8B's ``config.json`` (32 layers, hidden 4096,
  32 / 8 heads, MLP 14336, rope theta 500,000), with the Qwen2.5 tokenizer's
  vocabulary (151,936 rows instead of 128,256: the judge computes the logits
  of the two label words only, so this changes memory, not FLOPs).

Each judge is the unchanged :class:`jaxrank.PromptJudge` (bfloat16 weights,
the PoE coherence prompt in the Qwen2.5 chat template) on real SummEval
articles: all ``N (N - 1)`` ordered comparisons of 16 summaries per article
(both orders, in one call per article), the article's key/value cache computed
once, candidate A's once per A, candidate B and the question in batches of
``--batch-size``. A first pass over the articles compiles every shape they
need (its time per article is reported apart: on an H100 it was 40-65 s, XLA
compiling each new padded length); ``--passes`` more passes are timed, one
``compare`` call per article, and the tables give the median and [min, max].

Counted per article:

* *model tokens*: the real (unpadded) tokens the model runs (the prefix
  once, each A part once, each comparison's B part); *prompt tokens*: the
  tokens of all the comparisons' full prompts, what a judge without a cache reads;
* *model FLOPs* of those real tokens: ``2 x`` the matrix parameters per token
  (embedding and unused vocabulary rows excluded) plus attention
  ``4 x layers x query width x visible keys`` (causal, over the real cache);
* **MFU** = model FLOPs / time / the device's dense bfloat16 peak (989.4
  TFLOP/s for an H100 SXM or H200; ``--peak-tflops`` for others). Padding
  (bucketed lengths, batch rows) is work the device does but not counted.

Setup, once, on the machine with the models (writes the bundle that travels,
about 11 MB: tokenizer, the 1.5B configuration, 8 SummEval articles)::

    python benchmarks/judge_gpu.py --make-bundle .gpu

On the accelerator::

    python benchmarks/judge_gpu.py --bundle .gpu [--models qwen2.5-1.5b,llama-3-8b]
        [--articles 2] [--passes 2] [--batch-size 16] [--out DIR]

``--layers K`` keeps only the first K layers (a quick check of the script on a CPU).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import re
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LLAMA3_8B = dict(model_type="llama", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-5,
                 rope_theta=500000.0, max_position_embeddings=8192, tie_word_embeddings=False,
                 hidden_act="silu")
"""Meta-Llama-3-8B's config.json (vocab_size set from the tokenizer below)."""

PEAK_BF16_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}
"""Dense bfloat16 tensor-core peaks (NVIDIA data sheets, SXM parts)."""


def make_bundle(out: Path, articles: int = 8):
    """Tokenizer, the qwen2.5-1.5b configuration and ``articles`` SummEval articles, into ``out``."""
    from jaxrank.data import load_dataset
    from jaxrank.models import gguf, registry

    out.mkdir(parents=True, exist_ok=True)
    p = registry.resolve("qwen2.5-1.5b")
    meta, tensors = gguf.read_gguf(p)
    cfg = gguf.gguf_config(meta, [t.name for t in tensors])
    tok = gguf.tokenizer_from_gguf(meta, p)
    tok.save_pretrained(out / "tokenizer")
    keep = {k: v for k, v in cfg.items() if isinstance(v, (int, float, str, bool, type(None)))}
    json.dump({"config": keep, "chat_template": meta.get("tokenizer.chat_template"),
               "eos_ids": [int(x) for x in gguf.special_tokens(meta)["eos_ids"]],
               "pad": getattr(tok, "pad_token_id", None)}, open(out / "qwen2.5-1.5b.json", "w"), indent=1)
    ctx: dict = {}
    for r in load_dataset("summeval"):
        ctx.setdefault(r["context_id"], {"id": r["context_id"], "context": r["context"], "candidates": []})
        ctx[r["context_id"]]["candidates"].append(r["candidate"])
    json.dump(list(ctx.values())[:articles], open(out / "summeval.json", "w"))
    print(f"wrote {out}: tokenizer, qwen2.5-1.5b.json, summeval.json ({articles} articles)")


def random_judge(name, cfg_dict, bundle, *, batch_size, layers=None, seed=0, batch_cost="auto",
                 attention="einsum", mesh=None):
    """A :class:`jaxrank.PromptJudge` on a bfloat16 Llama-family model with random weights drawn on the device."""
    import jax
    import jax.numpy as jnp
    from transformers import AutoTokenizer

    from jaxrank.judges import PromptJudge
    from jaxrank.judges.prompts import pairwise_template
    from jaxrank.models.llama import LlamaConfig, LlamaModel, parameter_shapes
    from jaxrank.models.loading import LoadedModel

    info = json.load(open(bundle / "qwen2.5-1.5b.json"))
    tok = AutoTokenizer.from_pretrained(bundle / "tokenizer")
    cfg_dict = dict(cfg_dict)
    cfg_dict.setdefault("vocab_size", info["config"]["vocab_size"])
    if layers:
        cfg_dict["num_hidden_layers"] = int(layers)
    config = dataclasses.replace(LlamaConfig.from_hf(cfg_dict), attention_kernel=attention)
    key = jax.random.key(seed)
    params = {}
    for k, (pname, shape) in enumerate(sorted(parameter_shapes(config).items())):
        if pname.endswith("norm"):
            params[pname] = jnp.ones(shape, jnp.bfloat16)
        else:
            params[pname] = 0.02 * jax.random.normal(jax.random.fold_in(key, k), shape, jnp.bfloat16)
    model = LlamaModel(config, dtype=jnp.bfloat16, params=params)
    del params
    pad = info["pad"] if isinstance(info["pad"], int) else info["eos_ids"][0]
    lm = LoadedModel(model, config, tok, info["chat_template"], name, config.model_type, bundle,
                     tuple(info["eos_ids"]), pad)
    return PromptJudge(lm, pairwise_template("summeval", "coherence"), batch_size=batch_size,
                       batch_cost=batch_cost, mesh=mesh), config


def flops_and_tokens(judge, config, context, candidates, i, j):
    """``(model FLOPs, model tokens, prompt tokens, padded tokens, forward calls)`` of one ``compare`` call."""
    from jaxrank.judges.pairwise import bucket, plan_batches

    pairs = [judge.token_ids(context, candidates[a], candidates[b]) for a, b in zip(i, j)]
    d, hq = config.hidden_size, config.num_attention_heads * config.head_dim
    hk, f, nl = config.num_key_value_heads * config.head_dim, config.intermediate_size, config.num_hidden_layers
    per_token = 2 * nl * (d * hq + 2 * d * hk + hq * d + 3 * d * f)
    attn = lambda visible: 4 * nl * hq * visible        # QK^T and AV for one query token
    prefix = pairs[0][0]
    P = len(prefix)
    flops = P * per_token + sum(attn(t + 1) for t in range(P))
    tokens, padded = P, bucket(P)
    alen = bucket(max(len(x) for _, x, _ in pairs))
    groups: dict = {}
    for r, (_, a, b) in enumerate(pairs):
        if tuple(a) not in groups:
            flops += len(a) * per_token + sum(attn(P + t + 1) for t in range(len(a)))
            tokens += len(a)
        groups.setdefault(tuple(a), []).append(len(b))
        flops += len(b) * per_token + sum(attn(P + len(a) + t + 1) for t in range(len(b)))
        tokens += len(b)
    # the judge's plan (PromptJudge._logits_decoder): A parts `together` at a time, their B parts' batches
    subs = judge.reading.rows()
    longest = bucket(max(len(b) for _, _, b in pairs) + max(len(x[0]) for x in subs))
    size = judge.rows_per_call(bucket(P) + alen, longest)
    together = max(1, size // max(1, len(pairs) // len(groups)))
    lists = list(groups.values())
    calls = 1
    for g0 in range(0, len(lists), together):
        padded += together * alen
        calls += 1
        lens = sorted(x for g in lists[g0:g0 + together] for x in g)
        for start, stop, rows in plan_batches(lens, size, batch_cost=judge.batch_cost):
            padded += rows * bucket(lens[stop - 1])     # rows rounded up, lengths to the bucket
            calls += 1
    prompt = sum(len(p) + len(a) + len(b) for p, a, b in pairs)
    return flops, tokens, prompt, padded, calls, size


KERNEL_KINDS = (("fused attention", r"flash|fmha|cudnn|attn|sdpa"),
                ("matrix products", r"gemm|cutlass|xmma|nvjet|cublas|sm90_|sm80_|wgmma|hgmma|custom-call|dot"),
                ("copies and transposes", r"copy|memcpy|memset|transpose|concatenate|dynamic.update|slice"),
                ("fusions (elementwise, softmax, norms)", r"fusion|loop_|input_|reduce|convert|broadcast"))


def kernel_summary(trace_dir: Path, top: int = 25) -> dict:
    """Device time per kernel name from a ``jax.profiler`` perfetto trace: totals by kind and the top kernels."""
    files = sorted(trace_dir.rglob("*.trace.json.gz")) + sorted(trace_dir.rglob("perfetto_trace.json.gz"))
    if not files:
        return {"error": f"no trace file under {trace_dir}"}
    ev = json.load(gzip.open(files[-1]))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    names = {e["pid"]: e.get("args", {}).get("name", "") for e in ev
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    gpu = {pid for pid, n in names.items() if re.search(r"GPU|gpu|stream|device", n) and "host" not in n.lower()}
    per: dict = {}
    for e in ev:
        if e.get("ph") == "X" and e.get("pid") in gpu and "dur" in e:
            t, c = per.get(e["name"], (0.0, 0))
            per[e["name"]] = (t + e["dur"] / 1e3, c + 1)
    total = sum(t for t, _ in per.values())
    kinds: dict = {}
    for n, (t, _) in per.items():
        k = next((k for k, rx in KERNEL_KINDS if re.search(rx, n, re.I)), "other")
        kinds[k] = kinds.get(k, 0.0) + t
    top_k = sorted(per.items(), key=lambda kv: -kv[1][0])[:top]
    return {"device_ms": total, "processes": {str(p): names[p] for p in gpu},
            "by_kind_ms": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
            "top": [{"kernel": n[:160], "ms": t, "count": c} for n, (t, c) in top_k]}


def peak_tflops(kind: str, given: float | None) -> float | None:
    if given:
        return given
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in kind), None)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--make-bundle", type=Path, default=None, help="write the travelling bundle here and stop")
    ap.add_argument("--bundle", type=Path, default=Path(".gpu"))
    ap.add_argument("--models", default="qwen2.5-1.5b,llama-3-8b",
                    help="comma-separated NAME[:ATTENTION[:BATCH]] (attention 'einsum' or 'fused'; batch defaults "
                         "to --batch-size)")
    ap.add_argument("--articles", type=int, default=2, help="articles (each compiled by a first, untimed pass)")
    ap.add_argument("--passes", type=int, default=2, help="timed passes over the articles after the first")
    ap.add_argument("--batch-size", default="240", help="rows per call, or 'auto' (PromptJudge's default)")
    ap.add_argument("--batch-cost", default="auto", help="PromptJudge(batch_cost=): 'auto' or tokens per call")
    ap.add_argument("--layers", type=int, default=None, help="keep only the first K layers (quick check)")
    ap.add_argument("--candidates", type=int, default=None, help="the first K summaries only (quick check)")
    ap.add_argument("--peak-tflops", type=float, default=None)
    ap.add_argument("--mesh", default=None, help="DATA,MODEL: judge on a mesh of that shape (PromptJudge(mesh=))")
    ap.add_argument("--profile", action="store_true",
                    help="after the timed passes, trace one more call and write the device time per kernel")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args(argv)
    if args.make_bundle:
        return make_bundle(args.make_bundle)

    import jax

    dev = jax.devices()[0]
    kind = getattr(dev, "device_kind", str(dev))
    peak = peak_tflops(kind, args.peak_tflops)
    data = json.load(open(args.bundle / "summeval.json"))
    info = json.load(open(args.bundle / "qwen2.5-1.5b.json"))
    configs = {"qwen2.5-1.5b": info["config"], "llama-3-8b": LLAMA3_8B}
    lines = [f"# Pairwise judging at real sizes: {kind}",
             "",
             f"jax {jax.__version__} ({dev.platform}), {platform.python_version()}; `benchmarks/judge_gpu.py`: random "
             "bfloat16 weights with real configurations, the unchanged `PromptJudge` on real SummEval articles, "
             "all 240 ordered comparisons of 16 summaries per article (both orders), "
             f"batch cost {args.batch_cost}"
             + (f", first {args.layers} layers only" if args.layers else "") + ". Median [min, max] over "
             f"{args.passes} timed passes over {args.articles} articles after a first pass that compiles every shape. "
             + (f"MFU against {peak} TFLOP/s (dense bf16 peak)." if peak else "MFU: unknown peak for this device."),
             "",
             "| judge | params (matrix, B) | comparisons/s | model tokens/s | prompt tokens/s (cache-free equivalent) "
             "| TFLOP/s | MFU | padded / real tokens | forward calls per article | first call per article (compiles), s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = []
    profiles = {}
    args.out.mkdir(parents=True, exist_ok=True)
    mesh = None
    if args.mesh:
        shape = tuple(int(x) for x in args.mesh.split(","))
        mesh = jax.make_mesh(shape, ("data", "model"))
    for spec in args.models.split(","):
        parts = spec.split(":")
        name = parts[0]
        attention = parts[1] if len(parts) > 1 else "einsum"
        batch = parts[2] if len(parts) > 2 else args.batch_size
        batch = batch if batch == "auto" else int(batch)
        label = name + ("" if spec == name else f", {attention} attention, batch {batch}") + \
            (f", mesh {args.mesh}" if args.mesh else "")
        t0 = time.perf_counter()
        try:
            judge, config = random_judge(name, configs[name], args.bundle, batch_size=batch,
                                         layers=args.layers, attention=attention, mesh=mesh,
                                         batch_cost=args.batch_cost if args.batch_cost == "auto"
                                         else int(args.batch_cost))
        except Exception as e:                       # one variant failing must not lose the others
            print(f"{label}: failed to build: {type(e).__name__}: {e}", flush=True)
            continue
        jax.block_until_ready(judge.lm.model.weights())
        t_init = time.perf_counter() - t0
        d, hq = config.hidden_size, config.num_attention_heads * config.head_dim
        hk, f, nl = config.num_key_value_heads * config.head_dim, config.intermediate_size, config.num_hidden_layers
        mparams = nl * (d * hq + 2 * d * hk + hq * d + 3 * d * f) / 1e9
        per = []
        firsts = []
        arts = data[:args.articles]
        for rep, art in [(r, a) for r in range(1 + args.passes) for a in arts]:
            cand = art["candidates"][:args.candidates]
            n = len(cand)
            i, j = np.nonzero(~np.eye(n, dtype=bool))
            t0 = time.perf_counter()
            try:
                out = judge.compare(art["context"], cand, i, j)
            except Exception as e:
                print(f"{label}: failed: {type(e).__name__}: {str(e)[:2000]}", flush=True)
                break
            dt = time.perf_counter() - t0
            assert np.all(np.isfinite(out.p)), "non-finite probability"
            if rep == 0:      # the first pass compiles every shape of the article
                firsts.append(dt)
                print(f"{label} article {art['id']}, first call: {dt:.1f} s", flush=True)
                continue
            fl, tok, prompt, padded, calls, size = flops_and_tokens(judge, config, art["context"], cand, i, j)
            per.append(dict(seconds=dt, comparisons=len(i), flops=fl, tokens=tok, prompt=prompt, padded=padded,
                            calls=calls, rows=size))
            print(f"{label} article {art['id']}: {len(i)} comparisons in {dt:.3f} s, "
                  f"{fl / dt / 1e12:.1f} TFLOP/s", flush=True)
        if not per:
            continue
        if args.profile:
            art = arts[0]
            cand = art["candidates"][:args.candidates]
            i, j = np.nonzero(~np.eye(len(cand), dtype=bool))
            tdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"jaxrank-trace-{len(profiles)}"
            try:
                with jax.profiler.trace(str(tdir), create_perfetto_trace=True):
                    t0 = time.perf_counter()
                    judge.compare(art["context"], cand, i, j)
                    wall = time.perf_counter() - t0
                prof = kernel_summary(tdir)
                prof["wall_ms"] = 1e3 * wall
            except Exception as e:
                prof = {"error": f"{type(e).__name__}: {e}"}
            profiles[label] = prof
            print(f"{label} profile: " + json.dumps({k: v for k, v in prof.items() if k != "top"}), flush=True)
            for row in prof.get("top", [])[:12]:
                print(f"  {row['ms']:9.1f} ms  x{row['count']:<5} {row['kernel'][:110]}", flush=True)
            (args.out / "judge_gpu_profile.json").write_text(json.dumps(profiles, indent=1))
        cps = [r["comparisons"] / r["seconds"] for r in per]
        tps = [r["tokens"] / r["seconds"] for r in per]
        pps = [r["prompt"] / r["seconds"] for r in per]
        tf = [r["flops"] / r["seconds"] / 1e12 for r in per]
        fmt = lambda v, f="{:.0f}": f"{f.format(np.median(v))} [{f.format(min(v))}, {f.format(max(v))}]"
        mfu = fmt([100 * x / peak for x in tf], "{:.1f}") + " %" if peak else "-"
        pad = np.sum([r["padded"] for r in per]) / np.sum([r["tokens"] for r in per])
        ncalls = float(np.mean([r["calls"] for r in per]))
        chosen = sorted({r["rows"] for r in per})
        if batch == "auto":
            label += f" ({'/'.join(map(str, chosen))} rows)"
        lines.append(f"| {label} | {mparams:.2f} | {fmt(cps, '{:.0f}')} | {fmt(tps)} | {fmt(pps)} | "
                     f"{fmt(tf, '{:.1f}')} | {mfu} | {pad:.2f} | {ncalls:.0f} | {fmt(firsts, '{:.0f}')} |")
        rows.append(dict(judge=name, attention=attention, device=kind, batch_size=batch, batch_cost=judge.batch_cost,
                         rows_per_call=chosen, forward_calls=ncalls, layers=config.num_hidden_layers,
                         comparisons_per_s=float(np.median(cps)), model_tokens_per_s=float(np.median(tps)),
                         prompt_tokens_per_s=float(np.median(pps)), tflops=float(np.median(tf)),
                         mfu=float(np.median(tf)) / peak if peak else None, padded_ratio=float(pad),
                         first_call_s=float(np.median(firsts)), init_s=t_init,
                         mean_prompt_tokens=float(np.mean([r["prompt"] / r["comparisons"] for r in per]))))
        del judge
        write(args.out, dev.platform, lines, rows)     # after every judge: a later one may run out of time


def write(out, platform_name, lines, rows):
    out.mkdir(parents=True, exist_ok=True)
    stem = "judge_gpu" + ("" if platform_name == "gpu" else f"_{platform_name}")
    tail = ["", "Mean prompt length per comparison: "
            + ", ".join(f"{r['judge']} {r['mean_prompt_tokens']:.0f} tokens" for r in rows) + "."]
    (out / f"{stem}.md").write_text("\n".join(lines + tail) + "\n")
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines + tail))
    print(f"wrote {out / (stem + '.md')}", flush=True)


if __name__ == "__main__":
    main()
