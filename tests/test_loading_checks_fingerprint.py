"""The fingerprint cache is keyed by inode and ctime too: a different weight file of the same size copied
over with its mtime kept (``cp -p``) is hashed again; the fingerprints themselves are unchanged."""

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from jaxrank.models import registry
from jaxrank.models.fingerprint import FINGERPRINT_LENGTH, checkpoint_fingerprint, file_sha256

ROOT = Path(__file__).resolve().parents[1]
SMOLLM2_FINGERPRINT = "b179c9523d0e6a0f"
"""checkpoint_fingerprint of the shipped SmolLM2 GGUF computed before the cache key changed (commit 8c4997d),
as the stored judgements in experiments/results/stores carry it."""
MINILM_FINGERPRINT = "c4a57a7f2011f256"
"""The same for the shipped MiniLM folder (a folder's fingerprint: its files' names and digests)."""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRANK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "fingerprints.json"


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _same_size_other_bytes(path: Path, seed: int):
    path.write_bytes(bytes((seed + i * 7) % 256 for i in range(4096)))


def test_cp_p_over_a_file_is_hashed_again(tmp_path, cache):
    """``cp -p`` onto an existing file: same path, size and mtime; cp writes in place (same inode), so only
    the ctime tells (and a coarse clock could give the same ctime within one tick: wait one)."""
    w, other = tmp_path / "weights.bin", tmp_path / "other.bin"
    _same_size_other_bytes(w, 1)
    _same_size_other_bytes(other, 2)
    os.utime(other, ns=(w.stat().st_atime_ns, w.stat().st_mtime_ns))
    first = file_sha256(w)
    assert first == _sha(w) and json.loads(cache.read_text())[str(w.resolve())]["sha256"] == first
    ino = w.stat().st_ino
    time.sleep(0.05)
    shutil.copy2(other, w)                                          # cp -p: bytes, then mode and times
    st = w.stat()
    assert (st.st_size, st.st_mtime_ns, st.st_ino) == (other.stat().st_size, other.stat().st_mtime_ns, ino)
    assert file_sha256(w) == _sha(other) != first


def test_a_replaced_file_with_the_same_size_and_mtime_is_hashed_again(tmp_path, cache):
    """A copy with its times kept, moved over the file (``cp -p new tmp && mv tmp weights``): a new inode."""
    w, tmp = tmp_path / "weights.bin", tmp_path / "incoming.bin"
    _same_size_other_bytes(w, 3)
    first = file_sha256(w)
    _same_size_other_bytes(tmp, 4)
    os.utime(tmp, ns=(w.stat().st_atime_ns, w.stat().st_mtime_ns))
    os.replace(tmp, w)
    assert file_sha256(w) == _sha(w) != first
    folder = tmp_path / "ckpt"                                       # and the folder fingerprint with it
    folder.mkdir()
    _same_size_other_bytes(folder / "model.safetensors", 5)
    before = checkpoint_fingerprint(folder)
    _same_size_other_bytes(tmp, 6)
    st = (folder / "model.safetensors").stat()
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, folder / "model.safetensors")
    assert checkpoint_fingerprint(folder) != before


def test_an_unchanged_file_is_read_from_the_cache(tmp_path, cache):
    w = tmp_path / "weights.bin"
    _same_size_other_bytes(w, 7)
    digest = file_sha256(w)
    entry = json.loads(cache.read_text())[str(w.resolve())]
    st = w.stat()
    assert entry["ident"] == [st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]
    entry["sha256"] = "0" * 64                                   # a planted digest: served only from the cache
    cache.write_text(json.dumps({str(w.resolve()): entry}))
    assert file_sha256(w) == "0" * 64 != digest


def test_shipped_fingerprints_are_unchanged(cache):
    """The values are what they were before the key changed (stored judgements are keyed by them), and a
    GGUF's is the SHA-256 of its bytes, by hashlib."""
    try:
        smollm2, minilm = registry.resolve("smollm2-135m"), registry.resolve("minilm-l6")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    assert _sha(smollm2)[:FINGERPRINT_LENGTH] == SMOLLM2_FINGERPRINT
    for _ in range(2):                                               # hashed, then from the cache
        assert checkpoint_fingerprint(smollm2) == SMOLLM2_FINGERPRINT
        assert checkpoint_fingerprint(minilm) == MINILM_FINGERPRINT
    store = ROOT / "experiments" / "results" / "stores" / "summeval-coherence-smollm2-135m-auto.jsonl"
    if store.is_file():
        with store.open() as f:
            assert json.loads(f.readline())["fingerprint"].startswith(SMOLLM2_FINGERPRINT + "-")
