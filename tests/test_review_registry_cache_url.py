"""A URL in $JAXRANK_CACHE (a remote compilation cache) never becomes a local folder named after it in the
model registry's cache: the registry falls back to the local default (review: ``Path("gs://b/x")`` made
``./gs:/b/x``)."""

from jaxrank.models import registry


def test_url_cache_falls_back_to_the_local_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JAXRANK_CACHE", "gs://bucket/jax")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    d = registry.cache_dir()
    assert d == tmp_path / "xdg" / "jaxrank" and d.is_dir()
    assert not (tmp_path / "gs:").exists()


def test_local_cache_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRANK_CACHE", str(tmp_path / "c"))
    assert registry.cache_dir() == tmp_path / "c" and (tmp_path / "c").is_dir()
