"""How a judge reads the model's answer: whole-text tokens, label continuations, label mass, answer prefix.

References are independent: NumPy softmax over the full vocabulary of a full forward pass on the
tokenizer's ids of the whole text; hand-built models whose answers are known by construction.
"""

import dataclasses
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings, strategies as st

from jaxrank.assessment.run import ContextSet, judge_contexts
from jaxrank.assessment.store import JudgementStore
from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import TEMPLATES, pairwise_template
from jaxrank.judges.prompts import PairwiseTemplate
from jaxrank.judges.reading import (LabelMassError, LabelMassWarning, answer_prefix_of, cut_text,
                                    label_continuations, naming_word, shared_split)
from jaxrank.judges.sampling import SamplingJudge
from jaxrank.models.llama import LlamaConfig, LlamaModel

DATA = Path(os.environ.get("JAXRANK_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def _summeval(n_articles=1, n_summaries=3, words=120):
    rows = [json.loads(x) for x in open(DATA / "summeval" / "summeval.jsonl")]
    out = []
    for a in range(n_articles):
        rs = [r for r in rows if r["article_id"] == f"A{a}"][:n_summaries]
        out.append((" ".join(rs[0]["article"].split()[:words]), [r["summary"] for r in rs]))
    return out


def _np_log_softmax(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


# ------------------------------------------------------------------------ pieces
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(0, 4), min_size=3, max_size=12)),
                min_size=1, max_size=8))
def test_shared_split_rebuilds_every_row_with_common_levels(data):
    groups = [g for g, _ in data]
    rows = [[7, 7] + r for _, r in data]
    parts = shared_split(rows, groups)
    prefixes = {tuple(p) for p, _, _ in parts}
    assert len(prefixes) == 1                                            # one context cache
    for (p, a, b), row, g in zip(parts, rows, groups):
        assert p + a + b == row and a and b                              # token for token, parts non-empty
        same = [q + x for (q, x, _), h in zip(parts, groups) if h == g]
        common = min(len(os.path.commonprefix([row, s])) for s in same)
        # one cache per group, unless its rows part right after the prefix (then a token each)
        assert all(s == same[0] for s in same) or common <= len(p)
    with pytest.raises(ValueError, match="groups"):
        shared_split(rows, groups + [0])


def test_answer_prefix_of_reads_the_words_before_the_label():
    labels = ("A", "B")
    assert answer_prefix_of(["Summary A is more coherent.", "Summary B", "To judge"], labels) == "Summary"
    assert answer_prefix_of(["A", "B.", "Summary A"], labels) == ""
    assert answer_prefix_of(["To determine which summary is better, we"], labels) is None
    assert answer_prefix_of(["**Summary A**", "**Summary B** is"], labels) == "**Summary"
    # a label inside a word is no label; a prefix of more than max_words words is not taken
    assert answer_prefix_of(["Also Bob", "Both are good and I think that the better one is A"], labels) is None


def test_naming_word_is_the_word_the_prompt_puts_before_both_labels():
    assert naming_word(pairwise_template("summeval", "coherence").text, ("A", "B")) == "Summary"
    assert naming_word(pairwise_template("topicalchat", "coherence").text, ("A", "B")) == "Response"
    assert naming_word(pairwise_template("hanna", "coherence").text, ("A", "B")) == "Story"
    assert naming_word("First: {a}\nSecond: {b}\nA or B?", ("A", "B")) is None          # no word before a label
    assert naming_word("Text A: {a}\nEssay B: {b}\nA or B?", ("A", "B")) is None        # none before both
    assert naming_word("Option 1: {a}\n\nOption 2: {b}\n\nOption 1 or Option 2?", ("1", "2")) == "Option"


def test_cut_text_keeps_the_first_tokens(smollm2):
    tok = smollm2.tokenizer
    text = "The council approved a new park on Monday near the river."
    ids = tok(text, add_special_tokens=False)["input_ids"]
    for k in (0, 1, 3, len(ids), len(ids) + 5):
        cut = cut_text(tok, text, k)
        assert text.startswith(cut)
        assert tok(cut, add_special_tokens=False)["input_ids"] == ids[:k]


