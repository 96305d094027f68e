"""Your own texts as a data set: :func:`from_records` (Python) and :func:`read_records` (a file).

The result is the same kind of :class:`datasets.Dataset` that :func:`jaxrank.data.load_dataset`
returns for the built-in data sets, so :func:`jaxrank.data.label_matrix`,
:func:`jaxrank.assessment.contexts_of` and the whole pipeline take it as they are.

One record per candidate:

========================  ==============================================================
field                     meaning
========================  ==============================================================
``context_id``            id of the context (the article, question or prompt); required
``context``               its text; required as a column, may be empty (given once per
                          context is enough: every row of one context must agree)
``candidate_id``          id of the candidate within its context; required
``candidate``             the text to judge; required, not empty
``reference``             optional text (a reference answer), ``""`` where absent
``score``                 optional human score (a number; empty: no score for that row)
any other numeric field   another human score, named as an aspect (``fluency``, ...)
========================  ==============================================================

Ids are text (the number ``1`` is the id ``"1"``). Contexts keep the order of their first row,
candidates their row order. A field of text that is not a number in any row is left out
(notes, a system name); a field mixing numbers and text is an error, as is a non-numeric
``score``, a duplicated ``(context_id, candidate_id)`` pair and a context with a single
candidate. Every error names the row (the record's index, or the file and its line) and the field.

Files (:func:`read_records`): ``.csv`` (comma-separated, a header row, UTF-8; a header separated by
semicolons or tabs is an error saying so; column names are read without surrounding blanks; a column
without a name that is empty on every row and a row of empty fields are skipped; a field may be of any
length), ``.jsonl`` / ``.ndjson`` (one JSON object a line), ``.json`` (a JSON array of objects,
one pretty-printed object, or JSON Lines) and ``.parquet``. A JSON record naming a field twice is an error. :func:`dataset_name` names a file's data set by its stem and a hash of its bytes,
so that two files never share stored judgements.

Example:
    >>> ds = from_records([
    ...     {"context_id": "q1", "context": "Why is the sky blue?", "candidate_id": "a", "candidate": "Rayleigh."},
    ...     {"context_id": "q1", "context": "Why is the sky blue?", "candidate_id": "b", "candidate": "It is."},
    ... ])
    >>> ds.column_names
    ['context_id', 'context', 'candidate_id', 'candidate', 'reference']
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jaxrank.io import csv_fields_unlimited, csv_header, read_text

if TYPE_CHECKING:  # imported when a data set is built: reading and checking the rows needs no `datasets`
    import datasets

__all__ = ["REQUIRED", "FILE_SUFFIXES", "from_records", "read_records", "dataset_name", "is_data_file"]

REQUIRED = ("context_id", "context", "candidate_id", "candidate")
"""The fields every record must have."""

FILE_SUFFIXES = (".csv", ".jsonl", ".ndjson", ".json", ".parquet")
"""The file suffixes :func:`read_records` reads."""

_TEXT = REQUIRED + ("reference",)

Located = tuple[str, Mapping[str, Any]]


def is_data_file(spec: str | os.PathLike) -> bool:
    """True when ``spec`` names an existing file with one of :data:`FILE_SUFFIXES`."""
    p = Path(spec)
    return p.suffix.lower() in FILE_SUFFIXES and p.is_file()


def dataset_name(path: str | os.PathLike) -> str:
    """The name of a file's data set: its stem (letters, digits, ``.``, ``_``, ``-`` kept) and the first 12
    hex digits of the SHA-256 of its bytes, e.g. ``"my_texts-3f9a0c21b7d4"``. Two files with other bytes
    never share a name (nor the judgement store named after it); the same bytes always have the same one."""
    p = Path(path)
    digest = hashlib.sha256(p.read_bytes()).hexdigest()[:12]
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", p.stem).strip("._") or "data"
    return f"{stem}-{digest}"


# --------------------------------------------------------------------------- values


def _blank(v) -> bool:
    """None, NaN, pandas' NA/NaT, or a string of blanks."""
    if v is None or type(v).__name__ in ("NAType", "NaTType"):
        return True
    if isinstance(v, float):
        return math.isnan(v)
    if type(v).__module__ == "numpy" and hasattr(v, "dtype") and v.dtype.kind == "f":
        return bool(v != v)
    return isinstance(v, str) and not v.strip()


def _as_number(v) -> float | None:
    """``v`` as a finite float, NaN for a blank, ``None`` when it is not a number."""
    if _blank(v):
        return math.nan
    if isinstance(v, bool) or type(v).__name__ == "bool_":
        return None
    if isinstance(v, str):
        text = v.strip()
        if text.lower() in ("nan", "na", "n/a", "null", "none"):
            return math.nan
        try:
            x = float(text)
        except ValueError:
            return None
    else:
        try:
            x = float(v)
        except (TypeError, ValueError):
            return None
    return x if math.isfinite(x) else None


