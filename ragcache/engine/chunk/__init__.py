"""The chunk KV cache (CacheBlend's per-document KV): settings and store (:class:`ChunkCache`), the
cache bound to one model, fingerprint and KV salt (:class:`BoundChunkCache`), a request's
lookup result (:class:`ChunkPlan`), the stored record (:class:`ChunkKV`) and the stores
(:mod:`ragcache.engine.chunk.stores`)."""

from __future__ import annotations

from ragcache.engine.chunk.bound import BoundChunkCache, DocSpan, context_window
from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.chunk.chunk_kv import ChunkKV
from ragcache.engine.chunk.plan import ChunkHit, ChunkMiss, ChunkPlan
from ragcache.engine.chunk.stores import ChunkStore, DiskChunkStore, MemoryChunkStore, StoreStats, open_chunk_store

__all__ = ["BoundChunkCache", "ChunkCache", "ChunkHit", "ChunkKV", "ChunkMiss", "ChunkPlan", "ChunkStore",
           "DiskChunkStore", "DocSpan", "MemoryChunkStore", "StoreStats", "context_window", "open_chunk_store"]
