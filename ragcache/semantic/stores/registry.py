"""In-memory bookkeeping of :class:`~ragcache.semantic.stores.faiss_store.FaissAnswerStore`: partitions,
entries, LRU order, and removal (entries, whole partitions, over-capacity eviction).

A mixin over the store's private state (``_entries``, ``_lru``, ``_touched``, ``_parts``,
``_doc_parts``, ``_dirty``, ``_db``, ``counters``); every method here runs with the store's
write lock held.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ragcache.semantic.partition import PartitionKey
from ragcache.semantic.stores.entries import Entry, Partition
from ragcache.semantic.stores.index import PartitionIndex


class CacheRegistry:
    """Partition / entry bookkeeping mixed into ``FaissAnswerStore`` (write lock held by the caller)."""

    _entries: dict[int, Entry]
    _parts: dict[str, Partition]
    _doc_parts: dict[str, set[str]]
    _dirty: set[str]
    _db: Any
    counters: Any
    _touch_lock: Any
    _lru: Any
    _touched: dict[int, float]
    embedder: Any
    hnsw_threshold: int
    max_entries: int
    _after_write: Callable[[int], None]  # CachePersistence

    def _partition(self, pk: PartitionKey) -> Partition:
        part = self._parts.get(pk.digest)
        if part is None:
            part = Partition(pk.digest, pk.namespace, pk.invalidation_keys, self._new_index())
            self._parts[pk.digest] = part
            for d in part.docs:
                self._doc_parts.setdefault(d, set()).add(pk.digest)
        return part

    def _new_index(self) -> PartitionIndex:
        return PartitionIndex(self.embedder.dim, hnsw_threshold=self.hnsw_threshold)

    def _remember(self, e: Entry, part: Partition) -> None:
        self._entries[e.id] = e
        with self._touch_lock:
            self._lru[e.id] = None
        part.exact.setdefault(e.exact, set()).add(e.id)
        part.speller.add(e.question)

    def _forget(self, ids: list[int]) -> dict[str, list[int]]:
        """Drop ids from memory (not from FAISS); returns them grouped by partition."""
        by_part: dict[str, list[int]] = {}
        for i in ids:
            e = self._entries.pop(i, None)
            if e is None:
                continue
            with self._touch_lock:
                self._lru.pop(i, None)
                self._touched.pop(i, None)
            part = self._parts[e.partition]
            s = part.exact.get(e.exact)
            if s is not None:
                s.discard(i)
                if not s:
                    del part.exact[e.exact]
            part.speller.remove(e.question)
            by_part.setdefault(e.partition, []).append(i)
        for key, pids in by_part.items():
            self._parts[key].index.remove(pids)
            self._dirty.add(key)
        return by_part

    def _remove_ids(self, ids: list[int]) -> None:
        if not ids:
            return
        with self._db.transaction():
            self._db.delete(ids)
        self._forget_ids(ids)
        self._after_write(len(ids))

    def _forget_ids(self, ids: list[int]) -> None:
        """Drop ids from memory and FAISS; a partition left empty is dropped from memory, and from
        SQLite when it holds no entry there either (another process may have just written one)."""
        by_part = self._forget(ids)
        empty = {k for k in by_part if not len(self._parts[k].index)}
        if empty:
            with self._db.transaction():
                self._db.drop_empty_partitions(empty)
            self._forget_partitions(empty)

    def _drop_partitions(self, keys: set[str]) -> int:
        """Delete partitions in SQLite and memory; returns the entries SQLite held in them."""
        with self._db.transaction():
            n = self._db.delete_partitions(keys)
        self._forget_partitions(keys)
        return n

    def _forget_partitions(self, keys: set[str]) -> None:
        """Drop partitions from memory (and their snapshots)."""
        for k in keys:
            part = self._parts.pop(k, None)
            if part is None:
                continue
            ids = [i for s in part.exact.values() for i in s]
            for i in ids:
                self._entries.pop(i, None)
                with self._touch_lock:
                    self._lru.pop(i, None)
                    self._touched.pop(i, None)
            for d in part.docs:
                s = self._doc_parts.get(d)
                if s is not None:
                    s.discard(k)
                    if not s:
                        del self._doc_parts[d]
            self._dirty.discard(k)
            self._db.drop_index(k)

    def _evict_over_capacity(self) -> None:
        """Evict the least recently used entries past ``max_entries`` and past ``max_bytes`` (answer +
        metadata bytes, :attr:`Entry.nbytes`)."""
        over = len(self._entries) - self.max_entries
        budget = getattr(self, "max_bytes", None)
        with self._touch_lock:
            victims = [i for i, _ in zip(self._lru, range(max(over, 0)))]
            if budget is not None:
                total = sum(e.nbytes for e in self._entries.values()) - sum(self._entries[i].nbytes for i in victims)
                for i in list(self._lru)[len(victims):-1]:  # never the newest entry
                    if total <= budget:
                        break
                    victims.append(i)
                    total -= self._entries[i].nbytes
        if victims:
            self._remove_ids(victims)
            self.counters.evictions += len(victims)
