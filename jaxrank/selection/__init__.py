"""Which comparisons to make (METHODS.md §5): random, greedy information-maximising, PairS, active."""

from jaxrank.selection.random import gather_comparisons, random_comparisons
from jaxrank.selection.greedy import greedy_comparisons, laplace_comparisons
from jaxrank.selection.pairs import PairSResult, pairs_rank
from jaxrank.selection.active import ActiveResult, active_assess

__all__ = ["random_comparisons", "gather_comparisons", "greedy_comparisons", "laplace_comparisons",
           "pairs_rank", "PairSResult", "active_assess", "ActiveResult"]