def _text(where: str, field: str, v) -> str:
    if isinstance(v, (dict, list, tuple)):
        raise ValueError(f"{where}: field {field!r} is a {type(v).__name__}, not text")
    return "" if _blank(v) else str(v)


def _id(where: str, field: str, v) -> str:
    text = _text(where, field, v).strip()
    if not text:
        raise ValueError(f"{where}: field {field!r} is empty (every row needs a {field})")
    return text


# --------------------------------------------------------------------------- records -> data set


def _located(records, source: str) -> tuple[list[str] | None, Iterable[Located]]:
    """``(columns or None, (where, record) pairs)`` of any supported table or iterable."""
    kind = type(records).__module__.split(".")[0], type(records).__name__
    if kind == ("pandas", "DataFrame"):
        columns = [str(c) for c in records.columns]
        frame = records.set_axis(columns, axis=1)
        return columns, ((f"{source}, row {k} (index {index!r})", rec)
                         for k, (index, rec) in enumerate(zip(frame.index, frame.to_dict("records"))))
    if kind[0] == "pyarrow" and hasattr(records, "to_pylist"):          # a pyarrow Table or RecordBatch
        return list(records.column_names), ((f"{source}, row {k}", rec) for k, rec in enumerate(records.to_pylist()))
    if kind == ("datasets", "Dataset"):
        return list(records.column_names), ((f"{source}, row {k}", rec) for k, rec in enumerate(records))
    if isinstance(records, Mapping):                                      # columns -> values
        columns = [str(c) for c in records]
        values = [list(v) if not isinstance(v, str) else None for v in records.values()]
        if any(v is None for v in values):
            raise ValueError(f"{source}: a mapping of columns needs a sequence of values per column")
        lengths = {len(v) for v in values}
        if len(lengths) > 1:
            raise ValueError(f"{source}: the columns have different lengths {sorted(lengths)}")
        n = lengths.pop() if lengths else 0
        return columns, ((f"{source}, row {k}", dict(zip(columns, (v[k] for v in values)))) for k in range(n))
    if isinstance(records, (str, bytes, os.PathLike)):
        raise ValueError(f"{source}: from_records takes records (dicts), not a file name; "
                         "use jaxrank.data.read_records(path) for a file")
    try:
        it = iter(records)
    except TypeError:
        raise ValueError(f"records must be an iterable of dicts, a pandas DataFrame or a pyarrow Table, "
                         f"got {type(records).__name__}") from None
    return None, ((f"{source}, record {k}", rec) for k, rec in enumerate(it))


def _missing_field(where: str, field: str, present) -> ValueError:
    near = [c for c in present if str(c).strip().lower() == field]
    hint = f" ({near[0]!r} is there: rename it {field!r})" if near else ""
    return ValueError(f"{where}: no {field!r} field{hint}; every row needs "
                      f"{', '.join(REQUIRED)} (and optionally reference, score); it has: "
                      f"{', '.join(map(str, present)) or 'nothing'}")


