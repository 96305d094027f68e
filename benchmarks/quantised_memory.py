"""Memory and speed of a judge with weights kept quantised (issue 31).

**Memory.** A Llama of 7B shape (hidden 4096, 32 layers, MLP 11008, 32 heads,
vocabulary 32000; ``--smoke``: 1B shape, hidden 2048, 16 layers, MLP 5504) is
built from *random* GGUF blocks (``Q4_0`` by default) straight into its
quantised parameters, one layer slice at a time (float32 weights are never
made), and runs one judging forward: ``B`` prompts of ``T`` tokens, final
hidden states, the logits of two label tokens at the last position (what
``PromptJudge`` computes). Each run is a fresh subprocess that reports its
resident set (``/proc/self/status``): ``VmRSS`` after importing JAX and
jaxrank (the runtime), the peak ``VmHWM`` while building, and the peak while
compiling and running the forward (``VmHWM`` reset by ``/proc/self/clear_refs``
in between), against the bytes of the quantised parameters. Goal: peak <= 1.3x
the quantised bytes.

**Speed.** The registered SmolLM2-135M GGUF (``Q4_1`` matrices, ``Q8_0``
embedding) judged three ways on the same token ids, in one process,
interleaved rounds: jaxrank with its weights kept quantised, jaxrank with
them dequantised to float32 (the default), and llama.cpp (``llama_cpp.Llama``,
1 and 2 threads: on a loaded machine its 2 threads wait for each other)
evaluating the same prompt from an empty cache. One forward of a
``T``-token prompt, batch 1, and for jaxrank also batch 4; the label logits are
compared across the three.

    python benchmarks/quantised_memory.py [--smoke] [--format Q4_0] [--tokens 64] [--batch 2]
        [--no-memory | --no-speed] [--out results/quantised_memory_speed]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from _report import Report, load, machine, spread

SHAPES = {"7b": dict(hidden_size=4096, num_hidden_layers=32, intermediate_size=11008, num_attention_heads=32,
                     num_key_value_heads=32, vocab_size=32000),
          "1b": dict(hidden_size=2048, num_hidden_layers=16, intermediate_size=5504, num_attention_heads=16,
                     num_key_value_heads=16, vocab_size=32000)}
BLOCK = {"Q4_0": (4, 8), "Q8_0": (8, 0)}     # bits, zero point; 32 weights per float16 scale


def _status() -> dict[str, float]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024 / 1e9
    return out


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child(shape: str, fmt: str, tokens: int, batch: int) -> dict:
    """Build the random quantised model and run one judging forward; the resident-set figures."""
    import jax
    import jax.numpy as jnp

    from jaxrank.models.llama import LlamaConfig, LlamaModel, QuantisedWeight, parameter_shapes

    base = _status()["VmRSS"]
    cfg = LlamaConfig.from_hf({"model_type": "llama", "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
                               **SHAPES[shape]})
    bits, zp = BLOCK[fmt]
    rng = np.random.default_rng(0)

    put = jax.jit(lambda buf, i, x: jax.lax.dynamic_update_index_in_dim(buf, x, i, 0), donate_argnums=0)

    def layer_slices(rows, n):       # one layer's random codes and scales, as NumPy (the file's blocks)
        lo = np.frombuffer(rng.bytes(rows * n * bits // 8), np.uint8 if bits == 4 else np.int8)
        d = (rng.uniform(0.5, 1.5, (rows, n // 32)) * 0.02 / (8 if bits == 4 else 64) /
             np.sqrt(n / 4096)).astype(np.float16)
        return lo.reshape(rows, -1), d

    t0 = time.perf_counter()
    params = {}
    shapes = parameter_shapes(cfg)
    for name, s in sorted(shapes.items(), key=lambda kv: -int(np.prod(kv[1]))):
        if name.endswith("norm"):
            params[name] = jnp.ones(s, jnp.float32)
            continue
        rows, n = s[-2], s[-1]
        if len(s) == 2:
            lo, d = layer_slices(rows, n)
            params[name] = QuantisedWeight(jax.device_put(lo), None, jax.device_put(d), None, None, None,
                                                  bits, zp)
            continue
        lo_buf = jnp.zeros((s[0], rows, n * bits // 8), np.uint8 if bits == 4 else np.int8)
        d_buf = jnp.zeros((s[0], rows, n // 32), jnp.float16)
        for i in range(s[0]):
            lo, d = layer_slices(rows, n)
            lo_buf, d_buf = put(lo_buf, i, lo), put(d_buf, i, d)
        params[name] = QuantisedWeight(lo_buf, None, d_buf, None, None, None, bits, zp)
        del lo_buf, d_buf
    model = LlamaModel(cfg, params=params)
    del params
    build_s = time.perf_counter() - t0
    qbytes = _bytes(model)
    built = _status()
    try:                    # hand freed heap pages (the NumPy slices, compile scratch) back to the system
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    built["trimmed"] = _status()["VmRSS"]
    reset = _reset_peak()

    ids = jnp.asarray(np.random.default_rng(1).integers(0, cfg.vocab_size, (batch, tokens)), jnp.int32)
    labels = jnp.asarray([319, 350], jnp.int32)
    last = jnp.full((batch,), tokens - 1, jnp.int32)

    def judge():
        h = model.hidden(ids)
        return jax.block_until_ready(model.logits_at(h, last, labels))

    t0 = time.perf_counter()
    logits = judge()
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    judge()
    again_s = time.perf_counter() - t0
    fwd = _status()
    return {"shape": shape, "format": fmt, "tokens": tokens, "batch": batch, "quantised_gb": qbytes / 1e9,
            "float32_gb": 4 * sum(int(np.prod(s)) for s in shapes.values()) / 1e9,
            "runtime_rss_gb": base, "build_peak_gb": built["VmHWM"], "after_build_rss_gb": built["VmRSS"], "after_trim_rss_gb": built["trimmed"],
            "forward_peak_gb": fwd["VmHWM"], "peak_reset": reset, "build_s": build_s,
            "first_forward_s": first_s, "forward_s": again_s,
            "finite": bool(np.isfinite(np.asarray(logits)).all()), "load": load()}


def memory(rep: Report, args):
    shape = "1b" if args.smoke else "7b"
    cmd = [sys.executable, __file__, "--child", shape, args.format, str(args.tokens), str(args.batch)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        rep.say(f"The {shape} run failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
        return
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    peak = max(r["build_peak_gb"], r["forward_peak_gb"])
    q = r["quantised_gb"]
    rep.say(f"## Memory: {shape}-shaped Llama, random {r['format']} weights")
    rep.say()
    rep.table(["what", "GB"], [
        ["quantised parameters (codes + float16 scales, norms)", f"{q:.3f}"],
        ["the same parameters in float32 (never built)", f"{r['float32_gb']:.3f}"],
        ["resident after importing JAX and jaxrank (runtime)", f"{r['runtime_rss_gb']:.3f}"],
        ["peak while building the parameters", f"{r['build_peak_gb']:.3f}"],
        ["resident after building", f"{r['after_build_rss_gb']:.3f}"],
        ["resident after building and `malloc_trim(0)`", f"{r['after_trim_rss_gb']:.3f}"],
        [f"peak while compiling and running one judging forward ({r['batch']} x {r['tokens']} tokens)"
         + ("" if r["peak_reset"] else " (peak not reset: includes the build)"), f"{r['forward_peak_gb']:.3f}"],
        ["**peak / quantised bytes** (goal <= 1.3)", f"**{peak / q:.2f}**"],
        ["(peak - runtime) / quantised bytes", f"{(peak - r['runtime_rss_gb']) / q:.2f}"],
    ])
    rep.say(f"Build {r['build_s']:.1f} s; first forward (compiling) {r['first_forward_s']:.1f} s, second "
            f"{r['forward_s']:.1f} s (load {r['load']:.2f}); label logits finite: {r['finite']}.")
    rep.say()
    rep.row(part="memory", **{k: v for k, v in r.items()}, peak_gb=peak, peak_over_quantised=peak / q)


def speed(rep: Report, args):
    import jax
    import jax.numpy as jnp

    from jaxrank.models import load_model, registry

    name = "smollm2-135m"
    try:
        path = registry.resolve(name)
    except FileNotFoundError as e:
        rep.say(f"## Speed\n\nskipped: {e}")
        return
    t0 = time.perf_counter()
    q = load_model(name, weights="quantised")
    tq = time.perf_counter() - t0
    t0 = time.perf_counter()
    f = load_model(name)
    tf = time.perf_counter() - t0
    text = ("Compare the two summaries of the article below and answer A or B. " * 40)
    ids = list(q.tokenizer(text, add_special_tokens=False)["input_ids"])[:args.speed_tokens]
    t = len(ids)
    labels = [q.tokenizer.convert_tokens_to_ids(x) for x in ("A", "B")]
    lab = jnp.asarray(labels, jnp.int32)

    def jr(m, b):
        x = jnp.asarray([ids] * b, jnp.int32)
        last = jnp.full((b,), t - 1, jnp.int32)
        return lambda: np.asarray(jax.block_until_ready(m.model.logits_at(m.model.hidden(x), last, lab)))

    fns = {"jaxrank quantised, batch 1": jr(q, 1), "jaxrank float32, batch 1": jr(f, 1),
           "jaxrank quantised, batch 4": jr(q, 4), "jaxrank float32, batch 4": jr(f, 4)}
    outs = {k: fn() for k, fn in fns.items()}                  # compile
    lc = None
    try:
        import llama_cpp

        for threads in args.cpp_threads:
            llm = llama_cpp.Llama(model_path=str(path), n_ctx=max(512, t + 8), n_batch=max(512, t + 8),
                                  n_ubatch=512, n_threads=threads, n_threads_batch=threads, logits_all=False,
                                  verbose=False)

            def cpp(llm=llm):   # the whole prompt from an empty cache; the last token's logits (the only row)
                llm.reset()
                llm.eval(ids)
                row = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
                return np.ctypeslib.as_array(row, shape=(llm.n_vocab(),))[labels].astype(np.float64)
            key = f"llama.cpp (Q4_1 kernels), {threads} thread{'s' if threads > 1 else ''}, batch 1"
            outs[key] = cpp()
            fns[key] = cpp
        lc = getattr(llama_cpp, "__version__", "?")
    except Exception as e:  # noqa: BLE001  (an optional peer)
        rep.say(f"llama.cpp unavailable: {e}")
    times = {k: [] for k in fns}
    loads = []
    for _ in range(args.repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
        loads.append(load())
    rep.say(f"## Speed: {name} ({path.name}), one forward of a {t}-token prompt")
    rep.say()
    rep.say(f"Loading: quantised {tq:.1f} s, float32 {tf:.1f} s. Weights held: quantised "
            f"{q.model.quantised and _bytes(q.model) / 1e6:.1f} MB, float32 {_bytes(f.model) / 1e6:.1f} MB "
            f"(file {path.stat().st_size / 1e6:.1f} MB). llama.cpp {lc}. {args.repeats} interleaved "
            f"rounds, load {np.mean(loads):.2f} (1 min average, 2 cores).")
    rep.say()
    ref = np.asarray(outs["jaxrank float32, batch 1"]).reshape(-1)[:2]
    base = np.asarray(times["jaxrank float32, batch 1"])
    rows = []
    for k in fns:
        tt = np.asarray(times[k])
        b = 4 if "batch 4" in k else 1
        lg = np.asarray(outs[k]).reshape(-1)[:2]
        p_ref = 1 / (1 + np.exp(ref[1] - ref[0]))
        p = 1 / (1 + np.exp(lg[1] - lg[0]))
        rows.append([k, spread(tt, 1e3, "{:.1f}"), f"{b * t / np.median(tt):.0f}",
                     spread(base * b / tt, fmt="{:.2f}"), f"{np.abs(lg - ref).max():.2e}", f"{p - p_ref:+.1e}"])
        rep.row(part="speed", form=k, tokens=t, batch=b, ms=float(np.median(tt) * 1e3),
                tokens_per_s=b * t / float(np.median(tt)), speed_vs_f32=float(np.median(base * b / tt)),
                max_label_logit_diff=float(np.abs(lg - ref).max()), p_a_diff=float(p - p_ref),
                load=float(np.mean(loads)))
    rep.table(["form", "ms per forward", "tokens/s", "tokens/s vs float32 batch 1",
               "label logits - float32's", "p(A) - float32's"], rows)


def _bytes(module) -> int:
    import jax

    return sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in jax.tree_util.tree_leaves(module.weights()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--format", default="Q4_0", choices=sorted(BLOCK))
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--speed-tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cpp-threads", type=lambda v: [int(x) for x in v.split(",")], default=[1, 2],
                    help="llama.cpp thread counts to time (comma-separated)")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--out", help="results path without suffix (default results/quantised_memory[_smoke])")
    ap.add_argument("--child", nargs=4, metavar=("SHAPE", "FORMAT", "TOKENS", "BATCH"))
    args = ap.parse_args(argv)
    if args.child:
        shape, fmt, tokens, batch = args.child
        print(json.dumps(child(shape, fmt, int(tokens), int(batch))))
        return
    if args.smoke:
        args.repeats, args.speed_tokens = 2, 64
    rep = Report("quantised_memory", smoke=args.smoke, out=args.out)
    rep.say("# Weights kept quantised: memory of a 7B-shaped judge, speed of SmolLM2")
    rep.say()
    rep.say(f"{machine()}.")
    rep.say()
    if not args.no_memory:
        memory(rep, args)
    if not args.no_speed:
        speed(rep, args)
    rep.write()


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
