"""A sampled judge's store key covers its system message and its parser (jaxrank.judges.sampling).

Judgements made with another system message or read by another parser are
other judgements: a store holding the first run's must not give them to the
second. Checked with the real SmolLM2-135M on a store file (the lines written
are counted) and, for the parser's identity, without a model.
"""

import json
import warnings

import numpy as np
import pytest

import jaxrank as jr
from jaxrank.assessment.run import contexts_of, judge_contexts, template_key
from jaxrank.judges.prompts import pairwise_template
from jaxrank.judges.sampling import CallableJudge, SamplingJudge, label_parser, parser_key

TPL = pairwise_template("summeval", "coherence")


def _contexts():
    rows = [{"context_id": "q1", "context": "It rained all day in Paris on Monday.", "candidate_id": c,
             "candidate": t} for c, t in [("a", "Rain fell in Paris all day."), ("b", "Tokyo was sunny."),
                                         ("c", "Paris had rain.")]]
    return contexts_of(jr.data.from_records(rows))


def _lines(path):
    return [json.loads(x) for x in open(path) if x.strip()]


def test_a_system_message_is_part_of_the_key_and_not_served_from_the_store(smollm2, tmp_path):
    cs = _contexts()
    store = tmp_path / "s.jsonl"
    plain = SamplingJudge(smollm2, TPL, num_samples=2, max_new_tokens=3)
    told = SamplingJudge(smollm2, TPL, num_samples=2, max_new_tokens=3, system="Always answer: Summary B.")
    # nothing set: the template's key and the per-row sampling scheme only (answers sampled under the former
    # one key per batch are other samples: never reused)
    assert plain.template_key.startswith(TPL.key + "-") and plain.template_key != TPL.key
    assert told.template_key != plain.template_key and told.template_key.startswith(TPL.key)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        judge_contexts(plain, cs, store, progress=False)
        first = _lines(store)
        second = judge_contexts(told, cs, store, progress=False)
    lines = _lines(store)
    assert len(first) == 6                          # 3 candidates: 6 ordered pairs
    assert len(lines) == 12                         # the second run judged its own 6 comparisons
    assert {r["template"] for r in lines[6:]} == {told.template_key}
    # what the second run returns is what it wrote, not the first run's records
    p_stored = {(r["a"], r["b"]): r["p"] for r in lines[6:]}
    c = second.comparisons
    ids = second.candidates[0]
    got = {(ids[a], ids[b]): float(p) for a, b, p, w in zip(np.asarray(c.i)[0], np.asarray(c.j)[0],
                                                          np.asarray(c.p)[0], np.asarray(c.weight)[0]) if w > 0}
    assert got == pytest.approx(p_stored)


def test_parser_identity_changes_the_key_and_the_default_keeps_it(smollm2):
    base = SamplingJudge(smollm2, TPL, num_samples=1, max_new_tokens=2)
    same = SamplingJudge(smollm2, TPL, num_samples=1, max_new_tokens=2, parser=label_parser(TPL.labels))
    other_words = SamplingJudge(smollm2, TPL, num_samples=1, max_new_tokens=2, parser=label_parser(("1", "2")))
    always_a = SamplingJudge(smollm2, TPL, num_samples=1, max_new_tokens=2, parser=lambda t: 1.0)
    always_b = SamplingJudge(smollm2, TPL, num_samples=1, max_new_tokens=2, parser=lambda t: 0.0)
    keys = [j.template_key for j in (base, other_words, always_a, always_b)]
    assert same.template_key == base.template_key != TPL.key
    assert len(set(keys)) == 4
    assert template_key(always_a) == always_a.template_key       # what judge_contexts stores under


def test_parser_key_without_a_model():
    assert parser_key(label_parser(("A", "B"))) == parser_key(label_parser(("A", "B")))
    assert parser_key(label_parser(("A", "B"))) != parser_key(label_parser(("B", "A")))
    assert parser_key(lambda t: 1.0) != parser_key(lambda t: 0.0)

    def named(t):
        return None

    named.key = "mine-v1"
    assert parser_key(named) == "mine-v1"


def test_callable_text_judge_key_covers_its_parser():
    fn = lambda prompts: ["A"] * len(prompts)
    plain = CallableJudge(fn, TPL, name="api", kind="text")
    flipped = CallableJudge(fn, TPL, name="api", kind="text", parser=lambda t: 0.0 if "A" in t else 1.0)
    prob = CallableJudge(lambda ps: [0.5] * len(ps), TPL, name="api", parser=lambda t: 0.0)
    assert plain.template_key == TPL.key and prob.template_key == TPL.key
    assert flipped.template_key != plain.template_key
    # the flipped parser reads the same answers the other way: other judgements under another key
    assert plain.compare("c", ["x", "y"], [0], [1]).p[0] == 1.0
    assert flipped.compare("c", ["x", "y"], [0], [1]).p[0] == 0.0
