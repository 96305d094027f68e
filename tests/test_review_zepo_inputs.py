"""Bad and edge input of ZEPO and its statistics (review): the PoE seeds' adjectives, NaN objectives, empty samples,
integer calibration margins, NaN replay ratings, sampling settings of the paraphraser."""

import math

import numpy as np
import pytest
from tiny_lm import ByteTokenizer, tiny_lm

from jaxrank import cli, fairness
from jaxrank.assessment import zepo
from jaxrank.assessment.run import ContextSet
from jaxrank.calibration import MonotoneSpline, calibrate_logits, identity_spline, identity_temperature_bias, \
    log_derivative
from jaxrank.cli._errors import UsageError
from jaxrank.judges.pairwise import Judgement
from jaxrank.judges.prompts import pairwise_template
from jaxrank.judges.rating_replay import replay_comparisons, replay_probabilities

SUMMEVAL = ("coherence", "consistency", "fluency", "relevance")


# ------------------------------------------------------------------------------ PoE seeds
@pytest.mark.parametrize("aspect, adjective", list(zip(SUMMEVAL, ("coherent", "consistent", "fluent", "relevant"))))
def test_poe_seed_instructions_pass_the_check(aspect, adjective):
    t = pairwise_template("summeval", aspect, style="poe")
    ins = zepo.instruction_of(t)
    assert adjective in ins and aspect not in ins                  # the PoE question uses the adjective only
    assert zepo.aspect_forms(aspect) == (aspect, adjective)
    assert zepo.check_candidate(ins, aspect, labels=t.labels) is None
    assert zepo.aspect_keyword(ins, aspect) == adjective
    # the ZEPO seed keeps the noun; an instruction with neither word is still rejected
    z = pairwise_template("summeval", aspect, style="zepo")
    assert zepo.check_candidate(zepo.instruction_of(z), aspect, labels=z.labels) is None
    assert zepo.aspect_keyword(zepo.instruction_of(z), aspect) == aspect
    why = zepo.check_candidate("Which Summary is better, Summary A or Summary B?", aspect, labels=t.labels)
    assert why is not None and repr(adjective) in why


class _Reached(Exception):
    pass


def _no_data(args, **kw):
    raise AssertionError("the data were loaded before the seed template was checked")


@pytest.mark.parametrize("aspect", SUMMEVAL)
def test_cli_zepo_poe_seed_is_accepted_before_the_model_loads(monkeypatch, aspect, tmp_path):
    seen = {}

    def contexts(args, **kw):
        seen["data"] = True
        return ContextSet(["c0"], ["t"], [["a", "b"]], [["x", "y"]])

    def judge(args):
        raise _Reached

    monkeypatch.setattr(cli.zepo, "data_contexts", contexts)
    monkeypatch.setattr(cli.common, "make_judge", judge)
    with pytest.raises(_Reached):
        cli.main(["zepo", "--data", "summeval", "--aspect", aspect, "--template", "poe", "--no-progress",
                  "--store", str(tmp_path / "s.jsonl"), "--log", str(tmp_path / "l.jsonl")])
    assert seen == {"data": True}


def test_cli_zepo_unsearchable_seed_is_refused_before_data_and_model(monkeypatch, capsys):
    monkeypatch.setattr(cli.zepo, "data_contexts", _no_data)
    monkeypatch.setattr(cli.common, "make_judge", _no_data)
    with pytest.raises(UsageError):
        cli.main(["zepo", "--data", "topicalchat", "--aspect", "overall", "--template", "poe", "--no-progress"])
    assert "missing the aspect keyword 'overall'" in capsys.readouterr().err


# ------------------------------------------------------------------------ objectives on bad input
@pytest.mark.parametrize("f", [fairness.fairness, fairness.confidence, fairness.batch_calibration,
                               fairness.decision_rate, fairness.context_free_confidence])
def test_objectives_give_nan_for_nan_out_of_range_or_empty_input(f):
    good = np.array([0.9, 0.2, 0.7, 0.4], np.float32)
    assert np.isfinite(float(f(good)))
    for bad in (np.array([0.9, np.nan, 0.7, 0.4], np.float32), np.array([3.2, 2.5, 4.0, 1.7], np.float32),
                np.array([0.9, -0.1], np.float32), np.zeros(0, np.float32)):
        assert math.isnan(float(f(bad)))
    # padding is never read, even when it holds NaN; a row of padding only is NaN
    padded = np.concatenate([good, [np.nan, 7.0]]).astype(np.float32)
    w = np.array([1, 1, 1, 1, 0, 0], np.float32)
    assert float(f(padded, w)) == pytest.approx(float(f(good)), abs=1e-6)
    assert math.isnan(float(f(good, np.zeros(4, np.float32))))
    batch = np.stack([good, [0.9, 0.2, np.nan, 0.4]]).astype(np.float32)
    out = np.asarray(f(batch))
    assert np.isfinite(out[0]) and np.isnan(out[1])


