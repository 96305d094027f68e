"""Vectorised NumPy/SciPy peers of the six report scorers: many small problems in one call, no Python loop.

The strongest way a NumPy user scores ``B`` problems of ``R`` comparisons among ``n`` items: every problem's items
offset into one flat range (``b * n + item``) so ``np.bincount`` sums all problems at once (gradients and
``[B, n, n]`` Laplacians too), batched ``np.linalg.solve`` for the least-squares normal equations and the
Newton steps (the Laplacian plus the projector onto its null space: exactly the minimum-norm solutions),
``scipy.stats.rankdata(axis=1)`` for Spearman; iterative solvers compute only the problems not yet converged. The
same estimators as the per-problem loop of ``poe_protocol.py`` (same prior, stopping rule and component centring
for Bradley-Terry; minimum-norm least squares for PoE-g); PoE-BT by a batched Newton solve (float64, jaxrank's
stopping rule: step max-norm below 1e-5, per problem) instead of the loop's SciPy BFGS.

    scores = vec_scorer("poe_gaussian")(i, j, p, n)       # i, j [B, R] int, p [B, R] float -> [B, n]
    rho = vec_spearman(scores, gold)                       # [B]

Also the per-problem loop of the papers' code (``np_scorer``, ``baseline_pipeline``), the slower peer.
"""

from __future__ import annotations

import numpy as np
from scipy import stats
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from scipy import optimize
from scipy.special import expit, log_expit

TOL_BT = 1e-3


def _flat(i, j, n):
    off = (np.arange(i.shape[0]) * n)[:, None]
    return (i + off).ravel(), (j + off).ravel(), i.shape[0] * n


def _decisions(p):
    return np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, 0.5))


def vec_ratio(i, j, x, n):
    """Share of (soft) wins per item, 0.5 for an item without games: ``[B, n]``."""
    fi, fj, m = _flat(i, j, n)
    x = x.ravel()
    won = np.bincount(fi, x, m) + np.bincount(fj, 1 - x, m)
    games = np.bincount(fi, minlength=m) + np.bincount(fj, minlength=m)
    return np.where(games > 0, won / np.maximum(games, 1), 0.5).reshape(-1, n)


def _labels(fi, fj, m):
    """Connected component of every flat item (every problem's components are distinct)."""
    return connected_components(coo_matrix((np.ones(len(fi)), (fi, fj)), shape=(m, m)), directed=False)[1]


def _centre(s, labels, m=None):
    """``s`` minus its mean over each label (``m``: how many labels at least)."""
    m = m or 0
    return s - (np.bincount(labels, s, m) / np.maximum(np.bincount(labels, minlength=m), 1))[labels]


def vec_bradley_terry(i, j, p, n, tol=1e-3, max_iter=10_000):
    """Zermelo/MM on decisions for all problems at once; each problem stops by its own rule (as the loop), and
    only the problems not yet converged are computed."""
    B = i.shape[0]
    fi, fj, m = _flat(i, j, n)
    y = _decisions(p)
    games = np.bincount(fi, minlength=m) + np.bincount(fj, minlength=m)
    live = (games > 0).reshape(B, n)
    prior = (1.0 / np.maximum(live.sum(1) - 1, 1))[:, None]
    a, b = y + prior, 1 - y + prior
    wins = (np.bincount(fi, a.ravel(), m) + np.bincount(fj, b.ravel(), m)).reshape(B, n)
    labels = _labels(fi, fj, m).reshape(B, n)
    r = np.ones((B, n))
    act = np.arange(B)
    for _ in range(max_iter):
        ia, ja, ra, la = i[act], j[act], r[act], labels[act]
        x = (a[act] + b[act]) / (np.take_along_axis(ra, ia, 1) + np.take_along_axis(ra, ja, 1))
        gi, gj, k = _flat(ia, ja, n)
        den = (np.bincount(gi, x.ravel(), k) + np.bincount(gj, x.ravel(), k)).reshape(-1, n)
        lv = live[act]
        r_new = np.exp(_centre(np.log(np.where(lv, wins[act] / np.where(lv, den, 1), 1)).ravel(),
                               la.ravel(), m).reshape(-1, n))
        done = (np.abs(r_new - ra) / np.maximum(r_new, 1)).max(1) < tol
        r[act] = r_new
        act = act[~done]
        if not len(act):
            break
    return _centre(np.where(live, np.log(r), 0).ravel(), labels.ravel(), m).reshape(-1, n)


