"""Bootstrap over comparisons: score uncertainty for any scorer, one vmapped call.

The non-parametric bootstrap resamples the observed comparisons with
replacement. A resample is a multinomial count per comparison: in every
context the ``R_live`` live comparisons (non-zero weight) are drawn ``R_live``
times uniformly, and comparison ``k`` enters the replicate with weight
``count_k * weight_k``; padded comparisons keep weight 0. A comparison is one
unit however large its weight: a comparison of weight 20 is resampled as a
cluster, not as 20 independent repetitions (its scores equal those of 20 copies,
its bootstrap spread does not); to resample the repetitions, give them as
separate comparisons or resample the outcomes (:func:`bootstrap_outcomes`). Replicates are built and scored in one ``jax.vmap`` over replicate keys, so
``B`` replicates of ``C`` contexts cost one batched scorer call.

Intervals (:func:`bootstrap_intervals`): *percentile*, the equal-tailed
quantiles ``(q_lo, q_hi)`` of the replicate scores; *basic*, ``(2 s^ - q_hi,
2 s^ - q_lo)`` around the estimate ``s^``; *normal*, ``s^ -/+ z sd``. The soft-BT
maximum-likelihood scores are biased outward (``|s^|`` exceeds ``|s|`` by a few
per cent with a few dozen comparisons per item), and the percentile interval
repeats that bias on top of ``s^``, so it under-covers a little (about 0.92
for nominal 0.95 with 28 comparisons per item, 0.95 with 56); the basic interval
reflects it back and covers about 0.95 (``tests/test_bootstrap.py``).

Scores are compared on the scorer's own gauge (jaxrank's log-strength scorers
centre each connected component); a replicate that disconnects the graph is
still centred per component.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from statistics import NormalDist
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxrank import _batching, _deprecation, _multinomial
from jaxrank.comparisons import Comparisons
from jaxrank.scoring import existence

__all__ = ["bootstrap", "bootstrap_outcomes", "resample_comparisons", "percentile_intervals", "bootstrap_intervals"]


def _resample_one(c: Comparisons, u) -> Comparisons:
    """One context: ``R_live`` uniform draws (from uniforms ``u [R]``) among the live comparisons."""
    r = c.num_comparisons
    live = c.weight > 0
    n_live = jnp.sum(live)
    live_first = jnp.argsort(~live, stable=True)            # positions of the live comparisons, first
    pick = jnp.minimum(jnp.floor(u * n_live).astype(jnp.int32), jnp.maximum(n_live - 1, 0))
    draws = live_first[pick]
    counts = jax.ops.segment_sum((jnp.arange(r) < n_live).astype(c.weight.dtype), draws, r)
    return Comparisons(i=c.i, j=c.j, p=c.p, weight=c.weight * counts, item_mask=c.item_mask, num_items=c.num_items)


@jax.jit
def _resample(c: Comparisons, key) -> Comparisons:
    # one uniform draw for all contexts (one threefry call site: cheap to compile)
    u = jax.random.uniform(key, c.weight.shape)
    f = _resample_one
    for _ in c.batch_shape:
        f = jax.vmap(f)
    return f(c, u)


def _key(key):
    """``key`` as a ``jax.random`` key: a key (typed, or a legacy ``uint32[2]``) as it is, an int seed as
    ``jax.random.key(seed)``; else a ``ValueError`` naming ``key``."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
        return jax.random.key(int(key))
    dtype = getattr(key, "dtype", None)
    if dtype is not None and (jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
                              or dtype == np.uint32 and np.ndim(key) >= 1 and np.shape(key)[-1] == 2):
        return key
    raise ValueError(f"key must be a jax.random key (jax.random.key(seed)) or an int seed, got {key!r}")


def resample_comparisons(c: Comparisons, *, key) -> Comparisons:
    """One bootstrap replicate of ``c``: multinomial counts per comparison, per context.

    Args:
        c: comparisons, any batch shape.
        key: a ``jax.random`` key, or an int seed (``jax.random.key(seed)``).

    Returns:
        ``c`` with ``weight = count * weight``, ``count ~ Multinomial(R_live, uniform over
        the live comparisons)`` in every context.
    """
    if not isinstance(c, Comparisons):
        raise ValueError(f"c must be a Comparisons, got {type(c).__name__}")
    return _resample(c, _key(key))


