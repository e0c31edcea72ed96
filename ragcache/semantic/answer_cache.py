"""The answer cache as the answer path meets it: :class:`AnswerCache`, one typed interface.

:class:`ragcache.answering.AnswerPath` holds its cache as an :class:`AnswerCache` and calls these five
methods and nothing else: a lookup and a store of one :class:`~ragcache.request.CacheRequest` (the
request's question, partition, threshold and budget are read from the record, not passed one by one),
the one-time cold load, and the single-flight lock in its sync and async forms. Every semantic cache is
one: :class:`~ragcache.semantic.decision.policy.SemanticPolicy` implements it, so the embedded
:class:`~ragcache.semantic.cache.SemanticCache` (FAISS + SQLite) and the shared
:class:`~ragcache.semantic.pg_cache.PgSemanticCache` (PostgreSQL + pgvector) do;
``tests/unit/test_answer_cache_protocol.py`` checks each implementation's signatures against it and the
contract suite (:mod:`ragcache.testing.semantic_contract`) its behaviour over every store.

A cache over another engine is best written as a
:class:`~ragcache.semantic.stores.protocol.VectorAnswerStore` under ``SemanticPolicy`` (the decision, the
guards and the statistics come with it); an object that implements this protocol directly is served by the
answer path just the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ragcache.semantic.partition import PartitionKey
    from ragcache.semantic.records import SemanticHit


class AnswerRequest(Protocol):
    """What an answer cache reads of a request: :class:`ragcache.request.CacheRequest` is one (the answer
    path's record; the cache declares the four fields it reads rather than importing the request package,
    which sits above it)."""

    @property
    def question(self) -> str:
        """The embedded part of the key."""
        ...

    @property
    def partition(self) -> PartitionKey | None:
        """The exact part of the key (``None``: no answer cache for this request)."""
        ...

    @property
    def threshold(self) -> float | None:
        """The cosine similarity a hit needs (``None``: the cache's own)."""
        ...

    @property
    def max_tokens(self) -> int | None:
        """The answer budget in new tokens (``None``: unknown)."""
        ...


@runtime_checkable
class AnswerCache(Protocol):
    """What the answer path (:class:`ragcache.answering.AnswerPath`) needs of an answer cache."""

    def lookup_request(self, request: AnswerRequest, *, count: bool = True) -> SemanticHit | None:
        """The stored answer for ``request`` (its ``question`` in its ``partition``, at its ``threshold``,
        servable to its ``max_tokens``), or ``None``; ``None`` too for a request without a partition.
        ``count=False``: a re-read of a request already counted in the cache's statistics (the single
        flight re-reads a miss before calling the model).

        Raises:
            ValueError: a request field the cache refuses (a threshold outside [-1, 1]).
            RemoteStoreError: a shared store is unreachable (the answer path makes it a logged miss)."""
        ...

    def store_request(self, request: AnswerRequest, answer: str, *, finish_reason: str | None = None,
                      output_tokens: int | None = None, metadata: Mapping[str, Any] | None = None,
                      ttl_s: float | None = None, store_truncated: bool | None = None) -> int | None:
        """Store ``answer`` for ``request`` (its ``question`` in its ``partition``, generated under its
        ``max_tokens``); returns the entry id, or ``None`` when nothing was stored (no partition, or an
        answer cut at its budget (``finish_reason``) without ``store_truncated``). ``output_tokens``: the
        answer's length in tokens (``None``: unknown); ``ttl_s``: seconds to live (``None``: the cache's
        default); ``store_truncated``: the entry point's budget rule (``None``: the cache's own).

        Raises:
            ValueError / TypeError: metadata that is not JSON-like, a bad ``ttl_s``, a non-str answer.
            RemoteStoreError: a shared store is unreachable (the answer path logs it and answers)."""
        ...

    def warm(self) -> None:
        """Load what the first lookup would load lazily (an embedder), so that load is not paid inside a
        lookup's deadline; idempotent, and a no-op for a cache with nothing to load."""
        ...

    def flight_lock(self, key: str, timeout_s: float) -> AbstractContextManager[bool]:
        """The single-flight lock named by hex ``key``: a context manager yielding whether it was taken
        within ``timeout_s`` seconds (a lock per key across every process that shares the store)."""
        ...

    def aflight_lock(self, key: str, timeout_s: float) -> AbstractAsyncContextManager[bool]:
        """Async :meth:`flight_lock`, waited for on the event loop."""
        ...


__all__ = ["AnswerCache", "AnswerRequest"]
