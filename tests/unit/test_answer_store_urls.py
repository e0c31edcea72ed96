"""One URL parser (:func:`ragcache.store_kinds.url_scheme`) and one table of answer stores
(:data:`ragcache.store_kinds.ANSWER_STORES`): the table drives validation (settings, ``SemanticCache.from_url``,
``ragcache cache``), the CLI help and the errors, which list its rows."""

from __future__ import annotations

import pytest

from ragcache import store_kinds
from ragcache.app.answers import open_answers
from ragcache.config import ENV_VARS, Config
from ragcache.semantic.stores.admin import AnswerAdmin
from ragcache.semantic.stores.folder_admin import FolderAnswers
from ragcache.store_kinds import ANSWER_STORES, answer_store_kind, load, url_scheme
from ragcache.engine.chunk.stores.factory import open_chunk_store
from ragcache.semantic import SemanticCache, SemanticPolicy
from ragcache.semantic.urls import cache_class
from ragcache.testing import HashingEmbedder


def test_the_parser():
    assert [url_scheme(u) for u in ("postgresql://u@h/db", "Postgres://h", "/tmp/x", "file:///tmp/x", "x")] == \
        ["postgresql", "postgres", "", "file", ""]


def test_every_row_opens_a_cache_and_no_scheme_is_two_stores():
    for kind in ANSWER_STORES:
        assert issubclass(cache_class(kind), SemanticPolicy), kind
        admin = load(kind.admin)
        assert all(callable(getattr(admin, m, None)) for m in ("list", "get", "stats", "remove", "evict", "clear")), kind
    schemes = [s for k in ANSWER_STORES for s in k.schemes]
    assert len(schemes) == len(set(schemes)) and {"", "file", "postgresql"} <= set(schemes)


@pytest.mark.parametrize("url", ["mysql://cache/db", "ftp://x", "redis://h:1/0"])
def test_an_unknown_scheme_is_refused_everywhere_with_the_tables_rows(tmp_path, url):
    with pytest.raises(ValueError) as settings:
        Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_SEMANTIC_URL": url})
    with pytest.raises(ValueError) as opened:
        SemanticCache.from_url(url, embedder=HashingEmbedder(16))
    cfg = Config.from_env({"RAGCACHE_HOME": str(tmp_path)})
    object.__setattr__(cfg, "semantic_url", url)  # past the settings check: what `ragcache cache` reads
    with pytest.raises(ValueError) as answers:
        open_answers(cfg)
    scheme = url.split("://")[0]
    for e in (settings, opened, answers):
        msg = str(e.value)
        assert f"scheme {scheme!r} ({url!r}): use " in msg, msg
        assert all(f"{k.name}: {k.example}" in msg for k in ANSWER_STORES), msg
    assert str(settings.value).startswith("unknown RAGCACHE_SEMANTIC_URL scheme") and settings.value.args == answers.value.args
    assert str(opened.value).startswith("unknown semantic cache URL scheme")
    assert str(opened.value).split(" scheme ")[1] == str(settings.value).split(" scheme ")[1]  # the same error


def test_the_table_drives_validation_and_help(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="unknown semantic cache URL scheme 'sqlite'"):
        answer_store_kind("sqlite:///x")
    extra = store_kinds.AnswerStoreKind("sqlite", ("sqlite",), "sqlite:///FILE", "one SQLite file",
                                        "ragcache.semantic.cache:SemanticCache",
                                        "ragcache.semantic.stores.folder_admin:FolderAnswers", folder=True)
    monkeypatch.setattr(store_kinds, "ANSWER_STORES", (*ANSWER_STORES, extra))
    assert answer_store_kind("sqlite:///x") is extra  # a new row is a new accepted URL
    with pytest.raises(ValueError, match="sqlite: sqlite:///FILE"):
        answer_store_kind("mysql://x")
    help_text = next(v.doc for v in ENV_VARS if v.name == "RAGCACHE_SEMANTIC_URL")
    assert all(k.example in help_text and k.doc in help_text for k in ANSWER_STORES)


def test_folder_urls_open_the_embedded_stores(tmp_path):
    cfg = Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_SEMANTIC_URL": f"file://{tmp_path / 'a'}"})
    store = open_answers(cfg)
    assert isinstance(store, FolderAnswers) and isinstance(store, AnswerAdmin) and store.path == tmp_path / "a"
    assert isinstance(open_answers(Config.from_env({"RAGCACHE_HOME": str(tmp_path)})), FolderAnswers)
    c = SemanticCache.from_url(f"file://{tmp_path / 'b'}", embedder=HashingEmbedder(16))
    try:
        assert type(c) is SemanticCache and c.path == tmp_path / "b"
    finally:
        c.close()


def test_a_bad_kv_url_gets_one_error_from_settings_and_library(tmp_path):
    with pytest.raises(ValueError) as settings:
        Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_KV_URL": "memcached://x"})
    with pytest.raises(ValueError) as library:
        open_chunk_store("memcached://x")
    assert str(settings.value).startswith("unknown RAGCACHE_KV_URL scheme 'memcached' ('memcached://x'): use memory: ")
    assert str(library.value).startswith("unknown chunk store URL scheme 'memcached'") and "redis://" in str(library.value)
    assert str(settings.value).split(" scheme ")[1] == str(library.value).split(" scheme ")[1]  # one table, one error
