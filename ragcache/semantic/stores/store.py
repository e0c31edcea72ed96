"""Durable state of a semantic cache: one SQLite database plus FAISS index snapshots.

Layout of a cache directory::

    semantic.sqlite3         entries (question, answer, partition, vector, timestamps, state),
                             partitions, meta, changes (the change log other processes replay)
    index/<partition>.faiss  FAISS snapshot of one partition (written atomically: temp file + os.replace)

SQLite is the source of truth: every store/remove commits a transaction (WAL
journal), so a killed process loses nothing it committed. Index snapshots are
written on ``flush()``/``close()`` and every ``autosave_every`` writes; on open a
snapshot is checked against SQLite's ids and brought up to date, and a missing
or corrupt snapshot is rebuilt from the vectors in SQLite. Nothing is pickled.

Every write also appends to ``changes`` (``put`` id, ``del`` id, ``drop`` partition) in the same
transaction; a process that has the folder open notices another process's commit through
``PRAGMA data_version`` and replays the log from the last sequence number it applied, so an
``invalidate`` in one process stops every other process from serving at its next lookup.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragcache.atomic import atomic_write_bytes

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
    hits INTEGER NOT NULL DEFAULT 0,
    state TEXT);
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT NOT NULL, entry INTEGER, partition TEXT);
CREATE TABLE IF NOT EXISTS lookups (
    name TEXT PRIMARY KEY, hits INTEGER NOT NULL DEFAULT 0, misses INTEGER NOT NULL DEFAULT 0);
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
    state: dict | None = None


CHANGE_LOG_KEEP = 100_000
"""Change-log rows kept when it is pruned; a process further behind reloads everything."""

_COLS = "id, partition, question, answer, metadata, vector, created, accessed, expires, hits, state"


def _row(row: tuple, dim: int) -> EntryRow:
    vec = np.frombuffer(row[5], dtype=np.float32)
    if vec.shape[0] != dim:
        raise ValueError(f"entry {row[0]} has a vector of width {vec.shape[0]}, expected {dim}")
    return EntryRow(row[0], row[1], row[2], row[3], json.loads(row[4]), vec, row[6], row[7], row[8], row[9],
                    None if row[10] is None else json.loads(row[10]))


OPEN_LOCK_S = 60.0
"""Seconds a process waits for another one creating the same answer cache folder."""


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

    def __init__(self, directory: Path | None, *, read_only: bool = False) -> None:
        self.directory = directory
        if directory is not None and not read_only:
            directory.mkdir(parents=True, exist_ok=True)
            target = str(directory / DB_NAME)
        else:
            target = ":memory:"
        self._db = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        if read_only and directory is not None:  # a read-only folder: work on an in-memory copy, write nothing there
            self._copy_read_only(directory / DB_NAME)
            return
        try:
            if directory is None:
                self._migrate()
            else:
                # Processes opening one new folder at once: switching a new file to WAL and creating the
                # schema are done by one of them at a time (otherwise one fails with "database is locked").
                from filelock import FileLock, Timeout

                try:
                    with FileLock(str(directory / f"{DB_NAME}.open.lock"), timeout=OPEN_LOCK_S):
                        self._db.execute("PRAGMA journal_mode=WAL")
                        self._db.execute("PRAGMA synchronous=NORMAL")
                        self._migrate()
                except Timeout:
                    self._db.close()
                    raise TimeoutError(f"answer cache {target} stayed locked by another process opening it for "
                                       f"{OPEN_LOCK_S:.0f} s; retry when it is done") from None
        except sqlite3.OperationalError as e:
            self._db.close()
            if "locked" in str(e) or "busy" in str(e):
                raise TimeoutError(f"answer cache {target} is locked by another process ({e}); retry when it "
                                   "is done") from None
            raise CorruptAnswerDBError(target, e) from None
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise CorruptAnswerDBError(target, e) from None

    def _copy_read_only(self, path: Path) -> None:
        """Fill this (in-memory) database with a copy of the SQLite file ``path`` on a read-only folder,
        opened ``immutable`` (no lock or journal file is made; the file must not change meanwhile: on a
        read-only file system it cannot). A WAL database closed by its last process holds every commit.

        Raises:
            CorruptAnswerDBError: the file cannot be read.
        """
        from urllib.parse import quote

        try:
            src = sqlite3.connect(f"file:{quote(str(path))}?mode=ro&immutable=1", uri=True, check_same_thread=False)
            try:
                src.backup(self._db)
            finally:
                src.close()
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise CorruptAnswerDBError(str(path), e) from None

    def _migrate(self) -> None:
        """Create the schema; add the ``state`` column to databases written before it existed."""
        have = {r[1] for r in self._db.execute("PRAGMA table_info(entries)")}
        if have and "state" not in have:
            self._db.execute("ALTER TABLE entries ADD COLUMN state TEXT")
        self._db.executescript(_SCHEMA)

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
        i = int(cur.lastrowid)
        self._db.execute("INSERT INTO changes(op, entry, partition) VALUES ('put', ?, ?)", (i, partition))
        return i

    def delete(self, ids: Iterable[int]) -> None:
        rows = [(int(i),) for i in ids]
        self._db.executemany("DELETE FROM entries WHERE id=?", rows)
        self._db.executemany("INSERT INTO changes(op, entry) VALUES ('del', ?)", rows)

    def delete_partitions(self, keys: Iterable[str]) -> int:
        """Delete partitions and their entries; returns the entries deleted."""
        keys = [(k,) for k in keys]
        n = sum(int(self._db.execute("SELECT COUNT(*) FROM entries WHERE partition=?", k).fetchone()[0])
                for k in keys)
        self._db.executemany("DELETE FROM entries WHERE partition=?", keys)
        self._db.executemany("DELETE FROM partitions WHERE key=?", keys)
        self._db.executemany("INSERT INTO changes(op, partition) VALUES ('drop', ?)", keys)
        return n

    def set_vectors(self, items: Iterable[tuple[int, np.ndarray]]) -> None:
        """Replace stored vectors (re-embedding with another embedder)."""
        self._db.executemany("UPDATE entries SET vector=? WHERE id=?",
                             [(np.ascontiguousarray(v, dtype=np.float32).tobytes(), int(i)) for i, v in items])

    def drop_empty_partitions(self, keys: Iterable[str]) -> None:
        """Delete partition rows that hold no entry."""
        self._db.executemany("DELETE FROM partitions WHERE key=? AND NOT EXISTS "
                             "(SELECT 1 FROM entries WHERE partition=?)", [(k, k) for k in keys])

    def set_state(self, entry_id: int, state: dict | None) -> bool:
        """Replace one entry's decision state (JSON); False when the entry does not exist."""
        js = None if state is None else json.dumps(state, ensure_ascii=False, allow_nan=False)
        return self._db.execute("UPDATE entries SET state=? WHERE id=?", (js, int(entry_id))).rowcount > 0

    def touch(self, items: Iterable[tuple[int, float, int]]) -> None:
        """Persist (id, last access time, hit count) triples (LRU order survives reopen)."""
        self._db.executemany("UPDATE entries SET accessed=?, hits=? WHERE id=?",
                             [(t, h, i) for i, t, h in items])

    def add_lookups(self, hits: int, misses: int) -> None:
        """Add lookup outcomes to the folder's totals, kept across processes (call inside a transaction)."""
        if hits or misses:
            self._db.execute("INSERT INTO lookups(name, hits, misses) VALUES ('all', ?, ?) ON CONFLICT(name) "
                             "DO UPDATE SET hits = hits + excluded.hits, misses = misses + excluded.misses",
                             (int(hits), int(misses)))

    # ----------------------------------------------------------------- reads
    def partitions(self) -> list[tuple[str, str, list[str]]]:
        return [(k, ns, json.loads(d)) for k, ns, d in
                self._db.execute("SELECT key, namespace, docs FROM partitions ORDER BY key")]

    def keys(self, dim: int) -> Iterator[tuple[int, str, str, np.ndarray, float, float | None, int, int]]:
        """``(id, partition, question, vector [dim], created, expires, hits, nbytes)`` of every entry, least
        recently used first: what an open store holds in memory (``nbytes``: bytes of the stored answer and
        metadata, which are not read)."""
        for i, part, q, vec, created, expires, hits, n in self._db.execute(
                "SELECT id, partition, question, vector, created, expires, hits, "
                "length(CAST(answer AS BLOB)) + length(CAST(metadata AS BLOB)) FROM entries ORDER BY accessed, id"):
            v = np.frombuffer(vec, dtype=np.float32)
            if v.shape[0] != dim:
                raise ValueError(f"entry {i} has a vector of width {v.shape[0]}, expected {dim}")
            yield i, part, q, v, created, expires, hits, int(n)

    def answers(self, ids: list[int]) -> dict[int, tuple[str, dict, dict | None]]:
        """``(answer, metadata, state)`` of each id (absent ids are left out): what a lookup reads for its
        candidates."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return {i: (a, json.loads(m), None if st is None else json.loads(st)) for i, a, m, st in
                self._db.execute(f"SELECT id, answer, metadata, state FROM entries WHERE id IN ({marks})",
                                 [int(i) for i in ids])}

    def entries(self, dim: int) -> Iterator[EntryRow]:
        for row in self._db.execute(f"SELECT {_COLS} FROM entries ORDER BY accessed, id"):
            yield _row(row, dim)

    def questions(self) -> list[tuple[int, str]]:
        return list(self._db.execute("SELECT id, question FROM entries ORDER BY id"))

    def entry(self, entry_id: int, dim: int) -> EntryRow | None:
        row = self._db.execute(f"SELECT {_COLS} FROM entries WHERE id=?", (int(entry_id),)).fetchone()
        return None if row is None else _row(row, dim)

    def partition(self, key: str) -> tuple[str, str, list[str]] | None:
        row = self._db.execute("SELECT key, namespace, docs FROM partitions WHERE key=?", (key,)).fetchone()
        return None if row is None else (row[0], row[1], json.loads(row[2]))

    def states(self, ids: list[int]) -> dict[int, dict | None]:
        """Decision state of each id (absent ids are left out)."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        return {i: None if s is None else json.loads(s) for i, s in
                self._db.execute(f"SELECT id, state FROM entries WHERE id IN ({marks})", [int(i) for i in ids])}

    def partitions_with(self, docs: Iterable[str] = (), namespace: str | None = None,
                        every: bool = False) -> list[str]:
        """Keys of the partitions built on any of ``docs``, or of ``namespace``, or all (``every``)."""
        if every:
            return [r[0] for r in self._db.execute("SELECT key FROM partitions")]
        if namespace is not None:
            return [r[0] for r in self._db.execute("SELECT key FROM partitions WHERE namespace=?", (namespace,))]
        docs = list(docs)
        marks = ",".join("?" * len(docs))
        return [r[0] for r in self._db.execute(
            f"SELECT DISTINCT p.key FROM partitions p, json_each(p.docs) d WHERE d.value IN ({marks})", docs)]

    def expired(self, now: float) -> list[int]:
        return [r[0] for r in self._db.execute("SELECT id FROM entries WHERE expires IS NOT NULL AND expires <= ?",
                                               (now,))]

    # ----------------------------------------------------------------- change log (other processes' writes)
    def data_version(self) -> int:
        """Changes when another connection commits (``PRAGMA data_version``)."""
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def last_change(self) -> int:
        return int(self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM changes").fetchone()[0])

    def changes_since(self, seq: int) -> list[tuple[int, str, int | None, str | None]]:
        """(seq, op, entry, partition) rows after ``seq``, in order."""
        return list(self._db.execute("SELECT seq, op, entry, partition FROM changes WHERE seq > ? ORDER BY seq",
                                     (seq,)))

    def prune_changes(self, keep: int = CHANGE_LOG_KEEP) -> None:
        """Drop change-log rows older than the last ``keep`` (call inside a transaction)."""
        self._db.execute("DELETE FROM changes WHERE seq <= (SELECT MAX(seq) FROM changes) - ?", (keep,))

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
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error) on an autocommit connection.
    Re-entrant: inside an open transaction it joins it (the outermost one commits or rolls back)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._outer = False

    def __enter__(self) -> sqlite3.Connection:
        self._outer = not self._db.in_transaction
        if self._outer:
            self._db.execute("BEGIN IMMEDIATE")
        return self._db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._outer:
            self._db.execute("ROLLBACK" if exc_type else "COMMIT")
