"""PairS: merge sort with judge probabilities, greedy and beam (Liu et al. 2024; METHODS.md §5).

"Aligning with human judgement: the role of pairwise preference in LLM
evaluators" (Liu et al. 2024) ranks ``N`` candidates by *sorting* them with the
LLM as the comparator: under (approximate) transitivity the likelihood of a
ranking factorises over the comparisons a merge sort makes, so the judge is
asked only ``O(N log N)`` times instead of ``N(N-1)``.

* **PairS-greedy**: bottom-up merge sort; merging runs ``L`` and ``R`` (each
  best first) compares the heads, ``p = P(L[a] better than R[b])``, and takes
  ``L[a]`` if ``p >= 0.5``. It uses at most ``ceil(log2 N) (N - 1)``
  comparisons (each level merges ``N`` items at most ``N - 1`` times), and at most
  ``N log2 N - N + 1`` (merge sort's worst case) when ``N`` is a power of two; for
  other ``N`` the bottom-up order can exceed top-down merge sort's bound
  ``N ceil(log2 N) - 2^ceil(log2 N) + 1`` (9 against 8 at ``N = 5``).
* **PairS-beam**: every merge keeps the ``beam_size`` most likely partial merges.
  A partial merge is a path of take-left/take-right steps; its log-likelihood
  sums ``log p`` (took left) or ``log(1 - p)`` (took right) over the comparisons
  it made, the merge-sort factorisation of the ranking likelihood
  ``prod p^z (1 - p)^(1 - z)`` (LCA App. B eq. 11-13). Each step extends every
  path both ways and keeps the best ``beam_size``; the merge returns the best
  path. Optionally (the paper's uncertainty pruning) a branch whose step
  probability is below ``prune`` is dropped, so confident comparisons do not
  spawn alternatives. ``beam_size=1`` is PairS-greedy exactly.

Static shapes, no recursion: ``N`` is padded to ``2^L`` with sentinel items that
lose every comparison without asking the judge; level ``l`` of the bottom-up sort
merges all ``2^(L-l-1)`` pairs of runs at once (``vmap``), each merge a
``lax.fori_loop`` over its ``2^(l+1)`` output slots; the ``L`` levels are a Python
loop at trace time (their shapes differ). The judge is a JAX-traceable
``prob(i_idx, j_idx) -> p`` applied elementwise to index arrays, or a dense
``[..., N, N]`` probability matrix (looked up, and batched over contexts). Each
distinct ordered pair the judge is asked counts once (beam paths often ask the
same pair: a cache answers the repeats).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _validate
from jaxrank.comparisons import Comparisons
from jaxrank.selection import _common

__all__ = ["pairs_rank", "PairSResult"]


class PairSResult(NamedTuple):
    """Result of :func:`pairs_rank`.

    Attributes:
        order: int32 ``[..., N]`` items best first; padded (masked) items last.
        scores: ``[..., N]`` rank scores, ``n_real - 1`` for the best real item
            down to 0 for the worst (higher is better); 0 for padded items.
        num_comparisons: int32 ``[...]``, distinct judge comparisons used (both
            orders count with ``symmetric``).
        comparisons: :class:`jaxrank.Comparisons` of the comparisons made (each
            distinct one with weight 1, repeats and unused slots with weight 0), e.g.
            to score with a PoE scorer.
        log_likelihood: ``[...]`` sum over merges of the chosen paths' log-likelihoods.
    """

    order: jax.Array
    scores: jax.Array
    num_comparisons: jax.Array
    comparisons: Comparisons
    log_likelihood: jax.Array


def _merge(left, right, is_real, prob_fn, *, beam, symmetric, prune):
    """Merge two sorted runs (best first) of width ``w``; beam search over merge paths.

    A ``lax.scan`` over the ``2w`` output slots; the per-step queries are its stacked outputs.
    """
    w = left.shape[0]
    dt = jnp.result_type(float)
    neg = jnp.asarray(-jnp.inf, dt)
    earlier = jnp.arange(beam)[None, :] < jnp.arange(beam)[:, None]

    def step(state, t):
        a, logp, out = state
        b = t - a
        l_ok, r_ok = a < w, b < w
        la, rb = left[jnp.minimum(a, w - 1)], right[jnp.minimum(b, w - 1)]
        l_real, r_real = l_ok & is_real(la), r_ok & is_real(rb)
        query = l_real & r_real & (logp > -jnp.inf)
        p_ab = prob_fn(la, rb).astype(dt)
        if symmetric:
            p_ba = prob_fn(rb, la).astype(dt)
            p = 0.5 * (p_ab + 1 - p_ba)
        else:
            p_ba, p = p_ab, p_ab
        p_left = jnp.where(query, p, jnp.where(l_ok & (l_real | ~r_real), 1.0, 0.0)).astype(dt)
        lp_left, lp_right = jnp.log(p_left), jnp.log1p(-p_left)     # -inf where impossible
        lp_left = jnp.where(query & (p_left < prune), neg, lp_left)        # prune = 0: never
        lp_right = jnp.where(query & (1 - p_left < prune), neg, lp_right)
        new_logp, idx = jax.lax.top_k(jnp.concatenate([logp + lp_left, logp + lp_right]), beam)
        parent = idx % beam
        took_left = idx < beam
        chosen = jnp.where(took_left, la[parent], rb[parent])
        new_out = out[parent].at[:, t].set(chosen)
        # the distinct queries of this step: paths with the same a ask the same pair
        first = query & ~jnp.any((a[:, None] == a[None, :]) & query[None, :] & earlier, axis=1)
        rec = (la, rb, jnp.where(query, p_ab, 0.5), jnp.where(query, p_ba, 0.5), first)
        return (a[parent] + took_left.astype(a.dtype), new_logp, new_out), rec

    init = (jnp.zeros(beam, jnp.int32), jnp.full(beam, neg).at[0].set(0.0), jnp.zeros((beam, 2 * w), left.dtype))
    (_, logp, out), (ri, rj, pab, pba, first) = jax.lax.scan(step, init, jnp.arange(2 * w))
    if symmetric:
        rec = (jnp.stack([ri, rj], -1), jnp.stack([rj, ri], -1), jnp.stack([pab, pba], -1),
               jnp.stack([first, first], -1))
    else:
        rec = (ri, rj, pab, first)
    return out[0], logp[0], rec


def _pairs_one(prob_fn, mask, key, *, n, beam, symmetric, prune, shuffle):
    levels = max(1, int(np.ceil(np.log2(n))))
    npad = 2**levels
    start = jnp.where(shuffle, jnp.argsort(jax.random.uniform(key, (n,))), jnp.arange(n)).astype(jnp.int32)
    items = jnp.concatenate([start, jnp.arange(n, npad, dtype=jnp.int32)])

    def is_real(x):
        return (x < n) & mask[jnp.minimum(x, n - 1)]

    def safe_prob(x, y):
        return prob_fn(jnp.minimum(x, n - 1), jnp.minimum(y, n - 1))

    merge = functools.partial(_merge, is_real=is_real, prob_fn=safe_prob, beam=beam, symmetric=symmetric,
                              prune=prune)
    recs, loglik = [], jnp.zeros((), jnp.result_type(float))
    for level in range(levels):
        w = 2**level
        runs = items.reshape(npad // (2 * w), 2, w)
        merged, ll, rec = jax.vmap(merge)(runs[:, 0], runs[:, 1])
        items = merged.reshape(npad)
        loglik = loglik + jnp.sum(ll)
        recs.append(tuple(x.reshape(-1) for x in rec))
    ri, rj, rp, rw = (jnp.concatenate(parts) for parts in zip(*recs))
    pos = jnp.zeros(npad, jnp.int32).at[items].set(jnp.arange(npad, dtype=jnp.int32))[:n]
    order = jnp.argsort(pos).astype(jnp.int32)
    n_real = jnp.sum(mask)
    scores = jnp.where(mask, (n_real - 1 - pos), 0).astype(jnp.result_type(float))
    weight = rw.astype(rp.dtype)
    ri, rj = jnp.where(rw, ri, 0), jnp.where(rw, rj, 0)
    return order, scores, jnp.sum(rw).astype(jnp.int32), (ri, rj, rp, weight), loglik


@functools.partial(jax.jit, static_argnames=("n", "beam", "symmetric"))
def _pairs_dense(probs, mask, key, prune, shuffle, *, n, beam, symmetric):
    def one(probs, mask, key):
        return _pairs_one(lambda x, y: probs[x, y], mask, key, n=n, beam=beam, symmetric=symmetric,
                          prune=prune, shuffle=shuffle)

    f = one
    for _ in range(probs.ndim - 2):
        f = jax.vmap(f)
    return f(probs, mask, key)


@functools.partial(jax.jit, static_argnames=("prob_fn", "n", "beam", "symmetric"))
def _pairs_callable(mask, key, prune, shuffle, *, prob_fn, n, beam, symmetric):
    return _pairs_one(prob_fn, mask, key, n=n, beam=beam, symmetric=symmetric, prune=prune, shuffle=shuffle)


def _check_matrix(probs, mask):
    """A concrete judge matrix's probabilities between real items off the diagonal: finite, in ``[0, 1]``
    (the diagonal, never asked, and the rows of padded items may hold anything, as in ``Comparisons.from_matrix``)."""
    if isinstance(probs, jax.core.Tracer) or isinstance(mask, jax.core.Tracer):
        return
    p, m = np.asarray(probs), np.asarray(mask, bool)
    asked = (m[..., :, None] & m[..., None, :]) & ~np.eye(p.shape[-1], dtype=bool)
    _validate.number("judge", np.where(asked, p, 0.5), low=0.0, high=1.0, array=True)


def pairs_rank(judge, *, num_items: int | None = None, beam_size: int = 1, symmetric: bool = False,
               prune: float = 0.0, key=None, item_mask=None) -> PairSResult:
    """Rank candidates by PairS merge sort with judge probabilities (Liu et al. 2024).

    Args:
        judge: a dense ``[..., N, N]`` matrix of ``P(a better than b)`` (``a`` in
            position A; any leading context axes, ranked in one batched call), or a
            JAX-traceable callable ``prob(i_idx, j_idx) -> p`` applied elementwise to
            int arrays of one context (then ``num_items`` is required; jit caches
            on the callable's identity, so reuse one function object).
        num_items: ``N``, for a callable judge.
        beam_size: 1 for PairS-greedy, more for PairS-beam.
        symmetric: ask both orders and use ``(p_ab + 1 - p_ba) / 2`` (permutation
            debiasing, METHODS.md §1); both count as comparisons.
        prune: drop a beam branch whose step probability is below this (0 = off).
        key: optional ``jax.random`` key to shuffle the initial order (split over
            contexts); None keeps the item order.
        item_mask: optional bool ``[..., N]`` of real candidates; padded ones are
            ranked last without asking the judge.

    Returns:
        :class:`PairSResult` (order, rank scores, number of comparisons, the
        comparisons made, log-likelihood).

    Raises:
        ValueError: bad ``beam_size``, ``prune`` outside ``[0, 0.5)``, a judge that
            is neither a square matrix nor a callable, a callable without ``num_items``,
            a concrete judge matrix with a NaN, infinite or out-of-``[0, 1]`` entry off
            the diagonal between real items, or a callable judge that returned one
            (checked after the call, on every probability it was asked: with
            ``symmetric``, each order's own, not only their average).
    """
    beam = _common.check_int("beam_size", beam_size, minimum=1)
    _validate.number("prune", prune, low=0.0, high=0.5, high_open=True)
    if callable(judge):
        if num_items is None:
            raise ValueError("num_items is required with a callable judge")
        n = _common.check_int("num_items", num_items, minimum=1)
        batch = ()
    else:
        probs = jnp.asarray(judge)
        if probs.ndim < 2 or probs.shape[-1] != probs.shape[-2]:
            raise ValueError(f"judge must be a callable or a [..., N, N] probability matrix; got shape {probs.shape}")
        n = probs.shape[-1]
        if num_items is not None and num_items != n:
            raise ValueError(f"num_items={num_items} does not match the judge matrix's N={n}")
        if not jnp.issubdtype(probs.dtype, jnp.floating):
            probs = probs.astype(jnp.float32)
        batch = tuple(probs.shape[:-2])
    mask = _common.check_item_mask(item_mask, batch, n)
    if mask is None:
        mask = jnp.ones(batch + (n,), bool)
    if not callable(judge):
        _check_matrix(probs, mask)
    shuffle = key is not None
    if key is None:
        key = jax.random.key(0)
    if batch:
        key = jax.random.split(key, int(np.prod(batch)))
        key = key.reshape(batch + key.shape[1:])
    kw = dict(n=n, beam=beam, symmetric=bool(symmetric))
    prune, shuffle = jnp.asarray(prune, jnp.result_type(float)), jnp.asarray(shuffle)
    if callable(judge):
        out = _pairs_callable(mask, key, prune, shuffle, prob_fn=judge, **kw)
    else:
        out = _pairs_dense(probs, mask, key, prune, shuffle, **kw)
    order, scores, count, (ri, rj, rp, rw), ll = out
    if callable(judge) and not isinstance(rp, jax.core.Tracer):
        # the probabilities the judge returned for the comparisons it was asked (weight > 0)
        p = np.asarray(rp)
        bad = (np.asarray(rw) > 0) & ~((p >= 0) & (p <= 1))   # NaN fails both comparisons
        if bad.any():
            k = np.argwhere(bad)[0][-1]
            raise ValueError(f"judge must return finite probabilities in [0, 1]; got {p[k]!r} for the pair "
                             f"({int(np.asarray(ri)[k])}, {int(np.asarray(rj)[k])})")
    comps = Comparisons(i=ri, j=rj, p=rp, weight=rw, item_mask=mask, num_items=n)
    return PairSResult(order, scores, count, comps, ll)
