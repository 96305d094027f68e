"""The file machinery of the judgement store (:mod:`jaxrank.assessment.store`): what a line is, how a
file is scanned, locked, rewritten atomically and cleaned of damaged lines; the file-level checks
(:func:`check_regular_file`, :func:`check_store`, :func:`repair_store`); and what the store and the run
read off records: texts mixed under one context (:func:`refuse_mixed_texts`), judgements under a run's ids
that are not its own (:func:`mismatch_note`), and copying another store's records (:func:`copy_held`). The
public names are re-exported there."""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import socket
import time
from pathlib import Path
from typing import Mapping, NamedTuple, Sequence

from jaxrank._faults import Fault

_FIELDS = ("judge", "template", "context", "a", "b")
_STAMP = ("fingerprint", "context_sha", "a_sha", "b_sha")
SCHEMA_VERSION = 2
"""The record layout this jaxrank writes: version 2 carries the judge's ``fingerprint`` and the texts'
hashes (``context_sha``, ``a_sha``, ``b_sha``) and says ``"schema": 2``; version 1 (no ``schema`` field,
none of those) is still read. A line declaring another version is not read as a judgement: it is reported
(``jaxrank store check``) and moved aside like any damaged line, never silently taken."""
READABLE_SCHEMAS = (1, 2)
TEXT_SHA_LENGTH = 16
"""Hex digits of a text's SHA-256 kept in a key (64 bits: a collision between two texts of one id is
out of reach)."""


def text_sha(text: str) -> str:
    """The hash of a text in a judgement's key: the first :data:`TEXT_SHA_LENGTH` hex digits of the
    SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(str(text).encode("utf-8", "surrogatepass")).hexdigest()[:TEXT_SHA_LENGTH]


class TextHashes(NamedTuple):
    """The hashes of one context's texts (:func:`text_sha`): the context's and each candidate id's."""

    context: str
    candidates: Mapping[str, str]


class Key(NamedTuple):
    """The identity of one judgement: what made it.

    The first five fields name it (judge name, template key, context id, the
    candidate ids in positions A and B); the last four say what it was made
    from: the judge's ``fingerprint`` and the hashes of the context text and of
    the two candidate texts (:func:`text_sha`). They default to ``""``, the
    value of records written before fingerprints (schema 1).
    """

    judge: str
    template: str
    context: str
    a: str
    b: str
    fingerprint: str = ""
    context_sha: str = ""
    a_sha: str = ""
    b_sha: str = ""

    @property
    def ids(self) -> tuple[str, str, str, str, str]:
        """The naming part ``(judge, template, context, a, b)``."""
        return tuple(self[:5])

    @property
    def legacy(self) -> bool:
        """Written before fingerprints: no judge fingerprint and no text hashes."""
        return not any(self[5:])


def _key_of(rec: Mapping) -> Key:
    return Key(*(str(rec[f]) for f in _FIELDS), *(str(rec.get(f) or "") for f in _STAMP))


class StoreConflictError(ValueError, Fault):
    """A key stored twice with different records (in a store, or across the stores being merged); the message
    names both places and the command that resolves it."""


class NotAStoreError(ValueError, Fault):
    """The path given as a store is not one: a folder, a pipe or device, or a file none of whose lines is a
    judgement record (a CSV, a binary file); nothing is changed."""


class StoreLockedError(TimeoutError):
    """Another process held the store's lock for longer than ``lock_timeout``; the message names it."""


class StoreDamageWarning(UserWarning):
    """Damaged lines were moved out of a store into its ``.damaged`` side file."""


class DamagedLine(NamedTuple):
    """A line of a store that is not a valid record: its 1-based number, bytes and why."""

    line: int
    raw: bytes
    reason: str


class Conflict(NamedTuple):
    """A key written on two lines: identical records (``same``) or different ones."""

    key: Key
    first_line: int
    line: int
    same: bool


class StoreScan(NamedTuple):
    """What a store file holds, line by line (:func:`check_store`).

    Attributes:
        records: the valid records, first occurrence of each key, as ``key -> (line, record)``.
        damaged: lines that are not valid records (a torn last line included).
        conflicts: later occurrences of a stored key (identical or different).
        unterminated: the last line is a valid record without its newline.
    """

    records: dict
    damaged: list
    conflicts: list
    unterminated: bool

    @property
    def different(self) -> list:
        """The conflicts with a different record: an error on opening."""
        return [c for c in self.conflicts if not c.same]


