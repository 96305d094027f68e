"""Sparse (per-comparison) vs dense (``[N, N]`` aggregated) edge space, by number of items and comparisons.

``jaxrank._graph.edges`` uses the dense space when ``N^2 <= DENSE_RATIO * R``.
This times both spaces side by side, in one process, for the scorers whose
inner loops use it (PoE-g, hard BT, soft BT) on batches of random contexts, to
place the switch.

    python benchmarks/edge_space.py [--contexts 2000] [--sizes 8,16,32,64] [--budgets 3,6,15]
    (budget = R / N: comparisons per item)
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
    ap.add_argument("--contexts", type=int, default=2000, help="contexts of 16 items; scaled by 16/N")
    ap.add_argument("--sizes", default="8,16,32,64")
    ap.add_argument("--budgets", default="3,6,15", help="comparisons per item R/N")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"DENSE_RATIO = {_graph.DENSE_RATIO}\n")
    print("| N | R | N^2/R | scorer (x contexts) | sparse (ms) | dense (ms) | sparse / dense |\n"
          "|---:|---:|---:|---|---:|---:|---:|")
    default = _graph.DENSE_RATIO
    for n in map(int, args.sizes.split(",")):
        for per_item in map(int, args.budgets.split(",")):
            r = min(per_item * n, n * (n - 1))
            b = max(1, args.contexts * 16 // n)
            i = rng.integers(0, n, (b, r))
            j = (i + 1 + rng.integers(0, n - 1, (b, r))) % n
            c = jr.Comparisons.from_pairs(i, j, rng.uniform(size=(b, r)).astype(np.float32), num_items=n)
            for name, fn in [("poe_gaussian", jr.poe_gaussian), ("bradley_terry", jr.bradley_terry),
                             ("poe_bradley_terry", jr.poe_bradley_terry)]:
                times = {}
                for mode, ratio in [("sparse", 0.0), ("dense", float("inf"))]:
                    _graph.DENSE_RATIO = ratio
                    jax.clear_caches()
                    times[mode] = bench(fn, c)
                print(f"| {n} | {r} | {n * n / r:.1f} | {name} (x{b}) | {1e3 * times['sparse']:.1f} | "
                      f"{1e3 * times['dense']:.1f} | {times['sparse'] / times['dense']:.2f} |", flush=True)
    _graph.DENSE_RATIO = default


if __name__ == "__main__":
    main()
