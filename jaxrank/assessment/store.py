"""An append-only, crash-safe store of judgements (one JSON object per line).

Every judgement is written as soon as it exists, keyed by what made it
(:class:`Key`): the judge's name and **fingerprint** (its weights and tokenizer,
:attr:`jaxrank.models.LoadedModel.fingerprint`), the template key, the context id
and the candidate ids in positions A and B (so the two orders are two keys),
and a **hash of the context text and of both candidate texts** (:func:`text_sha`).
A store holding judgements of other texts, or of another checkpoint, under the
same ids is therefore never read as this run's (``judge_contexts`` says what it
found and judges what is missing). Lines are flushed and ``fsync``-ed per batch;
a resumed run asks only for the keys that are missing.

Records written before fingerprints (schema 1: no ``fingerprint``, no text hashes)
are read as they are (their hash fields are empty, so they match no new run's
key); :func:`adopt_store` (``jaxrank store adopt``) stamps them with a judge's
fingerprint and a data set's text hashes when you know they belong together.

    >>> store = JudgementStore("runs/summeval-coherence.jsonl")
    >>> todo = [k for k in keys if k not in store]
    >>> store.append([...records...])
    >>> table = store.comparisons(judge="smollm2-135m")

**Several processes may share one store** (safe concurrent appends). Every
write, and the check on opening, holds an exclusive OS lock (``fcntl.flock``)
on the side file ``<store>.lock`` for the few milliseconds it takes; under the
lock the writer first reads what other processes appended since it last looked,
skips the keys they already wrote (the first value written wins, and
:meth:`JudgementStore.get` returns it), and only then appends. So two judge
processes on one store never duplicate or interleave a line. The lock holder
writes ``pid N on HOST`` into the lock file; a writer that waits longer than
``lock_timeout`` raises :class:`StoreLockedError` naming it. (Chosen over
one-writer-per-file: a long run holds no lock, and a killed process releases
its lock with its file descriptors.) ``judge_contexts`` re-reads the store
before every chunk and skips what another process stored meanwhile; once it
sees another writer it takes its remaining chunks in a random order, so two
runs of the same contexts on one store mostly judge different ones (a chunk
both start at once is judged twice, and stored once). To split the work
exactly, give each process its share (``positions``, ``--num-processes``).

**Damage is moved aside, never fatal.** On opening, a line that is not a valid
record (bad JSON, a missing field, ``p`` outside ``[0, 1]``, a torn last line
from a killed writer) is moved, with its line number and the reason, to the
side file ``<store>.damaged`` (JSON Lines), the store is rewritten without it
(atomically: a temporary file, ``fsync``, ``os.replace``) and a
:class:`StoreDamageWarning` says so; every valid line is kept. A key written
twice with the identical record is ignored; with a different record it is an
error naming both line numbers (:func:`repair_store`, ``jaxrank store repair``,
keeps the first and moves the later ones aside). :func:`check_store`
(``jaxrank store check``) reports all of this without changing the file.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from jaxrank.assessment._store_file import (READABLE_SCHEMAS, SCHEMA_VERSION, TEXT_SHA_LENGTH, Conflict,
                                            DamagedLine, Key, NotAStoreError, StoreConflictError,
                                            StoreDamageWarning, StoreLockedError, StoreScan,
                                            TextHashes, _damaged_path, _FIELDS, _fsync_write, _key_of, _Lock,
                                            _move_aside, _parse, _scan_bytes, _STAMP, check_regular_file,
                                            check_store, refuse_mixed_texts, refuse_non_store, repair_store,
                                            text_sha)
from jaxrank.comparisons import Comparisons, stack_contexts

__all__ = ["JudgementStore", "merge_stores", "Key", "StoredComparisons", "StoreLockedError", "StoreDamageWarning",
           "StoreScan", "DamagedLine", "Conflict", "check_store", "repair_store", "text_sha", "TextHashes",
           "adopt_store", "Adopted", "SCHEMA_VERSION", "READABLE_SCHEMAS", "TEXT_SHA_LENGTH", "NotAStoreError",
           "StoreConflictError", "check_regular_file", "MERGE_TOLERANCE"]

MERGE_TOLERANCE = 1e-5
"""How far (absolute, in ``p``) two stores' judgements of one key may differ and still merge
(:func:`merge_stores`): the same judge on one device and on a mesh of several differs by float rounding
(about ``1e-7``); the first value written is kept, as for concurrent writers. A larger difference is a
real disagreement (another model, other settings) and stops the merge."""


class StoredComparisons(NamedTuple):
    """What :meth:`JudgementStore.comparisons` returns.

    Attributes:
        comparisons: a padded :class:`~jaxrank.Comparisons` batch ``[C, R]``.
        contexts: context id of each row.
        candidates: per row, the candidate id of each item index.
    """

    comparisons: object
    contexts: list[str]
    candidates: list[list[str]]


class JudgementStore:
    """Append-only JSONL store of judgements, shared safely by processes; see the module docstring.

    Args:
        path: the ``.jsonl`` file (created with its folder if absent).
        lock_timeout: seconds to wait for another process's write before
            :class:`StoreLockedError` (must be > 0).

    Raises:
        ValueError: a key stored twice with different records (names both
            lines; ``jaxrank store repair`` resolves it), or a bad ``lock_timeout``.

    Warns:
        StoreDamageWarning: damaged lines were moved to ``<path>.damaged``.
    """

    def __init__(self, path: str | os.PathLike, *, lock_timeout: float = 60.0):
        if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, (int, float)) or \
                not math.isfinite(lock_timeout) or lock_timeout <= 0:
            raise ValueError(f"lock_timeout must be a positive number of seconds, got {lock_timeout!r}")
        self.path = check_regular_file(path)
        self.lock_timeout = float(lock_timeout)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OSError(e.errno, f"{self.path}: cannot create the store's folder {self.path.parent} "
                                   f"({e.strerror})") from None
        self._records: dict[Key, dict] = {}
        self._index: dict | None = None
        self._by_texts: dict | None = None
        self._offset, self._lines, self._inode = 0, 0, None
        self._others = 0
        with _Lock(self.path, self.lock_timeout):
            self._reload()

    def _reload(self) -> None:
        """Read the whole file (under the lock): move damage aside, refuse conflicting duplicates."""
        data = self.path.read_bytes() if self.path.exists() else b""
        scan = _scan_bytes(data)
        if scan.different:
            c = scan.different[0]
            first, later = scan.records[c.key][1], _parse(data.split(b"\n")[c.line - 1])[1]
            raise StoreConflictError(f"{self.path}: key {tuple(c.key)} is stored on line {c.first_line} "
                             f"(p={first['p']!r}) and on line {c.line} (p={later['p']!r}) with different "
                             f"records ({len(scan.different)} such key(s)); `jaxrank store repair "
                             f"{self.path}` keeps the first and moves the others to {_damaged_path(self.path)}")
        # no line even begins as a record (a CSV, a binary file): not a store; a damaged record, or the torn
        # first line of a killed writer, is a store's damage and is moved aside below
        refuse_non_store(self.path, scan)
        if scan.damaged or scan.unterminated:
            data = _move_aside(self.path, data, [tuple(d) for d in scan.damaged])
            if scan.damaged:
                where = ", ".join(f"{d.line} ({d.reason})" for d in scan.damaged[:5])
                more = f" and {len(scan.damaged) - 5} more" if len(scan.damaged) > 5 else ""
                warnings.warn(f"{self.path}: moved {len(scan.damaged)} damaged line(s) to "
                              f"{_damaged_path(self.path)}: line {where}{more}; every valid record is kept",
                              StoreDamageWarning, stacklevel=3)
        self._records = {k: rec for k, (_, rec) in scan.records.items()}
        self._index = self._by_texts = None
        self._offset, self._lines = len(data), data.count(b"\n")
        self._inode = os.stat(self.path).st_ino if self.path.exists() else None

    def _refresh(self) -> None:
        """Under the lock: take in what other processes appended since we last looked."""
        if not self.path.exists():
            self._records, self._offset, self._lines, self._inode = {}, 0, 0, None
            self._index = self._by_texts = None
            return
        st = os.stat(self.path)
        if st.st_ino != self._inode or st.st_size < self._offset:      # rewritten (a repair): read it all
            self._reload()
            return
        if st.st_size == self._offset:
            return
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            new = f.read()
        if not new.endswith(b"\n"):                 # a writer was killed mid-line: move its tail aside
            self._reload()
            return
        known = {k: (0, r) for k, r in self._records.items()}
        scan = _scan_bytes(new, first_line=self._lines + 1, known=known)
        self._others += len(scan.records) - len(self._records)
        self._records = {k: rec for k, (_, rec) in scan.records.items()}
        self._index = self._by_texts = None
        self._offset += len(new)
        self._lines += new.count(b"\n")

    def refresh(self) -> None:
        """Take in what other processes appended since this store last wrote or looked (under the lock).

        :meth:`append` and :meth:`comparisons` do this themselves; ``in``,
        :meth:`get` and :meth:`missing` read what this object has seen.
        """
        with _Lock(self.path, self.lock_timeout):
            self._refresh()

    @property
    def read_from_others(self) -> int:
        """How many records appended by other writers (processes, or other objects on this file) this object
        has taken in since it opened the file: more than 0 means another writer is at work."""
        return self._others

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, key) -> bool:
        return Key(*key) in self._records

    def get(self, key) -> dict | None:
        """The record stored under ``key``, or ``None``."""
        return self._records.get(Key(*key))

    def missing(self, keys: Iterable) -> list[Key]:
        """The keys of ``keys`` not yet in the store, in order."""
        return [Key(*k) for k in keys if Key(*k) not in self._records]

    def variants(self, key) -> list[Key]:
        """The stored keys with the same names as ``key`` (judge, template, context, a, b) but another
        judge fingerprint or other texts: judgements of something else under the same ids."""
        if self._index is None:
            index: dict[tuple, list[Key]] = {}
            for k in self._records:
                index.setdefault(k.ids, []).append(k)
            self._index = index
        key = Key(*key)
        return [k for k in self._index.get(key.ids, ()) if k != key]

    def other_templates(self, key) -> list[Key]:
        """The stored keys that differ from ``key`` in the template key only: judgements of these very texts
        by this judge (name and fingerprint) under another prompt or answer prefix."""
        if self._by_texts is None:
            index: dict[tuple, list[Key]] = {}
            for k in self._records:
                index.setdefault(k[:1] + k[2:], []).append(k)
            self._by_texts = index
        key = Key(*key)
        return [k for k in self._by_texts.get(key[:1] + key[2:], ()) if k.template != key.template]

    def append(self, records: Sequence[Mapping]) -> None:
        """Write records (each with the key fields and ``p``) and make them durable.

        Records whose key is already stored (by this or another process) are
        skipped: the first value written wins.

        Raises:
            ValueError: a record lacks a key field or ``p`` is not a probability.
            StoreLockedError: another process held the lock beyond ``lock_timeout``.
        """
        clean = []
        for rec in records:
            missing = [f for f in (*_FIELDS, "p") if f not in rec]
            if missing:
                raise ValueError(f"record {dict(rec)!r}: missing field(s) {', '.join(missing)}")
            p = float(rec["p"])
            if not math.isfinite(p) or not 0.0 <= p <= 1.0:
                raise ValueError(f"record {dict(rec)!r}: p must be a probability in [0, 1]")
            if str(rec["a"]) == str(rec["b"]):
                raise ValueError(f"record {dict(rec)!r}: compares candidate {rec['a']!r} with itself")
            rec = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in rec.items()}
            if any(rec.get(f) for f in _STAMP):            # stamped: schema 2, every stamp field a string
                rec = {**rec, **{f: str(rec.get(f) or "") for f in _STAMP}, "schema": SCHEMA_VERSION}
            clean.append(rec)
        with _Lock(self.path, self.lock_timeout):
            self._refresh()
            lines, seen = [], {}
            for rec in clean:
                key = _key_of(rec)
                if key in self._records or key in seen:
                    continue
                seen[key] = rec
                lines.append(json.dumps(rec, ensure_ascii=False) + "\n")
            if not lines:
                return
            blob = "".join(lines).encode("utf-8")
            try:
                with open(self.path, "ab") as f:
                    f.write(blob)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:       # a full disk: every judgement written before is kept
                raise OSError(e.errno, f"{self.path}: cannot write {len(lines)} judgement(s) ({e.strerror}); "
                                       f"the {len(self._records)} stored before are kept, and a rerun "
                                       "judges only what is missing") from e
            self._records.update(seen)
            self._index = self._by_texts = None
            self._offset += len(blob)
            self._lines += len(lines)
            if self._inode is None:
                self._inode = os.stat(self.path).st_ino

    def records(self, *, judge: str | None = None, template: str | None = None,
                fingerprint: str | None = None, hashes: Mapping[str, TextHashes] | None = None) -> list[dict]:
        """Stored records, optionally only those of one judge, template and/or judge fingerprint, and only
        those of the texts ``hashes`` (per context id: :class:`TextHashes`; other contexts are left out)."""
        def texts_match(k: Key) -> bool:
            h = hashes.get(k.context)
            return h is not None and k.context_sha == h.context and k.a_sha == h.candidates.get(k.a) \
                and k.b_sha == h.candidates.get(k.b)

        return [r for k, r in self._records.items()
                if (judge is None or k.judge == judge) and (template is None or k.template == template)
                and (fingerprint is None or k.fingerprint == fingerprint) and (hashes is None or texts_match(k))]

    def comparisons(self, *, judge: str | None = None, template: str | None = None,
                    candidates: Mapping[str, Sequence[str]] | None = None, fingerprint: str | None = None,
                    hashes: Mapping[str, TextHashes] | None = None) -> StoredComparisons:
        """The stored judgements as a padded :class:`~jaxrank.Comparisons` batch, one row per context.

        Args:
            judge, template, fingerprint: select one judge / template / judge
                fingerprint (required when the store holds several: mixing them
                in one set is refused; ``fingerprint=""`` selects records written
                before fingerprints).
            candidates: per context id, the candidate ids in item order (e.g. all
                candidates of the data set, so items never judged are kept); by
                default the candidates that appear, in order of first appearance.
            hashes: per context id, the hashes of its texts (:class:`TextHashes`):
                only judgements of exactly these texts are taken, only of these
                contexts.

        Raises:
            ValueError: no matching records, several judges/templates/fingerprints mixed, or (without
                ``hashes``) one context's judgements made of different texts under the same ids (a text
                edited and judged again): pass ``hashes=`` to choose the texts.
        """
        self.refresh()
        recs = self.records(judge=judge, template=template, fingerprint=fingerprint, hashes=hashes)
        if not recs:
            raise ValueError(f"{self.path}: no judgements for judge={judge!r}, template={template!r}"
                             + ("" if fingerprint is None else f", fingerprint={fingerprint!r}")
                             + ("" if hashes is None else " of these texts"))
        for field, chosen in (("judge", judge), ("template", template), ("fingerprint", fingerprint)):
            seen = {str(r.get(field) or "") for r in recs}
            if chosen is None and len(seen) > 1:
                shown = ", ".join(sorted(x or "'' (written before fingerprints)" for x in seen))
                raise ValueError(f"{self.path} holds several {field}s ({shown}); choose one with {field}=")
        if hashes is None:
            refuse_mixed_texts(self.path, recs)
        by_ctx: dict[str, list[dict]] = {}
        for r in recs:
            by_ctx.setdefault(str(r["context"]), []).append(r)
        ctxs, cands, sets = [], [], []
        for ctx, rs in by_ctx.items():
            if candidates is not None and ctx in candidates:
                ids = [str(x) for x in candidates[ctx]]
            else:
                ids = list(dict.fromkeys(x for r in rs for x in (str(r["a"]), str(r["b"]))))
            index = {c: n for n, c in enumerate(ids)}
            unknown = {x for r in rs for x in (str(r["a"]), str(r["b"]))} - set(index)
            if unknown:
                raise ValueError(f"context {ctx}: candidates {sorted(unknown)} are not in the given candidate list")
            i = np.array([index[str(r["a"])] for r in rs], np.int32)
            j = np.array([index[str(r["b"])] for r in rs], np.int32)
            p = np.array([float(r["p"]) for r in rs], np.float32)
            ctxs.append(ctx)
            cands.append(ids)
            sets.append(Comparisons.from_pairs(i, j, p, num_items=len(ids)))
        return StoredComparisons(stack_contexts(sets), ctxs, cands)


def merge_stores(path: str | os.PathLike, shards: Sequence[str | os.PathLike], *,
                 lock_timeout: float = 60.0) -> int:
    """Append to the store ``path`` every judgement of the stores ``shards`` it lacks (e.g. per-process shards).

    The shards are only read (under their locks), never changed: a damaged line
    in a shard (a torn last line of a killed writer included) is not merged and
    a :class:`StoreDamageWarning` names it; ``jaxrank store repair SHARD`` moves
    it aside. Rerunning the merge (or merging a shard that grew since) appends
    only what is new, so a merge is safe to repeat. Two judgements of one key
    whose ``p`` differ by at most :data:`MERGE_TOLERANCE` (float rounding: the
    same judge on one device and on a mesh) merge, the first one written kept.

    Args:
        path: the merged store (created if absent).
        shards: the stores to merge, in order (the first record of a key wins).
        lock_timeout: as for :class:`JudgementStore`.

    Returns:
        How many records were appended.

    Raises:
        ValueError: no shards, a shard that does not exist, one key with
            ``p`` more than :data:`MERGE_TOLERANCE` apart in two stores (names
            both; a :class:`StoreConflictError`), or one key stored twice with
            different records within a shard. Every shard is checked before any record is appended:
            on an error nothing is merged.
    """
    if not shards:
        raise ValueError("shards is empty: give the store shards to merge")
    for s in shards:
        check_regular_file(s, "shard")
    missing = [str(s) for s in shards if not Path(s).is_file()]
    if missing:
        raise ValueError(f"shards: no such file(s): {', '.join(missing)}")
    out = JudgementStore(path, lock_timeout=lock_timeout)
    source = {k: str(out.path) for k in out._records}
    before = len(out)
    merged, pending = [], {}          # every shard is checked before anything is appended: no partial merge
    for shard in shards:
        scan = check_store(shard, lock_timeout=lock_timeout)
        if scan.different:
            c = scan.different[0]
            raise StoreConflictError(f"{shard}: key {tuple(c.key)} is stored on lines {c.first_line} and {c.line} with "
                             f"different records; `jaxrank store repair {shard}` keeps the first; nothing was merged")
        if scan.damaged:
            where = ", ".join(f"{d.line} ({d.reason})" for d in scan.damaged[:3])
            warnings.warn(f"{shard}: {len(scan.damaged)} damaged line(s) not merged: line {where}; the shard is "
                          f"left as it is (`jaxrank store repair {shard}` moves them aside)",
                          StoreDamageWarning, stacklevel=2)
        recs = [rec for _, rec in scan.records.values()]
        for rec in recs:
            key = _key_of(rec)
            old = out.get(key) or pending.get(key)
            if old is not None and not abs(float(old["p"]) - float(rec["p"])) <= MERGE_TOLERANCE:
                raise StoreConflictError(f"key {tuple(key)} has p={old['p']} in {source[key]} but p={rec['p']} in "
                                         f"{shard} (more than MERGE_TOLERANCE={MERGE_TOLERANCE:g} apart); nothing "
                                         "was merged")
            source.setdefault(key, str(shard))
            pending.setdefault(key, rec)
        merged.extend(recs)
    out.append(merged)
    return len(out) - before


class Adopted(NamedTuple):
    """What :func:`adopt_store` did: records stamped, and legacy records of the judge left as they were
    because their context or a candidate id is not in the given texts (or a stamped copy already exists)."""

    stamped: int
    unknown_ids: int
    already: int


def adopt_store(path: str | os.PathLike, *, judge: str, fingerprint: str, hashes: Mapping[str, TextHashes],
                template: str | None = None, lock_timeout: float = 60.0) -> Adopted:
    """Stamp the records a store holds from before fingerprints (schema 1) with a judge's fingerprint and the
    hashes of the texts they judged, so that runs of that judge on those texts reuse them.

    Only you know that the old records were made by this checkpoint from these
    texts: this is the explicit step that says so (``jaxrank store adopt``). The
    store is rewritten atomically under its lock; records of other judges, and
    stamped records, are left as they are.

    Args:
        path: the store.
        judge: the judge name of the records to stamp.
        fingerprint: the judge's fingerprint (``judge.fingerprint``).
        hashes: per context id, the hashes of its texts (:class:`TextHashes`).
        template: only records of this template key (default: all of the judge's).
        lock_timeout: as for :class:`JudgementStore`.

    Raises:
        FileNotFoundError: no store at ``path``.
        ValueError: an empty ``fingerprint``, or a key stored twice with different records.
    """
    path = check_regular_file(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such store")
    if not fingerprint:
        raise ValueError("fingerprint is empty: give the judge's fingerprint (judge.fingerprint)")
    store = JudgementStore(path, lock_timeout=lock_timeout)       # moves damage aside, refuses conflicts
    stamped = unknown = already = 0
    with _Lock(path, lock_timeout):
        store._refresh()
        out = []
        for key, rec in store._records.items():
            if key.legacy and key.judge == judge and (template is None or key.template == template):
                h = hashes.get(key.context)
                a, b = (h.candidates.get(key.a), h.candidates.get(key.b)) if h is not None else (None, None)
                if a is None or b is None:
                    unknown += 1
                else:
                    new = {**rec, "fingerprint": fingerprint, "context_sha": h.context, "a_sha": a, "b_sha": b,
                           "schema": SCHEMA_VERSION}
                    if _key_of(new) in store._records:
                        already += 1
                    else:
                        rec = new
                        stamped += 1
            out.append(json.dumps(rec, ensure_ascii=False) + "\n")
        if stamped:
            _fsync_write(path, "".join(out).encode("utf-8"))
    return Adopted(stamped, unknown, already)