def _parse(raw: bytes) -> tuple[Key, dict]:
    """One line to ``(key, record)``; raises ValueError saying what is wrong with it."""
    try:
        rec = json.loads(raw)
    except ValueError as e:                      # JSONDecodeError and UnicodeDecodeError
        raise ValueError(f"not JSON ({e})") from None
    if not isinstance(rec, dict):
        raise ValueError(f"not a JSON object but {type(rec).__name__}")
    missing = [f for f in (*_FIELDS, "p") if f not in rec]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    try:
        p = float(rec["p"])
    except (TypeError, ValueError):
        raise ValueError(f"field p={rec['p']!r} is not a number") from None
    if not math.isfinite(p) or not 0.0 <= p <= 1.0:
        raise ValueError(f"field p={p!r} must be a probability in [0, 1]")
    if str(rec["a"]) == str(rec["b"]):
        raise ValueError(f"compares candidate {rec['a']!r} with itself")
    version = rec.get("schema", 1)
    if isinstance(version, bool) or version not in READABLE_SCHEMAS:
        raise ValueError(f"declares schema version {version!r}; this jaxrank reads versions "
                         f"{', '.join(map(str, READABLE_SCHEMAS))} (a newer jaxrank wrote it: upgrade to read it)")
    if version >= 2:
        missing = [f for f in _STAMP if not isinstance(rec.get(f), str)]
        if missing:
            raise ValueError(f"schema 2 record without {', '.join(missing)} (a string each)")
    return _key_of(rec), rec


def _scan_bytes(data: bytes, first_line: int = 1, known: dict | None = None) -> StoreScan:
    """Scan ``data`` (whole lines of a store, numbered from ``first_line``) against ``known`` records."""
    records = {} if known is None else known
    damaged, conflicts = [], []
    parts = data.split(b"\n")
    tail = parts.pop()                           # b"" when the data ends with a newline
    unterminated = False
    for n, raw in enumerate(parts + ([tail] if tail else []), start=first_line):
        if not raw.strip():
            continue
        is_tail = bool(tail) and n == first_line + len(parts)
        try:
            key, rec = _parse(raw)
        except ValueError as e:
            damaged.append(DamagedLine(n, raw, ("torn last line (no newline): " if is_tail else "") + str(e)))
            continue
        unterminated = unterminated or is_tail
        if key in records:
            conflicts.append(Conflict(key, records[key][0], n, records[key][1] == rec))
        else:
            records[key] = (n, rec)
    return StoreScan(records, damaged, conflicts, unterminated)


def _damaged_path(path: Path) -> Path:
    return path.with_name(path.name + ".damaged")


