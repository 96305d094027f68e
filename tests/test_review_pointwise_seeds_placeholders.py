"""Seeds checked at construction; pointwise prompts filled in one pass over the template.

* ``PromptScoringJudge`` and ``SampledGEvalJudge`` stored ``int(seed)`` unchecked
  (``"3"``, ``-1``, ``2**32`` or ``1.5`` were accepted, failing or wrapping only
  at sampling time): a seed outside ``[0, 2**32)`` or not an integer is now a
  ``ValueError`` naming ``seed`` when the judge is built (``textgen.check_seed``).
* The pointwise prompts replaced their placeholders one after another, so text
  put in early was searched again: the local G-Eval judge put the steps into
  criteria holding ``{steps}``; the server's judge put the context and the
  candidate into the criteria, the steps and a context holding ``{context}`` or
  ``{candidate}``. Each placeholder of the template is now replaced once; the
  expected prompt here is the template written out by hand with the texts in
  place.
"""

import dataclasses
import warnings

import numpy as np
import pytest
from tiny_lm import sharpen, tiny_lm

from jaxrank.judges.geval_sampling import SampledGEvalJudge
from jaxrank.judges.pointwise import GEvalJudge
from jaxrank.judges.prompt_scoring import PromptScoringJudge
from jaxrank.judges.prompts import pointwise_template
from jaxrank.judges.server import ServerGEvalJudge

ALL = "{context}{candidate}{criteria}{steps}"
CRIT, STEPS = f"crit {ALL}", f"steps {ALL}"
CTX, CAND = f"ctx {ALL}{{a}}{{b}}", f"cand {ALL}"
TEXT = "C: {criteria} | S: {steps} | X: {context} | Y: {candidate} | Score:"
EXPECTED = f"C: {CRIT} | S: {STEPS} | X: {CTX} | Y: {CAND} | Score:"
BAD_SEEDS = [-1, 2 ** 32, 2 ** 63, 1.5, True, "3", None]


@pytest.fixture(scope="module")
def lm():
    return sharpen(tiny_lm(seed=1))


def _template():
    return dataclasses.replace(pointwise_template("coherence"), text=TEXT, criteria=CRIT)


@pytest.mark.parametrize("seed", BAD_SEEDS)
def test_prompt_scoring_refuses_a_bad_seed_at_construction(lm, seed):
    with pytest.raises(ValueError, match="seed"):
        PromptScoringJudge(lm, aspect="coherence", temperature=0.0, seed=seed)


@pytest.mark.parametrize("seed", BAD_SEEDS)
def test_sampled_geval_refuses_a_bad_seed_at_construction(lm, seed):
    with pytest.raises(ValueError, match="seed"):
        SampledGEvalJudge(lm, pointwise_template("coherence"), steps="s", temperature=0.0, seed=seed)


@pytest.mark.parametrize("seed", [0, 2 ** 32 - 1, np.int64(7)])
def test_good_seeds_are_kept_as_ints(lm, seed):
    a = PromptScoringJudge(lm, aspect="coherence", temperature=0.0, seed=seed)
    b = SampledGEvalJudge(lm, pointwise_template("coherence"), steps="s", temperature=0.0, seed=seed)
    for judge in (a, b):
        assert type(judge.seed) is int and judge.seed == int(seed)


def test_local_geval_fills_every_placeholder_once(lm):
    judge = GEvalJudge(lm, _template(), steps=STEPS, chat=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = judge.prompt_text(CTX, CAND)
    assert EXPECTED in text and text.count("crit ") == 1 and text.count("steps ") == 1


def test_sampled_geval_fills_every_placeholder_once(lm):
    judge = SampledGEvalJudge(lm, _template(), steps=STEPS, temperature=0.0, chat=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        text = judge.prompt_text(CTX, CAND)
    assert EXPECTED in text


@pytest.mark.parametrize("with_steps", [True, False])
def test_server_geval_fills_every_placeholder_once(with_steps):
    tpl = _template()
    expected = EXPECTED
    if not with_steps:              # no chain of thought: no steps asked for, the criteria still kept whole
        tpl = dataclasses.replace(tpl, text=TEXT.replace("S: {steps} | ", ""))
        expected = EXPECTED.replace(f"S: {STEPS} | ", "")
    judge = ServerGEvalJudge("http://127.0.0.1:9", "m", tpl, endpoint="completions",
                             steps=STEPS if with_steps else None)
    assert judge.request_prompt(CTX, CAND) == {"prompt": expected}
