"""Loaders for the human-annotated NLG meta-evaluation data sets in ``shared/data``.

Every data set is returned as a :class:`datasets.Dataset` with one schema:

========================  ==============================================================
column                    meaning
========================  ==============================================================
``context_id`` (str)      id of the context (article, dialogue, story prompt, RDF input)
``context`` (str)         the source text the candidates were produced from
``candidate_id`` (str)    the system name where the file has one, else a position id
``candidate`` (str)       the text being judged
``reference`` (str)       a reference / knowledge text, ``""`` when the data set has none
one float per aspect      the human score, named as in :data:`ASPECTS`
========================  ==============================================================

Rows are ordered by context (in order of first appearance in the file), then by
candidate in file order. Per data set (see ``shared/data/SOURCES.md`` for the files):

* ``summeval``: 100 articles x 16 summaries; ids are the file's ``article_id`` /
  ``summary_id`` (``summary_id`` is a position, not a system). Scores are means of
  3 expert ratings on 1-5.
* ``topicalchat``: USR TopicalChat, 60 dialogue histories x 6 responses; context ids
  ``C0``..``C59``; ``candidate_id`` is ``system_id``; ``reference`` is the knowledge
  fact (the file's ``context`` field).
* ``hanna``: 96 prompts x 11 stories; ids are ``prompt_id`` / ``story_id`` (a rank,
  not a system).
* ``newsroom``: 60 articles x 7 summaries; ids are ``article_id`` / ``summary_id``.
* ``webnlg2017``: 223 inputs x 10 teams; context ids ``C0``..``C222``; the context is
  the ``mr`` triples with ``<br>`` replaced by newlines; ``candidate_id`` is ``team``.
  No reference column in the file. The 193 missing system outputs are left out (see
  below): 168 of team ``vietnam`` whose text is the word ``null`` and 25 empty ones of
  ``tilburg-pipe`` (their human scores are all 1), so 2037 rows, 8 to 10 per input.
* ``webnlg2020``: 178 inputs x 17 systems (one input has 16: 3025 rows in the file), read from
  ``webnlg2020_en_humeval_merged.jsonl``; ``context_id`` is ``sample_id``; the context
  is the triples joined by newlines; ``reference`` is all references joined by
  newlines. The ``WebNLG-2020-reference`` system has no text in the file, so its
  candidate is ``references[0]``. Scores are 0-100. The one empty output
  (``Baseline-FORGE2017`` on sample ``533``) is left out: 3024 rows, two inputs of 16.
* ``personachat``: USR PersonaChat (file ``personachat_usr/topicalchat_usr.json``),
  60 dialogue histories x 5 responses; context ids ``C0``..``C59``; ``candidate_id``
  is ``model``; ``reference`` is the persona ``fact``; each aspect is the mean of the
  3 raters.

Candidate texts are stripped of leading and trailing whitespace: some systems' texts
carry a mark no other has, which would tell a judge who wrote them (every PersonaChat
response ends in a newline, every WebNLG 2017 ``webnlg`` reference text too, every
TopicalChat ``Original Ground Truth`` response in a space). A candidate left with no
text, or the text ``null``, is a missing system output: its row is left out of the data
set (a judge cannot read it), with a :class:`UserWarning` that counts the rows left out
(``webnlg2017``: 193 = 168 ``null`` + 25 empty; ``webnlg2020``: 1; the others: none).
Context ids stay those of the full file (``C0``, ``C1``, ... count every context).

Human scores must be numbers; an infinite score is refused (a :class:`ValueError`
naming the file and row), and a NaN (``nan`` in the file) is read as "no score" for that
row, as in :func:`jaxrank.data.read_records`. The files hold none.

Example:
    >>> ds = load_dataset("summeval")
    >>> lm = label_matrix(ds, "coherence")
    >>> lm.labels.shape
    (100, 16)
"""

from __future__ import annotations

import csv
import json
import math
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:  # imported by load_dataset on first use: data_dir and label_matrix need no `datasets`
    import datasets

__all__ = ["ASPECTS", "DATASETS", "LabelMatrix", "data_dir", "label_matrix", "load_dataset"]

ENV_VAR = "JAXRANK_DATA"

