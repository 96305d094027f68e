"""Review fix of read_records: JSON Lines end at "\\n" only, so a text holding U+2028, U+2029 or U+0085
(all valid unescaped inside a JSON string, and line breaks to str.splitlines) is read whole."""

from __future__ import annotations

import json

import pytest

from jaxrank.data import read_records


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\x85"])
@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_json_lines_keep_unicode_line_separators_inside_strings(tmp_path, sep, suffix):
    texts = [f"first{sep}line", "second"]
    rows = [{"context_id": "q1", "context": f"ctx{sep}x", "candidate_id": c, "candidate": t, "score": s}
            for c, t, s in zip("ab", texts, (1, 2))]
    path = tmp_path / f"own{suffix}"
    raw = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    assert sep in raw                                     # written unescaped, as JSON allows
    path.write_text(raw, encoding="utf-8", newline="")
    ds = read_records(path)
    assert ds["candidate"] == texts
    assert ds["context"] == [f"ctx{sep}x"] * 2
    assert ds["score"] == [1.0, 2.0]


def test_crlf_json_lines_still_read(tmp_path):
    rows = [{"context_id": "q1", "context": "c", "candidate_id": c, "candidate": c * 2} for c in "ab"]
    path = tmp_path / "crlf.jsonl"
    path.write_bytes("".join(json.dumps(r) + "\r\n" for r in rows).encode())
    assert read_records(path)["candidate"] == ["aa", "bb"]


def test_bad_line_number_counts_newlines_only(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"context_id": "q", "context": "c", "candidate_id": "a", "candidate": "x\u2028y"},
                      ensure_ascii=False)
    path.write_text(good + "\n{broken\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl: line 2: not valid JSON"):
        read_records(path)
