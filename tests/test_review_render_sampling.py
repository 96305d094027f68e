"""Review fixes: PairwiseTemplate.render substitutes in one pass; SamplingJudge refuses seeds that would wrap.

* ``render`` replaced ``{context}``, then ``{a}``, then ``{b}`` one after another, so a context or a candidate
  holding ``{a}`` or ``{b}`` had them replaced by the other texts (CallableJudge and the server judge send
  these prompts). References: the message built by hand, and PromptJudge's prompt text (its own sentinel
  rendering) on a tiny byte-level Llama.
* ``SamplingJudge(seed=2**32)`` sampled seed 0's answers under another store key (``PRNGKey`` keeps 32 bits),
  and ``2**63`` raised OverflowError: seeds outside ``[0, 2**32)`` are a ValueError naming ``seed``.
"""

import jax
import numpy as np
import pytest

from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import PairwiseTemplate
from jaxrank.judges.sampling import CallableJudge, SamplingJudge
from jaxrank.judges.textgen import row_keys, text_hash32
from tiny_lm import tiny_lm

T = PairwiseTemplate("Article: {context}\n\nSummary A: {a}\n\nSummary B: {b}\n\nWhich is better? A or B.",
                     name="t")
TRICKY = [("See {a} and {b}; cite {context}.", "x {b} y", "z {a} {context} w"),
          ("plain", "{b}", "{a}"),
          ("{context}", "{context}", "{context}"),
          ("{a}{b}", "a", "b")]


@pytest.mark.parametrize("ctx,a,b", TRICKY)
def test_render_keeps_placeholders_inside_the_texts(ctx, a, b):
    want = "Article: " + ctx + "\n\nSummary A: " + a + "\n\nSummary B: " + b + "\n\nWhich is better? A or B."
    assert T.render(ctx, a, b) == want
    seen = []
    judge = CallableJudge(lambda prompts: seen.extend(prompts) or [0.5] * len(prompts), T, name="c")
    judge.compare(ctx, [a, b], [0], [1])
    assert seen == [want]


@pytest.mark.parametrize("ctx,a,b", TRICKY)
def test_render_matches_the_prompt_judge_text(ctx, a, b):
    lm = tiny_lm(seed=0)                                  # no chat template: the message plus a blank line
    assert PromptJudge(lm, T).prompt_text(ctx, a, b) == T.render(ctx, a, b) + "\n\n"


def test_render_repeats_and_leaves_other_braces():
    t = PairwiseTemplate("{context} / {context} / {a} {aspect} / {b} / {a}", name="r")
    assert t.render("C{b}", "A", "B") == "C{b} / C{b} / A {aspect} / B / A"


@pytest.mark.parametrize("seed", [2 ** 32, 2 ** 63, -1, 1.0, True, "3"])
def test_sampling_judge_refuses_seeds_that_wrap(seed):
    lm = tiny_lm(seed=0)
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*32\)"):
        SamplingJudge(lm, T, num_samples=2, max_new_tokens=2, seed=seed)
    with pytest.raises(ValueError, match="seed"):
        row_keys(seed, [("c", "a", "b", 0)])


def test_largest_seed_is_its_own():
    top = 2 ** 32 - 1
    judge = SamplingJudge(tiny_lm(seed=0), T, num_samples=2, max_new_tokens=2, seed=np.uint32(top))
    assert judge.seed == top and judge.fingerprint.endswith(f"-s{top}-p1")
    rows = [("c", "a", "b", 0), ("c", "b", "a", 1)]
    # independent: the documented key, fold_in(PRNGKey(seed), hash) from JAX's own 32-bit key of the seed's bits
    base = jax.random.PRNGKey(np.uint32(top))
    want = np.stack([np.asarray(jax.random.fold_in(base, text_hash32(r))) for r in rows])
    np.testing.assert_array_equal(np.asarray(row_keys(top, rows)), want)
    assert not np.array_equal(np.asarray(row_keys(top, rows)), np.asarray(row_keys(0, rows)))
