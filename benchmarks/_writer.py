"""The benchmarks' one result writer: the machine line, the load, and the ``.md`` / ``.csv`` files.

Every benchmark reports its figures with the machine and its load (a figure
without the load it was measured under cannot be compared), and writes a
Markdown report and, where it has rows, a CSV of them under
``benchmarks/results/``.
"""

from __future__ import annotations

import csv
import os
import platform
from pathlib import Path
from typing import Iterable, Mapping

RESULTS = Path(__file__).resolve().parent / "results"
"""Where the benchmarks write their results."""


def load() -> str:
    """The load average over 1, 5 and 15 minutes, as ``"a b c"``."""
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def machine() -> str:
    """One line naming the machine: processor, cores, Python, and JAX with its backend when imported."""
    parts = [f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores",
             f"Python {platform.python_version()}"]
    try:
        import jax
        import numpy as np

        parts.append(f"jax {jax.__version__} on {jax.devices()[0].platform}, numpy {np.__version__}")
    except ImportError:
        pass
    return "Machine: " + "; ".join(parts) + f"; load average {load()}."


def _cell(v):
    return f"{v:.6g}" if isinstance(v, float) else v


def write_results(stem: str | Path, lines: Iterable[str], rows: Iterable[Mapping] | None = None) -> list[Path]:
    """Write ``stem.md`` (the report's lines) and, with ``rows``, ``stem.csv`` (floats to 6 digits).

    Args:
        stem: path without suffix; a bare name goes under :data:`RESULTS`.
        lines: the Markdown report, one line per item.
        rows: dicts, one per CSV row; the header is the union of their keys in first-seen order.

    Returns:
        The paths written.
    """
    stem = Path(stem)
    if stem.parent == Path("."):
        stem = RESULTS / stem
    stem.parent.mkdir(parents=True, exist_ok=True)
    md = stem.with_suffix(".md")
    md.write_text("\n".join(lines) + "\n")
    written = [md]
    rows = list(rows or [])
    if rows:
        keys = list(dict.fromkeys(k for r in rows for k in r))
        with open(stem.with_suffix(".csv"), "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=keys)
            w.writeheader()
            for r in rows:
                w.writerow({k: _cell(v) for k, v in r.items()})
        written.append(stem.with_suffix(".csv"))
    print("wrote " + " and ".join(str(p) for p in written))
    return written
