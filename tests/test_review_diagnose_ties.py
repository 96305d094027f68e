"""``jaxrank judge --diagnose`` counts a judge's tie (``p = 0.5``) one half, as the assessment report does.

Before the fix an indifferent judge (``p = 0.5`` everywhere) was reported as
``P(A): 0.00``, ``order consistency: 1.00`` and "answers B in 100% of prompts
... position decides". The references here count by hand in plain Python
loops (``Fraction``), independent of the NumPy expressions of the module.
"""

import types
from fractions import Fraction

import numpy as np
from scipy import stats

from jaxrank.assessment.diagnose import Diagnosis, diagnose_judge
from jaxrank.assessment.run import ContextSet


def _diagnosis(p, human=None):
    n = len(p)
    return Diagnosis("j", "t", (" A", " B"), "", [("c", "x", "y")] * n, np.asarray(p, np.float64),
                     np.full((n, 2), 0.9), [[[(" A", 0.5)], [(" B", 0.4)]]] * n,
                     np.full((n, 2), np.nan) if human is None else np.asarray(human, np.float64), 0.5)


def _won(q):
    return Fraction(1) if q > 0.5 else Fraction(1, 2) if q == 0.5 else Fraction(0)


P = [[0.5, 0.5], [0.9, 0.2], [0.5, 0.7], [0.3, 0.5], [0.8, 0.6], [0.1, 0.95], [0.6, 0.4]]
H = [[3, 1], [1, 2], [2, 4], [5, 1], [2, 2], [1, 3], [4, 2]]


def test_counts_against_a_hand_count():
    d = _diagnosis(P, H)
    prompts = [q for row in P for q in row]
    assert d.p_a == float(sum(_won(q) for q in prompts) / len(prompts))
    assert d.ties == sum(q == 0.5 for q in prompts)
    half = Fraction(1, 2)                           # a tie in either order, or in both, counts one half
    consistent = [half if half in (_won(ab), _won(ba)) else 1 - abs(_won(ab) + _won(ba) - 1) for ab, ba in P]
    assert d.order_consistency == float(sum(consistent) / len(P))
    k, n = Fraction(0), 0
    for (ab, ba), (ha, hb) in zip(P, H):
        if ha == hb:
            continue
        n += 1
        avg = (Fraction(ab) + 1 - Fraction(ba)) / 2
        w = _won(avg)
        k += w if ha > hb else 1 - w
    acc, lo, hi, m = d.accuracy()
    assert m == n and acc == float(k / n)
    assert k.denominator == 2                    # one pair averages to exactly 0.5: the half count is used
    assert lo == stats.binomtest(int(k - Fraction(1, 2)), n).proportion_ci(0.95, method="exact").low
    assert hi == stats.binomtest(int(k + Fraction(1, 2)), n).proportion_ci(0.95, method="exact").high


def test_indifferent_judge_is_not_reported_as_answering_b():
    d = _diagnosis([[0.5, 0.5]] * 8, [[1, 2]] * 8)
    assert d.p_a == 0.5 and d.ties == 16
    acc, lo, hi, n = d.accuracy()
    assert acc == 0.5 and n == 8 and lo < 0.5 < hi
    v = d.verdict()
    assert "position decides" not in v and "answers B" not in v and "p = 0.5 in every prompt" in v
    assert "- P(A): 0.50" in d.markdown()


class _Result:
    def __init__(self, n):
        self.p = np.full(n, 0.5, np.float32)
        self.label_mass = np.full(n, 0.95, np.float32)
        self.truncated = False
        self.top_ids = np.tile([[5, 6]], (n, 1))
        self.top_probs = np.tile([[0.48, 0.47]], (n, 1))


class _Indifferent:
    name, template_key, min_label_mass = "indifferent", "t", 0.5
    reading = types.SimpleNamespace(texts=(" A", " B"))
    template = types.SimpleNamespace(answer_prefix="")
    lm = types.SimpleNamespace(tokenizer=types.SimpleNamespace(decode=lambda ids: {5: " A", 6: " B"}[ids[0]]))

    def compare(self, ctx, cands, i, j):
        return _Result(len(i))


def test_diagnose_judge_end_to_end():
    cs = ContextSet([f"c{k}" for k in range(8)], ["ctx"] * 8, [[f"s{n}" for n in range(4)]] * 8,
                    [[f"t{n}" for n in range(4)]] * 8, [np.array([1, 2, 3, 4], np.float32)] * 8)
    d = diagnose_judge(_Indifferent(), cs, num_pairs=16)
    text = d.markdown()
    assert "- P(A): 0.50" in text and "answers B" not in text and "position decides" not in text
