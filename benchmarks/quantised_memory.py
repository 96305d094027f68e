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

**Real files.** Each registered GGUF (``--smoke``: SmolLM2-135M only) is
loaded with ``weights="quantised"`` in a fresh subprocess while a thread
samples ``/proc/self/status`` every 10 ms: ``VmRSS`` and its two parts,
``RssAnon`` (heap: the weights held, scratch, the tokenizer) and ``RssFile``
(pages of the memory-mapped file and of the libraries), by stage. The stages
are the steps of ``load_model`` done one by one with the public
``jaxrank.models.gguf`` functions (read the header, build the tokenizer,
``build_model``: decode + repack + device put, one tensor at a time). Weights
held: the bytes of the model's parameter arrays (codes, scales, norms). A
7B ``Q4_K_M`` file is extrapolated from its tensor formats (see
:func:`extrapolate_7b`).

**Speed.** The registered SmolLM2-135M GGUF (``Q4_1`` matrices, ``Q8_0``
embedding) judged three ways on the same token ids, in one process,
interleaved rounds: jaxrank with its weights kept quantised, jaxrank with
them dequantised to float32 (the default), and llama.cpp (``llama_cpp.Llama``,
1 and 2 threads: on a loaded machine its 2 threads wait for each other)
evaluating the same prompt from an empty cache. One forward of a
``T``-token prompt, batch 1, and for jaxrank also batch 4; the label logits are
compared across the three.

    python benchmarks/quantised_memory.py [--smoke] [--format Q4_0] [--tokens 64] [--batch 2]
        [--no-memory | --no-real | --no-speed] [--out results/quantised_memory_speed]
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
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0]) * 1024 / 1e9
    return out


REAL = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
"""The registered GGUF files loaded by the real-file section (``--smoke``: the first)."""


def real_child(name: str) -> dict:
    """Load a registered GGUF kept quantised, sampling the resident set by stage (a fresh process)."""
    import threading

    from jaxrank.models import gguf, registry
    from jaxrank.models.loading import build_model

    stage, samples, done = ["runtime"], [], threading.Event()

    def sample():
        while not done.is_set():
            samples.append((stage[0], _status()))
            time.sleep(0.01)
    th = threading.Thread(target=sample, daemon=True)
    base = _status()
    th.start()
    path = registry.resolve(name)
    t0 = time.perf_counter()
    stage[0] = "read the GGUF header (metadata, tensor table)"
    meta, gts = gguf.read_gguf(path)
    cfg = gguf.gguf_config(meta, [t.name for t in gts])
    tensors = gguf.gguf_tensors(gts, cfg, keep_quantised=True)
    stage[0] = "build the tokenizer"
    tok = gguf.tokenizer_from_gguf(meta, path)
    stage[0] = "build the parameters (decode + repack + device put, tensor by tensor)"
    model, _ = build_model(cfg["model_type"], cfg, tensors)
    load_s = time.perf_counter() - t0
    stage[0] = "loaded"
    time.sleep(0.05)
    done.set()
    th.join()
    held = _bytes(model)
    stages: dict[str, dict] = {}
    for st, s in samples:
        b = stages.setdefault(st, {"rss": 0.0, "anon": 0.0, "file": 0.0})
        b["rss"], b["anon"], b["file"] = max(b["rss"], s["VmRSS"]), max(b["anon"], s["RssAnon"]), \
            max(b["file"], s["RssFile"])
        b["end_rss"], b["end_anon"] = s["VmRSS"], s["RssAnon"]
    del tok
    file_gb = path.stat().st_size / 1e9
    return {"name": name, "file": path.name, "file_gb": file_gb, "held_gb": held / 1e9, "load_s": load_s,
            "base_rss_gb": base["VmRSS"], "base_anon_gb": base["RssAnon"],
            "peak_rss_gb": max(s["VmRSS"] for _, s in samples), "peak_anon_gb": max(s["RssAnon"] for _, s in samples),
            "peak_file_gb": max(s["RssFile"] for _, s in samples), "stages": stages, "load": load()}


# Qwen2.5-7B (hidden 3584, 28 layers, MLP 18944, 4 KV heads of 128, vocabulary 152064, untied output)
_QWEN7B = dict(hidden=3584, layers=28, mlp=18944, kv=512, vocab=152064)
_GGUF_BITS = {"Q4_K": 144 * 8 / 256, "Q6_K": 210 * 8 / 256}
_HELD_BITS = {"Q4_K": 148 * 8 / 256, "Q6_K": 210 * 8 / 256, "mixed": 212 * 8 / 256}


