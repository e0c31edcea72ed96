"""PgAnswerStore: the vector-answer store in PostgreSQL + pgvector, shared by every process that opens it.

Implements :class:`~ragcache.semantic.stores.protocol.VectorAnswerStore` and
:class:`~ragcache.semantic.speller.QuerySpeller`. No entry is held in the process:
every search is SQL, so another process's store or ``invalidate`` is seen on the next lookup.
Search is pgvector's HNSW with iterative index scans (``hnsw.iterative_scan``, pgvector >= 0.8)
filtered by partition. The search settings are transaction-local (``set_config(..., true)``, the
function form of ``SET LOCAL``), so they hold behind a transaction-mode pooler too.

An exact repeat always hits: the rows with the same words (``qhash``) are fetched with the
nearest ones in one statement, and when the filtered HNSW scan returns fewer rows than asked
(measured before ``ANALYZE``: 2 of 20 one-entry partitions came back empty) the partition is
scanned exactly (``ORDER BY distance + 0`` cannot use the HNSW index). TTL and the ``max_entries``
LRU cap are enforced in SQL; the single-flight locks (``locks``) are session advisory locks
(:class:`~ragcache.semantic.stores.pg_flight.PgFlightLocks`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from ragcache.remote import RemoteStoreError, redact
from ragcache.semantic.budget import merge_metadata, split_metadata
from ragcache.semantic.speller import PartitionSpeller
from ragcache.semantic.stores.pg_flight import PgFlightLocks
from ragcache.semantic.stores.pg_schema import (
    MIGRATE_LOCK_ID,
    PgPool,
    bulk_copy,
    check_identifier,
    migrations,
)
from ragcache.semantic.stores.protocol import (
    NewEntry,
    PutResult,
    Query,
    StoreCounters,
    StoredAnswer,
)
from ragcache.semantic.text import exact_form

logger = logging.getLogger("ragcache.semantic.pg")

_LIVE = "(expires IS NULL OR expires > now())"
_COLS = "id, partition, question, answer, metadata, 1 - (embedding <=> %(v)s) AS sim, state"


def qhash(question: str) -> str:
    """Hex sha256 of a question's exact form (:func:`~ragcache.semantic.text.exact_form`: the text after
    NFC, width and ligature folds and whitespace normalisation; case, symbols, superscripts and
    fractions count). A stored question is normalised already, so this is the sha256 of the stored
    text (migration steps 4 and 5 recompute it in SQL)."""
    return hashlib.sha256(exact_form(question).encode()).hexdigest()


class PgAnswerStore:
    """Entries in one PostgreSQL schema, searched with pgvector's HNSW.

    Args:
        url: ``postgresql://user[:password]@host:port/database``; the role needs ``CREATE`` on the
            database (or the ``vector`` extension and the schema created beforehand).
        embedder: the :class:`~ragcache.semantic.embedding.QuestionEmbedder` whose vectors are stored.
        schema: PostgreSQL schema holding ragcache's tables (one per embedder / deployment).
        max_entries: LRU capacity over the whole schema, enforced after each store.
        ef_search: HNSW search beam (``hnsw.ef_search``); ``hnsw_m`` / ``ef_construction`` build it.
        pool_size: connections this process opens at most (lent and idle; a caller beyond them waits
            up to ``pool_wait_s``), plus one for the single-flight locks: what a burst of any size takes
            of the server's ``max_connections``.
        pool_wait_s: longest wait (seconds) for a free connection; past it the call raises
            :class:`~ragcache.remote.RemoteStoreError` (through the answer path: a logged miss).
        vocab_refresh_s: seconds a partition's word list (typo correction) is reused before it is read
            again; this process's own stores refresh it at once.

    Raises:
        ValueError: bad arguments, or the schema holds a cache built with another embedder.
        RemoteStoreError: the server cannot be reached.
        ImportError: ``psycopg`` / ``pgvector`` missing (``pip install 'ragcache[shared]'``).
    """

    def __init__(self, url: str, *, embedder: Any, schema: str = "ragcache", max_entries: int = 1_000_000,
                 ef_search: int = 40, hnsw_m: int = 16, ef_construction: int = 64, pool_size: int = 4,
                 vocab_refresh_s: float = 2.0, pool_wait_s: float = 10.0) -> None:
        self.url, self.schema = url, check_identifier(schema)
        self.embedder, self.dim = embedder, int(embedder.dim)
        self.max_entries, self.ef_search = max_entries, int(ef_search)
        self.hnsw_m, self.ef_construction = hnsw_m, ef_construction
        self.vocab_refresh_s = vocab_refresh_s
        self.counters = StoreCounters()
        self._lock = threading.Lock()
        self._touched: dict[int, int] = {}
        self._touch_at = time.monotonic()
        self._flushed_lookups = (0, 0)  # counters.lookup_hits / lookup_misses already added to the lookups table
        self._vocab: dict[str, tuple[float, int, PartitionSpeller]] = {}
        self._pool = PgPool(url, size=pool_size, configure=self._configure, wait_s=pool_wait_s)
        self.locks = PgFlightLocks(self._pool)
        self._migrate()

    @property
    def pool(self) -> PgPool:
        """The connection pool every read and write of this store runs on (at most ``pool_size``
        connections; the single-flight locks hold one more)."""
        return self._pool

    # ================================================================= setup
    def _configure(self, conn: Any) -> None:
        from pgvector.psycopg import register_vector

        try:
            register_vector(conn)
        except Exception:  # noqa: BLE001 - extension not created yet (first process, before _migrate)
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            register_vector(conn)

    def _migrate(self) -> None:
        s = self.schema
        want = {"embedder": self.embedder.fingerprint, "dim": str(self.dim)}
        steps = migrations(s, self.dim, self.hnsw_m, self.ef_construction)
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK_ID,))
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

    def _settings(self, conn: Any) -> None:
        """Search settings for this transaction only (``SET LOCAL``), in one round trip."""
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true), "
                     "set_config('hnsw.iterative_scan', 'relaxed_order', true), "
                     # a generic plan (no partition value) may sort the partition instead of using HNSW
                     "set_config('plan_cache_mode', 'force_custom_plan', true)", (str(self.ef_search),))

    # ================================================================= reads
    def may_hold(self, partition: str) -> bool:
        return True  # asking costs a round trip; the search itself answers

    def search(self, query: Query, k: int) -> list[StoredAnswer]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: Sequence[Query], k: int) -> list[list[StoredAnswer]]:
        """Every query in one transaction (one connection, transaction-local settings)."""
        s = self.schema
        near = (f"(SELECT 0 AS src, {_COLS} FROM {s}.entries WHERE partition = %(p)s AND {_LIVE} "
                "ORDER BY embedding <=> %(v)s LIMIT %(k)s) UNION ALL "
                f"(SELECT 1, {_COLS} FROM {s}.entries WHERE partition = %(p)s AND qhash = %(h)s AND {_LIVE})")
        scan = (f"SELECT 0, {_COLS} FROM {s}.entries WHERE partition = %(p)s AND {_LIVE} "
                "ORDER BY (embedding <=> %(v)s) + 0 LIMIT %(k)s")

        def run(conn: Any) -> list[list[StoredAnswer]]:
            out = []
            with conn.transaction():
                self._settings(conn)
                for q in queries:
                    args = {"v": np.ascontiguousarray(q.vector, np.float32), "p": q.partition,
                            "h": qhash(q.question), "k": k}
                    rows = conn.execute(near, args, prepare=True).fetchall()
                    if sum(r[0] == 0 for r in rows) < k:  # the filtered HNSW scan came back short
                        rows += conn.execute(scan, args, prepare=True).fetchall()
                    out.append(_answers(r[1:] for r in rows))
            return out

        return self._pool.run(run)

    def exact(self, query: Query) -> list[StoredAnswer]:
        sql = (f"SELECT {_COLS} FROM {self.schema}.entries WHERE partition = %(p)s AND qhash = %(h)s AND {_LIVE}")
        args = {"v": np.ascontiguousarray(query.vector, np.float32), "p": query.partition,
                "h": qhash(query.question)}
        return _answers(self._pool.run(lambda c: c.execute(sql, args).fetchall()))

    def neighbours(self, vector: np.ndarray, k: int, *, namespace: str) -> list[tuple[str, float]]:
        """One query over the namespace's live entries (the HNSW index, iterative scan; a short result
        is completed by an exact scan as in :meth:`search_many`)."""
        s = self.schema
        sql = (f"SELECT question, 1 - (embedding <=> %(v)s) AS sim FROM {s}.entries WHERE namespace = %(n)s "
               f"AND {_LIVE} ORDER BY embedding <=> %(v)s LIMIT %(k)s")
        scan = (f"SELECT question, 1 - (embedding <=> %(v)s) AS sim FROM {s}.entries WHERE namespace = %(n)s "
                f"AND {_LIVE} ORDER BY (embedding <=> %(v)s) + 0 LIMIT %(k)s")
        args = {"v": np.ascontiguousarray(vector, np.float32), "n": namespace, "k": 4 * k}

        def run(conn: Any) -> list[tuple[str, float]]:
            with conn.transaction():
                self._settings(conn)
                rows = conn.execute(sql, args).fetchall()
                if len(rows) < args["k"]:  # the filtered HNSW scan may come back short
                    rows = conn.execute(scan, args).fetchall()
            best: dict[str, float] = {}
            for q, sim in rows:
                best[q] = max(float(sim), best.get(q, -2.0))
            return sorted(best.items(), key=lambda p: (-p[1], p[0]))[:k]

        return self._pool.run(run)

    def nearest(self, vec: np.ndarray, partition: str, k: int) -> list[tuple]:
        """Raw nearest-neighbour query: ``[(id, question, answer, metadata, similarity)]`` best first
        (what the shared-store benchmark times)."""
        return [(r.id, r.question, r.answer, r.metadata, r.similarity)
                for r in self.search(Query(partition, vec, ""), k)]

    def correct(self, partition: str, text: str, known: frozenset[str] | None) -> str:
        return self._speller(partition).correct(text, known)

    def _speller(self, partition: str) -> PartitionSpeller:
        """The partition's stored words, read incrementally (rows with a larger id than last time) at most
        every ``vocab_refresh_s`` seconds. Words of removed entries stay: a correction toward them only
        changes which candidates are found, never what the guards see."""
        now = time.monotonic()
        with self._lock:
            t, last, sp = self._vocab.get(partition, (-1e18, 0, PartitionSpeller()))
        if now - t <= self.vocab_refresh_s:
            return sp
        sql = (f"SELECT id, question FROM {self.schema}.entries WHERE partition = %s AND id > %s "
               "ORDER BY id LIMIT 100000")
        rows = self._pool.run(lambda c: c.execute(sql, (partition, last)).fetchall())
        with self._lock:
            for i, q in rows:
                sp.add(q)
            self._vocab[partition] = (now, max([last, *(r[0] for r in rows)]), sp)
            while len(self._vocab) > 1024:
                self._vocab.pop(next(iter(self._vocab)))
        return sp

    def __len__(self) -> int:
        return int(self._pool.run(lambda c: c.execute(
            f"SELECT count(*) FROM {self.schema}.entries WHERE {_LIVE}").fetchone()[0]))

    # ================================================================= writes
    def put_many(self, entries: Sequence[NewEntry]) -> PutResult:
        s = self.schema
        sql = (f"INSERT INTO {s}.entries AS e (partition, namespace, qhash, question, answer, metadata, docs, "
               "embedding, expires, state) VALUES (%s, %s, %s, %s, %s, %s::jsonb, %s, %s, "
               "now() + make_interval(secs => %s), %s::jsonb) "
               "ON CONFLICT (partition, qhash) DO UPDATE SET question = excluded.question, "
               "answer = excluded.answer, metadata = excluded.metadata, docs = excluded.docs, "
               "embedding = excluded.embedding, created = now(), accessed = now(), expires = excluded.expires, "
               "hits = 0, state = excluded.state RETURNING id")
        rows = [(e.partition.digest, e.partition.namespace, qhash(e.question), e.question, e.answer,
                 json.dumps(merge_metadata(e.metadata, e.budget), ensure_ascii=False),
                 list(e.partition.invalidation_keys), np.ascontiguousarray(e.vector, np.float32), e.ttl_s,
                 None if e.state is None else json.dumps(dict(e.state))) for e in entries]

        def write(conn: Any) -> PutResult:
            with conn.transaction():
                ids = [conn.execute(sql, r).fetchone()[0] for r in rows]
                evicted = self._evict(conn)
            return PutResult(ids, evicted)

        res = self._pool.run(write)
        with self._lock:
            self.counters.evictions += res.evicted
            for e in entries:
                if e.partition.digest in self._vocab:
                    _, last, sp = self._vocab[e.partition.digest]
                    self._vocab[e.partition.digest] = (-1e18, last, sp)
        return res

    def bulk_load(self, entries: Sequence[NewEntry], maintenance_work_mem: str = "512MB") -> int:
        """Warm-up: ``COPY`` many entries and build the HNSW index once, afterwards (see
        :func:`~ragcache.semantic.stores.pg_schema.bulk_copy`). Locks the table: run it before serving.
        A question stored twice keeps its first answer in the batch; stored ones are replaced."""
        from psycopg.types.json import Jsonb

        rows, seen = [], set()
        for e in entries:
            h = qhash(e.question)
            if (e.partition.digest, h) not in seen:
                seen.add((e.partition.digest, h))
                rows.append((e.partition.digest, e.partition.namespace, h, e.question, e.answer,
                             Jsonb(merge_metadata(e.metadata, e.budget)),
                             list(e.partition.invalidation_keys), np.ascontiguousarray(e.vector, np.float32)))
        with self._pool.connection() as conn, conn.transaction():
            n = bulk_copy(conn, self.schema, rows, self.hnsw_m, self.ef_construction, maintenance_work_mem)
            evicted = self._evict(conn)
        with self._lock:
            self.counters.evictions += evicted
            self._vocab.clear()
        return n

    def _evict(self, conn: Any) -> int:
        """Delete the least recently used entries over ``max_entries`` (inside the store's transaction)."""
        s = self.schema
        over = conn.execute(f"SELECT count(*) FROM {s}.entries").fetchone()[0] - self.max_entries
        if over <= 0:
            return 0
        return conn.execute(f"DELETE FROM {s}.entries WHERE id IN (SELECT id FROM {s}.entries "
                            "ORDER BY accessed, id LIMIT %s FOR UPDATE SKIP LOCKED)", (over,)).rowcount

    def remove_documents(self, keys: Collection[str]) -> int:
        sql = f"DELETE FROM {self.schema}.entries WHERE docs && %s::text[]"
        return self._delete(sql, (sorted(keys),))

    def remove_namespace(self, namespace: str | None) -> int:
        if namespace is None:
            return self._delete(f"DELETE FROM {self.schema}.entries", ())
        return self._delete(f"DELETE FROM {self.schema}.entries WHERE namespace = %s", (namespace,))

    def expire(self) -> int:
        n = self._delete(f"DELETE FROM {self.schema}.entries WHERE expires IS NOT NULL AND expires <= now()", ())
        with self._lock:
            self.counters.expirations += n
        return n

    def _delete(self, sql: str, args: tuple) -> int:
        return int(self._pool.run(lambda c: c.execute(sql, args).rowcount))

    def update_state(self, entry_id: int, state: Mapping[str, Any] | None) -> bool:
        js = None if state is None else json.dumps(dict(state), ensure_ascii=False, allow_nan=False)
        sql = f"UPDATE {self.schema}.entries SET state = %s::jsonb WHERE id = %s"
        return self._pool.run(lambda c: c.execute(sql, (js, int(entry_id))).rowcount) > 0

    def touch(self, ids: Sequence[int]) -> None:
        """Record hits; hit counts and access times are written in batches (at most every second)."""
        with self._lock:
            for i in ids:
                self._touched[i] = self._touched.get(i, 0) + 1
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

    # ================================================================= lifetime
    def flush(self) -> None:
        """Write pending hit counts / access times and add this process's lookups since the last flush to
        the schema's totals (``ragcache cache stats``); everything else is committed as it happens."""
        with self._lock:
            items, self._touched = list(self._touched.items()), {}
            now = (self.counters.lookup_hits, self.counters.lookup_misses)
            hits, misses = now[0] - self._flushed_lookups[0], now[1] - self._flushed_lookups[1]
            self._flushed_lookups = now
        self._write_touches(items)
        if hits or misses:
            sql = (f"INSERT INTO {self.schema}.lookups AS l (name, hits, misses) VALUES ('all', %s, %s) "
                   "ON CONFLICT (name) DO UPDATE SET hits = l.hits + excluded.hits, misses = l.misses + excluded.misses")
            try:
                self._pool.run(lambda c: c.execute(sql, (hits, misses)))
            except RemoteStoreError as e:  # statistics only: losing them is not an error
                logger.warning("semantic cache: could not record %d lookups (%s)", hits + misses, e)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.locks.close()
            self._pool.close()


def _answers(rows: Any) -> list[StoredAnswer]:
    """Rows (id, partition, question, answer, metadata, sim, state) as answers, best first, each id once."""
    out: dict[int, StoredAnswer] = {}
    for i, part, q, a, meta, sim, state in rows:
        if int(i) not in out:
            m, budget = split_metadata(json.loads(meta) if isinstance(meta, str) else meta or {})
            out[int(i)] = StoredAnswer(int(i), part, q, a, m, budget, float(sim), state)
    return sorted(out.values(), key=lambda r: (-r.similarity, -r.id))