def _open_own(path: Path, mode: str, **kw):
    """Open a side file the store writes (``.lock``, ``.damaged``) for appending, never through a symlink.

    Raises:
        OSError: ``path`` is a symbolic link (``O_NOFOLLOW``), naming it.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if path.is_symlink():
            raise OSError(e.errno, f"{path} is a symbolic link; the store writes its own side files and never "
                                   "follows a link (remove it)") from None
        raise
    return os.fdopen(fd, mode, **kw)


class _Lock:
    """An exclusive ``flock`` on ``<store>.lock``, naming its holder in the file; a context manager.

    The lock file exists only while a process holds it or waits for it: the holder
    removes it before unlocking, and a process that obtains the lock checks that
    the file it locked is still the one at the path (else its last holder removed
    it, and it locks the new one), so no ``.lock`` is left behind and two
    processes never hold the lock at once.
    """

    def __init__(self, path: Path, timeout: float):
        self.path, self.timeout, self.fh = path.with_name(path.name + ".lock"), timeout, None

    def _current(self, fh) -> bool:
        try:
            return os.stat(self.path, follow_symlinks=False).st_ino == os.fstat(fh.fileno()).st_ino
        except FileNotFoundError:
            return False

    def __enter__(self):
        deadline = time.monotonic() + self.timeout
        while True:
            fh = _open_own(self.path, "a+")
            try:
                while True:
                    try:
                        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() >= deadline:
                            fh.seek(0)
                            holder = fh.read().strip() or "an unknown process"
                            raise StoreLockedError(f"{self.path}: the store is locked by {holder} (waited "
                                                   f"{self.timeout:g} s); if that process is gone the lock is "
                                                   "free") from None
                        time.sleep(0.005)
            except BaseException:
                fh.close()
                raise
            if self._current(fh):
                break
            fh.close()                             # its holder removed it: lock the file now at the path
        self.fh = fh
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        fh.flush()
        return self

    def __exit__(self, *exc):
        try:
            os.unlink(self.path)                   # still held: a waiter on this file sees it gone and retries
        except OSError:
            pass
        fcntl.flock(self.fh.fileno(), fcntl.LOCK_UN)
        self.fh.close()


def _fsync_write(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically (temporary file, fsync, rename, fsync of the folder)."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:                # a full disk: the store is left as it was, the partial copy removed
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, f"{path}: cannot rewrite the store ({e.strerror}); it is left as it was") from e
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _move_aside(path: Path, data: bytes, lines: list[tuple[int, bytes, str]]) -> bytes:
    """Append ``lines`` ``(number, raw, reason)`` to ``<path>.damaged``, rewrite ``path`` without them."""
    drop = {n for n, _, _ in lines}
    if lines:
        with _open_own(_damaged_path(path), "a", encoding="utf-8") as f:
            for n, raw, reason in lines:
                f.write(json.dumps({"line": n, "reason": reason, "text": raw.decode("utf-8", "replace")},
                                   ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
    parts = data.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    kept = b"".join(raw + b"\n" for n, raw in enumerate(parts, start=1) if n not in drop)
    _fsync_write(path, kept)
    return kept


def check_regular_file(path: str | os.PathLike, what: str = "store") -> Path:
    """``path`` as a ``Path`` if it is a regular file or absent; else :class:`NotAStoreError` saying what it is
    (a folder, a pipe or device), so that nothing blocks reading a pipe or writes into a folder."""
    path = Path(path)
    if path.is_dir():
        raise NotAStoreError(f"{path} is a folder; a {what} is a .jsonl file: give a file path")
    if path.exists() and not path.is_file():
        raise NotAStoreError(f"{path} is not a regular file (a pipe or device); a {what} is a .jsonl file")
    return path


def refuse_non_store(path: Path, scan: StoreScan) -> None:
    """Raise :class:`NotAStoreError` when no line of the scanned file even begins as a record (a CSV, a
    binary file): that file is not a store, and nothing may move its lines aside. A damaged record, or the
    torn first line of a killed writer, is a store's damage (left to the caller)."""
    if scan.damaged and not scan.records and not any(d.raw.lstrip().startswith(b"{") for d in scan.damaged):
        d = scan.damaged[0]
        raise NotAStoreError(f"{path} is not a judgement store: none of its lines is a judgement record "
                             f"(line {d.line}: {d.reason}); it is left as it is. Give a new .jsonl path (jaxrank "
                             "writes the store)")


