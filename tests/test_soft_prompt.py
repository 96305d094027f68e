"""Gradient-tuned soft prompts (jaxrank/judges/soft_prompt.py) on a tiny random Llama.

Independent checks: zero vectors and the embeddings of real tokens reproduce the
plain judge (whose template carries those tokens as text); the gradient of the
fairness loss (functional path, rematerialised) matches central finite
differences of the loss computed through ``PromptJudge.compare``; the loss
against a NumPy formulation; the vectors against the safetensors file read by
the safetensors library itself; training lowers the loss of a biased judge.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from safetensors.numpy import load_file

from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import PairwiseTemplate, pairwise_template
from jaxrank.judges.soft_prompt import (
    SoftPrompt, comparison_row, fairness_loss, question_tokens, train_soft_prompt,
)
from jaxrank.models import _llama_core
from jaxrank.models.llama import extend_with_vectors
from tiny_lm import sharpen, tiny_lm
from _fixtures_experiments import load_script

CTX = "The city council approved a new park on Monday. It will open next spring near the river."
CANDS = ["A park was approved by the council.", "The council met on Monday to talk.",
         "A new riverside park opens next spring.", "Rain is expected."]
CTX2 = "A storm closed the coastal road. Crews expect to reopen it by Friday after clearing debris."
CANDS2 = ["The coastal road is closed by a storm.", "Crews clear debris.", "Road reopens Friday.",
          "A storm hit; the coastal road should reopen on Friday."]
TEMPLATE = pairwise_template("summeval", "coherence")
BIAS = 1.0                                                   # logit(A) - logit(B) added at the mean hidden state
I_BOTH = np.array([0, 0, 1, 1, 2, 3, 1, 2, 3, 2, 3, 0])     # 6 pairs, then their reverses
J_BOTH = np.array([1, 2, 3, 2, 3, 0, 0, 0, 1, 1, 2, 3])



@pytest.fixture(scope="module")
def lm():
    return sharpen(tiny_lm(seed=1, chat=True), 3.0)


@pytest.fixture(scope="module")
def biased(lm):
    """The same model with the label-A output row pushed along the mean final hidden state: p(A) ~ 0.9."""
    judge = PromptJudge(lm, TEMPLATE)
    model = type(lm.model)(lm.config, params={n: np.asarray(w) for n, w in lm.model.weights().items()})
    q = dataclasses.replace(lm, model=model)
    rows = []
    for ctx, cands in ((CTX, CANDS), (CTX2, CANDS2)):
        for a, b in zip(I_BOTH, J_BOTH):
            pre, pa, pb = judge.token_ids(ctx, cands[a], cands[b])
            rows.append(pre + pa + pb)
    h = np.stack([np.asarray(model.hidden(np.array([r])))[0, -1] for r in rows])
    u = h.mean(0)
    head = np.asarray(model.weights()["lm_head"]).copy()
    la, lb = judge._label_ids
    head[la] = head[lb] + BIAS * u / (u @ u)
    model.lm_head.set_value(jnp.asarray(head))
    return q


def _loss_via_judge(lm, soft, ctx=CTX, cands=CANDS):
    j = PromptJudge(lm, TEMPLATE, batch_size=4, soft_prompt=soft)
    return float(fairness_loss(j.compare(ctx, cands, I_BOTH, J_BOTH).logits))


def _numpy_loss(logits, lam=1.0):
    logits = np.asarray(logits, np.float64)
    p = 1.0 / (1.0 + np.exp(logits[:, 1] - logits[:, 0]))
    return (p.mean() - 0.5) ** 2 + lam * np.mean(np.log(p) - np.log1p(-p)) ** 2


# ------------------------------------------------------------ equivalences
@pytest.mark.parametrize("position", ["before_question", "prepend"])
def test_zero_vectors_reproduce_plain_judge(lm, position):
    plain = PromptJudge(lm, TEMPLATE, batch_size=4).compare(CTX, CANDS, I_BOTH, J_BOTH)
    soft = SoftPrompt(jnp.zeros((0, lm.config.hidden_size)), position)
    got = PromptJudge(lm, TEMPLATE, batch_size=4, soft_prompt=soft).compare(CTX, CANDS, I_BOTH, J_BOTH)
    # the plain judge scores the labels' shared space token too (a constant per row); the soft path feeds it
    np.testing.assert_allclose(np.diff(got.logits), np.diff(plain.logits), atol=2e-5)
    np.testing.assert_allclose(got.p, plain.p, atol=1e-5)
    assert np.ptp(plain.p) > 5e-3                    # the comparisons differ: the check is not vacuous


@pytest.mark.parametrize("position,where", [("before_question", "{b}"), ("prepend", "{a}")])
def test_real_token_embeddings_equal_the_text_in_the_template(lm, position, where):
    text = " Be fair to both."
    # The byte tokenizer is exact: the vectors sit after candidate B (before "\n\nWhich ...") or
    # just before candidate A, where the plain judge's template now carries the same text.
    shifted = TEMPLATE.text.replace(where, "{b}" + text if where == "{b}" else text + "{a}")
    plain = PromptJudge(lm, PairwiseTemplate(shifted, name="shifted"), batch_size=4)
    soft = PromptJudge(lm, TEMPLATE, batch_size=4, soft_prompt=SoftPrompt.from_text(lm, text, position))
    assert soft.soft_prompt.length == len(text.encode())
    want = plain.compare(CTX, CANDS, I_BOTH, J_BOTH).logits
    np.testing.assert_allclose(np.diff(soft.compare(CTX, CANDS, I_BOTH, J_BOTH).logits), np.diff(want), atol=2e-5)
    base = PromptJudge(lm, TEMPLATE, batch_size=4).compare(CTX, CANDS, I_BOTH, J_BOTH).logits
    assert np.abs(base - want).max() > 1e-3           # the inserted text changes the judgement


def test_model_hidden_with_embedding_rows_equals_ids(lm):
    ids = np.array([[5, 70, 80, 90, 100, 9], [5, 71, 81, 91, 0, 0]], np.int32)
    mask = ids > 0
    slots = np.full(ids.shape, -1, np.int32)
    slots[:, 1:4] = [0, 1, 2]
    vectors = np.asarray(lm.model.weights()["embed"])[[70, 80, 90]]
    other = ids.copy()
    other[1, 1:4] = [70, 80, 90]                      # row 1 now reads what the vectors say
    got = lm.model.hidden(ids, mask, vectors=vectors, vector_index=slots)
    np.testing.assert_allclose(got, lm.model.hidden(other, mask), atol=2e-5)
    with pytest.raises(ValueError, match="vector_index"):
        lm.model.hidden(ids, mask, vectors=vectors, vector_index=slots[:, :3])
    with pytest.raises(ValueError, match="both or neither"):
        lm.model.hidden(ids, mask, vectors=vectors)


# ---------------------------------------------------------------- gradients
def test_gradient_matches_finite_differences(biased):
    lm = biased
    judge = PromptJudge(lm, TEMPLATE)
    soft = SoftPrompt.from_text(lm, " fair", "before_question")
    q = question_tokens(judge)
    pairs = [judge.token_ids(CTX, CANDS[a], CANDS[b]) for a, b in zip(I_BOTH, J_BOTH)]
    rows = [comparison_row(a, b, q, soft.position, soft.length) for _, a, b in pairs]
    T = max(len(r[0]) for r in rows)
    ids = np.zeros((len(rows), T), np.int32)
    mask = np.zeros((len(rows), T), bool)
    slots = np.full((len(rows), T), -1, np.int32)
    for r, (x, s) in enumerate(rows):
        ids[r, :len(x)], mask[r, :len(x)], slots[r, :len(s)] = x, True, s
    cache = lm.model.prefill(np.array([pairs[0][0]]))
    w = lm.model.weights()
    head = jnp.take(w["lm_head"], jnp.asarray(judge._label_ids), axis=0)

    def loss(v):
        h = extend_with_vectors(lm.config, jax.lax.stop_gradient(w), cache, ids, mask, v, slots, remat=True)
        return fairness_loss(h.last_hidden @ head.T)

    v0 = soft.vectors
    g = np.asarray(jax.jit(jax.grad(loss))(v0), np.float64)
    assert np.abs(g).max() > 1e-3
    assert np.isclose(float(loss(v0)), _loss_via_judge(lm, soft), rtol=1e-4)
    rng = np.random.default_rng(0)
    eps = 3e-2
    for _ in range(3):
        d = rng.normal(size=v0.shape).astype(np.float32)
        d /= np.linalg.norm(d)
        up = _loss_via_judge(lm, SoftPrompt(v0 + eps * d, soft.position))
        down = _loss_via_judge(lm, SoftPrompt(v0 - eps * d, soft.position))
        fd = (up - down) / (2 * eps)
        assert abs(fd - float(np.sum(g * d))) <= 2e-2 * np.linalg.norm(g) + 1e-4, (fd, float(np.sum(g * d)))
    # along the gradient itself the directional derivative is |g|
    d = (g / np.linalg.norm(g)).astype(np.float32)
    fd = (_loss_via_judge(lm, SoftPrompt(v0 + eps * d, soft.position))
          - _loss_via_judge(lm, SoftPrompt(v0 - eps * d, soft.position))) / (2 * eps)
    np.testing.assert_allclose(fd, np.linalg.norm(g), rtol=3e-2)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 12), st.floats(0.0, 3.0), st.integers(0, 10_000))
def test_fairness_loss_equals_numpy(n, lam, seed):
    logits = np.random.default_rng(seed).normal(scale=3.0, size=(2 * n, 2)).astype(np.float32)
    np.testing.assert_allclose(float(fairness_loss(logits, calibration_weight=lam)), _numpy_loss(logits, lam),
                               rtol=2e-4, atol=1e-6)


def test_fairness_loss_mask_and_zero_at_fair_judge():
    fair = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]], np.float32)   # p, 1-p, 1/2: mean 1/2, mean diff 0
    assert float(fairness_loss(fair)) < 1e-12
    padded = np.concatenate([fair, [[9.0, -9.0]]])
    np.testing.assert_allclose(float(fairness_loss(padded, jnp.array([1, 1, 1, 0]))), 0.0, atol=1e-12)


# ---------------------------------------------------------------- training
def test_training_reduces_the_fairness_loss_and_compiles_once(biased):
    lm = biased
    judge = PromptJudge(lm, TEMPLATE)
    init = SoftPrompt.from_text(lm, " Judge fairly.", "before_question")
    before = _loss_via_judge(lm, init)
    p_before = PromptJudge(lm, TEMPLATE, soft_prompt=init).compare(CTX, CANDS, I_BOTH, J_BOTH).p
    assert p_before.mean() > 0.7                      # the judge is biased towards A (BIAS = 1: p ~ 0.73)
    res = train_soft_prompt(judge, [(CTX, CANDS), (CTX2, CANDS2[:3])], init, steps=30, pairs_per_step=2,
                            learning_rate=0.1, seed=0)
    assert res.compilations == 1 and len(res.history) == 30
    after = _loss_via_judge(lm, res.soft_prompt)
    # A 2-layer random model reads the vectors only through a little attention: the loss falls by
    # about 30% (1.06 -> 0.75), then plateaus; random vectors of the same size do not lower it.
    assert after < 0.8 * before, (before, after)
    rand = SoftPrompt(jnp.asarray(np.random.default_rng(0).normal(size=init.vectors.shape), jnp.float32)
                      * float(jnp.std(init.vectors)), init.position)
    assert after < _loss_via_judge(lm, rand)
    p_after = PromptJudge(lm, TEMPLATE, soft_prompt=res.soft_prompt).compare(CTX, CANDS, I_BOTH, J_BOTH).p
    assert abs(p_after.mean() - 0.5) < abs(p_before.mean() - 0.5)
    assert res.soft_prompt.position == init.position and res.soft_prompt.vectors.shape == init.vectors.shape
    np.testing.assert_array_equal(np.asarray(lm.model.weights()["lm_head"]),
                                  np.asarray(biased.model.weights()["lm_head"]))   # model untouched


def test_judging_with_new_vectors_does_not_recompile(lm):
    soft = SoftPrompt.from_text(lm, " ab", "prepend")
    judge = PromptJudge(lm, TEMPLATE, batch_size=4, soft_prompt=soft)
    judge.compare(CTX, CANDS, I_BOTH, J_BOTH)
    n = _llama_core._extend_jit._cache_size()
    judge.soft_prompt = SoftPrompt(soft.vectors + 0.1, soft.position)
    judge.compare(CTX, CANDS, I_BOTH, J_BOTH)
    assert _llama_core._extend_jit._cache_size() == n


# ------------------------------------------------------------- safetensors
@settings(max_examples=10, deadline=None)
@given(st.integers(0, 6), st.integers(1, 40), st.sampled_from(["before_question", "prepend"]), st.integers(0, 99))
def test_safetensors_round_trip(tmp_path_factory, k, d, position, seed):
    path = tmp_path_factory.mktemp("sp") / "v.safetensors"
    v = np.random.default_rng(seed).normal(size=(k, d)).astype(np.float32)
    ident = (("model_fingerprint", f"m{seed}"), ("template_key", "t"), ("chat", "True"), ("answer_prefix", ""))
    SoftPrompt(jnp.asarray(v), position, ident).save(path, note="x")
    np.testing.assert_array_equal(load_file(str(path))["vectors"], v)      # the library's own reader
    from safetensors import safe_open
    with safe_open(str(path), "np") as f:
        assert {k: f.metadata()[k] for k, _ in ident} == dict(ident) and f.metadata()["note"] == "x"
    back = SoftPrompt.load(path)
    np.testing.assert_array_equal(np.asarray(back.vectors), v)
    assert back.position == position and back.key == SoftPrompt(jnp.asarray(v), position).key
    assert dict(back.trained_for) == dict(ident) and back.source == str(path)


def test_load_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        SoftPrompt.load(tmp_path / "none.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file at all")
    with pytest.raises(ValueError, match="bad.safetensors"):
        SoftPrompt.load(bad)
    from safetensors.numpy import save_file
    save_file({"vectors": np.zeros((2, 3), np.float32)}, str(tmp_path / "nometa.safetensors"))
    with pytest.raises(ValueError, match="position"):
        SoftPrompt.load(tmp_path / "nometa.safetensors")


# ---------------------------------------------------------- rows and errors
@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(3, 50), max_size=8), st.lists(st.integers(3, 50), max_size=8),
       st.lists(st.integers(3, 50), min_size=1, max_size=6), st.integers(0, 5),
       st.sampled_from(["before_question", "prepend"]))
def test_comparison_row_keeps_tokens_and_places_slots(a, b_head, question, k, position):
    b = b_head + question
    ids, slots = comparison_row(a, b, question, position, k)
    slots = np.array(slots)
    assert len(ids) == len(slots) == len(a) + len(b) + k
    assert [x for x, s in zip(ids, slots) if s < 0] == a + b          # real tokens unchanged, in order
    at = np.flatnonzero(slots >= 0)
    np.testing.assert_array_equal(slots[at], np.arange(k))
    if k:
        assert np.all(np.diff(at) == 1)
        want = 0 if position == "prepend" else len(a) + len(b) - len(question)
        if position == "before_question" and b_head and b_head[-1] == question[-1]:
            return                                     # suffix overlap: the cut may sit earlier
        if position == "before_question" and len(b_head) == 0:
            want = len(a)
        assert at[0] == want


def test_errors(lm):
    with pytest.raises(ValueError, match="position"):
        SoftPrompt(jnp.zeros((1, 32)), "middle")
    with pytest.raises(ValueError, match="hidden size"):
        PromptJudge(lm, TEMPLATE, soft_prompt=SoftPrompt(jnp.zeros((2, 7))))
    soft = SoftPrompt.from_text(lm, " x")
    judged = PromptJudge(lm, TEMPLATE, soft_prompt=soft)
    assert judged.name == "tiny+" + soft.key and soft.key.startswith("soft-before_question-k2-")
    with pytest.raises(ValueError, match="plain judge"):
        train_soft_prompt(judged, [(CTX, CANDS)], soft)
    with pytest.raises(ValueError, match="two candidates"):
        train_soft_prompt(PromptJudge(lm, TEMPLATE), [(CTX, CANDS[:1])], soft)
    with pytest.raises(ValueError, match="window"):
        train_soft_prompt(PromptJudge(lm, TEMPLATE, max_length=64), [(CTX, CANDS)], soft)


def test_cli_soft_prompt_flag_names_a_bad_file(tmp_path):
    from jaxrank.cli import main
    with pytest.raises(SystemExit, match="does not exist"):
        main(["judge", "--judge", "smollm2-135m", "--contexts", "0:1",
              "--soft-prompt", str(tmp_path / "missing.safetensors"), "--store", str(tmp_path / "s.jsonl")])


def test_cli_soft_prompt_of_the_wrong_size(tmp_path, smollm2):
    from jaxrank.cli import main
    bad = tmp_path / "v.safetensors"
    from safetensors.numpy import save_file           # hidden size 7: no model has it (a file without identity)
    save_file({"vectors": np.zeros((2, 7), np.float32)}, str(bad), metadata={"position": "before_question"})
    with pytest.raises(SystemExit, match="soft-prompt.*hidden size"):
        main(["judge", "--judge", "smollm2-135m", "--contexts", "0:1", "--soft-prompt", str(bad),
              "--store", str(tmp_path / "s.jsonl")])


def _study_module():
    """``experiments/soft_prompt.py`` loaded as a module (a script, not a package)."""
    return load_script("experiments/soft_prompt.py", "_exp_soft_prompt")


def test_study_summary_against_the_library_debiasing():
    from jaxrank.comparisons import Comparisons
    from jaxrank.debias import permutation_average
    from jaxrank.metrics import spearman
    from jaxrank.scoring.counting import average_probability
    mod = _study_module()
    rng = np.random.default_rng(3)
    i, j = mod.eval_pairs(6, 9, rng)
    assert len(i) == 18 and set(zip(i[:9], j[:9])) == set(zip(j[9:], i[9:]))
    labels = [rng.normal(size=6).astype(np.float32)]
    p = rng.uniform(0.3, 0.95, size=18).astype(np.float32)
    rec = {"variant": "seed", "context_index": 0, "i": i.tolist(), "j": j.tolist(), "p": p.tolist()}
    raw, perm = mod.summarise([rec], labels, boot=20, seed=0)
    assert raw["P(A)"] == pytest.approx(np.mean(p > 0.5))
    assert raw["calibration"] == pytest.approx(abs(np.mean(np.log(p / (1 - p)))), rel=1e-5)
    c = Comparisons.from_pairs(i, j, p, num_items=6)
    want = float(spearman(average_probability(permutation_average(c)), labels[0]))
    assert perm["spearman avg-prob"] == pytest.approx(want, abs=1e-6)
    assert perm["P(A)"] == pytest.approx(0.5) and raw["fairness"] == pytest.approx(-abs(np.mean(p > 0.5) - 0.5))


def test_study_summary_counts_contexts_with_constant_scores():
    mod = _study_module()
    rng = np.random.default_rng(5)
    i, j = mod.eval_pairs(4, 6, rng)              # every unordered pair of 4 items, both orders
    labels = [np.arange(4, dtype=np.float32)]
    always_a = {"variant": "seed", "context_index": 0, "i": i.tolist(), "j": j.tolist(), "p": [0.9] * len(i)}
    raw, perm = mod.summarise([always_a], labels, boot=10, seed=0)
    assert raw["constant win ratio"] == 1 and raw["spearman win ratio"] == 0.0    # every item wins half: constant
    assert "(1 constant, as 0)" in mod._constant_note(raw, "win ratio")
    assert raw["constant avg-prob"] == 1          # each item averages 0.9 and 0.1: constant too


def test_training_reads_soft_capped_logits_as_the_judge_does():
    """Gemma 2 caps its output logits (``c * tanh(z / c)``): training's label logits must be the judge's.

    With a learning rate of 0 the first step's ``p`` is the judge's ``p`` with the
    same vectors on the same pairs (the pairs drawn here as the trainer draws them).
    A small cap (0.5) moves ``p`` far from the uncapped value, so a missing cap fails.
    """
    import dataclasses as dc

    from flax import nnx

    from jaxrank.models.llama import LlamaModel

    base = sharpen(tiny_lm(seed=1, chat=True), 3.0)
    cfg = dc.replace(base.config, final_softcap=0.5)
    capped = dc.replace(base, model=LlamaModel(cfg, params={n: np.asarray(w) for n, w in base.model.weights().items()}),
                        config=cfg)
    assert isinstance(capped.model, nnx.Module)
    init = SoftPrompt.from_text(capped, " Judge fairly.", "before_question")
    res = train_soft_prompt(PromptJudge(capped, TEMPLATE), [(CTX, CANDS)], init, steps=1, pairs_per_step=3,
                            learning_rate=0.0, seed=3)
    rng = np.random.default_rng(3)
    i, j = [], []
    for _ in range(3):
        x, y = rng.choice(len(CANDS), 2, replace=False)
        i += [x, y]
        j += [y, x]
    judged = PromptJudge(capped, TEMPLATE, soft_prompt=init).compare(CTX, CANDS, i, j)
    np.testing.assert_allclose(res.history[0]["mean_p"], judged.p.mean(), atol=2e-5)
    uncapped = PromptJudge(base, TEMPLATE, soft_prompt=init).compare(CTX, CANDS, i, j)
    assert abs(uncapped.p.mean() - judged.p.mean()) > 1e-3        # the cap matters here


def test_soft_prompt_on_quantised_weights_equals_float(smollm2):
    """A judge with weights kept quantised (SmolLM2's GGUF blocks): the vectors of a text are the float model's
    rows (the GGUF decodes exactly), and judging and one training step run and agree with the float judge."""
    from jaxrank.models import load_model

    q = load_model("smollm2-135m", weights="quantised")
    assert q.model.quantised
    init_f = SoftPrompt.from_text(smollm2, " Judge fairly.", "before_question")
    init_q = SoftPrompt.from_text(q, " Judge fairly.", "before_question")
    np.testing.assert_allclose(np.asarray(init_q.vectors), np.asarray(init_f.vectors), rtol=0, atol=1e-6)
    i, j = [0, 1], [1, 0]
    pf = PromptJudge(smollm2, TEMPLATE, soft_prompt=init_f).compare(CTX, CANDS, i, j).p
    pq = PromptJudge(q, TEMPLATE, soft_prompt=init_q).compare(CTX, CANDS, i, j).p
    np.testing.assert_allclose(pq, pf, atol=1e-4)
    res = train_soft_prompt(PromptJudge(q, TEMPLATE), [(CTX, CANDS)], init_q, steps=1, pairs_per_step=1,
                            learning_rate=0.0, seed=0)
    assert np.isfinite(res.history[0]["loss"])
