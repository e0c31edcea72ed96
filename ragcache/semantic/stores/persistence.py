"""Persistence of :class:`~ragcache.semantic.stores.faiss_store.FaissAnswerStore`: periodic flush of
touched rows and dirty FAISS indexes, and open / recovery (schema and embedder check, expired rows
dropped, each partition's index loaded, rebuilt when corrupt or missing, reconciled with SQLite).

A snapshot is trusted only as far as it agrees with SQLite, which holds every entry's vector: ids
SQLite no longer has are removed and ids it has that the snapshot lacks are added (a snapshot older
than the last writes), but if any vector in the snapshot differs from SQLite's vector of the same id
(a snapshot copied from another folder, or left from an older database whose ids were reused), the
partition's index is rebuilt from SQLite with a warning. Files are never unpickled: snapshots are
FAISS bytes checked on load.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from ragcache.semantic.partition import PartitionKey
from ragcache.semantic.stores.entries import Entry, Partition
from ragcache.semantic.stores.index import PartitionIndex
from ragcache.semantic.stores.registry import CacheRegistry
from ragcache.semantic.stores.store import SCHEMA_VERSION
from ragcache.semantic.text import exact_form

logger = logging.getLogger("ragcache.semantic")


class CachePersistence(CacheRegistry):
    """Flush and open / recover, mixed into ``FaissAnswerStore`` (over :class:`CacheRegistry`)."""

    _entries: dict[int, Entry]
    _parts: dict[str, Partition]
    _dirty: set[str]
    _db: Any
    _lock: Any
    _touch_lock: Any
    _touched: dict[int, float]
    _writes: int
    _flushed_lookups: tuple[int, int]
    counters: Any
    path: Any
    _persist: bool
    embedder: Any
    _seq: int
    reembed: Any
    hnsw_threshold: int
    autosave_every: int

    def _after_write(self, n: int) -> None:
        self._writes += n
        if self._persist and self._writes >= self.autosave_every:
            self._flush()

    def _flush(self) -> None:
        with self._touch_lock:
            touched = [(i, t, self._entries[i].hits) for i, t in self._touched.items() if i in self._entries]
            self._touched.clear()
        now = (self.counters.lookup_hits, self.counters.lookup_misses)  # read once: lookups go on meanwhile
        if touched or self.path is not None:
            with self._db.transaction():
                self._db.touch(touched)
                self._db.add_lookups(now[0] - self._flushed_lookups[0], now[1] - self._flushed_lookups[1])
                self._db.prune_changes()
            self._flushed_lookups = now
        if self._persist:
            for k in sorted(self._dirty):
                if k in self._parts:
                    self._db.write_index(k, self._parts[k].index.to_bytes())
        self._dirty.clear()
        self._writes = 0

    # ================================================================= open / recover
    def _open(self) -> None:
        want = {"schema": SCHEMA_VERSION, "embedder": self.embedder.fingerprint, "dim": str(self.embedder.dim)}
        with self._db.transaction():  # read and first write as one: a process opening the same new folder waits
            have = {k: self._db.get_meta(k) for k in want}
            if all(v is None for v in have.values()):
                self._db.set_meta(want)
                have = want
        if have != want:
            if self.reembed is None or have["schema"] != want["schema"]:
                raise ValueError(
                    f"the cache at {self.path} was built with {have}, not {want}; open it with the same embedder, "
                    "pass reembed=True to re-embed its stored questions with this one, or use another path "
                    "(or delete the directory) for this embedder")
            self._reembed(want)
        self._load()

    def _reembed(self, want: dict[str, str]) -> None:
        """Replace every stored vector with this embedder's (``self.reembed``: questions -> (vectors
        ``[n, dim]``, keep mask)); entries it cannot re-key are deleted; snapshots are dropped."""
        rows = self._db.questions()
        vecs, keep = self.reembed([q for _, q in rows])
        with self._db.transaction():
            self._db.set_vectors([(i, v) for (i, _), v, k in zip(rows, vecs, keep, strict=True) if k])
            self._db.delete([i for (i, _), k in zip(rows, keep, strict=True) if not k])
            self._db.set_meta(want)
        for key, _, _ in self._db.partitions():
            self._db.drop_index(key)
        logger.warning("semantic cache %s: re-embedded %d stored questions with %s; dropped %d that this embedder "
                       "keys differently (longer than its window)", self.path, int(np.sum(keep)),
                       want["embedder"][:12], len(rows) - int(np.sum(keep)))

    def _load(self) -> None:
        """Read every live entry's key (not its answer) from SQLite into memory and load / reconcile each
        partition's index."""
        self._seq = self._db.last_change()
        for key, ns, docs in self._db.partitions():
            self._partition(PartitionKey(key, ns, (), tuple(docs)))
        vecs: dict[str, tuple[list[int], list[np.ndarray]]] = {}
        now, dead = time.time(), []
        for i, partition, question, vector, created, expires, hits, nbytes in self._db.keys(self.embedder.dim):
            if expires is not None and expires <= now:
                dead.append(i)
                continue
            part = self._parts.get(partition)
            if part is None:
                continue
            self._remember(Entry(i, partition, question, exact_form(question), created, expires, hits, nbytes), part)
            ids, vs = vecs.setdefault(partition, ([], []))
            ids.append(i)
            vs.append(vector)
        for key, part in list(self._parts.items()):
            ids, vs = vecs.get(key, ([], []))
            part.index = self._load_index(key, np.asarray(ids, np.int64), vs)
        if dead:
            with self._db.transaction():
                self._db.delete(dead)
        empty = {k for k, p in self._parts.items() if not len(p.index)}
        if empty:
            with self._db.transaction():
                self._db.drop_empty_partitions(empty)
            self._forget_partitions(empty)

    def _load_index(self, key: str, ids: np.ndarray, vecs: list[np.ndarray]) -> PartitionIndex:
        data = self._db.read_index(key)
        idx: PartitionIndex | None = None
        if data is not None:
            try:
                idx = PartitionIndex.from_bytes(data, self.embedder.dim, hnsw_threshold=self.hnsw_threshold)
            except ValueError as e:
                logger.warning("semantic cache %s: index of partition %s is corrupt (%s); rebuilding from SQLite",
                               self.path, key[:12], e)
        elif len(ids):
            logger.warning("semantic cache %s: index of partition %s is missing; rebuilding from SQLite",
                           self.path, key[:12])
        if idx is None:
            idx = self._new_index()
            if len(ids):
                idx.add(ids, np.stack(vecs))
            self._dirty.add(key)
            return idx
        have, snap = idx.vectors()
        common, at_snap, at_sql = np.intersect1d(have, ids, return_indices=True)
        if len(common) and not np.array_equal(snap[at_snap], np.stack(vecs)[at_sql]):
            bad = int((snap[at_snap] != np.stack(vecs)[at_sql]).any(axis=1).sum())
            logger.warning("semantic cache %s: index of partition %s does not match SQLite (%d of %d vectors "
                           "differ: a snapshot from another cache or an older database); rebuilding from SQLite",
                           self.path, key[:12], bad, len(common))
            idx = self._new_index()
            idx.add(ids, np.stack(vecs))
            self._dirty.add(key)
            return idx
        extra = np.setdiff1d(have, ids, assume_unique=True)  # ids are unique; np.unique would import numpy.ma (~30 ms)
        missing = np.isin(ids, have, invert=True)
        if len(extra):
            idx.remove(extra)
        if missing.any():
            idx.add(ids[missing], np.stack([v for v, m in zip(vecs, missing) if m]))
        if len(extra) or missing.any():
            logger.info("semantic cache %s: partition %s index synced (+%d, -%d)", self.path, key[:12],
                        int(missing.sum()), len(extra))
            self._dirty.add(key)
        return idx
