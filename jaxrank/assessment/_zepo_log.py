"""The ZEPO search's JSON Lines log (:func:`jaxrank.assessment.zepo.zepo_search`): one event per line, appended and
flushed as it happens, read back on resume; a torn last line is cut (a whole last event that lost its newline
is kept and its line ended), a log of another search is refused.

Private to the assessment package.
"""

from __future__ import annotations

import json
from pathlib import Path


class SearchLog:
    """The JSONL search log: appended and flushed per event, read back on resume.

    Args:
        path: the log file (created with its folder when absent).
        config: the search's settings, the log's first event; a log whose config differs is refused.
        notes: per config key, what a difference in it means (added to the refusal).
    """

    def __init__(self, path, config: dict, notes: dict[str, str] | None = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.events: list[dict] = []
        if self.path.exists():
            raw = self.path.read_bytes()
            lines = raw.split(b"\n")
            good = 0
            for n, line in enumerate(lines, start=1):
                if not line.strip():
                    good += len(line) + 1
                    continue
                try:
                    ev = json.loads(line)
                except ValueError as e:
                    if n >= len(lines) - 1:          # a torn last line: cut it
                        break
                    raise ValueError(f"{self.path}, line {n}: not a search-log event ({e})") from e
                self.events.append(ev)
                good += len(line) + 1
            if good < len(raw):
                with open(self.path, "r+b") as f:
                    f.truncate(min(good, len(raw)))
            elif raw and not raw.endswith(b"\n"):     # a whole last event that lost its newline: end its line,
                with open(self.path, "ab") as f:       # or the next event would join it and both be cut
                    f.write(b"\n")
        old = next((e for e in self.events if e.get("event") == "config"), None)
        if old is None and self.events:
            raise ValueError(f"{self.path} holds events but no search config; not a log of this search")
        if old is None:
            self.write({"event": "config", **config})
        elif {k: v for k, v in old.items() if k != "event"} != config:
            keys = [k for k in sorted(set(config) | set(old) - {"event"}, key=str) if old.get(k) != config.get(k)]
            diff = [f"{k}: {old.get(k, '(not recorded)')!r} in the log, {config.get(k)!r} now" for k in keys]
            why = "".join(f" {notes[k]}" for k in keys if notes and k in notes)
            raise ValueError(f"{self.path} is the log of another search ({'; '.join(diff[:4])}"
                             f"{f'; {len(diff) - 4} more' if len(diff) > 4 else ''}).{why} Its proposals and "
                             "scores are not this search's, so it is not resumed: give another log path (--log), "
                             "or delete this one to start afresh")

    def find(self, event: str, epoch: int, **match) -> dict | None:
        """The latest logged ``event`` of ``epoch`` whose fields equal ``match`` (``None`` when there is none)."""
        return next((e for e in reversed(self.events) if e.get("event") == event and e.get("epoch") == epoch
                     and all(e.get(k) == v for k, v in match.items())), None)

    def once(self, ev: dict) -> None:
        """Write ``ev`` unless an event of the same kind, epoch and instruction is already logged (resume)."""
        same = lambda e: all(e.get(k) == ev.get(k) for k in ("event", "epoch", "instruction"))
        if not any(same(e) for e in self.events):
            self.write(ev)

    def write(self, ev: dict) -> None:
        self.events.append(ev)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(ev, ensure_ascii=False) + "\n")
            f.flush()
