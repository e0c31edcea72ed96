"""The PostgreSQL answer store's admin view: :class:`PgAnswers` (an :class:`~ragcache.semantic.stores.admin.AnswerAdmin`).

Reads and prunes the tables of :class:`~ragcache.semantic.stores.pg_store.PgAnswerStore` in SQL, with no
embedder and no migration (a schema not created yet is an empty cache), over one connection per call.
Every process sharing the database sees a removal at its next lookup.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from ragcache.semantic.stores.admin import AnswerRow, empty_stats, eviction_victims, lookup_counts
from ragcache.semantic.stores.pg_schema import PgPool, check_identifier


class PgAnswers:
    """The answers of a PostgreSQL + pgvector semantic cache (``RAGCACHE_SEMANTIC_URL``), the
    :class:`~ragcache.semantic.stores.admin.AnswerAdmin` of :class:`~ragcache.semantic.stores.pg_store.PgAnswerStore`.

    Args:
        url: ``postgresql://...``. schema: the cache's PostgreSQL schema (default ``ragcache``).

    Raises:
        ValueError: a schema name that is not a plain identifier.
        RemoteStoreError (on use): the server cannot be reached. ImportError (on use): ``psycopg`` missing.
    """

    kind: ClassVar[str] = "postgresql"
    _COLS = ("id, partition, namespace, question, answer, metadata, extract(epoch from created), "
             "extract(epoch from accessed), extract(epoch from expires), hits")

    def __init__(self, url: str, *, schema: str = "ragcache") -> None:
        self.url, self.schema = url, check_identifier(schema)

    @property
    def where(self) -> str:
        """The store, as ``cache stats`` names it: the URL without its password, and the schema."""
        from ragcache.remote import redact

        return f"{redact(self.url)} (schema {self.schema})"

    def _run(self, fn: Any) -> Any:
        pool = PgPool(self.url, size=1)
        try:
            return pool.run(fn)
        finally:
            pool.close()

    def _has(self, conn: Any, table: str) -> bool:
        return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{self.schema}.{table}",)).fetchone()[0]

    @property
    def exists(self) -> bool:
        """Whether the schema holds the cache's tables."""
        return bool(self._run(lambda c: self._has(c, "entries")))

    def _rows(self, where: str = "", args: tuple = (), limit: int | None = None) -> list[AnswerRow]:
        sql = f"SELECT {self._COLS} FROM {self.schema}.entries {where} ORDER BY accessed DESC, id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"

        def run(c: Any) -> list:
            return c.execute(sql, args).fetchall() if self._has(c, "entries") else []
        return [AnswerRow(int(r[0]), r[1], r[2], r[3], r[4], r[5] if isinstance(r[5], dict) else json.loads(r[5]),
                          float(r[6]), float(r[7]), None if r[8] is None else float(r[8]), int(r[9]))
                for r in self._run(run)]

    def list(self, *, namespace: str | None = None, limit: int | None = None) -> list[AnswerRow]:
        """Stored answers (of one ``namespace``; at most ``limit``), most recently used first."""
        if namespace is None:
            return self._rows(limit=limit)
        return self._rows("WHERE namespace = %s", (namespace,), limit)

    def get(self, entry_id: int) -> AnswerRow | None:
        """The stored answer with this id, or ``None`` (also for an id no ``bigint`` can hold)."""
        entry_id = int(entry_id)
        if not -(1 << 63) <= entry_id < 1 << 63:  # bigint range
            return None
        rows = self._rows("WHERE id = %s", (entry_id,))
        return rows[0] if rows else None

    def stats(self) -> dict[str, Any]:
        """:meth:`AnswerAdmin.stats <ragcache.semantic.stores.admin.AnswerAdmin.stats>`; ``bytes`` is the
        schema's tables and indexes on the server, ``path`` is ``None``."""
        out = empty_stats(self.kind, self.where, None)
        s = self.schema

        def run(c: Any) -> None:
            if not self._has(c, "entries"):
                return
            n, hits, lo, hi, parts = c.execute(
                f"SELECT count(*), coalesce(sum(hits), 0), extract(epoch from min(created)), "
                f"extract(epoch from max(created)), count(DISTINCT partition) FROM {s}.entries").fetchone()
            out.update(entries=int(n), hits=int(hits), oldest=None if lo is None else float(lo),
                       newest=None if hi is None else float(hi), partitions=int(parts))
            out["namespaces"] = {k: int(v) for k, v in c.execute(
                f"SELECT namespace, count(*) FROM {s}.entries GROUP BY namespace ORDER BY namespace").fetchall()}
            out["bytes"] = int(c.execute("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                                         "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
                                         "AND c.relkind = 'r'", (s,)).fetchone()[0])
            if self._has(c, "lookups"):
                h, m = c.execute(f"SELECT coalesce(sum(hits), 0), coalesce(sum(misses), 0) FROM {s}.lookups").fetchone()
                out.update(lookup_counts(int(h), int(m)))
        self._run(run)
        return out

    def remove(self, ids: Sequence[int]) -> int:
        """Delete entries by id. Returns the number removed."""
        if not ids:
            return 0
        sql = f"DELETE FROM {self.schema}.entries WHERE id = ANY(%s)"
        return int(self._run(lambda c: c.execute(sql, ([int(i) for i in ids],)).rowcount if self._has(c, "entries")
                             else 0))

    def evict(self, *, older_than_s: float | None = None, keep: int | None = None) -> int:
        """As :meth:`FolderAnswers.evict <ragcache.semantic.stores.folder_admin.FolderAnswers.evict>`.

        Raises:
            ValueError: neither criterion given, or a negative (or NaN) one."""
        return self.remove(eviction_victims(self._rows(), older_than_s, keep))

    def clear(self) -> int:
        """Delete every answer and the lookup counts (the schema, its embedder record and indexes stay).
        Returns the bytes the tables held before."""
        n = self.stats()["bytes"]

        def run(c: Any) -> None:
            for table in ("entries", "lookups"):
                if self._has(c, table):
                    c.execute(f"DELETE FROM {self.schema}.{table}")
        self._run(run)
        return n


__all__ = ["PgAnswers"]
