"""PostgreSQL side of the shared semantic cache: connections that reconnect, and the schema ragcache migrates.

Tables live in one PostgreSQL schema (default ``ragcache``)::

    schema_version(version)      migrations applied, one row per step
    meta(key, value)             embedder fingerprint and width the cache was built with
    lookups(name, hits, misses)  lookups of every process that used the cache (added on flush)
    entries(id, partition, namespace, qhash, question, answer, metadata jsonb, docs text[],
            embedding vector(d), created, accessed, expires, hits, state jsonb)

Indexes: HNSW on ``embedding`` (cosine; pgvector, Malkov & Yashunin, TPAMI 2018) searched with
``hnsw.iterative_scan`` so a per-partition filter still returns k rows; a unique
``(partition, qhash)`` (one answer per question wording per partition); GIN on ``docs`` for
``invalidate``; btree on ``accessed`` (LRU eviction) and ``expires`` (TTL). Migrations run under
a transaction-scoped advisory lock, so processes starting together do not race.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ragcache.remote import RemoteStoreError, redact

logger = logging.getLogger("ragcache.semantic.pg")

_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
MIGRATE_LOCK_ID = 0x72616763_61636865 & 0x7FFFFFFFFFFFFFFF  # "ragcache"


def migrations(schema: str, dim: int, hnsw_m: int, ef_construction: int) -> list[str]:
    """The ordered migration steps; step ``i`` (1-based) brings the schema to version ``i``."""
    s = schema
    return [
        f"""
        CREATE TABLE IF NOT EXISTS {s}.meta (key text PRIMARY KEY, value text NOT NULL);
        CREATE TABLE IF NOT EXISTS {s}.entries (
            id bigserial PRIMARY KEY,
            partition text NOT NULL,
            namespace text NOT NULL,
            qhash text NOT NULL,
            question text NOT NULL,
            answer text NOT NULL,
            metadata jsonb NOT NULL DEFAULT '{{}}',
            docs text[] NOT NULL DEFAULT '{{}}',
            embedding vector({dim}) NOT NULL,
            created timestamptz NOT NULL DEFAULT now(),
            accessed timestamptz NOT NULL DEFAULT now(),
            expires timestamptz,
            hits integer NOT NULL DEFAULT 0);
        CREATE UNIQUE INDEX IF NOT EXISTS entries_question ON {s}.entries (partition, qhash);
        CREATE INDEX IF NOT EXISTS entries_docs ON {s}.entries USING gin (docs);
        CREATE INDEX IF NOT EXISTS entries_namespace ON {s}.entries (namespace);
        CREATE INDEX IF NOT EXISTS entries_accessed ON {s}.entries (accessed);
        CREATE INDEX IF NOT EXISTS entries_expires ON {s}.entries (expires) WHERE expires IS NOT NULL;
        CREATE INDEX IF NOT EXISTS entries_embedding ON {s}.entries
            USING hnsw (embedding vector_cosine_ops) WITH (m = {hnsw_m}, ef_construction = {ef_construction});
        """,
        # 2: per-entry decision state (e.g. a vCache per-entry threshold), NULL until set
        f"ALTER TABLE {s}.entries ADD COLUMN IF NOT EXISTS state jsonb",
        # 3: a partition's rows by id (typo correction reads the rows added since its last look)
        f"CREATE INDEX IF NOT EXISTS entries_partition_id ON {s}.entries (partition, id)",
        # 4: "the same words" is the same text (case and symbols count): qhash is the sha256 of the
        # stored (already normalised) question itself, no longer of its lower-cased words
        f"UPDATE {s}.entries SET qhash = encode(sha256(convert_to(question, 'UTF8')), 'hex')",
        # 5: exact means exact: questions are normalised with NFC and width / ligature folds, no longer
        # NFKC, which folded "3²" into "32", "H₂O" into "H2O", "½" into "1⁄2" and "①" into "1". A question
        # stored before this step with a digit or NFKC's fraction slash may be the fold of another
        # question, so it no longer answers an exact repeat: it is dropped (answered again on its next
        # miss). Every other stored question is its own new exact form, so qhash is rehashed from the
        # stored text only for the rows whose hash is not already that.
        f"DELETE FROM {s}.entries WHERE question ~ '[0-9\u2044]';"
        f"UPDATE {s}.entries SET qhash = encode(sha256(convert_to(question, 'UTF8')), 'hex') "
        f"WHERE qhash <> encode(sha256(convert_to(question, 'UTF8')), 'hex')",
        # 6: lookups of every process (hits / misses), added on flush: `ragcache cache stats` reads them
        f"CREATE TABLE IF NOT EXISTS {s}.lookups (name text PRIMARY KEY, hits bigint NOT NULL DEFAULT 0, "
        "misses bigint NOT NULL DEFAULT 0)",
    ]


def bulk_copy(conn: Any, schema: str, rows: list[tuple], hnsw_m: int, ef_construction: int,
              maintenance_work_mem: str = "512MB") -> int:
    """COPY ``rows`` (partition, namespace, qhash, question, answer, metadata json, docs, vector) into
    ``entries`` with the HNSW index dropped, then build it once. Call inside a transaction.
    Rows whose (partition, qhash) exists replace its answer. Returns the rows written."""
    s = schema
    cols = "partition, namespace, qhash, question, answer, metadata, docs, embedding"
    if not re.match(r"^[0-9]+[kMG]?B$", maintenance_work_mem):
        raise ValueError(f"maintenance_work_mem must look like '512MB', got {maintenance_work_mem!r}")
    conn.execute(f"SET LOCAL maintenance_work_mem = '{maintenance_work_mem}'")
    conn.execute(f"CREATE TEMP TABLE bulk (LIKE {s}.entries INCLUDING DEFAULTS) ON COMMIT DROP")
    with conn.cursor().copy(f"COPY bulk ({cols}) FROM STDIN WITH (FORMAT BINARY)") as cp:
        cp.set_types(["text", "text", "text", "text", "text", "jsonb", "text[]", "vector"])
        for r in rows:
            cp.write_row(r)
    conn.execute(f"DROP INDEX IF EXISTS {s}.entries_embedding")
    n = conn.execute(f"INSERT INTO {s}.entries ({cols}) SELECT {cols} FROM bulk "
                     "ON CONFLICT (partition, qhash) DO UPDATE SET answer = excluded.answer, "
                     "embedding = excluded.embedding, metadata = excluded.metadata").rowcount
    conn.execute(f"CREATE INDEX entries_embedding ON {s}.entries USING hnsw (embedding vector_cosine_ops) "
                 f"WITH (m = {int(hnsw_m)}, ef_construction = {int(ef_construction)})")
    # Fresh statistics: with the pre-load ones the planner sorts the whole partition by distance
    # (measured: 66 ms at 10k rows) instead of walking the HNSW index (1.4 ms).
    conn.execute(f"ANALYZE {s}.entries")
    return n


def check_identifier(name: str) -> str:
    if not _IDENT.match(name):
        raise ValueError(f"schema must be a lower-case SQL identifier ([a-z_][a-z0-9_]*), got {name!r}")
    return name


class PoolExhausted(RemoteStoreError):
    """Every connection of a :class:`PgPool` stayed in use for its whole wait (``wait_s``)."""


class PgPool:
    """A bounded pool of autocommit psycopg connections that replaces broken ones.

    ``with pool.connection() as conn:`` lends one connection. At most ``size`` connections are open at
    once (lent or idle), whatever the concurrency: a caller beyond them waits (up to ``wait_s``) for one
    to come back, so a burst of requests never takes more of the server's ``max_connections`` than
    ``size`` per process (plus one for the single-flight locks,
    :class:`~ragcache.semantic.stores.pg_flight.PgFlightLocks`). When the server goes away (restart,
    network), the failing call raises :class:`RemoteStoreError` and the broken connection is dropped;
    the next call connects afresh. :meth:`run` retries once on a fresh connection, so a server
    restart between two calls is invisible to the caller.

    Args:
        url: ``postgresql://user[:password]@host:port/db`` (libpq URL; ``?sslmode=...`` etc. pass through).
        size: connections open at most (lent and idle together), >= 1.
        connect_timeout_s: libpq connect timeout.
        wait_s: longest wait (seconds) for a free connection before :class:`PoolExhausted` (a
            :class:`RemoteStoreError`: through the answer path, a logged miss).

    Raises:
        ValueError: ``size`` < 1 or ``wait_s`` not > 0.
    """

    def __init__(self, url: str, *, size: int = 4, connect_timeout_s: int = 5,
                 configure: Any = None, wait_s: float = 10.0) -> None:
        try:
            import psycopg  # noqa: F401
        except ImportError as e:
            raise ImportError("the PostgreSQL semantic store needs psycopg and pgvector: "
                              "pip install 'ragcache[shared]'") from e
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"pool_size must be a whole number of connections >= 1, got {size!r}")
        if not 0 < wait_s < float("inf"):
            raise ValueError(f"the pool's wait must be a number of seconds > 0, got {wait_s!r}")
        self.url = url
        self.size = size
        self.wait_s = float(wait_s)
        self.connect_timeout_s = connect_timeout_s
        self.configure = configure
        self._idle: queue.LifoQueue = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._closed = False

    def _connect(self) -> Any:
        import psycopg

        try:
            conn = psycopg.connect(self.url, autocommit=True, connect_timeout=self.connect_timeout_s)
        except psycopg.Error as e:
            raise RemoteStoreError(f"PostgreSQL at {redact(self.url)} is unreachable ({str(e).strip()}); "
                                   "check that the server is running and the URL is right") from e
        if self.configure is not None:
            self.configure(conn)
        return conn

    def connect(self) -> Any:
        """A new connection of its own, outside the pool's count (the caller closes it).

        Raises:
            RemoteStoreError: the server cannot be reached."""
        return self._connect()

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """Lend a connection (waiting up to ``wait_s`` while ``size`` are in use); a connection that broke
        is closed instead of returned to the pool.

        Raises:
            PoolExhausted: no connection came back within ``wait_s``. RemoteStoreError: the server is gone.
            RuntimeError: the pool is closed."""
        import psycopg
        from psycopg import pq

        if self._closed:
            raise RuntimeError("this PostgreSQL semantic cache is closed")
        if not self._slots.acquire(timeout=self.wait_s):
            raise PoolExhausted(f"all {self.size} connections to PostgreSQL at {redact(self.url)} stayed in use for "
                                f"{self.wait_s:.3g} s; raise pool_size (and the server's max_connections) or lower "
                                "the concurrency")
        try:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                conn = self._connect()
            ok = False
            try:
                yield conn
                ok = True
            except psycopg.OperationalError as e:
                if not conn.broken and not conn.closed:
                    raise
                raise RemoteStoreError(f"lost the connection to PostgreSQL at {redact(self.url)} "
                                       f"({str(e).strip()}); the next call reconnects") from e
            finally:
                if (ok or not conn.broken) and not conn.closed \
                        and conn.info.transaction_status == pq.TransactionStatus.IDLE and not self._closed:
                    self._idle.put(conn)
                else:
                    conn.close()
        finally:
            self._slots.release()

    def run(self, fn: Any) -> Any:
        """``fn(conn)`` on a pooled connection, retried once on a fresh one if the connection was lost."""
        try:
            with self.connection() as conn:
                return fn(conn)
        except PoolExhausted:
            raise
        except RemoteStoreError:
            self.discard_idle()
            with self.connection() as conn:
                return fn(conn)

    def discard_idle(self) -> None:
        """Close every idle connection (after a server restart they are all dead)."""
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return

    def close(self) -> None:
        self._closed = True
        self.discard_idle()
