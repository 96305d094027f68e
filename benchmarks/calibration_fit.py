"""Fitting a judge calibration over 100 contexts x 100 subsets: time per optax step.

Data: the 100 SummEval articles x 16 summaries with their real coherence scores
(``jaxrank.data``), a judge simulated at FlanT5-3B's accuracy (68.6%, P(A) 0.37;
:func:`jaxrank.studies.simulated_judge`), and ``--subsets`` nested random subsets of
``--budget`` comparisons per article (:func:`jaxrank.studies.select_nested`): a batch
of ``[subsets, 100, budget]`` comparisons, 10,000 problems by default, all in one
loss. The parameters are one :class:`jaxrank.calibration.TemperatureBias`.

Timed, one optax (adam) step = loss + gradient + update, jitted
(:func:`jaxrank.learning.make_step`; compiled before timing), with
``jax.block_until_ready``, interleaved round by round (``_report.interleaved``):

* ``evidence (item space)``: the unsupervised loss :func:`jaxrank.learning.marginal_nll`,
  the Gaussian evidence by Woodbury in ``N x N`` item space (eq. E2);
* ``evidence (dense R x R)``, the baseline: the same loss written directly, the
  log-density of ``N(0, sigma^2 I + tau^2 W W^T)`` by a batched ``R x R`` Cholesky
  (its strongest use: one batched jitted call with the analytic gradient of
  :func:`jaxrank.learning.logdet_and_quadratic`, not autodiff through the Cholesky,
  which is far slower on CPU); both give the same value (checked);
* ``ranking, PoE-g`` and ``ranking, PoE-BT``: the supervised pairwise logistic loss
  (eq. L1) through the calibrated scorer (a linear solve; a Newton solve with
  implicit differentiation).

Also the whole fit of ``--steps`` steps in one compiled ``lax.scan``
(:func:`jaxrank.learning.fit`) per step, for the evidence loss. Median [min, max]
over ``--repeats`` rounds, load average per round. Writes
``benchmarks/results/calibration_fit[_smoke].{md,csv}``.

    python benchmarks/calibration_fit.py [--subsets 100] [--budget 48] [--repeats 5] [--smoke]
"""

from __future__ import annotations

import argparse
import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from _report import Report, interleaved, load_line, machine, spread
from jaxrank import calibration as cal
from jaxrank import learning, studies
from jaxrank.comparisons import Comparisons
from jaxrank.data import label_matrix, load_dataset
from jaxrank.scoring import poe_bradley_terry


