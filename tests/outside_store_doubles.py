"""Two throwaway ``memory://NAME`` stores kept outside the package, written from ``docs/design/stores.md`` as a
new contributor would (first tried for issue 49), and the table rows that name them (:data:`ANSWER_KIND`,
:data:`CHUNK_KIND`, added with :func:`ragcache.store_kinds.register`, never by editing ``ragcache/store_kinds.py``).
Not part of the product.

- :class:`MemoryAnswerStore`: a :class:`~ragcache.semantic.stores.protocol.VectorAnswerStore` kept in this
  process's memory under a name (every store opened on one name shares its entries, as processes share a
  folder), numpy cosine search; :class:`MemorySemanticCache` is the cache a ``memory://NAME`` URL opens
  (``SemanticCache.from_url``) and :class:`MemoryAnswers` its admin view (``ragcache cache``).
- :class:`SharedMemoryChunkStore`: a :class:`~ragcache.engine.chunk.stores.ChunkStore` (and
  :class:`~ragcache.engine.chunk.stores.base.ChunkStoreAdmin`) kept in memory under a name, opened from
  ``memory://NAME`` (``RAGCACHE_KV_URL``, ``open_chunk_store``).
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from ragcache.engine.chunk.stores.base import BatchedStore, ChunkEntry, ChunkKV, StoreStats, check_budget
from ragcache.hashing import ChunkHash
from ragcache.semantic import SemanticCache
from ragcache.semantic.budget import merge_metadata
from ragcache.semantic.embedding import resolve_embedder
from ragcache.semantic.speller import PartitionSpeller
from ragcache.semantic.stores.admin import AnswerRow, empty_stats, eviction_victims, lookup_counts
from ragcache.semantic.stores.protocol import NewEntry, PutResult, Query, StoreCounters, StoredAnswer
from ragcache.semantic.text import exact_form
from ragcache.store_kinds import AnswerStoreKind, ChunkStoreKind

__all__ = ["ANSWER_KIND", "CHUNK_KIND", "MemoryAnswerStore", "MemoryAnswers", "MemorySemanticCache",
           "SharedMemoryChunkStore", "forget"]

ANSWER_KIND = AnswerStoreKind("shared-memory", ("memory",), "memory://NAME",
                              "in this process's memory under a name (a test store kept outside ragcache)",
                              "outside_store_doubles:MemorySemanticCache", "outside_store_doubles:MemoryAnswers")
"""The answer store row a test registers (:func:`ragcache.store_kinds.register`)."""
CHUNK_KIND = ChunkStoreKind("shared-memory", ("memory",), "in this process's memory under a name (memory://NAME, "
                            "a test store kept outside ragcache)", "outside_store_doubles:SharedMemoryChunkStore",
                            budget="the max_bytes it is opened with (1 GiB unless set)")
"""The chunk store row a test registers."""


def _name(url: str | None) -> str:
    """The store name of ``memory://NAME`` (``""`` for ``None``)."""
    return (url or "").split("://", 1)[-1] if url else ""


# ------------------------------------------------------------------ answers
@dataclass(slots=True)
class _Row:
    id: int
    partition: str
    namespace: str
    keys: frozenset[str]
    question: str
    answer: str
    metadata: dict
    budget: Any
    vector: np.ndarray
    created: float
    accessed: float
    tick: int
    expires: float | None
    state: Mapping[str, Any] | None
    hits: int = 0


@dataclass(slots=True)
class _Shelf:
    """The entries of one name, shared by every store opened on it."""

    fingerprint: str
    dim: int
    rows: dict[int, _Row] = field(default_factory=dict)
    next_id: int = 1
    tick: int = 0
    lookup_hits: int = 0
    lookup_misses: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)


_SHELVES: dict[str, _Shelf] = {}
_SHELVES_LOCK = threading.Lock()


def forget(name: str) -> None:
    """Drop the answers and chunks kept under ``name`` (test clean-up)."""
    with _SHELVES_LOCK:
        _SHELVES.pop(name, None)
        _CHUNKS.pop(name, None)


