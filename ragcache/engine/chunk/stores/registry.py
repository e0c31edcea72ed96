"""Chunk KV stores by kind, in one table: :data:`CHUNK_STORES`.

Each kind names the URL schemes that select it and how a URL becomes a store.
:func:`~ragcache.engine.chunk.stores.factory.open_chunk_store` (what ``RAGCACHE_KV_URL`` goes through)
reads this table, and so do its error messages; a new store is its class (behind the
:class:`~ragcache.engine.chunk.stores.base.ChunkStore` protocol, checked by the contract suite
:class:`ragcache.testing.chunk_stores.ChunkStoreContract`) plus one line here. The store modules are
imported when a store is opened, so a kind whose client is missing (``redis``) costs nothing until used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ragcache.config import bad_url_scheme, url_scheme


@dataclass(frozen=True, slots=True)
class ChunkStoreKind:
    """One kind of chunk store.

    Attributes:
        name: the kind's name (``"memory"``, ``"disk"``, ``"redis"``).
        schemes: the lower-case URL schemes that select it (``""``: a plain folder path).
        summary: one line for help and error messages.
        opener: ``opener(url, **kwargs) -> ChunkStore`` (``url``: ``None`` for the store without a URL).
    """

    name: str
    schemes: tuple[str, ...]
    summary: str
    opener: Callable[..., Any]


def _memory(url: str | None, **kwargs: Any) -> Any:
    from ragcache.engine.chunk.stores.memory import MemoryChunkStore

    return MemoryChunkStore(**kwargs)


def _disk(url: str, **kwargs: Any) -> Any:
    from ragcache.engine.chunk.stores.disk import DiskChunkStore

    return DiskChunkStore(url.split("://", 1)[1] if "://" in url else url, **kwargs)


def _redis(url: str, **kwargs: Any) -> Any:
    from ragcache.engine.chunk.stores.redis_store import RedisChunkStore

    scheme, rest = url.split("://", 1)
    if scheme.lower().startswith("valkey"):  # the redis client speaks to Valkey under redis:// names
        url = "redis" + scheme[len("valkey"):].lower() + "://" + rest
    return RedisChunkStore(url, **kwargs)


CHUNK_STORES: dict[str, ChunkStoreKind] = {
    "memory": ChunkStoreKind("memory", (), "in this process, LRU within a byte budget (no URL)", _memory),
    "disk": ChunkStoreKind("disk", ("", "file"), "safetensors files in a folder (a path or file://DIR)", _disk),
    "redis": ChunkStoreKind("redis", ("redis", "rediss", "unix", "valkey", "valkeys"),
                            "Redis / Valkey, shared by every process (redis://host:port/db, rediss://, unix://, "
                            "valkey://)", _redis),
}
"""Every chunk store kind by name: the one table URLs are resolved against. Add a store here."""


def url_schemes() -> tuple[str, ...]:
    """Every URL scheme some kind accepts, in table order."""
    return tuple(s for kind in CHUNK_STORES.values() for s in kind.schemes)


def store_kind(url: str | None) -> ChunkStoreKind:
    """The kind a URL selects: ``None`` or ``""`` -> memory; else the kind whose ``schemes`` hold its scheme.

    Raises:
        ValueError: an unknown scheme (the message lists the kinds and their URLs).
    """
    if not url:
        return CHUNK_STORES["memory"]
    scheme = url_scheme(url)
    for kind in CHUNK_STORES.values():
        if scheme in kind.schemes:
            return kind
    raise bad_url_scheme("chunk store URL", url, [f"{k.name}: {k.summary}" for k in CHUNK_STORES.values()])


__all__ = ["CHUNK_STORES", "ChunkStoreKind", "store_kind", "url_scheme", "url_schemes"]
