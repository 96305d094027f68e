"""Human-annotated NLG meta-evaluation data sets (SummEval, TopicalChat, HANNA, ...).

See :mod:`jaxrank.data.loaders` for the shared schema and per-data-set details.
"""

from jaxrank.data.loaders import (
    ASPECTS,
    DATASETS,
    LabelMatrix,
    data_dir,
    label_matrix,
    load_dataset,
)
from jaxrank.data.hanna_llm import LLM_JUDGES, LLMRatings, load_llm_ratings, match_systems

__all__ = ["load_dataset", "label_matrix", "LabelMatrix", "data_dir", "ASPECTS", "DATASETS",
           "LLM_JUDGES", "LLMRatings", "load_llm_ratings", "match_systems"]