@functools.partial(jax.jit, static_argnames=("num_replicates",))
def _replicates(c, key, num_replicates):
    return jax.vmap(lambda k: _resample(c, k))(jax.random.split(key, num_replicates))


def bootstrap(scorer: Callable, c: Comparisons, *, key, num_replicates: int, missing: str = "nan",
              **scorer_kwargs):
    """Bootstrap distribution of a scorer's output over resampled comparisons.

    Args:
        scorer: ``scorer(c, **scorer_kwargs) -> scores [..., N]`` (any jaxrank
            scorer, e.g. :func:`jaxrank.poe_bradley_terry`; anything JAX-traceable
            and ``vmap``-able; a pytree output is fine).
        c: comparisons, any batch shape ``[...]``.
        key: a ``jax.random`` key, or an int seed (``jax.random.key(seed)``, as :func:`bootstrap_outcomes`).
        num_replicates: ``B``.
        missing: ``"nan"`` (default): an item judged in ``c`` that is in no
            comparison of a replicate gets score NaN in that replicate (the
            replicate holds no evidence about it; the scorer would give it its
            neutral 0, pulling its interval to 0). The interval functions skip
            NaN, and ``jnp.isnan(samples).sum(0)`` counts each item's missing
            replicates. Applied to an array output ``[B, ..., N]`` (last axis
            ``N``, read as per-item scores); pass ``"keep"`` for the scorer's
            output as it is (e.g. a per-comparison output of length ``N``).
        **scorer_kwargs: static options passed to the scorer (e.g. ``debias="mean"``).
            With ``eps=0`` and no ``score_prior`` (maximum likelihood by a soft-BT
            scorer), every replicate is tested for finite ML scores
            (:mod:`jaxrank.scoring.existence`); the scorer fits one that fails as
            the MAP under ``existence.AUTO_SCORE_PRIOR``, and one
            ``NotStronglyConnectedWarning`` counts them (eager calls).

    Returns:
        The scorer's output for every replicate, stacked on a new leading axis:
        ``[B, ..., N]`` for a score array.

    Raises:
        ValueError: ``num_replicates`` not a positive int, ``c`` not a ``Comparisons``,
            ``scorer`` not callable, ``key`` neither a key nor an int, a bad ``missing``.
    """
    if not callable(scorer):
        raise ValueError(f"scorer must be callable, got {scorer!r}")
    if not isinstance(c, Comparisons):
        raise ValueError(f"c must be a Comparisons, got {type(c).__name__}")
    if isinstance(num_replicates, bool) or not isinstance(num_replicates, (int, np.integer)) or num_replicates < 1:
        raise ValueError(f"num_replicates must be a positive int, got {num_replicates!r}")
    _check_missing(missing)
    reps = _replicates(c, _key(key), int(num_replicates))
    f = functools.partial(scorer, **scorer_kwargs) if scorer_kwargs else scorer
    out = jax.vmap(f)(reps)
    if _fits_ml(scorer_kwargs):
        _warn_fallback("bootstrap", _finite_ml(reps))
    return _mark_dropped(out, c, reps) if missing == "nan" else out


def _fits_ml(scorer_kwargs) -> bool:
    """Whether the options ask a soft-BT scorer for maximum likelihood (``eps=0`` and no score prior)."""
    eps, prior = scorer_kwargs.get("eps"), scorer_kwargs.get("score_prior", 0.0)
    try:
        return eps is not None and float(eps) == 0.0 and not float(prior) > 0
    except (TypeError, ValueError):
        return False


@jax.jit
def _finite_ml(reps: Comparisons) -> jax.Array:
    """``[B, ...]`` whether every replicate has finite maximum-likelihood scores (``existence.finite_ml``)."""
    f = functools.partial(existence.finite_ml, eps=0.0)
    for _ in reps.batch_shape:
        f = jax.vmap(f)
    return f(reps, reps.components())