class MemoryAnswerStore:
    """Answers kept in process memory under ``name``; every store opened on one name shares them.

    Args:
        name: the shelf's name (``memory://NAME``).
        embedder: the resolved embedder (its ``fingerprint`` and ``dim`` are checked against the shelf's).
        max_entries: LRU capacity over the shelf.

    Raises:
        ValueError: the shelf holds vectors of another embedder.
    """

    def __init__(self, name: str, *, embedder: Any, max_entries: int = 100_000) -> None:
        self.name, self.max_entries = name, max_entries
        self.dim = int(embedder.dim)
        self.counters = StoreCounters()
        self._flushed = (0, 0)
        with _SHELVES_LOCK:
            shelf = _SHELVES.setdefault(name, _Shelf(embedder.fingerprint, self.dim))
        if (shelf.fingerprint, shelf.dim) != (embedder.fingerprint, self.dim):
            raise ValueError(f"memory://{name} holds answers of embedder {shelf.fingerprint} (dim {shelf.dim}), not "
                             f"{embedder.fingerprint} (dim {self.dim}); open it with the same embedder or use another name")
        self._shelf = shelf

    # ---------------------------------------------------------------- reads
    def _live(self) -> list[_Row]:
        now = time.time()
        return [r for r in self._shelf.rows.values() if r.expires is None or r.expires > now]

    @staticmethod
    def _out(r: _Row, sim: float) -> StoredAnswer:
        return StoredAnswer(r.id, r.partition, r.question, r.answer, dict(r.metadata), r.budget, sim, r.state)

    def search(self, query: Query, k: int) -> list[StoredAnswer]:
        with self._shelf.lock:
            rows = [r for r in self._live() if r.partition == query.partition]
            if not rows:
                return []
            sims = np.stack([r.vector for r in rows]) @ np.asarray(query.vector, np.float32)
            order = np.argsort(-sims, kind="stable")[:k]
            same = exact_form(query.question)
            chosen = list(order) + [i for i, r in enumerate(rows) if exact_form(r.question) == same and i not in order]
            return [self._out(rows[i], float(sims[i])) for i in chosen]

    def search_many(self, queries: Sequence[Query], k: int) -> list[list[StoredAnswer]]:
        return [self.search(q, k) for q in queries]

    def exact(self, query: Query) -> list[StoredAnswer]:
        same = exact_form(query.question)
        return [a for a in self.search(query, 0) if exact_form(a.question) == same]

    def neighbours(self, vector: np.ndarray, k: int, *, namespace: str) -> list[tuple[str, float]]:
        with self._shelf.lock:
            best: dict[str, float] = {}
            for r in self._live():
                if r.namespace == namespace:
                    s = min(1.0, max(-1.0, float(r.vector @ np.asarray(vector, np.float32))))
                    best[r.question] = max(s, best.get(r.question, -2.0))
        return sorted(best.items(), key=lambda qs: -qs[1])[:k]

    def may_hold(self, partition: str) -> bool:
        with self._shelf.lock:
            return any(r.partition == partition for r in self._shelf.rows.values())

    def correct(self, partition: str, text: str, known: frozenset[str] | None) -> str:
        """Typo correction (:class:`~ragcache.semantic.speller.QuerySpeller`) against the partition's words."""
        speller = PartitionSpeller()
        with self._shelf.lock:
            for r in self._live():
                if r.partition == partition:
                    speller.add(r.question)
        return speller.correct(text, known)

    # ---------------------------------------------------------------- writes
    def put_many(self, entries: Sequence[NewEntry]) -> PutResult:
        s, now, ids = self._shelf, time.time(), []
        with s.lock:
            for e in entries:
                same = exact_form(e.question)
                for r in [r for r in s.rows.values() if r.partition == e.partition.digest and exact_form(r.question) == same]:
                    del s.rows[r.id]
                s.tick += 1
                row = _Row(s.next_id, e.partition.digest, e.partition.namespace,
                           frozenset(e.partition.invalidation_keys), e.question, e.answer, dict(e.metadata), e.budget,
                           np.asarray(e.vector, np.float32).copy(), now, now, s.tick,
                           None if e.ttl_s is None else now + e.ttl_s, None if e.state is None else dict(e.state))
                s.rows[row.id] = row
                s.next_id += 1
                ids.append(row.id)
            over = len(s.rows) - self.max_entries
            victims = sorted(s.rows.values(), key=lambda r: r.tick)[:max(0, over)]
            for r in victims:
                del s.rows[r.id]
        self.counters.evictions += len(victims)
        return PutResult(ids, len(victims))

    def _drop(self, keep: Any) -> int:
        with self._shelf.lock:
            gone = [i for i, r in self._shelf.rows.items() if not keep(r)]
            for i in gone:
                del self._shelf.rows[i]
        return len(gone)

    def remove_documents(self, keys: Collection[str]) -> int:
        keys = set(keys)
        return self._drop(lambda r: not (r.keys & keys))

    def remove_namespace(self, namespace: str | None) -> int:
        return self._drop(lambda r: namespace is not None and r.namespace != namespace)

    def expire(self) -> int:
        now = time.time()
        n = self._drop(lambda r: r.expires is None or r.expires > now)
        self.counters.expirations += n
        return n

    def touch(self, ids: Sequence[int]) -> None:
        s, now = self._shelf, time.time()
        with s.lock:
            for i in ids:
                if (r := s.rows.get(i)) is not None:
                    s.tick += 1
                    r.accessed, r.tick, r.hits = now, s.tick, r.hits + 1

    def update_state(self, entry_id: int, state: Mapping[str, Any] | None) -> bool:
        with self._shelf.lock:
            r = self._shelf.rows.get(entry_id)
            if r is None:
                return False
            r.state = None if state is None else dict(state)
            return True

    def __len__(self) -> int:
        with self._shelf.lock:
            return len(self._live())

    def flush(self) -> None:
        """Add this store's lookups since the last flush to the shelf's totals (what the admin reports)."""
        now = (self.counters.lookup_hits, self.counters.lookup_misses)
        with self._shelf.lock:
            self._shelf.lookup_hits += now[0] - self._flushed[0]
            self._shelf.lookup_misses += now[1] - self._flushed[1]
        self._flushed = now

    def close(self) -> None:
        self.flush()


