"""Soft Bradley-Terry on a HANNA-sized pool: 1056 items, 26k comparisons.

Compares, in one process on the same data:

* jaxrank ``fit_poe_bradley_terry`` (float32 Newton, scatter-based Laplacian);
* a SciPy sparse Newton (sparse Laplacian Hessian, Jacobi-preconditioned CG,
  float64, steps to 1e-6): the strongest SciPy peer at this size;
* a dense NumPy Newton solve in float64 (Laplacian Hessian, ``np.linalg.solve``),
  run to machine precision: also, untimed, the exact optimum every method is
  scored against;
* SciPy BFGS on the mean negative log-likelihood (what the papers' code does).

Every method runs once per round for ``--repeats`` interleaved rounds (median
[min, max] seconds, the median of the per-round ratios to jaxrank, the load
average), with the max-norm distance of its centred scores from the optimum.

    python benchmarks/soft_bt_scale.py [--items 1056] [--comparisons 26000] [--repeats 7] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np
from scipy import optimize
from scipy.special import expit, log_expit

import jaxrank as jr
from _report import interleaved, load, machine, spread, write_results  # noqa: E402  (benchmarks/ on sys.path)


def make_problem(n, r, seed):
    rng = np.random.default_rng(seed)
    true = rng.normal(scale=1.0, size=n)
    order = rng.permutation(n)
    i = np.r_[order[:-1], rng.integers(0, n, r - (n - 1))]
    j = np.r_[order[1:], rng.integers(0, n, r - (n - 1))]
    same = i == j
    j[same] = (j[same] + 1 + rng.integers(0, n - 1, same.sum())) % n
    p = expit(true[i] - true[j] + 0.8 * rng.normal(size=r))
    return i, j, p


def _grad_np(s, i, j, p, n):
    r = expit(s[i] - s[j]) - p
    return np.bincount(i, r, n) - np.bincount(j, r, n)


def numpy_newton(i, j, p, n, tol=1e-12, max_iter=100):
    """Dense float64 Newton with the per-item-mean anchor (the exact optimum)."""
    s = np.zeros(n)
    anchor = np.full((n, n), 1.0 / n)
    for it in range(1, max_iter + 1):
        g = _grad_np(s, i, j, p, n)
        q = expit(s[i] - s[j])
        h = q * (1 - q)
        H = np.zeros((n, n))
        np.add.at(H, (i, i), h)
        np.add.at(H, (j, j), h)
        np.add.at(H, (i, j), -h)
        np.add.at(H, (j, i), -h)
        step = np.linalg.solve(H + anchor, g)
        s -= step
        if np.max(np.abs(step)) < tol:
            break
    return s - s.mean(), it


def scipy_bfgs(i, j, p, n):
    r = len(i)

    def f(s):
        d = s[i] - s[j]
        return -np.mean(p * log_expit(d) + (1 - p) * log_expit(-d))

    def g(s):
        return _grad_np(s, i, j, p, n) / r

    res = optimize.minimize(f, np.zeros(n), jac=g, method="BFGS")
    return res.x - res.x.mean(), res.nit


def scipy_sparse_newton(i, j, p, n, tol=1e-6, max_iter=100):
    """Newton with a sparse Laplacian Hessian (``scipy.sparse``) and Jacobi-preconditioned CG (float64).

    The strongest way a SciPy user runs it at this size: no dense ``n x n`` matrix, steps to ``tol`` (about
    jaxrank's float32 accuracy), the gradient and every step centred (the Laplacian's null space).
    """
    from scipy import sparse
    from scipy.sparse.linalg import cg

    rows, cols = np.concatenate([i, j, i, j]), np.concatenate([i, j, j, i])
    s = np.zeros(n)
    for it in range(1, max_iter + 1):
        q = expit(s[i] - s[j])
        g = np.bincount(i, q - p, n) - np.bincount(j, q - p, n)
        h = q * (1 - q)
        H = sparse.csr_matrix((np.concatenate([h, h, -h, -h]), (rows, cols)), shape=(n, n))
        step, _ = cg(H, g - g.mean(), M=sparse.diags(1 / H.diagonal()), rtol=1e-8)
        step -= step.mean()
        s -= step
        if np.max(np.abs(step)) < tol:
            break
    return s - s.mean(), it


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=1056)
    ap.add_argument("--comparisons", type=int, default=26_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=7, help="interleaved rounds of every method")
    ap.add_argument("--smoke", action="store_true", help="small sizes for CI")
    ap.add_argument("--output", default=str(Path(__file__).parent / "results" / "soft_bt_scale.md"))
    args = ap.parse_args(argv)
    if args.smoke:
        args.items, args.comparisons, args.repeats = 120, 2_000, 3

    n, r = args.items, args.comparisons
    i, j, p = make_problem(n, r, args.seed)
    c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n)

    fit = lambda: jax.block_until_ready(jr.fit_poe_bradley_terry(c))
    t0 = time.perf_counter()
    fit()
    t_compile = time.perf_counter() - t0
    s_exact, newton_it = numpy_newton(i, j, p, n)           # the reference, untimed
    out = {}
    fns = {"jaxrank": lambda: out.update(jaxrank=fit()),
           "sparse": lambda: out.update(sparse=scipy_sparse_newton(i, j, p, n)),
           "dense": lambda: out.update(dense=numpy_newton(i, j, p, n)),
           "bfgs": lambda: out.update(bfgs=scipy_bfgs(i, j, p, n))}
    times, loads = interleaved(fns, args.repeats)
    sol = out["jaxrank"]
    s_jax = np.asarray(sol.scores, np.float64)
    err = lambda x: float(np.max(np.abs(x - x.mean() - s_exact)))
    tj = np.asarray(times["jaxrank"])
    ratio = lambda k: spread(np.asarray(times[k]) / tj, 1, "{:.1f}") + "x"
    rows = [
        ("jaxrank Newton (float32), steady state", "jaxrank", f"{int(sol.iterations)} Newton steps", err(s_jax)),
        ("SciPy sparse Newton + Jacobi CG (float64, steps to 1e-6)", "sparse",
         f"{out['sparse'][1]} Newton steps", err(out["sparse"][0])),
        ("NumPy dense Newton (float64, steps to 1e-12)", "dense", f"{out['dense'][1]} Newton steps",
         err(out["dense"][0])),
        ("SciPy BFGS, mean log-lik (papers)", "bfgs", f"{out['bfgs'][1]} BFGS steps", err(out["bfgs"][0])),
    ]
    cmd = " ".join(argv if argv is not None else sys.argv[1:])
    lines = [f"Soft Bradley-Terry, {n} items, {r} comparisons ({jax.devices()[0].platform}, "
             f"{jax.device_count()} device(s))", "",
             f"{machine()}. Command: `python benchmarks/soft_bt_scale.py {cmd}`. {args.repeats} interleaved rounds "
             f"(every method once a round); load average over the rounds {min(loads):.2f}-{max(loads):.2f}. The "
             f"exact optimum: the dense float64 Newton run to steps below 1e-12 ({newton_it} steps), untimed.", "",
             "| method | seconds, median [min, max] | iterations | max abs error vs exact optimum | "
             "time / jaxrank, median of rounds [min, max] |",
             "|---|---:|---|---:|---:|"]
    for name, k, it, e in rows:
        lines.append(f"| {name} | {spread(times[k])} | {it} | {e:.2e} | {'1' if k == 'jaxrank' else ratio(k)} |")
    lines.append(f"| jaxrank, first call incl. compile | {t_compile:.3f} | | | |")
    med = lambda k: float(np.median(np.asarray(times[k]) / tj))
    lines += ["", f"Median speed-up of jaxrank: {med('sparse'):.1f}x vs the SciPy sparse Newton (the strongest peer "
              f"here), {med('dense'):.1f}x vs the dense NumPy Newton, {med('bfgs'):.0f}x vs SciPy BFGS; jaxrank "
              f"within {err(s_jax):.1e} of the optimum, the sparse Newton {err(out['sparse'][0]):.1e}, BFGS "
              f"{err(out['bfgs'][0]):.2f} away.",
              f"Load average (1 min) at the end {load():.2f} on {os.cpu_count()} cores."]
    text = "\n".join(lines)
    print(text)
    if not args.smoke:
        write_results(Path(args.output).with_suffix(""), lines)
    assert err(s_jax) < 1e-3, f"jaxrank is {err(s_jax)} from the optimum"


if __name__ == "__main__":
    main()
