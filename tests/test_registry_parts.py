"""A model shipped in several packages is joined once into the cache and joined again when a part changes
(jaxrank/models/registry.py), even when the new parts have the old size.

Independent check: the cached file's bytes against the parts' bytes concatenated here.
"""

import os

from jaxrank.models import registry


def _spec():
    return registry.ModelSpec("fake", "a fake two-part model", (("fake-part1", "1", "p1"), ("fake-part2", "1", "p2")),
                              cache_file="fake.gguf")


def _parts(tmp_path, one, two):
    (tmp_path / "p1").write_bytes(one)
    (tmp_path / "p2").write_bytes(two)
    return [tmp_path / "p1", tmp_path / "p2"]


def test_a_changed_part_of_the_same_size_is_joined_again(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRANK_CACHE", str(tmp_path / "cache"))
    parts = _parts(tmp_path, b"GGUF-old-part-1", b"old-part-2")
    target = registry._concatenate(_spec(), parts)
    assert target.read_bytes() == b"GGUF-old-part-1old-part-2"
    stamp = target.stat().st_mtime_ns, target.stat().st_ino
    assert registry._concatenate(_spec(), parts) == target                    # unchanged parts: reused
    assert (target.stat().st_mtime_ns, target.stat().st_ino) == stamp
    (tmp_path / "p1").write_bytes(b"GGUF-NEW-part-1")                         # same size, new content
    st = (tmp_path / "p1").stat()
    os.utime(tmp_path / "p1", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))    # a later mtime, whatever the clock
    assert registry._concatenate(_spec(), parts).read_bytes() == b"GGUF-NEW-part-1old-part-2"


def test_a_new_package_version_is_joined_again(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRANK_CACHE", str(tmp_path / "cache"))
    parts = _parts(tmp_path, b"aaaa", b"bbbb")
    versions = {"fake-part1": "1.0", "fake-part2": "1.0"}
    monkeypatch.setattr(registry.metadata, "version", lambda d: versions[d])
    target = registry._concatenate(_spec(), parts)
    stamp = target.stat().st_ino
    versions["fake-part2"] = "1.1"
    (tmp_path / "p2").write_bytes(b"cccc")
    os.utime(tmp_path / "p2", ns=(0, 0))                  # even with an old mtime: the version differs
    assert registry._concatenate(_spec(), parts).read_bytes() == b"aaaacccc"
    assert target.stat().st_ino != stamp
