"""The embedded answer store's admin view: :class:`FolderAnswers` (an :class:`~ragcache.semantic.stores.admin.AnswerAdmin`).

SQLite is the embedded semantic cache's source of truth (:mod:`ragcache.semantic.stores.store`): its FAISS
snapshots are checked against SQLite's ids when a cache opens, and rows removed here are dropped from the
snapshot then. So listing, reading and pruning work on the database directly, one transaction each, with no
embedder and no FAISS index loaded.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from ragcache.semantic.stores.admin import AnswerRow, empty_stats, eviction_victims, lookup_counts
from ragcache.semantic.stores.store import DB_NAME, INDEX_DIR, CorruptAnswerDBError


class FolderAnswers:
    """The answers of the embedded cache folder ``path`` (``semantic.sqlite3`` + ``index/``), the
    :class:`~ragcache.semantic.stores.admin.AnswerAdmin` of
    :class:`~ragcache.semantic.stores.faiss_store.FaissAnswerStore`. A missing folder is an empty cache;
    nothing is created until a cache opens it.

    Raises (on use):
        ValueError (:class:`~ragcache.semantic.stores.store.CorruptAnswerDBError`): the database cannot be read.
    """

    kind: ClassVar[str] = "sqlite"
    _COLS = ("e.id, e.partition, p.namespace, e.question, e.answer, e.metadata, e.created, e.accessed, "
             "e.expires, e.hits")

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.db_path = self.path / DB_NAME

    @property
    def where(self) -> str:
        """The store, as ``cache stats`` names it: the folder."""
        return str(self.path)

    @property
    def exists(self) -> bool:
        """Whether the folder holds a database."""
        return self.db_path.is_file()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.db_path), isolation_level=None, timeout=30)
        try:
            db.execute("PRAGMA busy_timeout=30000")
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # reads the header: fails if corrupt
        except sqlite3.DatabaseError as e:
            db.close()
            raise CorruptAnswerDBError(str(self.db_path), e) from None
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
        """Stored answers (of one ``namespace``; at most ``limit``), most recently used first."""
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
        """:meth:`AnswerAdmin.stats <ragcache.semantic.stores.admin.AnswerAdmin.stats>`; ``bytes`` is the
        folder's files, ``path`` the folder."""
        out = empty_stats(self.kind, self.where, str(self.path), _dir_bytes(self.path))
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
                out.update(lookup_counts(h, m))
        return out

    def remove(self, ids: Sequence[int]) -> int:
        """Delete entries by id (and partitions left empty, with their FAISS snapshots). Returns the number removed."""
        if not ids or not self.exists:
            return 0
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                n = sum(db.execute("DELETE FROM entries WHERE id = ?", (int(i),)).rowcount for i in ids)
                dropped = _drop_empty(db)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        for k in dropped:  # snapshots of partitions that no longer exist
            (self.path / INDEX_DIR / f"{k}.faiss").unlink(missing_ok=True)
        return n

    def evict(self, *, older_than_s: float | None = None, keep: int | None = None) -> int:
        """Delete entries not used for ``older_than_s`` seconds and/or all but the ``keep`` most
        recently used (:func:`~ragcache.semantic.stores.admin.eviction_victims`). Returns the number removed.

        Raises:
            ValueError: neither criterion given, or a negative (or NaN) one.
        """
        return self.remove(eviction_victims(self._rows(), older_than_s, keep))

    def clear(self) -> int:
        """Delete the folder (every answer, snapshot and lookup count). Returns the bytes freed."""
        n = _dir_bytes(self.path)
        shutil.rmtree(self.path, ignore_errors=True)
        return n


def _drop_empty(db: sqlite3.Connection) -> list[str]:
    """Delete the partitions no entry is left in; their keys."""
    empty = [k for (k,) in db.execute(
        "SELECT key FROM partitions WHERE key NOT IN (SELECT DISTINCT partition FROM entries)")]
    db.executemany("DELETE FROM partitions WHERE key = ?", [(k,) for k in empty])
    return empty


def _dir_bytes(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


__all__ = ["FolderAnswers"]
