"""The answer cache every entry point opens when given none: persistent, under ``$RAGCACHE_HOME``.

``ragcache ask``, LangChain's ``RagCacheSemanticCache()`` / ``RagCacheMiddleware()`` and the
LlamaIndex ``RagCacheQueryEngine`` default to the same store, so answers survive a restart and
are shared between them: ``$RAGCACHE_SEMANTIC_URL`` (``postgresql://...``) when set, else the
SQLite + FAISS cache in ``$RAGCACHE_ANSWERS_DIR`` (default ``$RAGCACHE_HOME/answers``). Those
entry points read the settings (``Config.from_env()``) and pass them here as ``config``. Passing
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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragcache.config import Config

log = logging.getLogger(__name__)

DEFAULT_LOCATION = "default"
"""The value of a ``path=`` / ``semantic_cache=`` argument that means :func:`default_location`."""

_OPEN: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def default_location(config: Config) -> str:
    """``config.semantic_url`` if set, else ``config.answers_dir`` (``$RAGCACHE_ANSWERS_DIR``,
    default ``$RAGCACHE_HOME/answers``), as a string."""
    return config.semantic_url or str(config.answers_dir)


def default_cache(embedder: Any = None, *, config: Config, **options: Any) -> Any:
    """The process-wide persistent answer cache at :func:`default_location`, opened on first use.

    Args:
        embedder: ``None`` (the shared packaged all-MiniLM-L6-v2), a model name or path, or a
            loaded embedder (see :func:`ragcache.semantic.embedding.resolve_embedder`).
        config: the settings (:meth:`ragcache.config.Config.from_env` at the entry point): the
            location, the defaults of ``threshold``, ``max_entries`` and ``ttl_s``
            (``RAGCACHE_THRESHOLD``, ``RAGCACHE_SEMANTIC_MAX_ENTRIES``, ``RAGCACHE_SEMANTIC_TTL_S``),
            the home the embedder's calibration record is read from and the WordNet folder.
        options: other :class:`~ragcache.semantic.SemanticCache` options. Callers with other
            options get their own cache object on the same store.

    Raises:
        ValueError: the folder holds a cache built with another embedder.
    """
    from ragcache.semantic.cache import SemanticCache
    from ragcache.semantic.decision.lexicon import use_wordnet_dir
    from ragcache.semantic.embedding import resolve_embedder

    cfg = config
    use_wordnet_dir(cfg.wordnet_dir)
    location = default_location(cfg)
    emb = resolve_embedder(embedder, home=cfg.paths)
    opts = {"threshold": cfg.threshold, "max_entries": cfg.semantic_max_entries, "ttl_s": cfg.semantic_ttl_s,
            "home": cfg.paths, **options}
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
