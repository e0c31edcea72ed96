"""Chunk stores by kind in one table (:data:`ragcache.store_kinds.CHUNK_STORES`, issue 41 item 4, declared once
by issue 49): the settings, the URL factory and their errors read it, and a new kind is one row."""

from __future__ import annotations

import sys
import types

import pytest

from ragcache import store_kinds
from ragcache.config import Config
from ragcache.engine.chunk.stores import (
    DiskChunkStore,
    MemoryChunkStore,
    open_chunk_store,
)
from ragcache.store_kinds import CHUNK_STORES, ChunkStoreKind, chunk_store_kind, chunk_url_schemes, load


@pytest.mark.parametrize("url, kind", [(None, "memory"), ("", "memory"), ("/var/kv", "disk"), ("file:///var/kv", "disk"),
                                       ("FILE:///var/kv", "disk"), ("redis://h:6379/0", "redis"),
                                       ("rediss://h", "redis"), ("unix:///tmp/r.sock", "redis"),
                                       ("valkey://h:6379/0", "redis"), ("Valkeys://h", "redis")])
def test_every_url_selects_its_kind(url, kind):
    assert chunk_store_kind(url).name == kind


def test_every_row_names_a_store_that_opens_from_a_url():
    for kind in CHUNK_STORES.values():
        cls = load(kind.store)
        assert callable(cls.from_url) and cls.__name__.endswith("ChunkStore"), kind


def test_the_factory_opens_the_kind_of_the_url(tmp_path):
    assert isinstance(open_chunk_store(), MemoryChunkStore)
    disk = open_chunk_store(f"file://{tmp_path / 'kv'}", max_bytes=1 << 20)
    assert isinstance(disk, DiskChunkStore) and disk.root == tmp_path / "kv" and disk.max_bytes == 1 << 20
    assert isinstance(open_chunk_store(str(tmp_path / "kv2")), DiskChunkStore)


def test_an_unknown_scheme_lists_the_kinds():
    with pytest.raises(ValueError, match=r"unknown chunk store URL scheme 'memcached'.*memory: .*disk: .*redis: "):
        open_chunk_store("memcached://x")


class Toy(MemoryChunkStore):
    opened: list = []

    @classmethod
    def from_url(cls, url, **kwargs):
        cls.opened.append((url, kwargs))
        return cls()


def test_a_new_kind_is_one_row(monkeypatch, tmp_path):
    module = types.ModuleType("toy_chunk_store")
    module.Toy = Toy
    monkeypatch.setitem(sys.modules, "toy_chunk_store", module)
    monkeypatch.setitem(CHUNK_STORES, "toy", ChunkStoreKind("toy", ("toy",), "a test store", "toy_chunk_store:Toy"))
    assert isinstance(open_chunk_store("toy://anything", max_bytes=5), Toy)
    assert Toy.opened == [("toy://anything", {"max_bytes": 5})] and "toy" in chunk_url_schemes()
    assert Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_KV_URL": "toy://x"}).kv_url == "toy://x"


def test_the_settings_read_the_same_table(tmp_path, monkeypatch):
    """``RAGCACHE_KV_URL`` is checked against :data:`CHUNK_STORES` itself (no copy of its schemes): a scheme
    taken out of the table is refused by the settings too."""
    for scheme in chunk_url_schemes():
        url = f"{scheme}://h/x" if scheme else str(tmp_path / "kv")
        assert Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_KV_URL": url}).kv_url == url
    monkeypatch.setitem(CHUNK_STORES, "redis", ChunkStoreKind("redis", ("redis",), "Redis only", CHUNK_STORES["redis"].store))
    with pytest.raises(ValueError, match="unknown RAGCACHE_KV_URL scheme 'valkey'"):
        Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_KV_URL": "valkey://h:6379/0"})
    assert store_kinds.chunk_store_kind("redis://h").summary == "Redis only"


def test_the_settings_help_lists_every_kind_a_url_names():
    from ragcache.config import ENV_VARS

    doc = next(v.doc for v in ENV_VARS if v.name == "RAGCACHE_KV_URL")
    assert all(k.summary in doc for k in CHUNK_STORES.values() if k.schemes)
