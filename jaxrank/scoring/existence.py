"""Whether maximum-likelihood Bradley-Terry scores exist, and what jaxrank returns when they do not.

With probabilities allowed to reach 0 and 1 (``eps = 0``) and no score prior,
the soft Bradley-Terry likelihood (PoE eq. 3) has a finite maximiser exactly
when, within every connected component of the comparison graph, the *win
graph* is strongly connected (Zermelo 1929; Ford 1957; Hunter 2004, condition
A): an arc ``a -> b`` for every comparison in which ``a`` won some mass from
``b`` (``w p > 0`` with ``a`` in position A, or ``w (1 - p) > 0`` with ``a`` in
position B). Otherwise some set of items never lost (or never won) against the
rest of its component; the likelihood keeps rising as that set moves away, the
maximum-likelihood score differences are infinite, and an iterative solver runs
to its iteration cap (283 ms and no convergence on all 337 football teams).

jaxrank tests the condition for every context before the first Newton step:
a single concrete context on the host (:func:`host_check`: SciPy's strong and
weak components, which also give the component labels and the warning's
report), a batch on the device (:func:`finite_ml`: two reachability sweeps
from each component's first item). A context that fails it is fitted as the MAP under an
independent Gaussian prior ``N(0, 1 / AUTO_SCORE_PRIOR)`` on every score
(precision :data:`AUTO_SCORE_PRIOR` = 0.01, i.e. a standard deviation of 10
log-strength units), which is finite and ranks an undefeated item first; a
:class:`NotStronglyConnectedWarning` names the items outside the largest
strongly connected set (:func:`warn_if_infinite`). Contexts that pass are
fitted by plain maximum likelihood, as before. Pass ``score_prior > 0`` to
choose the prior yourself, or fit the strongly connected set alone.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from jaxrank import _graph

__all__ = ["AUTO_SCORE_PRIOR", "HostCheck", "NotStronglyConnectedWarning", "check_report", "finite_ml", "host_check",
           "win_graph_report", "warn_if_infinite"]

AUTO_SCORE_PRIOR = 0.01
"""Precision of the ``N(0, 100)`` score prior applied to contexts without finite ML scores.