def test_label_continuations_are_the_whole_text_suffix(smollm2):
    tok = smollm2.tokenizer
    for prompt, labels in (("...<|im_start|>assistant\n", ("A", "B")), ("Answer:", ("A", "B")),
                           ("<|im_start|>assistant\nSummary", ("A", "B")),
                           ("<|im_start|>assistant\n", ("Summary A", "Summary B"))):
        lc = label_continuations(tok, prompt, labels)
        lead = "" if prompt[-1].isspace() else " "
        for w, ids in zip(labels, lc.ids):
            whole = tok(prompt + lead + w, add_special_tokens=False)["input_ids"]
            assert list(ids) == whole[len(tok(prompt, add_special_tokens=False)["input_ids"]):]
    with pytest.raises(ValueError, match="nothing to compare"):
        label_continuations(tok, "Answer:", ("A", "A"))


# ---------------------------------------------------------------- tokenisation
@pytest.mark.parametrize("chat", [True, False])
def test_ids_equal_whole_text_tokenisation_on_every_template(smollm2, chat):
    """Every built-in template, chat-wrapped or raw: the ids the model reads are the tokenizer's ids of the
    whole rendered prompt (never pieces tokenised apart)."""
    (ctx, cands), = _summeval(1, 3, words=60)
    tok = smollm2.tokenizer
    for key, t in list(TEMPLATES.items())[::3]:
        judge = PromptJudge(smollm2, t, chat=chat)
        rows, _ = judge.prompt_rows(ctx, cands, [0, 1, 2], [1, 2, 0])
        for r, (a, b) in zip(rows, [(0, 1), (1, 2), (2, 0)]):
            assert r == list(tok(judge.prompt_text(ctx, cands[a], cands[b]), add_special_tokens=not chat)
                             ["input_ids"]), key


# ----------------------------------------------------------- label mass (real)
def test_label_mass_and_top_tokens_match_a_numpy_softmax_on_smollm2(smollm2):
    """The real SmolLM2 judge on two SummEval prompts: P(A), P(B), the label mass and the top-5 next tokens
    equal a NumPy softmax over the whole vocabulary of one full forward pass on the whole text's ids."""
    (ctx, cands), = _summeval(1, 3)
    judge = PromptJudge(smollm2, pairwise_template("summeval", "coherence"), min_label_mass=0.0)
    res = judge.compare(ctx, cands, [0, 2], [1, 0])
    tok = smollm2.tokenizer
    a_id, b_id = (tok(w, add_special_tokens=False)["input_ids"][0] for w in ("A", "B"))
    for r, (a, b) in enumerate([(0, 1), (2, 0)]):
        ids = tok(judge.prompt_text(ctx, cands[a], cands[b]), add_special_tokens=False)["input_ids"]
        lp = _np_log_softmax(np.asarray(smollm2.model(np.array([ids])))[0, -1])
        np.testing.assert_allclose(res.logits[r], [lp[a_id], lp[b_id]], atol=2e-4)
        np.testing.assert_allclose(res.label_mass[r], np.exp(lp[a_id]) + np.exp(lp[b_id]), rtol=2e-3)
        np.testing.assert_allclose(res.p[r], np.exp(lp[a_id]) / (np.exp(lp[a_id]) + np.exp(lp[b_id])), atol=1e-5)
        top = np.argsort(-lp)[:5]
        assert list(res.top_ids[r][:3]) == list(top[:3])
        np.testing.assert_allclose(res.top_probs[r], np.exp(lp[res.top_ids[r]]), rtol=2e-3)


