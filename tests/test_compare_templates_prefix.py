"""compare_templates reads each template as with_template(t).compare does; the store keys of a judge.

On the real SmolLM2-135M. References: a NumPy softmax over the whole vocabulary of one full forward pass on
the tokenizer's ids of the whole prompt text; the judgements stored in the repository
(experiments/results/stores/summeval-coherence-smollm2-135m-*.jsonl) and their keys.
"""

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

from jaxrank.assessment import zepo
from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import pairwise_template

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("JAXRANK_DATA", ROOT.parent / "shared" / "data"))
CTX = "It rained all day in Paris."
CANDS = ["Rain fell in Paris all day.", "Tokyo was sunny.", "Paris had rain."]
T = pairwise_template("summeval", "coherence")                     # no answer prefix in the template


def _np_log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


@pytest.mark.parametrize("own", ["", "Answer:", "("])
def test_compare_templates_equals_with_template_compare_for_every_template(smollm2, own):
    """A judge given answer_prefix="Summary": compare_templates([t]) equals with_template(t).compare for a
    template without a prefix (it takes "Summary") and with its own (kept). Before the fix the first read
    ' A' after the bare header: p 0.9109 vs 0.9369, label mass 3.7e-06 vs 0.068."""
    judge = PromptJudge(smollm2, T, answer_prefix="Summary", min_label_mass=0.0)
    t = dataclasses.replace(T, answer_prefix=own)
    i, j = [0, 1, 2], [1, 0, 0]
    together = judge.compare_templates([t], CTX, CANDS, i, j)[0]
    alone = judge.with_template(t)
    ref = alone.compare(CTX, CANDS, i, j)
    np.testing.assert_allclose(together.p, ref.p, atol=1e-5)
    np.testing.assert_allclose(together.logits, ref.logits, atol=1e-4)
    np.testing.assert_allclose(together.label_mass, ref.label_mass, rtol=1e-4)
    assert alone.template.answer_prefix == (own or "Summary")
    tok = smollm2.tokenizer                                  # the reading against a full NumPy forward pass
    text = alone.prompt_text(CTX, CANDS[0], CANDS[1])
    assert text.endswith("assistant\n" + (own or "Summary"))
    lp = _np_log_softmax(np.asarray(smollm2.model(np.array([tok(text, add_special_tokens=False)["input_ids"]])))
                         [0, -1])
    label = [tok(("" if own == "(" else " ") + w, add_special_tokens=False)["input_ids"] for w in "AB"]
    assert all(len(x) == 1 for x in label)
    np.testing.assert_allclose(together.logits[0], [lp[label[0][0]], lp[label[1][0]]], atol=3e-4)
    if not own:
        assert together.label_mass[0] > 0.5                  # SmolLM2 writes "Summary A"


def test_zepo_stores_a_prefixed_judges_templates_under_their_read_key(smollm2):
    """zepo's stored_key of a template without a prefix is the key of the judge reading it after "Summary":
    the key of PromptJudge(..., answer_prefix="Summary") on that template, not the bare template's."""
    judge = PromptJudge(smollm2, T, answer_prefix="Summary")
    z = pairwise_template("summeval", "coherence", style="zepo")
    assert zepo.stored_key(judge, z) == PromptJudge(smollm2, z, answer_prefix="Summary").template_key
    assert zepo.stored_key(judge, z) != PromptJudge(smollm2, z).template_key
    both = judge.compare_templates([T, dataclasses.replace(T, answer_prefix="Summary")], CTX, CANDS, [0], [1])
    np.testing.assert_allclose(both[0].p, both[1].p, atol=1e-6)


def _stored(name):
    path = ROOT / "experiments" / "results" / "stores" / name
    return [json.loads(x) for x in open(path)]


@pytest.mark.parametrize("prefix,store", [("Summary", "summeval-coherence-smollm2-135m-auto.jsonl"),
                                          ("", "summeval-coherence-smollm2-135m-none.jsonl")])
def test_keys_of_the_stores_in_the_repo_still_resolve(smollm2, prefix, store):
    """The default judge's fingerprint and template key are those of the SmolLM2 stores in the repository,
    and re-judging their first comparison gives the stored p (so nothing read the old way changed)."""
    recs = _stored(store)
    judge = PromptJudge(smollm2, T, answer_prefix=prefix)
    assert judge.fingerprint == recs[0]["fingerprint"] == f"{smollm2.fingerprint}-L{judge.max_length}"
    assert judge.template_key == recs[0]["template"]
    rows = [json.loads(x) for x in open(DATA / "summeval" / "summeval.jsonl")]
    art = [r for r in rows if r["article_id"] == recs[0]["context"]]
    cand = {r["summary_id"]: r["summary"] for r in art}
    from jaxrank.assessment.store import text_sha
    if text_sha(art[0]["article"]) != recs[0]["context_sha"]:
        pytest.skip("the SummEval data here is not the text the store judged")
    r = judge.compare(art[0]["article"], [cand[recs[0]["a"]], cand[recs[0]["b"]]], [0], [1])
    np.testing.assert_allclose(r.p[0], recs[0]["p"], atol=2e-4)


def test_fingerprint_carries_a_non_float32_cache_dtype(smollm2):
    """bfloat16 caches move p (here in the 3rd-4th digit), so their judge has another fingerprint; float32
    caches (the default on a CPU, or given) keep the default one."""
    default = PromptJudge(smollm2, T)
    bf16 = PromptJudge(smollm2, T, cache_dtype="bfloat16")
    f32 = PromptJudge(smollm2, T, cache_dtype="float32")
    assert default.fingerprint == f32.fingerprint == f"{smollm2.fingerprint}-L{default.max_length}"
    assert bf16.fingerprint == default.fingerprint + "-kvbfloat16"
    i, j = [0, 1, 2], [1, 2, 0]
    p0, p1 = default.compare(CTX, CANDS, i, j).p, bf16.compare(CTX, CANDS, i, j).p
    assert np.abs(p0 - p1).max() > 1e-4
