"""The one place a chunk store URL becomes a store: the kind :data:`ragcache.store_kinds.CHUNK_STORES` names for it."""

from __future__ import annotations

from typing import Any

from ragcache.engine.chunk.stores.base import ChunkStore
from ragcache.store_kinds import chunk_store_kind, load

__all__ = ["open_chunk_store"]


def open_chunk_store(url: str | None = None, **kwargs: Any) -> ChunkStore:
    """The chunk store a URL names, by :data:`ragcache.store_kinds.CHUNK_STORES` (the row's class's
    ``from_url``): ``redis://`` / ``rediss://`` / ``unix://`` / ``valkey://`` -> :class:`~.redis_store.RedisChunkStore`;
    ``None`` -> a :class:`~.memory.MemoryChunkStore` (the default; the app layer passes ``RAGCACHE_KV_URL``);
    a path or ``file://DIR`` -> :class:`~.disk.DiskChunkStore`. ``kwargs`` go to the constructor.

    Raises:
        ValueError: an unknown URL scheme (the message lists the kinds).
    """
    kind = chunk_store_kind(url)
    return load(kind.store).from_url(url or None, **kwargs)
