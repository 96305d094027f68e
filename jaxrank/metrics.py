"""Agreement between predicted scores and human labels (METHODS.md §7).

Every metric works along the last axis (the candidates of one context) and
returns one value per context, with an optional boolean ``where`` mask for
padded candidates (masked reductions, as in rax/optax). A correlation is
undefined when either side is constant over the context's real candidates (or
fewer than two are real): those contexts return NaN, like
``scipy.stats.spearmanr``; :func:`context_mean` averages over contexts
skipping them, as the papers do. "Constant" is judged per side against that
side's own magnitude (its spread within ``n`` rounding steps of its largest
value), so scaling either side by any factor (1e-7, 1e7) leaves every result as
it is.

**Concrete inputs are ranked and centred on the host, in float64.** Outside a
trace, the rank metrics replace each side by its average ranks (NumPy, exact
ties, ``+-inf`` included) and :func:`pearson` by its centred, rescaled values
before anything is cast to JAX's float32: float64 scores that differ only
beyond float32 precision (``-1234.56701`` and ``-1234.56702``) stay distinct,
as in SciPy. Traced inputs (inside a caller's ``jax.jit``) take the jitted
path in their own dtype.

**NaN inputs are an error, not a number.** A NaN in ``pred`` or ``gold`` among
the ``where`` entries raises ``ValueError`` naming the argument and the index
(a rank of NaN is meaningless, and ``context_mean`` would silently skip the
context as undefined); so does an infinity for :func:`pearson`. The rank
metrics accept ``+-inf`` as the largest/smallest value. Inside a caller's
``jax.jit`` the values cannot be inspected: a context with a NaN (or, for
Pearson, an infinity) then gives NaN, never a number. Masked-out entries may
hold anything.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["spearman", "pearson", "kendall_tau", "pairwise_accuracy", "context_mean", "average_ranks",
           "CORRELATIONS", "system_level"]


def _concrete(*xs):
    """Whether no argument is a JAX tracer (then the host path of the module docstring applies)."""
    return not any(isinstance(x, jax.core.Tracer) for x in xs)


def _host_inputs(pred, gold, where):
    """``pred``, ``gold`` as NumPy float64 and ``where`` as a bool array of their (checked, equal) shape."""
    dtypes = [np.asarray(x).dtype for x in (pred, gold)]
    pred, gold = np.asarray(pred, np.float64), np.asarray(gold, np.float64)
    if pred.shape != gold.shape:
        raise ValueError(f"pred and gold must have the same shape; got {pred.shape} and {gold.shape}")
    where = np.ones(pred.shape, bool) if where is None else np.broadcast_to(np.asarray(where, bool), pred.shape)
    return pred, gold, where, dtypes


def _host_ranks(x, where):
    """Average ranks along the last axis (1 = smallest) of the ``where`` entries, float64; 0 where masked.

    Exact on the float64 values (``+-inf`` rank last/first, equal values tie), as ``scipy.stats.rankdata``.
    """
    x = np.where(where, x, 0.0)
    order = np.lexsort((x, ~where), axis=-1)                     # real entries first, by value
    xs, ws = np.take_along_axis(x, order, -1), np.take_along_axis(where, order, -1)
    n = x.shape[-1]
    idx = np.broadcast_to(np.arange(n), x.shape)
    new = np.ones(x.shape, bool)
    new[..., 1:] = (xs[..., 1:] != xs[..., :-1]) | (ws[..., 1:] != ws[..., :-1])
    start = np.maximum.accumulate(np.where(new, idx, 0), axis=-1)
    last = np.ones(x.shape, bool)
    last[..., :-1] = new[..., 1:]
    end = np.flip(np.minimum.accumulate(np.flip(np.where(last, idx, n), -1), axis=-1), -1)
    ranks = np.empty(x.shape)
    np.put_along_axis(ranks, order, (start + end) / 2 + 1, -1)
    return np.where(where, ranks, 0.0)


def _host_centre(x, where, dtype):
    """Centre on the mean of the ``where`` entries and divide by the largest centred ``|value|`` (float64);
    a side constant against its own magnitude (spread within ``n`` rounding steps of ``dtype`` of its largest
    ``|value|``) becomes exactly 0. Pearson's correlation is unchanged by the shift and the scale."""
    eps = np.finfo(dtype).eps if np.issubdtype(dtype, np.floating) else np.finfo(np.float64).eps
    x = np.where(where, x, 0.0)
    n = np.sum(where, -1, keepdims=True)
    xc = np.where(where, x - np.sum(x, -1, keepdims=True) / np.maximum(n, 1), 0.0)
    spread = np.max(np.abs(xc), -1, keepdims=True, initial=0.0)
    const = spread <= n * eps * np.max(np.abs(x), -1, keepdims=True, initial=0.0)
    return np.where(const, 0.0, xc / np.where(spread > 0, spread, 1.0))


