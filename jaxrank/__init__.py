"""jaxrank: LLM comparative assessment in JAX.

Judges produce :class:`Comparisons`; scorers turn them into per-item scores;
:mod:`jaxrank.metrics` compares scores with human labels. Every scorer takes one
context or a padded batch of contexts and is ``jit``-compiled.
"""

from jaxrank import data, metrics, selection
from jaxrank.comparisons import Comparisons, stack_contexts
from jaxrank.debias import debias_threshold, permutation_average, positional_bias, threshold_debias
from jaxrank.scoring import (
    BradleyTerrySolution,
    GaussianPosterior,
    SoftBTSolution,
    average_probability,
    bradley_terry,
    fit_bradley_terry,
    fit_poe_bradley_terry,
    poe_bradley_terry,
    poe_gaussian,
    poe_gaussian_posterior,
    win_ratio,
)
from jaxrank.scoring.ml_ranking import max_likelihood_ranking
from jaxrank.uncertainty import (RankIntervals, laplace_bradley_terry, posterior_samples, rank_intervals,
                                 ranking_confidence, score_intervals)
from jaxrank.compilation import enable_compilation_cache
from jaxrank.bootstrap import (bootstrap, bootstrap_intervals, bootstrap_outcomes, percentile_intervals,
                               resample_comparisons)
from jaxrank.selection import (ActiveResult, PairSResult, active_assess, gather_comparisons, greedy_comparisons,
                               laplace_comparisons, pairs_rank, random_comparisons)
from jaxrank.simulate import JudgeParams, SimulatedJudge, calibrate_judge, judge_stats, simulate_judge
from jaxrank.sharding import shard_contexts

SCORERS = {
    "win_ratio": win_ratio,
    "average_probability": average_probability,
    "bradley_terry": bradley_terry,
    "poe_gaussian": poe_gaussian,
    "poe_gaussian_hard": lambda c, **kw: poe_gaussian(c, hard=True, **kw),
    "poe_bradley_terry": poe_bradley_terry,
    "max_likelihood_ranking": max_likelihood_ranking,
}
"""Every scorer by the name the CLI's ``--method`` takes."""

__all__ = [
    "Comparisons", "stack_contexts",
    "win_ratio", "average_probability", "bradley_terry", "fit_bradley_terry", "BradleyTerrySolution",
    "poe_gaussian", "poe_gaussian_posterior", "GaussianPosterior",
    "poe_bradley_terry", "fit_poe_bradley_terry", "SoftBTSolution",
    "laplace_bradley_terry", "max_likelihood_ranking",
    "positional_bias", "debias_threshold", "threshold_debias", "permutation_average",
    "score_intervals", "posterior_samples", "rank_intervals", "RankIntervals", "ranking_confidence",
    "bootstrap", "bootstrap_intervals", "bootstrap_outcomes", "percentile_intervals", "resample_comparisons",
    "random_comparisons", "gather_comparisons", "greedy_comparisons", "laplace_comparisons", "pairs_rank",
    "PairSResult", "active_assess", "ActiveResult",
    "calibrate_judge", "simulate_judge", "JudgeParams", "SimulatedJudge", "judge_stats",
    "shard_contexts",
    "enable_compilation_cache",
    "metrics", "data", "selection", "judges", "SCORERS",
]
__version__ = "0.1.0"


def __getattr__(name):
    # The judges (models, tokenizers, transformers) load on first use: scoring needs none of it.
    if name == "judges":
        import importlib
        return importlib.import_module("jaxrank.judges")
    raise AttributeError(f"module 'jaxrank' has no attribute {name!r}")
