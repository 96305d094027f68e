"""jaxrank: LLM comparative assessment in JAX.

Judges produce :class:`Comparisons`; scorers turn them into per-item scores;
:mod:`jaxrank.metrics` compares scores with human labels. Every scorer takes one
context or a padded batch of contexts and is ``jit``-compiled.

Importing ``jaxrank`` is cheap: every public name is loaded from its module on
first use (PEP 562 module ``__getattr__`` over :data:`_LAZY`), so the command
line's ``--help`` and argument errors never import JAX, and ``jaxrank rank``
imports only the modules its scorer needs. ``import jaxrank as jr;
jr.win_ratio(...)``, ``from jaxrank import win_ratio`` and ``jr.metrics`` work as
with eager imports.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    # name -> the module that defines it
    "Comparisons": "jaxrank.comparisons", "stack_contexts": "jaxrank.comparisons",
    "debias_threshold": "jaxrank.debias", "permutation_average": "jaxrank.debias",
    "positional_bias": "jaxrank.debias", "threshold_debias": "jaxrank.debias",
    "BradleyTerrySolution": "jaxrank.scoring", "bradley_terry": "jaxrank.scoring",
    "fit_bradley_terry": "jaxrank.scoring",
    "GaussianPosterior": "jaxrank.scoring", "MarginalPosterior": "jaxrank.scoring", "poe_gaussian": "jaxrank.scoring",
    "poe_gaussian_posterior": "jaxrank.scoring",
    "SoftBTSolution": "jaxrank.scoring", "poe_bradley_terry": "jaxrank.scoring",
    "fit_poe_bradley_terry": "jaxrank.scoring",
    "BradleyTerrySolver": "jaxrank.scoring", "RESULTS": "jaxrank.scoring", "SolverError": "jaxrank.scoring",
    "average_probability": "jaxrank.scoring", "win_ratio": "jaxrank.scoring", "decisions": "jaxrank.scoring",
    "max_likelihood_ranking": "jaxrank.scoring",
    "Expert": "jaxrank.scoring", "ProductOfExpertsSolver": "jaxrank.scoring", "PoESolution": "jaxrank.scoring",
    "fit_poe": "jaxrank.scoring", "poe_scores": "jaxrank.scoring",
    "RankIntervals": "jaxrank.uncertainty", "laplace_bradley_terry": "jaxrank.uncertainty",
    "laplace_posterior": "jaxrank.uncertainty", "LaplaceFit": "jaxrank.uncertainty",
    "posterior_samples": "jaxrank.uncertainty", "rank_intervals": "jaxrank.uncertainty",
    "ranking_confidence": "jaxrank.uncertainty", "score_intervals": "jaxrank.uncertainty",
    "enable_compilation_cache": "jaxrank.compilation",
    "bootstrap": "jaxrank.bootstrap", "bootstrap_intervals": "jaxrank.bootstrap",
    "bootstrap_outcomes": "jaxrank.bootstrap", "percentile_intervals": "jaxrank.bootstrap",
    "resample_comparisons": "jaxrank.bootstrap",
    "ActiveResult": "jaxrank.selection", "PairSResult": "jaxrank.selection", "active_assess": "jaxrank.selection",
    "gather_comparisons": "jaxrank.selection", "greedy_comparisons": "jaxrank.selection",
    "laplace_comparisons": "jaxrank.selection", "pairs_rank": "jaxrank.selection",
    "random_comparisons": "jaxrank.selection",
    "JudgeParams": "jaxrank.simulate", "SimulatedJudge": "jaxrank.simulate", "calibrate_judge": "jaxrank.simulate",
    "judge_stats": "jaxrank.simulate", "simulate_judge": "jaxrank.simulate",
    "shard_contexts": "jaxrank.sharding",
    "zepo_search": "jaxrank.assessment", "ZepoResult": "jaxrank.assessment",
    "diagnose_judge": "jaxrank.assessment", "Diagnosis": "jaxrank.assessment",
    "SoftPrompt": "jaxrank.judges", "train_soft_prompt": "jaxrank.judges",
    "from_records": "jaxrank.data", "read_records": "jaxrank.data",
}
"""Every public function and class, by the module it is loaded from on first use."""

_SUBMODULES = frozenset({
    "assessment", "calibration", "comparisons", "compilation", "data", "debias", "distributed", "experiments", "io",
    "judges",
    "fairness", "learning", "metrics",
    "models", "scorer_table", "scoring", "selection", "sharding", "simulate", "studies", "uncertainty",
})
"""Subpackages and modules reachable as attributes (``jr.metrics``); each is imported on first use.