def test_balanced_fairness_is_plain_zero():
    f = float(fairness.fairness(np.array([0.9, 0.1], np.float32)))
    assert f == 0.0 and math.copysign(1.0, f) == 1.0


# --------------------------------------------------------------------------- the search
def _contexts(sizes):
    return ContextSet([f"c{k}" for k in range(len(sizes))], [f"text {k}" for k in range(len(sizes))],
                      [[f"s{x}" for x in range(n)] for n in sizes],
                      [[f"candidate {k}-{x}" for x in range(n)] for k, n in enumerate(sizes)])


def test_sample_pairs_skips_one_candidate_contexts_and_refuses_an_empty_sample():
    with pytest.raises(ValueError, match="2 candidates"):
        zepo.sample_pairs(_contexts([1, 1]), num_contexts=2, pairs_per_context=6)
    s = zepo.sample_pairs(_contexts([1, 3, 1, 2]), num_contexts=2, pairs_per_context=None)
    assert s.ids == ["c1", "c3"] and s.size == 2 * 3 + 2 * 1
    with pytest.raises(ValueError, match=r"\[1, 2\]"):
        zepo.sample_pairs(_contexts([1, 3, 1, 2]), num_contexts=3, pairs_per_context=None)
    empty = zepo.SearchSample(["c0"], ["t"], [["s0"]], [["x"]], [np.zeros((0, 2), np.int32)])
    with pytest.raises(ValueError, match="no comparisons"):
        zepo.zepo_search(_NanJudge(set()), _Words(["x"]), _seed(), empty, "coherence", store=None, log=None)


def _seed():
    return pairwise_template("summeval", "coherence", style="zepo")


class _NanJudge:
    """p from the template text: NaN for instructions holding a word in ``nan_words``, else all-A (-0.5) or
    balanced (0.0) when the instruction says 'balanced'."""

    name = "nan-judge"

    def __init__(self, nan_words):
        self.nan_words = set(nan_words)
        self.lm = type("LM", (), {"tokenizer": ByteTokenizer()})()

    def compare_templates(self, templates, context, candidates, i, j, progress=None):
        out = []
        for t in templates:
            ins = zepo.instruction_of(t)
            n = len(i)
            if any(w in ins for w in self.nan_words):
                p = np.full(n, np.nan)
            elif "balanced" in ins:
                p = np.where(np.arange(n) % 2 == 0, 0.8, 0.2)
            else:
                p = np.full(n, 0.9)
            out.append(Judgement(p.astype(np.float32), False, np.zeros((n, 2), np.float32)))
        return out


class _Words:
    name, temperature, seed = "words", 0.0, 0

    def __init__(self, instructions):
        self.instructions = instructions

    def propose(self, instruction, n, epoch):
        return list(self.instructions)[:n]


def test_a_judge_giving_nan_p_is_refused_by_the_store(tmp_path):
    sample = zepo.sample_pairs(_contexts([3]), num_contexts=1, pairs_per_context=None)
    with pytest.raises(ValueError, match="p must be a probability"):
        zepo.zepo_search(_NanJudge({"If the candidate"}), _Words([]), _seed(), sample, "coherence",
                         store=tmp_path / "s.jsonl", log=tmp_path / "l.jsonl", epochs=0)


def _fake_objectives(values):
    """A score_templates whose objectives come from ``values[instruction]`` (NaN where a p would be NaN)."""

    def score(judge, templates, sample, store, progress=None):
        v = np.array([values[zepo.instruction_of(t)] for t in templates], np.float64)
        out = {o: v for o in fairness.OBJECTIVES}
        out["decision_rate"] = np.full(len(templates), 0.5)
        return out

    return score


