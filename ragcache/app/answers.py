"""Read and prune a persisted semantic answer cache without loading an embedder.

SQLite is the semantic cache's source of truth (:mod:`ragcache.semantic.stores.store`): its FAISS
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
BUDGET_KEY = "_ragcache_answer"  # ragcache.semantic.decision.budget.META_KEY (not imported, as above)


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

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.db_path = self.path / DB_NAME

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
        out: dict[str, Any] = {"path": str(self.path), "entries": 0, "partitions": 0, "namespaces": {}, "hits": 0,
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
        if older_than_s is None and keep is None:
            raise ValueError("give --older-than SECONDS and/or --keep N")
        if (older_than_s is not None and not older_than_s >= 0) or (keep is not None and keep < 0):  # NaN too
            raise ValueError("--older-than and --keep must be >= 0")
        rows = self._rows()
        victims = set()
        if older_than_s is not None:
            cut = time.time() - older_than_s
            victims |= {r.id for r in rows if r.accessed < cut}
        if keep is not None:
            victims |= {r.id for r in rows[keep:]}
        return self.remove(sorted(victims))

    @staticmethod
    def _drop_empty(db: sqlite3.Connection) -> list[str]:
        empty = [k for (k,) in db.execute(
            "SELECT key FROM partitions WHERE key NOT IN (SELECT DISTINCT partition FROM entries)")]
        db.executemany("DELETE FROM partitions WHERE key = ?", [(k,) for k in empty])
        return empty


def _dir_bytes(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


__all__ = ["AnswerRow", "AnswerStore"]
