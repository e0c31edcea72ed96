"""In-process chunk KV store: least recently used evicted first under a byte budget."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from ragcache.engine.chunk.admission import SightingCounts
from ragcache.engine.chunk.stores.base import BatchedStore, ChunkKV, StoreStats, check_budget
from ragcache.hashing import ChunkHash

__all__ = ["MemoryChunkStore"]

log = logging.getLogger(__name__)


class MemoryChunkStore(BatchedStore):
    """In-process chunk store, least recently used evicted first under ``max_bytes``.

    Args:
        max_bytes: byte budget over the stored K and V (:attr:`ChunkKV.nbytes`: codes, scales and zero
            points of quantized chunks) (default 1 GiB); ``None`` = unbounded.
    """

    def __init__(self, max_bytes: int | None = 1 << 30) -> None:
        self.max_bytes = check_budget(max_bytes)
        self._entries: OrderedDict[str, ChunkKV] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.stats = StoreStats()
        self._sightings = SightingCounts()

    @classmethod
    def from_url(cls, url: str | None = None, **kwargs: Any) -> MemoryChunkStore:
        """The store of the ``memory`` row of :data:`ragcache.store_kinds.CHUNK_STORES` (no URL: ``url`` is
        ``None``); ``kwargs`` go to the constructor."""
        return cls(**kwargs)

    def sight_many(self, keys: Sequence[ChunkHash]) -> list[int]:
        """Count one sighting of each key (:mod:`ragcache.engine.chunk.admission`); each key's count after it."""
        return self._sightings.sight_many(keys)

    def get(self, key: ChunkHash, *, fingerprint: str | None = None) -> ChunkKV | None:
        with self._lock:
            kv = self._entries.get(key)
            if kv is None or (fingerprint is not None and kv.fingerprint != fingerprint):
                self.stats.misses += 1
                return None
            self._entries.move_to_end(key)
            self.stats.hits += 1
            return kv

    def put(self, kv: ChunkKV) -> bool:
        size = kv.nbytes
        with self._lock:
            if self.max_bytes is not None and size > self.max_bytes:
                log.warning("chunk %s (%d bytes) exceeds the store budget of %d bytes; not cached",
                            kv.key[:12], size, self.max_bytes)
                return False
            old = self._entries.pop(kv.key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._entries[kv.key] = kv
            self._bytes += size
            self.stats.puts += 1
            while self.max_bytes is not None and self._bytes > self.max_bytes:
                _, victim = self._entries.popitem(last=False)
                self._bytes -= victim.nbytes
                self.stats.evictions += 1
            return True

    def contains(self, key: ChunkHash) -> bool:
        return key in self._entries

    def remove(self, key: ChunkHash) -> bool:
        with self._lock:
            kv = self._entries.pop(key, None)
            if kv is None:
                return False
            self._bytes -= kv.nbytes
            return True

    def close(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
        self._sightings = SightingCounts()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes


