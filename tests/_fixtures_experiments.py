"""What the tests of the experiment scripts share: a script loaded by path, and whether the HANNA release is
here (the tests that recompute a stored HANNA result by hand need it)."""

import importlib.util
from pathlib import Path

from jaxrank.data.loaders import data_dir

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


def load_experiment(name: str):
    """``experiments/<name>.py`` loaded by path as the module ``name`` (the experiments are scripts)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def have_hanna() -> bool:
    """Whether the HANNA release's LLM ratings are in the data folder."""
    try:
        return (data_dir() / "hanna" / "hanna_metric_scores_llm.csv").is_file()
    except FileNotFoundError:
        return False
