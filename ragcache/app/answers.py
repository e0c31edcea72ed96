"""Read and prune a persisted semantic answer cache without loading an embedder.

:func:`open_answers` opens the store the settings point at: :class:`PgAnswers` (PostgreSQL +
pgvector, ``RAGCACHE_SEMANTIC_URL``) or :class:`AnswerStore` (the embedded SQLite + FAISS folder,
``RAGCACHE_ANSWERS_DIR``); both have ``where``, ``exists``, ``list``, ``get``, ``stats``, ``remove``,
``evict`` and ``clear``.

SQLite is the embedded semantic cache's source of truth (:mod:`ragcache.semantic.stores.store`): its FAISS
snapshots are checked against SQLite's ids when a cache opens, and rows removed here are
dropped from the snapshot then. So ``ragcache cache ls|show|evict`` work on the database
directly, in one transaction each. A process that has the cache open (``ragcache serve``)
keeps serving what it loaded until it restarts.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragcache.provenance import PROVENANCE_KEY, Provenance

DB_NAME = "semantic.sqlite3"  # ragcache.semantic.stores.store.DB_NAME (not imported: that pulls in FAISS)
BUDGET_KEY = "_ragcache_answer"  # ragcache.semantic.budget.META_KEY (not imported, as above)


@dataclass(frozen=True, slots=True)
class AnswerRow:
    """One stored answer (times are Unix seconds). ``metadata`` is the entry's own (the caller's)
    metadata; where the answer came from is :attr:`provenance` (:class:`ragcache.provenance.Provenance`,
    read from this or an earlier release's keys) and how it ended under which budget is :attr:`budget`."""

    id: int
    partition: str
    namespace: str
    question: str
    answer: str
    metadata: dict
    created: float
    accessed: float
    expires: float | None
    hits: int

    @property
    def provenance(self) -> Provenance:
        return Provenance.from_metadata(self.metadata)

    @property
    def budget(self) -> dict[str, Any]:
        """``finish_reason``, ``max_tokens`` (the budget it was generated under), ``output_tokens``."""
        b = self.metadata.get(BUDGET_KEY)
        return dict(b) if isinstance(b, dict) else {"finish_reason": None, "max_tokens": None, "output_tokens": None}

    def to_dict(self, full: bool = True) -> dict[str, Any]:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["metadata"] = {k: v for k, v in self.metadata.items() if k not in (BUDGET_KEY, PROVENANCE_KEY)}
        d["provenance"] = self.provenance.to_json()
        d["budget"] = self.budget
        if not full:
            d.pop("metadata")
            d.pop("budget")
            d["answer"] = self.answer if len(self.answer) <= 80 else self.answer[:79] + "…"
        return d


class AnswerStore:
    """The answer cache directory ``path`` (``semantic.sqlite3`` + ``index/``).

    Raises nothing on a missing directory: it is an empty cache.
    """

    _COLS = ("e.id, e.partition, p.namespace, e.question, e.answer, e.metadata, e.created, e.accessed, "
             "e.expires, e.hits")

    kind = "sqlite"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.db_path = self.path / DB_NAME

    @property
    def where(self) -> str:
        """The store, as ``cache stats`` names it: the folder."""
        return str(self.path)

    @property
    def exists(self) -> bool:
        return self.db_path.is_file()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.db_path), isolation_level=None, timeout=30)
        try:
            db.execute("PRAGMA busy_timeout=30000")
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # reads the header: fails if corrupt
        except sqlite3.DatabaseError as e:
            db.close()
            raise ValueError(f"answer cache {self.db_path} cannot be read ({e}): move it aside to keep it for "
                             "recovery (or delete it; its answers are lost), or point RAGCACHE_ANSWERS_DIR at "
                             "another folder") from None
        return db

    def _rows(self, where: str = "", args: tuple = (), limit: int | None = None) -> list[AnswerRow]:
        if not self.exists:
            return []
        sql = f"SELECT {self._COLS} FROM entries e JOIN partitions p ON p.key = e.partition {where} " \
              "ORDER BY e.accessed DESC, e.id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._connect() as db:
            return [AnswerRow(r[0], r[1], r[2], r[3], r[4], json.loads(r[5]), r[6], r[7], r[8], r[9])
                    for r in db.execute(sql, args)]

    def list(self, *, namespace: str | None = None, limit: int | None = None) -> list[AnswerRow]:
        """Stored answers, most recently used first."""
        if namespace is None:
            return self._rows(limit=limit)
        return self._rows("WHERE p.namespace = ?", (namespace,), limit)

    def get(self, entry_id: int) -> AnswerRow | None:
        """The stored answer with this id, or ``None`` (also for an id no SQLite row can have)."""
        entry_id = int(entry_id)
        if not -(1 << 63) <= entry_id < 1 << 63:  # SQLite INTEGER range: sqlite3 would raise OverflowError
            return None
        rows = self._rows("WHERE e.id = ?", (entry_id,))
        return rows[0] if rows else None

    def stats(self) -> dict[str, Any]:
        """Entries, partitions, namespaces, hits of the stored entries, bytes on disk, oldest and newest entry,
        and the lookups of every process since the folder was created: ``lookups`` = ``lookup_hits`` +
        ``lookup_misses``, ``hit_rate`` (None before the first lookup)."""
        out: dict[str, Any] = {"store": self.kind, "where": self.where, "path": str(self.path), "entries": 0, "partitions": 0, "namespaces": {}, "hits": 0,
                               "bytes": _dir_bytes(self.path), "oldest": None, "newest": None,
                               "lookups": 0, "lookup_hits": 0, "lookup_misses": 0, "hit_rate": None}
        if not self.exists:
            return out
        with self._connect() as db:
            n, hits, lo, hi = db.execute("SELECT COUNT(*), COALESCE(SUM(hits), 0), MIN(created), MAX(created) "
                                         "FROM entries").fetchone()
            out.update(entries=n, hits=hits, oldest=lo, newest=hi)
            out["partitions"] = db.execute("SELECT COUNT(*) FROM partitions").fetchone()[0]
            out["namespaces"] = dict(db.execute(
                "SELECT p.namespace, COUNT(e.id) FROM partitions p LEFT JOIN entries e ON e.partition = p.key "
                "GROUP BY p.namespace").fetchall())
            if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='lookups'").fetchone():
                h, m = db.execute("SELECT COALESCE(SUM(hits), 0), COALESCE(SUM(misses), 0) FROM lookups").fetchone()
                out.update(lookups=h + m, lookup_hits=h, lookup_misses=m, hit_rate=h / (h + m) if h + m else None)
        return out

    def remove(self, ids: list[int]) -> int:
        """Delete entries by id (and partitions left empty). Returns the number removed."""
        if not ids or not self.exists:
            return 0
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                n = sum(db.execute("DELETE FROM entries WHERE id = ?", (int(i),)).rowcount for i in ids)
                dropped = self._drop_empty(db)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        for k in dropped:  # snapshots of partitions that no longer exist
            (self.path / "index" / f"{k}.faiss").unlink(missing_ok=True)
        return n

    def remove_question(self, partition: str, question: str) -> int:
        """Delete the stored answers of exactly ``question`` in ``partition`` (a refresh)."""
        rows = self._rows("WHERE e.partition = ? AND e.question = ?", (partition, question))
        return self.remove([r.id for r in rows])

    def evict(self, *, older_than_s: float | None = None, keep: int | None = None) -> int:
        """Delete entries not used for ``older_than_s`` seconds and/or all but the ``keep`` most
        recently used. Returns the number removed.

        Raises:
            ValueError: neither criterion given, or a negative (or NaN) one.
        """
        return self.remove(_victims(self._rows(), older_than_s, keep))

    def clear(self) -> int:
        """Delete the folder (every answer, snapshot and lookup count). Returns the bytes freed."""
        import shutil

        n = _dir_bytes(self.path)
        shutil.rmtree(self.path, ignore_errors=True)
        return n

    @staticmethod
    def _drop_empty(db: sqlite3.Connection) -> list[str]:
        empty = [k for (k,) in db.execute(
            "SELECT key FROM partitions WHERE key NOT IN (SELECT DISTINCT partition FROM entries)")]
        db.executemany("DELETE FROM partitions WHERE key = ?", [(k,) for k in empty])
        return empty


