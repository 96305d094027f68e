"""Independent NumPy/SciPy formulations of the scorers, written from the papers' equations.

Nothing here imports jaxrank: these are the yardsticks the tests compare against.
All work on ONE context given as plain arrays ``(i, j, p, w, n)`` in float64.
"""

import warnings

import numpy as np
from scipy import optimize, stats
from scipy.special import expit, log_expit


def centre(s):
    s = np.asarray(s, float)
    return s - s.mean()


def win_ratio(i, j, p, w, n, tau=0.5):
    won, games = np.zeros(n), np.zeros(n)
    for a, b, pk, wk in zip(i, j, p, w):
        d = 1.0 if pk > tau else (0.0 if pk < tau else 0.5)
        won[a] += wk * d
        won[b] += wk * (1 - d)
        games[a] += wk
        games[b] += wk
    return np.where(games > 0, won / np.where(games > 0, games, 1), 0.5)


def average_probability(i, j, p, w, n):
    won, games = np.zeros(n), np.zeros(n)
    for a, b, pk, wk in zip(i, j, p, w):
        won[a] += wk * pk
        won[b] += wk * (1 - pk)
        games[a] += wk
        games[b] += wk
    return np.where(games > 0, won / np.where(games > 0, games, 1), 0.5)


def poe_gaussian(i, j, p, w, n, beta=0.5, hard=False):
    """PoE eq. 7/11 literally: anchored design matrix [e_1; W], weighted least squares."""
    x = np.where(np.asarray(p) > 0.5, 1.0, np.where(np.asarray(p) < 0.5, 0.0, 0.5)) if hard else np.asarray(p, float)
    if beta == "mean":
        beta = np.sum(w * x) / np.sum(w)
    W = np.zeros((len(i) + 1, n))
    W[0, 0] = 1.0
    W[np.arange(1, len(i) + 1), i] = 1.0
    W[np.arange(1, len(i) + 1), j] -= 1.0
    mu = np.concatenate([[0.0], x - beta])
    sw = np.sqrt(np.concatenate([[1.0], w]))
    s, *_ = np.linalg.lstsq(W * sw[:, None], mu * sw, rcond=None)
    return centre(s)


def poe_gaussian_covariance(i, j, w, n):
    L = np.zeros((n, n))
    for a, b, wk in zip(i, j, w):
        L[a, a] += wk; L[b, b] += wk; L[a, b] -= wk; L[b, a] -= wk
    return np.linalg.pinv(L)


def soft_bt(i, j, p, w, n, gamma=0.0, learn=False):
    """Maximise the soft-BT log-likelihood (PoE §3.2) with SciPy, s_0 anchored at 0."""
    i, j, p, w = (np.asarray(x) for x in (i, j, p, w))

    def unpack(z):
        s = np.concatenate([[0.0], z[: n - 1]])
        g = z[n - 1] if learn else gamma
        return s, g

    def f(z):
        s, g = unpack(z)
        d = s[i] - s[j] - g
        return -np.sum(w * (p * log_expit(d) + (1 - p) * log_expit(-d)))

    def grad(z):
        s, g = unpack(z)
        d = s[i] - s[j] - g
        r = w * (expit(d) - p)
        gs = np.zeros(n)
        np.add.at(gs, i, r)
        np.add.at(gs, j, -r)
        out = gs[1:]
        return np.concatenate([out, [-r.sum()]]) if learn else out

    z0 = np.zeros(n - 1 + (1 if learn else 0))
    res = optimize.minimize(f, z0, jac=grad, method="BFGS", options=dict(gtol=1e-11, maxiter=10_000))
    s, g = unpack(res.x)
    return centre(s), g


def bradley_terry(i, j, p, w, n, prior):
    """Hard BT with `prior` virtual wins per item per comparison, maximised with SciPy."""
    y = np.where(np.asarray(p) > 0.5, 1.0, np.where(np.asarray(p) < 0.5, 0.0, 0.5))
    a = np.asarray(w) * (y + prior)
    b = np.asarray(w) * (1 - y + prior)

    def f(z):
        s = np.concatenate([[0.0], z])
        d = s[i] - s[j]
        return -np.sum(a * log_expit(d) + b * log_expit(-d))

    def grad(z):
        s = np.concatenate([[0.0], z])
        d = s[i] - s[j]
        r = (a + b) * expit(d) - a
        gs = np.zeros(n)
        np.add.at(gs, i, r)
        np.add.at(gs, j, -r)
        return gs[1:]

    res = optimize.minimize(f, np.zeros(n - 1), jac=grad, method="BFGS", options=dict(gtol=1e-11, maxiter=10_000))
    s = np.concatenate([[0.0], res.x])
    return centre(s)


def random_context(rng, n, r=None, symmetric=False, bias=0.0, weights=False):
    """Random comparisons on a connected graph (a random chain plus random pairs)."""
    true = rng.normal(size=n)
    order = rng.permutation(n)
    pairs = [(order[k], order[k + 1]) for k in range(n - 1)]
    if r is None:
        a, b = np.nonzero(~np.eye(n, dtype=bool))
        pairs = list(zip(a, b))
    else:
        while len(pairs) < r:
            a, b = rng.choice(n, 2, replace=False)
            pairs.append((a, b))
    if symmetric:
        pairs = pairs + [(b, a) for a, b in pairs]
    i = np.array([a for a, _ in pairs])
    j = np.array([b for _, b in pairs])
    p = expit(true[i] - true[j] + bias + 0.5 * rng.normal(size=len(i)))
    w = rng.uniform(0.5, 2.0, size=len(i)) if weights else np.ones(len(i))
    return i, j, p, w, true


SCIPY_CORRELATIONS = {"spearman": stats.spearmanr, "kendall_tau": lambda x, y: stats.kendalltau(x, y, variant="b"),
                      "pearson": stats.pearsonr}
"""The correlations of ``jaxrank.metrics.CORRELATIONS``, computed by SciPy."""


def scipy_correlation(name, x, y):
    """SciPy's correlation ``name`` of ``x`` and ``y``; NaN where it is undefined (fewer than 2, or a constant)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(SCIPY_CORRELATIONS[name](x, y).statistic)
