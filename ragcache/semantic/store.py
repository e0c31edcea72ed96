"""Durable state of a semantic cache: one SQLite database plus FAISS index snapshots.

Layout of a cache directory::

    semantic.sqlite3         entries (question, answer, partition, vector, timestamps), partitions, meta
    index/<partition>.faiss  FAISS snapshot of one partition (written atomically: temp file + os.replace)

SQLite is the source of truth: every store/remove commits a transaction (WAL
journal), so a killed process loses nothing it committed. Index snapshots are
written on ``flush()``/``close()`` and every ``autosave_every`` writes; on open a
snapshot is checked against SQLite's ids and brought up to date, and a missing
or corrupt snapshot is rebuilt from the vectors in SQLite. Nothing is pickled.
"""

from __future__ import annotations

from ragcache.atomic import atomic_write_bytes

import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DB_NAME = "semantic.sqlite3"
INDEX_DIR = "index"
SCHEMA_VERSION = "2"  # 2: embed_form vectors, over-length sub-partitions, answer budget in metadata

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS partitions (
    key TEXT PRIMARY KEY, namespace TEXT NOT NULL, docs TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    partition TEXT NOT NULL REFERENCES partitions(key),
    question TEXT NOT NULL,
    answer TEXT NOT NULL,
    metadata TEXT NOT NULL,
    vector BLOB NOT NULL,
    created REAL NOT NULL,
    accessed REAL NOT NULL,
    expires REAL,
    hits INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS entries_partition ON entries(partition);
CREATE INDEX IF NOT EXISTS partitions_namespace ON partitions(namespace);
"""


@dataclass(slots=True)
class EntryRow:
    """One cached answer as stored. ``vector`` is float32 ``[dim]``; times are Unix seconds."""

    id: int
    partition: str
    question: str
    answer: str
    metadata: dict
    vector: np.ndarray
    created: float
    accessed: float
    expires: float | None
    hits: int


class CorruptAnswerDBError(ValueError):
    """The answer cache's SQLite file cannot be read (not a database, truncated, locked schema)."""

    def __init__(self, path: str, cause: BaseException) -> None:
        super().__init__(f"answer cache {path} cannot be read ({cause}): move it aside to keep it for "
                         "recovery (or delete it; its answers are lost), or point RAGCACHE_ANSWERS_DIR at "
                         "another folder")
        self.path = path


class SQLiteStore:
    """SQLite side of a semantic cache (``path=None``: an in-memory database).

    All methods must be called under the cache's write lock (or before it is shared).
    """

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            target = str(directory / DB_NAME)
        else:
            target = ":memory:"
        self._db = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        try:
            if directory is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise CorruptAnswerDBError(target, e) from None

    # ----------------------------------------------------------------- meta
    def get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, items: dict[str, str]) -> None:
        with self.transaction():
            self._db.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", list(items.items()))

    # ----------------------------------------------------------------- transactions
    def transaction(self) -> _Tx:
        return _Tx(self._db)

    # ----------------------------------------------------------------- writes (inside transaction())
    def put_partition(self, key: str, namespace: str, docs: Iterable[str]) -> None:
        self._db.execute("INSERT OR IGNORE INTO partitions(key, namespace, docs) VALUES (?, ?, ?)",
                         (key, namespace, json.dumps(list(docs))))

    def insert(self, partition: str, question: str, answer: str, metadata: dict, vector: np.ndarray,
               created: float, expires: float | None) -> int:
        cur = self._db.execute(
            "INSERT INTO entries(partition, question, answer, metadata, vector, created, accessed, expires) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (partition, question, answer, json.dumps(metadata, ensure_ascii=False),
             np.ascontiguousarray(vector, dtype=np.float32).tobytes(), created, created, expires),
        )
        return int(cur.lastrowid)

    def delete(self, ids: Iterable[int]) -> None:
        self._db.executemany("DELETE FROM entries WHERE id=?", [(int(i),) for i in ids])

    def delete_partitions(self, keys: Iterable[str]) -> None:
        keys = [(k,) for k in keys]
        self._db.executemany("DELETE FROM entries WHERE partition=?", keys)
        self._db.executemany("DELETE FROM partitions WHERE key=?", keys)

    def touch(self, items: Iterable[tuple[int, float, int]]) -> None:
        """Persist (id, last access time, hit count) triples (LRU order survives reopen)."""
        self._db.executemany("UPDATE entries SET accessed=?, hits=? WHERE id=?",
                             [(t, h, i) for i, t, h in items])

    # ----------------------------------------------------------------- reads
    def partitions(self) -> list[tuple[str, str, list[str]]]:
        return [(k, ns, json.loads(d)) for k, ns, d in
                self._db.execute("SELECT key, namespace, docs FROM partitions ORDER BY key")]

    def entries(self, dim: int) -> Iterator[EntryRow]:
        for row in self._db.execute(
            "SELECT id, partition, question, answer, metadata, vector, created, accessed, expires, hits "
            "FROM entries ORDER BY accessed, id"
        ):
            vec = np.frombuffer(row[5], dtype=np.float32)
            if vec.shape[0] != dim:
                raise ValueError(f"entry {row[0]} has a vector of width {vec.shape[0]}, expected {dim}")
            yield EntryRow(row[0], row[1], row[2], row[3], json.loads(row[4]), vec, row[6], row[7], row[8], row[9])

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    # ----------------------------------------------------------------- index snapshots
    def index_path(self, partition: str) -> Path | None:
        return None if self.directory is None else self.directory / INDEX_DIR / f"{partition}.faiss"

    def write_index(self, partition: str, data: bytes) -> None:
        p = self.index_path(partition)
        if p is not None:
            atomic_write_bytes(p, data)

    def read_index(self, partition: str) -> bytes | None:
        p = self.index_path(partition)
        if p is None or not p.exists():
            return None
        return p.read_bytes()

    def drop_index(self, partition: str) -> None:
        p = self.index_path(partition)
        if p is not None:
            try:
                p.unlink()
            except FileNotFoundError:
                pass

    def close(self) -> None:
        self._db.close()


class _Tx:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error) on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> sqlite3.Connection:
        self._db.execute("BEGIN IMMEDIATE")
        return self._db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._db.execute("ROLLBACK" if exc_type else "COMMIT")
