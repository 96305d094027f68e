"""PoE-g ties only what its float32 solve cannot tell apart: each pair by its own scores' errors (review: ties).

``gaussian.solve_precision`` tied any two scores closer than
``TIE_SAFETY (max_i |delta_i| + sqrt(n + 1) eps max |s|)``, ``delta`` the iterative-refinement correction: the
largest correction of all items (a poorly determined team) set the tolerance of every pair. On the football
results that tied teams whose float64 scores differ by 7.9e-6 to 3.0e-5 (Mozambique and Quebec 2.0e-5 on the
match rows, Bolivia and Libya 3.0e-5 with hard decisions on all teams' aggregated counts) while the float32
solve is within 1.7e-6 to 4.2e-6 of the float64 scores. Now a pair is tied where it is at most
``TIE_SAFETY (|delta_a| + |delta_b| + eps max |s|)`` apart: its own two error estimates plus one rounding of the
largest score, the floor Bradley-Terry's ties use.

The reference is independent: PoE eq. 7/11 in float64 NumPy, ``s = L^+ W^T D (x - 1/2)``
(``test_poe_hard_ties.exact_scores``), centred per connected component. Checked:

* identical-record twins (a team or an item given a copy of its matches) and every exact float64 tie are tied
  exactly;
* no pair is tied whose float64 scores differ by more than the float32 solve's own error (measured on the
  items in no tie group, whose scores are the solve's);
* pairs further apart than twice that error keep the float64 order.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from jaxrank import stack_contexts
from jaxrank.comparisons import Comparisons
from jaxrank.scoring.gaussian import poe_gaussian
from test_poe_hard_ties import exact_scores
from test_review_ties import CLONES, _football

TIE64 = 1e-9      # the float64 solve is good to ~1e-14: closer than this is an exact tie


def reference(i, j, p, w, n, hard):
    """Float64 PoE-g scores centred per connected component (as ``poe_gaussian`` centres them)."""
    s = exact_scores(i, j, np.asarray(p, np.float64), np.asarray(w, np.float64), n, hard=hard)
    live = np.asarray(w) > 0
    g = coo_matrix((np.ones(int(live.sum())), (np.asarray(i)[live], np.asarray(j)[live])), shape=(n, n))
    _, lab = connected_components(g, directed=False)
    for k in np.unique(lab):
        s[lab == k] -= s[lab == k].mean()
    return s


def aggregate(a, b, o, n):
    """Matches to one comparison per ordered pair: ``p`` the share won (a draw half), weight the games."""
    flat = a.astype(np.int64) * n + b
    games = np.bincount(flat, minlength=n * n)
    won = np.bincount(flat, weights=o, minlength=n * n)
    idx = np.flatnonzero(games)
    return idx // n, idx % n, (won[idx] / games[idx]).astype(np.float32), games[idx].astype(np.float32)


def check(got, ref, twins=(), named=()):
    """Twins and exact ties tied; nothing tied beyond the solve's error; pairs twice that apart in order."""
    got = np.asarray(got, np.float64)
    same = got[:, None] == got[None]
    alone = same.sum(1) == 1
    solve_err = np.abs(got - ref)[alone].max()
    gap = ref[:, None] - ref[None]
    exact = np.abs(gap) < TIE64
    for k, t in twins:
        assert exact[k, t] and got[k] == got[t], (k, t)
    assert np.all(same[exact])
    wrong = same & (np.abs(gap) > solve_err)
    assert not wrong.any(), [(x, y, gap[x, y]) for x, y in zip(*np.nonzero(np.triu(wrong)))]
    far = np.abs(gap) > 2 * solve_err
    assert np.array_equal(np.sign(got[:, None] - got[None])[far], np.sign(gap)[far])
    for x, y in named:
        assert np.sign(got[x] - got[y]) == np.sign(gap[x, y]) != 0, (x, y, gap[x, y])
    return solve_err


@pytest.fixture(scope="module")
def football():
    return _football()


@pytest.mark.parametrize("rows, hard, named", [
    ("matches", False, [("Mozambique", "Quebec"), ("Barbados", "Székely Land")]),
    ("counts", False, [("Barbados", "Székely Land")]),
    ("counts", True, [("Gambia", "Malta")]),
])
def test_football_strongly_connected_with_twins(football, rows, hard, named):
    a, b, o, names = football
    n = len(names)
    if rows == "matches":
        i, j, p, w = a, b, o.astype(np.float32), np.ones(len(a), np.float32)
    else:
        i, j, p, w = aggregate(a, b, o, n)
    got = poe_gaussian(Comparisons.from_pairs(i, j, p, num_items=n, weight=w), hard=hard)
    ref = reference(i, j, p, w, n, hard)
    twins = [(names.index(c), names.index(c + " (twin)")) for c in CLONES]
    err = check(got, ref, twins, [(names.index(x), names.index(y)) for x, y in named])
    assert err < 1e-5


def test_football_all_teams_hard_counts():
    """Every team (``jaxrank rank``'s default data), aggregated counts, hard decisions: Bolivia and Libya
    (3.0e-5 apart in float64) were tied."""
    from jaxrank.data import data_dir
    from jaxrank.io import read_comparisons

    t = read_comparisons(data_dir() / "international_football" / "results.csv", item_a="home_team",
                         item_b="away_team", score_a="home_score", score_b="away_score")
    c, names = t.comparisons, list(t.items[0])
    i, j, p = (np.asarray(x[0]) for x in (c.i, c.j, c.p))
    i, j, p, w = aggregate(i, j, p.astype(np.float64), c.num_items)
    got = poe_gaussian(Comparisons.from_pairs(i, j, p, num_items=c.num_items, weight=w), hard=True)
    ref = reference(i, j, p, w, c.num_items, True)
    check(got, ref, named=[(names.index("Bolivia"), names.index("Libya"))])


def _pool_with_twins(seed, n=48, r=400, twins=(3, 17, 30, 41)):
    """A random soft pool; each of ``twins`` gets a copy with its comparisons (same opponents, same ``p``)."""
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, r)
    j = (i + rng.integers(1, n, r)) % n
    p = rng.uniform(0.05, 0.95, r).round(2)
    w = rng.integers(1, 4, r).astype(np.float64)
    pairs = []
    for k in twins:
        t = n + len(pairs)
        mine = (i == k) | (j == k)
        i = np.concatenate([i, np.where(i[mine] == k, t, i[mine])])
        j = np.concatenate([j, np.where(j[mine] == k, t, j[mine])])
        p, w = np.concatenate([p, p[mine]]), np.concatenate([w, w[mine]])
        pairs.append((k, t))
    return i.astype(np.int32), j.astype(np.int32), p.astype(np.float32), w.astype(np.float32), n + len(pairs), pairs


@pytest.mark.parametrize("hard", [False, True])
def test_synthetic_twins_stay_exactly_tied_alone_and_batched(hard):
    pools = [_pool_with_twins(seed) for seed in range(3)]
    refs = []
    for i, j, p, w, n, twins in pools:
        got = np.asarray(poe_gaussian(Comparisons.from_pairs(i, j, p, num_items=n, weight=w), hard=hard))
        refs.append(reference(i, j, p, w, n, hard))
        check(got, refs[-1], twins)
    batch = stack_contexts([Comparisons.from_pairs(i, j, p, num_items=n, weight=w) for i, j, p, w, n, _ in pools])
    got = np.asarray(poe_gaussian(batch, hard=hard))
    for k, (*_, n, twins) in enumerate(pools):
        check(got[k, :n], refs[k], twins)
