"""Human-annotated NLG meta-evaluation data sets (SummEval, TopicalChat, HANNA, ...), and your own texts.

See :mod:`jaxrank.data.loaders` for the shared schema and per-data-set details, and
:mod:`jaxrank.data.records` for a data set of your own texts (:func:`from_records`,
:func:`read_records`), and :mod:`jaxrank.data.raters` for the systems behind the candidates and the
single raters' scores (:func:`system_ids`, :func:`rater_scores`, :func:`human_ceiling`).
"""

from jaxrank.data.loaders import (
    ASPECTS,
    DATASETS,
    LabelMatrix,
    data_dir,
    label_matrix,
    load_dataset,
)
from jaxrank.data.records import dataset_name, from_records, read_records
from jaxrank.data.hanna_llm import LLM_JUDGES, LLMRatings, load_llm_ratings, match_systems

from typing import TYPE_CHECKING

if TYPE_CHECKING:   # for type checkers and the API reference; at run time loaded on first use (below)
    from jaxrank.data.raters import (MEANS_ONLY, NO_SYSTEMS, PER_RATER, HumanCeiling, RaterScores, human_ceiling,
                                     rater_scores, system_ids)

__all__ = ["load_dataset", "label_matrix", "LabelMatrix", "data_dir", "ASPECTS", "DATASETS",
           "LLM_JUDGES", "LLMRatings", "load_llm_ratings", "match_systems",
           "from_records", "read_records", "dataset_name",
           "system_ids", "rater_scores", "human_ceiling", "HumanCeiling", "RaterScores", "PER_RATER", "MEANS_ONLY",
           "NO_SYSTEMS"]

# the raters' module imports JAX (the metrics) and SciPy: loaded on first use, so that `jaxrank.data` stays JAX-free
# for the command line's start-up (ARCHITECTURE.md, Imports)
_RATERS = ("system_ids", "rater_scores", "human_ceiling", "HumanCeiling", "RaterScores", "PER_RATER", "MEANS_ONLY",
           "NO_SYSTEMS")


def __getattr__(name):
    if name in _RATERS:
        import importlib

        return getattr(importlib.import_module("jaxrank.data.raters"), name)
    raise AttributeError(f"module 'jaxrank.data' has no attribute {name!r}")
