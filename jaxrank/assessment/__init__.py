"""The assessment pipeline: judge a data set into a resumable store, actively or in full, and report.

Above the judges and the selection schemes (ARCHITECTURE.md). Data flow:
a judge (:mod:`jaxrank.judges`) -> :func:`judge_contexts` (:mod:`~jaxrank.assessment.run`)
writes every judgement to a :class:`JudgementStore` (:mod:`~jaxrank.assessment.store`)
as it is produced -> :meth:`JudgementStore.comparisons` gives the
:class:`~jaxrank.Comparisons` the scorers take -> :func:`assess_comparisons`
(:mod:`~jaxrank.assessment.report`) reports agreement with human scores.
:func:`active_judge_contexts` (:mod:`~jaxrank.assessment.active`) asks the judge
only for the most informative comparisons (active assessment), through the same store.
:func:`zepo_search` (:mod:`~jaxrank.assessment.zepo`) searches a fairer judge instruction without
labels (ZEPO), every candidate's judgements going through the same store.
:func:`diagnose_judge` (:mod:`~jaxrank.assessment.diagnose`) checks on a few pairs that a judge reads the
model's answer (label mass, top tokens, P(A), order consistency, accuracy).
"""

from jaxrank.assessment.store import JudgementStore, StoredComparisons
from jaxrank.assessment.run import ContextSet, contexts_of, judge_comparisons, judge_contexts, plan_pairs
from jaxrank.assessment.report import Assessment, assess_comparisons
from jaxrank.assessment.active import ActiveRun, StoreJudgeFn, active_judge_contexts, check_active
from jaxrank.assessment.zepo import ZepoResult, zepo_search
from jaxrank.assessment.diagnose import Diagnosis, diagnose_judge

__all__ = [
    "JudgementStore", "StoredComparisons", "ContextSet", "contexts_of", "judge_contexts", "judge_comparisons",
    "plan_pairs", "Assessment", "assess_comparisons", "active_judge_contexts", "ActiveRun", "StoreJudgeFn",
    "check_active", "zepo_search", "ZepoResult", "Diagnosis", "diagnose_judge",
]
