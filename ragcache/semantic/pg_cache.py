"""PgSemanticCache: the semantic answer cache in PostgreSQL + pgvector, shared by every process that opens it.

The same contract as :class:`~ragcache.semantic.cache.SemanticCache` (lookup / store / invalidate /
clear / purge_expired / stats, cosine ``sim >= threshold``, ``threshold=1.0`` = same words only,
guards on the candidates), but no state is held in the process: every lookup is one SQL query, so
another process's store or ``invalidate`` is seen on the next lookup. Search is pgvector's HNSW
with iterative index scans (``hnsw.iterative_scan``, pgvector >= 0.8) filtered by partition; the
``candidates`` nearest rows come back and the guards (:mod:`ragcache.semantic.guards`) run on them
in order, exactly as on FAISS's. TTL and the ``max_entries`` LRU cap are enforced in SQL.
Typo correction (a per-process vocabulary in the FAISS cache) is not applied here.

:meth:`single_flight` makes concurrent identical misses, in any number of processes, cost one
model call (a PostgreSQL session advisory lock per (partition, question)).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ragcache.remote import RemoteStoreError, redact
from ragcache.semantic.checks import check_count, check_metadata, check_threshold, check_ttl
from ragcache.semantic.embedding import QuestionEmbedder, resolve_embedder
from ragcache.semantic.flight import FlightResult, single_flight
from ragcache.semantic.guards import GuardSet, GuardVerdict
from ragcache.semantic.cache import DEFAULT_THRESHOLD, checked_partition
from ragcache.semantic.partition import PartitionKey
from ragcache.semantic.pg_flight import PgFlightLocks
from ragcache.semantic.pg_schema import _MIGRATE_LOCK, PgPool, bulk_copy, check_identifier, migrations
from ragcache.semantic.records import Candidate, SemanticHit
from ragcache.semantic.stats import SemanticStats
from ragcache.semantic.text import embed_form, exact_form, normalize_question

logger = logging.getLogger("ragcache.semantic.pg")



def _qhash(q: str) -> str:
    return hashlib.sha256(exact_form(q).encode()).hexdigest()


class PgSemanticCache(PgFlightLocks):
    """Semantic response cache in PostgreSQL + pgvector.

    Args:
        url: ``postgresql://user[:password]@host:port/database``; the role needs ``CREATE`` on the
            database (or the ``vector`` extension and the schema created beforehand).
        schema: PostgreSQL schema holding ragcache's tables (one per embedder / deployment).
        embedder, threshold, ttl_s, guards, verifier, candidates: as for :class:`SemanticCache`.
        max_entries: LRU capacity over the whole schema, enforced after each store.
        ef_search: HNSW search beam (``hnsw.ef_search``); ``hnsw_m`` / ``ef_construction`` build it.
        pool_size: connections kept open by this process.

    Raises:
        ValueError: bad arguments, or the schema holds a cache built with another embedder.
        RemoteStoreError: the server cannot be reached.
        ImportError: ``psycopg`` / ``pgvector`` missing (``pip install 'ragcache[shared]'``).
    """

    def __init__(self, url: str, *, schema: str = "ragcache", embedder: Any = None, threshold: float = DEFAULT_THRESHOLD,
                 max_entries: int = 1_000_000, ttl_s: float | None = None, guards: bool | GuardSet = True,
                 verifier: Callable[[str, str], bool | float] | None = None, candidates: int = 4,
                 ef_search: int = 40, hnsw_m: int = 16, ef_construction: int = 64, pool_size: int = 4) -> None:
        self.threshold = check_threshold(threshold)
        self.max_entries, self.candidates = check_count("max_entries", max_entries), check_count("candidates", candidates)
        self.ttl_s, self.ef_search = check_ttl(ttl_s), check_count("ef_search", ef_search)
        self.url, self.schema = url, check_identifier(schema)
        if isinstance(guards, GuardSet):
            self.guards = guards if verifier is None else GuardSet([*guards.guards, *GuardSet.default(verifier).guards[-1:]])
        else:
            self.guards = GuardSet.default(verifier) if guards else GuardSet([])
        self.embedder: QuestionEmbedder = resolve_embedder(embedder)
        self._stats = SemanticStats()
        self._stats_lock = threading.Lock()
        self._touched: dict[int, int] = {}
        self._touch_at = time.monotonic()
        self._pool = PgPool(url, size=pool_size, configure=self._configure)
        self.hnsw_m, self.ef_construction = hnsw_m, ef_construction
        self._migrate(hnsw_m, ef_construction)

    # ================================================================= setup
    def _configure(self, conn: Any) -> None:
        from pgvector.psycopg import register_vector

        try:
            register_vector(conn)
        except Exception:  # noqa: BLE001 - extension not created yet (first process, before _migrate)
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            register_vector(conn)
        conn.execute(f"SET hnsw.ef_search = {int(self.ef_search)}")
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        # A generic plan (no partition value) may sort the partition by distance instead of using HNSW.
        conn.execute("SET plan_cache_mode = force_custom_plan")

    def _migrate(self, hnsw_m: int, ef_construction: int) -> None:
        s, dim = self.schema, self.embedder.dim
        want = {"embedder": self.embedder.fingerprint, "dim": str(dim)}
        steps = migrations(s, dim, hnsw_m, ef_construction)
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {s}.schema_version "
                         "(version integer PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())")
            have = conn.execute(f"SELECT coalesce(max(version), 0) FROM {s}.schema_version").fetchone()[0]
            if have > len(steps):
                raise ValueError(f"schema {s!r} is at version {have}, newer than this ragcache ({len(steps)}); "
                                 "upgrade ragcache or use another schema")
            for v in range(have + 1, len(steps) + 1):
                conn.execute(steps[v - 1])
                conn.execute(f"INSERT INTO {s}.schema_version(version) VALUES (%s)", (v,))
                logger.info("semantic cache %s schema %s: migrated to version %d", redact(self.url), s, v)
            meta = dict(conn.execute(f"SELECT key, value FROM {s}.meta").fetchall())
            if not meta:
                conn.cursor().executemany(f"INSERT INTO {s}.meta(key, value) VALUES (%s, %s)", list(want.items()))
            elif {k: meta.get(k) for k in want} != want:
                raise ValueError(f"schema {s!r} at {redact(self.url)} holds a cache built with {meta}, not {want}; "
                                 "open it with the same embedder or pass another schema=")

    # ================================================================= lookup
    def lookup(self, question: str, *, partition: PartitionKey | None = None,
               threshold: float | None = None) -> SemanticHit | None:
        """The cached answer for ``question`` in ``partition``, or ``None`` (see :class:`SemanticCache`).

        Raises:
            ValueError: empty question or threshold outside [-1, 1].
            RemoteStoreError: PostgreSQL unreachable (after one reconnect attempt).
        """
        t0 = time.perf_counter()
        t = self.threshold if threshold is None else check_threshold(threshold)
        hit, cands, embed_s = self._lookup(question, checked_partition(partition), t)
        rejected = [c.verdict.reason for c in cands if c.similarity >= t and not c.verdict.ok]
        dt = time.perf_counter() - t0
        with self._stats_lock:
            self._stats.record_lookup(dt, embed_s, rejected, hit is not None)
        return hit

    async def alookup(self, question: str, *, partition: PartitionKey | None = None,
                      threshold: float | None = None) -> SemanticHit | None:
        return await asyncio.to_thread(self.lookup, question, partition=partition, threshold=threshold)

    def candidates_for(self, question: str, *, partition: PartitionKey | None = None,
                       threshold: float | None = None) -> list[Candidate]:
        """The nearest stored questions with similarity and guard verdict (no stats, no LRU touch)."""
        t = self.threshold if threshold is None else check_threshold(threshold)
        return self._lookup(question, checked_partition(partition), t, touch=False, judge_all=True)[1]

    def search(self, vec: np.ndarray, partition: PartitionKey | None = None, k: int | None = None) -> list[tuple]:
        """Raw nearest-neighbour query: ``[(id, question, answer, metadata, similarity)]`` best first.

        ``vec`` is a unit float32 ``[dim]`` embedding; expired rows are skipped. (Benchmarks time this.)
        """
        pk = checked_partition(partition)
        s = self.schema
        sql = (f"SELECT id, question, answer, metadata, 1 - (embedding <=> %(v)s) AS sim FROM {s}.entries "
               "WHERE partition = %(p)s AND (expires IS NULL OR expires > now()) "
               "ORDER BY embedding <=> %(v)s LIMIT %(k)s")
        v = np.ascontiguousarray(vec, dtype=np.float32)
        rows = self._pool.run(lambda c: c.execute(sql, {"v": v, "p": pk.digest, "k": k or self.candidates},
                                                  prepare=True).fetchall())
        return sorted(rows, key=lambda r: -r[4])  # relaxed_order iterative scans may return rows slightly out of order

    def _lookup(self, question: str, pk: PartitionKey, t: float, touch: bool = True,
                judge_all: bool = False) -> tuple[SemanticHit | None, list[Candidate], float]:
        q = normalize_question(question)
        e0 = time.perf_counter()
        vec = self.embedder.encode([embed_form(q)])[0]  # the embedded form, as SemanticCache embeds it
        embed_s = time.perf_counter() - e0
        if t >= 1.0:
            sql = (f"SELECT id, question, answer, metadata, 1 - (embedding <=> %s) FROM {self.schema}.entries "
                   "WHERE partition = %s AND qhash = %s AND (expires IS NULL OR expires > now())")
            rows = self._pool.run(lambda c: c.execute(sql, (np.asarray(vec, np.float32), pk.digest, _qhash(q)))
                                  .fetchall())
        else:
            rows = self.search(vec, pk)
        cands: list[Candidate] = []
        hit: SemanticHit | None = None
        for i, cq, answer, meta, sim in rows:
            judge = judge_all or (t < 1.0 and sim >= t)
            verdict = self.guards.check(q, cq) if judge else GuardVerdict()
            cands.append(Candidate(int(i), cq, float(sim), verdict))
            if hit is None and (t >= 1.0 or sim >= t) and verdict.ok:
                hit = SemanticHit(answer, float(sim), cq, int(i), meta, pk.digest)
        if hit is not None and touch:
            self._touch(hit.entry_id)
        return hit, cands, embed_s

    def _touch(self, entry_id: int) -> None:
        """Record a hit; hit counts and access times are written in batches (at most every second)."""
        with self._stats_lock:
            self._touched[entry_id] = self._touched.get(entry_id, 0) + 1
            if time.monotonic() - self._touch_at < 1.0 and len(self._touched) < 256:
                return
            items, self._touched, self._touch_at = list(self._touched.items()), {}, time.monotonic()
        self._write_touches(items)

    def _write_touches(self, items: list[tuple[int, int]]) -> None:
        if not items:
            return
        sql = f"UPDATE {self.schema}.entries SET hits = hits + %s, accessed = now() WHERE id = %s"
        try:
            self._pool.run(lambda c: c.cursor().executemany(sql, [(n, i) for i, n in items]))
        except RemoteStoreError as e:  # access times are advisory (LRU order); losing them is not an error
            logger.warning("semantic cache: could not record %d hits (%s)", len(items), e)

    # ================================================================= writes
    def store(self, question: str, answer: str, *, partition: PartitionKey | None = None,
              metadata: Mapping[str, Any] | None = None, ttl_s: float | None = None) -> int:
        """Store ``answer`` for ``question``; a stored question with the same words is replaced. Returns the id."""
        return self.store_many([(question, answer)], partition=partition, metadata=metadata, ttl_s=ttl_s)[0]

    async def astore(self, question: str, answer: str, *, partition: PartitionKey | None = None,
                     metadata: Mapping[str, Any] | None = None, ttl_s: float | None = None) -> int:
        return await asyncio.to_thread(self.store, question, answer, partition=partition, metadata=metadata,
                                       ttl_s=ttl_s)

    def store_many(self, items: Sequence[tuple[str, str]], *, partition: PartitionKey | None = None,
                   metadata: Mapping[str, Any] | None = None, ttl_s: float | None = None,
                   vectors: np.ndarray | None = None) -> list[int]:
        """Store many (question, answer) pairs in one transaction (``vectors``: precomputed ``[n, dim]``).

        Committed when this returns: every process's next lookup sees the entries.

        Raises:
            ValueError: empty question, non-str answer, ``ttl_s <= 0``, metadata not JSON-like.
            RemoteStoreError: PostgreSQL unreachable (nothing of this call was committed).
        """
        pk = checked_partition(partition)
        ttl = self.ttl_s if ttl_s is None else check_ttl(ttl_s)
        qs = [normalize_question(q) for q, _ in items]
        for _, a in items:
            if not isinstance(a, str):
                raise ValueError(f"answer must be a str, got {type(a).__name__}")
        meta = json.dumps(check_metadata(metadata), ensure_ascii=False)
        if vectors is None:
            vecs = (self.embedder.encode([embed_form(q) for q in qs]) if qs
                    else np.zeros((0, self.embedder.dim), np.float32))
        else:
            vecs = np.asarray(vectors, dtype=np.float32)
            if vecs.shape != (len(qs), self.embedder.dim):
                raise ValueError(f"vectors must be [{len(qs)}, {self.embedder.dim}], got {vecs.shape}")
            vecs = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
        s = self.schema
        sql = (f"INSERT INTO {s}.entries AS e (partition, namespace, qhash, question, answer, metadata, docs, "
               "embedding, expires) VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s, "
               "now() + make_interval(secs => %s)) "
               "ON CONFLICT (partition, qhash) DO UPDATE SET question = excluded.question, "
               "answer = excluded.answer, metadata = excluded.metadata, docs = excluded.docs, "
               "embedding = excluded.embedding, created = now(), accessed = now(), expires = excluded.expires, "
               "hits = 0 RETURNING id")
        docs = list(pk.invalidation_keys)
        rows = [(pk.digest, pk.namespace, _qhash(q), q, a, meta, docs, np.ascontiguousarray(v, np.float32), ttl)
                for q, (_, a), v in zip(qs, items, vecs, strict=True)]

        def write(conn: Any) -> list[int]:
            with conn.transaction():
                ids = [conn.execute(sql, r).fetchone()[0] for r in rows]
                evicted = self._evict(conn)
            with self._stats_lock:
                self._stats.stores += len(ids)
                self._stats.evictions += evicted
            return ids

        return self._pool.run(write)

    def bulk_load(self, items: Sequence[tuple[str, str]], *, vectors: np.ndarray,
                  partition: PartitionKey | None = None, metadata: Mapping[str, Any] | None = None,
                  maintenance_work_mem: str = "512MB") -> int:
        """Warm-up: load many entries with ``COPY`` and build the HNSW index once, afterwards.

        pgvector builds an HNSW index much faster than it inserts into one row by row (measured
        here: ~6 ms per row inserted into a 384-d index on a loaded 2-core CPU). The index is
        dropped and rebuilt inside one transaction, which locks the table: run this before
        serving, not beside live traffic. Questions already stored are replaced. ``vectors``:
        float32 ``[n, dim]`` embeddings of the normalised questions. Returns the rows loaded.
        """
        pk = checked_partition(partition)
        qs = [normalize_question(q) for q, _ in items]
        vecs = np.asarray(vectors, dtype=np.float32)
        if vecs.shape != (len(qs), self.embedder.dim):
            raise ValueError(f"vectors must be [{len(qs)}, {self.embedder.dim}], got {vecs.shape}")
        vecs = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
        meta = json.dumps(dict(metadata or {}), ensure_ascii=False)
        docs = list(pk.invalidation_keys)
        rows, seen = [], set()
        for q, (_, a), v in zip(qs, items, vecs, strict=True):
            h = _qhash(q)
            if h not in seen:
                seen.add(h)
                rows.append((pk.digest, pk.namespace, h, q, a, meta, docs, v))

        def load(conn: Any) -> int:
            with conn.transaction():
                n = bulk_copy(conn, self.schema, rows, self.hnsw_m, self.ef_construction, maintenance_work_mem)
                evicted = self._evict(conn)
            with self._stats_lock:
                self._stats.stores += n
                self._stats.evictions += evicted
            return n

        with self._pool.connection() as conn:
            return load(conn)

    def _evict(self, conn: Any) -> int:
        """Delete the least recently used entries over ``max_entries`` (inside the store's transaction)."""
        s = self.schema
        n = conn.execute(f"SELECT count(*) FROM {s}.entries").fetchone()[0]
        over = n - self.max_entries
        if over <= 0:
            return 0
        cur = conn.execute(f"DELETE FROM {s}.entries WHERE id IN (SELECT id FROM {s}.entries "
                           "ORDER BY accessed, id LIMIT %s FOR UPDATE SKIP LOCKED)", (over,))
        return cur.rowcount

    def invalidate(self, document: str) -> int:
        """Drop every answer built from ``document`` (id, content hash or text), in every process. Returns the count."""
        from ragcache.hashing import content_hash

        if not isinstance(document, str) or not document.strip():
            raise ValueError(f"invalidate needs a document id, content hash or text (a non-empty str); got {document!r:.80}")
        keys = sorted({document, content_hash(document)})
        n = self._pool.run(lambda c: c.execute(f"DELETE FROM {self.schema}.entries WHERE docs && %s::text[]",
                                               (keys,)).rowcount)
        with self._stats_lock:
            self._stats.invalidations += n
        return n

    def clear(self, namespace: str | None = None) -> int:
        """Drop every entry, or every entry of one namespace. Returns the count removed."""
        if namespace is None:
            n = self._pool.run(lambda c: c.execute(f"DELETE FROM {self.schema}.entries").rowcount)
        else:
            n = self._pool.run(lambda c: c.execute(f"DELETE FROM {self.schema}.entries WHERE namespace = %s",
                                                   (namespace,)).rowcount)
        with self._stats_lock:
            self._stats.invalidations += n
        return n

    def purge_expired(self) -> int:
        """Delete entries past their TTL now (lookups skip them anyway). Returns the count removed."""
        n = self._pool.run(lambda c: c.execute(
            f"DELETE FROM {self.schema}.entries WHERE expires IS NOT NULL AND expires <= now()").rowcount)
        with self._stats_lock:
            self._stats.expirations += n
        return n

    # ================================================================= single flight
    def single_flight(self, question: str, compute: Callable[[], str], *, partition: PartitionKey | None = None,
                      threshold: float | None = None, timeout_s: float = 60.0,
                      metadata: Mapping[str, Any] | None = None, ttl_s: float | None = None) -> FlightResult:
        """Serve ``question`` or run ``compute()`` once across every process on this database
        (:func:`ragcache.semantic.flight.single_flight` with :meth:`flight_lock`)."""
        return single_flight(self, question, compute, partition=partition, threshold=threshold,
                             timeout_s=timeout_s, metadata=metadata, ttl_s=ttl_s)

    # ================================================================= housekeeping
    @property
    def stats(self) -> SemanticStats:
        with self._stats_lock:
            return self._stats.copy()

    def __len__(self) -> int:
        return int(self._pool.run(lambda c: c.execute(
            f"SELECT count(*) FROM {self.schema}.entries WHERE expires IS NULL OR expires > now()").fetchone()[0]))

    def flush(self) -> None:
        """Write pending hit counts / access times (everything else is committed as it happens)."""
        with self._stats_lock:
            items, self._touched = list(self._touched.items()), {}
        self._write_touches(items)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._pool.close()

    def __enter__(self) -> PgSemanticCache:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
