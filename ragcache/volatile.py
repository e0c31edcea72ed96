"""Volatile-text lint: text that changes per request (dates, times, weekdays, "today", UUIDs,
request ids, counters, epoch timestamps) found in the stable part of a prompt, where it
breaks every prefix cache; moving it out; and the first divergence between two renders.

It imports only :mod:`ragcache.hashing`: the layout, the Anthropic client side and the
``ragcache lint`` command all call down into it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ragcache.hashing import normalize_text

_VOLATILE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(rx, re.IGNORECASE))
    for kind, rx in (
        ("uuid", r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
        ("datetime", r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"),
        ("date", r"\b\d{1,2}/\d{1,2}/\d{2,4}\b"),
        (
            "date",
            r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.? \d{1,2}(?:st|nd|rd|th)?,? \d{4}\b"
            r"|\b\d{1,2}(?:st|nd|rd|th)? (?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.? \d{4}\b",
        ),
        ("time", r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?[ap]\.?m\.?)?(?![\d:])"),
        ("weekday", r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b"),
        ("relative-day", r"\b(?:today|tonight|yesterday|tomorrow|right now|current (?:date|time|day))\b"),
        ("request-id", r"\b(?:request|req|trace|session|correlation|run|message)[-_ ]?id\b\s*[:=#]?\s*[\w-]+"),
        ("request-id", r"\b(?:req|msg|run|sess)_[A-Za-z0-9]{8,}\b|\b[0-9a-f]{24,}\b"),
        ("counter", r"\b(?:request|turn|attempt|call|iteration|step|visit|counter)"
                    r"\s*(?:#|no\.?|number|count)?\s*[:=]?\s*#?\d+\b"),
        ("epoch", r"\b1[5-9]\d{8}(?:\d{3})?\b"),
    )
)
VOLATILE_METADATA_KEYS = frozenset(
    {"score", "relevance", "relevance_score", "similarity", "distance", "rank", "retrieved_at",
     "fetched_at", "timestamp", "request_id", "query", "query_time"}
)
"""Document metadata keys whose values change per request (dropped by ``lint="move"``)."""


@dataclass(frozen=True, slots=True)
class VolatileFinding:
    """Volatile text found in a stable segment: ``segment`` kind, its index among
    the segments of that kind, the pattern ``kind``, the matched text and its
    character offsets ``[start, end)`` in the segment text."""

    segment: str
    index: int
    kind: str
    text: str
    start: int
    end: int

    def describe(self) -> str:
        return f"{self.kind} {self.text!r} in {self.segment}[{self.index}] at char {self.start}"


def find_volatile(text: str, *, segment: str = "system", index: int = 0) -> list[VolatileFinding]:
    """Find text that changes per request (dates, times, weekdays, "today", UUIDs,
    request ids, counters, epoch timestamps). Overlapping matches keep the first."""
    found: list[VolatileFinding] = []
    for kind, rx in _VOLATILE_PATTERNS:
        for m in rx.finditer(text):
            if any(f.start < m.end() and m.start() < f.end for f in found):
                continue
            found.append(VolatileFinding(segment, index, kind, m.group(0), m.start(), m.end()))
    return sorted(found, key=lambda f: f.start)


def move_volatile(text: str) -> tuple[str, str, list[VolatileFinding]]:
    """Split ``text`` into (stable, moved, findings): every sentence holding volatile
    text is cut out of its line and returned in ``moved`` (joined by spaces)."""
    findings = find_volatile(text)
    if not findings:
        return text, "", []
    kept_lines: list[str] = []
    moved: list[str] = []
    for line in text.split("\n"):
        if not find_volatile(line):
            kept_lines.append(line)
            continue
        keep = []
        for sentence in re.split(r"(?<=[.!?;])\s+", line):
            (moved if find_volatile(sentence) else keep).append(sentence)
        if any(s.strip() for s in keep):
            kept_lines.append(" ".join(keep))
    return normalize_text("\n".join(kept_lines)), " ".join(s.strip() for s in moved), findings


_TOKEN_RX = re.compile(r"\s+|\w+|[^\w\s]")


def word_tokens(text: str) -> list[str]:
    """Split text into word, punctuation and whitespace tokens (a tokenizer-free proxy)."""
    return _TOKEN_RX.findall(text)


def first_divergence(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """Index of the first position where two token sequences differ (the shorter
    length when one is a prefix of the other); None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


__all__ = ["VOLATILE_METADATA_KEYS", "VolatileFinding", "find_volatile", "first_divergence", "move_volatile",
           "normalize_text", "word_tokens"]