def _warn_fallback(caller: str, finite) -> None:
    """One warning counting the replicates without finite ML scores (nothing under a trace)."""
    if isinstance(finite, jax.core.Tracer):
        return
    finite = np.asarray(finite)
    bad = int(finite.size - finite.sum())
    what = "replicates" if finite.ndim == 1 else "replicated contexts (replicates x contexts)"
    if bad:
        warnings.warn(
            f"{caller}: {bad} of {finite.size} {what} have no finite maximum-likelihood scores (eps=0: some "
            f"item never lost, or never won, within its component); the scorer fitted them as the MAP under the "
            f"score prior {existence.AUTO_SCORE_PRIOR} (jaxrank.scoring.existence), so their scores are not ML. "
            f"Pass score_prior > 0 to choose the prior for every replicate.",
            existence.NotStronglyConnectedWarning, stacklevel=3)


def _check_missing(missing):
    if not isinstance(missing, str) or missing not in ("nan", "keep"):
        raise ValueError(f"missing must be 'nan' or 'keep', got {missing!r}")


def _mark_dropped(out, c: Comparisons, reps: Comparisons):
    """``out`` with NaN where an item judged in ``c`` is in no comparison of the replicate (array outputs
    ``[B, ..., N]`` only; a pytree output is returned as it is)."""
    if not isinstance(out, jax.Array) or not jnp.issubdtype(out.dtype, jnp.floating) \
            or out.shape != reps.batch_shape + (c.num_items,):
        return out
    dropped = (c.games() > 0) & (reps.games() <= 0)
    return jnp.where(dropped, jnp.nan, out)


@functools.lru_cache(maxsize=32)
def _outcome_scorer(scorer, kwargs):
    f = functools.partial(scorer, **dict(kwargs))

    check = _fits_ml(dict(kwargs))

    @functools.partial(jax.jit, static_argnames=("size", "num_categories", "missing"))
    def run(c, key, frac, starts, ends, total, size, num_categories, missing):
        """Draw ``size`` replicates on the device and score them (one program per shape: the tree spans
        every category, zero counts included, so it depends on ``R`` and not on the data)."""
        draws = _multinomial.multinomial(key, frac, starts, ends, total, size, num_categories)
        cats = draws.reshape(size, c.num_comparisons, -1)
        games = jnp.sum(cats, -1)
        wins = cats[..., 0] + 0.5 * cats[..., 2] if cats.shape[-1] == 3 else cats[..., 0]
        shape = games.shape
        reps = dataclasses.replace(
            c, i=jnp.broadcast_to(c.i, shape), j=jnp.broadcast_to(c.j, shape),
            p=wins / jnp.where(games > 0, games, 1), weight=games,
            item_mask=jnp.broadcast_to(c.item_mask, shape[:1] + c.item_mask.shape))
        out = f(reps)
        finite = _finite_ml(reps) if check else jnp.ones(size, bool)
        return (_mark_dropped(out, c, reps) if missing == "nan" else out), finite

    return run


