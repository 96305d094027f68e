"""Context truncation is per comparison: a pair's ``p`` never depends on the other pairs of its call.

Before the fix ``PromptJudge.prompt_rows`` cut the context so the *longest*
prompt of the call fit the window, so one store key got another ``p`` with
other chunking, resume, budget or active rounds (tiny Llama, window 200:
``p(0, 1)`` alone 0.35306, with ``(0, 2)`` 0.39894, with all six pairs
0.40617). Each prompt now keeps as much of the context as fits with its own
candidates. Checks, with truncation active:

* every row equals the row built independently here: the byte tokenizer is
  exact (one token a byte), so a row's own cut is the largest ``k`` whose prompt
  ``prompt_text(context[:k], a, b)`` plus the label tokens fits the window,
  found by a plain scan;
* ``p`` of each pair judged alone, with all the others, in reversed order and
  in a subset agree to float32 rounding (asserted to ``1e-6``; on a CPU they are
  bit-identical), and equal the NumPy ``p`` of one full forward pass of that
  pair's own prompt (``1e-5``, as ``test_judging`` bounds the cached reading);
* the same for ``compare_templates`` (each template's rows cut as its own
  ``compare`` cuts them), the soft-prompt path, and a T5 judge (no cache).
"""

import numpy as np
import pytest

from jaxrank.judges import PromptJudge, pairwise_template
from jaxrank.judges.soft_prompt import SoftPrompt
from tiny_lm import OFFSET, sharpen, tiny_lm

WINDOW = 200
TPL = pairwise_template("summeval", "coherence")
CANDS = ["short one", "another short", "a much much longer candidate text " * 2, "mid length candidate here"]
LONG = "The quick brown fox jumps over the lazy dog. " * 6          # every prompt is cut
MIXED = "The council met. It approved the park plan."               # short pairs fit whole, long ones are cut
I = np.array([0, 1, 0, 2, 1, 2, 3, 0])
J = np.array([1, 0, 2, 0, 2, 1, 2, 3])


@pytest.fixture(scope="module")
def lm():
    return sharpen(tiny_lm(seed=1, max_len=WINDOW))


@pytest.fixture(scope="module")
def judge(lm):
    return PromptJudge(lm, TPL, max_length=WINDOW, batch_size=8)


def own_cut(judge, context, a, b, width):
    """The largest number of context characters (= tokens) whose whole prompt fits, by a plain scan."""
    tok = judge.lm.tokenizer
    for k in range(len(context), -1, -1):
        ids = tok(judge.prompt_text(context[:k], a, b), add_special_tokens=True)["input_ids"]
        if len(ids) + width <= WINDOW:
            return k, list(ids)
    raise AssertionError("no cut fits")


def numpy_p(lm, text, labels):
    """p from one full forward pass per label on ``text + label``, log-softmax in NumPy (float64)."""
    lead = "" if text[-1].isspace() else " "
    base = lm.tokenizer(text, add_special_tokens=True)["input_ids"]
    lp = []
    for w in labels:
        full = lm.tokenizer(text + lead + w, add_special_tokens=True)["input_ids"]
        x = np.asarray(lm.model(np.array([full])))[0].astype(np.float64)
        m = x.max(-1, keepdims=True)
        ls = x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))
        lp.append(sum(ls[t - 1, full[t]] for t in range(len(base), len(full))))
    return 1.0 / (1.0 + np.exp(lp[1] - lp[0]))


@pytest.mark.parametrize("context", [LONG, MIXED], ids=["all-cut", "mixed"])
def test_each_row_is_cut_by_its_own_need(judge, context):
    width = judge.reading.width
    with pytest.warns(UserWarning, match="context was cut"):
        rows, truncated = judge.prompt_rows(context, CANDS, I, J)
    assert truncated
    cuts = []
    for r, (a, b) in enumerate(zip(I, J)):
        k, ref = own_cut(judge, context, CANDS[a], CANDS[b], width)
        assert rows[r] == ref, f"row {r} ({a}, {b})"
        alone, _ = judge.prompt_rows(context, CANDS, [a], [b])
        assert alone[0] == ref
        cuts.append(k)
    assert len(set(cuts)) > 2                                    # the rows need different cuts: not vacuous
    if context is MIXED:
        assert len(context) in cuts and min(cuts) < len(context)    # some rows whole, some cut
    rev, _ = judge.prompt_rows(context, CANDS, I[::-1], J[::-1])
    assert rev == rows[::-1]


@pytest.mark.parametrize("context", [LONG, MIXED], ids=["all-cut", "mixed"])
def test_p_of_a_pair_does_not_depend_on_the_other_pairs(lm, judge, context):
    together = judge.compare(context, CANDS, I, J)
    assert together.truncated
    rev = judge.compare(context, CANDS, I[::-1], J[::-1])
    sub = judge.compare(context, CANDS, I[:3], J[:3])
    np.testing.assert_allclose(rev.p[::-1], together.p, rtol=0, atol=1e-6)
    np.testing.assert_allclose(sub.p, together.p[:3], rtol=0, atol=1e-6)
    for r, (a, b) in enumerate(zip(I, J)):
        alone = judge.compare(context, CANDS, [a], [b])
        np.testing.assert_allclose(alone.p[0], together.p[r], rtol=0, atol=1e-6)
        k, _ = own_cut(judge, context, CANDS[a], CANDS[b], judge.reading.width)
        ref = numpy_p(lm, judge.prompt_text(context[:k], CANDS[a], CANDS[b]), TPL.labels)
        np.testing.assert_allclose(together.p[r], ref, rtol=0, atol=1e-5)
    assert np.ptp(together.p) > 1e-3                                 # the pairs' p differ