class MemorySemanticCache(SemanticCache):
    """The cache a ``memory://NAME`` URL opens: the policy over a :class:`MemoryAnswerStore`. ``kwargs``
    are :class:`~ragcache.semantic.SemanticCache`'s."""

    def __init__(self, url: str | None = None, *, embedder: Any = None, max_entries: int = 100_000,
                 **kwargs: Any) -> None:
        emb = resolve_embedder(embedder)
        self.url = url
        store = MemoryAnswerStore(_name(url), embedder=emb, max_entries=max_entries)
        super().__init__(None, embedder=emb, max_entries=max_entries, answer_store=store, **kwargs)


class MemoryAnswers:
    """The admin view (:class:`~ragcache.semantic.stores.admin.AnswerAdmin`) of a ``memory://NAME`` store."""

    kind: ClassVar[str] = "memory"

    def __init__(self, url: str) -> None:
        self.url, self.name = url, _name(url)

    @property
    def where(self) -> str:
        return f"memory://{self.name}"

    @property
    def exists(self) -> bool:
        return self.name in _SHELVES

    def _rows(self) -> list[AnswerRow]:
        shelf = _SHELVES.get(self.name)
        if shelf is None:
            return []
        with shelf.lock:
            rows = sorted(shelf.rows.values(), key=lambda r: -r.tick)
            meta = [merge_metadata(r.metadata, r.budget) for r in rows]
            return [AnswerRow(r.id, r.partition, r.namespace, r.question, r.answer, m, r.created, r.accessed,
                              r.expires, r.hits) for r, m in zip(rows, meta)]

    def list(self, *, namespace: str | None = None, limit: int | None = None) -> list[AnswerRow]:
        rows = [r for r in self._rows() if namespace is None or r.namespace == namespace]
        return rows if limit is None else rows[:limit]

    def get(self, entry_id: int) -> AnswerRow | None:
        return next((r for r in self._rows() if r.id == entry_id), None)

    def stats(self) -> dict[str, Any]:
        shelf = _SHELVES.get(self.name)
        if shelf is None:
            return empty_stats(self.kind, self.where, None)
        rows = self._rows()
        out = empty_stats(self.kind, self.where, None, sum(len(r.answer) + len(json.dumps(r.metadata)) for r in rows))
        namespaces: dict[str, int] = {}
        for r in rows:
            namespaces[r.namespace] = namespaces.get(r.namespace, 0) + 1
        out.update(entries=len(rows), partitions=len({r.partition for r in rows}), namespaces=namespaces,
                   hits=sum(r.hits for r in rows), oldest=min((r.created for r in rows), default=None),
                   newest=max((r.created for r in rows), default=None))
        out.update(lookup_counts(shelf.lookup_hits, shelf.lookup_misses))
        return out

    def remove(self, ids: Sequence[int]) -> int:
        shelf = _SHELVES.get(self.name)
        if shelf is None:
            return 0
        with shelf.lock:
            return sum(shelf.rows.pop(int(i), None) is not None for i in ids)

    def evict(self, *, older_than_s: float | None = None, keep: int | None = None) -> int:
        return self.remove(eviction_victims(self._rows(), older_than_s, keep))

    def clear(self) -> int:
        shelf = _SHELVES.get(self.name)
        if shelf is None:
            return 0
        before = self.stats()["bytes"]
        with shelf.lock:
            shelf.rows.clear()
            shelf.lookup_hits = shelf.lookup_misses = 0
        return before


