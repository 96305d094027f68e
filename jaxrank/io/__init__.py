"""Reading comparison files (CSV, JSON Lines or a JSON array) or a pandas DataFrame into :class:`jaxrank.Comparisons`.

A source has one comparison per row, with columns for the item in position A,
the item in position B, and either a probability ``P(A better)`` or a hard
outcome, plus optional context and weight columns. Items are names (any
string or number); they are numbered per context in order of first appearance.
An item id is its text with surrounding blanks dropped (``" x"`` and ``"x"`` are
one item), a number written as Python writes it (the JSON number ``1`` and the
string ``"1"`` are one item, ``1.0`` another); a JSON object or array is no id.
A header naming a column twice, or two columns that differ only in case where
a column is looked up by its usual name, is an error.

The formats people already have are read without options:

* ours: ``item_a, item_b`` and ``p`` (a probability) or ``outcome``
  (``win``/``loss``/``tie``, ``a``/``b`` or 1/0/0.5);
* Chatbot Arena battles: ``model_a, model_b, winner`` with ``winner`` one of
  ``model_a``, ``model_b``, ``tie``, ``tie (bothbad)`` (both ties count half a win each way);
* evalica: ``left, right, winner`` with ``winner`` one of ``left``, ``right``, ``tie``.

An outcome may also name the winning item itself (``winner = "gpt-4"``), or the
column holding it. Outcome words are matched case-insensitively, an item's name
exactly first, else case-insensitively where that names one of the two items only
(``GPT`` against ``gpt``: only the exact spelling names either); two score columns
(e.g. goals) can be compared instead (``score_a=``, ``score_b=``: higher wins,
equal is a tie).

Files: UTF-8 text, a byte-order mark allowed; CSV with a comma, semicolon or
tab delimiter (the one most frequent in the header line, outside quotes),
``.jsonl``/``.ndjson`` (one JSON object a line) or ``.json`` (JSON Lines, one
JSON array of objects, or one pretty-printed object: one comparison). A CSV
header's names lose their surrounding blanks (``item_a, item_b``); a column
without a name that is empty on every row (a spreadsheet's trailing ``,,``) and a
row of empty fields are skipped (a value under an unnamed column is an error); a
field may be of any length. An item id or context holding a line break is an
error naming its lines (a stray ``"`` joins lines into one field). The columns
of a JSON source are the fields of all its records, in order of first appearance;
a record without a field that is read (which other records have) is an error.
Every error names the file (or ``DataFrame``) and the line (or row) it is about.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from jaxrank.io._rows import _blank, _item_id, comparisons_from_rows

if TYPE_CHECKING:  # imported once the rows are read: a malformed file is reported without importing JAX
    from jaxrank.comparisons import Comparisons

__all__ = ["ComparisonTable", "comparisons_from_rows", "csv_fields_unlimited", "csv_header", "read_comparisons", "read_text"]

_DEFAULTS = {
    "item_a": ("item_a", "a", "model_a", "left", "i", "candidate_a"),
    "item_b": ("item_b", "b", "model_b", "right", "j", "candidate_b"),
    "p": ("p", "prob", "probability", "p_a"),
    "outcome": ("outcome", "winner", "result", "decision"),
    "context": ("context", "context_id"),
    "weight": ("weight", "w"),
}
"""Column names tried, in order and case-insensitively, for each role when it is not given."""

_OUTCOMES = {
    **dict.fromkeys(("win", "a", "model_a", "left", "item_a", "1", "1.0"), 1.0),
    **dict.fromkeys(("loss", "b", "model_b", "right", "item_b", "0", "0.0"), 0.0),
    **dict.fromkeys(("tie", "draw", "tie (bothbad)", "0.5"), 0.5),
}
"""Hard outcomes (lower-cased) -> P(A better); see the module docstring for the formats."""


@dataclass
class ComparisonTable:
    """Comparisons read from a file: one padded batch plus the names behind the indices.

    Attributes:
        comparisons: batch ``[num_contexts, R]`` over ``[num_contexts, N]`` items.
        contexts: context names, in order of first appearance (``[""]`` without a context column).
        items: per context, the item names; index ``n`` is item ``n``.
    """

    comparisons: Comparisons
    contexts: list[str]
    items: list[list[str]]


@dataclass
class _Source:
    """Rows of a file or DataFrame: ``label`` for messages, the columns, ``(where, row)`` pairs."""

    label: str
    columns: list[str]
    rows: Iterator[tuple[str, dict[str, Any]]]


# ---------------------------------------------------------------------- files


def read_text(path: str | os.PathLike) -> str:
    """A data file as text: UTF-8 (a byte-order mark is dropped). A binary file (a NUL byte), UTF-16 or
    UTF-32 text (told by its byte-order mark) or another encoding is a ``ValueError`` naming the file, the
    line and the byte, and saying what to do."""
    path = Path(path)
    data = path.read_bytes()
    if data.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):
        raise ValueError(f"{path}: UTF-16 or UTF-32 text (it starts with that byte-order mark), not UTF-8; save it "
                         "as UTF-8 (e.g. iconv -f utf-16 -t utf-8, or 'CSV UTF-8' in a spreadsheet)")
    nul = data.find(b"\0")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        wide = " (every other byte NUL: UTF-16 text without a byte-order mark? save it as UTF-8)" \
            if data[:200].count(b"\0") * 3 >= len(data[:200]) else ""
        raise ValueError(f"{path}, line {line}: not a text file (a NUL byte){wide}; expected UTF-8 CSV or JSON "
                         "Lines")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{path}, line {line}: not UTF-8 text (byte 0x{data[e.start]:02x}, which UTF-8 does "
                         "not allow there: the file is in another encoding, e.g. Latin-1 or Windows-1252); save it "
                         "as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None


def _delimiter(header: str) -> str:
    """The most frequent of comma, semicolon and tab in ``header`` outside quotes (comma on a tie or none)."""
    bare = re.sub(r'"[^"]*"', "", header)
    counts = {d: bare.count(d) for d in (",", ";", "\t")}
    best = max(counts, key=counts.get)
    return best if counts[best] else ","


@contextlib.contextmanager
def csv_fields_unlimited():
    """Within the block, a CSV field may be of any length (Python's ``csv`` refuses one over 131,072
    characters, a long text); the limit in force before is restored after it."""
    old = csv.field_size_limit(min(sys.maxsize, 2 ** 31 - 1))
    try:
        yield
    finally:
        csv.field_size_limit(old)


def csv_header(path: str | os.PathLike, text: str, header_at: str, *,
               delimiter: str = ",") -> tuple[csv.DictReader, list[str]]:
    """A ``csv.DictReader`` over the CSV ``text`` of the file ``path``, and its header row's column names.

    Read the rows within :func:`csv_fields_unlimited` (the header is read so here).

    Args:
        path: the file, as errors name it.
        text: its text (:func:`read_text`).
        header_at: how errors name the header's place (``"f.csv, line 1"``).
        delimiter: the field delimiter.

    Raises:
        ValueError: a malformed header (naming ``header_at``), or no header row (an empty file).
    """
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        with csv_fields_unlimited():
            columns = reader.fieldnames
    except csv.Error as e:
        raise ValueError(f"{header_at}: malformed header ({e})") from None
    if not columns:
        raise ValueError(f"{path}: empty file (no header row)")
    return reader, columns


def _csv_source(path: Path, text: str) -> _Source:
    header = text.split("\n", 1)[0]
    reader, columns = csv_header(path, text, f"{path}, line 1", delimiter=_delimiter(header))
    columns = [c.strip() for c in columns]        # "item_a, item_b": the names without their blanks
    dupes = sorted({c for c in columns if c and columns.count(c) > 1})
    if dupes:
        raise ValueError(f"{path}, line 1: column(s) {dupes} appear more than once in the header; "
                         "rename them so each column has one name")
    # a column without a name (a spreadsheet's trailing ",,"): a key of its own, checked empty and dropped
    unnamed = {f"\0column {k + 1}": k + 1 for k, c in enumerate(columns) if not c}
    names = iter(unnamed)
    reader.fieldnames = [c or next(names) for c in columns]
    named = [c for c in columns if c]

    def rows():
        ln = 1
        with csv_fields_unlimited():
            try:
                for row in reader:
                    # the row's lines: it ends on the reader's line; a quoted field may span lines before it
                    first, ln = ln + 1, reader.line_num
                    first = max(first, ln - sum(v.count("\n") for v in row.values() if isinstance(v, str)))
                    lines = f"line {ln}" if first >= ln else f"lines {first}-{ln}"
                    if None in row:
                        raise ValueError(f"{path}, {lines}: {len(columns) + len(row[None])} fields, "
                                         f"more than the header's {len(columns)}")
                    if None in row.values():
                        given = sum(v is not None for v in row.values())
                        if any("\n" in v for v in row.values() if isinstance(v, str)):
                            raise ValueError(f"{path}, line {first}: unterminated quote: a field opened with \" runs on "
                                             "past the end of its line; close it or drop the stray quote")
                        raise ValueError(f"{path}, {lines}: {given} field(s), fewer than the header's {len(columns)}")
                    if all(not v.strip() for v in row.values()):
                        continue                  # a row of empty fields (a spreadsheet's ",,,"): no comparison
                    for key, k in unnamed.items():
                        if row.pop(key).strip():
                            raise ValueError(f"{path}, {lines}: a value in column {k}, which has no name in the "
                                             "header; name the column (or delete the value)")
                    yield f"{path}, {lines}", row
            except csv.Error as e:
                raise ValueError(f"{path}, line {reader.line_num or ln}: malformed CSV ({e})") from None

    return _Source(str(path), named, rows())


def _no_repeated_keys(pairs):
    """``object_pairs_hook`` for ``json.loads``: a field named twice in one record is an error (JSON keeps the
    last one without a word)."""
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError(f"field {k!r} appears twice in one record")
        seen[k] = v
    return seen


def _json_source(path: Path, text: str) -> _Source:
    if not text.strip():
        raise ValueError(f"{path}: empty file (no records)")
    if path.suffix.lower() == ".json" and text.lstrip().startswith("{") and "\n" in text.strip():
        try:                                     # one pretty-printed object (not JSON Lines): one record
            one = json.loads(text)
        except json.JSONDecodeError:
            one = None
        if isinstance(one, dict):
            text = "[" + text + "]"
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        try:
            records = json.loads(text, object_pairs_hook=_no_repeated_keys)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}, line {e.lineno}: not valid JSON ({e.msg})") from None
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
        located = [(f"{path}, record {k}", r) for k, r in enumerate(records)]
    else:
        located = []
        # lines end at "\n" only (a trailing "\r" dropped): str.splitlines() also split them at U+2028, U+0085
        # and other characters JSON allows unescaped inside a string
        for ln, line in enumerate(text.split("\n"), 1):
            line = line.removesuffix("\r")
            if not line.strip():
                continue
            try:
                located.append((f"{path}, line {ln}", json.loads(line, object_pairs_hook=_no_repeated_keys)))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}, line {ln}: not valid JSON ({e.msg})") from None
            except ValueError as e:
                raise ValueError(f"{path}, line {ln}: {e}") from None
    for where, r in located:
        if not isinstance(r, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(r).__name__}")
    # every record's fields, in order of first appearance (the first record's alone dropped later records'
    # weight or context without a word)
    columns = list(dict.fromkeys(k for _, r in located for k in r))
    return _Source(str(path), columns, iter(located))


def _file_source(path: Path) -> _Source:
    if path.is_dir():
        raise ValueError(f"{path} is a directory; give the comparison file itself")
    if path.exists() and not path.is_file():
        raise ValueError(f"{path} is not a regular file (a pipe or a device); save the comparisons to a file")
    if not path.is_file():
        raise FileNotFoundError(f"comparison file not found: {path}")
    text = read_text(path)
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return _json_source(path, text)
    return _csv_source(path, text)


def _is_dataframe(x) -> bool:
    """True for a pandas DataFrame, told without importing pandas."""
    return type(x).__module__.split(".")[0] == "pandas" and type(x).__name__ == "DataFrame"


def _frame_source(df) -> _Source:
    columns = [str(c) for c in df.columns]
    if len(set(columns)) != len(columns):
        raise ValueError(f"DataFrame: duplicate column names in {columns}")
    frame = df.set_axis(columns, axis=1)

    def rows():
        for k, (index, rec) in enumerate(zip(frame.index, frame.to_dict("records"))):
            yield f"DataFrame, row {k} (index {index!r})", rec

    return _Source("DataFrame", columns, rows())


# ---------------------------------------------------------------------- columns and fields


def _pick(source: _Source, given, role, required):
    if given is not None:
        if given not in source.columns:
            raise ValueError(f"{source.label}: column {given!r} (for {role}) is not there; "
                             f"columns: {source.columns}")
        return given
    lower = {c.lower(): c for c in reversed(source.columns)}
    for name in _DEFAULTS[role]:
        if name in lower:
            same = [c for c in source.columns if c.lower() == name]
            if len(same) > 1:
                raise ValueError(f"{source.label}: columns {same} differ only in case; which is {role}? "
                                 "pass it explicitly")
            return lower[name]
    if required:
        raise ValueError(f"{source.label}: no column for {role}: pass it explicitly (tried {_DEFAULTS[role]}); "
                         f"columns: {source.columns}")
    return None


def _one_line(where, field, value, what):
    """An item id or context is one line (a stray ``"`` in a CSV file joins the rows after it into one field)."""
    if "\n" in value or "\r" in value:
        raise ValueError(f"{where}: field {field!r} = {value!r} holds a line break, which {what} may not; in a CSV "
                         "file a stray \" opens a field that runs on over the next lines: close it or drop it")


def _number(where, field, value):
    if isinstance(value, (float, np.floating)) and np.isnan(value):
        raise ValueError(f"{where}: field {field!r} is NaN, not a finite number")
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{where}: field {field!r} = {value!r} is a JSON boolean, not a number")
    if _blank(value):
        raise ValueError(f"{where}: field {field!r} is empty")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: field {field!r} = {value!r} is not a number") from None
    if not np.isfinite(x):
        raise ValueError(f"{where}: field {field!r} = {value!r} is not finite")
    return x


def _outcome(where, field, value, name_a, name_b, outcomes):
    if _blank(value):
        raise ValueError(f"{where}: field {field!r} is empty")
    raw = str(value).strip()
    key = raw.lower()
    # an item's name: its exact spelling first, else case-insensitively where that names one item only
    names = {name_a.strip(): 1.0, name_b.strip(): 0.0}
    if raw in names:
        by_name = names[raw]
    else:
        folded = [v for name, v in names.items() if name.lower() == key]
        if len(folded) > 1:
            raise ValueError(f"{where}: field {field!r} = {value!r} is ambiguous: it names neither {name_a!r} nor "
                             f"{name_b!r} exactly, and both when case is ignored; write the winner as its item is "
                             "written")
        by_name = folded[0] if folded else None
    if key in outcomes:
        if by_name is not None and by_name != outcomes[key]:
            raise ValueError(f"{where}: field {field!r} = {value!r} is ambiguous: an outcome word for "
                             f"P(A better) = {outcomes[key]:g}, and the name of the other item")
        return outcomes[key]
    if by_name is not None:
        return by_name
    raise ValueError(f"{where}: field {field!r} = {value!r}; expected win/loss/tie, a/b, 1/0/0.5, "
                     f"model_a/model_b/tie (bothbad), left/right, or the winning item's name")


def read_comparisons(source, *, item_a=None, item_b=None, p=None, outcome=None, score_a=None,
                     score_b=None, context=None, weight=None) -> ComparisonTable:
    """Read comparisons from a CSV/JSON file or a pandas DataFrame (formats: see the module docstring).

    Args:
        source: a path (``.csv``/``.tsv``/``.txt``, or ``.jsonl``/``.ndjson``/``.json``) or a
            pandas DataFrame (one comparison a row; pandas is not imported for a path).
        item_a, item_b: columns naming the items in positions A and B (default: the first
            of ``item_a, a, model_a, left, i, candidate_a`` there, likewise for B).
        p: probability column (default ``p``/``prob``/``probability``/``p_a``). At most one of
            ``p``, ``outcome`` and ``score_a``/``score_b`` is given.
        outcome: hard-outcome column (default ``outcome``/``winner``/``result``/``decision``);
            values as in the module docstring.
        score_a, score_b: two numeric columns compared to give the outcome
            (e.g. goals: higher wins, equal is a tie).
        context: optional context column (one ranking per context).
        weight: optional non-negative weight column (float32: a positive weight from about 1.2e-38
            to 3.4e38).

    Returns:
        :class:`ComparisonTable`; with ``P(A better) = 1, 0, 0.5`` for a win, loss, tie.

    Raises:
        ValueError: naming the file (or ``DataFrame``) and the line (or row) of the first
            malformed value, a missing column, a binary or non-UTF-8 file.
        FileNotFoundError: if ``source`` is a path that does not exist.
    """
    if _is_dataframe(source):
        src = _frame_source(source)
    elif isinstance(source, (str, os.PathLike)):
        src = _file_source(Path(source))
    else:
        raise ValueError(f"source must be a file path or a pandas DataFrame, got {type(source).__name__}")
    if (score_a is None) != (score_b is None):
        raise ValueError("score_a and score_b go together: pass both or neither")
    given = [k for k, v in (("p", p), ("outcome", outcome), ("score_a/score_b", score_a)) if v is not None]
    if len(given) > 1:
        raise ValueError(f"{' and '.join(given)} are {'both' if len(given) == 2 else 'all'} given; pass one of them (a probability column, a "
                         "hard-outcome column, or two score columns)")
    ca = _pick(src, item_a, "item_a", True)
    cb = _pick(src, item_b, "item_b", True)
    cp = co = None
    if score_a is not None:
        for role, s in (("score_a", score_a), ("score_b", score_b)):
            _pick(src, s, role, True)
    else:
        cp = _pick(src, p, "p", False) if outcome is None else None
        co = _pick(src, outcome, "outcome", False) if cp is None else None
        if cp is None and co is None:
            raise ValueError(f"{src.label}: no probability or outcome column; pass p=, outcome= or "
                             f"score_a=/score_b=; columns: {src.columns}")
    cc = _pick(src, context, "context", False)
    cw = _pick(src, weight, "weight", False)
    used = [c for c in dict.fromkeys((ca, cb, cp, co, score_a, score_b, cc, cw)) if c is not None]
    outcomes = dict(_OUTCOMES)
    outcomes.update({ca.lower(): 1.0, cb.lower(): 0.0})

    per_ctx: dict[str, dict] = {}
    for where, row in src.rows:
        if len(row) < len(src.columns):           # a JSON record without a field that other records have
            lacking = [c for c in used if c not in row]
            if lacking:
                raise ValueError(f"{where}: no field {lacking[0]!r}, which other records have; give it in every "
                                 "record")
        name_a, name_b = row.get(ca), row.get(cb)
        for field, v in ((ca, name_a), (cb, name_b)):
            if _blank(v):
                raise ValueError(f"{where}: field {field!r} is empty")
        for field, v in ((ca, name_a), (cb, name_b)):
            if isinstance(v, (dict, list)):
                raise ValueError(f"{where}: field {field!r} = {v!r} is a JSON {type(v).__name__}; an item id is "
                                 "a string or a number")
        try:
            name_a, name_b = _item_id(name_a), _item_id(name_b)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        for field, v in ((ca, name_a), (cb, name_b)):
            _one_line(where, field, v, "an item id")
        if name_a == name_b:
            raise ValueError(f"{where}: item {name_a!r} is compared with itself")
        if score_a is not None:
            xa, xb = _number(where, score_a, row.get(score_a)), _number(where, score_b, row.get(score_b))
            prob = 1.0 if xa > xb else (0.0 if xa < xb else 0.5)
        elif cp is not None:
            prob = _number(where, cp, row.get(cp))
            if not 0.0 <= prob <= 1.0:
                raise ValueError(f"{where}: field {cp!r} = {row.get(cp)!r} is outside [0, 1]")
        else:
            prob = _outcome(where, co, row.get(co), name_a, name_b, outcomes)
        w = 1.0
        if cw is not None:
            w = _number(where, cw, row.get(cw))
            if w < 0:
                raise ValueError(f"{where}: field {cw!r} = {row.get(cw)!r} is negative")
            if w > float(np.finfo(np.float32).max):
                raise ValueError(f"{where}: field {cw!r} = {row.get(cw)!r} is too large (weights are float32, "
                                 f"at most {np.finfo(np.float32).max:.3g}); rescale the weights")
            if 0 < w < float(np.finfo(np.float32).tiny):
                raise ValueError(f"{where}: field {cw!r} = {row.get(cw)!r} is too small (weights are float32: a "
                                 f"positive one is at least {np.finfo(np.float32).tiny:.3g}, else it would be 0); "
                                 "rescale the weights, or write 0")
        ctx = ""
        if cc is not None:
            if _blank(row.get(cc)):
                raise ValueError(f"{where}: field {cc!r} is empty")
            ctx = str(row.get(cc)).strip()
            _one_line(where, cc, ctx, "a context")
        d = per_ctx.setdefault(ctx, {"items": {}, "i": [], "j": [], "p": [], "w": []})
        idx = d["items"]
        d["i"].append(idx.setdefault(name_a, len(idx)))
        d["j"].append(idx.setdefault(name_b, len(idx)))
        d["p"].append(prob)
        d["w"].append(w)
    if not per_ctx:
        raise ValueError(f"{src.label}: no comparisons (no rows after the header)")
    if cw is not None and not any(w > 0 for d in per_ctx.values() for w in d["w"]):
        raise ValueError(f"{src.label}: every comparison has weight 0 in column {cw!r}: nothing to rank")

    from jaxrank.comparisons import Comparisons, stack_contexts  # deliberately lazy: reading a file needs no JAX

    sets = [Comparisons.from_pairs(np.array(d["i"]), np.array(d["j"]), np.array(d["p"], np.float32),
                                   num_items=len(d["items"]), weight=np.array(d["w"], np.float32))
            for d in per_ctx.values()]
    return ComparisonTable(stack_contexts(sets), list(per_ctx), [list(d["items"]) for d in per_ctx.values()])
