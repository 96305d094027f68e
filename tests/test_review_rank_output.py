"""Review fixes: items in no judged comparison (uncertainty and ``jaxrank rank``) and ``rank -o x.json``.

Independent references: a Gaussian prior with no data is exactly the prior (``N(0, 1/lambda)``: variance
``1/lambda``, no covariance with anything); the same comparisons without the unjudged item (scores,
standard errors and confidences are invariant to adding it); the "adjacent" confidence in closed form
with SciPy over the judged items; ``json.load`` for the output files.
"""

import csv
import json

import jax
import numpy as np
import pytest
from scipy.stats import norm

import jaxrank as jr
from jaxrank.cli import main

# items 0..2 judged (a 3-cycle); item 3 only in a weight-0 row
I, J, P, W = [0, 1, 2, 0], [1, 2, 0, 3], [0.7, 0.6, 0.4, 0.9], [1.0, 1.0, 1.0, 0.0]


def _with_ghost():
    return jr.Comparisons.from_pairs(I, J, P, weight=W, num_items=4)


def _without_ghost():
    return jr.Comparisons.from_pairs(I[:3], J[:3], P[:3], num_items=3)


@pytest.mark.parametrize("lam", [0.0, 0.5, 4.0])
@pytest.mark.parametrize("covariance", ["dense", "diagonal"])
def test_unjudged_item_variance_is_the_prior_or_zero(lam, covariance):
    solver = jr.BradleyTerrySolver(score_prior=lam)
    fit = jr.laplace_posterior(_with_ghost(), solver, covariance=covariance)
    ref = jr.laplace_posterior(_without_ghost(), solver, covariance=covariance)
    se = np.asarray(fit.posterior.stderr)
    assert float(fit.solution.scores[3]) == 0.0
    assert se[3] == pytest.approx(1 / np.sqrt(lam) if lam > 0 else 0.0, rel=1e-6)
    np.testing.assert_allclose(np.asarray(fit.solution.scores[:3]), np.asarray(ref.solution.scores), atol=1e-5)
    if covariance == "dense":
        cov = np.asarray(fit.posterior.covariance)
        np.testing.assert_array_equal(cov[3, :3], 0)
        np.testing.assert_array_equal(cov[:3, 3], 0)
        np.testing.assert_allclose(cov[:3, :3], np.asarray(ref.posterior.covariance), atol=1e-5)


def test_padded_items_keep_variance_zero_under_a_prior():
    c = jr.stack_contexts([_with_ghost(), jr.Comparisons.from_pairs([0], [1], [0.8], num_items=2)])
    var = np.asarray(jr.laplace_posterior(c, jr.BradleyTerrySolver(score_prior=2.0)).posterior.stderr) ** 2
    assert var[0, 3] == pytest.approx(0.5) and var[1, 2] == 0 and var[1, 3] == 0


@pytest.mark.parametrize("lam", [0.0, 1.0, 25.0])
def test_unjudged_item_rank_interval_is_everything(lam):
    post = jr.laplace_posterior(_with_ghost(), jr.BradleyTerrySolver(score_prior=lam)).posterior
    ri = jr.rank_intervals(post, key=jax.random.key(0), num_samples=500)
    assert (int(ri.lower[3]), int(ri.upper[3])) == (1, 4)
    assert float(ri.median[3]) == 2.5 and float(ri.mean[3]) == 2.5
    assert np.isfinite(np.asarray(ri.mean)).all() and np.isfinite(np.asarray(ri.median)).all()


def _adjacent(m, cov):
    o = np.argsort(-m)
    return np.mean([norm.cdf((m[a] - m[b]) / np.sqrt(cov[a, a] + cov[b, b] - 2 * cov[a, b]))
                    for a, b in zip(o[:-1], o[1:])])


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_ranking_confidence_leaves_unjudged_items_out(lam):
    solver = jr.BradleyTerrySolver(score_prior=lam)
    post = jr.laplace_posterior(_with_ghost(), solver).posterior
    ref = jr.laplace_posterior(_without_ghost(), solver).posterior
    m, cov = np.asarray(post.mean, float)[:3], np.asarray(post.covariance, float)[:3, :3]
    np.testing.assert_allclose(float(jr.ranking_confidence(post, rule="adjacent")), _adjacent(m, cov), rtol=1e-4)
    key = jax.random.key(1)
    with_ghost = float(jr.ranking_confidence(post, key=key, num_samples=4000))
    alone = float(jr.ranking_confidence(ref, key=key, num_samples=4000))
    assert abs(with_ghost - alone) < 0.03                      # Monte Carlo: different draws, same distribution


