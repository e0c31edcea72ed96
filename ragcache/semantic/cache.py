"""SemanticCache: FAISS over question embeddings, exact partitions, guards, TTL/LRU, persistence.

A lookup normalises the question (the last user turn alone), keys it
(:mod:`ragcache.semantic.keying`: a question longer than the embedder's window is
matched exactly up to its last sentence, which alone is embedded, or matched
exactly as a whole), corrects typos against the partition's words, embeds it,
searches the partition's FAISS index
for the ``candidates`` nearest stored questions, and serves the first whose
cosine similarity is ``>= threshold`` and that passes every guard
(:mod:`ragcache.semantic.guards`). ``threshold=1.0`` (default or per call)
means exact: only a stored question with the same words (case and punctuation
aside) is served. Sync and async paths run the same code. Answers cut at their
token budget are not stored by default and never served to a larger budget
(:mod:`ragcache.semantic.budget`).

Concurrency: lookups run concurrently (a readers-writer lock); stores,
removals and snapshots are serialised. Embedding runs outside the lock.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from ragcache.semantic.budget import (
    AnswerBudget,
    merge_metadata,
    servable,
)
from ragcache.semantic.checks import check_count, check_metadata, check_threshold, check_ttl
from ragcache.semantic.embedding import QuestionEmbedder, resolve_embedder
from ragcache.semantic.guards import GuardSet, GuardVerdict
from ragcache.semantic.keying import QuestionKey, question_key
from ragcache.semantic.locks import RWLock
from ragcache.semantic.partition import PartitionKey, partition_key
from ragcache.semantic.persistence import CachePersistence
from ragcache.semantic.records import Candidate, Entry, Partition, SemanticHit
from ragcache.semantic.stats import SemanticStats
from ragcache.semantic.store import SQLiteStore
from ragcache.semantic.text import embed_form, exact_form, normalize_question

logger = logging.getLogger("ragcache.semantic")

DEFAULT_THRESHOLD = 0.94
"""Default cosine threshold (all-MiniLM-L6-v2 with the default guards), calibrated on real user
questions: the lowest threshold at which the guarded decision reaches precision >= 0.90 on the
QQP development sample (1,000 Quora pairs) while keeping precision 1.00 on the project's
development pairs. Lower it (e.g. 0.70) for curated FAQ-style traffic, where the guards alone
held precision 1.00 on the development pairs; see the README's semantic benchmark table."""

DEFAULT_PARTITION = partition_key(namespace="default", model="unspecified")


def checked_partition(partition: PartitionKey | None) -> PartitionKey:
    """``partition`` itself, or the default partition for ``None``.

    Raises:
        ValueError: not a :class:`PartitionKey` (build one with ``partition_key(...)``).
    """
    if partition is None:
        return DEFAULT_PARTITION
    if not isinstance(partition, PartitionKey):
        raise ValueError(f"partition must be a PartitionKey from ragcache.semantic.partition_key(...), "
                         f"got {type(partition).__name__} {partition!r:.60}")
    return partition
"""Partition used when a call gives none. Real callers pass ``partition_key(...)``."""