def _prepare(pred, gold, where):
    pred, gold = jnp.asarray(pred), jnp.asarray(gold)
    if pred.shape != gold.shape:
        raise ValueError(f"pred and gold must have the same shape; got {pred.shape} and {gold.shape}")
    dt = jnp.result_type(pred.dtype, gold.dtype, jnp.float32)
    if where is None:
        where = jnp.ones(pred.shape, bool)
    else:
        where = jnp.broadcast_to(jnp.asarray(where, bool), pred.shape)
    return pred.astype(dt), gold.astype(dt), where


def _check_values(pred, gold, where, *, allow_inf):
    """``ValueError`` naming ``pred``/``gold`` for a NaN (or an infinity) among the ``where`` entries."""
    for name, x in (("pred", pred), ("gold", gold)):
        if isinstance(x, jax.core.Tracer) or isinstance(where, jax.core.Tracer):
            continue
        x = np.asarray(x)
        if x.dtype == object or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
            raise ValueError(f"{name} must be numeric, got dtype {x.dtype}")
        if not np.issubdtype(x.dtype, np.floating):
            continue
        bad = np.isnan(x) if allow_inf else ~np.isfinite(x)
        if where is not None:
            bad &= np.broadcast_to(np.asarray(where, bool), x.shape)
        if bad.any():
            k = tuple(int(v) for v in np.argwhere(bad)[0])
            raise ValueError(f"{name} has a {'NaN' if allow_inf else 'non-finite value'} {x[k]} at index {k}: "
                             f"no correlation is defined (mask it out with where=)")


def _poisoned(pred, gold, where, allow_inf):
    """Per context, whether a traced input holds NaN (or inf) among the ``where`` entries."""
    bad = (jnp.isnan(pred) | jnp.isnan(gold)) if allow_inf else ~(jnp.isfinite(pred) & jnp.isfinite(gold))
    return jnp.any(bad & where, axis=-1)


def _pairs(pred, gold, where):
    """The rank metrics' common start: :func:`_prepare`'d ``pred`` and ``gold``, the ``[..., N, N]`` mask of the
    real pairs ``a < b``, and per context whether a traced input holds a NaN (:func:`_poisoned`)."""
    pred, gold, where = _prepare(pred, gold, where)
    poisoned = _poisoned(pred, gold, where, True)
    n = pred.shape[-1]
    pair = where[..., :, None] & where[..., None, :] & (jnp.arange(n)[:, None] < jnp.arange(n)[None, :])
    return pred, gold, pair, poisoned


def _sign_diff(x):
    """``[..., N, N]`` ``sign(x_a - x_b)``; 0 for equal values (``inf - inf`` would be NaN)."""
    a, b = x[..., :, None], x[..., None, :]
    return jnp.where(a == b, 0, jnp.sign(a - b))


def average_ranks(x, *, where=None):
    """Ranks along the last axis (1 = smallest), ties get their average rank; masked entries get 0.

    Concrete input is ranked on the host in float64 (module docstring); traced input in its own dtype.
    """
    if _concrete(x, where):
        xh = np.asarray(x)
        w = np.ones(xh.shape, bool) if where is None else np.broadcast_to(np.asarray(where, bool), xh.shape)
        dt = jax.dtypes.canonicalize_dtype(np.result_type(xh.dtype, np.float32))
        return jnp.asarray(_host_ranks(np.asarray(xh, np.float64), w), dt)
    x = jnp.asarray(x)
    where = jnp.ones(x.shape, bool) if where is None else jnp.broadcast_to(jnp.asarray(where, bool), x.shape)
    m = where[..., None, :]
    less = jnp.sum((x[..., None, :] < x[..., :, None]) & m, axis=-1)
    equal = jnp.sum((x[..., None, :] == x[..., :, None]) & m, axis=-1)
    r = less + 0.5 * (equal + 1)
    return jnp.where(where, r, 0).astype(jnp.result_type(x.dtype, jnp.float32))