def _build(located: Iterable[Located], columns: list[str] | None, source: str,
           scores: Iterable[str] | None, header: str = "the columns") -> datasets.Dataset:
    import datasets   # deferred: seconds to import; the checks above need none of it

    if columns is not None:
        dupes = sorted({c for c in columns if columns.count(c) > 1})
        if dupes:
            raise ValueError(f"{source}: column(s) {dupes} appear more than once; give each column one name")
        for field in REQUIRED:
            if field not in columns:
                raise _missing_field(f"{source}: {header}", field, columns)
    rows: list[tuple[str, Mapping[str, Any]]] = []
    extra: dict[str, None] = {}
    for where, rec in located:
        if not isinstance(rec, Mapping):
            raise ValueError(f"{where}: expected a record (a dict of fields), got {type(rec).__name__}")
        for field in REQUIRED:
            if field not in rec:
                raise _missing_field(where, field, list(rec))
        for key in rec:
            if key not in _TEXT:
                extra.setdefault(str(key), None)
        rows.append((where, rec))
    if not rows:
        raise ValueError(f"{source}: no records")

    # which extra fields are scores: the ones asked for, else `score` and every field holding only numbers
    asked = None if scores is None else [str(s) for s in ([scores] if isinstance(scores, str) else scores)]
    if asked is not None:
        for s in asked:
            if s in _TEXT:
                raise ValueError(f"scores: {s!r} is a text field, not a score")
            if s not in extra:
                raise ValueError(f"{source}: no score field {s!r}; fields besides the texts: "
                                 f"{', '.join(extra) or 'none'}")
    score_fields = []
    for field in (asked if asked is not None else extra):
        values = [(where, rec.get(field)) for where, rec in rows]
        parsed = [(where, v, _as_number(v)) for where, v in values]
        bad = [(where, v) for where, v, x in parsed if x is None]
        numbers = sum(1 for _, _, x in parsed if x is not None and not math.isnan(x))
        must = asked is not None or field == "score"
        if not bad:
            if numbers or must:
                score_fields.append(field)
            continue
        if must or numbers:
            where, v = bad[0]
            why = ("a human score must be a number (empty for none)" if must else
                   "the field mixes numbers and text, so it is neither a score nor a note; "
                   "pass scores=[...] to name the score fields")
            raise ValueError(f"{where}: {field!r} = {v!r} is not a number: {why}")
        # text in every row: a note (a system name, a comment), left out

    groups: dict[str, list[dict]] = {}
    seen: dict[tuple[str, str], str] = {}
    context_text: dict[str, tuple[str, str]] = {}
    for where, rec in rows:
        cid = _id(where, "context_id", rec["context_id"])
        cand = _id(where, "candidate_id", rec["candidate_id"])
        text = _text(where, "candidate", rec["candidate"])
        if not text.strip():
            raise ValueError(f"{where}: field 'candidate' is empty (context {cid!r}, candidate {cand!r}): "
                             "there is no text to judge")
        if (cid, cand) in seen:
            raise ValueError(f"{where}: candidate {cand!r} of context {cid!r} appears twice (first at "
                             f"{seen[(cid, cand)]}); each (context_id, candidate_id) pair is one candidate")
        seen[(cid, cand)] = where
        ctx = _text(where, "context", rec["context"])
        if ctx:
            first = context_text.setdefault(cid, (ctx, where))
            if first[0] != ctx:
                raise ValueError(f"{where}: context {cid!r} has another text than at {first[1]}; one "
                                 "context_id is one context text (give it once, or the same on every row)")
        row = {"context_id": cid, "context": "", "candidate_id": cand, "candidate": text,
               "reference": _text(where, "reference", rec.get("reference"))}
        row.update({f: _as_number(rec.get(f)) for f in score_fields})
        row["_where"] = where
        groups.setdefault(cid, []).append(row)
    ordered = []
    for cid, members in groups.items():
        if len(members) < 2:
            raise ValueError(f"{members[0]['_where']}: context {cid!r} has one candidate "
                             f"({members[0]['candidate_id']!r}); a comparison needs two or more")
        for row in members:
            del row["_where"]
            row["context"] = context_text.get(cid, ("", ""))[0]
            ordered.append(row)
    features = datasets.Features({c: datasets.Value("string") for c in _TEXT}
                                 | {f: datasets.Value("float64") for f in score_fields})
    return datasets.Dataset.from_list(ordered, features=features)


def from_records(records, *, scores: Iterable[str] | str | None = None,
                 source: str = "records") -> datasets.Dataset:
    """Builds a data set of your own texts, in the schema of :func:`jaxrank.data.load_dataset`.

    Args:
        records: one record per candidate (see the module docstring for the fields): an iterable of
            dicts, a pandas ``DataFrame``, a pyarrow ``Table``, a ``datasets.Dataset`` or a mapping
            of column name to values.
        scores: the fields holding human scores. Default: ``score`` and every other field
            whose values are all numbers (or empty); fields of text are left out.
        source: what the error messages call the records.

    Returns:
        A :class:`datasets.Dataset` with the text columns ``context_id``, ``context``,
        ``candidate_id``, ``candidate``, ``reference`` and one float64 column per score field
        (NaN where a row has no score), ordered by context (first appearance) then row.

    Raises:
        ValueError: naming the row and the field: a missing field, an empty id or candidate,
            a non-numeric score, a duplicated ``(context_id, candidate_id)`` pair, a context
            with one candidate, two texts for one context, no records.
    """
    columns, located = _located(records, source)
    return _build(located, columns, source, scores)


# --------------------------------------------------------------------------- files



def _not_commas(path: Path, text: str, columns: list[str]) -> None:
    """A header that lacks a required field and is separated by semicolons or tabs rather than commas: an error
    saying so (read with commas it is one or a few columns that each hold several names)."""
    if all(field in columns for field in REQUIRED):
        return
    bare = re.sub(r'"[^"]*"', "", text.split("\n", 1)[0])
    counts = {";": bare.count(";"), "\t": bare.count("\t")}
    other = max(counts, key=counts.get)
    if counts[other] > bare.count(","):
        name = "semicolons" if other == ";" else "tabs"
        raise ValueError(f"{path}: line 1: the header is separated by {name}, not commas; a .csv data file is "
                         "comma-separated: save it with commas (or as .jsonl)")


