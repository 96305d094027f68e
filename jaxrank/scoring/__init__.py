"""Scorers: from comparisons to per-item scores (one module per family of experts)."""

from jaxrank.scoring.bradley_terry import BradleyTerrySolution, bradley_terry, fit_bradley_terry
from jaxrank.scoring.counting import average_probability, decisions, win_ratio
from jaxrank.scoring.gaussian import GaussianPosterior, MarginalPosterior, poe_gaussian, poe_gaussian_posterior
from jaxrank.scoring import experts
from jaxrank.scoring.experts import Expert
from jaxrank.scoring.ml_ranking import max_likelihood_ranking
from jaxrank.scoring.poe import PoESolution, fit_poe, poe_scores
from jaxrank.scoring.soft_bt import SoftBTSolution, fit_poe_bradley_terry, poe_bradley_terry
from jaxrank.scoring.solver import RESULTS, BradleyTerrySolver, ProductOfExpertsSolver, SolverError

__all__ = [
    "win_ratio", "average_probability", "decisions",
    "bradley_terry", "fit_bradley_terry", "BradleyTerrySolution",
    "poe_gaussian", "poe_gaussian_posterior", "GaussianPosterior", "MarginalPosterior",
    "poe_bradley_terry", "fit_poe_bradley_terry", "SoftBTSolution",
    "BradleyTerrySolver", "RESULTS", "SolverError",
    "max_likelihood_ranking",
    "Expert", "experts", "ProductOfExpertsSolver", "PoESolution", "fit_poe", "poe_scores",
]