def test_a_nan_objective_is_never_chosen(tmp_path, monkeypatch):
    sample = zepo.sample_pairs(_contexts([3, 3]), num_contexts=2, pairs_per_context=None)
    nan_first = ["Broken coherence: answer A or B.", "A balanced coherence check: answer A or B."]
    seed = _seed()
    monkeypatch.setattr(zepo, "score_templates", _fake_objectives(
        {zepo.instruction_of(seed): -0.5, nan_first[0]: float("nan"), nan_first[1]: -0.25}))
    res = zepo.zepo_search(_NanJudge(set()), _Words(nan_first), seed, sample, "coherence",
                           store=tmp_path / "s.jsonl", log=tmp_path / "l.jsonl", epochs=1, population=2)
    assert zepo.instruction_of(res.best) == nan_first[1] and res.epochs[1]["objective"] == -0.25
    scored = {c["instruction"]: c["fairness"] for c in res.candidates}
    assert math.isnan(scored[nan_first[0]])


def test_a_nan_seed_is_replaced_by_a_finite_candidate(tmp_path, monkeypatch):
    sample = zepo.sample_pairs(_contexts([3]), num_contexts=1, pairs_per_context=None)
    ok = "Which has better coherence? Say A or B."
    seed = _seed()
    monkeypatch.setattr(zepo, "score_templates", _fake_objectives({zepo.instruction_of(seed): float("nan"),
                                                                   ok: -0.5}))
    res = zepo.zepo_search(_NanJudge(set()), _Words([ok]), seed, sample, "coherence",
                           store=tmp_path / "s.jsonl", log=tmp_path / "l.jsonl", epochs=1, population=1)
    assert math.isnan(res.epochs[0]["objective"])
    assert zepo.instruction_of(res.best) == ok and res.epochs[1]["objective"] == -0.5


def test_paraphraser_sampling_settings_are_checked():
    lm = tiny_lm(seed=0)
    for kw, arg in ((dict(top_p=0.0), "top_p"), (dict(temperature=-1.0), "temperature"),
                    (dict(max_new_tokens=0), "max_new_tokens")):
        with pytest.raises(ValueError, match=arg):
            zepo.Paraphraser(lm, "coherence", **kw)


# ---------------------------------------------------------------------------------- calibration
def test_integer_margins_calibrate_as_floats():
    sp = identity_spline(2, knots=(-1.5, -0.5, 0.5, 1.5))
    x = np.arange(-3, 4)
    np.testing.assert_allclose(calibrate_logits(sp, x), x.astype(np.float32), atol=1e-6)
    tb = identity_temperature_bias()
    np.testing.assert_allclose(calibrate_logits(tb, x), x.astype(np.float32), atol=1e-6)
    bent = MonotoneSpline(np.array([[0.3, -0.2, 0.5, 0.1, -0.4]] * 2, np.float32), np.array([0.2, -0.1], np.float32),
                          sp.knots)
    np.testing.assert_array_equal(calibrate_logits(bent, x), calibrate_logits(bent, x.astype(np.float32)))
    np.testing.assert_array_equal(log_derivative(bent, x), log_derivative(bent, x.astype(np.float32)))


# ---------------------------------------------------------------------------------- replay ratings
def test_nan_ratings_raise_naming_the_rating_and_padding_is_ignored():
    r = np.tile(np.arange(3, dtype=np.float64)[None, :, None], (2, 1, 4))   # item c rated c under every variant
    r[1, 2, 3] = np.nan
    mask = np.ones((2, 3), bool)
    with pytest.raises(ValueError, match=r"ratings\[1, 2, 3\] is nan"):
        replay_comparisons(r, mask)
    with pytest.raises(ValueError, match=r"ratings\[1, 2, 3\]"):
        replay_probabilities(r, np.array([[0], [0]]), np.array([[1], [2]]), method="logistic")
    mask[1, 2] = False                                  # the NaN belongs to a padded item: never read
    for method in ("variant_share", "logistic", "gaussian"):
        c = replay_comparisons(r, mask, method=method)
        p, w = np.asarray(c.p), np.asarray(c.weight)
        assert np.all(np.isfinite(p)) and w[1].tolist() == [1, 0, 0]
        # p(a, b) + p(b, a) = 1 from the same ratings read the other way round
        q = replay_probabilities(np.where(mask[..., None], r, 0.0), np.asarray(c.j), np.asarray(c.i), method=method)
        np.testing.assert_allclose(p + q, 1.0, atol=1e-6)
    assert float(np.asarray(replay_comparisons(r, mask).p)[0, 0]) == 0.0      # item 0 rated below item 1