def pearson(pred, gold, *, where=None):
    """Pearson correlation per context over the ``where`` entries; NaN if undefined.

    Raises:
        ValueError: a NaN or infinity in ``pred`` or ``gold`` (see the module docstring).
    """
    _check_values(pred, gold, where, allow_inf=False)
    if _concrete(pred, gold, where):
        p, g, w, (dp, dg) = _host_inputs(pred, gold, where)
        return _pearson(_host_centre(p, w, dp), _host_centre(g, w, dg), w)
    return _pearson(pred, gold, where)


@jax.jit
def _pearson(pred, gold, where):
    pred, gold, where = _prepare(pred, gold, where)
    poisoned = _poisoned(pred, gold, where, False)
    pred, gold = jnp.where(where, pred, 0), jnp.where(where, gold, 0)   # masked slots may hold anything
    n = jnp.sum(where, axis=-1)
    safe_n = jnp.maximum(n, 1)
    xm = pred - jnp.sum(jnp.where(where, pred, 0), -1, keepdims=True) / safe_n[..., None]
    ym = gold - jnp.sum(jnp.where(where, gold, 0), -1, keepdims=True) / safe_n[..., None]
    xm, ym = jnp.where(where, xm, 0), jnp.where(where, ym, 0)
    sxx, syy, sxy = jnp.sum(xm * xm, -1), jnp.sum(ym * ym, -1), jnp.sum(xm * ym, -1)
    # constant per side against its own magnitude: scale-invariant (either side's units leave ok as it is)
    rel = n * jnp.finfo(pred.dtype).eps
    tiny_x, tiny_y = (rel * jnp.max(jnp.abs(pred), -1)) ** 2, (rel * jnp.max(jnp.abs(gold), -1)) ** 2
    ok = (n >= 2) & (sxx > tiny_x) & (syy > tiny_y)
    r = sxy / jnp.sqrt(jnp.where(ok, sxx * syy, 1))
    return jnp.where(ok & ~poisoned, jnp.clip(r, -1, 1), jnp.nan)


def spearman(pred, gold, *, where=None):
    """Spearman rank correlation per context (Pearson of average ranks); NaN if undefined.

    Args:
        pred: ``[..., N]`` predicted scores.
        gold: ``[..., N]`` human scores.
        where: optional ``[..., N]`` bool mask of real candidates.

    Returns:
        ``[...]`` one correlation per context.

    Raises:
        ValueError: a NaN in ``pred`` or ``gold`` (see the module docstring).
    """
    _check_values(pred, gold, where, allow_inf=True)
    if _concrete(pred, gold, where):
        p, g, w, _ = _host_inputs(pred, gold, where)
        rp, rg = _host_ranks(p, w), _host_ranks(g, w)
        return _pearson(_host_centre(rp, w, np.float64), _host_centre(rg, w, np.float64), w)
    return _spearman(pred, gold, where)


@jax.jit
def _spearman(pred, gold, where):
    pred, gold, where = _prepare(pred, gold, where)
    poisoned = _poisoned(pred, gold, where, True)
    r = _pearson(average_ranks(pred, where=where), average_ranks(gold, where=where), where)
    return jnp.where(poisoned, jnp.nan, r)


def kendall_tau(pred, gold, *, where=None):
    """Kendall tau-b per context (ties handled as in ``scipy.stats.kendalltau``); NaN if undefined.

    ``tau_b = sum_{a<b} sx sy / sqrt(sum sx^2 * sum sy^2)``, ``sx = sign(x_a - x_b)``.

    Raises:
        ValueError: a NaN in ``pred`` or ``gold`` (see the module docstring).
    """
    _check_values(pred, gold, where, allow_inf=True)
    if _concrete(pred, gold, where):
        p, g, w, _ = _host_inputs(pred, gold, where)
        return _kendall_tau(_host_ranks(p, w), _host_ranks(g, w), w)
    return _kendall_tau(pred, gold, where)


@jax.jit
def _kendall_tau(pred, gold, where):
    pred, gold, pair, poisoned = _pairs(pred, gold, where)
    sx = jnp.where(pair, _sign_diff(pred), 0)
    sy = jnp.where(pair, _sign_diff(gold), 0)
    num = jnp.sum(sx * sy, axis=(-2, -1))
    den = jnp.sum(sx * sx, axis=(-2, -1)) * jnp.sum(sy * sy, axis=(-2, -1))
    ok = (den > 0) & ~poisoned
    return jnp.where(ok, num / jnp.sqrt(jnp.where(ok, den, 1)), jnp.nan)


