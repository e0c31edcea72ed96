"""Deprecated import path: moved to :mod:`ragcache.engine.chunk.stores.redis_store` (issue 23: the engine in rooms). Kept so that
``from ragcache.engine.redis_store import ...`` keeps working; new code imports from the new module."""

from __future__ import annotations

from ragcache.engine.chunk.stores.redis_store import RedisChunkStore, decode_chunk, encode_chunk  # noqa: F401
from ragcache.engine.chunk.stores.factory import open_chunk_store  # noqa: F401 (was defined here)

__all__ = ["RedisChunkStore", "decode_chunk", "encode_chunk", "open_chunk_store"]
