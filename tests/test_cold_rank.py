"""Cold ``jaxrank rank`` (issue 33): one context runs an unbatched program, reading compiles nothing, and the
collector is kept out of the way; the numbers stay those of an independent SciPy fit and of the batched path."""

import csv
import gc

import numpy as np
import pytest
from scipy.special import expit

from jaxrank.cli import _common, main

import reference as ref
from compile_log import CompileLog


def _write(path, rows, header):
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def _context(seed, n, r):
    i, j, p, _, _ = ref.random_context(np.random.default_rng(seed), n, r)
    names = [f"t{k}" for k in range(n)]
    return [(names[a], names[b], float(q)) for a, b, q in zip(i, j, p)], names


def _ranked(path, tmp_path, *extra):
    out = tmp_path / "scores.csv"
    main(["rank", str(path), "-o", str(out), *extra])
    return list(csv.DictReader(out.open()))


def test_one_context_equals_scipy_fit_and_laplace(tmp_path):
    rows, names = _context(0, 7, 15)
    f = tmp_path / "one.csv"
    _write(f, rows, ["item_a", "item_b", "p"])
    got = {r["item"]: (float(r["score"]), float(r["stderr"])) for r in _ranked(f, tmp_path)}
    pos = {nm: k for k, nm in enumerate(names)}
    i = np.array([pos[a] for a, _, _ in rows])
    j = np.array([pos[b] for _, b, _ in rows])
    p = np.array([q for _, _, q in rows])
    w = np.ones(len(rows))
    s, _ = ref.soft_bt(i, j, p, w, len(names))
    # Laplace (PoE App. A.5): the covariance of centred scores is the pseudo-inverse of the Hessian, a Laplacian
    # weighted by w q (1 - q) at the optimum
    q = expit(s[i] - s[j])
    h = np.zeros((len(names), len(names)))
    for a, b, c in zip(i, j, w * q * (1 - q)):
        h[a, a] += c
        h[b, b] += c
        h[a, b] -= c
        h[b, a] -= c
    se = np.sqrt(np.diag(np.linalg.pinv(h)))
    np.testing.assert_allclose([got[nm][0] for nm in names], s, atol=2e-4)
    np.testing.assert_allclose([got[nm][1] for nm in names], se, rtol=2e-3)


@pytest.mark.parametrize("debias", ["none", "learn"])
def test_one_context_equals_the_same_context_in_a_batch(tmp_path, debias):
    """The unbatched program of one context and the vmapped program of several give the same numbers."""
    rows_x, _ = _context(1, 6, 12)
    rows_y, _ = _context(2, 9, 20)
    one, many = tmp_path / "one.csv", tmp_path / "many.csv"
    _write(one, rows_x, ["item_a", "item_b", "p"])
    _write(many, [r + ("x",) for r in rows_x] + [r + ("y",) for r in rows_y], ["item_a", "item_b", "p", "context"])
    alone = {r["item"]: r for r in _ranked(one, tmp_path, "--debias", debias)}
    batched = {r["item"]: r for r in _ranked(many, tmp_path, "--debias", debias) if r["context"] == "x"}
    assert alone.keys() == batched.keys()
    for key in ("score", "stderr", "games"):
        np.testing.assert_allclose([float(alone[k][key]) for k in alone], [float(batched[k][key]) for k in alone],
                                   atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method", ["bradley_terry", "poe_gaussian", "win_ratio"])
def test_one_context_other_methods_equal_their_api(tmp_path, method):
    rows, names = _context(3, 5, 9)
    f = tmp_path / "one.csv"
    _write(f, rows, ["item_a", "item_b", "p"])
    got = {r["item"]: float(r["score"]) for r in _ranked(f, tmp_path, "--method", method)}
    pos = {nm: k for k, nm in enumerate(names)}
    n = len(names)
    i = np.array([pos[a] for a, _, _ in rows])
    j = np.array([pos[b] for _, b, _ in rows])
    p, w = np.array([q for _, _, q in rows]), np.ones(len(rows))
    expect = {"win_ratio": lambda: ref.win_ratio(i, j, p, w, n),
              "poe_gaussian": lambda: ref.poe_gaussian(i, j, p, w, n),
              "bradley_terry": lambda: ref.bradley_terry(i, j, p, w, n, 1 / (n - 1))}[method]()
    np.testing.assert_allclose([got[nm] for nm in names], np.asarray(expect), atol=2e-4)


def test_reading_a_file_compiles_nothing(tmp_path):
    rows, _ = _context(4, 5, 9)
    f = tmp_path / "c.csv"
    _write(f, [r + (ctx,) for ctx in ("a", "b") for r in rows], ["item_a", "item_b", "p", "context"])
    from jaxrank.io import read_comparisons

    read_comparisons(f)           # first use of the device
    rows2, _ = _context(5, 6, 11)
    _write(f, [r + (ctx,) for ctx, rr in (("a", rows), ("b", rows2)) for r in rr], ["item_a", "item_b", "p", "context"])
    with CompileLog() as log:
        table = read_comparisons(f)
    assert log.records == []
    assert table.comparisons.i.shape == (2, 11) and table.comparisons.p.dtype == np.float32
    assert not np.asarray(table.comparisons.weight)[0, 9:].any()


def test_old_objects_frozen_is_undone_after_the_block():
    before = gc.get_freeze_count()
    with _common.old_objects_frozen():
        assert gc.get_freeze_count() > before
    with _common.old_objects_frozen():
        pass
    assert gc.get_freeze_count() == before
    assert len(_common._EXIT_FREEZE) == 1          # the exit hook is registered once per process


def test_old_objects_frozen_leaves_a_process_that_froze_objects_itself_alone():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with _common.old_objects_frozen():
            pass
        # Not unfrozen by the block: ``gc.unfreeze()`` would empty the permanent generation. Its count may still
        # drop by a few objects that reference counting frees meanwhile (frozen objects are not immortal).
        assert gc.get_freeze_count() >= frozen - 1_000 > 0
    finally:
        gc.unfreeze()
