"""The vector-answer store protocol: what a semantic cache needs from the engine that keeps its entries.

Storage only: entries (keys, vectors, rows) addressed by partition. The decision (keying, typo
correction, budget, guards, statistics) is :class:`~ragcache.semantic.decision.policy.SemanticPolicy`'s,
written once over any object with these members; it depends on this module and nothing else of
``stores/``, and no module here imports ``decision/`` (``tests/unit/test_semantic_layers.py``). A store
usually brings two small helpers besides, each with its own protocol: its single-flight locks
(:class:`~ragcache.semantic.flight.FlightLocks`) and its partitions' words for typo correction
(:class:`~ragcache.semantic.speller.QuerySpeller`). Two stores implement all three and pass one
contract suite (:mod:`ragcache.testing.semantic_contract`):

- :class:`~ragcache.semantic.stores.faiss_store.FaissAnswerStore`: FAISS indexes in memory over one SQLite
  file (the embedded default; processes that open one folder see each other's writes at their
  next call through a change log);
- :class:`~ragcache.semantic.stores.pg_store.PgAnswerStore`: PostgreSQL + pgvector, shared by every process.

Partitions are addressed by their digest (:attr:`PartitionKey.digest`); questions are the
normalised whole text; vectors are unit float32 ``[dim]`` embeddings of the embedded form. A store
never decides whether an answer is served: it returns candidates with their cosine similarity.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ragcache.semantic.budget import AnswerBudget
from ragcache.semantic.partition import PartitionKey


@dataclass(frozen=True, slots=True)
class StoredAnswer:
    """One stored entry as a search returns it.

    Attributes:
        id: the entry id (unique in its store, never reused).
        partition: digest of the partition it lives in.
        question: the stored (normalised, whole) question.
        answer: the answer text.
        metadata: the caller's metadata (the answer budget taken out).
        budget: how the answer ended (:class:`AnswerBudget`).
        similarity: cosine similarity in [-1, 1] to the query vector (a float32 inner product of two unit
            vectors can come out as 1.0000001: it is clipped into the range here, once for every store).
        state: the entry's decision state (a JSON object, e.g. a per-entry threshold), or ``None``.
    """

    id: int
    partition: str
    question: str
    answer: str
    metadata: Mapping[str, Any]
    budget: AnswerBudget
    similarity: float
    state: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "similarity", min(1.0, max(-1.0, float(self.similarity))))


@dataclass(frozen=True, slots=True)
class NewEntry:
    """One entry to write. ``vector`` is a unit float32 ``[dim]``; ``ttl_s`` seconds or ``None``."""

    partition: PartitionKey
    question: str
    answer: str
    metadata: Mapping[str, Any]
    budget: AnswerBudget
    vector: np.ndarray
    ttl_s: float | None = None
    state: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Query:
    """One search: the partition digest, the query vector (unit float32 ``[dim]``) and the normalised
    question (entries with the same words are always among the results: an exact repeat always hits)."""

    partition: str
    vector: np.ndarray
    question: str


@dataclass(frozen=True, slots=True)
class PutResult:
    """What a write did: the new ids (in input order) and how many entries the LRU cap evicted."""

    ids: list[int]
    evicted: int = 0


@dataclass(slots=True)
class StoreCounters:
    """Counts a store keeps itself: LRU evictions and TTL expirations it carried out, and the lookups
    answered from it (``lookup_hits``) or not (``lookup_misses``), which the cache in front of it counts
    and a persistent store may add to its folder's totals on flush (``ragcache cache stats``)."""

    evictions: int = 0
    expirations: int = 0
    lookup_hits: int = 0
    lookup_misses: int = 0


@runtime_checkable
class VectorAnswerStore(Protocol):
    """Entries (partition, question, answer, vector, budget, state) searched by partition: storage only.

    Every method is safe to call from several threads. Writes are durable when they return.
    """

    dim: int
    counters: StoreCounters

    def search(self, query: Query, k: int) -> list[StoredAnswer]:
        """The ``k`` nearest live entries of the query's partition, best first, plus every live entry
        whose question is the same text as ``query.question`` (:func:`~ragcache.semantic.text.exact_form`;
        so an exact repeat is never missed)."""
        ...

    def search_many(self, queries: Sequence[Query], k: int) -> list[list[StoredAnswer]]:
        """:meth:`search` for each query."""
        ...

    def exact(self, query: Query) -> list[StoredAnswer]:
        """Only the live entries whose question is the same text (:func:`~ragcache.semantic.text.exact_form`)."""
        ...

    def neighbours(self, vector: np.ndarray, k: int, *, namespace: str) -> list[tuple[str, float]]:
        """The ``k`` stored questions of ``namespace`` nearest ``vector`` (unit float32 ``[dim]``) across
        all of its partitions: ``(question, cosine)``, best first, each question once (its best
        partition). Questions only, never answers: what a caller may do with one is retrieve again
        (:func:`ragcache.app.ask.ask`); serving still goes through :meth:`search` of one partition."""
        ...

    def may_hold(self, partition: str) -> bool:
        """False only when the store knows the partition holds no entry (lets a lookup skip embedding)."""
        ...

    def put_many(self, entries: Sequence[NewEntry]) -> PutResult:
        """Write entries in one transaction; an entry replaces a stored question with the same words
        in its partition (within the batch, the last one wins). Enforces the store's LRU cap."""
        ...

    def remove_documents(self, keys: Collection[str]) -> int:
        """Delete every entry of a partition built on any of ``keys`` (document ids or content hashes)."""
        ...

    def remove_namespace(self, namespace: str | None) -> int:
        """Delete every entry of ``namespace`` (``None``: every entry)."""
        ...

    def expire(self) -> int:
        """Delete entries past their TTL now; returns the count."""
        ...

    def touch(self, ids: Sequence[int]) -> None:
        """Record hits (LRU order, hit counts); may be written lazily."""
        ...

    def update_state(self, entry_id: int, state: Mapping[str, Any] | None) -> bool:
        """Replace an entry's decision state (a JSON object or ``None``); False if the entry is gone."""
        ...

    def __len__(self) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...

