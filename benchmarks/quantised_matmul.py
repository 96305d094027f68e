"""Weight forms for the judge's matrix products on XLA:CPU: float32, bfloat16, int8 and 4-bit, dequantised in the jit.

Issue 15 asks whether anything beats float32 weights on XLA:CPU, such as keeping the
weights quantised and dequantising inside the matrix product. This times one
jitted ``x @ W`` at the real projection shapes of the registered Qwen2.5 judges
(q, k/v, o, gate/up, down; hidden 896 / 1536, MLP 4864 / 8960, 2 key/value heads)
for ``T`` tokens (default 600: a judging batch of 4 comparisons of ~150 tokens,
candidate B plus the question, after the prefix cache), float32 activations
``x``, random weights:

* ``float32``: ``x @ W`` (what the judge runs now);
* ``bfloat16 (f32 dot)``: ``x @ W.astype(f32)``, W kept in bfloat16;
* ``bfloat16 (bf16 dot)``: ``dot(x.astype(bf16), W, preferred_element_type=f32)``;
* ``int8 (scale after)``: ``(x @ W8.astype(f32)) * scale``, one scale per output column;
* ``int8 (scale before)``: ``x @ (W8.astype(f32) * scale)``;
* ``4-bit blocks``: GGUF Q4-style, two 4-bit values per byte and one float32
  scale per block of 32 inputs, unpacked and scaled inside the jit.

Each form's bytes at rest are reported with its time. Every round times every form
once, in turn (load hits all alike); median and [min, max] over ``--repeats``
rounds, the ratio to float32 per round. ``--smoke``: the 0.5B shapes, 3 rounds.

    python benchmarks/quantised_matmul.py [--tokens 600] [--repeats 7] [--smoke]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _report import Report, load, machine, spread

SHAPES = {  # (d_in, d_out) per projection; Qwen2.5-Coder 0.5B / 1.5B configs (registry)
    "qwen2.5-0.5b": {"q / o": (896, 896), "k / v": (896, 128), "gate / up": (896, 4864), "down": (4864, 896)},
    "qwen2.5-1.5b": {"q / o": (1536, 1536), "k / v": (1536, 256), "gate / up": (1536, 8960), "down": (8960, 1536)},
}


def forms(d_in, d_out, seed=0):
    """``{name: (jitted fn of x, bytes at rest)}`` for one projection shape."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    w = rng.normal(0, d_in ** -0.5, (d_in, d_out)).astype(np.float32)
    w32 = jnp.asarray(w)
    w16 = jnp.asarray(w, jnp.bfloat16)
    scale8 = np.abs(w).max(0) / 127.0
    w8 = jnp.asarray(np.round(w / scale8).astype(np.int8))
    s8 = jnp.asarray(scale8.astype(np.float32))
    blocks = w.reshape(d_in // 32, 32, d_out)
    scale4 = np.abs(blocks).max(1) / 7.0                                         # [d_in/32, d_out]
    q = np.clip(np.round(blocks / scale4[:, None]), -8, 7).astype(np.int8) + 8   # 0..15
    q = q.reshape(d_in, d_out)
    packed = jnp.asarray((q[0::2] | (q[1::2] << 4)).astype(np.uint8))          # [d_in/2, d_out]
    s4 = jnp.asarray(scale4.astype(np.float32))

    def unpack4(p, s):
        lo = (p & 0xF).astype(jnp.float32) - 8
        hi = (p >> 4).astype(jnp.float32) - 8
        vals = jnp.stack([lo, hi], axis=1).reshape(d_in, d_out)                  # rows 2k, 2k+1
        return (vals.reshape(d_in // 32, 32, d_out) * s[:, None]).reshape(d_in, d_out)

    f32 = jax.jit(lambda x: x @ w32)
    b16_up = jax.jit(lambda x: x @ w16.astype(jnp.float32))
    b16 = jax.jit(lambda x: jax.lax.dot(x.astype(jnp.bfloat16), w16, preferred_element_type=jnp.float32))
    i8_after = jax.jit(lambda x: (x @ w8.astype(jnp.float32)) * s8)
    i8_before = jax.jit(lambda x: x @ (w8.astype(jnp.float32) * s8))
    q4 = jax.jit(lambda x: x @ unpack4(packed, s4))
    n = d_in * d_out
    return {"float32": (f32, 4 * n), "bfloat16 (f32 dot)": (b16_up, 2 * n), "bfloat16 (bf16 dot)": (b16, 2 * n),
            "int8 (scale after)": (i8_after, n + 4 * d_out), "int8 (scale before)": (i8_before, n + 4 * d_out),
            "4-bit blocks": (q4, n // 2 + 4 * n // 32)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    import jax
    import jax.numpy as jnp

    models = ["qwen2.5-0.5b"] if args.smoke else list(SHAPES)
    repeats = 3 if args.smoke else args.repeats
    rep = Report("quantised_matmul", smoke=args.smoke)
    rep.say("# Weight forms for the judge's matrix products on XLA:CPU")
    rep.say()
    rep.say(f"{machine()}. {args.tokens} tokens x d_in float32 activations; one jitted product per call, blocked "
            f"on; {repeats} interleaved rounds; ms median [min, max]; ratio = float32 time / the form's time "
            "per round (above 1: faster than float32).")
    rep.say()
    x_rng = np.random.default_rng(1)
    for model in models:
        rep.say(f"## {model}")
        rep.say()
        table = []
        for proj, (d_in, d_out) in SHAPES[model].items():
            x = jnp.asarray(x_rng.normal(size=(args.tokens, d_in)).astype(np.float32))
            fs = forms(d_in, d_out)
            ref = np.asarray(fs["float32"][0](x))
            errs = {}
            for name, (f, _) in fs.items():                     # compile, and the error of each form
                out = np.asarray(f(x))
                errs[name] = float(np.abs(out - ref).max() / np.abs(ref).max())
            times = {name: [] for name in fs}
            loads = []
            for _ in range(repeats):
                for name, (f, _) in fs.items():
                    t0 = time.perf_counter()
                    jax.block_until_ready(f(x))
                    times[name].append(time.perf_counter() - t0)
                loads.append(load())
            base = np.asarray(times["float32"])
            for name, (_, nbytes) in fs.items():
                t = np.asarray(times[name])
                table.append([f"{proj} {d_in}x{d_out}", name, f"{nbytes / 2**20:.2f}", spread(t, 1e3, "{:.2f}"),
                              spread(base / t, fmt="{:.2f}"), f"{errs[name]:.1e}"])
                rep.row(model=model, projection=proj, d_in=d_in, d_out=d_out, form=name, mib=nbytes / 2**20,
                        ms=float(np.median(t) * 1e3), ratio_vs_f32=float(np.median(base / t)),
                        rel_error=errs[name], load=float(np.mean(loads)))
        rep.table(["projection", "weights", "MiB at rest", "ms", "float32 / form", "max rel. error"], table)
    rows = rep.rows
    for model in models:
        mine = [r for r in rows if r["model"] == model]
        per_form = {}
        for r in mine:   # one pass of a layer: q, k, v, o, gate, up, down
            mult = 2 if r["projection"] in ("q / o", "k / v", "gate / up") else 1
            per_form[r["form"]] = per_form.get(r["form"], 0.0) + mult * r["ms"]
        f32 = per_form["float32"]
        best = min(per_form, key=per_form.get)
        rep.say(f"**{model}, one layer's seven projections:** " + "; ".join(
            f"{k} {v:.2f} ms ({f32 / v:.2f}x)" for k, v in per_form.items()) +
            f". Fastest: {best}.")
        rep.say()
    rep.write()


if __name__ == "__main__":
    main()
