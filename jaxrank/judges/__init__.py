"""LLM judges: prompts and the judges that turn texts into :class:`~jaxrank.Comparisons`.

A judge takes a context and its candidate texts and answers which of two
candidates is better: :class:`PromptJudge` (the probability of the label words
of a pairwise prompt), :class:`SamplingJudge` (the fraction of sampled answers),
:class:`CallableJudge` (any Python function), :class:`SimilarityJudge`
(embedding similarity to a reference), :class:`ServerJudge` (the label
log-probabilities returned by an OpenAI-compatible server) and the pointwise judges
(:class:`GEvalJudge`, its sampled variant :class:`SampledGEvalJudge`, :class:`PromptScoringJudge`,
whose scores become comparisons through :func:`pointwise_comparisons`). The language models they
run are in :mod:`jaxrank.models`; judging a whole data set into a resumable
store, active assessment and the report against human scores are the
assessment pipeline, :mod:`jaxrank.assessment`.

The names that moved to :mod:`jaxrank.models` and :mod:`jaxrank.assessment`
(``load_model``, ``JudgementStore``, ``judge_contexts``, ``assess_comparisons``,
...) and the old module paths (``jaxrank.judges.loading``, ``jaxrank.judges.run``,
``jaxrank.judges.models.llama``, ...) still work for one release, with a
``DeprecationWarning``.
"""

from jaxrank import _deprecation
from jaxrank.judges.pairwise import Judgement, PromptJudge
from jaxrank.judges.pointwise import GEvalJudge, PointwiseResult, pointwise_comparisons
from jaxrank.judges.prompt_scoring import PromptScoringJudge, parse_score
from jaxrank.judges.geval_sampling import SampledGEvalJudge
from jaxrank.judges.sampling import CallableJudge, SamplingJudge, label_parser, parser_key
from jaxrank.judges.similarity import SimilarityJudge
from jaxrank.judges.rating_replay import replay_comparisons, replay_probabilities, replay_scores
from jaxrank.judges.prompts import (G_EVAL_CRITERIA, TEMPLATES, ZEPO_SEED, PairwiseTemplate, PointwiseTemplate,
                                    pairwise_template, pointwise_template)

__all__ = [
    "PromptJudge", "Judgement", "SamplingJudge", "CallableJudge", "label_parser", "parser_key", "SimilarityJudge",
    "GEvalJudge", "SampledGEvalJudge", "PromptScoringJudge", "PointwiseResult", "parse_score",
    "pointwise_comparisons",
    "PairwiseTemplate", "PointwiseTemplate", "TEMPLATES", "ZEPO_SEED", "G_EVAL_CRITERIA",
    "pairwise_template", "pointwise_template", "SoftPrompt", "train_soft_prompt",
    "replay_comparisons", "replay_probabilities", "replay_scores", "ServerJudge", "ServerGEvalJudge",
]

_SOFT_PROMPT = ("SoftPrompt", "train_soft_prompt")
"""Loaded from :mod:`jaxrank.judges.soft_prompt` on first use (it imports optax and safetensors)."""

_SERVER = ("ServerJudge", "ServerGEvalJudge")
"""Loaded from :mod:`jaxrank.judges.server` on first use (it imports httpx)."""

MOVED_MODULES = {
    "jaxrank.judges.models": "jaxrank.models",
    "jaxrank.judges.loading": "jaxrank.models.loading",
    "jaxrank.judges.gguf": "jaxrank.models.gguf",
    "jaxrank.judges.registry": "jaxrank.models.registry",
    "jaxrank.judges.run": "jaxrank.assessment.run",
    "jaxrank.judges.store": "jaxrank.assessment.store",
    "jaxrank.judges.active": "jaxrank.assessment.active",
    "jaxrank.judges.report": "jaxrank.assessment.report",
}
"""Old module path -> new (deprecated for one release; submodules follow, e.g. ``jaxrank.judges.models.llama``)."""

MOVED_NAMES = {
    **dict.fromkeys(("LoadedModel", "load_model", "MODELS", "list_models"), "jaxrank.models"),
    **dict.fromkeys(("JudgementStore", "StoredComparisons", "ContextSet", "contexts_of", "judge_contexts",
                     "judge_comparisons", "plan_pairs", "Assessment", "assess_comparisons",
                     "active_judge_contexts", "ActiveRun", "StoreJudgeFn", "check_active"), "jaxrank.assessment"),
}
"""Names ``jaxrank.judges`` exported before the split -> their package now (deprecated for one release)."""

_deprecation.forward_modules(MOVED_MODULES)



def __getattr__(name):
    if name in _SOFT_PROMPT:
        from jaxrank.judges import soft_prompt
        return getattr(soft_prompt, name)
    if name in _SERVER:
        from jaxrank.judges import server
        return getattr(server, name)
    return _deprecation.forward_name(__name__, name, MOVED_NAMES, MOVED_MODULES)