ASPECTS: dict[str, tuple[str, ...]] = {
    "summeval": ("coherence", "consistency", "fluency", "relevance"),
    "topicalchat": ("understandability", "naturalness", "coherence", "engagingness",
                    "groundedness", "overall"),
    "hanna": ("relevance", "coherence", "empathy", "surprise", "engagement", "complexity"),
    "newsroom": ("coherence", "fluency", "informativeness", "relevance"),
    "webnlg2017": ("fluency", "grammar", "semantics"),
    "webnlg2020": ("correctness", "data_coverage", "fluency", "relevance", "text_structure"),
    "personachat": ("understandable", "natural", "maintains_context", "engaging",
                    "uses_knowledge", "overall"),
}
"""Human aspect columns of each data set, in column order."""

DATASETS: tuple[str, ...] = tuple(ASPECTS)
"""Names accepted by :func:`load_dataset`."""

_TEXT_COLUMNS = ("context_id", "context", "candidate_id", "candidate", "reference")

_FILES = {
    "summeval": "summeval/summeval.jsonl",
    "topicalchat": "topicalchat/topical_chat.json",
    "hanna": "hanna/hanna.jsonl",
    "newsroom": "newsroom/newsroom.jsonl",
    "webnlg2017": "webnlg2017/all_data_final_averaged.csv",
    "webnlg2020": "webnlg2020/webnlg2020_en_humeval_merged.jsonl",
    "personachat": "personachat_usr/topicalchat_usr.json",
}

# Data sets whose file has no context id: contexts are numbered C0, C1, ... in order of
# first appearance (the parser puts the grouping text in ``context_id`` meanwhile).
_NUMBERED = frozenset({"topicalchat", "webnlg2017", "personachat"})

Record = dict[str, Any]
Located = tuple[str, Any]  # (location for error messages, raw record)


class LabelMatrix(NamedTuple):
    """Human labels of one aspect laid out as a padded context x candidate matrix.

    Attributes:
        labels: ``np.float32 [num_contexts, max_candidates]``, 0 where padded.
        mask: ``bool`` of the same shape, True for real candidates.
        context_ids: the context id of each row.
        candidate_ids: per row, the candidate id of each real (unpadded) column.
    """

    labels: np.ndarray
    mask: np.ndarray
    context_ids: list[str]
    candidate_ids: list[list[str]]


def data_dir() -> Path:
    """Returns the folder holding the data sets.

    The folder is ``$JAXRANK_DATA`` when that variable is set (and must then exist);
    otherwise the first existing one of ``<repo root>/../shared/data`` (repo root is the
    folder above the ``jaxrank`` package) and ``<cwd>/../shared/data``.

    Raises:
        FileNotFoundError: if the chosen folder does not exist; the message names the
            folders tried and how to point at the data (``export JAXRANK_DATA=...``, or
            your own file).
    """
    tried = _candidate_dirs()
    for folder in tried:
        if folder.is_dir():
            return folder
    raise FileNotFoundError(f"no data folder found: looked in {_where(tried)}. {_HOW}")


_HOW = (f"Point at the folder holding the data sets (summeval/, hanna/, ...) with `export {ENV_VAR}=/path/to/data`, "
        "or judge your own texts from a file: `--data FILE` (.csv, .jsonl, .json or .parquet with context_id, "
        "context, candidate_id, candidate and an optional score), jaxrank.data.read_records(FILE) in Python.")


def _candidate_dirs() -> list[Path]:
    env = os.environ.get(ENV_VAR)
    if env:
        return [Path(env).expanduser()]
    repo_root = Path(__file__).resolve().parents[2]       # jaxrank/data/loaders.py -> the repository
    return [repo_root.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"]


def _where(tried: list[Path]) -> str:
    env = os.environ.get(ENV_VAR)
    if env:
        return f"{tried[0].resolve()} (from ${ENV_VAR}={env})"
    return (f"{' and '.join(str(p.resolve()) for p in tried)} (${ENV_VAR} is not set; these are its defaults: "
            "../shared/data beside the jaxrank repository, then beside the current folder)")


def _missing(path: Path) -> FileNotFoundError:
    return FileNotFoundError(f"data file {path} not found. {_HOW}")


def _read_jsonl(path: Path) -> Iterator[Located]:
    try:
        with path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield f"line {n}", json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}: line {n}: malformed JSON ({e.msg})") from e
    except FileNotFoundError as e:
        raise _missing(path) from e