Weak: on a team with a few hundred matches (Fisher information about 50) it
moves the score by about 2e-4 of its size; an item that won its single
comparison against an average item ends about 4.3 above it."""


DENSE_MAX_ITEMS = 1024
""":func:`finite_ml` sweeps ``[N, N]`` arc matrices up to this many items (the comparisons' own edge
space above): on all 337 football teams (12,309 ordered pairs) a dense check took 0.4-0.6 ms, a
sparse one (four scatter-adds per sweep) 0.7-1.6 ms."""


class NotStronglyConnectedWarning(UserWarning):
    """Some context has no finite maximum-likelihood scores (its win graph is not strongly connected)."""


def _win_mass(c, eps):
    pc = jnp.clip(c.p, eps, 1 - eps)
    return c.weight * pc, c.weight * (1 - pc)


def finite_ml(c, labels, eps):
    """Whether ONE context's maximum-likelihood scores are finite (module docstring).

    Args:
        c: one context (no batch axes).
        labels: ``[N]`` its connected components (``jaxrank.Comparisons.components``).
        eps: the probability clip of the fit (the condition matters only for 0).

    Returns:
        Scalar bool: every item is reached from its component's first item along
        win arcs, and reaches it.
    """
    e = _graph.edges(c, dense=c.num_items <= DENSE_MAX_ITEMS or None)
    won_a, won_b = _graph.reduce(e, *_win_mass(c, eps))
    return jnp.all(_graph.reached_both_ways(e, won_a, won_b, labels))


BITMAP_MAX_PAIRS = 1 << 22
""":func:`win_graph_report` removes duplicate arcs with an ``N * N`` bitmap up to this many ordered
pairs (2,048 items), by sorting the arcs above. On all 337 football teams the report took 0.85 ms
through ``scipy.sparse.coo_matrix`` (its duplicate summing and index sorting) and 0.38 ms this way.
(De-duplication is required: SciPy's strong-components routine did not return, here, on a CSR
graph built directly with duplicate entries.)"""


def _win_arcs_csr(i, j, p, w, num_items, eps):
    """The win graph (an arc winner -> loser per comparison with mass won) as a duplicate-free CSR matrix."""
    from scipy.sparse import csr_matrix

    pc = np.clip(p, eps, 1 - eps)
    live = w > 0
    a_won, b_won = live & (w * pc > 0), live & (w * (1 - pc) > 0)
    src = np.concatenate([i[a_won], j[b_won]])       # winner -> loser
    dst = np.concatenate([j[a_won], i[b_won]])
    n = num_items
    if n * n <= BITMAP_MAX_PAIRS:
        seen = np.zeros(n * n, bool)
        seen[src * n + dst] = True
        key = np.flatnonzero(seen)
    else:
        key = np.unique(src * n + dst)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(key // n, minlength=n), out=indptr[1:])
    return csr_matrix((np.ones(len(key)), key % n, indptr), shape=(n, n))


def _strong_structure(i, j, p, weight, num_items, eps):
    """``(weak, strong, n_weak, n_strong)``: SciPy component labels of the win graph (isolated items included)."""
    from scipy.sparse.csgraph import connected_components

    i, j = np.asarray(i, np.int64), np.asarray(j, np.int64)
    p, w = np.asarray(p, np.float64), np.asarray(weight, np.float64)
    g = _win_arcs_csr(i, j, p, w, num_items, eps)
    n_strong, strong = connected_components(g, directed=True, connection="strong")
    n_weak, weak = connected_components(g, directed=True, connection="weak")
    return weak, strong, n_weak, n_strong


class HostCheck(NamedTuple):
    """:func:`host_check` of one concrete context."""

    labels: np.ndarray   # [N] int32 connected-component labels, as ``jaxrank.Comparisons.components``
    finite: bool         # its maximum-likelihood scores are finite (:func:`finite_ml`)
    report: dict | None  # :func:`win_graph_report` where ``finite`` is False (and asked for), else None
    strong: np.ndarray | None = None   # [N] strongly connected component labels of the win graph (SciPy's)
    num_strong: int = 0


def check_report(i, weight, j, num_items, check: HostCheck) -> dict:
    """:func:`win_graph_report` from a :func:`host_check` made with ``report=False`` (no graph pass again)."""
    return _report(i, weight, j, num_items, check.labels, check.strong, check.num_strong)


def host_check(i, j, p, weight, num_items, eps=0.0, *, report: bool = True) -> HostCheck:
    """:func:`finite_ml` and the connected components of ONE concrete context, on the host (SciPy).

    The same answers as the device path (``_graph.components`` and
    :func:`finite_ml`), from one strong- and one weak-component pass over the
    win graph (``O(N + R)``, compiled C): a component is strongly connected
    exactly when the win graph has as many strong components as weak ones
    (an item in no comparison is a component of its own both ways). Used by
    ``soft_bt.solve`` for a single concrete context, where it costs less than
    the device check and leaves the warning's report ready: on all 337 football
    teams 0.3 ms for check, labels and report, against 0.4 ms (device check and
    components) plus 0.4 ms (report) before. With ``report=False`` the report is
    left for :func:`check_report` (``soft_bt`` makes it while the fit computes).
    """
    weak, strong, n_weak, n_strong = _strong_structure(i, j, p, weight, num_items, eps)
    _, first = np.unique(weak, return_index=True)        # the smallest item of each weak component
    labels = first[weak].astype(np.int32)
    finite = bool(n_strong == n_weak)
    check = HostCheck(labels, finite, None, strong, int(n_strong))
    if report and not finite:
        check = check._replace(report=check_report(i, weight, j, num_items, check))
    return check


def win_graph_report(i, j, p, weight, num_items, eps=0.0):
    """Strongly connected structure of one context's win graph, on the host (SciPy).

    Args:
        i, j: ``[R]`` items in positions A and B.
        p, weight: ``[R]`` probabilities that A wins, and weights.
        num_items: ``N``.
        eps: the probability clip.

    Returns:
        Dict with ``compared`` (items in a comparison of non-zero weight),
        ``components`` (connected components among them), ``strong_components``
        (strongly connected components of the win graph among them) and
        ``without_finite_score``: sorted item indices outside the largest
        strongly connected set of their component (of equal ones, that with the
        smallest item), in components that are not strongly connected (their ML
        score differences to the rest are infinite).
    """
    weak, strong, _, n_strong = _strong_structure(i, j, p, weight, num_items, eps)
    return _report(i, weight, j, num_items, weak, strong, n_strong)


def _report(i, weight, j, num_items, weak, strong, n_strong):
    i, j, w = np.asarray(i, np.int64), np.asarray(j, np.int64), np.asarray(weight, np.float64)
    compared = np.zeros(num_items, bool)
    live = w > 0
    compared[i[live]] = compared[j[live]] = True
    items = np.flatnonzero(compared)                 # ascending
    if len(items) == 0:
        return {"compared": 0, "components": 0, "strong_components": 0, "without_finite_score": []}
    # Every strong component lies in one weak component: per weak component keep the largest strong
    # one (of equal sizes, the one holding the smallest item); the items of the others have no finite score.
    labels, first = np.unique(strong[items], return_index=True)
    size = np.bincount(strong[items], minlength=n_strong)[labels]
    smallest = items[first]                          # the smallest item of each strong component
    host = weak[smallest]
    order = np.lexsort((smallest, -size, host))      # by weak component, then largest, then smallest item
    best = np.full(num_items, -1, np.int64)
    keep = np.r_[True, host[order][1:] != host[order][:-1]]
    best[host[order][keep]] = labels[order][keep]
    outside = items[strong[items] != best[weak[items]]]
    return {"compared": int(len(items)), "components": int(len(np.unique(weak[items]))),
            "strong_components": int(len(labels)), "without_finite_score": outside.tolist()}


def warn_if_infinite(c, finite, eps, *, caller="fit_poe_bradley_terry", show=10, report=None):
    """Warn (:class:`NotStronglyConnectedWarning`) when some context of ``c`` has ``finite`` False.

    Args:
        c: the comparisons that were fitted (any batch shape).
        finite: bool array of ``c``'s batch shape, from the fit.
        eps: the probability clip of the fit.
        caller: the function named in the message.
        show: at most this many item indices are listed.
        report: :func:`win_graph_report` of the first context without finite
            scores, when the caller has it already (:func:`host_check`).
    """
    finite = np.asarray(finite, bool).reshape(c.batch_shape)
    if finite.all():
        return
    bad = np.argwhere(~finite)
    first = tuple(int(k) for k in bad[0])
    pick = lambda x: np.asarray(x)[first] if first else np.asarray(x)
    rep = report if report is not None else win_graph_report(pick(c.i), pick(c.j), pick(c.p), pick(c.weight),
                                                             c.num_items, eps)
    items = rep["without_finite_score"]
    listed = ", ".join(map(str, items[:show])) + (", ..." if len(items) > show else "")
    where = (f"{len(bad)} of {finite.size} contexts have" if first else "the comparisons have")
    ctx = f" In context {first}" if first else ""
    warnings.warn(
        f"{caller}(eps={eps:g}, score_prior=0): {where} no finite maximum-likelihood scores: the win graph is "
        f"not strongly connected.{ctx} {rep['compared']} compared items form {rep['components']} connected and "
        f"{rep['strong_components']} strongly connected components; the {len(items)} items outside the largest "
        f"strongly connected set of their component ({listed}) never lost, or never won, against the rest. "
        f"Returned the MAP scores under an N(0, 1/{AUTO_SCORE_PRIOR:g}) prior on every score "
        f"(score_prior={AUTO_SCORE_PRIOR:g}) there; pass score_prior > 0 or eps > 0 to choose, or fit the "
        "strongly connected set alone.", NotStronglyConnectedWarning, stacklevel=4)
