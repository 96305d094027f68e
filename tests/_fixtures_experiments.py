"""What the tests of the scripts (experiments, benchmarks, the docs' hooks) share: a script loaded by path,
and whether the HANNA release is here (the tests that recompute a stored HANNA result by hand need it)."""

import importlib.util
import sys
from pathlib import Path

from jaxrank.data.loaders import data_dir

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"


def load_script(path, name: str | None = None):
    """The script at ``path`` (relative to the repository or absolute) loaded as a module named ``name`` (default:
    its stem), with the script's folder on ``sys.path`` while it runs (scripts import their siblings:
    ``experiments/_common.py``, ``benchmarks/_vec_peers.py``)."""
    path = Path(path) if Path(path).is_absolute() else ROOT / path
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(path.parent))
    return mod


def load_experiment(name: str):
    """``experiments/<name>.py`` loaded by path as the module ``name`` (the experiments are scripts)."""
    return load_script(ROOT / "experiments" / f"{name}.py", name)


def have_hanna() -> bool:
    """Whether the HANNA release's LLM ratings are in the data folder."""
    try:
        return (data_dir() / "hanna" / "hanna_metric_scores_llm.csv").is_file()
    except FileNotFoundError:
        return False
