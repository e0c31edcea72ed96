"""Truncated answers: what an answer's ``finish_reason`` and token budget allow the cache to do.

An answer that stopped because it ran out of tokens (``finish_reason`` ``"length"`` from
transformers / OpenAI-style servers, ``"max_tokens"`` from Anthropic) is not the answer to the
question, only its first ``max_tokens`` tokens. Rules (issue 11, item 5):

- A truncated answer is **not stored** unless the cache was opened with ``store_truncated=True``.
- A stored truncated answer is **served only to a request with the same budget** (the same
  ``max_tokens``, which with greedy decoding reproduces the same text); never to a request with a
  larger budget (which would have got a longer answer) nor to one whose budget is not given.
- A complete answer whose length in tokens is known (``output_tokens``) is not served to a request
  whose ``max_tokens`` is smaller than that length (that request would have been cut short).

The three facts travel with the entry inside its JSON metadata under :data:`META_KEY`, so every
store (SQLite here, PostgreSQL in :mod:`ragcache.semantic.pg_cache`) keeps them without a schema
change; :func:`split_metadata` takes them out again before metadata is shown to the caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TRUNCATED_REASONS: frozenset[str] = frozenset({"length", "max_tokens", "max_new_tokens"})
"""``finish_reason`` values meaning the answer was cut at the token budget."""

META_KEY = "_ragcache_answer"
"""Key of the answer facts inside an entry's stored metadata (removed before metadata is returned)."""


@dataclass(frozen=True, slots=True)
class AnswerBudget:
    """How an answer ended and under which budget it was generated.

    Attributes:
        finish_reason: the generator's finish reason (``"stop"``, ``"length"``, ``"end_turn"``,
            ``"max_tokens"`` ...) or ``None`` when unknown (treated as complete).
        max_tokens: the request's new-token budget, or ``None`` when unknown.
        output_tokens: tokens in the answer, or ``None`` when unknown.
    """

    finish_reason: str | None = None
    max_tokens: int | None = None
    output_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_tokens", "output_tokens"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise ValueError(f"{name} must be a non-negative int or None, got {v!r}")
        if self.finish_reason is not None and not isinstance(self.finish_reason, str):
            raise ValueError(f"finish_reason must be a str or None, got {type(self.finish_reason).__name__}")

    @property
    def truncated(self) -> bool:
        """True when the answer stopped at its token budget."""
        return self.finish_reason is not None and self.finish_reason.lower() in TRUNCATED_REASONS

    def to_meta(self) -> dict[str, Any]:
        return {"finish_reason": self.finish_reason, "max_tokens": self.max_tokens,
                "output_tokens": self.output_tokens}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any] | None) -> AnswerBudget:
        if not meta:
            return cls()
        return cls(meta.get("finish_reason"), meta.get("max_tokens"), meta.get("output_tokens"))


def servable(stored: AnswerBudget, max_tokens: int | None) -> str | None:
    """Whether an answer stored with ``stored`` may be served to a request with budget ``max_tokens``.

    Returns ``None`` when it may, else a short reason (counted as the ``"budget"`` rejection).

    Raises:
        TypeError: ``max_tokens`` is not an int or None; ValueError: a negative ``max_tokens``.
    """
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool)):
        raise TypeError(f"max_tokens must be a non-negative int or None, got {type(max_tokens).__name__} "
                        f"{max_tokens!r:.40}")
    if max_tokens is not None and max_tokens < 0:
        raise ValueError(f"max_tokens must be a non-negative int or None, got {max_tokens!r}")
    if stored.truncated:
        if max_tokens is None or stored.max_tokens is None:
            return "truncated answer and the request's max_tokens is not known"
        if max_tokens != stored.max_tokens:
            return f"truncated at max_tokens={stored.max_tokens}, request has max_tokens={max_tokens}"
        return None
    if max_tokens is not None and stored.output_tokens is not None and max_tokens < stored.output_tokens:
        return f"answer has {stored.output_tokens} tokens, request allows {max_tokens}"
    return None


def merge_metadata(metadata: Mapping[str, Any] | None, budget: AnswerBudget) -> dict[str, Any]:
    """Caller metadata plus the answer facts under :data:`META_KEY` (what the store writes).

    Raises:
        ValueError: the caller's metadata already uses :data:`META_KEY`.
    """
    meta = dict(metadata or {})
    if META_KEY in meta:
        raise ValueError(f"metadata key {META_KEY!r} is reserved by ragcache; rename it")
    meta[META_KEY] = budget.to_meta()
    return meta


def split_metadata(stored: Mapping[str, Any]) -> tuple[dict[str, Any], AnswerBudget]:
    """Inverse of :func:`merge_metadata`: (caller metadata, answer facts). Old entries: facts unknown."""
    meta = dict(stored)
    return meta, AnswerBudget.from_meta(meta.pop(META_KEY, None))
