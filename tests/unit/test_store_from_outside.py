"""A store kind kept outside the package, added as a new contributor would from ``docs/design/stores.md``
(issue 49): two ``memory://NAME`` stores (:mod:`outside_store_doubles`) join the tables through
:func:`ragcache.store_kinds.register` (``ragcache/store_kinds.py`` is not edited), then every shipped suite runs
against them through their URLs: the semantic cache contract, the answer admin contract, the chunk store
contract, and ``ragcache cache``. Every reader of the tables sees a registered row (the settings' check and help,
the URL factories, the CLI), and ``register`` refuses a scheme or name already taken."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from outside_store_doubles import (
    ANSWER_KIND,
    CHUNK_KIND,
    MemoryAnswers,
    MemorySemanticCache,
    SharedMemoryChunkStore,
    forget,
)
from ragcache import store_kinds
from ragcache.app import cache_cmd
from ragcache.app.answers import open_answers
from ragcache.app.cli import app
from ragcache.config import ENV_VARS, Config
from ragcache.engine.chunk.stores.factory import open_chunk_store
from ragcache.semantic import SemanticCache
from ragcache.store_kinds import AnswerStoreKind, ChunkStoreKind, register, unregister
from ragcache.testing import HashingEmbedder
from ragcache.testing.answer_admin_contract import EMB as ADMIN_EMB
from ragcache.testing.answer_admin_contract import AnswerAdminContract, fill
from ragcache.testing.chunk_stores import ChunkStoreContract, make_kv
from ragcache.testing.semantic_contract import SemanticCacheContract

EMB = HashingEmbedder(64)
_names = itertools.count()
runner = CliRunner()


@pytest.fixture(autouse=True)
def registered() -> Iterator[None]:
    """Both ``memory://`` kinds in their tables for one test, taken out afterwards."""
    register(ANSWER_KIND)
    register(CHUNK_KIND)
    yield
    unregister(ANSWER_KIND)
    unregister(CHUNK_KIND)


@pytest.fixture()
def name() -> Iterator[str]:
    n = f"outside-{next(_names)}"
    yield n
    forget(n)


def settings(tmp_path, name: str) -> Config:
    return Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_SEMANTIC_URL": f"memory://{name}",
                            "RAGCACHE_KV_URL": f"memory://{name}"})


# ------------------------------------------------------------------ the shipped suites, through the URLs
class TestMemoryAnswerStore(SemanticCacheContract):
    @pytest.fixture()
    def open_cache(self, name):
        opened = []

        def open_(**kwargs):
            kwargs.setdefault("embedder", EMB)
            opened.append(SemanticCache.from_url(f"memory://{name}", **kwargs))
            return opened[-1]
        yield open_
        for cache in opened:
            cache.close()


class TestMemoryAnswerAdmin(AnswerAdminContract):
    @pytest.fixture()
    def opened(self, name, tmp_path):
        """The admin view opened as ``ragcache cache`` opens it (:func:`open_answers` on the settings)."""
        caches = []

        def open_memory():
            caches.append(SemanticCache.from_url(f"memory://{name}", embedder=ADMIN_EMB, threshold=0.9))
            return caches[-1]
        yield open_memory, open_answers(settings(tmp_path, name))
        for c in caches:
            c.close()


class TestSharedMemoryChunkStore(ChunkStoreContract):
    @pytest.fixture()
    def make_store(self):
        names = []

        def make(max_bytes=None):
            names.append(f"outside-kv-{next(_names)}")
            return open_chunk_store(f"memory://{names[-1]}", max_bytes=max_bytes)
        yield make
        for n in names:
            forget(n)


# ------------------------------------------------------------------ every reader of the tables
def test_without_registering_the_scheme_is_refused_everywhere(tmp_path):
    unregister(ANSWER_KIND)
    unregister(CHUNK_KIND)
    for var in ("RAGCACHE_SEMANTIC_URL", "RAGCACHE_KV_URL"):
        with pytest.raises(ValueError, match=f"unknown {var} scheme 'memory'"):
            Config.from_env({"RAGCACHE_HOME": str(tmp_path), var: "memory://x"})
    with pytest.raises(ValueError, match="unknown semantic cache URL scheme 'memory'"):
        SemanticCache.from_url("memory://x", embedder=EMB)
    with pytest.raises(ValueError, match="unknown chunk store URL scheme 'memory'"):
        open_chunk_store("memory://x")
    doc = {v.name: v.doc for v in ENV_VARS}
    assert ANSWER_KIND.doc not in doc["RAGCACHE_SEMANTIC_URL"] and CHUNK_KIND.summary not in doc["RAGCACHE_KV_URL"]


def test_every_reader_sees_a_registered_row(name, tmp_path):
    cfg = settings(tmp_path, name)  # the settings' check accepts both URLs
    assert (cfg.semantic_url, cfg.kv_url) == (f"memory://{name}", f"memory://{name}")
    doc = {v.name: v.doc for v in ENV_VARS}  # the help of ragcache config and the configuration reference
    assert f"{ANSWER_KIND.example} ({ANSWER_KIND.doc})" in doc["RAGCACHE_SEMANTIC_URL"]
    assert CHUNK_KIND.summary in doc["RAGCACHE_KV_URL"]
    cache = SemanticCache.from_url(cfg.semantic_url, embedder=EMB)  # the URL factories
    assert isinstance(cache, MemorySemanticCache)
    cache.close()
    assert isinstance(open_answers(cfg), MemoryAnswers)
    a, b = open_chunk_store(cfg.kv_url), open_chunk_store(cfg.kv_url)
    assert isinstance(a, SharedMemoryChunkStore)
    kv = make_kv(3)
    assert a.put(kv) and b.contains(kv.key)  # one store per name
    assert cache_cmd.chunk_kind(cfg) is CHUNK_KIND and cache_cmd.shared_kv_url(cfg) == cfg.kv_url
    for url, listing in (("mysql://x", "shared-memory: memory://NAME"), (None, "shared-memory: in this process")):
        with pytest.raises(ValueError) as e:  # the errors list the registered kind with the built-in ones
            (store_kinds.answer_store_kind(url) if url else store_kinds.chunk_store_kind("memcached://x"))
        assert listing in str(e.value) and ("embedded: " in str(e.value) or "redis: " in str(e.value))


