"""HANNA LLM ratings: loader vs an independent reading of the CSV, replay-judge p by hand."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxrank.data import load_llm_ratings, match_systems
from jaxrank.data.loaders import data_dir
from hanna_raw import read_hanna_raw
from jaxrank.judges.rating_replay import all_pairs, replay_comparisons, replay_probabilities, replay_scores
from _fixtures_experiments import load_script

try:
    DATA = data_dir()
    HAVE = (DATA / "hanna" / "hanna_metric_scores_llm.csv").is_file()
except FileNotFoundError:
    DATA, HAVE = None, False
needs_data = pytest.mark.skipif(not HAVE, reason="HANNA data not present")


@pytest.fixture(scope="module")
def raw():
    """The CSV parsed with csv + json only, and hanna.jsonl rows grouped by prompt."""
    return read_hanna_raw(DATA)


@pytest.fixture(scope="module")
def systems():
    return match_systems()


@needs_data
def test_match_is_bijection_and_agrees_with_human_scores(raw, systems):
    rows, stories = raw
    assert len(systems) == 96
    for k, names in enumerate(systems):
        assert sorted(names) == sorted(rows)                 # each system exactly once per prompt
        for rec, name in zip(stories[f"P{k}"], names):      # matched row has the story's averaged scores
            for aspect in ("relevance", "coherence", "empathy", "surprise", "engagement", "complexity"):
                assert json.loads(rows[name][aspect.capitalize()])[k] == pytest.approx(rec[aspect], abs=1e-9)


@needs_data
@pytest.mark.parametrize("judge,aspect,code", [("ChatGPT", "coherence", "CH"), ("Beluga-13B", "relevance", "RE"),
                                                ("Mistral-7B", "complexity", "CX")])
def test_loader_matches_hand_reading_of_cells(raw, systems, judge, aspect, code):
    rows, stories = raw
    r = load_llm_ratings(judge, aspect, systems=systems)
    assert r.ratings.shape == (96, 11, 4) and r.mask.all()
    for k in (0, 41, 76, 95):
        for c in (0, 5, 10):
            name = systems[k][c]
            hand = [json.loads(rows[name][f"{judge} {code} {v}"])[k] for v in (1, 2, 3, 4)]
            np.testing.assert_allclose(r.ratings[k, c], hand, rtol=1e-6)
            assert r.human[k, c] == pytest.approx(stories[f"P{k}"][c][aspect], abs=1e-5)


def test_bad_arguments_name_the_argument(tmp_path):
    with pytest.raises(ValueError, match="judge"):
        load_llm_ratings("GPT-5", "coherence", path=tmp_path)
    with pytest.raises(ValueError, match="aspect"):
        load_llm_ratings("ChatGPT", "fluency", path=tmp_path)
    with pytest.raises(ValueError, match="method"):
        replay_probabilities(np.ones((3, 4)), [0], [1], method="vote")
    with pytest.raises(ValueError, match="temperature"):
        replay_probabilities(np.ones((3, 4)), [0], [1], method="logistic", temperature=0)
    with pytest.raises(ValueError, match="variant"):
        replay_scores(np.ones((3, 4)), variant=4)


def test_pairwise_p_by_hand():
    ratings = np.array([[[1, 2, 3, 4], [1, 3, 3, 1], [5, 5, 5, 5]]], np.float32)
    i, j = np.array([[0, 0, 1]]), np.array([[1, 2, 2]])
    # variant share, A=0 vs B=1: (tie, lose, tie, win) -> (0.5 + 0 + 0.5 + 1) / 4
    share = replay_probabilities(ratings, i, j, method="variant_share")
    np.testing.assert_allclose(share, [[0.5, 0.0, 0.0]])
    # logistic: means 2.5, 2.0, 5.0
    lg = replay_probabilities(ratings, i, j, method="logistic", temperature=0.5)
    sig = lambda x: 1 / (1 + math.exp(-x))
    np.testing.assert_allclose(lg, [[sig(1.0), sig(-5.0), sig(-6.0)]], rtol=1e-6)
    g = replay_probabilities(ratings, i, j, method="gaussian")
    sd = math.sqrt(np.var([1, 2, 3, 4]) / 4 + np.var([1, 3, 3, 1]) / 4 + 1e-2)
    assert g[0, 0] == pytest.approx(0.5 * (1 + math.erf(0.5 / sd / math.sqrt(2))), rel=1e-6)
    np.testing.assert_allclose(replay_scores(ratings), [[2.5, 2.0, 5.0]])
    np.testing.assert_allclose(replay_scores(ratings, variant=1), [[2, 3, 5]])


@needs_data
def test_pairwise_p_on_real_stories(raw, systems):
    rows, _ = raw
    r = load_llm_ratings("Llama-13B", "engagement", systems=systems)
    comps = replay_comparisons(r.ratings, r.mask, method="variant_share")
    i, j, _ = all_pairs(r.mask)
    for k, q in ((3, 0), (50, 17), (90, 54)):
        a, b = systems[k][int(i[k, q])], systems[k][int(j[k, q])]
        ra = [json.loads(rows[a][f"Llama-13B EG {v}"])[k] for v in (1, 2, 3, 4)]
        rb = [json.loads(rows[b][f"Llama-13B EG {v}"])[k] for v in (1, 2, 3, 4)]
        hand = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x, y in zip(ra, rb)) / 4
        assert float(comps.p[k, q]) == pytest.approx(hand)
    assert comps.p.shape == (96, 55)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.integers(1, 5), min_size=4, max_size=4), min_size=2, max_size=6),
       st.sampled_from(["variant_share", "logistic", "gaussian"]))
def test_antisymmetry_and_range(items, method):
    ratings = np.asarray([items], np.float32)
    n = ratings.shape[1]
    a, b = np.triu_indices(n, 1)
    p = replay_probabilities(ratings, a[None], b[None], method=method)
    q = replay_probabilities(ratings, b[None], a[None], method=method)
    np.testing.assert_allclose(p + q, 1.0, atol=1e-6)
    assert np.all((p >= 0) & (p <= 1))


@needs_data
def test_experiments_hanna_llm_judge_matrix_by_hand(raw, systems):
    """experiments/_common.hanna_llm_judge: every ordered pair's variant share, read from the CSV by hand."""
    from pathlib import Path

    here = Path(__file__).resolve().parents[1] / "experiments"
    common = load_script(here / "_common.py", "_exp_common")
    jm = common.hanna_llm_judge("ChatGPT", "coherence")
    rows, _ = raw
    assert jm.probs.shape == (96, 11, 11) and not jm.observed[:, np.arange(11), np.arange(11)].any()
    for k, a, b in ((0, 1, 2), (40, 7, 3), (95, 10, 0)):
        ra = [json.loads(rows[systems[k][a]][f"ChatGPT CH {v}"])[k] for v in (1, 2, 3, 4)]
        rb = [json.loads(rows[systems[k][b]][f"ChatGPT CH {v}"])[k] for v in (1, 2, 3, 4)]
        hand = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x, y in zip(ra, rb)) / 4
        assert jm.observed[k, a, b] and float(jm.probs[k, a, b]) == pytest.approx(hand)
        assert float(jm.probs[k, b, a]) == pytest.approx(1 - hand)


