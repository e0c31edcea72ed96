"""Chunk KV stores behind one protocol (:class:`ChunkStore`): memory, disk, Redis / Valkey, their table by kind
(:data:`ragcache.store_kinds.CHUNK_STORES`) and the URL factory.

:class:`RedisChunkStore` is imported lazily (it needs the ``redis`` client, ``ragcache[shared]``).
"""

from __future__ import annotations

from typing import Any

from ragcache.engine.chunk.stores.base import (
    BatchedStore,
    ChunkEntry,
    ChunkKV,
    ChunkStore,
    ChunkStoreAdmin,
    StoreStats,
    chunk_from_payload,
)
from ragcache.engine.chunk.stores.disk import DiskChunkStore
from ragcache.engine.chunk.stores.factory import open_chunk_store
from ragcache.engine.chunk.stores.memory import MemoryChunkStore

__all__ = ["BatchedStore", "ChunkEntry", "ChunkKV", "ChunkStore", "ChunkStoreAdmin", "DiskChunkStore", "MemoryChunkStore", "RedisChunkStore",
           "StoreStats", "chunk_from_payload", "open_chunk_store"]


def __getattr__(name: str) -> Any:
    if name == "RedisChunkStore":
        from ragcache.engine.chunk.stores.redis_store import RedisChunkStore

        return RedisChunkStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