# ---------------------------------------------------- a model that says "Summary A"
@pytest.fixture(scope="module")
def summary_a(smollm2):
    """A two-layer Llama on SmolLM2's tokenizer built to answer "Summary A is": zero layers, so the last
    hidden state is the current token's embedding, and the output rows map any token to "Summary",
    "Summary" to " A" and " A" to " is" (a bigram table written into the weights)."""
    tok = smollm2.tokenizer
    summ, a, is_ = (tok(w, add_special_tokens=False)["input_ids"] for w in ("Summary", " A", " is"))
    assert len(summ) == len(a) == len(is_) == 1
    summ, a, is_ = summ[0], a[0], is_[0]
    v, d = smollm2.config.vocab_size, 16
    cfg = LlamaConfig.from_hf(dict(vocab_size=v, hidden_size=d, intermediate_size=16, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                                   tie_word_embeddings=False, model_type="llama"))
    params = {n: np.asarray(w) * 0.0 for n, w in LlamaModel(cfg, rngs=nnx.Rngs(0)).weights().items()}
    params = {n: (np.ones_like(w) if n.endswith("norm") else w) for n, w in params.items()}
    emb = np.zeros((v, d), np.float32)
    emb[:, 0] = 1.0                                   # every token: "anything"
    emb[summ] = np.eye(d)[1]
    emb[a] = np.eye(d)[2]
    head = np.zeros((v, d), np.float32)
    head[summ, 0] = head[a, 1] = head[is_, 2] = 3.0     # logit 3 / rms(one-hot) = 12 (see _logit)
    params["embed"], params["lm_head"] = emb, head
    model = LlamaModel(cfg, params=params)
    return dataclasses.replace(smollm2, model=model, config=cfg, name="says-summary-a")


def _logit(lm):
    """The built model's one non-zero logit: 3 times a one-hot state after RMS normalisation (16 dims)."""
    return 3.0 / np.sqrt(1 / 16 + lm.config.rms_norm_eps)


def test_auto_answer_prefix_finds_what_the_model_writes(summary_a):
    (ctx, cands), = _summeval(1, 3, words=40)
    plain = PromptJudge(summary_a, pairwise_template("summeval", "coherence"))
    with pytest.warns(LabelMassWarning, match=r"'Summary' 0\.7"):            # names the model's answer
        res = plain.compare(ctx, cands, [0, 1], [1, 0])
    assert res.label_mass.max() < 1e-3
    strict = PromptJudge(summary_a, pairwise_template("summeval", "coherence"), strict=True)
    with pytest.raises(LabelMassError, match="Summary"):
        strict.compare(ctx, cands, [0], [1])
    auto = PromptJudge(summary_a, pairwise_template("summeval", "coherence"), answer_prefix="auto")
    with pytest.raises(RuntimeError, match="prepare"):
        auto.template_key
    with pytest.warns(UserWarning, match="chose answer prefix 'Summary'"):
        choice = auto.prepare(ctx, cands)
    assert choice.found and choice.prefix == "Summary" and choice.answers[0].startswith("Summary A is")
    assert auto.prompt_text(ctx, "x", "y").endswith("<|im_start|>assistant\nSummary")
    assert auto.reading.texts == (" A", " B") and auto.template_key != plain.template_key
    with warnings.catch_warnings():
        warnings.simplefilter("error", LabelMassWarning)
        res = auto.compare(ctx, cands, [0, 1], [1, 0])
    v, e = summary_a.config.vocab_size, np.exp(_logit(summary_a))
    np.testing.assert_allclose(res.label_mass, (e + 1) / (e + v - 1), rtol=1e-4)   # " A" and " B" after "Summary"
    np.testing.assert_allclose(res.p, e / (e + 1), rtol=1e-5)                     # it answers " A", always


def test_auto_prefix_falls_back_to_the_prompts_naming_word_when_no_answer_names_a_label(summary_a):
    """The built model answers "Summary A is", which names no label of a prompt labelled 1 / 2: the judge
    then begins the answer as the prompt names the candidates ("Option"), and says so."""
    (ctx, cands), = _summeval(1, 3, words=40)
    t = PairwiseTemplate("Article: {context}\n\nOption 1: {a}\n\nOption 2: {b}\n\nWhich is more coherent, "
                         "Option 1 or Option 2?", labels=("1", "2"))
    auto = PromptJudge(summary_a, t, answer_prefix="auto")
    with pytest.warns(UserWarning, match="chose answer prefix 'Option' \\(no answer named a label"):
        choice = auto.prepare(ctx, cands)
    assert not choice.found and choice.from_prompt and choice.prefix == "Option"
    assert choice.answers[0].startswith("Summary A is")
    assert auto.prompt_text(ctx, "x", "y").endswith("<|im_start|>assistant\nOption")
    assert auto.reading.texts == (" 1", " 2")