def check_store(path: str | os.PathLike, *, lock_timeout: float = 60.0) -> StoreScan:
    """Scan a store without changing it: valid records, damaged lines, duplicated keys.

    Reads under the store's lock (so a line being written by another process is
    not mistaken for a torn one), or without it where the lock file cannot be
    created (a read-only folder).

    Raises:
        FileNotFoundError: no such file.
        NotAStoreError: a folder, a pipe or a device, or a file none of whose lines is a judgement record
            (a CSV, a binary file: :func:`refuse_non_store`).
    """
    path = check_regular_file(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such store file")
    try:
        lock = _Lock(path, lock_timeout)
        lock.__enter__()
    except StoreLockedError:
        raise
    except OSError:                               # no lock file possible here: read as it is
        scan = _scan_bytes(path.read_bytes())
    else:
        try:
            scan = _scan_bytes(path.read_bytes())
        finally:
            lock.__exit__(None, None, None)
    refuse_non_store(path, scan)
    return scan


def repair_store(path: str | os.PathLike, *, lock_timeout: float = 60.0) -> StoreScan:
    """Move every damaged line and every later occurrence of a key to ``<path>.damaged``.

    The first record of each key is kept (the value a running judge saw); the
    moved lines keep their line numbers and the reason in the side file.

    Returns:
        The scan before the repair (what was moved).

    Raises:
        FileNotFoundError: no such file.
        NotAStoreError: a folder, a pipe or a device, or a file none of whose lines is a judgement record
            (:func:`refuse_non_store`); the file is left byte for byte as it was.
    """
    path = check_regular_file(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such store file")
    with _Lock(path, lock_timeout):
        data = path.read_bytes()
        scan = _scan_bytes(data)
        refuse_non_store(path, scan)
        moved = [(d.line, d.raw, d.reason) for d in scan.damaged]
        lines = data.split(b"\n")
        moved += [(c.line, lines[c.line - 1],
                   f"{'identical' if c.same else 'different'} duplicate of line {c.first_line}")
                  for c in scan.conflicts]
        if moved or scan.unterminated:
            _move_aside(path, data, sorted(moved))
    return scan


def refuse_mixed_texts(path, recs: Sequence[dict]) -> None:
    """Refuse records of one context made of different texts under the same ids (the hash of its text, or of
    one candidate id's text, differs): :meth:`JudgementStore.comparisons` would count each pair twice."""
    seen: dict[tuple, str] = {}
    for r in recs:
        ctx = str(r["context"])
        for cid, sha in ((None, r.get("context_sha")), (str(r["a"]), r.get("a_sha")), (str(r["b"]), r.get("b_sha"))):
            sha = str(sha or "")
            first = seen.setdefault((ctx, cid), sha)
            if first != sha:
                what = "its context text" if cid is None else f"candidate {cid!r}"
                raise ValueError(f"{path}: context {ctx!r} holds judgements of different texts under the same ids "
                                 f"({what} has the hashes {first or 'none'!r} and {sha or 'none'!r}: a text edited "
                                 "and judged again); choose the texts with hashes= (per context, "
                                 "jaxrank.assessment.run.text_hashes of the texts you mean)")


def mismatch_note(store, keys: Sequence[Key]) -> str | None:
    """What the store holds under these keys' ids that is not these judgements, in one sentence (or None):
    judgements by another checkpoint, of other texts, from before fingerprints, and judgements of these very
    texts by this judge under another template key (another prompt, or another ``"auto"`` answer prefix)."""
    legacy = judge = texts = 0
    templates: dict[str, int] = {}
    for key in keys:
        for other in store.variants(key):
            if other.legacy:
                legacy += 1
            elif other.fingerprint != key.fingerprint:
                judge += 1
            else:
                texts += 1
        for other in store.other_templates(key):
            templates[other.template] = templates.get(other.template, 0) + 1
    tmpl = sum(templates.values())
    if not legacy + judge + texts + tmpl:
        return None
    parts = [f"{judge} by another checkpoint or setting of judge {keys[0].judge!r}" if judge else "",
             f"{texts} of other texts (another data set or edited texts under the same ids)" if texts else "",
             f"{legacy} written before judgements carried fingerprints (`jaxrank store adopt` reuses them once "
             "you know they are this judge's judgements of these texts)" if legacy else "",
             f"{tmpl} of these very texts by this judge under another template key "
             f"({', '.join(sorted(templates))}; this run's is {keys[0].template!r}): another prompt or answer "
             "prefix" if tmpl else ""]
    return (f"{store.path} holds {legacy + judge + texts + tmpl} judgement(s) of this run's comparisons that are "
            f"not this run's: {'; '.join(x for x in parts if x)}. They are not reused; this run judges its own.")


def copy_held(store, reuse, keys: Sequence[Key]) -> int:
    """Copy into ``store`` the records of ``keys`` that the store ``reuse`` holds and ``store`` lacks (``reuse``
    is only read, under its lock; an absent file holds nothing); how many were copied."""
    if Path(reuse).resolve() == store.path.resolve() or not Path(reuse).is_file():
        return 0
    held = check_store(reuse, lock_timeout=store.lock_timeout).records
    found = [held[key][1] for key in dict.fromkeys(keys) if key not in store and key in held]
    if found:
        store.append(found)
    return len(found)