def test_ranking_confidence_is_nan_with_fewer_than_two_judged_items():
    c = jr.Comparisons.from_pairs([0, 1], [1, 2], [0.7, 0.6], weight=[0.0, 0.0], num_items=3)
    post = jr.laplace_posterior(c, jr.BradleyTerrySolver(score_prior=1.0)).posterior
    np.testing.assert_allclose(np.asarray(post.stderr), 1.0)    # every item: the N(0, 1) prior
    assert np.isnan(float(jr.ranking_confidence(post, rule="adjacent")))
    assert np.isnan(float(jr.ranking_confidence(post, key=jax.random.key(0), num_samples=16)))
    ri = jr.rank_intervals(post, key=jax.random.key(0), num_samples=64)
    np.testing.assert_array_equal(np.asarray(ri.lower), 1)
    np.testing.assert_array_equal(np.asarray(ri.upper), 3)


# ------------------------------------------------------------------ jaxrank rank
def _ghost_file(tmp_path):
    f = tmp_path / "w0.csv"
    f.write_text("item_a,item_b,p,weight\nx,y,0.7,1\ny,z,0.6,1\nz,x,0.4,1\nx,ghost,0.9,0\n")
    return f


@pytest.mark.parametrize("extra", [[], ["--score-prior", "1"], ["--method", "poe_gaussian"],
                                   ["--method", "win_ratio"]])
def test_rank_lists_an_unjudged_item_apart_as_na(tmp_path, capsys, extra):
    out = tmp_path / "s.csv"
    main(["rank", str(_ghost_file(tmp_path)), "-o", str(out)] + extra)
    text = capsys.readouterr().out
    lines = text.splitlines()
    table = [line.split() for line in lines[next(i for i, line in enumerate(lines) if "rank  item" in line) + 1:]][:4]
    assert [r[0] for r in table] == ["1", "2", "3", "-"]           # the ranked items, then the unjudged one
    assert sorted(r[1] for r in table[:3]) == ["x", "y", "z"]
    assert table[3][1] == "ghost" and "n/a" in table[3] and "0.000" not in table[3]
    if "win_ratio" not in extra:
        assert table[3][2:] == ["n/a", "n/a", "0"]                 # score and s.e.
    assert "1 item(s) in no judged comparison" in text and "not ranked among the judged items" in text
    assert "disconnected" not in text                          # the judged items form one component
    rows = list(csv.DictReader(out.open()))
    assert [r["item"] for r in rows][-1] == "ghost"
    assert rows[-1]["rank"] == rows[-1]["score"] == rows[-1]["stderr"] == "" and rows[-1]["games"] == "0"
    assert sorted(int(r["rank"]) for r in rows[:3]) == [1, 2, 3]


def test_rank_output_json_is_one_array_and_jsonl_one_object_a_line(tmp_path, capsys):
    f = _ghost_file(tmp_path)
    main(["rank", str(f), "-o", str(tmp_path / "s.json"), "--top", "0"])
    main(["rank", str(f), "-o", str(tmp_path / "s.jsonl"), "--top", "0"])
    capsys.readouterr()
    with (tmp_path / "s.json").open() as fh:
        rows = json.load(fh)
    assert isinstance(rows, list) and all(isinstance(r, dict) for r in rows)
    assert [r["rank"] for r in rows] == [1, 2, 3, None]
    assert rows[-1] == {"rank": None, "item": "ghost", "score": None, "stderr": None, "games": 0}
    assert set(rows[0]) == {"rank", "item", "score", "stderr", "games"}
    lines = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert lines == rows