# ------------------------------------------------------------------ chunks
@dataclass(slots=True)
class _ChunkShelf:
    entries: OrderedDict[str, tuple[ChunkKV, float]] = field(default_factory=OrderedDict)
    nbytes: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)


_CHUNKS: dict[str, _ChunkShelf] = {}


class SharedMemoryChunkStore(BatchedStore):
    """Chunk KVs kept in process memory under ``name`` (every store opened on one name shares them), least
    recently used evicted first above ``max_bytes`` (``None``: unbounded)."""

    def __init__(self, name: str = "", *, max_bytes: int | None = 1 << 30) -> None:
        self.name, self.max_bytes = name, check_budget(max_bytes)
        self.stats = StoreStats()
        with _SHELVES_LOCK:
            self._shelf = _CHUNKS.setdefault(name, _ChunkShelf())

    @classmethod
    def from_url(cls, url: str | None = None, **kwargs: Any) -> SharedMemoryChunkStore:
        """The store ``memory://NAME`` names; ``kwargs`` go to the constructor."""
        return cls(_name(url), **kwargs)

    def get(self, key: ChunkHash, *, fingerprint: str | None = None) -> ChunkKV | None:
        s = self._shelf
        with s.lock:
            got = s.entries.get(key)
            if got is None or (fingerprint is not None and got[0].fingerprint != fingerprint):
                self.stats.misses += 1
                return None
            s.entries[key] = (got[0], time.time())
            s.entries.move_to_end(key)
            self.stats.hits += 1
            return got[0]

    def put(self, kv: ChunkKV) -> bool:
        s, size = self._shelf, kv.nbytes
        if self.max_bytes is not None and size > self.max_bytes:
            return False
        with s.lock:
            old = s.entries.pop(kv.key, None)
            if old is not None:
                s.nbytes -= old[0].nbytes
            s.entries[kv.key] = (kv, time.time())
            s.nbytes += size
            self.stats.puts += 1
            while self.max_bytes is not None and s.nbytes > self.max_bytes:
                _, (victim, _) = s.entries.popitem(last=False)
                s.nbytes -= victim.nbytes
                self.stats.evictions += 1
        return True

    def contains(self, key: ChunkHash) -> bool:
        return key in self._shelf.entries

    def remove(self, key: ChunkHash) -> bool:
        s = self._shelf
        with s.lock:
            got = s.entries.pop(key, None)
            if got is None:
                return False
            s.nbytes -= got[0].nbytes
            return True

    def close(self) -> None:
        pass

    def __len__(self) -> int:
        return len(self._shelf.entries)

    @property
    def nbytes(self) -> int:
        return self._shelf.nbytes

    # ---------------------------------------------------------------- admin (ChunkStoreAdmin)
    @property
    def where(self) -> str:
        return f"memory://{self.name}"

    def entries(self) -> list[ChunkEntry]:
        with self._shelf.lock:
            return [ChunkEntry(k, kv.nbytes, used, kv.to_payload()[1]) for k, (kv, used) in self._shelf.entries.items()]

    def clear(self) -> int:
        s = self._shelf
        with s.lock:
            n = len(s.entries)
            s.entries.clear()
            s.nbytes = 0
        return n