def _csv_rows(path: Path, text: str) -> tuple[list[str], list[Located]]:
    reader, columns = csv_header(path, text, f"{path}: line 1")
    columns = [c.strip() for c in columns]
    _not_commas(path, text, columns)
    # a column without a name (a spreadsheet's trailing ",,"): a key of its own, checked empty and dropped
    unnamed = {f"\0column {k + 1}": k + 1 for k, c in enumerate(columns) if not c}
    names = iter(unnamed)
    reader.fieldnames = [c or next(names) for c in columns]
    rows = []
    with csv_fields_unlimited():
        try:
            for rec in reader:
                where = f"{path}: line {reader.line_num}"
                if None in rec:
                    raise ValueError(f"{where}: more fields than the header's {len(columns)} (a comma in a text "
                                     'that is not in double quotes?)')
                if any(v is None for v in rec.values()):
                    raise ValueError(f"{where}: fewer fields than the header's {len(columns)}")
                if all(not v.strip() for v in rec.values()):
                    continue              # a row of empty fields (a spreadsheet's ",,,"): no record
                for key, k in unnamed.items():
                    if rec.pop(key).strip():
                        raise ValueError(f"{where}: a value in column {k}, which has no name in the header; name "
                                         "the column (or delete the value)")
                rows.append((where, rec))
        except csv.Error as e:
            raise ValueError(f"{path}: line {reader.line_num}: malformed CSV ({e})") from None
    return [c for c in columns if c], rows


def _unique_keys(pairs):
    """``object_pairs_hook`` for ``json.loads``: a field named twice in one record is an error (JSON keeps the
    last one without a word)."""
    record = {}
    for k, v in pairs:
        if k in record:
            raise ValueError(f"field {k!r} appears twice in one record")
        record[k] = v
    return record


def _json_rows(path: Path, text: str) -> list[Located]:
    if not text.strip():
        raise ValueError(f"{path}: empty file (no records)")
    head = text.lstrip()
    if path.suffix.lower() == ".json" and (head.startswith("[") or head.startswith("{") and "\n" in text.strip()):
        try:                  # one JSON document: an array of records, or one pretty-printed record
            doc = json.loads(text, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError as e:
            if head.startswith("["):
                raise ValueError(f"{path}: line {e.lineno}: not valid JSON ({e.msg})") from None
            doc = None        # not one object: JSON Lines, read below
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
        if isinstance(doc, list):
            return [(f"{path}: record {k}", r) for k, r in enumerate(doc)]
        if isinstance(doc, dict):
            return [(f"{path}: record 0", doc)]
    rows = []
    # lines end at "\n" only (a "\r" before it is JSON whitespace): str.splitlines() would also cut at
    # U+2028, U+2029 and U+0085, which JSON allows unescaped inside a string
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            rows.append((f"{path}: line {n}", json.loads(line, object_pairs_hook=_unique_keys)))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: line {n}: not valid JSON ({e.msg}); expected one JSON object a line") from None
        except ValueError as e:
            raise ValueError(f"{path}: line {n}: {e}") from None
    return rows


def read_records(path: str | os.PathLike, *, scores: Iterable[str] | str | None = None) -> datasets.Dataset:
    """Reads a file of your own texts into a data set (:func:`from_records`).

    Args:
        path: a ``.csv`` (comma-separated with a header row), ``.jsonl``/``.ndjson`` (one JSON
            object a line), ``.json`` (a JSON array of objects, one object, or JSON Lines) or ``.parquet`` file;
            text files in UTF-8 (a byte-order mark is allowed).
        scores: as in :func:`from_records`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: an unknown suffix, a file that is not UTF-8 (naming the line and byte), a
            malformed line, and every error of :func:`from_records`, each naming the file and its
            line (or record).
    """
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{p} is a directory; give the data file itself")
    if not p.exists():
        raise FileNotFoundError(f"data file {p} not found")
    suffix = p.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise ValueError(f"{p}: unknown kind of file {suffix or '(no suffix)'}; "
                         f"give a {', '.join(FILE_SUFFIXES)} file")
    if suffix == ".parquet":
        import pyarrow.parquet as pq   # deferred: only a Parquet file needs it (pyarrow comes with `datasets`)

        try:
            table = pq.read_table(p)
        except Exception as e:          # pyarrow's own errors (ArrowInvalid, OSError): not a Parquet file
            raise ValueError(f"{p}: not a readable Parquet file ({type(e).__name__}: {e})") from None
        return _build(((f"{p}: row {k}", r) for k, r in enumerate(table.to_pylist())), list(table.column_names),
                      str(p), scores)
    text = read_text(p)
    if suffix == ".csv":
        columns, rows = _csv_rows(p, text)
        return _build(rows, columns, str(p), scores, header="line 1 (the header)")
    return _build(_json_rows(p, text), None, str(p), scores)
