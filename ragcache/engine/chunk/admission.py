"""Chunk KV admission: a missed document's chunk KV is computed only when it is expected to be read again.

Computing a missed document's chunk KV costs one more forward pass over it (on its own, after the
sink: :meth:`~ragcache.engine.chunk.bound.BoundChunkCache.add_many`). On a stream whose documents
rarely repeat that pass is paid for every document and read by none (LMCache #4663: reuse decays to
about 1x within 60-90 novel RAG queries), so the chunk cache would cost more than no chunk cache.
The rule here is the one of second-hit caching (a "doorkeeper", as TinyLFU admits an item only
once it was seen before; Einziger et al., ACM ToS 2017, §3.4.2): each missed document's *sighting*
is counted per chunk key, and its KV is computed once the count reaches ``chunk_admission``
(default :data:`DEFAULT_ADMISSION` = 2: the second request that misses it). A document seen once is
never computed unless the caller says the engine is idle
(:meth:`LocalEngine.drain_chunk_queue(first_sightings=True) <ragcache.engine.engine.LocalEngine.drain_chunk_queue>`)
or precomputes on purpose (:meth:`ChunkCache.precompute <ragcache.engine.chunk.ChunkCache.precompute>`,
unconditional).

The counts live in the chunk store, so processes and replicas sharing a store share them:
:class:`SightingCounts` in memory, small files for :class:`~ragcache.engine.chunk.stores.DiskChunkStore`,
``INCR`` keys with a time to live for :class:`~ragcache.engine.chunk.stores.redis_store.RedisChunkStore`.
A store without ``sight_many`` (a third-party one) is counted in the process
(:class:`~ragcache.engine.chunk.cache.ChunkCache` keeps a :class:`SightingCounts`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ragcache.hashing import ChunkHash
from ragcache.limits import DEFAULT_ADMISSION, check_admission

__all__ = ["DEFAULT_ADMISSION", "MAX_SIGHTINGS", "SIGHTING_TTL_S", "SightingCounts", "Sightings", "check_admission"]

MAX_SIGHTINGS = 100_000
"""Documents whose sightings a store remembers (least recently seen forgotten first): ~100 bytes each."""

SIGHTING_TTL_S = 7 * 86400
"""Seconds a Redis / Valkey sighting count lives after its last sighting (a week: the server forgets the rest)."""


@runtime_checkable
class Sightings(Protocol):
    """A store that counts how often each chunk key was missed (shared by everything using the store)."""

    def sight_many(self, keys: Sequence[ChunkHash]) -> list[int]:
        """Count one sighting of each key (a key given twice counts twice); returns each key's count after it."""
        ...


class SightingCounts:
    """In-process sighting counts, least recently seen forgotten above ``max_entries`` (thread-safe).

    Args:
        max_entries: documents remembered (default :data:`MAX_SIGHTINGS`).
    """

    def __init__(self, max_entries: int = MAX_SIGHTINGS) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def sight_many(self, keys: Sequence[ChunkHash]) -> list[int]:
        out = []
        with self._lock:
            for k in keys:
                n = self._counts.pop(k, 0) + 1
                self._counts[k] = n
                out.append(n)
            while len(self._counts) > self.max_entries:
                self._counts.popitem(last=False)
        return out

    def __len__(self) -> int:
        return len(self._counts)