def pairwise_accuracy(pred, gold, *, where=None):
    """Fraction of pairs with different human scores that ``pred`` orders the same way.

    A tie in ``pred`` counts half. Returns NaN for a context with no such pair.

    Raises:
        ValueError: a NaN in ``pred`` or ``gold`` (see the module docstring).
    """
    _check_values(pred, gold, where, allow_inf=True)
    if _concrete(pred, gold, where):
        p, g, w, _ = _host_inputs(pred, gold, where)
        return _pairwise_accuracy(_host_ranks(p, w), _host_ranks(g, w), w)
    return _pairwise_accuracy(pred, gold, where)


@jax.jit
def _pairwise_accuracy(pred, gold, where):
    pred, gold, pair, poisoned = _pairs(pred, gold, where)
    sy = _sign_diff(gold)
    sx = _sign_diff(pred)
    counted = pair & (sy != 0)
    right = jnp.where(counted, jnp.where(sx == sy, 1.0, jnp.where(sx == 0, 0.5, 0.0)), 0.0)
    total = jnp.sum(counted, axis=(-2, -1))
    return jnp.where((total > 0) & ~poisoned, jnp.sum(right, axis=(-2, -1)) / jnp.maximum(total, 1), jnp.nan)


@functools.partial(jax.jit, static_argnames="axis")
def context_mean(values, axis=-1):
    """Mean over contexts skipping undefined (NaN) ones, as the papers do (METHODS.md §7).

    Returns NaN only if every context is undefined.
    """
    values = jnp.asarray(values)
    ok = ~jnp.isnan(values)
    count = jnp.sum(ok, axis=axis)
    total = jnp.sum(jnp.where(ok, values, 0), axis=axis)
    return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


CORRELATIONS = {"spearman": spearman, "kendall_tau": kendall_tau, "pearson": pearson}
"""The three correlations the field reports (Spearman, Kendall tau-b, Pearson), by name, in that order."""