@needs_data
@pytest.mark.parametrize("judge", ["Beluga-13B", "OrcaPlatypus", "Mistral-7B", "Llama-13B", "ChatGPT"])
def test_below_scale_cells_are_marked_and_counted_as_a_pandas_read(judge, systems):
    """The release averages a -1 "no rating" code into its means; ``valid`` and ``num_below_scale`` vs pandas."""
    import pandas as pd

    df = pd.read_csv(DATA / "hanna" / "hanna_metric_scores_llm.csv")
    total = 0
    for aspect, code in (("relevance", "RE"), ("coherence", "CH"), ("empathy", "EM"), ("surprise", "SU"),
                         ("engagement", "EG"), ("complexity", "CX")):
        cells = np.array([[json.loads(v) for v in df[f"{judge} {code} {k}"]] for k in range(1, 5)])  # [4, 11, 96]
        r = load_llm_ratings(judge, aspect, systems=systems)
        want = int((cells < 1).sum())
        assert r.num_below_scale == want == int((~r.valid).sum())
        np.testing.assert_array_equal(r.valid, r.ratings >= 1)
        # the stored values are kept (reproducible results): same multiset of cells below 1
        np.testing.assert_allclose(np.sort(r.ratings[~r.valid]), np.sort(cells[cells < 1]).astype(np.float32))
        total += want
    assert total == {"Beluga-13B": 173, "OrcaPlatypus": 203, "Mistral-7B": 402, "Llama-13B": 259, "ChatGPT": 14}[judge]
