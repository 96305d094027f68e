"""Shared by the benchmarks: the synthetic Arena-scale outcomes and the real football results."""

from __future__ import annotations

import numpy as np


def simulate(n_items, m, seed):
    """``m`` outcomes among ``n_items`` with strengths ``s ~ N(0, 1)``: ``(s, a, b, y)``, ``y = 1`` if ``a`` won."""
    rng = np.random.default_rng(seed)
    s = rng.standard_normal(n_items)
    a = rng.integers(0, n_items, m)
    b = (a + rng.integers(1, n_items, m)) % n_items
    y = rng.random(m) < 1 / (1 + np.exp(-(s[a] - s[b])))
    return s, a.astype(np.int32), b.astype(np.int32), y


def football():
    """The football results: ``a`` home, ``b`` away, outcome 1 / 0.5 / 0, team names; all teams."""
    from jaxrank.data import data_dir
    from jaxrank.io import read_comparisons

    t = read_comparisons(str(data_dir() / "international_football" / "results.csv"), item_a="home_team",
                         item_b="away_team", score_a="home_score", score_b="away_score")
    c = t.comparisons
    assert np.all(np.asarray(c.weight) == 1)
    return (np.asarray(c.i[0], np.int32), np.asarray(c.j[0], np.int32), np.asarray(c.p[0], np.float64),
            list(t.items[0]))


def strongly_connected(a, b, outcome, n):
    """Largest strongly connected set of items (edge loser -> winner; a draw both ways).

    Returns the matches among its items, re-indexed ``0..n'-1``, and the kept item indices.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    src = np.concatenate([b[outcome > 0], a[outcome < 1]])      # loser (or drawer) -> winner
    dst = np.concatenate([a[outcome > 0], b[outcome < 1]])
    g = coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n)).tocsr()
    _, lab = connected_components(g, directed=True, connection="strong")
    big = np.bincount(lab).argmax()
    keep = np.nonzero(lab == big)[0]
    new = np.full(n, -1)
    new[keep] = np.arange(len(keep))
    m = (new[a] >= 0) & (new[b] >= 0)
    return new[a[m]].astype(np.int32), new[b[m]].astype(np.int32), outcome[m], keep


def counts(a, b, outcome, n):
    """Raw outcomes -> observed ordered pairs ``(i, j)`` with games, A's wins and draws (``np.bincount``)."""
    flat = a.astype(np.int64) * n + b
    games = np.bincount(flat, minlength=n * n)
    won = np.bincount(flat, weights=outcome == 1, minlength=n * n)
    drawn = np.bincount(flat, weights=outcome == 0.5, minlength=n * n)
    idx = np.nonzero(games)[0]
    return (idx // n).astype(np.int32), (idx % n).astype(np.int32), games[idx].astype(np.float64), won[idx], drawn[idx]


def evalica_inputs(i, j, games, won, drawn):
    """evalica's fastest input for counts: one row per (pair, outcome) with its count as ``weights=``."""
    import evalica

    cats = [(evalica.Winner.X, won), (evalica.Winner.Y, games - won - drawn)]
    if np.any(drawn > 0):
        cats.append((evalica.Winner.Draw, drawn))
    xs = np.tile(i.astype(np.int64), len(cats))
    ys = np.tile(j.astype(np.int64), len(cats))
    winners = [w for w, _ in cats for _ in range(len(i))]
    weights = np.concatenate([v for _, v in cats]).astype(np.float64)
    return xs, ys, winners, weights


def evalica_scores(xs, ys, winners, weights, n, tolerance=1e-10, limit=100_000):
    """``evalica.bradley_terry`` on given counts: natural-log scores and iterations.

    ``tolerance`` 1e-10 by default (far stricter than float32 jaxrank; benchmarks that compare speed pass the one
    matching jaxrank's accuracy too, see :func:`matched_tolerance`); ``limit`` is raised so the tolerance, not
    evalica's cap of 100, stops it.
    """
    import evalica
    import pandas as pd

    index = pd.Index(range(n))
    r = evalica.bradley_terry(xs, ys, winners, index=index, weights=weights, tolerance=tolerance, limit=limit)
    return np.log(r.scores.reindex(index).to_numpy(np.float64)), int(r.iterations)


def no_answer(scores, iterations=None, limit=None) -> str:
    """Why ``scores`` is not an answer ("" when it is one): non-finite, one value for every item, or the cap hit.

    A peer's output must be checked to be a real answer before it is timed as one (evalica on a pool that is not
    strongly connected returns one constant for every item after two iterations).
    """
    s = np.asarray(scores, np.float64)
    if not np.all(np.isfinite(s)):
        return f"no answer ({int(np.sum(~np.isfinite(s)))} non-finite scores)"
    if len(np.unique(np.round(s - s.mean(), 9))) <= 1:
        return "no answer (constant scores" + (f" after {iterations} iterations)" if iterations is not None else ")")
    if limit is not None and iterations is not None and iterations >= limit:
        return f"no answer (iteration cap {limit} reached)"
    return ""


def ml_float64(i, j, games, won, drawn, n, tol=1e-13, max_iter=100):
    """The float64 ML Bradley-Terry optimum of counts (ties half a win), dense Newton; centred scores.

    The reference every method's error is measured against (finite only on a strongly connected pool).
    """
    i, j = np.asarray(i, np.int64), np.asarray(j, np.int64)
    w = np.asarray(games, np.float64)
    y = (np.asarray(won, np.float64) + np.asarray(drawn, np.float64) / 2) / w
    s = np.zeros(n)
    for _ in range(max_iter):
        q = 1 / (1 + np.exp(-(s[i] - s[j])))
        r = w * (q - y)
        g = np.bincount(i, r, n) - np.bincount(j, r, n)
        h = w * q * (1 - q)
        H = np.full((n, n), 1.0 / n)
        np.add.at(H, (i, i), h)
        np.add.at(H, (j, j), h)
        np.add.at(H, (i, j), -h)
        np.add.at(H, (j, i), -h)
        step = np.linalg.solve(H, g)
        s -= step
        if np.max(np.abs(step)) < tol:
            break
    return s - s.mean()


def matched_tolerance(xs, ys, winners, weights, n, ref, target, tolerances=(1e-4, 1e-5, 1e-6, 1e-7, 1e-8)):
    """The loosest evalica tolerance whose centred scores are within ``target`` of ``ref`` (untimed).

    Returns ``(tolerance, max abs error)``; the strictest tried when none reaches ``target``.
    """
    for tol in tolerances:
        s, _ = evalica_scores(xs, ys, winners, weights, n, tolerance=tol)
        err = float(np.max(np.abs(s - s.mean() - ref)))
        if err <= target:
            break
    return tol, err
