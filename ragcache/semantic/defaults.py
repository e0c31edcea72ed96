"""The answer cache every entry point opens when given none: persistent, under ``$RAGCACHE_HOME``.

``ragcache ask``, LangChain's ``RagCacheSemanticCache()`` / ``RagCacheMiddleware()`` and the
LlamaIndex ``RagCacheQueryEngine`` default to the same store, so answers survive a restart and
are shared between them: ``$RAGCACHE_SEMANTIC_URL`` (``postgresql://...``) when set, else the
SQLite + FAISS cache in ``$RAGCACHE_ANSWERS_DIR`` (default ``$RAGCACHE_HOME/answers``). Passing
``path=None`` (LangChain) or ``semantic_cache=None`` / ``SemanticCache()`` keeps answers in memory.

Closing it closes it for every adapter in the process; it is flushed and closed at exit.
One cache object per (location, embedder, options) per process: two adapters in one process that
open the default share one :class:`~ragcache.semantic.SemanticCache` (the embedded cache keeps its
entries in memory, so two objects on one folder would not see each other's answers until
restart) and one embedder (:func:`ragcache.semantic.embedding.shared_embedder`).
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_LOCATION = "default"
"""The value of a ``path=`` / ``semantic_cache=`` argument that means :func:`default_location`."""

_OPEN: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def default_location() -> str:
    """``$RAGCACHE_SEMANTIC_URL`` if set, else the answers folder of :class:`ragcache.config.Config`
    (``$RAGCACHE_ANSWERS_DIR``, default ``$RAGCACHE_HOME/answers``), as a string.

    Raises:
        ValueError: a ``RAGCACHE_*`` variable has a bad value (the message names it).
    """
    from ragcache.config import Config
    from ragcache.remote import semantic_url

    return semantic_url() or str(Config.from_env().answers_dir)


def default_cache(embedder: Any = None, **options: Any) -> Any:
    """The process-wide persistent answer cache at :func:`default_location`, opened on first use.

    Args:
        embedder: ``None`` (the shared packaged all-MiniLM-L6-v2), a model name or path, or a
            loaded embedder (see :func:`ragcache.semantic.embedding.resolve_embedder`).
        options: other :class:`~ragcache.semantic.SemanticCache` options; defaults for
            ``threshold``, ``max_entries`` and ``ttl_s`` come from ``RAGCACHE_THRESHOLD``,
            ``RAGCACHE_SEMANTIC_MAX_ENTRIES`` and ``RAGCACHE_SEMANTIC_TTL_S``. Callers with other
            options get their own cache object on the same store.

    Raises:
        ValueError: a bad ``RAGCACHE_*`` value, or the folder holds a cache built with another embedder.
    """
    from ragcache.config import Config
    from ragcache.semantic.cache import SemanticCache
    from ragcache.semantic.embedding import resolve_embedder

    cfg = Config.from_env()
    location = default_location()
    emb = resolve_embedder(embedder)
    opts = {"threshold": cfg.threshold, "max_entries": cfg.semantic_max_entries, "ttl_s": cfg.semantic_ttl_s,
            **options}
    key = (location, emb.fingerprint, id(emb), tuple(sorted((k, repr(v)) for k, v in opts.items())))
    with _LOCK:
        cache = _OPEN.get(key)
        if cache is None:
            if not _OPEN:
                atexit.register(_close_all)
            cache = _OPEN[key] = SemanticCache.from_url(location, embedder=emb, **opts)
        return cache


def _close_all() -> None:
    """At exit: flush and close the default caches (FAISS snapshots, LRU times; answers are in the
    database already)."""
    with _LOCK:
        caches = list(_OPEN.values())
        _OPEN.clear()
    for c in caches:
        try:
            c.close()
        except Exception as e:  # noqa: BLE001 - at exit, report and go on to the next cache
            log.warning("closing the default answer cache failed: %s", e)


__all__ = ["DEFAULT_LOCATION", "default_cache", "default_location"]