def system_level(pred, gold, system, *, where=None, weights=None, names=None) -> dict:
    """Correlations of per-system mean scores: agreement at the system level.

    For each system ``s`` the mean of its candidates' scores over the contexts, weighted per context by
    ``w_c`` (all 1 by default; bootstrap counts to resample contexts),

    ``m_s = sum_c w_c sum_n [sys_cn = s] pred_cn / sum_c w_c sum_n [sys_cn = s]``,

    and ``h_s`` likewise of ``gold``; then each of :data:`CORRELATIONS` between ``m`` and ``h`` over the
    systems with a positive weight (Spearman, Kendall tau-b, Pearson; NaN when undefined, e.g. fewer than
    two systems).

    **Means equal within rounding are tied.** A mean of rounded scores carries their rounding: two systems
    whose scores average to the same number (win ratios ``29/72`` from different fractions, stored in float32)
    get means a few ulps apart, which a rank correlation would read as an order. So, per side, means that
    differ by at most ``4 eps`` of the side's input dtype (float32's for float32 input) times its largest used
    ``|value|``, plus the float64 sums' own rounding, are one tie, each given the smallest of its run
    (consecutive sorted means within that tolerance chain into one run). Each input is its dtype's rounding
    of a real number, so two equal means differ by at most ``eps`` times that largest value. Integer input
    has exact sums: only the float64 sums' rounding is allowed for.

    Args:
        pred: ``[C, N]`` predicted scores.
        gold: ``[C, N]`` human scores.
        system: ``[C, N]`` integer system ids (``>= 0``; floats must be whole numbers); a negative id leaves
            the candidate out.
        where: optional ``[C, N]`` bool mask of the candidates to use (padded or unlabelled ones False).
        weights: optional ``[..., C]`` non-negative weights of the contexts.
        names: the correlations to compute (default all of :data:`CORRELATIONS`).

    Returns:
        ``{name: [...]}``: one correlation per row of ``weights`` (a scalar without a batch).

    Raises:
        ValueError: shapes that disagree, a NaN among the used entries, ``weights`` negative, NaN or
            infinite, or ``system`` ids that are not whole numbers.
    """
    dtypes = [np.asarray(x).dtype for x in (pred, gold)]
    pred, gold = np.asarray(pred, np.float64), np.asarray(gold, np.float64)
    system = np.asarray(system)
    if not (pred.shape == gold.shape == system.shape) or pred.ndim != 2:
        raise ValueError(f"pred, gold and system must share one [C, N] shape; got {pred.shape}, {gold.shape} "
                         f"and {system.shape}")
    if not (np.issubdtype(system.dtype, np.integer) or np.issubdtype(system.dtype, np.floating)):
        raise ValueError(f"system must hold integer system ids, got dtype {system.dtype}")
    if np.issubdtype(system.dtype, np.floating):
        frac = ~np.isfinite(system) | (system != np.round(system))
        if frac.any():
            raise ValueError(f"system must hold integer system ids, got {system[frac][0]!r} at index "
                             f"{tuple(int(k) for k in np.argwhere(frac)[0])}")
        system = system.astype(np.int64)
    use = system >= 0
    if where is not None:
        use &= np.broadcast_to(np.asarray(where, bool), pred.shape)
    _check_values(pred, gold, use, allow_inf=False)
    w = np.ones(pred.shape[0]) if weights is None else np.asarray(weights, np.float64)
    if w.ndim == 0 or w.shape[-1] != pred.shape[0] or not np.all(np.isfinite(w)) or (w < 0).any():
        raise ValueError(f"weights must be finite and non-negative with last axis {pred.shape[0]} (contexts); got "
                         f"shape {w.shape}" + ("" if w.ndim == 0 or np.all(np.isfinite(w)) else ", with NaN or inf"))
    num_systems = int(system.max()) + 1 if use.any() else 1
    member = (system[..., None] == np.arange(num_systems)) & use[..., None]          # [C, N, S]
    count = w @ member.sum(1)                                                        # [..., S]
    ok = count > 0
    safe = np.where(ok, count, 1.0)
    m = np.where(ok, (w @ np.einsum("cns,cn->cs", member, np.where(use, pred, 0.0))) / safe, 0.0)
    h = np.where(ok, (w @ np.einsum("cns,cn->cs", member, np.where(use, gold, 0.0))) / safe, 0.0)
    terms = int(use.sum()) * max(1.0, float(np.abs(w).max(initial=0.0)))
    m = _tie_close(m, ok, _tie_tolerance(pred, use, dtypes[0], terms))
    h = _tie_close(h, ok, _tie_tolerance(gold, use, dtypes[1], terms))
    names = tuple(CORRELATIONS) if names is None else tuple(names)
    unknown = [n for n in names if n not in CORRELATIONS]
    if unknown:
        raise ValueError(f"names: unknown correlations {unknown}; known: {', '.join(CORRELATIONS)}")
    return {name: np.asarray(CORRELATIONS[name](m, h, where=ok), np.float64) for name in names}


def _tie_tolerance(x, use, dtype, terms) -> float:
    """How far apart two means of ``x``'s ``use`` entries may lie and still be equal before rounding.

    Each input value is its dtype's rounding of a real number (relative error at most ``eps / 2``), so a
    weighted mean of them is off by at most ``eps / 2`` times the largest ``|value|``, and two equal means
    differ by at most ``eps`` times it; four ``eps`` leave a margin. The float64 sums of ``terms`` products add
    ``terms`` float64 ulps. Integer (or bool) input is exact.
    """
    scale = float(np.abs(np.where(use, x, 0.0)).max(initial=0.0))
    eps = float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.floating) else 0.0
    return scale * (4.0 * eps + 4.0 * terms * float(np.finfo(np.float64).eps))


def _tie_close(x, ok, tol):
    """``x [..., S]`` with each run of ``ok`` values whose sorted neighbours lie within ``tol`` set to the run's
    smallest value (other entries unchanged)."""
    if tol <= 0:
        return x
    order = np.argsort(np.where(ok, x, np.inf), axis=-1, kind="stable")
    xs = np.take_along_axis(np.where(ok, x, np.inf), order, -1)
    with np.errstate(invalid="ignore"):
        start = np.concatenate([np.ones(xs.shape[:-1] + (1,), bool), ~(np.diff(xs, axis=-1) <= tol)], -1)
    idx = np.broadcast_to(np.arange(xs.shape[-1]), xs.shape)
    first = np.maximum.accumulate(np.where(start, idx, 0), axis=-1)
    out = np.empty_like(xs)
    np.put_along_axis(out, order, np.take_along_axis(xs, first, -1), -1)
    return np.where(ok, out, x)