def _component_projector(i, j, n):
    """``[B, n, n]``: ``1/|c|`` between two items of the same connected component ``c`` of a problem, else 0
    (an item in no comparison is its own component): the projector onto each Laplacian's null space."""
    B = i.shape[0]
    fi, fj, m = _flat(i, j, n)
    labels = _labels(fi, fj, m).reshape(B, n)
    size = np.bincount(labels.ravel())[labels]
    return (labels[:, :, None] == labels[:, None, :]) / size[:, None, :]


def _laplacian(i, j, h, n):
    """``[B, n, n]`` weighted Laplacians ``sum_k h_k (e_i - e_j)(e_i - e_j)^T`` by ``np.bincount``."""
    B = i.shape[0]
    cell = (np.arange(B) * n * n)[:, None]
    h = np.broadcast_to(h, i.shape).ravel()
    count = lambda a, b: np.bincount((cell + a * n + b).ravel(), h, B * n * n)
    return (count(i, i) + count(j, j) - count(i, j) - count(j, i)).reshape(B, n, n)


def _scatter(i, j, r, n):
    """``[B, n]``: ``sum_k r_k (e_i - e_j)`` by ``np.bincount``."""
    fi, fj, m = _flat(i, j, n)
    return (np.bincount(fi, r.ravel(), m) - np.bincount(fj, r.ravel(), m)).reshape(-1, n)


def vec_poe_gaussian(i, j, p, n, hard=False):
    """Minimum-norm least squares ``W s = p - 1/2`` by its normal equations ``L s = W^T y``, solved as
    ``(L + P) s = W^T y`` (``L = W^T W`` the Laplacian, ``P`` the projector onto its null space: batched
    ``np.linalg.solve`` of ``[B, n, n]``): exactly the minimum-norm solution, every component centred."""
    y = (_decisions(p) if hard else p) - 0.5
    L = _laplacian(i, j, 1.0, n)
    return np.linalg.solve(L + _component_projector(i, j, n), _scatter(i, j, y, n)[..., None])[..., 0]


def vec_poe_bradley_terry(i, j, p, n, eps=1e-6, tol=1e-5, max_iter=50):
    """Soft Bradley-Terry by batched Newton, each problem stopping by its own rule (as jaxrank: step max-norm
    below ``tol``, 1e-5, jaxrank's float32 default; here in float64).

    Gradients and ``[B, n, n]`` Laplacian Hessians by ``np.bincount``; each step solves ``(H + P) x = g`` with
    ``P`` the projector onto the constants of every connected component (batched ``np.linalg.solve``): exactly
    the minimum-norm Newton step ``H^+ g``, since ``g`` sums to zero on every component; an item in no
    comparison stays at 0. Only the problems not yet converged are computed.
    """
    p = np.clip(p, eps, 1 - eps)
    proj = _component_projector(i, j, n)
    s = np.zeros((i.shape[0], n))
    act = np.arange(i.shape[0])
    for _ in range(max_iter):
        ia, ja, pa, sa = i[act], j[act], p[act], s[act]
        q = expit(np.take_along_axis(sa, ia, 1) - np.take_along_axis(sa, ja, 1))
        H = _laplacian(ia, ja, q * (1 - q), n) + proj[act]
        step = np.linalg.solve(H, _scatter(ia, ja, q - pa, n)[..., None])[..., 0]
        s[act] = sa - step
        act = act[np.abs(step).max(1) >= tol]
        if not len(act):
            break
    return s


def vec_bradley_terry_newton(i, j, p, n, tol=1e-5, max_iter=50):
    """The same MAP Bradley-Terry as :func:`vec_bradley_terry` (decisions plus the prior ``1/(N_live - 1)`` as
    pseudo-wins each way), solved by batched Newton (:func:`vec_poe_bradley_terry`) instead of Zermelo/MM.

    Each comparison is ``a = y + prior`` wins of ``i`` and ``b = 1 - y + prior`` of ``j``: soft BT with
    ``p' = a / (a + b)`` and weight ``a + b``, the same for every comparison of a problem, so the same optimum.
    Converged to jaxrank's rule (step max-norm below ``tol``), where MM stops at the papers' 1e-3.
    """
    fi, fj, m = _flat(i, j, n)
    games = np.bincount(fi, minlength=m) + np.bincount(fj, minlength=m)
    prior = (1.0 / np.maximum((games > 0).reshape(-1, n).sum(1) - 1, 1))[:, None]
    return vec_poe_bradley_terry(i, j, (_decisions(p) + prior) / (1 + 2 * prior), n, eps=0.0, tol=tol,
                                 max_iter=max_iter)


