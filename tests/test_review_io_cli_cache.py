"""Review of the command line's compilation cache: a cache folder that is a file, or a URL in $JAXRANK_CACHE, is a
one-line note and a run without the cache (no traceback, no local folder named 'gs:')."""

import argparse

import pytest

from jaxrank.cli._common import enable_cache
from jaxrank.compilation import enable_compilation_cache


def test_a_cache_folder_that_is_a_file_is_a_note(tmp_path, monkeypatch, capsys):
    (tmp_path / "c2").mkdir()
    (tmp_path / "c2" / "xla").write_text("")
    monkeypatch.setenv("JAXRANK_CACHE", str(tmp_path / "c2"))
    monkeypatch.delenv("JAXRANK_COMPILATION_CACHE", raising=False)
    assert enable_cache(argparse.Namespace(compilation_cache=True)) is False
    err = capsys.readouterr().err
    assert err.startswith("note: no compilation cache (") and "not a folder" in err and err.count("\n") == 1


def test_a_url_in_jaxrank_cache_is_a_note_and_makes_no_local_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JAXRANK_CACHE", "gs://bucket/x")
    monkeypatch.delenv("JAXRANK_COMPILATION_CACHE", raising=False)
    with pytest.raises(ValueError, match=r"\$JAXRANK_CACHE must be a local folder, got the URL 'gs://bucket/x'"):
        enable_compilation_cache()
    assert enable_cache(argparse.Namespace(compilation_cache=True)) is False
    assert "note: no compilation cache ($JAXRANK_CACHE must be a local folder" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
