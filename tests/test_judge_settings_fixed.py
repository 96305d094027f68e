"""A PromptJudge's prompt settings are fixed when it is built: assigning one used to change the store's
template key but not the rendered prompt, so judgements made with the old prompt were stored under the new key."""

import pytest
from tiny_lm import tiny_lm

from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import pairwise_template


@pytest.fixture(scope="module")
def lm():
    return tiny_lm(chat=True, hidden=64)


@pytest.mark.parametrize("name, value", [("template", pairwise_template("summeval", "fluency")),
                                         ("system", "You are a strict judge."), ("chat", False)])
def test_assigning_a_prompt_setting_is_refused_and_changes_nothing(lm, name, value):
    judge = PromptJudge(lm, pairwise_template("summeval", "coherence"))
    key, text = judge.template_key, judge.prompt_text("the context", "first", "second")
    with pytest.raises(AttributeError, match=f"PromptJudge.{name} is fixed"):
        setattr(judge, name, value)
    assert judge.template_key == key and judge.prompt_text("the context", "first", "second") == text


def test_with_template_gives_a_judge_whose_prompt_and_key_both_change(lm):
    judge = PromptJudge(lm, pairwise_template("summeval", "coherence"))
    other = judge.with_template(pairwise_template("summeval", "fluency"))
    assert other.template_key != judge.template_key
    text = other.prompt_text("the context", "first", "second")
    assert "fluen" in text.lower() and "coheren" not in text.lower()
    assert "coheren" in judge.prompt_text("the context", "first", "second").lower()
