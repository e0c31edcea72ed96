"""The embedded store's in-memory state: one :class:`Entry` per stored answer, one :class:`Partition`
per partition digest (its FAISS index, its same-words map and its words for typo correction)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ragcache.semantic.budget import AnswerBudget
from ragcache.semantic.speller import PartitionSpeller
from ragcache.semantic.stores.index import PartitionIndex


@dataclass(slots=True)
class Entry:
    id: int
    partition: str
    question: str
    exact: str
    answer: str
    metadata: dict
    created: float
    expires: float | None
    hits: int = 0
    budget: AnswerBudget = field(default_factory=AnswerBudget)


@dataclass(slots=True)
class Partition:
    key: str
    namespace: str
    docs: tuple[str, ...]
    index: PartitionIndex
    exact: dict[str, set[int]] = field(default_factory=dict)
    speller: PartitionSpeller = field(default_factory=PartitionSpeller)