``jaxrank.bootstrap`` stays the function even once the module of the same name is
imported (:class:`_Package`), as with the eager imports before."""

__all__ = [
    "Comparisons", "stack_contexts",
    "win_ratio", "average_probability", "decisions", "bradley_terry", "fit_bradley_terry", "BradleyTerrySolution",
    "poe_gaussian", "poe_gaussian_posterior", "GaussianPosterior", "MarginalPosterior",
    "poe_bradley_terry", "fit_poe_bradley_terry", "SoftBTSolution", "BradleyTerrySolver", "RESULTS", "SolverError",
    "laplace_bradley_terry", "laplace_posterior", "LaplaceFit", "max_likelihood_ranking",
    "Expert", "ProductOfExpertsSolver", "PoESolution", "fit_poe", "poe_scores",
    "positional_bias", "debias_threshold", "threshold_debias", "permutation_average",
    "score_intervals", "posterior_samples", "rank_intervals", "RankIntervals", "ranking_confidence",
    "bootstrap", "bootstrap_intervals", "bootstrap_outcomes", "percentile_intervals", "resample_comparisons",
    "random_comparisons", "gather_comparisons", "greedy_comparisons", "laplace_comparisons", "pairs_rank",
    "PairSResult", "active_assess", "ActiveResult",
    "calibrate_judge", "simulate_judge", "JudgeParams", "SimulatedJudge", "judge_stats",
    "shard_contexts",
    "fairness", "zepo_search", "ZepoResult", "SoftPrompt", "train_soft_prompt", "diagnose_judge", "Diagnosis",
    "enable_compilation_cache", "from_records", "read_records",
    "metrics", "data", "selection", "judges", "SCORERS",
]

if TYPE_CHECKING:  # what static tools (type checkers, IDEs) see; at run time __getattr__ loads these
    from jaxrank import data, fairness, judges, metrics, selection
    from jaxrank.bootstrap import (bootstrap, bootstrap_intervals, bootstrap_outcomes, percentile_intervals,
                                   resample_comparisons)
    from jaxrank.comparisons import Comparisons, stack_contexts
    from jaxrank.compilation import enable_compilation_cache
    from jaxrank.data import from_records, read_records
    from jaxrank.debias import debias_threshold, permutation_average, positional_bias, threshold_debias
    from jaxrank.scoring import (RESULTS, BradleyTerrySolution, BradleyTerrySolver, GaussianPosterior, MarginalPosterior,
                                 SoftBTSolution, SolverError, average_probability, bradley_terry, decisions,
                                 fit_bradley_terry, fit_poe_bradley_terry, max_likelihood_ranking,
                                 poe_bradley_terry, poe_gaussian, poe_gaussian_posterior, win_ratio)
    from jaxrank.scoring import Expert, PoESolution, ProductOfExpertsSolver, fit_poe, poe_scores
    from jaxrank.selection import (ActiveResult, PairSResult, active_assess, gather_comparisons,
                                   greedy_comparisons, laplace_comparisons, pairs_rank, random_comparisons)
    from jaxrank.sharding import shard_contexts
    from jaxrank.assessment import Diagnosis, ZepoResult, diagnose_judge, zepo_search
    from jaxrank.judges import SoftPrompt, train_soft_prompt
    from jaxrank.simulate import JudgeParams, SimulatedJudge, calibrate_judge, judge_stats, simulate_judge
    from jaxrank.uncertainty import (LaplaceFit, RankIntervals, laplace_bradley_terry, laplace_posterior,
                                     posterior_samples, rank_intervals, ranking_confidence, score_intervals)

    SCORERS: dict


def _scorers() -> dict:
    from jaxrank import scorer_table

    return scorer_table.functions()


def __getattr__(name: str):
    """Load ``name`` from its module on first use and keep it in the package's namespace."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name == "SCORERS":  # every scorer by the name the CLI's ``--method`` takes
        value = _scorers()
    elif name in _SUBMODULES:
        value = importlib.import_module(f"jaxrank.{name}")
    else:
        raise AttributeError(f"module 'jaxrank' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | _SUBMODULES)


class _Package(types.ModuleType):
    """The package's module type: importing a submodule never shadows a public name of the same name.

    The import system binds ``jaxrank.bootstrap`` to the submodule when it is first
    imported (``from jaxrank.bootstrap import ...``); the public name is the function
    :func:`jaxrank.bootstrap.bootstrap`, loaded by :func:`__getattr__` instead.
    """

    def __setattr__(self, name, value):
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
