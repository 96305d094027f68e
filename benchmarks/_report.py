"""Shared by the benchmarks: a markdown + CSV writer, the machine's state, and interleaved timing.

    rep = Report("football_bt", smoke=args.smoke)      # results/football_bt[_smoke].{md,csv}
    rep.say("# Title"); rep.table(["method", "seconds"], rows); rep.row(part="x", method="y", seconds=1.0)
    rep.write()
"""

from __future__ import annotations

import csv
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def load() -> float:
    """The 1-minute load average (how many processes wanted a core)."""
    return os.getloadavg()[0]


def jaxrank_source() -> str:
    """Where jaxrank was imported from, with the commit and whether its files differ from it."""
    import jaxrank

    pkg = Path(jaxrank.__file__).resolve().parent
    try:
        git = lambda *a: subprocess.run(["git", "-C", str(pkg), *a], capture_output=True, text=True,
                                        check=True).stdout.strip()
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", str(pkg))
        return f"jaxrank from {pkg} (commit {head}{', with uncommitted changes' if dirty else ''})"
    except (subprocess.CalledProcessError, FileNotFoundError):
        return f"jaxrank from {pkg}"


def machine() -> str:
    import jax

    flags = os.environ.get("XLA_FLAGS", "")
    return (f"{os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}), Python "
            f"{platform.python_version()}, jax {jax.__version__} ({jax.default_backend()})"
            f"{', XLA_FLAGS=' + flags if flags else ''}; {jaxrank_source()}")


def interleaved(fns: dict, repeats: int):
    """Time every ``fns[name]()`` once per round, round after round (so load hits all alike).

    Returns ``{name: [seconds per round]}`` and ``[load average per round]``.
    """
    times = {k: [] for k in fns}
    loads = []
    for _ in range(repeats):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
        loads.append(load())
    return times, loads


def spread(ts, unit=1.0, fmt="{:.3f}") -> str:
    """``median [min, max]`` of ``ts`` (scaled by ``unit``)."""
    ts = np.asarray(ts) * unit
    return f"{fmt.format(np.median(ts))} [{fmt.format(ts.min())}, {fmt.format(ts.max())}]"


class Report:
    """Lines of markdown (printed as they come) and CSV rows, written to ``results/NAME[_smoke].{md,csv}``."""

    def __init__(self, name: str, *, smoke: bool = False, out: str | None = None):
        base = Path(out) if out else RESULTS / (name + ("_smoke" if smoke else ""))
        self.md, self.csv = base.with_suffix(".md"), base.with_suffix(".csv")
        self.lines: list[str] = []
        self.rows: list[dict] = []
        self.load_start = load()

    def say(self, text: str = ""):
        print(text, flush=True)
        self.lines.append(text)

    def table(self, header, rows):
        self.say("| " + " | ".join(header) + " |")
        self.say("|" + "|".join("---" if k == 0 else "---:" for k in range(len(header))) + "|")
        for r in rows:
            self.say("| " + " | ".join(str(x) for x in r) + " |")
        self.say()

    def row(self, **fields):
        self.rows.append(fields)

    def write(self):
        self.say(f"Load average (1 min) at the start {self.load_start:.2f}, at the end {load():.2f} "
                 f"(on {os.cpu_count()} cores; other jobs slow every row).")
        write_results(self.md.with_suffix(""), self.lines, self.rows)


def load_line() -> str:
    """The load average over 1, 5 and 15 minutes, as ``"a b c"``."""
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def _cell(v):
    return f"{v:.6g}" if isinstance(v, float) else v


def write_results(stem, lines, rows=None) -> list[Path]:
    """Write ``stem.md`` (the report's lines) and, with ``rows``, ``stem.csv`` (floats to 6 digits).

    The one writer of every benchmark (:class:`Report` uses it too).

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
    print("wrote " + " and ".join(str(p) for p in written), file=sys.stderr)
    return written
