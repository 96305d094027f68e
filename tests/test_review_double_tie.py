"""A pair tied in both orders (``p = 0.5`` as AB and as BA) is no consistent preference: it counts one half.

Before the fix ``jaxrank judge --diagnose`` and the assessment report counted
order consistency as ``1 - |won_ab + won_ba - 1|`` (``won`` 1, 1/2, 0), which
gives a pair tied in both orders 1, fully consistent, while a pair with one
tie got 1/2: a judge answering ``p = 0.5`` everywhere was reported as
perfectly order-consistent (``order consistency: 1.00``). Now a pair counts
the chance that its two decisions agree when each tie is settled by a fair
coin: 1 when both orders pick the same candidate, 0 when they pick different
ones, 1/2 with a tie in either order or in both. The references here count by
hand with explicit cases in ``Fraction``s, and the report and the diagnosis
give the same number on the same judgements.
"""

from fractions import Fraction

import numpy as np
import pytest

import jaxrank as jr
from jaxrank.assessment.diagnose import Diagnosis
from jaxrank.assessment.report import assess_comparisons

# (p_ab, p_ba): consistent, inconsistent (A twice), inconsistent (B twice), one tie, the other tie, double tie x2
P = [(0.9, 0.2), (0.8, 0.7), (0.3, 0.4), (0.5, 0.1), (0.6, 0.5), (0.5, 0.5), (0.5, 0.5), (0.1, 0.95)]


def hand(p_ab, p_ba):
    """The pair's count by cases: a tie anywhere 1/2; else 1 when the orders pick the same candidate."""
    if p_ab == 0.5 or p_ba == 0.5:
        return Fraction(1, 2)
    first = "i" if p_ab > 0.5 else "j"          # order AB: candidate i is in position A
    second = "j" if p_ba > 0.5 else "i"         # order BA: candidate j is in position A
    return Fraction(1) if first == second else Fraction(0)


def diagnosis(p):
    n = len(p)
    return Diagnosis("j", "t", (" A", " B"), "", [("c", "x", "y")] * n, np.asarray(p, np.float64),
                     np.full((n, 2), 0.9), [[[(" A", 0.5)], [(" B", 0.4)]]] * n, np.full((n, 2), np.nan), 0.5)


def report(p, n_items=2):
    """One context per pair (items 0, 1), judged as (0, 1) then (1, 0)."""
    rows = [[(0, 1, ab), (1, 0, ba)] for ab, ba in p]
    c = jr.stack_contexts([jr.Comparisons.from_pairs(*map(list, zip(*r)), num_items=n_items) for r in rows])
    labels = np.tile(np.array([[2.0, 1.0]], np.float32), (len(p), 1))
    return assess_comparisons(c, labels, methods=("average_probability",))


def test_diagnosis_counts_a_double_tie_one_half():
    d = diagnosis(P)
    want = sum(hand(ab, ba) for ab, ba in P) / len(P)
    assert want == Fraction(1, 2)                   # 1 + 0 + 0 + 4 halves + 1 (not 5/8: the double ties as 1)
    assert d.order_consistency == float(want)
    assert d.double_ties == 2
    assert "order consistency: 0.50" in d.markdown() and "2 of 8 pairs tied in both orders" in d.markdown()


def test_report_counts_as_the_diagnosis():
    rep = report(P)
    per = [float(hand(ab, ba)) for ab, ba in P]
    np.testing.assert_array_equal(rep.consistency, per)
    assert rep.overall_consistency == pytest.approx(1 / 2, abs=1e-15)
    assert rep.overall_consistency == pytest.approx(diagnosis(P).order_consistency, abs=1e-15)


def test_indifferent_judge_is_half_consistent_everywhere():
    tied = [(0.5, 0.5)] * 6
    assert diagnosis(tied).order_consistency == 0.5 and diagnosis(tied).double_ties == 6
    rep = report(tied)
    np.testing.assert_array_equal(rep.consistency, np.full(6, 0.5))
    assert rep.overall_consistency == 0.5


def test_report_first_judgement_of_each_order_with_a_double_tie():
    """Several contexts and repeated orders: the first judgement of each order counts (as before the fix)."""
    rows = [[(0, 1, 0.5), (1, 0, 0.5), (0, 1, 0.9), (0, 2, 0.7), (2, 0, 0.2)],   # (0,1) double tie; (0,2) ok
            [(1, 2, 0.5), (2, 1, 0.5), (0, 1, 0.6), (1, 0, 0.6)]]                  # double tie; inconsistent
    c = jr.stack_contexts([jr.Comparisons.from_pairs(*map(list, zip(*r)), num_items=3) for r in rows])
    rep = assess_comparisons(c, np.array([[3.0, 2.0, 1.0]] * 2, np.float32), methods=("average_probability",))
    want = [(hand(0.5, 0.5) + hand(0.7, 0.2)) / 2, (hand(0.5, 0.5) + hand(0.6, 0.6)) / 2]
    np.testing.assert_array_equal(rep.consistency, [float(w) for w in want])
    assert rep.overall_consistency == pytest.approx(float(sum(want) / 2), abs=1e-15)