def test_labels_scored_as_whole_continuations_against_the_built_model(summary_a):
    """Labels "Summary A" / "Summary B" with no prefix: P("Summary") * P(" A" | "Summary") by construction,
    the label mass is that of the whole continuations."""
    (ctx, cands), = _summeval(1, 3, words=40)
    judge = PromptJudge(summary_a, pairwise_template("summeval", "coherence", labels=("Summary A", "Summary B")))
    res = judge.compare(ctx, cands, [0], [1])
    v, e = summary_a.config.vocab_size, np.exp(_logit(summary_a))
    # the model's distributions by hand: after "\n" the logit L on "Summary" and 0 elsewhere; after
    # "Summary" L on " A"
    p_top = e / (e + v - 1)
    np.testing.assert_allclose(res.label_mass[0], p_top * (p_top + 1 / (e + v - 1)), rtol=1e-4)
    np.testing.assert_allclose(res.logits[0], [2 * np.log(p_top), np.log(p_top) - np.log(e + v - 1)], atol=1e-4)


def test_store_records_the_label_mass_and_resumes(summary_a, tmp_path):
    (ctx, cands), = _summeval(1, 3, words=40)
    cs = ContextSet(["A0"], [ctx], [["S0", "S1", "S2"]], [cands], None)
    judge = PromptJudge(summary_a, pairwise_template("summeval", "coherence"), answer_prefix="auto")
    store = JudgementStore(tmp_path / "s.jsonl")
    with pytest.warns(UserWarning, match="chose answer prefix"):
        judge_contexts(judge, cs, store, budget=2, progress=False)
    recs = store.records()
    assert len(recs) == 2 and all(r["label_mass"] > 0.7 for r in recs)
    assert {r["template"] for r in recs} == {judge.template_key}
    calls = []
    original = judge.compare
    judge.compare = lambda *a, **k: calls.append(len(a[2])) or original(*a, **k)
    judge_contexts(judge, cs, store, progress=False)                       # all 6: only the 4 missing judged
    assert sum(calls) == 4 and len(store.records()) == 6


def test_sampling_judge_reports_its_parseable_share(summary_a):
    (ctx, cands), = _summeval(1, 3, words=40)
    judge = SamplingJudge(summary_a, pairwise_template("summeval", "coherence"), num_samples=2, temperature=0.0,
                          max_new_tokens=4)
    res = judge.compare(ctx, cands, [0], [1])
    np.testing.assert_allclose(res.label_mass, [1.0])         # "Summary A is" names label A
    assert res.p[0] == 1.0
    never = SamplingJudge(summary_a, pairwise_template("summeval", "coherence"), num_samples=2, temperature=0.0,
                          max_new_tokens=1, strict=True)
    with pytest.raises(LabelMassError, match="Summary"):       # one token: "Summary", no label
        never.compare(ctx, cands, [0], [1])


def test_geval_reports_the_score_tokens_mass(summary_a):
    """G-Eval on the built model: after the form's last token the model writes "Summary" (logit L, 0
    elsewhere), so each score token has probability 1 / (e^L + V - 1) and their mass is S times that."""
    from jaxrank.judges.pointwise import GEvalJudge
    from jaxrank.judges.prompts import pointwise_template

    (ctx, cands), = _summeval(1, 2, words=30)
    judge = GEvalJudge(summary_a, pointwise_template("coherence", chain_of_thought=False))
    with pytest.warns(LabelMassWarning, match="'Summary'"):
        res = judge.score(ctx, cands)
    v, e = summary_a.config.vocab_size, np.exp(_logit(summary_a))
    np.testing.assert_allclose(res.label_mass, 5 / (e + v - 1), rtol=1e-3)
    np.testing.assert_allclose(res.probs, 0.2, atol=1e-6)                   # renormalised: uniform
    strict = GEvalJudge(summary_a, pointwise_template("coherence", chain_of_thought=False), strict=True)
    with pytest.raises(LabelMassError):
        strict.score(ctx, cands)


