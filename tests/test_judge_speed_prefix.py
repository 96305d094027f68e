"""``benchmarks/judge_speed.py`` benchmarks a judge that answers (issue 33): its judge reads the labels after
the answer prefix (``--answer-prefix auto`` by default, resolved before any side is timed), so the peers'
``p`` agreement is checked on prompts whose labels hold the model's answer. Before, the judge had no answer
prefix and SmolLM2's labels held ~2% of its answer."""

from pathlib import Path

import pytest
from tiny_lm import tiny_lm

from jaxrank.judges.prompts import pairwise_template
from _fixtures_experiments import load_script

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def judge_speed():
    return load_script(BENCH / "judge_speed.py", "judge_speed_under_test")


@pytest.fixture(scope="module")
def lm():
    return tiny_lm(chat=True, hidden=32)


def test_the_given_answer_prefix_ends_every_prompt(judge_speed, lm):
    template = pairwise_template("summeval", "coherence")
    judge = judge_speed.prepared_judge(lm, template, "an article", ["one", "two"], batch_size=2,
                                       answer_prefix="Summary")
    assert judge.template.answer_prefix == "Summary"
    assert judge.prompt_text("an article", "one", "two").endswith("Summary")
    rows, _ = judge.prompt_rows("an article", ["one", "two"], [0], [1])
    assert lm.tokenizer.decode(rows[0]).endswith("Summary")       # what every peer reads


def test_auto_is_resolved_before_timing(judge_speed, lm):
    """``auto`` (the default) is chosen from the model's answers once, before the sides run: the prefix is
    fixed (the template key exists) and a second compare does not choose again."""
    judge = judge_speed.prepared_judge(lm, pairwise_template("summeval", "coherence"), "an article",
                                       ["one", "two"], batch_size=2)
    assert judge.answer_prefix_choice is not None
    assert judge.template_key                       # raises while "auto" is unresolved
    choice = judge.answer_prefix_choice
    judge.compare("an article", ["one", "two"], [0], [1])
    assert judge.answer_prefix_choice is choice
