"""Deprecated import path: moved to :mod:`ragcache.engine.chunk.stores` (issue 23: the engine in rooms). Kept so that
``from ragcache.engine.stores import ...`` keeps working; new code imports from the new module."""

from __future__ import annotations

from ragcache.engine.chunk.stores import ChunkKV, ChunkStore, DiskChunkStore, MemoryChunkStore, StoreStats, chunk_from_payload  # noqa: F401

__all__ = ["ChunkKV", "ChunkStore", "DiskChunkStore", "MemoryChunkStore", "StoreStats", "chunk_from_payload"]
