"""Dense one-hot contraction vs scatter-add for the incidence products, by number of items.

``jaxrank._graph`` picks a dense ``[R, N]`` one-hot matmul for ``N <= DENSE_MAX_ITEMS``
and ``segment_sum``/scatter-add above. This measures both paths side by side on
a batch of contexts (``R = 3N`` comparisons each) for the average-probability
and PoE-Gaussian scorers, to place the switch.

    python benchmarks/incidence_switch.py [--contexts 1000]
"""

import argparse
import time

import jax
import numpy as np

import jaxrank as jr
from jaxrank import _graph


def bench(fn, c, repeats=5):
    jax.block_until_ready(fn(c))
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(c))
        t.append(time.perf_counter() - t0)
    return min(t)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", type=int, default=1000)
    ap.add_argument("--sizes", default="8,16,32,64,128,256")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print("| N | R | scorer | dense (ms) | scatter (ms) | scatter / dense |\n|---:|---:|---|---:|---:|---:|")
    default = _graph.DENSE_MAX_ITEMS
    for n in map(int, args.sizes.split(",")):
        r = 3 * n
        b = max(1, args.contexts * 16 // n)
        i = rng.integers(0, n, (b, r))
        j = (i + 1 + rng.integers(0, n - 1, (b, r))) % n
        c = jr.Comparisons.from_pairs(i, j, rng.uniform(size=(b, r)).astype(np.float32), num_items=n)
        for name, fn in [("average_probability", jr.average_probability), ("poe_gaussian", jr.poe_gaussian)]:
            times = {}
            for mode, limit in [("dense", 10**9), ("scatter", 0)]:
                _graph.DENSE_MAX_ITEMS = limit
                jax.clear_caches()
                times[mode] = bench(fn, c)
            print(f"| {n} | {r} | {name} (x{b}) | {1e3 * times['dense']:.1f} | {1e3 * times['scatter']:.1f} | "
                  f"{times['scatter'] / times['dense']:.2f} |")
    _graph.DENSE_MAX_ITEMS = default


if __name__ == "__main__":
    main()
