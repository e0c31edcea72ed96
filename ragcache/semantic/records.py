"""Records of a semantic lookup: the served hit and the candidates it considered."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ragcache.semantic.budget import AnswerBudget


@dataclass(frozen=True, slots=True)
class GuardVerdict:
    """Outcome of a hit decision on one candidate (a guard set, the pair model, a verifier): ``reason``
    is None when it passed, else the name of what refused it, with a human ``detail``."""

    reason: str | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclass(frozen=True, slots=True)
class SemanticHit:
    """A served answer. ``similarity`` is the cosine similarity in [-1, 1] between the (normalised,
    typo-corrected) query and ``question``, the stored question whose answer this is (for an
    over-length question: between the embedded last sentences, the rest matched exactly).
    ``budget`` is the entry's :class:`~ragcache.semantic.budget.AnswerBudget`: the finish reason,
    token budget and length the answer was stored with (``None`` fields: unknown)."""

    answer: str
    similarity: float
    question: str
    entry_id: int
    metadata: Mapping[str, Any] = field(default_factory=dict)
    partition: str = ""
    budget: AnswerBudget = field(default_factory=AnswerBudget)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One nearest stored question considered by a lookup, the guards' verdict on it, and the
    entry's decision state (a JSON object set with ``update_state``, or ``None``)."""

    entry_id: int
    question: str
    similarity: float
    verdict: GuardVerdict
    state: Mapping[str, Any] | None = None