def test_no_cut_keeps_one_shared_cache(judge, monkeypatch):
    """Without truncation the rows are read as before: one shared_split over all rows, grouped by candidate A."""
    import jaxrank.judges.pairwise as pw
    seen = []
    real = pw.shared_split
    monkeypatch.setattr(pw, "shared_split", lambda rows, groups: seen.append(list(groups)) or real(rows, groups))
    judge.compare("Short.", CANDS[:2], [0, 1, 0], [1, 0, 1])
    assert len(seen) == 1 and len({g for g in seen[0]}) == 2 and all(k is None for _, k in seen[0])


def test_compare_templates_cuts_like_each_templates_compare():
    from jaxrank.assessment import zepo
    window = 400                                            # ZEPO's instruction is longer: a wider window
    lm = sharpen(tiny_lm(seed=1, max_len=window))
    seed = pairwise_template("summeval", "coherence", style="zepo")
    temps = [seed, zepo.with_instruction(seed, "coherence: A or B?"),
             zepo.with_instruction(seed, "Which one is more coherent? Reply A or B only, nothing else please.")]
    judge = PromptJudge(lm, seed, max_length=window, batch_size=8)
    i, j = I[:6], J[:6]
    together = judge.compare_templates(temps, LONG * 2, CANDS, i, j)
    cut = []
    for t, res in zip(temps, together):
        own = PromptJudge(lm, t, max_length=window, batch_size=8)
        np.testing.assert_allclose(res.p, own.compare(LONG * 2, CANDS, i, j).p, rtol=0, atol=1e-6)
        np.testing.assert_allclose(res.p[1], own.compare(LONG * 2, CANDS, i[1:2], j[1:2]).p[0], rtol=0, atol=1e-6)
        rows, _ = own.prompt_rows(LONG * 2, CANDS, i, j)
        assert res.truncated and max(map(len, rows)) + own.reading.width == window
        bare, _ = own.prompt_rows("", CANDS, i[:1], j[:1])
        cut.append(len(rows[0]) - len(bare[0]))            # context bytes (tokens) the template's row keeps
    assert len(set(cut)) == len(temps)                      # each template cuts its own way


def test_soft_prompt_path_cuts_per_row(lm):
    soft = SoftPrompt.from_text(lm, " Be fair.", "before_question")
    judge = PromptJudge(lm, TPL, max_length=WINDOW, batch_size=8, soft_prompt=soft)
    together = judge.compare(LONG, CANDS, I[:4], J[:4])
    assert together.truncated
    for r in range(4):
        alone = judge.compare(LONG, CANDS, I[r:r + 1], J[r:r + 1])
        np.testing.assert_allclose(alone.p[0], together.p[r], rtol=0, atol=1e-6)
        pre, a, b = judge.token_ids(LONG, CANDS[I[r]], CANDS[J[r]])
        need = len(pre) + len(a) + len(b) + soft.length + 1 - WINDOW
        ctx = len(judge.lm.tokenizer(LONG, add_special_tokens=False)["input_ids"])
        cut = judge.token_ids(LONG, CANDS[I[r]], CANDS[J[r]], max_context_tokens=ctx - need)
        assert sum(map(len, cut)) + soft.length + 1 == WINDOW     # the row's own cut: exactly the window


def test_t5_judge_cuts_per_row(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import json

    from safetensors.numpy import load_file

    from jaxrank.models import t5
    from jaxrank.models.loading import LoadedModel
    from tiny_lm import EOS, PAD, ByteTokenizer
    torch.manual_seed(0)
    cfg = transformers.T5Config(vocab_size=256 + OFFSET, d_model=32, d_kv=8, d_ff=48, num_layers=1,
                                num_decoder_layers=1, num_heads=4, decoder_start_token_id=PAD, pad_token_id=PAD,
                                eos_token_id=EOS, dropout_rate=0.0)
    m = transformers.T5ForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(3.0)
    m.save_pretrained(tmp_path)
    jcfg = t5.T5Config.from_hf(json.loads((tmp_path / "config.json").read_text()))
    lm5 = LoadedModel(t5.load_state_dict(jcfg, load_file(str(tmp_path / "model.safetensors"))), jcfg,
                      ByteTokenizer(), None, "tiny-t5", "t5", tmp_path, (EOS,), PAD)
    judge = PromptJudge(lm5, TPL, max_length=WINDOW, batch_size=3, min_label_mass=0.0)
    together = judge.compare(LONG, CANDS, I, J)
    assert together.truncated
    a_id, b_id = (OFFSET + ord(w) for w in TPL.labels)
    for r, (a, b) in enumerate(zip(I, J)):
        np.testing.assert_allclose(judge.compare(LONG, CANDS, [a], [b]).p[0], together.p[r], rtol=0, atol=1e-6)
        for k in range(len(LONG), -1, -1):                # the row's own cut: prompt + </s> fits the window
            ids = [c + OFFSET for c in judge.prompt_text(LONG[:k], CANDS[a], CANDS[b]).encode()] + [EOS]
            if len(ids) + 1 <= WINDOW:
                break
        with torch.no_grad():
            x = m(input_ids=torch.tensor([ids]), decoder_input_ids=torch.tensor([[PAD]])).logits[0, 0].double()
        lp = torch.log_softmax(x, -1).numpy()
        np.testing.assert_allclose(together.p[r], 1 / (1 + np.exp(lp[b_id] - lp[a_id])), rtol=0, atol=2e-5)
    assert np.ptp(together.p) > 1e-3
