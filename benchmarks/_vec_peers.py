"""Vectorised NumPy/SciPy peers of the six report scorers: many small problems in one call, no Python loop.

The strongest way a NumPy user scores ``B`` problems of ``R`` comparisons among ``n`` items: every problem's items
offset into one flat range (``b * n + item``) so ``np.bincount`` sums all problems at once, batched
``np.linalg.pinv`` for the least-squares and Newton solves, ``scipy.stats.rankdata(axis=1)`` for Spearman. The
same estimators as the per-problem loop of ``poe_protocol.py`` (same prior, stopping rule and component centring
for Bradley-Terry; minimum-norm least squares for PoE-g); PoE-BT by a batched Newton solve (float64, to 1e-8)
instead of the loop's SciPy BFGS.

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


def _centre(s, labels):
    return s - (np.bincount(labels, s) / np.bincount(labels))[labels]


def vec_bradley_terry(i, j, p, n, tol=1e-3, max_iter=10_000):
    """Zermelo/MM on decisions for all problems at once; each problem stops by its own rule (as the loop)."""
    fi, fj, m = _flat(i, j, n)
    y = _decisions(p)
    games = np.bincount(fi, minlength=m) + np.bincount(fj, minlength=m)
    live = games > 0
    prior = (1.0 / np.maximum(live.reshape(-1, n).sum(1) - 1, 1))[:, None]
    a, b = (y + prior).ravel(), (1 - y + prior).ravel()
    wins = np.bincount(fi, a, m) + np.bincount(fj, b, m)
    labels = _labels(fi, fj, m)
    r = np.ones(m)
    active = np.ones(i.shape[0], bool)
    for _ in range(max_iter):
        x = (a + b) / (r[fi] + r[fj])
        den = np.bincount(fi, x, m) + np.bincount(fj, x, m)
        r_new = np.exp(_centre(np.log(np.where(live, wins / np.where(live, den, 1), 1)), labels))
        done = (np.abs(r_new - r) / np.maximum(r_new, 1)).reshape(-1, n).max(1) < tol
        r = np.where(np.repeat(active, n), r_new, r)
        active &= ~done
        if not active.any():
            break
    return _centre(np.where(live, np.log(r), 0), labels).reshape(-1, n)


def _incidence(i, j, n):
    B, R = i.shape
    w = np.zeros((B, R, n))
    bb, kk = np.arange(B)[:, None], np.arange(R)[None, :]
    w[bb, kk, i] = 1
    w[bb, kk, j] = -1
    return w


def vec_poe_gaussian(i, j, p, n, hard=False):
    """Minimum-norm least squares ``W s = p - 1/2`` by batched ``np.linalg.pinv`` (every component centred)."""
    y = (_decisions(p) if hard else p) - 0.5
    return (np.linalg.pinv(_incidence(i, j, n)) @ y[..., None])[..., 0]


def vec_poe_bradley_terry(i, j, p, n, eps=1e-6, tol=1e-8, max_iter=50):
    """Soft Bradley-Terry by batched Newton (``pinv`` of the ``[B, n, n]`` Laplacian Hessians: min-norm steps)."""
    B = i.shape[0]
    p = np.clip(p, eps, 1 - eps)
    s = np.zeros((B, n))
    bb = np.arange(B)[:, None]
    for _ in range(max_iter):
        d = np.take_along_axis(s, i, 1) - np.take_along_axis(s, j, 1)
        q = expit(d)
        g = np.zeros((B, n))
        np.add.at(g, (bb, i), q - p)
        np.add.at(g, (bb, j), p - q)
        h = q * (1 - q)
        H = np.zeros((B, n, n))
        np.add.at(H, (bb, i, i), h)
        np.add.at(H, (bb, j, j), h)
        np.add.at(H, (bb, i, j), -h)
        np.add.at(H, (bb, j, i), -h)
        step = (np.linalg.pinv(H, hermitian=True) @ g[..., None])[..., 0]
        s -= step
        if np.abs(step).max() < tol:
            break
    return s


def vec_scorer(name):
    """The vectorised peer of a report scorer: ``f(i [B, R], j [B, R], p [B, R], n) -> scores [B, n]``."""
    return {
        "win_ratio": lambda i, j, p, n: vec_ratio(i, j, _decisions(p), n),
        "average_probability": vec_ratio,
        "bradley_terry": vec_bradley_terry,
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