def dense_evidence_nll(params: learning.EvidenceParams, c: Comparisons, judge=None) -> jax.Array:
    """The baseline: (E1) on the dense ``R x R`` covariance, every comparison live (weights 1)."""
    x = cal.logit(c.p)
    y = cal.calibrate_logits(params.calibration, x, judge)
    w = jax.nn.one_hot(c.i, c.num_items) - jax.nn.one_hot(c.j, c.num_items)
    cov = jnp.eye(c.num_comparisons) + jnp.exp(2 * params.log_prior_scale) * jnp.einsum("...rn,...sn->...rs", w, w)
    logdet, quad = learning.logdet_and_quadratic(cov, y)
    nll = 0.5 * quad + 0.5 * logdet + 0.5 * c.num_comparisons * math.log(2 * math.pi)
    jac = jnp.sum(cal.log_derivative(params.calibration, x, judge))
    return (jnp.sum(nll) - jac) / c.p.size


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subsets", type=int, default=100)
    ap.add_argument("--contexts", type=int, default=100)
    ap.add_argument("--budget", type=int, default=48, help="comparisons per (subset, article); 48 = 20%% of 240")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20, help="steps of the whole-fit timing")
    ap.add_argument("--smoke", action="store_true", help="10 articles x 10 subsets, 3 repeats")
    args = ap.parse_args(argv)
    if args.smoke:
        args.subsets, args.contexts, args.repeats, args.steps = 10, 10, 3, 5
    rep = Report("calibration_fit", smoke=args.smoke)
    rep.say("# Calibration fit: time per optax step")
    rep.say()
    rep.say(f"Machine: {machine()}")
    lm = label_matrix(load_dataset("summeval"), "coherence")
    labels, mask = lm.labels[:args.contexts], lm.mask[:args.contexts]
    judge = studies.simulated_judge(labels, mask, accuracy=0.686, p_a=0.37, seed=0)
    sel = studies.select_nested(judge, num_subsets=args.subsets, max_budget=args.budget, key=jax.random.key(0))
    S, C, R = sel.p.shape
    lab = jnp.broadcast_to(jnp.asarray(labels), (S, C, labels.shape[-1]))
    msk = jnp.broadcast_to(jnp.asarray(mask), lab.shape)
    flat = jax.tree.map(lambda x: x.reshape((S * C,) + x.shape[2:]), sel)
    flab, fmsk = lab.reshape(S * C, -1), msk.reshape(S * C, -1)
    rep.say(f"Batch: {S} subsets x {C} articles = {S * C} problems of {R} comparisons, 16 summaries; "
            f"load at the start {load_line()}.")
    rep.say()

    ev0 = learning.EvidenceParams(cal.identity_temperature_bias(1), jnp.zeros(()))
    tb0 = cal.identity_temperature_bias(1)
    a = float(learning.marginal_nll(ev0, flat))
    b = float(dense_evidence_nll(ev0, flat))
    rep.say(f"Evidence at the identity: item space {a:.6f}, dense R x R {b:.6f} (relative difference "
            f"{abs(a - b) / abs(b):.1e}).")
    rep.say()
    opt = optax.adam(0.05)
    cases = {
        "evidence (item space)": (learning.marginal_nll, ev0, (flat, None)),
        "evidence (dense R x R)": (dense_evidence_nll, ev0, (flat, None)),
        "ranking, PoE-g": (functools.partial(learning.ranking_loss, score_fn=learning.CALIBRATED_POE_GAUSSIAN),
                           tb0, (flat, None, flab, fmsk)),
        "ranking, PoE-BT": (functools.partial(learning.ranking_loss, score_fn=learning.calibrated(poe_bradley_terry)),
                            tb0, (flat, None, flab, fmsk)),
    }
    steppers, compile_s = {}, {}
    for name, (loss, p0, data) in cases.items():
        init, step = learning.make_step(loss, opt)
        state = [p0, init(p0)]
        t0 = time.perf_counter()
        jax.block_until_ready(step(state[0], state[1], *data))
        compile_s[name] = time.perf_counter() - t0

        def run_one(step=step, state=state, data=data):
            q, s, v = step(state[0], state[1], *data)
            jax.block_until_ready(q)
            state[0], state[1] = q, s
        steppers[name] = run_one
    times, loads = interleaved(steppers, args.repeats)
    base = np.median(times["evidence (dense R x R)"])
    rows = []
    for name, ts in times.items():
        rows.append([name, spread(ts, 1e3, "{:.1f}"), f"{1e6 * np.median(ts) / (S * C):.2f}",
                     f"{base / np.median(ts):.2f}", f"{compile_s[name]:.1f}"])
        rep.row(part="step", method=name, problems=S * C, budget=R, median_s=float(np.median(ts)),
                min_s=float(np.min(ts)), max_s=float(np.max(ts)), first_call_s=compile_s[name],
                load_min=float(min(loads)), load_max=float(max(loads)))
    rep.table(["loss", "ms per step, median [min, max]", "us per problem", "x faster than dense evidence",
               "first call s (compile)"], rows)
    rep.say(f"Load average during the rounds: {min(loads):.2f} to {max(loads):.2f}.")
    rep.say()

    fit = lambda: jax.block_until_ready(learning.fit(learning.marginal_nll, ev0, flat, None, optimizer=opt,
                                                     steps=args.steps).params)
    t0 = time.perf_counter()
    fit()
    first = time.perf_counter() - t0
    ft, fl = interleaved({"fit": fit}, args.repeats)
    per = np.asarray(ft["fit"]) / args.steps
    rep.say(f"Whole fit, evidence loss, {args.steps} steps in one lax.scan: {spread(per, 1e3, '{:.1f}')} ms per step "
            f"(first call {first:.1f}s with compilation; load {min(fl):.2f} to {max(fl):.2f}).")
    rep.row(part="fit", method="evidence (item space), lax.scan", problems=S * C, budget=R,
            median_s=float(np.median(per)), min_s=float(per.min()), max_s=float(per.max()), first_call_s=first,
            load_min=float(min(fl)), load_max=float(max(fl)))
    rep.write()


if __name__ == "__main__":
    main()
