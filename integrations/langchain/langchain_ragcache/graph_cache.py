"""RagCacheGraphCache: a LangGraph node cache (``langgraph.cache.base.BaseCache``) in SQLite.

LangGraph caches a node's output when the node is added with a ``cache_policy``; the graph asks
its ``cache`` for ``(namespace, key)`` pairs (the namespace names the node, the key hashes its
input) and stores values with a TTL in seconds. LangGraph's own ``InMemoryCache`` forgets
everything when the process ends; this one keeps entries in a SQLite file (WAL mode, the same
embedded-store conventions as ragcache's semantic cache), so every process that opens the same
directory shares them::

    from langgraph.types import CachePolicy
    builder.add_node("retrieve", retrieve, cache_policy=CachePolicy(ttl=600))
    graph = builder.compile(cache=RagCacheGraphCache.for_graph(builder, "~/.cache/ragcache/graph"))

What LangGraph's own key covers (langgraph 1.x, ``pregel/_algo.py``): the namespace
``("__pregel_ns_writes", identifier, node name)``, where ``identifier`` is the node function's
``module.qualname`` (``"__dynamic__"`` for a callable object, a class-based node, or anything without
a module-level name), and the key, an xxh3 hash of ``cache_policy.key_func(input)`` (by default a
pickle of the node's input). It does **not** cover which graph the node belongs to, the node's code,
the state of a class-based node or the variables a closure captured (a model, a prompt), the config or
runtime context, or the LangGraph version. Two graphs whose class-based nodes share a name therefore
share entries. So this cache adds its own **namespace** in front of LangGraph's:
:meth:`RagCacheGraphCache.for_graph` derives one from the graph (node names, each node's code and
state, edges, state schema; :func:`graph_namespace`), or pass ``namespace=`` yourself (a release
tag, a tenant). Without a namespace, entries of ``"__dynamic__"`` nodes are neither stored nor served
(a warning says how to fix it): they cannot be told apart.

Behaviour (LangGraph's documented contract): a value is served until its TTL (seconds; ``None``:
no expiry) passes, by the wall clock so that processes agree; ``clear()`` drops every entry,
``clear(namespaces)`` only those namespaces. Values are serialised by the cache's ``serde``
(LangGraph's JSON+msgpack serializer, no pickle). A PostgreSQL backend for several hosts is a
follow-up (see the README).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
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

log = logging.getLogger(__name__)
DB_NAME = "graph_cache.sqlite3"
DYNAMIC = "__dynamic__"
"""LangGraph's identifier for a node without a module-level name (class-based nodes)."""
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


def _describe(obj: Any, depth: int = 0) -> Any:
    """A process-independent description of a node's callable or of a value it holds: code digests
    for functions (closure values included), class name and state for objects; never a memory address."""
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if depth > 3:
        return f"{type(obj).__module__}.{type(obj).__qualname__}"
    if isinstance(obj, list | tuple | set | frozenset):
        items = [_describe(v, depth + 1) for v in obj]
        return sorted(items, key=repr) if isinstance(obj, set | frozenset) else items
    if isinstance(obj, Mapping):
        return {str(k): _describe(v, depth + 1) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    code = getattr(obj, "__code__", None)
    if code is not None:  # a function or lambda: its code, defaults and captured variables
        cells = [c.cell_contents for c in (getattr(obj, "__closure__", None) or ()) if _has_contents(c)]
        return {"fn": f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}",
                "code": hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest()[:16],
                "closure": [_describe(v, depth + 1) for v in cells],
                "defaults": _describe(getattr(obj, "__defaults__", None), depth + 1)}
    if hasattr(obj, "func") and hasattr(obj, "args"):  # functools.partial
        return {"partial": _describe(obj.func, depth + 1), "args": _describe(obj.args, depth + 1),
                "kw": _describe(getattr(obj, "keywords", {}), depth + 1)}
    t = type(obj)
    state = getattr(obj, "__dict__", None)
    if hasattr(obj, "model_dump"):  # pydantic (LangChain models, tools): its fields
        try:
            state = obj.model_dump(mode="json")
        except Exception:  # noqa: BLE001 - fields that do not serialise: keep the class name only
            state = None
    call = getattr(t, "__call__", None)
    return {"cls": f"{t.__module__}.{t.__qualname__}", "state": _describe(state, depth + 1),
            "call": _describe(call, depth + 1) if getattr(call, "__code__", None) is not None else None}


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # an empty cell
        return False
    return True


