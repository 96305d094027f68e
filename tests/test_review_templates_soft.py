"""Review fixes of PromptJudge.compare_templates: a soft prompt is read, an "auto" answer prefix is resolved.

* A judge with a soft prompt (``PromptJudge(soft_prompt=...)``) read the templates of ``compare_templates`` on
  the plain path, ignoring the learnt vectors, so ZEPO stored the plain ``p`` under the soft-prompt judge's name.
  Reference (tiny byte-level Llama, exact tokenisation): the vectors of real tokens
  (:meth:`SoftPrompt.from_text`) read as the plain judge whose template carries that text where the vectors go.
* An ``answer_prefix="auto"`` judge not yet prepared read every template without the prefix ``compare`` chooses.
  Reference (real SmolLM2-135M): a fresh judge given the chosen prefix explicitly, and a NumPy softmax over the
  vocabulary of one full forward pass of the whole prompt text.
"""

import warnings

import numpy as np
import pytest

from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import PairwiseTemplate, pairwise_template
from jaxrank.judges.soft_prompt import SoftPrompt
from tiny_lm import sharpen, tiny_lm

CTX = "The city council approved a new park on Monday. It will open next spring near the river."
CANDS = ["A park was approved by the council.", "The council met on Monday to talk.",
         "A new riverside park opens next spring.", "Rain is expected."]
I = np.array([0, 1, 2, 3, 0, 2])
J = np.array([1, 0, 3, 2, 3, 1])
T0 = pairwise_template("summeval", "coherence")
T1 = PairwiseTemplate(T0.text.replace("is more coherent", "reads better"), name="t1")   # same prefix before {a}
TEXT = " Be fair to both."


@pytest.fixture(scope="module")
def lm():
    return sharpen(tiny_lm(seed=1, chat=True), 3.0)


def test_compare_templates_reads_the_soft_prompt(lm):
    soft = SoftPrompt.from_text(lm, TEXT, "before_question")
    judge = PromptJudge(lm, T0, batch_size=4, soft_prompt=soft, min_label_mass=0.0)
    got = judge.compare_templates([T0, T1], CTX, CANDS, I, J)
    for t, g in zip((T0, T1), got):
        # the byte tokenizer is exact: the vectors sit after candidate B, where this template carries the text
        shifted = PairwiseTemplate(t.text.replace("{b}", "{b}" + TEXT), name="shifted")
        want = PromptJudge(lm, shifted, batch_size=4, min_label_mass=0.0).compare(CTX, CANDS, I, J)
        np.testing.assert_allclose(np.diff(g.logits), np.diff(want.logits), atol=2e-5)
        np.testing.assert_allclose(g.p, want.p, atol=1e-5)
        plain = PromptJudge(lm, t, batch_size=4, min_label_mass=0.0).compare(CTX, CANDS, I, J)
        assert np.abs(plain.p - want.p).max() > 1e-3           # the vectors change p: the check is not vacuous
    assert judge.name.endswith(soft.key)                      # ZEPO stores these under the soft judge's name


def test_compare_templates_soft_prompt_keeps_the_prefix_check(lm):
    soft = SoftPrompt.from_text(lm, TEXT, "before_question")
    judge = PromptJudge(lm, T0, soft_prompt=soft)
    other = PairwiseTemplate("Read this. " + T0.text, name="other")
    with pytest.raises(ValueError, match="changes the prefix before"):
        judge.compare_templates([T0, other], CTX, CANDS, I, J)


def _log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def test_compare_templates_prepares_an_auto_prefix(smollm2):
    """SmolLM2 answers "Summary A: ..." to this prompt; unprepared, compare_templates read ' A' after the bare
    assistant header (another p) and left the judge unprepared."""
    t = PairwiseTemplate("Article: {context}\n\nSummary A: {a}\n\nSummary B: {b}\n\nWhich summary is better, "
                         "Summary A or Summary B? Reply in a full sentence.", name="t")
    t2 = PairwiseTemplate(t.text.replace("is better", "is more coherent"), name="t2")
    ctx = "The council met to discuss the new bridge budget and road repairs."
    cands = ["Short one.", "The council discussed a bridge.", "Bridge budget talks.", "Roads were repaired."]
    i, j = np.array([0, 1, 2, 3]), np.array([1, 0, 3, 2])
    judge = PromptJudge(smollm2, t, answer_prefix="auto", min_label_mass=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = judge.compare_templates([t, t2], ctx, cands, i, j)
    choice = judge.answer_prefix_choice
    assert choice is not None and choice.prefix                 # prepared, with a prefix
    for tk, g in zip((t, t2), got):
        ref = PromptJudge(smollm2, tk, answer_prefix=choice.prefix, min_label_mass=0.0)
        want = ref.compare(ctx, cands, i, j)
        np.testing.assert_allclose(g.p, want.p, atol=1e-5)
        np.testing.assert_allclose(g.logits, want.logits, atol=1e-4)
        bare = PromptJudge(smollm2, tk, min_label_mass=0.0).compare(ctx, cands, i, j)
        assert np.abs(bare.p - want.p).max() > 1e-2              # the prefix matters: the check is not vacuous
    tok = smollm2.tokenizer                                       # row 0 of t against a full forward pass
    text = PromptJudge(smollm2, t, answer_prefix=choice.prefix).prompt_text(ctx, cands[0], cands[1])
    assert text.endswith(choice.prefix)
    lp = _log_softmax(np.asarray(smollm2.model(np.array([tok(text, add_special_tokens=False)["input_ids"]])))[0, -1])
    label = [tok(" " + w, add_special_tokens=False)["input_ids"] for w in "AB"]
    assert all(len(x) == 1 for x in label)
    np.testing.assert_allclose(got[0].logits[0], [lp[label[0][0]], lp[label[1][0]]], atol=3e-4)
