"""Active comparative assessment: ask the judge for the most informative comparisons, in batches.

The loop (PoE §3.6 and App. A.6; METHODS.md §4-5):

1. start from a random spanning tree of the items (``N - 1`` comparisons, or both
   orders of each: the fewest that connect the graph), judged in one batch;
2. fit soft Bradley-Terry to everything judged so far (PoE §3.2) and take its
   Laplace posterior ``N(s*, H^+)`` (PoE App. A.5);
3. stop if the budget is spent, or if the posterior is confident enough of the
   ranking (below);
4. otherwise pick the next ``batch_size`` comparisons by Laplace-BT selection,
   ``argmax q(1 - q) (A_aa + A_bb - 2 A_ab)``, ``q = sigmoid(s_a - s_b - gamma)``
   (``gamma`` the fitted bias with ``debias``; averaged over the pair's random
   order), with Sherman-Morrison updates within the batch (:func:`jaxrank.selection.laplace_comparisons`), ask the
   judge, and go to 2.

The judge is a Python callable (an LLM), so rounds are a Python loop; the maths
of a round (fit, posterior, confidence, selection) is one ``jax.jit`` call on a
comparison buffer pre-allocated at the full budget with weight 0 in the unused
slots, so its shapes never change and it compiles once.

Stopping rule (``rank_confidence``): the expected Spearman correlation between
the posterior-mean ranking and the true ranking under the Laplace posterior,
``E_{s ~ N(s*, H^+)} rho(s, s*)``, estimated from ``num_samples`` draws
(:func:`jaxrank.uncertainty.ranking_confidence`, ``rule="spearman"``). It is on
the scale of the papers' metric (METHODS.md §7); it measures agreement with the
*judge's* latent scores (the posterior knows nothing of the judge's own errors
against humans). ``stop_rule="adjacent"`` uses instead the mean over adjacent
pairs of ``P(correct order)`` (closed form).
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _validate, uncertainty
from jaxrank.comparisons import Comparisons
from jaxrank.scoring import BradleyTerrySolver
from jaxrank.scoring.gaussian import GaussianPosterior
from jaxrank.selection import _common
from jaxrank.selection.greedy import select_from_posterior
from jaxrank.selection.random import random_comparisons

__all__ = ["active_assess", "ActiveResult"]


class ActiveResult(NamedTuple):
    """Result of :func:`active_assess`.

    Attributes:
        scores: ``[N]`` soft-BT scores (the posterior mean) from all comparisons made.
        posterior: the final Laplace :class:`jaxrank.GaussianPosterior` (``.stderr``).
        comparisons: :class:`jaxrank.Comparisons` buffer of length ``budget``; the first
            ``num_comparisons`` slots are the comparisons made, in order; the rest weight 0.
        num_comparisons: judge comparisons used.
        confidence: the final value of the stopping statistic.
        stopped: ``"confidence"`` (target reached), ``"budget"`` or ``"exhausted"`` (no
            unjudged pair left).
        history: ``[rounds, 2]`` float array: comparisons made and confidence, per round.
    """

    scores: jax.Array
    posterior: GaussianPosterior
    comparisons: Comparisons
    num_comparisons: int
    confidence: float
    stopped: str
    history: np.ndarray


@functools.partial(jax.jit, static_argnames=("num_pairs", "symmetric", "rule", "num_samples", "solver"))
def _round(c, k_conf, k_sel, *, num_pairs, symmetric, rule, num_samples, solver):
    fit = uncertainty.laplace_posterior(c, solver)
    post = fit.posterior
    conf = uncertainty.ranking_confidence(post, rule=rule, key=k_conf, num_samples=num_samples, where=c.item_mask)
    i, j = select_from_posterior(c, post, k_sel, num_pairs=num_pairs, symmetric=symmetric, gamma=fit.solution.gamma)
    return post, conf, i, j


def _ask(judge_fn, i, j):
    p = np.asarray(judge_fn(np.asarray(i), np.asarray(j)), np.float64)
    if p.shape != np.shape(i):
        raise ValueError(f"judge_fn returned shape {p.shape} for {np.shape(i)} comparisons")
    if not np.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise ValueError("judge_fn must return probabilities in [0, 1]")
    return p


def active_assess(judge_fn: Callable, num_items: int, *, batch_size: int, budget: int, key,
                  rank_confidence: float | None = None, stop_rule: str = "spearman", symmetric: bool = False,
                  debias=False, score_prior: float = 0.0, eps: float = 1e-6, gamma_prior: float = 1e-6,
                  tol=None, max_iter: int = 100, num_samples: int = 256, callback: Callable | None = None,
                  dtype=jnp.float32) -> ActiveResult:
    """Active assessment: Laplace-BT selection in batches until confident or out of budget.

    Args:
        judge_fn: ``judge_fn(i, j) -> p``, called with int NumPy arrays of positions A
            and B (a batch) and returning ``P(A better)`` for each, in ``[0, 1]``.
        num_items: ``N``.
        batch_size: comparisons per round (the judge is called once per round; even
            with ``symmetric``).
        budget: the most comparisons to make (including the ``N - 1`` starting tree).
        key: a ``jax.random`` key (starting tree, orientations, posterior sampling).
        rank_confidence: stop as soon as the stopping statistic reaches this (e.g. 0.9);
            None runs to the budget.
        stop_rule: ``"spearman"`` (expected Spearman under the posterior, default) or
            ``"adjacent"`` (mean ``P(correct order)`` of adjacent pairs); see the module doc.
        symmetric: judge every selected pair in both orders.
        debias, score_prior, eps, gamma_prior, tol, max_iter: soft-BT settings, as in
            :func:`jaxrank.fit_poe_bradley_terry` (pass ``score_prior > 0`` for a judge that
            returns hard 0/1 answers).
        num_samples: posterior draws for ``stop_rule="spearman"``.
        callback: optional ``callback(round, num_comparisons, confidence, posterior)``
            after every fit.
        dtype: float dtype of the buffers.

    Returns:
        :class:`ActiveResult`.

    Raises:
        ValueError: ``budget`` below the starting tree (``N - 1``, ``2 (N - 1)``
            symmetric) or above ``N(N-1)``; bad ``batch_size``, ``rank_confidence``,
            ``stop_rule``, ``num_samples`` (an int >= 1), ``callback`` (not callable),
            ``judge_fn`` (not callable), ``key`` (None or a batch of keys): all
            before the judge is called; a judge answer that is not a probability.
    """
    if not callable(judge_fn):
        raise ValueError(f"judge_fn must be a callable judge_fn(i, j) -> p, got {type(judge_fn).__name__}")
    n = _common.check_int("num_items", num_items, minimum=2)
    r = _common.check_int("budget", budget, minimum=1)
    bs = _common.check_int("batch_size", batch_size, minimum=1)
    num_samples = _validate.integer("num_samples", num_samples, low=1)
    if callback is not None and not callable(callback):
        raise ValueError(f"callback must be a callable or None, got {type(callback).__name__}")
    _common.key_batch_shape(key, single=True)
    start = 2 * (n - 1) if symmetric else n - 1
    if r < start:
        raise ValueError(f"budget={r} is below the {start} comparisons of the starting spanning tree of "
                         f"num_items={n} items")
    if r > n * (n - 1):
        raise ValueError(f"budget={r} exceeds the N(N-1)={n * (n - 1)} ordered pairs of num_items={n}")
    if symmetric and (bs % 2 or r % 2):
        raise ValueError(f"batch_size={bs} and budget={r} must be even with symmetric=True")
    if rank_confidence is not None:
        _validate.number("rank_confidence", rank_confidence, low=-1.0, high=1.0, low_open=True, high_open=True)
    if stop_rule not in ("spearman", "adjacent"):
        raise ValueError(f"stop_rule must be 'spearman' or 'adjacent', got {stop_rule!r}")
    solver = BradleyTerrySolver(debias=debias, eps=eps, gamma_prior=gamma_prior, score_prior=score_prior, tol=tol,
                                max_iter=max_iter)
    settings = dict(num_pairs=bs // 2 if symmetric else bs, symmetric=bool(symmetric), rule=stop_rule,
                    num_samples=num_samples, solver=solver)

    np_dtype = np.dtype(jnp.dtype(dtype).name)
    bi, bj = np.zeros(r, np.int32), np.zeros(r, np.int32)
    bp, bw = np.full(r, 0.5, np_dtype), np.zeros(r, np_dtype)
    k_start, key = jax.random.split(key)
    i0, j0 = (np.asarray(x) for x in random_comparisons(k_start, n, start, symmetric=symmetric))
    bi[:start], bj[:start], bp[:start], bw[:start] = i0, j0, _ask(judge_fn, i0, j0), 1
    used = start
    mask = jnp.ones(n, bool)
    history, rnd = [], 0
    while True:
        c = Comparisons(i=jnp.asarray(bi), j=jnp.asarray(bj), p=jnp.asarray(bp), weight=jnp.asarray(bw),
                        item_mask=mask, num_items=n)
        key, k_conf, k_sel = jax.random.split(key, 3)
        post, conf, ni, nj = _round(c, k_conf, k_sel, **settings)
        conf = float(conf)
        history.append((used, conf))
        if callback is not None:
            callback(rnd, used, conf, post)
        rnd += 1
        if rank_confidence is not None and np.isfinite(conf) and conf >= rank_confidence:   # NaN never stops
            stopped = "confidence"
            break
        if used >= r:
            stopped = "budget"
            break
        ni, nj = np.asarray(ni), np.asarray(nj)
        live = ni != nj
        ni, nj = ni[live][: r - used], nj[live][: r - used]
        if len(ni) == 0:
            stopped = "exhausted"
            break
        k = len(ni)
        bi[used:used + k], bj[used:used + k] = ni, nj
        bp[used:used + k], bw[used:used + k] = _ask(judge_fn, ni, nj), 1
        used += k
    return ActiveResult(post.mean, post, c, used, conf, stopped, np.asarray(history, float))
