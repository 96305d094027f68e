"""A tiny data set in jaxrank's schema for the command-line and pipeline tests (no files read)."""

import datasets
import numpy as np


def summary_dataset(human) -> datasets.Dataset:
    """Contexts ``doc{c}`` ("article c") with candidates ``s{n}`` ("summary n of article c").

    Args:
        human: ``[C, N]`` human scores, stored as ``coherence``.
    """
    human = np.asarray(human, np.float64)
    rows = {k: [] for k in ("context_id", "context", "candidate_id", "candidate", "reference", "coherence")}
    for c in range(human.shape[0]):
        for n in range(human.shape[1]):
            rows["context_id"].append(f"doc{c}")
            rows["context"].append(f"article {c}")
            rows["candidate_id"].append(f"s{n}")
            rows["candidate"].append(f"summary {n} of article {c}")
            rows["reference"].append("")
            rows["coherence"].append(float(human[c, n]))
    return datasets.Dataset.from_dict(rows)
