"""Soft Bradley-Terry on a HANNA-sized pool: 1056 items, 26k comparisons.

Compares, in one process on the same data:

* jaxrank ``fit_poe_bradley_terry`` (float32 Newton, scatter-based Laplacian);
* SciPy BFGS on the mean negative log-likelihood (what the papers' code does);
* a dense NumPy Newton solve in float64 (Laplacian Hessian, ``np.linalg.solve``),
  run to machine precision: the exact optimum every method is scored against.

Reports wall time, the speed ratio against each baseline, and the max-norm
distance of each method's centred scores from the exact optimum.

    python benchmarks/soft_bt_scale.py [--items 1056] [--comparisons 26000] [--smoke]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import numpy as np
from scipy import optimize
from scipy.special import expit, log_expit

import jaxrank as jr
from _report import write_results  # noqa: E402  (benchmarks/ is on sys.path when run as a script)


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


def timed(fn, repeats=1):
    best, out = np.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=1056)
    ap.add_argument("--comparisons", type=int, default=26_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help="small sizes for CI")
    ap.add_argument("--output", default=str(Path(__file__).parent / "results" / "soft_bt_scale.md"))
    args = ap.parse_args(argv)
    if args.smoke:
        args.items, args.comparisons = 120, 2_000

    n, r = args.items, args.comparisons
    i, j, p = make_problem(n, r, args.seed)
    c = jr.Comparisons.from_pairs(i, j, p.astype(np.float32), num_items=n)

    fit = lambda: jax.block_until_ready(jr.fit_poe_bradley_terry(c))
    t_compile, _ = timed(fit)
    t_jax, sol = timed(fit, repeats=3)
    t_newton, (s_exact, newton_it) = timed(lambda: numpy_newton(i, j, p, n), repeats=1)
    t_bfgs, (s_bfgs, bfgs_it) = timed(lambda: scipy_bfgs(i, j, p, n), repeats=1)

    s_jax = np.asarray(sol.scores, np.float64)
    err_jax = np.max(np.abs(s_jax - s_jax.mean() - s_exact))
    err_bfgs = np.max(np.abs(s_bfgs - s_exact))
    rows = [
        ("jaxrank Newton (float32), steady state", t_jax, f"{int(sol.iterations)} Newton steps", err_jax, 1.0),
        ("jaxrank, first call incl. compile", t_compile, "", err_jax, t_compile / t_jax),
        ("NumPy dense Newton (float64)", t_newton, f"{newton_it} Newton steps", 0.0, t_newton / t_jax),
        ("SciPy BFGS, mean log-lik (papers)", t_bfgs, f"{bfgs_it} BFGS steps", err_bfgs, t_bfgs / t_jax),
    ]
    lines = [f"Soft Bradley-Terry, {n} items, {r} comparisons ({jax.devices()[0].platform}, "
             f"{jax.device_count()} device(s))", "",
             "| method | time (s) | iterations | max abs error vs exact optimum | time / jaxrank |",
             "|---|---:|---|---:|---:|"]
    for name, t, it, err, ratio in rows:
        lines.append(f"| {name} | {t:.3f} | {it} | {err:.2e} | {ratio:.1f}x |")
    lines += ["", f"speed-up: {t_bfgs / t_jax:.0f}x vs SciPy BFGS, {t_newton / t_jax:.1f}x vs NumPy Newton; "
              f"jaxrank within {err_jax:.1e} of the optimum, BFGS {err_bfgs:.2f} away"]
    text = "\n".join(lines)
    print(text)
    if not args.smoke:
        write_results(Path(args.output).with_suffix(""), lines)
    assert err_jax < 1e-3, f"jaxrank is {err_jax} from the optimum"


if __name__ == "__main__":
    main()
