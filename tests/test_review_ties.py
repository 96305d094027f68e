"""Bradley-Terry ties only what the solve cannot tell apart, on the real football results (review: tie tolerance).

``soft_bt._tied`` floored its tie tolerance at ``sqrt(n + 1) eps max |s|`` (``_ties.rounding_floor``, a triangular
solve's floor): on the 316 strongly connected football teams (scores up to 6.5) that tied Monaco with Sint Maarten
and Bahrain with Oman, whose exact maximum-likelihood scores differ by 5.8e-5 and 2.5e-5, while the float32 solve
is within 2.2e-6 of the float64 optimum (its error grew to 2.9e-5 by the ties). The reference is independent: the
optimum of the same likelihood by Newton's method in float64 NumPy (``test_bt_ties.float64_fit``).
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from jaxrank.comparisons import Comparisons
from jaxrank.scoring import bradley_terry, fit_poe_bradley_terry
from test_bt_ties import TIE64, float64_fit

K = 8           # pairs whose float64 scores differ by more than K times the solve's error are never tied
CLONES = ("Brazil", "Oman", "Monaco")   # a strong, a middle and a weak team, each given a twin with its record


def _football():
    """The strongly connected teams' matches ``(a, b, outcome, names)``, each of ``CLONES`` given a twin: a new
    team with an identical record (the same matches against the same opponents), hence the same exact score."""
    from jaxrank.data import data_dir
    from jaxrank.io import read_comparisons

    t = read_comparisons(data_dir() / "international_football" / "results.csv", item_a="home_team",
                         item_b="away_team", score_a="home_score", score_b="away_score")
    c = t.comparisons
    a, b, o, names = np.asarray(c.i[0]), np.asarray(c.j[0]), np.asarray(c.p[0], np.float64), list(t.items[0])
    n = len(names)
    src = np.concatenate([b[o > 0], a[o < 1]])            # loser (or drawer) -> winner
    dst = np.concatenate([a[o > 0], b[o < 1]])
    g = coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n)).tocsr()
    _, lab = connected_components(g, directed=True, connection="strong")
    keep = np.flatnonzero(lab == np.bincount(lab).argmax())
    new = np.full(n, -1)
    new[keep] = np.arange(len(keep))
    m = (new[a] >= 0) & (new[b] >= 0)
    a, b, o, names = new[a[m]], new[b[m]], o[m], [names[k] for k in keep]
    for name in CLONES:
        k, twin = names.index(name), len(names)
        names.append(name + " (twin)")
        mine = (a == k) | (b == k)
        a = np.concatenate([a, np.where(a[mine] == k, twin, a[mine])])
        b = np.concatenate([b, np.where(b[mine] == k, twin, b[mine])])
        o = np.concatenate([o, o[mine]])
    return a.astype(np.int32), b.astype(np.int32), o, names


def _check(got, ref, names):
    """Exact ties (and the twins) tied; pairs further apart than ``K`` times the solve's error apart, in order.

    The solve's error is measured on the items in no tie group (their scores are the solve's, untouched)."""
    got = np.asarray(got, np.float64)
    cen = lambda v: v - v.mean()
    err = np.abs(cen(got) - cen(ref))
    same = got[:, None] == got[None]
    alone = same.sum(axis=1) == 1
    solve_err = err[alone].max()
    gap = ref[:, None] - ref[None]
    exact = np.abs(gap) < TIE64
    for name in CLONES:
        k, twin = names.index(name), names.index(name + " (twin)")
        assert exact[k, twin] and got[k] == got[twin], name
    assert np.all(same[exact])
    far = np.abs(gap) > K * solve_err
    wrong = far & same
    assert not wrong.any(), [(names[x], names[y], gap[x, y]) for x, y in zip(*np.nonzero(np.triu(wrong)))]
    assert np.array_equal(np.sign(got[:, None] - got[None])[far], np.sign(gap)[far])
    return err.max(), solve_err


def test_soft_bt_ties_only_what_the_solve_cannot_resolve():
    """``fit_poe_bradley_terry(eps=0)`` on aggregated counts (the benchmark's and ``jaxrank rank``'s path): within
    1e-5 of the float64 optimum (the solve alone is within ~2e-6; the old floor's ties moved scores 2.9e-5),
    twins and exact ties tied, no pair tied whose float64 scores differ by more than ``K`` times the error."""
    a, b, o, names = _football()
    n = len(names)
    flat = a.astype(np.int64) * n + b
    games = np.bincount(flat, minlength=n * n)
    won = np.bincount(flat, weights=o, minlength=n * n)           # a draw is half a win each way
    idx = np.flatnonzero(games)
    i, j, g, w = idx // n, idx % n, games[idx].astype(np.float64), won[idx]
    p = (w / g).astype(np.float32)
    pd = p.astype(np.float64)
    ref = float64_fit(i, j, g * pd, g * (1 - pd), n)
    sol = fit_poe_bradley_terry(Comparisons.from_pairs(i, j, p, num_items=n, weight=g.astype(np.float32)), eps=0.0)
    assert bool(sol.converged)
    err, solve_err = _check(sol.scores, ref, names)
    assert err < 1e-5 and solve_err < 1e-5
    for x, y in (("Monaco", "Sint Maarten"), ("Bahrain", "Oman")):   # 5.8e-5 and 2.5e-5 apart in float64
        kx, ky = names.index(x), names.index(y)
        assert np.sign(sol.scores[kx] - sol.scores[ky]) == np.sign(ref[kx] - ref[ky]) != 0, (x, y)


def test_hard_bt_ties_only_what_the_solve_cannot_resolve():
    """Hard Bradley-Terry on the match rows (decisions, ``1/(N-1)`` virtual wins each way per match, PoE eq.
    1-2) at its default ``tol`` 1e-3: twins and exact ties tied, pairs ``K`` errors apart distinct and in order."""
    a, b, o, names = _football()
    n = len(names)
    y = np.where(o > 0.5, 1.0, np.where(o < 0.5, 0.0, 0.5))
    lam = 1.0 / (n - 1)
    ref = float64_fit(a, b, y + lam, 1 - y + lam, n)
    got = bradley_terry(Comparisons.from_pairs(a, b, o.astype(np.float32), num_items=n))
    err, _ = _check(got, ref, names)
    assert err < 1e-3