class SemanticCache(CachePersistence):
    """Semantic response cache keyed by (exact partition, question embedding).

    Args:
        path: directory for ``semantic.sqlite3`` and ``index/``; ``None`` keeps everything in memory.
        embedder: ``None`` (packaged all-MiniLM-L6-v2), a sentence-transformers name/path, an object
            with ``encode(list[str])``, or a callable ``list[str] -> array [n, dim]``.
        threshold: default cosine threshold; a hit needs ``similarity >= threshold``; 1.0 = exact only.
        max_entries: LRU capacity over all partitions.
        ttl_s: default time to live of an entry in seconds (``None``: no expiry).
        guards: ``True`` (the default :class:`GuardSet`), ``False`` (plain cosine), or a ``GuardSet``.
        verifier: optional ``(query, candidate) -> bool | float`` added as the last guard.
        candidates: nearest stored questions checked per lookup (best first).
        hnsw_threshold: partition size above which its index becomes HNSW.
        autosave_every: writes between FAISS snapshots (persistent caches only).
        typo_correction: correct out-of-vocabulary query words against the partition's words.
        store_truncated: store answers whose ``finish_reason`` says they were cut at the token budget
            (``"length"``, ``"max_tokens"``); they are then served only to requests with the same
            ``max_tokens``. Default False: such answers are not stored.
        search_threads: FAISS OpenMP threads (process-wide setting). One is fastest for single-query
            lookups: on a loaded 2-core CPU two threads made a 10k flat search 10x slower (p50 13 ms vs
            1.3 ms) from spin-waiting. ``None`` leaves FAISS's setting alone.

    Raises:
        ValueError: bad arguments, or ``path`` holds a cache built with another embedder.
    """

    def __init__(self, path: str | Path | None = None, *, embedder: Any = None,
                 threshold: float = DEFAULT_THRESHOLD, max_entries: int = 100_000, ttl_s: float | None = None,
                 guards: bool | GuardSet = True, verifier: Callable[[str, str], bool | float] | None = None,
                 candidates: int = 4, hnsw_threshold: int = 20_000, autosave_every: int = 1000,
                 typo_correction: bool = True, store_truncated: bool = False,
                 search_threads: int | None = 1) -> None:
        self.threshold = check_threshold(threshold)
        self.max_entries, self.candidates = check_count("max_entries", max_entries), check_count("candidates", candidates)
        self.ttl_s = check_ttl(ttl_s)
        self.hnsw_threshold, self.autosave_every, self.typo_correction = hnsw_threshold, autosave_every, typo_correction
        self.store_truncated = bool(store_truncated)
        if isinstance(guards, GuardSet):
            self.guards = guards if verifier is None else GuardSet([*guards.guards, *GuardSet.default(verifier).guards[-1:]])
        else:
            self.guards = GuardSet.default(verifier) if guards else GuardSet([])
        if search_threads is not None:
            if search_threads < 1:
                raise ValueError(f"search_threads must be >= 1 or None, got {search_threads}")
            faiss.omp_set_num_threads(search_threads)
        self.embedder: QuestionEmbedder = resolve_embedder(embedder)
        self.path = None if path is None else Path(path).expanduser()
        self._lock = RWLock()
        self._touch_lock = threading.Lock()
        self._stats = SemanticStats()
        self._entries: dict[int, Entry] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()
        self._touched: dict[int, float] = {}
        self._parts: dict[str, Partition] = {}
        self._doc_parts: dict[str, set[str]] = {}
        self._dirty: set[str] = set()
        self._writes = 0
        self._vec_memo: OrderedDict[str, np.ndarray] = OrderedDict()
        self._db = SQLiteStore(self.path)
        self._open()

    # ================================================================= public API
    @classmethod
    def from_url(cls, url: str | None = None, **kwargs: Any) -> Any:
        """Open the cache a URL names: ``postgresql://...`` -> :class:`~ragcache.semantic.pg_cache.PgSemanticCache`
        (shared by every process that opens it), a directory path or ``file://`` -> this class on disk,
        ``None`` -> ``$RAGCACHE_SEMANTIC_URL`` if set, else an in-memory cache. ``kwargs`` go to the constructor.

        Raises:
            ValueError: an unknown URL scheme.
        """
        from ragcache.remote import semantic_url

        url = semantic_url(url)
        if url is None:
            return cls(None, **kwargs)
        scheme = url.split("://", 1)[0].lower() if "://" in url else ""
        if scheme in ("postgresql", "postgres"):
            from ragcache.semantic.pg_cache import PgSemanticCache

            return PgSemanticCache(url, **kwargs)
        if scheme in ("", "file"):
            return cls(url.removeprefix("file://"), **kwargs)
        raise ValueError(f"unknown semantic cache URL scheme {scheme!r}: use postgresql://..., file://DIR or a path")

    def lookup(self, question: str, *, partition: PartitionKey | None = None,
               threshold: float | None = None, max_tokens: int | None = None) -> SemanticHit | None:
        """Return the cached answer for ``question`` in ``partition``, or ``None``.

        ``threshold=None`` uses the cache default; any given value (1.0 included) is used as is.
        ``max_tokens`` is the request's new-token budget: a truncated answer is served only to the
        same budget, a complete one of known length only to a budget that holds it (``None``:
        unknown budget, so no truncated answer is served).

        Raises:
            ValueError: empty question, threshold outside [-1, 1], or a negative ``max_tokens``.
        """
        t0 = time.perf_counter()
        t = self.threshold if threshold is None else check_threshold(threshold)
        pk = checked_partition(partition)
        hit, cands, embed_s = self._lookup(question, pk, t, max_tokens=max_tokens)
        rejected = [c.verdict.reason for c in cands if c.similarity >= t and not c.verdict.ok]
        dt = time.perf_counter() - t0
        with self._touch_lock:
            self._stats.record_lookup(dt, embed_s, rejected, hit is not None)
        return hit

    async def alookup(self, question: str, *, partition: PartitionKey | None = None,
                      threshold: float | None = None, max_tokens: int | None = None) -> SemanticHit | None:
        """Async :meth:`lookup` (same code in a worker thread, same threshold and budget semantics)."""
        return await asyncio.to_thread(self.lookup, question, partition=partition, threshold=threshold,
                                       max_tokens=max_tokens)

    def candidates_for(self, question: str, *, partition: PartitionKey | None = None,
                       threshold: float | None = None, max_tokens: int | None = None) -> list[Candidate]:
        """The nearest stored questions with similarity and guard verdict (no stats, no LRU touch)."""
        t = self.threshold if threshold is None else check_threshold(threshold)
        return self._lookup(question, checked_partition(partition), t, touch=False, judge_all=True,
                            max_tokens=max_tokens)[1]

    def key(self, question: str, *, partition: PartitionKey | None = None) -> QuestionKey:
        """How ``question`` is keyed for this cache's embedder (embedded whole, split, or exact only)."""
        return question_key(normalize_question(question), checked_partition(partition), self.embedder)

    def store(self, question: str, answer: str, *, partition: PartitionKey | None = None,
              metadata: Mapping[str, Any] | None = None, ttl_s: float | None = None,
              finish_reason: str | None = None, max_tokens: int | None = None,
              output_tokens: int | None = None) -> int | None:
        """Store ``answer`` for ``question`` in ``partition``; returns the entry id.

        A stored question with the same words in the same partition is replaced. ``finish_reason``,
        ``max_tokens`` (the budget it was generated under) and ``output_tokens`` describe how the
        answer ended: a truncated answer (``"length"`` / ``"max_tokens"``) is not stored unless the
        cache has ``store_truncated=True``, and then ``None`` is returned.

        Raises:
            ValueError: empty question, non-str answer, ``ttl_s <= 0``, metadata not JSON-like,
                negative token counts; nothing is stored or removed then.
        """
        ids = self.store_many([(question, answer)], partition=partition, metadata=metadata, ttl_s=ttl_s,
                              finish_reason=finish_reason, max_tokens=max_tokens, output_tokens=output_tokens)
        return ids[0] if ids else None

    async def astore(self, question: str, answer: str, *, partition: PartitionKey | None = None,
                     metadata: Mapping[str, Any] | None = None, ttl_s: float | None = None,
                     finish_reason: str | None = None, max_tokens: int | None = None,
                     output_tokens: int | None = None) -> int | None:
        """Async :meth:`store`."""
        return await asyncio.to_thread(self.store, question, answer, partition=partition, metadata=metadata,
                                       ttl_s=ttl_s, finish_reason=finish_reason, max_tokens=max_tokens,
                                       output_tokens=output_tokens)

    def store_many(self, items: Sequence[tuple[str, str]], *, partition: PartitionKey | None = None,
                   metadata: Mapping[str, Any] | None = None, ttl_s: float | None = None,
                   vectors: np.ndarray | None = None, finish_reason: str | None = None,
                   max_tokens: int | None = None, output_tokens: int | None = None) -> list[int]:
        """Store many (question, answer) pairs in one transaction and one embedding batch.

        ``vectors`` (float32 ``[n, dim]``) skips embedding: precomputed embeddings of the
        questions' :func:`~ragcache.semantic.text.embed_form` from this cache's embedder (bulk warm-up). Rows are re-normalised;
        rows of questions longer than the embedder's window are recomputed (only their last
        sentence is embedded). The budget arguments apply to every item (see :meth:`store`);
        returns ``[]`` when truncated answers are not stored.
        """
        pk = checked_partition(partition)
        ttl = self.ttl_s if ttl_s is None else check_ttl(ttl_s)
        budget = AnswerBudget(finish_reason, max_tokens, output_tokens)
        keys = [question_key(normalize_question(q), pk, self.embedder) for q, _ in items]
        for _, a in items:
            if not isinstance(a, str):
                raise ValueError(f"answer must be a str, got {type(a).__name__}")
        meta = check_metadata(metadata)  # before anything is written: the store below must not fail half-way
        stored_meta = merge_metadata(meta, budget)
        if budget.truncated and not self.store_truncated:
            logger.debug("semantic cache: not storing %d truncated answer(s) (finish_reason=%r)", len(items),
                         finish_reason)
            return []
        if vectors is None:
            vecs = self._embed_many([embed_form(k.embed_text) for k in keys])
        else:
            vecs = np.asarray(vectors, dtype=np.float32)
            if vecs.shape != (len(keys), self.embedder.dim):
                raise ValueError(f"vectors must be [{len(keys)}, {self.embedder.dim}], got {vecs.shape}")
            vecs = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
            long = [j for j, k in enumerate(keys) if k.mode != "embed"]
            if long:
                vecs[long] = self._embed_many([embed_form(keys[j].embed_text) for j in long])
        now = time.time()
        expires = None if ttl is None else now + ttl
        with self._lock.write():
            ids: list[int] = []
            added: dict[str, list[int]] = {}
            replaced: list[list[int]] = []
            twins: dict[tuple[str, str], int] = {}
            # SQLite first, memory only after the commit: a failed write leaves both as they were
            with self._db.transaction():
                for key, (_, a) in zip(keys, items, strict=True):
                    kp, ex = key.partition, exact_form(key.text)
                    self._db.put_partition(kp.digest, kp.namespace, kp.invalidation_keys)
                    part = self._parts.get(kp.digest)
                    old = set(part.exact.get(ex, ())) if part is not None else set()
                    if (kp.digest, ex) in twins:  # a repeat within the batch replaces its twin
                        old.add(ids[twins[(kp.digest, ex)]])
                    if old:
                        self._db.delete(old)
                    twins[(kp.digest, ex)] = len(ids)
                    ids.append(self._db.insert(kp.digest, key.text, a, stored_meta, vecs[len(ids)], now, expires))
                    replaced.append(sorted(old))
            for k, (key, (_, a), i, old) in enumerate(zip(keys, items, ids, replaced, strict=True)):
                kp, q = key.partition, key.text
                part = self._partition(kp)
                if old:
                    self._forget(old)
                added.setdefault(kp.digest, []).append(k)
                self._remember(Entry(i, kp.digest, q, exact_form(q), a, meta, now, expires, 0, budget), part)
            for digest, rows in added.items():
                live = [k for k in rows if ids[k] in self._entries]  # a repeat within the batch replaced its twin
                self._parts[digest].index.add(np.asarray([ids[k] for k in live], np.int64), vecs[live])
                self._dirty.add(digest)
            self._stats.stores += len(ids)
            self._evict_over_capacity()
            self._after_write(len(ids))
        return ids

    def invalidate(self, document: str) -> int:
        """Drop every answer built from ``document`` (a document id, a content hash, or the text).

        Returns the number of entries removed.
        """
        from ragcache.hashing import content_hash

        if not isinstance(document, str) or not document.strip():
            raise ValueError(f"invalidate needs a document id, content hash or text (a non-empty str); got {document!r:.80}")
        keys = {document, content_hash(document)}
        with self._lock.write():
            parts = set().union(*(self._doc_parts.get(k, set()) for k in keys))
            return self._drop_partitions(parts)

    def clear(self, namespace: str | None = None) -> int:
        """Drop every entry (``namespace=None``) or every entry of one namespace. Returns the count removed."""
        with self._lock.write():
            parts = {k for k, p in self._parts.items() if namespace is None or p.namespace == namespace}
            return self._drop_partitions(parts)

    def purge_expired(self) -> int:
        """Remove entries past their TTL now (lookups skip them anyway). Returns the count removed."""
        now = time.time()
        with self._lock.write():
            dead = [e.id for e in self._entries.values() if e.expires is not None and e.expires <= now]
            self._remove_ids(dead)
            self._stats.expirations += len(dead)
            return len(dead)

    @property
    def stats(self) -> SemanticStats:
        """A snapshot of the counters (see :class:`SemanticStats`)."""
        with self._touch_lock:
            return self._stats.copy()

    def __len__(self) -> int:
        return len(self._entries)

    def flush(self) -> None:
        """Write FAISS snapshots of changed partitions and LRU access times (persistent caches)."""
        with self._lock.write():
            self._flush()

    def close(self) -> None:
        """Flush and close the database. The cache must not be used afterwards."""
        with self._lock.write():
            self._flush()
            self._db.close()

    def __enter__(self) -> SemanticCache:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ================================================================= lookup internals
    def _lookup(self, question: str, pk: PartitionKey, t: float, touch: bool = True,
                judge_all: bool = False, max_tokens: int | None = None
                ) -> tuple[SemanticHit | None, list[Candidate], float]:
        servable(AnswerBudget(), max_tokens)  # validates max_tokens
        key = question_key(normalize_question(question), pk, self.embedder)
        part = self._parts.get(key.partition.digest)
        if part is None or not len(part.index):
            return None, [], 0.0
        if key.exact_only:
            t = 1.0
        elif self.typo_correction:
            with self._lock.read():
                key = key.with_tail(part.speller.correct(key.embed_text, self.embedder.known_words))
        q = key.text
        e0 = time.perf_counter()
        vec = self._embed_many([embed_form(key.embed_text)])[0]
        embed_s = time.perf_counter() - e0
        now = time.time()
        cands: list[Candidate] = []
        hit: SemanticHit | None = None
        expired: list[int] = []
        with self._lock.read():
            if t >= 1.0:
                ids = sorted(part.exact.get(exact_form(q), ()), reverse=True)
                pairs = [(float(vec @ self._vector(part, i)), i) for i in ids]
            else:
                sims, ids = part.index.search(vec, self.candidates)
                pairs = list(zip(sims.tolist(), ids.tolist()))
            for sim, i in pairs:
                e = self._entries.get(int(i))
                if e is None:
                    continue
                if e.expires is not None and e.expires <= now:
                    expired.append(e.id)
                    continue
                judge = judge_all or (t < 1.0 and sim >= t)
                why = servable(e.budget, max_tokens)
                if why is not None:
                    verdict = GuardVerdict("budget", why)
                else:
                    verdict = self.guards.check(q, e.question, float(sim)) if judge else GuardVerdict()
                cands.append(Candidate(e.id, e.question, float(sim), verdict))
                if hit is None and (t >= 1.0 or sim >= t) and verdict.ok:
                    hit = SemanticHit(e.answer, float(sim), e.question, e.id, e.metadata, e.partition,
                                      e.budget.finish_reason, e.budget.max_tokens)
            if hit is not None and touch:
                with self._touch_lock:
                    if hit.entry_id in self._lru:
                        self._lru.move_to_end(hit.entry_id)
                        ent = self._entries[hit.entry_id]
                        ent.hits += 1
                        self._touched[hit.entry_id] = now
        if expired:
            with self._lock.write():
                live = [i for i in expired if i in self._entries]
                self._remove_ids(live)
                self._stats.expirations += len(live)
        return hit, cands, embed_s

    def _vector(self, part: Partition, entry_id: int) -> np.ndarray:
        return part.index._index.reconstruct(int(entry_id))

    def _embed_many(self, texts: list[str]) -> np.ndarray:
        if len(texts) == 1:
            with self._touch_lock:
                v = self._vec_memo.get(texts[0])
            if v is not None:
                return v[None, :]
        out = self.embedder.encode(texts)
        if len(texts) <= 4:
            with self._touch_lock:
                for t, v in zip(texts, out):
                    self._vec_memo[t] = v
                    self._vec_memo.move_to_end(t)
                while len(self._vec_memo) > 256:
                    self._vec_memo.popitem(last=False)
        return out
