"""Shared (networked) stores: their one error type, and URLs with the password hidden.

A ``postgresql://...`` URL puts the semantic answer cache in PostgreSQL + pgvector
(:class:`ragcache.semantic.pg_cache.PgSemanticCache`); a ``redis://...``, ``rediss://...`` or
``unix://...`` URL puts chunk KV in Redis / Valkey
(:class:`ragcache.engine.chunk.stores.redis_store.RedisChunkStore`). The library takes these URLs
as arguments; the app layer reads them from ``RAGCACHE_SEMANTIC_URL`` / ``RAGCACHE_KV_URL``
(:class:`ragcache.config.Config`). Without one, the embedded stores (SQLite + FAISS, memory / disk
chunk store) are used.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


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
