"""Deprecated import path: moved to :mod:`ragcache.engine.chunk.cache` (issue 23: the engine in rooms). Kept so that
``from ragcache.engine.chunk_cache import ...`` keeps working; new code imports from the new module."""

from __future__ import annotations

from ragcache.engine.chunk.cache import BoundChunkCache, ChunkCache, ChunkKV, ChunkStore, DiskChunkStore, MemoryChunkStore, context_window  # noqa: F401

__all__ = ["BoundChunkCache", "ChunkCache", "ChunkKV", "ChunkStore", "DiskChunkStore", "MemoryChunkStore", "context_window"]
