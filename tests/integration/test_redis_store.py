"""RedisChunkStore against a real Valkey started by the session fixture: the ChunkStore contract suite, and more."""

from __future__ import annotations

import logging
import uuid

import pytest
import torch

pytest.importorskip("redis", reason="pip install 'ragcache[shared]'")

from ragcache.engine.chunk.stores.redis_store import RedisChunkStore, encode_chunk  # noqa: E402
from ragcache.engine.chunk.stores import ChunkStore  # noqa: E402
from ragcache.remote import RemoteStoreError  # noqa: E402
from ragcache.testing.chunk_stores import FORMATS, FP, ChunkStoreContract, make_kv  # noqa: E402


@pytest.fixture()
def make_store(valkey_server):
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    opened: list[RedisChunkStore] = []

    def factory(max_bytes: int | None = None) -> ChunkStore:
        s = RedisChunkStore(valkey_server.url, prefix=prefix, max_bytes=max_bytes)
        opened.append(s)
        return s

    yield factory
    if opened:
        opened[0].clear()
    for s in opened:
        s.close()


class TestRedisStore(ChunkStoreContract):
    """The chunk-store contract suite (:mod:`ragcache.testing.chunk_stores`) against Redis / Valkey; its
    ``make_store`` is the module fixture above."""

    @pytest.fixture()
    def make_store(self, make_store):  # noqa: F811  (the module-level fixture of the same name)
        return make_store


@pytest.fixture()
def store(make_store) -> RedisChunkStore:
    return make_store()


def test_shared_between_clients(store, valkey_server):
    other = RedisChunkStore(valkey_server.url, prefix=store.prefix)
    kv = make_kv(5, n=12, dtype=torch.bfloat16)
    store.put(kv)
    got = other.get(kv.key, fingerprint=FP)
    assert got is not None and torch.equal(got.keys, kv.keys) and got.keys.dtype == torch.bfloat16
    assert other.remove(kv.key) and store.get(kv.key) is None


def test_get_many_is_one_round_trip(store, monkeypatch):
    kvs = [make_kv(i) for i in range(6)]
    store.put_many(kvs)
    calls = []
    real = store._r.pipeline

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(store._r, "pipeline", counting)
    got = store.get_many([kv.key for kv in kvs], fingerprint=FP)
    assert all(g is not None for g in got) and len(calls) == 1


@pytest.mark.parametrize("damage", ["garbage", "truncate", "other-key", "no-format"])
def test_corrupt_or_foreign_value_is_a_logged_miss(store, caplog, damage):
    kv, other = make_kv(3), make_kv(4)
    store.put(kv)
    raw = store._r.get(store._k(kv.key))
    bad = {"garbage": b"\x00not safetensors", "truncate": raw[:-20], "other-key": encode_chunk(other),
           "no-format": b"x" * 64}[damage]
    store._r.set(store._k(kv.key), bad)
    with caplog.at_level(logging.WARNING, logger="ragcache.engine.chunk.stores.redis_store"):
        assert store.get(kv.key) is None
    assert "failed its check" in caplog.text and store.stats.corrupt == 1
    assert not store.contains(kv.key) and len(store) == 0
    assert store.put(kv) and torch.equal(store.get(kv.key).values, kv.values)


@pytest.mark.parametrize("fmt_name", FORMATS)
def test_every_record_field_round_trips(store, fmt_name):
    """Whatever ChunkKV carries (storage format, quantized codes, scales, ...) is persisted, not only K/V."""
    kv = make_kv(6, fmt=fmt_name)
    assert store.get_many([kv.key])[0] is None
    store.put(kv)
    got = store.get(kv.key)
    for f in ("key", "fingerprint", "token_ids", "start", "kv_format", "nbytes"):
        assert getattr(kv, f) == getattr(got, f), f
    assert torch.equal(kv.keys, got.keys) and torch.equal(kv.values, got.values)


def test_ttl_expires_and_index_follows(valkey_server):
    import time

    s = RedisChunkStore(valkey_server.url, prefix=f"t{uuid.uuid4().hex[:8]}:", ttl_s=0.2)
    kv = make_kv(7)
    s.put(kv)
    assert s.contains(kv.key) and len(s) == 1
    time.sleep(0.4)
    assert s.get(kv.key) is None and len(s) == 0 and s.nbytes == 0
    s.close()


