"""The answer stores' admin interface: :class:`AnswerAdmin`, what ``ragcache cache`` does to stored answers.

An admin view reads and prunes one answer store without an embedder, without loading its indexes and
without creating or migrating anything (a store not created yet is an empty one): listing, reading one
entry, statistics, removal, eviction and clearing. Each answer store brings its own, beside the SQL it
owns, and names it in its row of :data:`ragcache.store_kinds.ANSWER_STORES`:

- :class:`~ragcache.semantic.stores.folder_admin.FolderAnswers`: the embedded FAISS + SQLite folder
  (:class:`~ragcache.semantic.stores.faiss_store.FaissAnswerStore`); SQLite is its source of truth, so a
  removal here is dropped from the FAISS snapshots when a cache next opens the folder;
- :class:`~ragcache.semantic.stores.pg_admin.PgAnswers`: PostgreSQL + pgvector
  (:class:`~ragcache.semantic.stores.pg_store.PgAnswerStore`); every process sees a removal at its next lookup.

A process that has an embedded cache open (``ragcache serve``) keeps serving what it loaded until it
restarts. ``tests/integration/test_answer_admin_contract.py`` runs one contract over both.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from ragcache.provenance import PROVENANCE_KEY, Provenance
from ragcache.semantic.budget import META_KEY


@dataclass(frozen=True, slots=True)
class AnswerRow:
    """One stored answer (times are Unix seconds). ``metadata`` is the entry's own (the caller's)
    metadata; where the answer came from is :attr:`provenance` (:class:`ragcache.provenance.Provenance`,
    read from this or an earlier release's keys) and how it ended under which budget is :attr:`budget`."""

    id: int
    partition: str
    namespace: str
    question: str
    answer: str
    metadata: dict
    created: float
    accessed: float
    expires: float | None
    hits: int

    @property
    def provenance(self) -> Provenance:
        return Provenance.from_metadata(self.metadata)

    @property
    def budget(self) -> dict[str, Any]:
        """``finish_reason``, ``max_tokens`` (the budget it was generated under), ``output_tokens``."""
        b = self.metadata.get(META_KEY)
        return dict(b) if isinstance(b, dict) else {"finish_reason": None, "max_tokens": None, "output_tokens": None}

    def to_dict(self, full: bool = True) -> dict[str, Any]:
        """The row as JSON-like data (``full=False``: a listing's preview, the answer cut to 80 characters)."""
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["metadata"] = {k: v for k, v in self.metadata.items() if k not in (META_KEY, PROVENANCE_KEY)}
        d["provenance"] = self.provenance.to_json()
        d["budget"] = self.budget
        if not full:
            d.pop("metadata")
            d.pop("budget")
            d["answer"] = self.answer if len(self.answer) <= 80 else self.answer[:79] + "…"
        return d


@runtime_checkable
class AnswerAdmin(Protocol):
    """What ``ragcache cache`` does to an answer store (module docstring). Opening one connects to nothing;
    each method opens, works in one transaction, and closes.

    Attributes:
        kind: the store's name in ``cache stats`` (``"sqlite"``, ``"postgresql"``).
    """

    kind: ClassVar[str]

    @property
    def where(self) -> str:
        """The store, as ``cache stats`` names it (a folder; a URL without its password, and the schema)."""
        ...

    @property
    def exists(self) -> bool:
        """Whether the store has been created (a store that has not is an empty one)."""
        ...

    def list(self, *, namespace: str | None = None, limit: int | None = None) -> list[AnswerRow]:
        """Stored answers (of one ``namespace``; at most ``limit``), most recently used first."""
        ...

    def get(self, entry_id: int) -> AnswerRow | None:
        """The stored answer with this id, or ``None`` (also for an id no row can have)."""
        ...

    def stats(self) -> dict[str, Any]:
        """``store``, ``where``, ``path`` (a folder, or ``None``), ``entries``, ``partitions``, ``namespaces``
        (name -> entries), ``hits`` of the stored entries, ``bytes`` the store takes, ``oldest`` / ``newest``
        entry (Unix seconds, ``None`` when empty), and the lookups of every process since the store was
        created: ``lookups`` = ``lookup_hits`` + ``lookup_misses``, ``hit_rate`` (``None`` before the first)."""
        ...

    def remove(self, ids: Sequence[int]) -> int:
        """Delete entries by id. Returns the number removed."""
        ...

    def evict(self, *, older_than_s: float | None = None, keep: int | None = None) -> int:
        """Delete entries not used for ``older_than_s`` seconds and/or all but the ``keep`` most recently
        used (:func:`eviction_victims`). Returns the number removed.

        Raises:
            ValueError: neither criterion given, or a negative (or NaN) one."""
        ...

    def clear(self) -> int:
        """Delete every answer and the lookup counts. Returns the bytes the store held before."""
        ...


def empty_stats(kind: str, where: str, path: str | None, nbytes: int = 0) -> dict[str, Any]:
    """:meth:`AnswerAdmin.stats` of a store that holds nothing yet."""
    return {"store": kind, "where": where, "path": path, "entries": 0, "partitions": 0, "namespaces": {}, "hits": 0,
            "bytes": nbytes, "oldest": None, "newest": None, "lookups": 0, "lookup_hits": 0, "lookup_misses": 0,
            "hit_rate": None}


def lookup_counts(hits: int, misses: int) -> dict[str, Any]:
    """The lookup fields of :meth:`AnswerAdmin.stats` from the stored hit and miss counts."""
    return {"lookups": hits + misses, "lookup_hits": hits, "lookup_misses": misses,
            "hit_rate": hits / (hits + misses) if hits + misses else None}


def eviction_victims(rows: Sequence[AnswerRow], older_than_s: float | None, keep: int | None) -> list[int]:
    """Ids of ``rows`` (most recently used first) unused for ``older_than_s`` seconds or past the first
    ``keep``: the one eviction rule of every :class:`AnswerAdmin`.

    Raises:
        ValueError: neither criterion given, or a negative (or NaN) one.
    """
    if older_than_s is None and keep is None:
        raise ValueError("give --older-than SECONDS and/or --keep N")
    if (older_than_s is not None and not older_than_s >= 0) or (keep is not None and keep < 0):  # NaN too
        raise ValueError("--older-than and --keep must be >= 0")
    victims = set()
    if older_than_s is not None:
        cut = time.time() - older_than_s
        victims |= {r.id for r in rows if r.accessed < cut}
    if keep is not None:
        victims |= {r.id for r in rows[keep:]}
    return sorted(victims)


__all__ = ["AnswerAdmin", "AnswerRow", "empty_stats", "eviction_victims", "lookup_counts"]