def test_report_label_mass_lines_are_the_records_quantiles():
    from jaxrank.assessment.report import label_mass_lines

    rng = np.random.default_rng(0)
    mass = rng.uniform(0, 1, 101)
    recs = [{"label_mass": float(m)} for m in mass] + [{"p": 0.5}]
    text = label_mass_lines(recs, threshold=0.3)[0]
    assert f"median {np.median(mass):.3f}" in text and f"min {mass.min():.3f}" in text
    assert f"{np.mean(mass < 0.3):.1%} below 0.3" in text and "1 judgements without" in text
    assert "reads the model's answer" in text
    assert "hold little" in label_mass_lines([{"label_mass": 0.01}])[0]
    assert label_mass_lines([{"p": 0.5}]) == []


def test_cli_diagnose_prints_the_reading_without_and_with_the_prefix(smollm2, capsys, tmp_path, monkeypatch):
    from jaxrank.cli import main

    monkeypatch.setenv("JAXRANK_DATA", str(DATA))
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        main(["judge", "--judge", "smollm2-135m", "--aspect", "coherence", "--contexts", "0:1", "--candidates", "3",
              "--diagnose", "2", "--no-compilation-cache"])
    out = capsys.readouterr().out
    without, with_prefix = out.split("with --answer-prefix auto")
    assert "answer prefix: ''" in without and "label mass: median" in without and "Verdict:" in without
    assert "it is not reading what the model says" in without              # SmolLM2 writes "Summary" first
    assert "answer prefix: 'Summary'" in with_prefix and "labels read: ' A' / ' B'" in with_prefix
    assert "order consistency:" in with_prefix and "pairwise accuracy" in with_prefix
    with pytest.raises(SystemExit, match="--diagnose must be >= 1"):
        main(["judge", "--judge", "smollm2-135m", "--diagnose", "0", "--no-compilation-cache"])


def test_a_prepared_auto_judge_reads_other_templates_alike(summary_a):
    """ZEPO's candidate templates carry no answer prefix: they take the one the judge chose."""
    (ctx, cands), = _summeval(1, 3, words=40)
    auto = PromptJudge(summary_a, pairwise_template("summeval", "coherence"), answer_prefix="auto")
    other = pairwise_template("summeval", "coherence", style="zepo")
    assert auto.with_template(other)._auto_prefix                        # unprepared: still "auto"
    with pytest.warns(UserWarning, match="chose answer prefix"):
        auto.prepare(ctx, cands)
    z = auto.with_template(other)
    assert z.template.answer_prefix == "Summary" and z.reading.texts == (" A", " B")
    assert auto.with_template(dataclasses.replace(other, answer_prefix="Answer:")).template.answer_prefix == "Answer:"
    assert auto.find_answer_prefix(ctx, cands).prefix == "Summary"    # found again from the bare prompt


@pytest.mark.parametrize("chat", [True, False])
def test_geval_and_prompt_scoring_ids_equal_whole_text_tokenisation(smollm2, chat):
    """The pointwise judges read the tokenizer's ids of each whole prompt: the context's cached prefix plus each
    candidate's suffix equals the whole text's ids, token for token (G-Eval's shared score lead appended), and
    the prefix is the same for every candidate of the context."""
    from jaxrank.judges.pointwise import GEvalJudge
    from jaxrank.judges.prompt_scoring import PromptScoringJudge
    from jaxrank.judges.prompts import pointwise_template

    (ctx, cands), = _summeval(1, 3, words=60)
    tok = smollm2.tokenizer
    judges = [GEvalJudge(smollm2, pointwise_template("coherence"), chat=chat, steps="1. Read. 2. Score."),
              PromptScoringJudge(smollm2, aspect="fluency", chat=chat)]
    for judge in judges:
        pairs, truncated = judge._pairs(ctx, cands)
        assert not truncated and len({tuple(p) for p, _ in pairs}) == 1
        for (p, s), c in zip(pairs, cands):
            text = judge._texts(ctx, [c])[0]
            whole = list(tok(text, add_special_tokens=not chat)["input_ids"])
            assert p + s == whole + list(judge._suffix_extra), type(judge).__name__
            assert judge.token_ids(ctx, c)[0] + judge.token_ids(ctx, c)[1] == p + s