def vec_scorer(name, bt="mm"):
    """The vectorised peer of a report scorer: ``f(i [B, R], j [B, R], p [B, R], n) -> scores [B, n]``.

    ``bt``: Bradley-Terry by the papers' Zermelo/MM (``"mm"``, the loop's algorithm and stopping rule) or by
    Newton on the same objective (``"newton"``, jaxrank's algorithm; the faster).
    """
    return {
        "win_ratio": lambda i, j, p, n: vec_ratio(i, j, _decisions(p), n),
        "average_probability": vec_ratio,
        "bradley_terry": {"mm": vec_bradley_terry, "newton": vec_bradley_terry_newton}[bt],
        "poe_gaussian": vec_poe_gaussian,
        "poe_gaussian_hard": lambda i, j, p, n: vec_poe_gaussian(i, j, p, n, hard=True),
        "poe_bradley_terry": vec_poe_bradley_terry,
    }[name]


def vec_spearman(scores, gold):
    """Row-wise Spearman (average ranks for ties; NaN for a constant row, as ``scipy.stats.spearmanr``)."""
    rs, rg = stats.rankdata(scores, axis=1), stats.rankdata(gold, axis=1)
    rs -= rs.mean(1, keepdims=True)
    rg -= rg.mean(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rs * rg).sum(1) / np.sqrt((rs ** 2).sum(1) * (rg ** 2).sum(1))


def _nanmean(x):
    """Row means skipping NaN; NaN (no warning) for a row of NaN only."""
    ok = ~np.isnan(x)
    with np.errstate(invalid="ignore"):
        return np.where(ok, x, 0).sum(1) / ok.sum(1)


def vec_curves(name, i, j, p, labels, budgets, decimals=None, bt="mm"):
    """Efficiency curves of a nested selection, vectorised: one call per budget over every (subset, context).

    ``i, j, p`` ``[S, C, R]`` (budget ``r`` keeps the first ``r`` slots, all live), ``labels`` ``[C, n]``:
    returns ``[len(budgets), S]``, the context-mean Spearman per subset (NaN contexts skipped), as
    :func:`jaxrank.studies.efficiency_curves`. ``decimals``: scores rounded before ranking (merges exact ties
    that float rounding splits), off by default; ``bt``: see :func:`vec_scorer`.
    """
    S, C, _ = i.shape
    n = labels.shape[1]
    gold = np.tile(np.asarray(labels, np.float64), (S, 1))
    score = vec_scorer(name, bt)
    out = np.empty((len(budgets), S))
    for b, r in enumerate(budgets):
        take = lambda x, t: np.ascontiguousarray(x[:, :, :r], t).reshape(S * C, r)
        sc = score(take(i, np.int64), take(j, np.int64), take(p, np.float64), n)
        rho = vec_spearman(sc if decimals is None else np.round(sc, decimals), gold)
        out[b] = _nanmean(rho.reshape(S, C))
    return out


def loop_curves(name, i, j, p, labels, budgets, decimals=None):
    """The same curves by the papers' per-problem loop (``np_scorer`` and ``scipy.stats.spearmanr``)."""
    S, C, _ = i.shape
    n, raw = labels.shape[1], np_scorer(name)
    fn = raw if decimals is None else (lambda *a: np.round(raw(*a), decimals))
    out = np.empty((len(budgets), S))
    for b, r in enumerate(budgets):
        for s in range(S):
            rho = [stats.spearmanr(fn(i[s, c, :r].astype(np.int64), j[s, c, :r].astype(np.int64),
                                      p[s, c, :r].astype(np.float64), n), labels[c])[0] for c in range(C)]
            out[b, s] = _nanmean(np.asarray(rho, np.float64)[None])[0]
    return out