@pytest.mark.parametrize("kind, taken", [
    (AnswerStoreKind("pg2", ("postgres",), "postgres://x", "a copy", "m:C", "m:A"), "'postgres' kind"),
    (AnswerStoreKind("mem2", ("memory", "mem"), "memory://x", "a copy", "m:C", "m:A"), "'shared-memory' kind"),
    (AnswerStoreKind("folder2", ("",), "DIR", "a copy", "m:C", "m:A"), "'embedded' kind"),
    (ChunkStoreKind("valkey2", ("valkeys",), "a copy", "m:C"), "'redis' kind"),
    (ChunkStoreKind("mem2", ("memory",), "a copy", "m:C"), "'shared-memory' kind"),
])
def test_a_taken_scheme_is_refused_naming_its_kind(kind, taken):
    before = (store_kinds.ANSWER_STORES, dict(store_kinds.CHUNK_STORES))
    with pytest.raises(ValueError, match=f"already taken by the {taken}.*pick another scheme"):
        register(kind)
    assert (store_kinds.ANSWER_STORES, dict(store_kinds.CHUNK_STORES)) == before


@pytest.mark.parametrize("kind", [AnswerStoreKind("postgres", ("pg9",), "pg9://x", "d", "m:C", "m:A"),
                                  ChunkStoreKind("disk", ("disk9",), "d", "m:C"),
                                  ChunkStoreKind("shared-memory", ("other",), "d", "m:C")])
def test_a_taken_name_is_refused(kind):
    with pytest.raises(ValueError, match=f"already has a store kind named {kind.name!r}: pick another name"):
        register(kind)


@pytest.mark.parametrize("bad", [ChunkStoreKind("x", ("Mem",), "d", "m:C"), ChunkStoreKind("x", ("x://",), "d", "m:C")])
def test_a_scheme_is_lower_case_without_separator(bad):
    with pytest.raises(ValueError, match="lower case, without '://'"):
        register(bad)


def test_only_rows_register():
    with pytest.raises(TypeError, match="AnswerStoreKind or a ChunkStoreKind, got dict"):
        register({"name": "x"})  # type: ignore[arg-type]


# ------------------------------------------------------------------ ragcache cache on the registered kinds
def test_cache_commands_on_the_registered_stores(name, tmp_path, monkeypatch):
    cfg = settings(tmp_path, name)
    for var, value in (("RAGCACHE_HOME", tmp_path), ("RAGCACHE_SEMANTIC_URL", cfg.semantic_url),
                       ("RAGCACHE_KV_URL", cfg.kv_url)):
        monkeypatch.setenv(var, str(value))
    caches = []

    def open_memory():
        caches.append(SemanticCache.from_url(cfg.semantic_url, embedder=ADMIN_EMB, threshold=0.9))
        return caches[-1]
    fill(open_memory)
    kvs = [make_kv(s) for s in range(2)]
    store = open_chunk_store(cfg.kv_url)
    assert store.put_many(kvs) == 2
    r = runner.invoke(app, ["cache", "stats", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert (s["answers"]["store"], s["answers"]["where"], s["answers"]["entries"]) == ("memory", cfg.semantic_url, 3)
    assert (s["chunks"]["store"], s["chunks"]["where"], s["chunks"]["files"]) == ("shared-memory", cfg.kv_url, 2)
    assert s["chunks"]["budget"] == CHUNK_KIND.budget and s["chunks"]["bytes"] == sum(kv.nbytes for kv in kvs)
    text = runner.invoke(app, ["cache", "stats"]).stdout  # the table wraps its cells: their words, in order
    words = iter(text.split())
    assert all(w in words for w in f"tokens of KV, budget {CHUNK_KIND.budget}".split()) and "maxmemory" not in text
    rows = json.loads(runner.invoke(app, ["cache", "ls", "--layer", "chunks", "--json"]).stdout)
    assert {r["key"] for r in rows} == {kv.key for kv in kvs}
    assert runner.invoke(app, ["cache", "clear", "--layer", "chunks", "--yes"]).exit_code == 0
    assert len(store) == 0
    for c in caches:
        c.close()


def test_cache_stats_refuses_a_store_without_admin_methods(tmp_path, monkeypatch):
    bare = ChunkStoreKind("bare", ("bare",), "a store without admin methods",
                          "ragcache.engine.chunk.stores.memory:MemoryChunkStore")
    register(bare)
    try:
        monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path))
        monkeypatch.setenv("RAGCACHE_KV_URL", "bare://x")
        for args in (["stats"], ["ls", "--layer", "chunks"], ["stats", "--json"]):
            r = runner.invoke(app, ["cache", *args])
            assert r.exit_code == 2, r.output
            msg = " ".join(r.output.split())
            assert "the 'bare' chunk store" in msg and "has no admin methods" in msg, msg
            assert "implement ragcache.engine.chunk.stores.ChunkStoreAdmin (where, entries" in msg, msg
    finally:
        unregister(bare)