def bootstrap_outcomes(scorer: Callable, c: Comparisons, *, num_replicates: int, key=None,
                       seed=_deprecation.UNSET, chunks: int = 4, draws=None, missing: str = "nan",
                       **scorer_kwargs):
    """Bootstrap over the raw outcomes behind count-aggregated comparisons (one context).

    For count data (e.g. Arena battles summed per ordered pair), comparison
    ``k`` stands for ``w_k`` raw outcomes of which ``p_k w_k`` were won by A
    (a draw counting half to each side, as in :func:`jaxrank.io.read_comparisons`).
    :func:`bootstrap` would resample the aggregated comparisons (a cluster
    bootstrap over ordered pairs); this resamples the ``M = sum_k w_k`` raw
    outcomes with replacement, as a bootstrap of the underlying matches does:
    the counts of the ``3 R`` categories (comparison; A won, B won or a draw;
    ``2 R`` without ``draws``) are ``Multinomial(M, n / M)``. They are drawn exactly on the device from
    ``key`` (``jax.random``): conditional binomials along a balanced binary
    tree over the categories, each an exact binomial draw (inversion, or
    Hoermann's BTRS rejection), vectorised over replicates and tree nodes
    (``jaxrank/_multinomial.py``). Replicate ``b`` is the comparison set with
    ``weight = games_b`` and ``p = (A's wins + draws / 2)_b / games_b``, drawn
    and scored in ``chunks`` calls of one compiled program (draws and
    ``scorer`` together). The tree spans every category, those with a zero
    count too, so the program depends only on ``R``, ``N``, the dtype, the
    chunk size and whether ``draws`` is given, not on the counts: new data of
    the same shape reuses it.

    Args:
        scorer: a jaxrank scorer (``scorer(c, **scorer_kwargs)``), e.g.
            :func:`jaxrank.poe_bradley_terry` with ``eps=0.0`` for maximum likelihood
            (replicates without finite ML scores are fitted under the automatic
            score prior and counted in one warning, as in :func:`bootstrap`).
        c: ONE context (no batch axes) whose weights count raw outcomes (whole
            numbers) and whose ``p * weight`` count A's wins plus half its
            draws (whole numbers once the draws are taken out).
        num_replicates: ``B``.
        key: a ``jax.random`` key for the resampling, as in :func:`bootstrap`
            (default ``jax.random.key(0)``).
        seed: deprecated (an int seed, the old name of ``key``); ``key=jax.random.key(seed)``.
        chunks: number of calls (``B`` is rounded up to a multiple of it; the
            extra replicates are dropped). More chunks use less memory.
        draws: optional ``[R]`` number of drawn outcomes of every comparison
            (whole numbers, at most its weight); default none. Without it a
            draw cannot be told from a win and a loss, so data with draws
            needs it (``p * weight`` is then a half-integer where the draws
            are odd, which is rejected).
        missing: as in :func:`bootstrap`: ``"nan"`` (default) gives NaN to an
            item in no drawn outcome of a replicate, ``"keep"`` the scorer's output.
        **scorer_kwargs: options of the scorer (hashable).

    Returns:
        ``[B, N]`` scores (the scorer's output with a leading replicate axis).

    Raises:
        ValueError: ``c`` has batch axes; weights, ``draws`` or A's wins
            (``p * weight - draws / 2``) that are not whole numbers in
            ``[0, weight]`` (for soft probabilities use :func:`bootstrap`);
            more than ``2^24`` outcomes in float32 (not exactly representable:
            enable ``jax_enable_x64`` and pass float64 comparisons); bad
            ``num_replicates``/``chunks``; ``scorer`` not callable.
    """
    if not callable(scorer):
        raise ValueError(f"scorer must be callable, got {scorer!r}")
    if not isinstance(c, Comparisons):
        raise ValueError(f"c must be a Comparisons, got {type(c).__name__}")
    if c.batch_shape:
        raise ValueError(f"c must be one context (no batch axes), got batch shape {c.batch_shape}")
    for name, v in (("num_replicates", num_replicates), ("chunks", chunks)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    _check_missing(missing)
    counts = _outcome_counts(c, draws)
    m = int(counts.sum())
    if m < 1:
        raise ValueError("c holds no outcomes (all weights are 0)")
    dt = jnp.dtype(c.p.dtype)
    if dt == jnp.float32 and m > _multinomial.MAX_COUNT_FLOAT32:
        raise ValueError(f"c holds {m:,} outcomes, more than float32 counts represent exactly "
                         f"({_multinomial.MAX_COUNT_FLOAT32:,}); enable jax_enable_x64 and pass float64 comparisons")
    if draws is None:                            # no draws: two categories per comparison (A won, B won)
        counts = counts.reshape(-1, 3)[:, :2].reshape(-1)
    tree = _multinomial.tree(counts)             # every category, zero counts too: one program per (R, N)
    size = -(-int(num_replicates) // int(chunks))
    try:
        run = _outcome_scorer(scorer, tuple(sorted(scorer_kwargs.items())))
    except TypeError as err:
        raise ValueError(f"scorer_kwargs must be hashable: {err}") from None
    key = _deprecation.renamed_keyword("bootstrap_outcomes", "seed", "key", seed, key)
    if isinstance(key, (int, np.integer)):          # the deprecated int seed
        key = jax.random.key(int(key))
    key = jax.random.key(0) if key is None else key
    frac = jnp.asarray(tree.frac, dt)
    with _batching.single_threaded_lapack():     # the scorer's factorisations (see _batching)
        out = [run(c, jax.random.fold_in(key, b), frac, tree.starts, tree.ends, np.asarray(m, dt),
                   size=size, num_categories=tree.num_categories, missing=missing) for b in range(int(chunks))]
        out = jax.block_until_ready(out)
    _warn_fallback("bootstrap_outcomes", np.concatenate([np.asarray(f) for _, f in out])[:num_replicates])
    return jax.tree.map(lambda *xs: jnp.concatenate(xs)[:num_replicates], *[o for o, _ in out])


def _outcome_counts(c, draws):
    """``[3 R]`` float64 counts (A won, B won, drawn) per comparison, validated (see :func:`bootstrap_outcomes`)."""
    w = np.asarray(c.weight, np.float64)
    if draws is None:
        d = np.zeros_like(w)
    else:
        d = np.asarray(draws, np.float64)
        if d.shape != w.shape:
            raise ValueError(f"draws must have shape {w.shape} (one count per comparison), got {d.shape}")
    won = np.asarray(c.p, np.float64) * w - d / 2
    what = "p * weight" if draws is None else "A's wins, p * weight - draws / 2,"
    for name, x, top in (("weight", w, None), ("draws", d, w), (what, won, w - d)):
        bad = (np.abs(x - np.round(x)) > 1e-3 * np.maximum(1.0, np.abs(x))) | ~np.isfinite(x) | (x < -1e-3)
        if top is not None:
            bad |= x > top + 1e-3
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(f"{name} must count raw outcomes (whole numbers in [0, weight]); comparison {k} has "
                             f"{x[k]!r}. For soft probabilities use jaxrank.bootstrap")
    won, d = np.round(won), np.round(d)
    return np.stack([won, np.round(w) - won - d, d], axis=-1).reshape(-1)


def percentile_intervals(samples, *, level: float = 0.95, axis: int = 0) -> tuple[jax.Array, jax.Array]:
    """Equal-tailed percentile intervals ``(q_{(1-level)/2}, q_{(1+level)/2})`` along ``axis``.

    NaN replicates (a scorer that failed on a degenerate resample) are skipped.

    Args:
        samples: e.g. ``[B, ..., N]`` from :func:`bootstrap`.
        level: nominal coverage.
        axis: the replicate axis.

    Returns:
        ``(lower, upper)`` with ``axis`` removed.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    samples = jnp.asarray(samples)
    q = jnp.nanquantile(samples, jnp.array([(1 - level) / 2, (1 + level) / 2]), axis=axis)
    return q[0], q[1]


def bootstrap_intervals(samples, *, estimate=None, method: str = "percentile", level: float = 0.95,
                        axis: int = 0) -> tuple[jax.Array, jax.Array]:
    """Bootstrap confidence intervals from replicate scores.

    Args:
        samples: replicates, e.g. ``[B, ..., N]`` from :func:`bootstrap`.
        estimate: the scorer's output on the original comparisons (``[..., N]``);
            required by ``"basic"`` and ``"normal"``.
        method: ``"percentile"`` ``(q_lo, q_hi)``; ``"basic"`` ``(2 s^ - q_hi, 2 s^ - q_lo)``
            (corrects the outward bias of maximum-likelihood scores); ``"normal"``
            ``s^ -/+ z sd`` (``sd`` of the replicates).
        level: nominal coverage.
        axis: the replicate axis.

    Returns:
        ``(lower, upper)`` with ``axis`` removed. NaN replicates are skipped.

    Raises:
        ValueError: a bad ``method`` or ``level``; ``estimate`` missing where needed, or of a shape that does not
            broadcast to ``samples``' shape without ``axis``.
    """
    if method not in ("percentile", "basic", "normal"):
        raise ValueError(f"method must be 'percentile', 'basic' or 'normal', got {method!r}")
    if method == "percentile":
        return percentile_intervals(samples, level=level, axis=axis)
    if estimate is None:
        raise ValueError(f"method={method!r} needs the estimate on the original comparisons (estimate=)")
    estimate = jnp.asarray(estimate)
    shape = list(np.shape(samples))
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"axis {axis} is out of range for samples of shape {tuple(shape)}")
    del shape[axis]
    try:
        ok = np.broadcast_shapes(estimate.shape, tuple(shape)) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"estimate has shape {estimate.shape}; it must be the scorer's output on the original "
                         f"comparisons, shape {tuple(shape)} (samples {np.shape(samples)} without axis {axis})")
    if method == "basic":
        lo, hi = percentile_intervals(samples, level=level, axis=axis)
        return 2 * estimate - hi, 2 * estimate - lo
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    z = NormalDist().inv_cdf(0.5 + level / 2)
    sd = jnp.nanstd(jnp.asarray(samples), axis=axis, ddof=1)
    return estimate - z * sd, estimate + z * sd
