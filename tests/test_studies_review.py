"""Bad options of :mod:`jaxrank.studies` (run_study, budget_grid, simulated_judge): a ``ValueError`` naming the
argument up front, not a NumPy reduction/reshape error or a silent result; the kept cases against closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from jaxrank import studies


@pytest.fixture(scope="module")
def judge():
    rng = np.random.default_rng(0)
    labels = rng.integers(1, 6, (3, 5)).astype(np.float32)
    return studies.simulated_judge(labels, np.ones((3, 5), bool), accuracy=0.7, p_a=0.45, seed=1)


@pytest.mark.parametrize("selection, budgets, most", [("greedy", [11, 20], 10), ("random", [21, 40], 20),
                                                      ("random", [], 20)])
def test_run_study_without_a_budget_in_range_names_budgets_and_the_maximum(judge, selection, budgets, most):
    # N = 5: greedy without repeats selects at most N(N-1)/2 = 10, random N(N-1) = 20
    with pytest.raises(ValueError, match=rf"budgets must hold at least one budget <= {most}\b"):
        studies.run_study(judge, scorers=["win_ratio"], budgets=budgets, num_subsets=2, selection=selection)


@pytest.mark.parametrize("num_subsets", [0, -1, 1.5, None])
def test_run_study_num_subsets_must_be_a_positive_int(judge, num_subsets):
    with pytest.raises(ValueError, match="num_subsets must be an int >= 1"):
        studies.run_study(judge, scorers=["win_ratio"], budgets=[4], num_subsets=num_subsets)


def test_run_study_keeps_budgets_in_range_and_drops_the_rest(judge):
    rows, curves = studies.run_study(judge, scorers=["win_ratio"], budgets=[4, 10, 11], num_subsets=2,
                                     selection="greedy")
    assert [r["budget"] for r in rows] == [4, 10] and curves["win_ratio"].shape == (2, 2)


@pytest.mark.parametrize("num_items", [1, 0, -3, 2.5, "16"])
def test_budget_grid_needs_two_items(num_items):
    with pytest.raises(ValueError, match="num_items must be an int"):
        studies.budget_grid(num_items)


@pytest.mark.parametrize("step", [0, -3, 1.5])
def test_budget_grid_step_must_be_at_least_one(step):
    with pytest.raises(ValueError, match="step must be an int"):
        studies.budget_grid(16, step=step)


def test_budget_grid_closed_form():
    assert studies.budget_grid(2) == [1, 2]                       # N - 1 = 1 .. N(N-1) = 2
    assert studies.budget_grid(16) == list(range(15, 241, 15))    # default step N - 1
    assert studies.budget_grid(5, step=7) == [4, 11, 18, 20]      # range(4, 21, 7) plus the top


@pytest.mark.parametrize("seed", [None, 1.5, "0", True])
def test_simulated_judge_seed_must_be_an_int(seed):
    with pytest.raises(ValueError, match="seed must be an int"):
        studies.simulated_judge(np.arange(12.0).reshape(3, 4), np.ones((3, 4), bool), accuracy=0.7, p_a=0.5,
                                seed=seed)


def test_simulated_judge_mask_of_another_shape_is_refused():
    with pytest.raises(ValueError, match=r"mask must have the shape of labels \(3, 4\) .*got \(3, 3\)"):
        studies.simulated_judge(np.arange(12.0).reshape(3, 4), np.ones((3, 3), bool), accuracy=0.7, p_a=0.5)