def _read_json_array(path: Path) -> Iterator[Located]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise _missing(path) from e
    try:
        records = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: line {e.lineno}: malformed JSON ({e.msg})") from e
    if not isinstance(records, list):
        raise ValueError(f"{path}: expected a JSON array of records")
    for n, rec in enumerate(records):
        yield f"record {n}", rec


def _read_csv(path: Path) -> Iterator[Located]:
    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            for rec in reader:
                yield f"line {reader.line_num}", rec
    except FileNotFoundError as e:
        raise _missing(path) from e


def _flat(rec: Record, context_id: str, context: str, candidate_id: str, candidate: str,
          aspects: tuple[str, ...], reference: str = "") -> Record:
    """A row with the shared schema; scores are read from ``rec`` under the aspect names."""
    row = {"context_id": context_id, "context": context, "candidate_id": candidate_id,
           "candidate": candidate.strip(), "reference": reference}
    row.update({a: _score(rec[a], a) for a in aspects})
    return row


_MISSING_TEXTS = frozenset({"", "null"})
"""Candidate texts (after stripping) that mark a missing system output: such rows are left out."""


def _score(value: Any, aspect: str) -> float:
    """A human score as a float: NaN is "no score"; an infinite one (or a non-number) is an error."""
    x = float(value)
    if math.isinf(x):
        raise ValueError(f"aspect {aspect!r}: the human score is {value!r}, not finite")
    return x


def _by_keys(name: str, context_id: str, context: str, candidate_id: str,
             candidate: str) -> Callable[[Record], list[Record]]:
    """Parser for a flat file whose aspect fields already carry the column names."""
    def parse(rec: Record) -> list[Record]:
        return [_flat(rec, rec[context_id], rec[context], rec[candidate_id], rec[candidate],
                      ASPECTS[name])]
    return parse


def _topicalchat(rec: Record) -> list[Record]:
    return [_flat(rec["scores"], rec["source"], rec["source"], rec["system_id"],
                  rec["system_output"], ASPECTS["topicalchat"], reference=rec["context"])]


def _webnlg2017(rec: Record) -> list[Record]:
    context = rec["mr"].replace("<br>", "\n")
    return [_flat(rec, context, context, rec["team"], rec["text"], ASPECTS["webnlg2017"])]


_WEBNLG2020_KEYS = dict(zip(ASPECTS["webnlg2020"],
                            ("Correctness", "DataCoverage", "Fluency", "Relevance",
                             "TextStructure")))


def _webnlg2020(rec: Record) -> list[Record]:
    refs = rec["references"]
    text = rec["text"] if rec["text"] is not None else refs[0]
    scores = {a: rec["scores"][key] for a, key in _WEBNLG2020_KEYS.items()}
    return [_flat(scores, str(rec["sample_id"]), "\n".join(rec["triples"]),
                  rec["submission_id"], text, ASPECTS["webnlg2020"], reference="\n".join(refs))]


_PERSONACHAT_KEYS = dict(zip(ASPECTS["personachat"],
                             ("Understandable", "Natural", "Maintains Context", "Engaging",
                              "Uses Knowledge", "Overall")))


def _personachat(rec: Record) -> list[Record]:
    rows = []
    for resp in rec["responses"]:
        scores = {a: float(np.mean(resp[key])) for a, key in _PERSONACHAT_KEYS.items()}
        rows.append(_flat(scores, rec["context"], rec["context"], resp["model"],
                          resp["response"], ASPECTS["personachat"],
                          reference=rec["fact"]))
    return rows


Reader = Callable[[Path], Iterator[Located]]
Parser = Callable[[Record], list[Record]]

_PARSERS: dict[str, tuple[Reader, Parser]] = {
    "summeval": (_read_jsonl, _by_keys("summeval", "article_id", "article", "summary_id",
                                       "summary")),
    "topicalchat": (_read_json_array, _topicalchat),
    "hanna": (_read_jsonl, _by_keys("hanna", "prompt_id", "prompt", "story_id", "story")),
    "newsroom": (_read_jsonl, _by_keys("newsroom", "article_id", "article", "summary_id",
                                       "summary")),
    "webnlg2017": (_read_csv, _webnlg2017),
    "webnlg2020": (_read_jsonl, _webnlg2020),
    "personachat": (_read_json_array, _personachat),
}


