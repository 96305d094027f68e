"""A prompt still longer than the window with its context cut to 0 tokens is an error, never returned.

Before the fix :func:`~jaxrank.judges._truncation.fit_each` stopped cutting a
prompt once its context was gone, even when the prompt rebuilt without context
was still too long (a token merged across the cut: SmolLM2 with the context
``" "`` and a window one token short, ``compare`` returned ``p`` 0.7195 of a
prompt over the window, silently). The candidates and question are never cut,
so such a prompt cannot fit: it now raises a ``ValueError`` naming the row and
by how many tokens it is over, the excess computed here from the prompt built
with an empty context.
"""

import warnings

import numpy as np
import pytest

from jaxrank.judges._truncation import fit_each
from jaxrank.judges.prompts import PairwiseTemplate


def test_fit_each_refuses_a_row_over_the_window_with_no_context_left():
    # a 15-token prompt, window 10, a 5-token context: cut all 5, but the rebuilt prompt has 11 tokens
    with pytest.raises(ValueError, match=r"window of 10 tokens by 1.*row 0 by 1"):
        fit_each([list(range(15))], need=len, max_length=10, context_len=lambda: 5,
                 rebuild=lambda k, idx: [list(range(11 + k)) for _ in idx], warn=False, kept="candidates")


def test_fit_each_names_only_the_rows_that_cannot_fit():
    rows = [list(range(8)), list(range(15)), list(range(15))]     # row 0 fits; rows 1 and 2 need a cut
    extra = {1: 0, 2: 3}                                          # row 2 stays 3 over with no context

    def rebuild(k, idx):
        return [list(range(10 + k + (extra[r] if k == 0 else 0))) for r in idx]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=r"never cut\) exceed the model's window of 10 tokens by 3") as e:
            fit_each(rows, need=len, max_length=10, context_len=lambda: 5, rebuild=rebuild, warn=True,
                     kept="candidates and question", name_row=lambda r: f"pair {r}")
    assert "pair 2 by 3" in str(e.value) and "pair 1" not in str(e.value) and "pair 0" not in str(e.value)


def test_fit_each_still_returns_rows_that_fit_after_their_cut():
    out, cuts, truncated = fit_each([list(range(15))], need=len, max_length=10, context_len=lambda: 5,
                                    rebuild=lambda k, idx: [list(range(10 + k)) for _ in idx], warn=False,
                                    kept="c")
    assert (len(out[0]), cuts, truncated) == (10, [0], True)


def test_smollm2_compare_refuses_a_prompt_over_the_window(smollm2):
    from jaxrank.judges import PromptJudge

    tpl = PairwiseTemplate("Article: {context}\n\nSummary A: {a}\n\nSummary B: {b}\n\n"
                           "Which summary is better? Answer A or B.", name="t")
    cands = ["Short one.", "Bridge budget talks."]
    ctx = " "
    probe = PromptJudge(smollm2, tpl, min_label_mass=0.0)
    tok = smollm2.tokenizer
    n_ctx = len(tok(ctx, add_special_tokens=False)["input_ids"])
    full = len(probe.fitted_rows(ctx, cands, [0], [1])[0][0])
    empty = len(probe.fitted_rows("", cands, [0], [1])[0][0])
    if full - empty >= n_ctx:
        pytest.skip("this tokenizer merges no token across the context's end")
    width = probe.reading.width
    window = full + width - n_ctx                  # cutting the whole context would fit, were tokens additive
    over = empty + width - window                  # what the prompt without context still needs beyond it
    assert over > 0
    judge = PromptJudge(smollm2, tpl, min_label_mass=0.0, max_length=window)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match=rf"candidates and question alone \(which are never cut\) exceed the "
                                             rf"model's window of {window} tokens by {over}.*row 0 \(candidates 0 and 1\) by {over}"):
            judge.compare(ctx, cands, np.array([0]), np.array([1]))
