"""LLM judges: Flax NNX models, checkpoint loading, prompts, the judging layer and its store.

Data flow: :func:`load_model` (registry name, Hugging Face directory or GGUF
file) -> a judge (:class:`PromptJudge` for pairwise label-word probabilities)
-> :func:`judge_contexts` writes every judgement to a :class:`JudgementStore`
as it is produced -> :meth:`JudgementStore.comparisons` gives the
:class:`~jaxrank.Comparisons` the scorers take -> :func:`assess_comparisons`
reports agreement with human scores. :func:`active_judge_contexts` asks the
judge only for the most informative comparisons (active assessment), through
the same store.
"""

from jaxrank.judges.loading import LoadedModel, load_model
from jaxrank.judges.pairwise import Judgement, PromptJudge
from jaxrank.judges.pointwise import (GEvalJudge, PointwiseResult, PromptScoringJudge, parse_score,
                                      pointwise_comparisons)
from jaxrank.judges.sampling import CallableJudge, SamplingJudge, label_parser
from jaxrank.judges.similarity import SimilarityJudge
from jaxrank.judges.prompts import (G_EVAL_CRITERIA, TEMPLATES, ZEPO_SEED, PairwiseTemplate, PointwiseTemplate,
                                    pairwise_template, pointwise_template)
from jaxrank.judges.registry import MODELS, list_models
from jaxrank.judges.report import Assessment, assess_comparisons
from jaxrank.judges.run import ContextSet, contexts_of, judge_comparisons, judge_contexts, plan_pairs
from jaxrank.judges.store import JudgementStore, StoredComparisons
from jaxrank.judges.active import ActiveRun, StoreJudgeFn, active_judge_contexts, check_active

__all__ = [
    "LoadedModel", "load_model", "MODELS", "list_models",
    "PromptJudge", "Judgement", "SamplingJudge", "CallableJudge", "label_parser", "SimilarityJudge",
    "GEvalJudge", "PromptScoringJudge", "PointwiseResult", "parse_score", "pointwise_comparisons",
    "PairwiseTemplate", "PointwiseTemplate", "TEMPLATES", "ZEPO_SEED", "G_EVAL_CRITERIA",
    "pairwise_template", "pointwise_template",
    "JudgementStore", "StoredComparisons", "ContextSet", "contexts_of", "judge_contexts", "judge_comparisons", "plan_pairs",
    "Assessment", "assess_comparisons",
    "active_judge_contexts", "ActiveRun", "StoreJudgeFn", "check_active",
]