def graph_namespace(graph: Any) -> str:
    """A namespace for ``graph`` (a ``StateGraph`` builder or a compiled graph): 16 hex characters of
    sha256 over its node names, each node's callable (:func:`_describe`: code, closure values,
    class-based nodes' class and state), its edges and branches' sources, and its state schema's
    name. The same graph definition gives the same namespace in every process; a change to a
    node's code or settings gives a new one (its old entries are simply never read again)."""
    builder = getattr(graph, "builder", graph)
    nodes = getattr(builder, "nodes", None)
    if not isinstance(nodes, Mapping):
        raise TypeError(f"graph_namespace needs a StateGraph or a compiled graph, got {type(graph).__name__}")
    spec = {
        "nodes": {name: _describe(getattr(getattr(n, "runnable", n), "func", None) or getattr(n, "runnable", n))
                  for name, n in sorted(nodes.items())},
        "edges": sorted(map(list, getattr(builder, "edges", ()) or ())),
        "branches": sorted(getattr(builder, "branches", {}) or {}),
        "state": (lambda t: f"{t.__module__}.{t.__qualname__}")(getattr(builder, "state_schema", type(None))),
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


class RagCacheGraphCache(BaseCache):
    """LangGraph node cache persisted in SQLite.

    Args:
        path: directory of the cache (``graph_cache.sqlite3`` inside it; created if missing), or
            a ``.sqlite3`` / ``.db`` file path; ``None`` keeps it in memory (one process).
        serde: LangGraph serializer (default: the base class's JSON+msgpack, pickle off).
        clock: wall-clock seconds (``time.time``); tests pass a fake clock to expire entries.
        namespace: prefix of every entry's namespace (one graph, release or tenant); ``None``:
            entries of class-based (``"__dynamic__"``) nodes are not cached. See :meth:`for_graph`.

    Raises:
        ValueError: ``path`` is an existing file that is not a SQLite database, or an empty namespace.
    """

    def __init__(self, path: str | Path | None = None, *, serde: SerializerProtocol | None = None,
                 clock: Callable[[], float] = time.time, namespace: str | None = None) -> None:
        super().__init__(serde=serde)
        if namespace is not None and not isinstance(namespace, str):
            raise TypeError(f"namespace must be a non-empty str or None, got {type(namespace).__name__}")
        if namespace is not None and not namespace:
            raise ValueError("namespace must be a non-empty str or None")
        self.namespace = namespace
        self._warned = False
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

    @classmethod
    def for_graph(cls, graph: Any, path: str | Path | None = None, *, namespace: str | None = None,
                  **kwargs: Any) -> RagCacheGraphCache:
        """A cache for ``graph`` (builder or compiled graph) whose namespace is
        :func:`graph_namespace` (or ``namespace``, when given, followed by it)::

            graph = builder.compile(cache=RagCacheGraphCache.for_graph(builder, "~/.cache/ragcache/graph"))
        """
        derived = graph_namespace(graph)
        return cls(path, namespace=f"{namespace}/{derived}" if namespace else derived, **kwargs)

    def _key_ns(self, ns: Sequence[str]) -> str | None:
        """The stored namespace of a LangGraph namespace, or ``None`` when it must not be cached."""
        if self.namespace is not None:
            return _ns([self.namespace, *ns])
        if DYNAMIC in ns:
            if not self._warned:
                self._warned = True
                log.warning("RagCacheGraphCache: node %r has no module-level name (a class-based node), so "
                            "LangGraph keys it as %r and another graph's node of that name would share its "
                            "entries; not caching it. Use RagCacheGraphCache.for_graph(builder, path) or "
                            "namespace=...", ns[-1] if ns else "?", DYNAMIC)
            return None
        return _ns(ns)

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
                stored = self._key_ns(ns)
                if stored is None:
                    continue
                row = self._db.execute("SELECT enc, value, expires_at FROM node_cache WHERE ns=? AND key=?",
                                       (stored, key)).fetchone()
                if row is None:
                    continue
                enc, value, expires_at = row
                if expires_at is not None and now >= expires_at:
                    expired.append((stored, key))
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
            stored = self._key_ns(ns)
            if stored is None:
                continue
            enc, data = self.serde.dumps_typed(value)
            rows.append((stored, key, enc, data, None if ttl is None else now + ttl))
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
            if namespaces is None and self.namespace is None:
                self._db.execute("DELETE FROM node_cache")
            elif namespaces is None:  # this cache's namespace only (JSON list prefix)
                prefix = _ns([self.namespace, "x"])[:-4]  # '["<namespace>", '
                self._db.execute("DELETE FROM node_cache WHERE substr(ns, 1, ?) = ?", (len(prefix), prefix))
            else:
                self._db.executemany("DELETE FROM node_cache WHERE ns=?",
                                     [(k,) for k in (self._key_ns(ns) for ns in namespaces) if k is not None])

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
        return f"RagCacheGraphCache(path={str(self.path) if self.path else None!r}, namespace={self.namespace!r})"


__all__ = ["RagCacheGraphCache", "graph_namespace"]
