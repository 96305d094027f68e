"""The judge's B batches on a CPU (issue 33): rows padded to steps of 8 tokens, cut with a cost per call.

``_forward.read_decoder`` on a CPU pads each B batch to the smallest multiple of 8 holding its longest
row (``CPU_BUCKETS``) and cuts each A's rows, sorted by length, where ``padded tokens + CPU_CALL_COST x
calls`` is least. Checked against a brute-force search over every cut of the sorted rows, and the
judge's ``p`` against one full forward pass of each whole prompt (NumPy float64 log-softmax of the
label tokens, as ``test_judging`` reads it).
"""

import dataclasses
import itertools

import numpy as np
import pytest
from tiny_lm import tiny_llama_like

from jaxrank.judges import _forward
from jaxrank.judges._buckets import BUCKETS
from jaxrank.judges.pairwise import PromptJudge
from jaxrank.judges.prompts import pairwise_template

CTX = "The city council met on Monday. It approved a new park near the river and a bus line to the airport."


@pytest.fixture(scope="module")
def tiny(smollm2):
    """SmolLM2's tokenizer and chat template on a tiny random-weight Llama."""
    return tiny_llama_like(smollm2, seed=5)


class Recording:
    """A model wrapper that keeps each B call's ``(ids, mask)`` (``extend`` without ``update``)."""

    def __init__(self, model):
        self._model, self.calls = model, []

    def __getattr__(self, name):
        return getattr(self._model, name)

    def extend(self, cache, ids, mask=None, *, update=False, **kw):
        if not update:
            self.calls.append((np.asarray(ids), np.asarray(mask)))
        return self._model.extend(cache, ids, mask, update=update, **kw)


def full_forward_p(lm, judge, a, b):
    """``p`` of one prompt: the whole text plus each label in one forward pass, float64 log-softmax."""
    text = judge.prompt_text(CTX, a, b)
    lead = "" if text[-1].isspace() else " "
    base = list(lm.tokenizer(text, add_special_tokens=False)["input_ids"])
    lp = []
    for w in judge.template.labels:
        full = list(lm.tokenizer(text + lead + w, add_special_tokens=False)["input_ids"])
        assert full[:len(base)] == base and len(full) > len(base)
        z = np.asarray(lm.model(np.array([full])))[0].astype(np.float64)
        z = z - z.max(-1, keepdims=True)
        z = z - np.log(np.exp(z).sum(-1, keepdims=True))
        lp.append(sum(z[t - 1, full[t]] for t in range(len(base), len(full))))
    return 1.0 / (1.0 + np.exp(lp[1] - lp[0]))


def best_cut(lengths, batch, cost):
    """The least ``sum(b * ceil8(longest) + cost)`` over every cut of the sorted ``lengths`` into runs of at
    most ``batch`` rows, ``b`` the run's size rounded up to a power of two (brute force)."""
    n, best = len(lengths), None
    for cuts in itertools.product((False, True), repeat=n - 1):
        ends = [k + 1 for k in range(n - 1) if cuts[k]] + [n]
        total, start = 0, 0
        for e in ends:
            if e - start > batch:
                break
            total += (1 << (e - start - 1).bit_length()) * (-(-lengths[e - 1] // 8) * 8) + cost
            start = e
        else:
            best = total if best is None else min(best, total)
    return best


def real_rows(ids, mask):
    """Rows of a call that are not trailing filler copies of row 0."""
    k = len(ids)
    while k > 1 and np.array_equal(ids[k - 1], ids[0]) and np.array_equal(mask[k - 1], mask[0]):
        k -= 1
    return k


@pytest.mark.parametrize("call_cost", [0, 32])
def test_b_batches_padded_to_steps_of_8_and_cut_least(tiny, monkeypatch, call_cost):
    monkeypatch.setattr(_forward, "CPU_CALL_COST", call_cost)
    bs = [" ".join(["word"] * k) + "." for k in (3, 1, 2, 4, 6, 9, 13, 14, 17, 22)]
    cands = ["Red apples fell from the old tree.", "Blue skies today."] + bs
    rec = Recording(tiny.model)
    judge = PromptJudge(dataclasses.replace(tiny, model=rec), pairwise_template("summeval", "coherence"),
                        batch_size=8)
    assert judge.batch_cost == 0                          # the CPU default
    # two A's, each against the same B's: each A's rows are the same B parts (one label token read)
    i = np.repeat([0, 1], len(bs))
    j = np.tile(np.arange(2, len(cands)), 2)
    res = judge.compare(CTX, cands, i, j)
    lengths, total = [], 0
    for ids, mask in rec.calls:
        k = real_rows(ids, mask)
        longest = int(mask[:k].sum(1).max())
        assert ids.shape[1] == -(-longest // 8) * 8       # the smallest multiple of 8 holding the longest
        assert ids.shape[0] == 1 << (k - 1).bit_length()  # rows rounded up to a power of two
        lengths += mask[:k].sum(1).tolist()
        total += ids.size + call_cost
    one = sorted(lengths)[::2]
    assert sorted(lengths) == sorted(one + one) and len(one) == len(bs)
    assert total == 2 * best_cut(one, 8, call_cost)
    ref = np.array([full_forward_p(tiny, judge, cands[a], cands[b]) for a, b in zip(i, j)])
    np.testing.assert_allclose(res.p, ref, atol=1e-5)


def test_coarse_and_fine_plans_give_the_same_p(tiny, monkeypatch):
    """All comparisons of 5 candidates (several A's): the plan before issue 33's change (``BUCKETS``, no cost
    a call) and the CPU plan give one full forward's ``p``."""
    cands = [f"The {w} park opens in spring{'!' * k}." for k, w in enumerate(("red", "big blue", "green", "new"))]
    cands.append("A bus line to the airport was approved by the council after a long debate.")
    i, j = np.nonzero(~np.eye(len(cands), dtype=bool))
    judge = PromptJudge(tiny, pairwise_template("summeval", "coherence"), batch_size=4)
    fine = judge.compare(CTX, cands, i, j).p
    monkeypatch.setattr(_forward, "CPU_CALL_COST", 0)
    monkeypatch.setattr(_forward, "CPU_BUCKETS", BUCKETS)
    coarse = judge.compare(CTX, cands, i, j).p
    ref = np.array([full_forward_p(tiny, judge, cands[a], cands[b]) for a, b in zip(i, j)])
    np.testing.assert_allclose(fine, ref, atol=1e-5)
    np.testing.assert_allclose(coarse, ref, atol=1e-5)
