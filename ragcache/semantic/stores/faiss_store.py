"""FaissAnswerStore: the embedded vector-answer store, FAISS indexes in memory over one SQLite file.

Implements :class:`~ragcache.semantic.stores.protocol.VectorAnswerStore` and
:class:`~ragcache.semantic.speller.QuerySpeller`; its single-flight locks are ``locks``
(:class:`~ragcache.semantic.flight.FlightLocks`). One FAISS index per partition
(:mod:`ragcache.semantic.stores.index`: flat, HNSW above ``hnsw_threshold``), SQLite as the source of
truth (:mod:`ragcache.semantic.stores.store`), snapshots and recovery in :mod:`ragcache.semantic.stores.persistence`.

Several processes may open one folder. Each write is logged in SQLite's change log in its own
transaction; before each call a process compares ``PRAGMA data_version`` with the last one it saw
and, when another process committed, replays the log (new entries are read from SQLite, removed
ones are dropped), so an ``invalidate`` anywhere stops every process from serving the entries at
its next lookup. ``invalidate`` / ``clear`` / ``expire`` select what to delete in SQLite, inside the
write transaction, not from this process's memory.

Concurrency inside a process: searches run concurrently (a readers-writer lock); writes, replays
and snapshots are serialised.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from ragcache.boundary import Refused
from ragcache.home import writable
from ragcache.semantic.budget import merge_metadata, split_metadata
from ragcache.semantic.flight import LOCAL_LOCKS, FileFlightLocks, FlightLocks
from ragcache.semantic.partition import PartitionKey
from ragcache.semantic.stores.entries import Entry, Partition
from ragcache.semantic.stores.locks import RWLock
from ragcache.semantic.stores.persistence import CachePersistence
from ragcache.semantic.stores.protocol import (
    NewEntry,
    PutResult,
    Query,
    StoreCounters,
    StoredAnswer,
)
from ragcache.semantic.stores.store import DB_NAME, SQLiteStore
from ragcache.semantic.text import exact_form

logger = logging.getLogger("ragcache.semantic")


DEFAULT_MAX_ENTRY_BYTES = 8 * 1024 * 1024
"""Largest answer + metadata (bytes) one entry of the embedded store holds by default (8 MiB)."""


def _nbytes(answer: str, metadata: Mapping[str, Any]) -> int:
    """Stored bytes of an answer and its metadata (UTF-8, the metadata as the JSON SQLite keeps)."""
    import json

    return len(answer.encode("utf-8", "surrogatepass")) + len(json.dumps(dict(metadata), ensure_ascii=False)
                                                            .encode("utf-8", "surrogatepass"))


class FaissAnswerStore(CachePersistence):
    """Entries in SQLite, searched with per-partition FAISS indexes held in memory.

    Args:
        path: directory for ``semantic.sqlite3`` and ``index/``; ``None`` keeps everything in memory.
        embedder: the :class:`~ragcache.semantic.embedding.QuestionEmbedder` whose vectors are stored
            (its fingerprint and width are checked against the folder's).
        max_entries: LRU capacity over all partitions.
        hnsw_threshold: partition size above which its index becomes HNSW.
        autosave_every: writes between FAISS snapshots (persistent stores only).
        search_threads: FAISS OpenMP threads (process-wide); ``None`` leaves FAISS's setting alone.
        reembed: ``questions -> (vectors [n, dim], keep mask [n])``: when ``path`` was built with another
            embedder, its stored questions are re-embedded with this one (entries not kept are deleted);
            ``None``: such a folder is refused.
        max_entry_bytes: largest answer + metadata (UTF-8 bytes) one entry may hold; a larger one is refused
            (``ValueError`` naming the limit; through the answer path: logged, the answer returned unstored).
            ``None``: no limit. Default :data:`DEFAULT_MAX_ENTRY_BYTES`.
        max_bytes: byte budget over every entry's answer + metadata; the least recently used are evicted
            past it (``None``: no budget, ``max_entries`` alone).

    Memory follows the index, not the stored bytes: the store holds vectors (FAISS), ids, questions and
    partitions; answers and metadata stay in SQLite and are read for a lookup's candidates only.

    Raises:
        ValueError: bad arguments, or ``path`` holds a cache built with another embedder.
        CorruptAnswerDBError: the SQLite file cannot be read.
    """

    def __init__(self, path: str | Path | None, *, embedder: Any, max_entries: int = 100_000,
                 hnsw_threshold: int = 20_000, autosave_every: int = 1000, search_threads: int | None = 1,
                 reembed: Callable[[list[str]], tuple[np.ndarray, np.ndarray]] | None = None,
                 max_entry_bytes: int | None = DEFAULT_MAX_ENTRY_BYTES, max_bytes: int | None = None) -> None:
        for name, v in (("max_entry_bytes", max_entry_bytes), ("max_bytes", max_bytes)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a whole number of bytes >= 1 or None (no limit), got {v!r}")
        self.max_entry_bytes, self.max_bytes = max_entry_bytes, max_bytes
        if search_threads is not None:
            if search_threads < 1:
                raise ValueError(f"search_threads must be >= 1 or None, got {search_threads}")
            faiss.omp_set_num_threads(search_threads)
        self.embedder, self.dim = embedder, int(embedder.dim)
        self.max_entries, self.hnsw_threshold, self.autosave_every = max_entries, hnsw_threshold, autosave_every
        self.path = None if path is None else Path(path).expanduser()
        self.read_only = self.path is not None and (self.path / DB_NAME).is_file() and not writable(self.path)
        """A folder that holds answers but cannot be written (a read-only file system or permission): its
        answers are served from an in-memory copy and nothing is written back."""
        self._persist = self.path is not None and not self.read_only
        self.reembed = reembed
        # single flight: this process's threads and, for a folder on disk, every process that opens it
        self.locks: FlightLocks = FileFlightLocks(self.path / ".flight") if self._persist else LOCAL_LOCKS
        self.counters = StoreCounters()
        self._flushed_lookups = (0, 0)  # counters.lookup_hits / lookup_misses already added to the folder's totals
        self._lock = RWLock()
        self._touch_lock = threading.Lock()
        self._entries: dict[int, Entry] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._touched: dict[int, float] = {}
        self._parts: dict[str, Partition] = {}
        self._doc_parts: dict[str, set[str]] = {}
        self._dirty: set[str] = set()
        self._writes = 0
        self._seq = 0
        self._closed = False
        self._db = SQLiteStore(self.path, read_only=self.read_only)
        self._open()
        self._version = self._db.data_version()

    # ================================================================= other processes' writes
    def _sync(self) -> None:
        """Replay other processes' committed writes (no-op when none since the last call)."""
        if not self._persist or self._db.data_version() == self._version:
            return
        with self._lock.write():
            self._replay()

    def _replay(self) -> None:
        """Apply the change log after ``self._seq`` (write lock held). Idempotent: own writes are skipped."""
        version = self._db.data_version()
        if version == self._version:
            return
        self._version = version
        rows = self._db.changes_since(self._seq)
        if rows and rows[0][0] != self._seq + 1:  # the log was pruned past us: reload everything
            logger.info("semantic cache %s: change log pruned past this process; reloading", self.path)
            self._reload()
            return
        for seq, op, entry, partition in rows:
            if op == "put" and entry not in self._entries:
                self._adopt(int(entry))
            elif op == "del" and entry in self._entries:
                self._forget_memory([int(entry)])
            elif op == "drop" and partition in self._parts:
                self._forget_partitions({partition})
            self._seq = seq

    def _adopt(self, entry_id: int) -> None:
        """Load one entry another process wrote (skipped if already deleted or expired)."""
        row = self._db.entry(entry_id, self.dim)
        if row is None or (row.expires is not None and row.expires <= time.time()):
            return
        part = self._parts.get(row.partition)
        if part is None:
            p = self._db.partition(row.partition)
            if p is None:
                return
            part = self._partition(PartitionKey(p[0], p[1], (), tuple(p[2])))
        q = row.question
        stale = [i for i in part.exact.get(exact_form(q), ()) if i != entry_id]
        if stale:  # the writer replaced these (its 'del' rows follow; dropping now keeps one answer per question)
            self._forget(stale)
        self._remember(Entry(row.id, row.partition, q, exact_form(q), row.created, row.expires, row.hits,
                             _nbytes(row.answer, row.metadata)), part)
        part.index.add(np.asarray([row.id], np.int64), row.vector[None, :])

    def _forget_memory(self, ids: list[int]) -> None:
        """Drop ids another process deleted (memory and FAISS only; empty partitions leave memory)."""
        by_part = self._forget(ids)
        empty = {k for k in by_part if not len(self._parts[k].index)}
        self._forget_partitions(empty)

    def _reload(self) -> None:
        for d in (self._entries, self._lru, self._touched, self._parts, self._doc_parts):
            d.clear()
        self._dirty.clear()
        self._load()

    # ================================================================= reads
    def may_hold(self, partition: str) -> bool:
        self._sync()
        with self._lock.read():  # not while a writer rebuilds the index (flat -> HNSW: empty for a moment)
            part = self._parts.get(partition)
            return part is not None and len(part.index) > 0

    def correct(self, partition: str, text: str, known: frozenset[str] | None) -> str:
        with self._lock.read():
            part = self._parts.get(partition)
            return text if part is None else part.speller.correct(text, known)

    def search(self, query: Query, k: int) -> list[StoredAnswer]:
        return self._read(query, k)

    def search_many(self, queries: Sequence[Query], k: int) -> list[list[StoredAnswer]]:
        return [self._read(q, k) for q in queries]

    def exact(self, query: Query) -> list[StoredAnswer]:
        return self._read(query, 0)

    def neighbours(self, vector: np.ndarray, k: int, *, namespace: str) -> list[tuple[str, float]]:
        """One search per partition of ``namespace`` (a partition's index is small: the cost is a FAISS
        call each, ~10 us), merged; expired entries left out."""
        self._sync()
        now, vec = time.time(), np.asarray(vector, np.float32)
        best: dict[str, float] = {}
        with self._lock.read():
            for part in self._parts.values():
                if part.namespace != namespace or len(part.index) == 0:
                    continue
                sims, ids = part.index.search(vec, k)
                for s, i in zip(sims.tolist(), ids.tolist()):
                    e = self._entries.get(int(i))
                    if e is None or (e.expires is not None and e.expires <= now):
                        continue
                    if s > best.get(e.question, -2.0):
                        best[e.question] = float(s)
        return sorted(best.items(), key=lambda p: (-p[1], p[0]))[:k]

    def _read(self, query: Query, k: int) -> list[StoredAnswer]:
        """k nearest plus same-words entries (``k == 0``: same-words entries only), best first."""
        self._sync()
        now, vec = time.time(), np.asarray(query.vector, np.float32)
        with self._lock.read():
            part = self._parts.get(query.partition)
            if part is None:
                return []
            same = part.exact.get(exact_form(query.question), ())
            pairs = {int(i): float(vec @ part.index._index.reconstruct(int(i))) for i in same}
            if k > 0:
                sims, ids = part.index.search(vec, k)
                pairs.update(zip(ids.tolist(), sims.tolist()))
            found = [(s, self._entries.get(int(i))) for i, s in pairs.items()]
        expired = [e.id for _, e in found if e is not None and e.expires is not None and e.expires <= now]
        if expired:
            with self._lock.write():
                live = [i for i in expired if i in self._entries]
                self._remove_ids(live)
                self.counters.expirations += len(live)
        live = sorted(((s, e) for s, e in found if e is not None and e.id not in expired),
                      key=lambda p: (-p[0], -p[1].id))
        rows = self._db.answers([e.id for _, e in live]) if live else {}  # answers are read here, not held
        out = []
        for s, e in live:
            if e.id in rows:  # else deleted by another process since the search
                answer, stored, state = rows[e.id]
                meta, budget = split_metadata(stored)
                out.append(StoredAnswer(e.id, e.partition, e.question, answer, meta, budget, s, state))
        return out

    def __len__(self) -> int:
        self._sync()
        return len(self._entries)

    # ================================================================= writes
    def put_many(self, entries: Sequence[NewEntry]) -> PutResult:
        """Store ``entries`` (each replaces a stored entry with the same words in its partition), then evict
        the least recently used over ``max_entries`` and ``max_bytes``.

        Raises:
            ragcache.boundary.Refused: a ``ValueError``: an entry whose answer and metadata exceed
                ``max_entry_bytes`` (nothing is written; the answer path logs it without backing off)."""
        for e in entries:
            n = _nbytes(e.answer, merge_metadata(e.metadata, e.budget))
            if self.max_entry_bytes is not None and n > self.max_entry_bytes:
                raise Refused(f"an answer of {n:,} bytes (with its metadata) is over this cache's "
                                 f"max_entry_bytes={self.max_entry_bytes:,}; it is not stored: raise max_entry_bytes "
                                 f"(or None: no limit) to cache answers this long")
        now = time.time()
        with self._lock.write():
            ids: list[int] = []
            replaced: list[list[int]] = []
            twins: dict[tuple[str, str], int] = {}
            # SQLite first, memory only after the commit: a failed write leaves both as they were
            with self._db.transaction():
                self._replay()  # inside the write transaction: nobody else commits until ours
                for e in entries:
                    kp, ex = e.partition, exact_form(e.question)
                    self._db.put_partition(kp.digest, kp.namespace, kp.invalidation_keys)
                    part = self._parts.get(kp.digest)
                    old = set(part.exact.get(ex, ())) if part is not None else set()
                    if (kp.digest, ex) in twins:  # a repeat within the batch replaces its twin
                        old.add(ids[twins[(kp.digest, ex)]])
                    if old:
                        self._db.delete(old)
                    twins[(kp.digest, ex)] = len(ids)
                    expires = None if e.ttl_s is None else now + e.ttl_s
                    i = self._db.insert(kp.digest, e.question, e.answer, merge_metadata(e.metadata, e.budget),
                                        e.vector, now, expires)
                    if e.state is not None:
                        self._db.set_state(i, dict(e.state))
                    ids.append(i)
                    replaced.append(sorted(old))
                self._seq = self._db.last_change()
            self._apply_puts(entries, ids, replaced, now)
            before = self.counters.evictions
            self._evict_over_capacity()
            self._after_write(len(ids))
            return PutResult(ids, self.counters.evictions - before)

    def _apply_puts(self, entries: Sequence[NewEntry], ids: list[int], replaced: list[list[int]],
                    now: float) -> None:
        added: dict[str, list[int]] = {}
        for k, (e, i, old) in enumerate(zip(entries, ids, replaced, strict=True)):
            part = self._partition(e.partition)
            if old:
                self._forget(old)
            added.setdefault(e.partition.digest, []).append(k)
            expires = None if e.ttl_s is None else now + e.ttl_s
            self._remember(Entry(i, e.partition.digest, e.question, exact_form(e.question), now, expires, 0,
                                 _nbytes(e.answer, merge_metadata(e.metadata, e.budget))), part)
        for digest, rows in added.items():
            live = [k for k in rows if ids[k] in self._entries]  # a repeat within the batch replaced its twin
            vecs = np.stack([np.asarray(entries[k].vector, np.float32) for k in live])
            self._parts[digest].index.add(np.asarray([ids[k] for k in live], np.int64), vecs)
            self._dirty.add(digest)

    def remove_documents(self, keys: Collection[str]) -> int:
        return self._remove_where(docs=sorted(keys))

    def remove_namespace(self, namespace: str | None) -> int:
        return self._remove_where(namespace=namespace, every=namespace is None)

    def _remove_where(self, docs: Collection[str] = (), namespace: str | None = None, every: bool = False) -> int:
        """Delete the partitions SQLite says match (every process's entries, not only this one's)."""
        with self._lock.write():
            with self._db.transaction():
                self._replay()
                parts = self._db.partitions_with(docs, namespace, every)
                n = self._db.delete_partitions(parts)
                self._seq = self._db.last_change()
            self._forget_partitions(set(parts))
            self._after_write(n)
            return n

    def expire(self) -> int:
        now = time.time()
        with self._lock.write():
            with self._db.transaction():
                self._replay()
                dead = self._db.expired(now)
                self._db.delete(dead)
                self._seq = self._db.last_change()
            self._forget_memory([i for i in dead if i in self._entries])
            self.counters.expirations += len(dead)
            return len(dead)

    def touch(self, ids: Sequence[int]) -> None:
        now = time.time()
        with self._touch_lock:
            for i in ids:
                ent = self._entries.get(i)
                if ent is not None and i in self._lru:
                    self._lru.move_to_end(i)
                    ent.hits += 1
                    self._touched[i] = now

    def update_state(self, entry_id: int, state: Mapping[str, Any] | None) -> bool:
        with self._lock.write(), self._db.transaction():
            return self._db.set_state(entry_id, None if state is None else dict(state))

    # ================================================================= lifetime
    def flush(self) -> None:
        """Write FAISS snapshots of changed partitions and LRU access times (persistent stores)."""
        with self._lock.write():
            self._flush()

    def close(self) -> None:
        """Flush and close (a second call does nothing)."""
        with self._lock.write():
            if self._closed:
                return
            self._flush()
            self._db.close()
            self._closed = True
