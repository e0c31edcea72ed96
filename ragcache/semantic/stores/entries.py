"""The embedded store's in-memory state: one :class:`Entry` per stored answer, one :class:`Partition`
per partition digest (its FAISS index, its same-words map and its words for typo correction).

Memory follows the index, not the stored bytes: an entry holds its id, partition, question and times,
never its answer or metadata (read from SQLite for the candidates of a lookup), and ``nbytes``, the
stored size of its answer and metadata (for the byte budget)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ragcache.semantic.speller import PartitionSpeller
from ragcache.semantic.stores.index import PartitionIndex


@dataclass(slots=True)
class Entry:
    id: int
    partition: str
    question: str
    exact: str
    created: float
    expires: float | None
    hits: int = 0
    nbytes: int = 0


@dataclass(slots=True)
class Partition:
    key: str
    namespace: str
    docs: tuple[str, ...]
    index: PartitionIndex
    exact: dict[str, set[int]] = field(default_factory=dict)
    speller: PartitionSpeller = field(default_factory=PartitionSpeller)
