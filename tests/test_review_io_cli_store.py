"""Review of ``store merge`` (jaxrank.assessment.store.merge_stores): a conflict in a later shard leaves the
merged store as it was (every shard is checked before anything is appended)."""

import json

import pytest

from jaxrank.assessment.store import JudgementStore, StoreConflictError, merge_stores


def _rec(a, b, p):
    return {"judge": "m", "template": "t", "context": "c", "a": a, "b": b, "p": p}


def _lines(path):
    return [json.loads(x) for x in open(path) if x.strip()] if path.exists() else []


def test_a_conflict_in_a_later_shard_merges_nothing(tmp_path):
    s0, s1, out = tmp_path / "s0.jsonl", tmp_path / "s1.jsonl", tmp_path / "m.jsonl"
    JudgementStore(s0).append([_rec("x", "y", 0.25), _rec("y", "z", 0.5)])
    JudgementStore(s1).append([_rec("z", "x", 0.5), _rec("x", "y", 0.75)])      # (x, y) disagrees with s0
    JudgementStore(out).append([_rec("w", "x", 0.125)])
    with pytest.raises(StoreConflictError, match=r"p=0.25 in .*s0\.jsonl but p=0.75 in .*s1\.jsonl.*nothing was merged"):
        merge_stores(out, [s0, s1])
    assert [(r["a"], r["b"], r["p"]) for r in _lines(out)] == [("w", "x", 0.125)]


def test_shards_that_agree_merge_in_order_first_value_kept(tmp_path):
    s0, s1, out = tmp_path / "s0.jsonl", tmp_path / "s1.jsonl", tmp_path / "m.jsonl"
    JudgementStore(s0).append([_rec("x", "y", 0.25)])
    JudgementStore(s1).append([_rec("x", "y", 0.25 + 1e-7), _rec("y", "z", 0.5)])
    assert merge_stores(out, [s0, s1]) == 2
    assert [(r["a"], r["b"], r["p"]) for r in _lines(out)] == [("x", "y", 0.25), ("y", "z", 0.5)]
    assert merge_stores(out, [s0, s1]) == 0
