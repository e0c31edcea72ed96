"""Shared (networked) stores: their one error type and the environment variables that select them.

``RAGCACHE_SEMANTIC_URL`` (``postgresql://...``) puts the semantic answer cache in PostgreSQL
+ pgvector (:class:`ragcache.semantic.pg_cache.PgSemanticCache`); ``RAGCACHE_KV_URL``
(``redis://...``, ``rediss://...``, ``unix://...``) puts chunk KV in Redis / Valkey
(:class:`ragcache.engine.chunk.stores.redis_store.RedisChunkStore`). Unset, the embedded defaults
(SQLite + FAISS, memory / disk chunk store) are used.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from ragcache.config import env_setting

SEMANTIC_URL_ENV = "RAGCACHE_SEMANTIC_URL"
KV_URL_ENV = "RAGCACHE_KV_URL"


class RemoteStoreError(ConnectionError):
    """A shared store (PostgreSQL, Redis / Valkey) could not be reached or answered with an error.

    The message names the server (without password) and what to check. Clients reconnect on the
    next call, so a caller may retry once the server is back.
    """


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def semantic_url(explicit: str | None = None) -> str | None:
    """``explicit`` if given, else ``$RAGCACHE_SEMANTIC_URL`` if set and non-empty, else ``None``."""
    return explicit or env_setting("semantic_url") or None


def kv_url(explicit: str | None = None) -> str | None:
    """``explicit`` if given, else ``$RAGCACHE_KV_URL`` if set and non-empty, else ``None``."""
    return explicit or env_setting("kv_url") or None
