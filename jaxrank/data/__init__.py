"""Human-annotated NLG meta-evaluation data sets (SummEval, TopicalChat, HANNA, ...), and your own texts.

See :mod:`jaxrank.data.loaders` for the shared schema and per-data-set details, and
:mod:`jaxrank.data.records` for a data set of your own texts (:func:`from_records`,
:func:`read_records`).
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

__all__ = ["load_dataset", "label_matrix", "LabelMatrix", "data_dir", "ASPECTS", "DATASETS",
           "LLM_JUDGES", "LLMRatings", "load_llm_ratings", "match_systems",
           "from_records", "read_records", "dataset_name"]