def _victims(rows: list[AnswerRow], older_than_s: float | None, keep: int | None) -> list[int]:
    """Ids of ``rows`` (most recently used first) unused for ``older_than_s`` seconds or past the first ``keep``.

    Raises:
        ValueError: neither criterion given, or a negative (or NaN) one.
    """
    if older_than_s is None and keep is None:
        raise ValueError("give --older-than SECONDS and/or --keep N")
    if (older_than_s is not None and not older_than_s >= 0) or (keep is not None and keep < 0):  # NaN too
        raise ValueError("--older-than and --keep must be >= 0")
    victims = set()
    if older_than_s is not None:
        cut = time.time() - older_than_s
        victims |= {r.id for r in rows if r.accessed < cut}
    if keep is not None:
        victims |= {r.id for r in rows[keep:]}
    return sorted(victims)


class PgAnswers:
    """The answers of a PostgreSQL + pgvector semantic cache (``RAGCACHE_SEMANTIC_URL``), read and
    pruned in SQL (no embedder, no migration: a schema not created yet is an empty cache). Every
    process sharing the database sees a removal on its next lookup.

    Args:
        url: ``postgresql://...``. schema: the cache's PostgreSQL schema (default ``ragcache``).

    Raises (on use):
        RemoteStoreError: the server cannot be reached. ImportError: ``psycopg`` missing.
    """

    kind = "postgresql"
    _COLS = ("id, partition, namespace, question, answer, metadata, extract(epoch from created), "
             "extract(epoch from accessed), extract(epoch from expires), hits")

    def __init__(self, url: str, *, schema: str = "ragcache") -> None:
        from ragcache.semantic.stores.pg_schema import check_identifier

        self.url, self.schema = url, check_identifier(schema)

    @property
    def where(self) -> str:
        """The store, as ``cache stats`` names it: the URL without its password, and the schema."""
        from ragcache.remote import redact

        return f"{redact(self.url)} (schema {self.schema})"

    def _run(self, fn: Any) -> Any:
        from ragcache.semantic.stores.pg_schema import PgPool

        pool = PgPool(self.url, size=1)
        try:
            return pool.run(fn)
        finally:
            pool.close()

    def _has(self, conn: Any, table: str) -> bool:
        return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{self.schema}.{table}",)).fetchone()[0]

    @property
    def exists(self) -> bool:
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
        """Stored answers, most recently used first."""
        if namespace is None:
            return self._rows(limit=limit)
        return self._rows("WHERE namespace = %s", (namespace,), limit)

    def get(self, entry_id: int) -> AnswerRow | None:
        entry_id = int(entry_id)
        if not -(1 << 63) <= entry_id < 1 << 63:  # bigint range
            return None
        rows = self._rows("WHERE id = %s", (entry_id,))
        return rows[0] if rows else None

    def stats(self) -> dict[str, Any]:
        """As :meth:`AnswerStore.stats`; ``bytes`` is the schema's tables and indexes on the server."""
        out: dict[str, Any] = {"store": self.kind, "where": self.where, "path": None, "entries": 0, "partitions": 0,
                               "namespaces": {}, "hits": 0, "bytes": 0, "oldest": None, "newest": None,
                               "lookups": 0, "lookup_hits": 0, "lookup_misses": 0, "hit_rate": None}
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
                h, m = int(h), int(m)
                out.update(lookups=h + m, lookup_hits=h, lookup_misses=m, hit_rate=h / (h + m) if h + m else None)
        self._run(run)
        return out

    def remove(self, ids: list[int]) -> int:
        if not ids:
            return 0
        sql = f"DELETE FROM {self.schema}.entries WHERE id = ANY(%s)"
        return int(self._run(lambda c: c.execute(sql, ([int(i) for i in ids],)).rowcount if self._has(c, "entries")
                             else 0))

    def remove_question(self, partition: str, question: str) -> int:
        rows = self._rows("WHERE partition = %s AND question = %s", (partition, question))
        return self.remove([r.id for r in rows])

    def evict(self, *, older_than_s: float | None = None, keep: int | None = None) -> int:
        """As :meth:`AnswerStore.evict`."""
        return self.remove(_victims(self._rows(), older_than_s, keep))

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


def open_answers(cfg: Any) -> AnswerStore | PgAnswers:
    """The answer store the settings point at: PostgreSQL when ``cfg.semantic_url`` is a
    ``postgresql://`` URL, else the folder it names (``file://DIR`` or a path), else
    ``cfg.answers_dir``: where ``ragcache ask`` and the adapters keep answers.

    Raises:
        ValueError: ``cfg.semantic_url`` has a scheme :data:`ragcache.config.ANSWER_STORES` does not list.
    """
    from ragcache.config import answer_store_kind

    url = cfg.semantic_url
    if not url:
        return AnswerStore(cfg.answers_dir)
    if answer_store_kind(url, "RAGCACHE_SEMANTIC_URL").folder:
        return AnswerStore(url.removeprefix("file://"))
    return PgAnswers(url)


def _dir_bytes(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


__all__ = ["AnswerRow", "AnswerStore", "PgAnswers", "open_answers"]
