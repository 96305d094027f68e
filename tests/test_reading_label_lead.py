"""The label is read as a person writes it after the answer prefix, on the real SmolLM2-135M.

References are independent of the judge's reading code: each answer is written out by hand as text
(``"(A"``, ``"**A"``, ``"Summary A"``, ``"Answer: A"``) after the chat header rendered by the tokenizer's own
chat template; the label's tokens are those of the whole text past the tokens the two answers share, and their
probability is a NumPy softmax over the whole vocabulary of one full forward pass on that text.
"""

import hashlib
import warnings

import numpy as np
import pytest

from jaxrank.judges.pairwise import READING_VERSION, PromptJudge
from jaxrank.judges.prompts import PairwiseTemplate, pairwise_template
from jaxrank.judges.reading import healed_tail, label_continuations, label_lead

CTX = "It rained all day in Paris."
CANDS = ["Rain fell in Paris all day.", "Tokyo was sunny."]
BASE = pairwise_template("summeval", "coherence")
PAREN = PairwiseTemplate(BASE.text.replace("Summary A or Summary B?", "(A) or (B)?"), name="paren")

# prefix -> (template, the answer a person writes after the chat header, with {L} the label)
CASES = {"Answer:": (BASE, "Answer: {L}"), "(": (PAREN, "({L}"), "**": (BASE, "**{L}"),
         "Summary ": (BASE, "Summary {L}"), "Summary": (BASE, "Summary {L}")}


def _np_log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def _natural(lm, template, answer):
    """``(log P(L_A), log P(L_B), log-probs at the answer position, first label tokens)`` by hand."""
    tok = lm.tokenizer
    msg = template.text.replace("{context}", CTX).replace("{a}", CANDS[0]).replace("{b}", CANDS[1])
    header = tok.apply_chat_template([{"role": "user", "content": msg}], chat_template=lm.chat_template,
                                     add_generation_prompt=True, tokenize=False)
    texts = [header + answer.replace("{L}", w) for w in ("A", "B")]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    c = 0
    while ids[0][c] == ids[1][c]:
        c += 1
    out, first = [], []
    for row in ids:
        lp = _np_log_softmax(np.asarray(lm.model(np.array([row])))[0])
        out.append(sum(lp[m - 1, row[m]] for m in range(c, len(row))))
        first.append(row[c])
    return out[0], out[1], lp[c - 1], first


def test_label_lead_is_how_a_person_writes_the_label():
    assert label_lead("Answer:") == " " and label_lead("Summary") == " " and label_lead("better.") == " "
    for prompt in ("(", "**", "[", '"', "'", "<|im_start|>assistant\n", ""):
        assert label_lead(prompt) == "", prompt


@pytest.mark.parametrize("prefix", list(CASES))
def test_label_mass_is_the_models_probability_of_the_natural_answer(smollm2, prefix):
    """After "Answer:", "(", "**" and "Summary " the judge reads the tokens of the answer written out by hand;
    its label mass and p equal the model's own probabilities of them, and the mass exceeds 0.5 wherever the
    model's two top next tokens are the labels (after "(" and "Summary ": before the fix 0.0002 and 0.0004)."""
    template, answer = CASES[prefix]
    judge = PromptJudge(smollm2, template, answer_prefix=prefix, min_label_mass=0.0)
    res = judge.compare(CTX, CANDS, [0], [1])
    la, lb, lp0, first = _natural(smollm2, template, answer)
    np.testing.assert_allclose(res.logits[0], [la, lb], atol=3e-4)
    np.testing.assert_allclose(res.label_mass[0], np.exp(la) + np.exp(lb), rtol=3e-3, atol=1e-6)
    np.testing.assert_allclose(res.p[0], np.exp(la) / (np.exp(la) + np.exp(lb)), atol=2e-5)
    top2 = set(np.argsort(-lp0)[:2].tolist())
    if top2 == set(first):
        assert res.label_mass[0] > 0.5
    if prefix in ("(", "Summary "):
        assert top2 == set(first)                  # the cases the assertion above must cover


def test_a_trailing_space_is_healed_into_the_label(smollm2):
    """"Summary " renders the prompt as "Summary" and reads " A": the same rows and reading as "Summary"; a
    newline (a chat header's end) stays in the prompt."""
    tok = smollm2.tokenizer
    assert healed_tail(tok, "x Summary ", ("A", "B")) == 1
    assert healed_tail(tok, "<|im_start|>assistant\n", ("A", "B")) == 0
    assert healed_tail(tok, "Summary", ("A", "B")) == 0
    spaced = PromptJudge(smollm2, BASE, answer_prefix="Summary ")
    plain = PromptJudge(smollm2, BASE, answer_prefix="Summary")
    assert spaced.prompt_text(CTX, *CANDS) == plain.prompt_text(CTX, *CANDS)
    assert spaced.prompt_text(CTX, *CANDS).endswith("assistant\nSummary")
    spaced_ids = tuple((tok(" " + w, add_special_tokens=False)["input_ids"][0],) for w in "AB")
    assert spaced.reading.ids == plain.reading.ids == spaced_ids


def _head_key(template_key, ids):
    """The template key at HEAD before the fix: the template's key and a hash of the reading's ids."""
    return f"{template_key}-" + hashlib.sha1(repr((READING_VERSION, None, ids)).encode()).hexdigest()[:6]


def test_the_template_key_changes_exactly_where_the_read_tokens_change(smollm2):
    """The key hashes the read label ids: it moves for "(" (' A' -> 'A'), "**" and "Summary " ('A' after a
    lone space -> ' A' after "Summary"), and stays for "Answer:", "Summary" and no prefix, whose readings are
    unchanged (the ids HEAD read, written out from the tokenizer here)."""
    tok = smollm2.tokenizer
    sp = tuple((tok(" " + w, add_special_tokens=False)["input_ids"][0],) for w in "AB")
    bare = tuple((tok(w, add_special_tokens=False)["input_ids"][0],) for w in "AB")
    head = {"Answer:": sp, "(": sp, "**": sp, "Summary ": bare, "Summary": sp, "": bare}
    for prefix, old in head.items():
        template = PAREN if prefix == "(" else BASE
        judge = PromptJudge(smollm2, template, answer_prefix=prefix)
        same = judge.reading.ids == old
        assert same == (prefix in ("Answer:", "Summary", "")), prefix
        assert (judge.template_key == _head_key(judge.template.key, old)) == same, prefix


def test_label_continuations_bind_after_an_opening_bracket(smollm2):
    tok = smollm2.tokenizer
    for prompt, texts in (("Answer:", (" A", " B")), ("x (", ("A", "B")), ("x **", ("A", "B")),
                          ("<|im_start|>assistant\n", ("A", "B"))):
        lc = label_continuations(tok, prompt, ("A", "B"))
        assert lc.texts == texts
        for t, ids in zip(texts, lc.ids):
            whole = tok(prompt + t, add_special_tokens=False)["input_ids"]
            assert list(ids) == whole[len(tok(prompt, add_special_tokens=False)["input_ids"]):]


def test_auto_prefixes_from_bracketed_answers_are_read_after_the_bracket(smollm2):
    """answer_prefix_of gives "(" for "(A) is better" answers: the judge then reads 'A' (no space)."""
    from jaxrank.judges.reading import answer_prefix_of
    assert answer_prefix_of(["(A) is better", "(B) is better"], ("A", "B")) == "("
    assert answer_prefix_of(["**A**", "**B**"], ("A", "B")) == "**"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        judge = PromptJudge(smollm2, PAREN, answer_prefix="(")
    assert judge.reading.texts == ("A", "B")
