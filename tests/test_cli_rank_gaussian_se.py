"""``jaxrank rank --method poe_gaussian``: the s.e. is the posterior ``(W^T D W)^+`` scaled by the residual variance.

Independent reference: weighted least squares in NumPy (``lstsq`` of ``sqrt(w) W s = sqrt(w) y``), its residual
variance ``sum w r^2 / (R - rank W)`` and ``diag(pinv(W^T D W))``.
"""

import csv
import json

import numpy as np
import pytest

from jaxrank.cli import main


def _write(path, i, j, p, w):
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["item_a", "item_b", "p", "weight"])
        for a, b, q, x in zip(i, j, p, w):
            out.writerow([f"m{a}", f"m{b}", repr(float(q)), repr(float(x))])


def _numpy_se(i, j, p, w, n, *, hard=False, mean_beta=False):
    i, j, p, w = map(np.asarray, (i, j, p, w))
    live = w > 0
    i, j, p, w = i[live], j[live], p[live], w[live]
    x = (p > 0.5) + 0.5 * (p == 0.5) if hard else p
    beta = np.sum(w * x) / np.sum(w) if mean_beta else 0.5
    y = x - beta
    W = np.zeros((len(p), n))
    W[np.arange(len(p)), i] += 1
    W[np.arange(len(p)), j] -= 1
    sw = np.sqrt(w)
    s, *_ = np.linalg.lstsq(sw[:, None] * W, sw * y, rcond=None)
    r = y - W @ s
    dof = len(p) - np.linalg.matrix_rank(W) - int(mean_beta)
    sigma2 = np.sum(w * r ** 2) / dof if dof > 0 else np.nan
    return np.sqrt(sigma2 * np.diag(np.linalg.pinv(W.T @ (w[:, None] * W))))


def _run(tmp_path, capsys, extra):
    out = tmp_path / "s.json"
    main(["rank", str(tmp_path / "c.csv"), "--weight", "weight", "-o", str(out)] + extra)
    text = capsys.readouterr().out
    return {r["item"]: r for r in json.loads(out.read_text())}, text


@pytest.mark.parametrize("method,debias", [("poe_gaussian", "none"), ("poe_gaussian", "mean"),
                                           ("poe_gaussian_hard", "none")])
def test_gaussian_stderr_is_scaled_by_the_residual_variance(tmp_path, capsys, method, debias):
    rng = np.random.default_rng(3)
    # two components {0..4} and {5..7}; item 8 only in a weight-0 row
    i = np.r_[rng.integers(0, 5, 24), rng.integers(5, 8, 10), 8]
    j = np.r_[(i[:24] + rng.integers(1, 5, 24)) % 5, 5 + (i[24:34] - 5 + rng.integers(1, 3, 10)) % 3, 0]
    p = np.round(rng.uniform(0.05, 0.95, 35), 3)
    w = np.r_[rng.choice([0.5, 1.0, 2.0], 34), 0.0]
    _write(tmp_path / "c.csv", i, j, p, w)
    rows, text = _run(tmp_path, capsys, ["--method", method, "--debias", debias])
    ref = _numpy_se(i, j, p, w, 9, hard=method.endswith("hard"), mean_beta=debias == "mean")
    got = np.array([rows[f"m{k}"]["stderr"] for k in range(8)], float)
    np.testing.assert_allclose(got, ref[:8], rtol=2e-4)
    assert rows["m8"]["stderr"] is None
    assert "residual" in text and "n/a" not in text.split("m7")[0]


def test_gaussian_stderr_not_available_without_residual_freedom(tmp_path, capsys):
    _write(tmp_path / "c.csv", [0, 1], [1, 2], [0.7, 0.4], [1.0, 1.0])      # a tree: R = N - 1, no residual
    assert np.isnan(_numpy_se([0, 1], [1, 2], [0.7, 0.4], [1.0, 1.0], 3)).all()
    rows, text = _run(tmp_path, capsys, ["--method", "poe_gaussian"])
    assert all(r["stderr"] is None for r in rows.values())
    assert "s.e. n/a" in text
    assert all(r["score"] is not None for r in rows.values())