def load_dataset(name: str, *, path: str | os.PathLike | None = None) -> datasets.Dataset:
    """Loads one human-annotated data set in the shared schema (see the module docstring).

    Args:
        name: one of :data:`DATASETS`.
        path: data folder to read from instead of :func:`data_dir`.

    Returns:
        A :class:`datasets.Dataset` with the text columns ``context_id``, ``context``,
        ``candidate_id``, ``candidate``, ``reference`` and one float64 column per aspect
        in ``ASPECTS[name]``, ordered by context (first appearance) then candidate.

    Warns:
        UserWarning: rows were left out as missing system outputs (their candidate text is
            empty or ``null``; the module docstring gives the counts), naming how many.

    Raises:
        ValueError: unknown ``name``, or a malformed line / record in the file (an
            infinite human score included), naming the file and the line or record.
        FileNotFoundError: the data folder or file is missing.
    """
    import datasets

    if name not in _PARSERS:
        raise ValueError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}; or give your own texts "
                         "as a file (--data FILE, jaxrank.data.read_records) or records (jaxrank.data.from_records)")
    folder = Path(path) if path is not None else data_dir()
    file = folder / _FILES[name]
    if not file.is_file():
        env = os.environ.get(ENV_VAR)
        origin = ("given as path=" if path is not None else f"from ${ENV_VAR}={env}" if env else
                  f"the default: ${ENV_VAR} is not set")
        raise FileNotFoundError(f"data set {name!r}: no file {file}; looked in the data folder {folder.resolve()} "
                                f"({origin}). {_HOW}")
    read, parse = _PARSERS[name]
    groups: dict[str, list[Record]] = {}
    missing = 0
    for where, rec in read(file):
        try:
            rows = parse(rec)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise ValueError(f"{file}: {where}: bad record ({type(e).__name__}: {e})") from e
        for row in rows:
            kept = groups.setdefault(row["context_id"], [])      # numbered even when all its rows are missing
            if row["candidate"] in _MISSING_TEXTS:
                missing += 1
            else:
                kept.append(row)
    if missing:        # warned from this line, so shown once per process and data set (Python's default filter)
        warnings.warn(f"{name}: left out {missing} row(s) of {file} whose candidate text is empty or 'null' "
                      "(missing system outputs a judge cannot read)", UserWarning)
    ordered = []
    for k, rows in enumerate(groups.values()):
        for row in rows:
            if name in _NUMBERED:
                row["context_id"] = f"C{k}"
            ordered.append(row)
    features = datasets.Features(
        {c: datasets.Value("string") for c in _TEXT_COLUMNS}
        | {a: datasets.Value("float64") for a in ASPECTS[name]}
    )
    return datasets.Dataset.from_list(ordered, features=features)


def label_matrix(ds: datasets.Dataset, aspect: str) -> LabelMatrix:
    """Lays out one aspect of a loaded data set as a padded context x candidate matrix.

    Args:
        ds: a data set from :func:`load_dataset` (or any with ``context_id``,
            ``candidate_id`` and the aspect column).
        aspect: the score column to use.

    Returns:
        A :class:`LabelMatrix`; contexts in order of first appearance, candidates in row
        order, padding columns 0 with ``mask`` False.

    Raises:
        ValueError: ``aspect`` is not a score column of ``ds``.
    """
    available = [c for c in ds.column_names if c not in _TEXT_COLUMNS]
    if aspect not in available:
        raise ValueError(f"unknown aspect {aspect!r}; available: {', '.join(available)}")
    cols = ds.select_columns(["context_id", "candidate_id", aspect]).to_dict()
    rows: dict[str, list[tuple[str, float]]] = {}
    for cid, cand, value in zip(cols["context_id"], cols["candidate_id"], cols[aspect]):
        rows.setdefault(cid, []).append((cand, value))
    width = max((len(r) for r in rows.values()), default=0)
    labels = np.zeros((len(rows), width), np.float32)
    mask = np.zeros((len(rows), width), bool)
    for k, entries in enumerate(rows.values()):
        labels[k, : len(entries)] = [v for _, v in entries]
        mask[k, : len(entries)] = True
    return LabelMatrix(labels, mask, list(rows), [[c for c, _ in r] for r in rows.values()])
