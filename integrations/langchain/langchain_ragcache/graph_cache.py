"""RagCacheGraphCache: a LangGraph node cache (``langgraph.cache.base.BaseCache``) in SQLite.

LangGraph caches a node's output when the node is added with a ``cache_policy``; the graph asks
its ``cache`` for ``(namespace, key)`` pairs (the namespace names the node, the key hashes its
input) and stores values with a TTL in seconds. LangGraph's own ``InMemoryCache`` forgets
everything when the process ends; this one keeps entries in a SQLite file (WAL mode, the same
embedded-store conventions as ragcache's semantic cache), so every process that opens the same
directory shares them::

    from langgraph.types import CachePolicy
    builder.add_node("retrieve", retrieve, cache_policy=CachePolicy(ttl=600))
    graph = builder.compile(cache=RagCacheGraphCache("~/.cache/ragcache/graph"))

Behaviour (LangGraph's documented contract): a value is served until its TTL (seconds; ``None``:
no expiry) passes, by the wall clock so that processes agree; ``clear()`` drops every entry,
``clear(namespaces)`` only those namespaces. Values are serialised by the cache's ``serde``
(LangGraph's JSON+msgpack serializer, no pickle). A PostgreSQL backend for several hosts is a
follow-up (see the README).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

try:
    from langgraph.cache.base import BaseCache, FullKey, Namespace
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("RagCacheGraphCache needs langgraph: pip install 'langchain-ragcache[agents]'") from e

DB_NAME = "graph_cache.sqlite3"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS node_cache (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    enc TEXT NOT NULL,
    value BLOB NOT NULL,
    expires_at REAL,
    PRIMARY KEY (ns, key)
);
CREATE INDEX IF NOT EXISTS node_cache_expiry ON node_cache(expires_at);
"""


def _ns(namespace: Sequence[str]) -> str:
    """A namespace tuple as one column value (JSON, so ``("a", "b")`` never equals ``("a/b",)``)."""
    return json.dumps(list(namespace), ensure_ascii=False)


class RagCacheGraphCache(BaseCache):
    """LangGraph node cache persisted in SQLite.

    Args:
        path: directory of the cache (``graph_cache.sqlite3`` inside it; created if missing), or
            a ``.sqlite3`` / ``.db`` file path; ``None`` keeps it in memory (one process).
        serde: LangGraph serializer (default: the base class's JSON+msgpack, pickle off).
        clock: wall-clock seconds (``time.time``); tests pass a fake clock to expire entries.

    Raises:
        ValueError: ``path`` is an existing file that is not a SQLite database.
    """

    def __init__(self, path: str | Path | None = None, *, serde: SerializerProtocol | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(serde=serde)
        self.clock = clock
        if path is None:
            target = ":memory:"
            self.path = None
        else:
            p = Path(path).expanduser()
            if p.suffix not in (".sqlite3", ".db", ".sqlite"):
                p.mkdir(parents=True, exist_ok=True)
                p = p / DB_NAME
            else:
                p.parent.mkdir(parents=True, exist_ok=True)
            self.path = p
            target = str(p)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(target, check_same_thread=False, isolation_level=None, timeout=30.0)
            if self.path is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as e:
            raise ValueError(f"{target} is not a usable SQLite database ({e}); give a directory or a new file") from None

    # ------------------------------------------------------------------ BaseCache
    def get(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        """Values of the given ``(namespace, key)`` pairs that are stored and not expired."""
        if not keys:
            return {}
        now = self.clock()
        out: dict[FullKey, Any] = {}
        expired: list[tuple[str, str]] = []
        with self._lock:
            for ns, key in keys:
                row = self._db.execute("SELECT enc, value, expires_at FROM node_cache WHERE ns=? AND key=?",
                                       (_ns(ns), key)).fetchone()
                if row is None:
                    continue
                enc, value, expires_at = row
                if expires_at is not None and now >= expires_at:
                    expired.append((_ns(ns), key))
                    continue
                out[(tuple(ns), key)] = self.serde.loads_typed((enc, value))
            if expired:
                self._db.executemany("DELETE FROM node_cache WHERE ns=? AND key=? AND expires_at<=?",
                                     [(n, k, now) for n, k in expired])
        return out

    def set(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        """Store values with their TTL in seconds (``None``: no expiry); replaces existing entries."""
        now = self.clock()
        rows = []
        for (ns, key), (value, ttl) in pairs.items():
            if ttl is not None and ttl <= 0:
                raise ValueError(f"ttl must be > 0 seconds or None, got {ttl}")
            enc, data = self.serde.dumps_typed(value)
            rows.append((_ns(ns), key, enc, data, None if ttl is None else now + ttl))
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT OR REPLACE INTO node_cache(ns, key, enc, value, expires_at) "
                                     "VALUES (?, ?, ?, ?, ?)", rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def clear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        """Drop every entry, or only the entries of ``namespaces``."""
        with self._lock:
            if namespaces is None:
                self._db.execute("DELETE FROM node_cache")
            else:
                self._db.executemany("DELETE FROM node_cache WHERE ns=?", [(_ns(ns),) for ns in namespaces])

    async def aget(self, keys: Sequence[FullKey]) -> dict[FullKey, Any]:
        return await asyncio.to_thread(self.get, keys)

    async def aset(self, pairs: Mapping[FullKey, tuple[Any, int | None]]) -> None:
        await asyncio.to_thread(self.set, pairs)

    async def aclear(self, namespaces: Sequence[Namespace] | None = None) -> None:
        await asyncio.to_thread(self.clear, namespaces)

    # ------------------------------------------------------------------ housekeeping
    def purge_expired(self) -> int:
        """Delete expired entries now; returns how many."""
        with self._lock:
            return self._db.execute("DELETE FROM node_cache WHERE expires_at IS NOT NULL AND expires_at<=?",
                                    (self.clock(),)).rowcount

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM node_cache").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __repr__(self) -> str:
        return f"RagCacheGraphCache(path={str(self.path) if self.path else None!r})"


__all__ = ["RagCacheGraphCache"]
