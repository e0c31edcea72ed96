"""Every store a URL may name, in two tables: :data:`ANSWER_STORES` (``RAGCACHE_SEMANTIC_URL``) and
:data:`CHUNK_STORES` (``RAGCACHE_KV_URL``), with the one URL parser (:func:`url_scheme`) and the one error
for a scheme no row lists (:func:`bad_url_scheme`).

A row names its URL schemes, what help and errors say about it, and its classes as ``"module:Class"``
(imported by :func:`load` when a store of that kind is opened, so a kind whose client is missing costs
nothing until used, and this module imports nothing of ragcache: the settings read it without importing the
engine or the semantic cache). The settings' validation (:class:`ragcache.config.Config`), the URL
factories (:meth:`ragcache.semantic.SemanticCache.from_url`,
:func:`~ragcache.engine.chunk.stores.factory.open_chunk_store`), ``ragcache cache`` and the configuration
reference read these tables; a new store is its class plus one row here (``docs/design/stores.md``), or, for a
store kept outside ragcache, one call of :func:`register` with its row before the settings are read.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def url_scheme(url: str) -> str:
    """The lower-case scheme of a store URL (``""`` for a plain path): the one URL parser, for the
    answer store (``RAGCACHE_SEMANTIC_URL``, :data:`ANSWER_STORES`) and the chunk KV store
    (``RAGCACHE_KV_URL``, :data:`CHUNK_STORES`)."""
    return url.split("://", 1)[0].lower() if "://" in url else ""


def bad_url_scheme(setting: str, url: str, choices: Sequence[str]) -> ValueError:
    """The one error for a store URL of an unknown scheme: names ``setting`` (a variable, or what the URL
    is for: ``"semantic cache URL"``), the scheme, the URL and every accepted form (``choices``)."""
    return ValueError(f"unknown {setting} scheme {url_scheme(url)!r} ({url!r}): use {'; '.join(choices)}")


def load(spec: str) -> Any:
    """The object a ``"module:Name"`` spec of a table row names (its module imported on first use).

    Raises:
        ImportError: the module (or its client library) cannot be imported. AttributeError: no such name."""
    module, name = spec.split(":")
    return getattr(importlib.import_module(module), name)


# ------------------------------------------------------------------ answer stores
@dataclass(frozen=True, slots=True)
class AnswerStoreKind:
    """One kind of answer store a URL may name (a row of :data:`ANSWER_STORES`).

    Attributes:
        name: short name (``embedded``, ``postgres``).
        schemes: the URL schemes that select it (``""``: a plain folder path).
        example: the URL's form, as help and errors show it.
        doc: what the store is, in a few words.
        cache: ``module:Class`` of the cache a URL of this kind opens
            (:meth:`ragcache.semantic.SemanticCache.from_url`): a subclass of
            :class:`~ragcache.semantic.decision.policy.SemanticPolicy`, called ``cls(url, **kwargs)`` (the cache's
            keyword arguments: ``embedder``, ``max_entries``, ``threshold`` ...).
        admin: ``module:Class`` of the store's admin view (:class:`~ragcache.semantic.stores.admin.AnswerAdmin`:
            list, read, statistics, removal, eviction, clearing without an embedder), called ``cls(url)`` (the
            folder, ``file://`` taken off, for a ``folder`` kind); ``ragcache cache`` opens it.
        folder: the URL names a folder (``file://`` taken off), else it is passed whole.
    """

    name: str
    schemes: tuple[str, ...]
    example: str
    doc: str
    cache: str
    admin: str
    folder: bool = False


ANSWER_STORES: tuple[AnswerStoreKind, ...] = (
    AnswerStoreKind("embedded", ("", "file"), "file://DIR or a folder path",
                    "FAISS + SQLite in one folder, shared by the processes that open it",
                    "ragcache.semantic.cache:SemanticCache", "ragcache.semantic.stores.folder_admin:FolderAnswers",
                    folder=True),
    AnswerStoreKind("postgres", ("postgresql", "postgres"), "postgresql://user@host:5432/db",
                    "PostgreSQL + pgvector, shared by every process on the database",
                    "ragcache.semantic.pg_cache:PgSemanticCache", "ragcache.semantic.stores.pg_admin:PgAnswers"),
)
"""The answer stores, one row each: what ``RAGCACHE_SEMANTIC_URL`` / ``SemanticCache.from_url`` accept
(:func:`answer_store_kind`), what ``ragcache config`` and the configuration reference say about them."""


def answer_store_kind(url: str, setting: str = "semantic cache URL") -> AnswerStoreKind:
    """The row of :data:`ANSWER_STORES` whose scheme ``url`` has.

    Raises:
        ValueError: an unknown scheme (:func:`bad_url_scheme`, listing every row's form).
    """
    scheme = url_scheme(url)
    for kind in ANSWER_STORES:
        if scheme in kind.schemes:
            return kind
    raise bad_url_scheme(setting, url, [f"{k.name}: {k.example}" for k in ANSWER_STORES])


# ------------------------------------------------------------------ chunk KV stores
@dataclass(frozen=True, slots=True)
class ChunkStoreKind:
    """One kind of chunk KV store (a row of :data:`CHUNK_STORES`).

    Attributes:
        name: the kind's name (``"memory"``, ``"disk"``, ``"redis"``).
        schemes: the lower-case URL schemes that select it (``""``: a plain folder path).
        summary: one line for help and error messages.
        store: ``module:Class`` of the store; the class's ``from_url(url, **kwargs)`` opens it (``url``:
            ``None`` for the store without a URL).
        folder: the URL names a folder of chunk files (``file://`` taken off), which ``ragcache cache``
            reads without opening the store (no torch import); any other kind it opens and asks.
        budget: what bounds a store of this kind when it is opened without a byte budget, as
            ``ragcache cache stats`` says it (``"the server's maxmemory"``).
    """

    name: str
    schemes: tuple[str, ...]
    summary: str
    store: str
    folder: bool = False
    budget: str = "none"


CHUNK_STORES: dict[str, ChunkStoreKind] = {
    "memory": ChunkStoreKind("memory", (), "in this process, LRU within a byte budget (no URL)",
                             "ragcache.engine.chunk.stores.memory:MemoryChunkStore"),
    "disk": ChunkStoreKind("disk", ("", "file"), "safetensors files in a folder (a path or file://DIR)",
                           "ragcache.engine.chunk.stores.disk:DiskChunkStore", folder=True),
    "redis": ChunkStoreKind("redis", ("redis", "rediss", "unix", "valkey", "valkeys"),
                            "Redis / Valkey, shared by every process (redis://host:port/db, rediss://, unix://, "
                            "valkey://)", "ragcache.engine.chunk.stores.redis_store:RedisChunkStore",
                            budget="the server's maxmemory"),
}
"""Every chunk store kind by name: the one table chunk store URLs are resolved against (the settings'
check of ``RAGCACHE_KV_URL``, :func:`~ragcache.engine.chunk.stores.factory.open_chunk_store`,
``ragcache cache``). Add a store here, or :func:`register` one kept outside ragcache."""


def chunk_store_kind(url: str | None, setting: str = "chunk store URL") -> ChunkStoreKind:
    """The kind a URL selects: ``None`` or ``""`` -> memory; else the kind whose ``schemes`` hold its scheme.

    Raises:
        ValueError: an unknown scheme (:func:`bad_url_scheme`: names ``setting`` and lists the kinds).
    """
    if not url:
        return CHUNK_STORES["memory"]
    scheme = url_scheme(url)
    for kind in CHUNK_STORES.values():
        if scheme in kind.schemes:
            return kind
    raise bad_url_scheme(setting, url, [f"{k.name}: {k.summary}" for k in CHUNK_STORES.values()])


def chunk_url_schemes() -> tuple[str, ...]:
    """Every URL scheme some chunk store kind accepts, in table order."""
    return tuple(s for kind in CHUNK_STORES.values() for s in kind.schemes)


# ------------------------------------------------------------------ registration
def register(kind: AnswerStoreKind | ChunkStoreKind) -> None:
    """Add a store kind kept outside ragcache (a plug-in, a test) to its table: an :class:`AnswerStoreKind` to
    :data:`ANSWER_STORES`, a :class:`ChunkStoreKind` to :data:`CHUNK_STORES`. Every reader of the tables sees
    it from then on: the settings' check of ``RAGCACHE_SEMANTIC_URL`` / ``RAGCACHE_KV_URL``, the URL factories,
    ``ragcache cache``, the errors that list the kinds and the settings' help (:data:`ragcache.config.ENV_VARS`,
    written when shown). Register before the settings are read. :func:`unregister` takes it out again.

    Raises:
        TypeError: ``kind`` is neither row type.
        ValueError: the table already has a kind of that name, or one that takes one of its schemes (the
            message names that kind: pick another name or scheme).
    """
    global ANSWER_STORES
    if not isinstance(kind, AnswerStoreKind | ChunkStoreKind):
        raise TypeError(f"register takes an AnswerStoreKind or a ChunkStoreKind, got {type(kind).__name__}")
    rows = list(ANSWER_STORES) if isinstance(kind, AnswerStoreKind) else list(CHUNK_STORES.values())
    table = "ANSWER_STORES" if isinstance(kind, AnswerStoreKind) else "CHUNK_STORES"
    if any(s != s.lower() or "://" in s for s in kind.schemes):
        raise ValueError(f"store kind {kind.name!r}: schemes are lower case, without '://' (got {kind.schemes})")
    for row in rows:
        if row.name == kind.name:
            raise ValueError(f"{table} already has a store kind named {kind.name!r}: pick another name")
        clash = sorted(set(row.schemes) & set(kind.schemes))
        if clash:
            shown = ", ".join(f"{s}://" if s else "a plain path" for s in clash)
            raise ValueError(f"store kind {kind.name!r} takes {shown}, already taken by the {row.name!r} kind of "
                             f"{table}: pick another scheme")
    if isinstance(kind, AnswerStoreKind):
        ANSWER_STORES = (*ANSWER_STORES, kind)
    else:
        CHUNK_STORES[kind.name] = kind


def unregister(kind: AnswerStoreKind | ChunkStoreKind) -> None:
    """Take a kind :func:`register` added out of its table again (a test's cleanup); a kind not there is ignored."""
    global ANSWER_STORES
    if isinstance(kind, AnswerStoreKind):
        ANSWER_STORES = tuple(k for k in ANSWER_STORES if k != kind)
    elif CHUNK_STORES.get(kind.name) == kind:
        del CHUNK_STORES[kind.name]


__all__ = ["ANSWER_STORES", "CHUNK_STORES", "AnswerStoreKind", "ChunkStoreKind", "answer_store_kind",
           "bad_url_scheme", "chunk_store_kind", "chunk_url_schemes", "load", "url_scheme"]
