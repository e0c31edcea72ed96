"""Deprecated import path: moved to :mod:`ragcache.engine.chunk.chunk_kv` (issue 23: the engine in rooms). Kept so that
``from ragcache.engine.chunk_kv import ...`` keeps working; new code imports from the new module."""

from __future__ import annotations

from ragcache.engine.chunk.chunk_kv import FORMAT, ChunkKV, chunk_from_bytes, chunk_from_payload, chunk_to_bytes  # noqa: F401

__all__ = ["FORMAT", "ChunkKV", "chunk_from_bytes", "chunk_from_payload", "chunk_to_bytes"]