def test_unreachable_server_is_a_clear_error():
    s = RedisChunkStore("redis://127.0.0.1:1/0", timeout_s=0.5)
    with pytest.raises(RemoteStoreError, match="unreachable"):
        s.get(make_kv(0).key)


def test_bad_arguments(valkey_server):
    with pytest.raises(ValueError, match="max_bytes"):
        RedisChunkStore(valkey_server.url, max_bytes=0)
    with pytest.raises(ValueError, match="ttl_s"):
        RedisChunkStore(valkey_server.url, ttl_s=-1)


def test_urls_and_environment_select_the_shared_stores(valkey_server, pg_server, monkeypatch, tmp_path):
    from ragcache.engine.chunk.stores import open_chunk_store
    from ragcache.engine.chunk.stores import DiskChunkStore, MemoryChunkStore
    from ragcache.semantic import SemanticCache
    from ragcache.semantic.pg_cache import PgSemanticCache
    from ragcache.testing import HashingEmbedder

    from ragcache.app.runtime import answer_cache, chunk_store
    from ragcache.config import Config

    monkeypatch.setenv("RAGCACHE_KV_URL", valkey_server.url)  # the library reads no environment:
    monkeypatch.setenv("RAGCACHE_SEMANTIC_URL", pg_server.url)  # no URL is an in-memory store
    assert isinstance(open_chunk_store(), MemoryChunkStore)
    assert isinstance(open_chunk_store(str(tmp_path / "kv")), DiskChunkStore)
    assert type(SemanticCache.from_url(embedder=HashingEmbedder(16))) is SemanticCache
    cfg = Config.from_env({"RAGCACHE_HOME": str(tmp_path)})  # the app layer: no URL set, the embedded stores
    assert isinstance(chunk_store(cfg), DiskChunkStore)
    assert type(answer_cache(cfg, HashingEmbedder(16))) is SemanticCache
    cfg = Config.from_env()  # the URLs from the environment select the shared stores
    assert isinstance(chunk_store(cfg), RedisChunkStore)
    assert isinstance(open_chunk_store(valkey_server.url), RedisChunkStore)
    sc = SemanticCache.from_url(pg_server.url, embedder=HashingEmbedder(16), schema="t_env")
    assert isinstance(sc, PgSemanticCache)
    sc.close()
    with pytest.raises(ValueError, match="scheme"):
        open_chunk_store("memcached://x")
    with pytest.raises(ValueError, match="scheme"):
        SemanticCache.from_url("mysql://x")


def test_sightings_are_shared_between_clients_and_expire(store, valkey_server):
    from ragcache.engine.chunk.admission import SIGHTING_TTL_S

    other = RedisChunkStore(valkey_server.url, prefix=store.prefix)
    k = make_kv(0).key
    assert store.sight_many([k]) == [1] and other.sight_many([k, k]) == [2, 3]
    ttl = other._r.ttl(f"{store.prefix}seen:{k}")
    assert 0 < ttl <= SIGHTING_TTL_S
    store.clear()
    assert store.sight_many([k]) == [1]  # clear() forgets sightings too
    other.close()


@pytest.mark.parametrize("n", [0, 1, 3])
def test_the_admin_interface_lists_removes_and_clears(store, n):
    """:class:`~ragcache.engine.chunk.stores.ChunkStoreAdmin` (what ``ragcache cache`` calls): entries least
    recently used first with their metadata and no tensor, a damaged value listed with its error."""
    from ragcache.engine.chunk.stores import ChunkStoreAdmin

    assert isinstance(store, ChunkStoreAdmin) and store.prefix in store.where and "@" not in store.where
    kvs = [make_kv(2 + i) for i in range(n)]
    for kv in kvs:
        store.put(kv)
    got = store.entries()
    assert [e.key for e in got] == [kv.key for kv in kvs]
    assert all(e.error is None and int(e.metadata["n_tokens"]) == len(kv.token_ids) and e.metadata["key"] == kv.key
               and e.nbytes > 0 for e, kv in zip(got, kvs))
    assert sum(e.nbytes for e in got) == store.nbytes
    if n:
        import struct

        store._r.set(store._k(kvs[0].key), struct.pack("<Q", 5) + b"notjs")  # damaged behind the store's back
        first = store.entries()[0]
        assert first.metadata is None and "unreadable safetensors header" in first.error
        assert store.remove(kvs[-1].key) and kvs[-1].key not in [e.key for e in store.entries()]
    assert store.clear() == max(n - 1, 0) and store.entries() == [] and store.nbytes == 0
