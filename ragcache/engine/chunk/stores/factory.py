"""The one place a chunk store URL becomes a store (memory, disk or Redis / Valkey)."""

from __future__ import annotations

from typing import Any

from ragcache.engine.chunk.stores.base import ChunkStore
from ragcache.engine.chunk.stores.disk import DiskChunkStore
from ragcache.engine.chunk.stores.memory import MemoryChunkStore
from ragcache.config import KV_URL_CHOICES, KV_URL_SCHEMES, bad_url_scheme, url_scheme

__all__ = ["open_chunk_store"]


def open_chunk_store(url: str | None = None, **kwargs: Any) -> ChunkStore:
    """The chunk store a URL names: ``redis://`` / ``rediss://`` / ``unix://`` / ``valkey://`` -> :class:`~.redis_store.RedisChunkStore`;
    ``None`` -> a :class:`~.memory.MemoryChunkStore` (the default; the app layer passes ``RAGCACHE_KV_URL``);
    a path or ``file://DIR`` -> :class:`~.disk.DiskChunkStore`. ``kwargs`` go to the constructor.

    Raises:
        ValueError: an unknown URL scheme.
    """
    if not url:
        return MemoryChunkStore(**kwargs)
    scheme = url_scheme(url)
    if scheme not in KV_URL_SCHEMES:
        raise bad_url_scheme("chunk store URL", url, KV_URL_CHOICES)
    if scheme in ("redis", "rediss", "unix", "valkey", "valkeys"):
        if scheme.startswith("valkey"):
            url = "redis" + url[len("valkey"):]
        from ragcache.engine.chunk.stores.redis_store import RedisChunkStore

        return RedisChunkStore(url, **kwargs)
    return DiskChunkStore(url.removeprefix("file://"), **kwargs)