def extrapolate_7b(ref: dict) -> dict:
    """A Qwen2.5-7B ``Q4_K_M`` file (llama.cpp's recipe, as in the 1.5B file: ``Q4_K`` matrices and
    embedding, ``Q6_K`` output, ``ffn_down`` and ``attn_v`` in ``Q6_K`` on half the layers) held as this
    loader holds it: ``Q4_K`` 4.625 bits a weight (its 6-bit scales and mins as bytes), ``Q6_K`` 6.5625,
    the mixed stacks 6.625. Peak = held + the 1.5B run's overhead (peak - held: runtime, tokenizer,
    file pages, one chunk's scratch), which does not grow with the weights but for the scratch of one
    layer (a layer of 7B's ``ffn_down`` is 4.9x 1.5B's, decoded by chunks of 4M weights)."""
    h, L, f, kv, v = (_QWEN7B[k] for k in ("hidden", "layers", "mlp", "kv", "vocab"))
    q4 = L * (2 * h * h + kv * h + 2 * f * h) + v * h          # q, o, k, gate, up; embedding
    mixed = L * (kv * h + f * h)                                # attn_v, ffn_down: half Q4_K, half Q6_K
    q6 = v * h                                                  # output
    file_ = (q4 * _GGUF_BITS["Q4_K"] + mixed * (_GGUF_BITS["Q4_K"] + _GGUF_BITS["Q6_K"]) / 2
             + q6 * _GGUF_BITS["Q6_K"]) / 8e9
    held = (q4 * _HELD_BITS["Q4_K"] + mixed * _HELD_BITS["mixed"] + q6 * _HELD_BITS["Q6_K"]) / 8e9
    over = ref["peak_rss_gb"] - ref["held_gb"]
    return {"file_gb": file_, "held_gb": held, "peak_rss_gb": held + over, "overhead_gb": over}


def real(rep: Report, args):
    names = REAL[:1] if args.smoke else REAL
    rows, results = [], []
    for name in names:
        proc = subprocess.run([sys.executable, __file__, "--real-child", name], capture_output=True, text=True)
        if proc.returncode != 0:
            rep.say(f"{name}: not measured ({(proc.stderr.strip().splitlines() or ['?'])[-1]})")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(r)
        h = r["held_gb"]
        rows.append([f"{name} (`{r['file']}`)", f"{r['file_gb']:.3f}", f"{h:.3f}", f"{h / r['file_gb']:.3f}",
                     f"{r['peak_rss_gb']:.3f}", f"{r['peak_anon_gb']:.3f}", f"{r['peak_file_gb']:.3f}",
                     f"**{r['peak_rss_gb'] / h:.2f}**", f"{r['peak_anon_gb'] / h:.2f}",
                     f"{(r['peak_anon_gb'] - r['base_anon_gb']) / h:.2f}", f"{r['load_s']:.1f} ({r['load']:.1f})"])
        rep.row(part="real", **{k: v for k, v in r.items() if k != "stages"})
    if not results:
        return
    rep.say("## Memory: real GGUF files loaded with weights kept quantised")
    rep.say()
    rep.say("Each in a fresh process; `RssAnon` is the heap (weights held, scratch, tokenizer), `RssFile` the "
            "pages of the mapped file and the libraries; the runtime (JAX + jaxrank imported) is in every peak.")
    rep.say()
    rep.table(["model (file)", "file GB", "weights held GB", "held / file", "peak RSS GB", "peak anon GB",
               "peak file-backed GB", "**peak RSS / held**", "peak anon / held",
               "(peak anon - runtime's) / held", "load s (load avg)"], rows)
    big = results[-1]
    rep.say(f"### By stage: {big['name']}")
    rep.say()
    rep.table(["stage", "peak RSS GB", "peak anon GB", "peak file-backed GB", "anon at its end GB"],
              [[k, f"{v['rss']:.3f}", f"{v['anon']:.3f}", f"{v['file']:.3f}", f"{v['end_anon']:.3f}"]
               for k, v in big["stages"].items()])
    if big["name"] == REAL[-1]:
        e = extrapolate_7b(big)
        rep.say(f"**7B Q4_K_M, extrapolated** (Qwen2.5-7B shapes, the 1.5B file's format recipe; "
                f"`extrapolate_7b`): file {e['file_gb']:.2f} GB, weights held {e['held_gb']:.2f} GB "
                f"({e['held_gb'] / e['file_gb']:.3f}x the file), peak RSS ~{e['peak_rss_gb']:.2f} GB "
                f"(held + the 1.5B run's {e['overhead_gb']:.2f} GB of runtime, tokenizer and scratch; "
                f"{e['peak_rss_gb'] / e['held_gb']:.2f}x held). Goal: under 6 GB.")
        rep.say()
        rep.row(part="extrapolated_7b_q4_k_m", **e)


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
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument("--no-speed", action="store_true")
    ap.add_argument("--out", help="results path without suffix (default results/quantised_memory[_smoke])")
    ap.add_argument("--child", nargs=4, metavar=("SHAPE", "FORMAT", "TOKENS", "BATCH"))
    ap.add_argument("--real-child", metavar="NAME")
    args = ap.parse_args(argv)
    if args.real_child:
        print(json.dumps(real_child(args.real_child)))
        return
    if args.child:
        shape, fmt, tokens, batch = args.child
        print(json.dumps(child(shape, fmt, int(tokens), int(batch))))
        return
    if args.smoke:
        args.repeats, args.speed_tokens = 2, 64
    rep = Report("quantised_memory", smoke=args.smoke, out=args.out)
    rep.say("# Weights kept quantised: memory of a 7B-shaped judge and of real GGUF files, speed of SmolLM2")
    rep.say()
    rep.say(f"{machine()}.")
    rep.say()
    if not args.no_memory:
        memory(rep, args)
    if not args.no_real:
        real(rep, args)
    if not args.no_speed:
        speed(rep, args)
    rep.write()


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