def vec_pipeline(name, i, j, p, gold, n, contexts):
    """NumPy arrays ``[B, R]`` -> (mean over contexts then repeats of Spearman, per-problem rho), no loop."""
    rho = vec_spearman(vec_scorer(name)(i, j, p, n), gold)
    return float(np.mean(np.nanmean(rho.reshape(-1, contexts), axis=1))), rho


# ============================================ the per-problem loop (papers' code)
def _components(i, j, n):
    adj = coo_matrix((np.ones(len(i)), (i, j)), shape=(n, n))
    return connected_components(adj, directed=False)[1]


def np_ratio(i, j, x, n):
    won = np.bincount(i, x, n) + np.bincount(j, 1 - x, n)
    games = np.bincount(i, minlength=n) + np.bincount(j, minlength=n)
    return np.where(games > 0, won / np.maximum(games, 1), 0.5)


def np_win_ratio(i, j, p, n):
    return np_ratio(i, j, _decisions(p), n)


def np_average_probability(i, j, p, n):
    return np_ratio(i, j, p, n)


def np_bradley_terry(i, j, p, n, tol=TOL_BT, max_iter=10_000):
    """Zermelo / MM: ``r_n <- W_n / sum_{k touching n} (a_k + b_k) / (r_i + r_j)``."""
    y = _decisions(p)
    games = np.bincount(i, minlength=n) + np.bincount(j, minlength=n)
    live = games > 0
    prior = 1.0 / max(live.sum() - 1, 1)
    a, b = y + prior, 1 - y + prior
    wins = np.bincount(i, a, n) + np.bincount(j, b, n)
    labels = _components(i, j, n)
    r = np.ones(n)
    it = 0
    for it in range(1, max_iter + 1):
        x = (a + b) / (r[i] + r[j])
        den = np.bincount(i, x, n) + np.bincount(j, x, n)
        s = np.log(np.where(live, wins / np.where(live, den, 1), 1))
        r_new = np.exp(_centre(s, labels))          # unit geometric mean per component
        done = np.max(np.abs(r_new - r) / np.maximum(r_new, 1)) < tol
        r = r_new
        if done:
            break
    return _centre(np.where(live, np.log(r), 0), labels), it


def _incidence_one(i, j, n):
    w = np.zeros((len(i), n))
    k = np.arange(len(i))
    w[k, i] = 1
    w[k, j] = -1
    return w


def np_poe_gaussian(i, j, p, n, hard=False):
    """Least squares ``W s = p - 1/2``; the minimum-norm solution centres every component."""
    y = (_decisions(p) if hard else p) - 0.5
    return np.linalg.lstsq(_incidence_one(i, j, n), y, rcond=None)[0]


def np_poe_bradley_terry(i, j, p, n, eps=1e-6):
    """SciPy BFGS on the mean soft-BT negative log-likelihood, analytic gradient."""
    p = np.clip(p, eps, 1 - eps)
    r = len(i)

    def fun(s):
        d = s[i] - s[j]
        f = -np.mean(p * log_expit(d) + (1 - p) * log_expit(-d))
        g = (expit(d) - p) / r
        return f, np.bincount(i, g, n) - np.bincount(j, g, n)

    res = optimize.minimize(fun, np.zeros(n), jac=True, method="BFGS")
    return res.x, res.nit


def np_scorer(name):
    return {
        "win_ratio": np_win_ratio,
        "average_probability": np_average_probability,
        "bradley_terry": lambda i, j, p, n: np_bradley_terry(i, j, p, n)[0],
        "poe_gaussian": np_poe_gaussian,
        "poe_gaussian_hard": lambda i, j, p, n: np_poe_gaussian(i, j, p, n, hard=True),
        "poe_bradley_terry": lambda i, j, p, n: np_poe_bradley_terry(i, j, p, n)[0],
    }[name]


def baseline_pipeline(name, i, j, p, gold, n, contexts):
    """Loop over problems; returns (mean over contexts then repeats, per-problem rho)."""
    fn = np_scorer(name)
    rho = np.empty(len(i))
    for k in range(len(i)):
        s = fn(i[k], j[k], p[k], n)
        rho[k] = stats.spearmanr(s, gold[k])[0]
    return float(np.mean(np.nanmean(rho.reshape(-1, contexts), axis=1))), rho
