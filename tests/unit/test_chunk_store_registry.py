"""Chunk stores by kind in one table (ragcache.engine.chunk.stores.registry, issue 41 item 4): the URL factory
and its errors read it, and a new kind is one line."""

from __future__ import annotations

import pytest

from ragcache.engine.chunk.stores import (
    DiskChunkStore,
    MemoryChunkStore,
    open_chunk_store,
)
from ragcache.engine.chunk.stores.registry import (
    CHUNK_STORES,
    ChunkStoreKind,
    store_kind,
    url_schemes,
)


@pytest.mark.parametrize("url, kind", [(None, "memory"), ("", "memory"), ("/var/kv", "disk"), ("file:///var/kv", "disk"),
                                       ("FILE:///var/kv", "disk"), ("redis://h:6379/0", "redis"),
                                       ("rediss://h", "redis"), ("unix:///tmp/r.sock", "redis"),
                                       ("valkey://h:6379/0", "redis"), ("Valkeys://h", "redis")])
def test_every_url_selects_its_kind(url, kind):
    assert store_kind(url).name == kind


def test_the_factory_opens_the_kind_of_the_url(tmp_path):
    assert isinstance(open_chunk_store(), MemoryChunkStore)
    disk = open_chunk_store(f"file://{tmp_path / 'kv'}", max_bytes=1 << 20)
    assert isinstance(disk, DiskChunkStore) and disk.root == tmp_path / "kv" and disk.max_bytes == 1 << 20
    assert isinstance(open_chunk_store(str(tmp_path / "kv2")), DiskChunkStore)


def test_an_unknown_scheme_lists_the_kinds():
    with pytest.raises(ValueError, match=r"unknown chunk store URL scheme 'memcached'.*memory: .*disk: .*redis: "):
        open_chunk_store("memcached://x")


def test_a_new_kind_is_one_line(monkeypatch):
    opened = []
    monkeypatch.setitem(CHUNK_STORES, "toy", ChunkStoreKind("toy", ("toy",), "a test store",
                                                            lambda url, **kw: opened.append((url, kw)) or MemoryChunkStore()))
    assert isinstance(open_chunk_store("toy://anything", max_bytes=5), MemoryChunkStore)
    assert opened == [("toy://anything", {"max_bytes": 5})] and "toy" in url_schemes()


def test_the_settings_accept_exactly_the_tables_schemes():
    from ragcache.config import KV_URL_SCHEMES

    assert set(KV_URL_SCHEMES) == set(url_schemes()), (
        "ragcache.config.KV_URL_SCHEMES (RAGCACHE_KV_URL's check, read without importing the engine) must list "
        "the schemes of ragcache.engine.chunk.stores.registry.CHUNK_STORES")
