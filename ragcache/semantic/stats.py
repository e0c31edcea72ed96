"""Counters of a semantic cache: hit rate, guard rejections by reason, lookup time (``to_dict``: the
counters, ``hit_rate`` and the mean / p50 / p99 lookup time in milliseconds)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ragcache.counters import Counters


@dataclass(slots=True)
class SemanticStats(Counters):
    """Snapshot of a :class:`~ragcache.semantic.SemanticCache`'s counters.

    Attributes:
        lookups, hits, misses: lookup outcomes (``hits + misses == lookups``).
        rejections: guard rejections by reason (one per rejected candidate).
        rejected_lookups: misses where a candidate reached the threshold but every
            such candidate was rejected by a guard (false hits prevented).
        stores, evictions (LRU), expirations (TTL), invalidations (entries dropped by
            ``invalidate``/``clear``).
        lookup_time_s, embed_time_s, search_time_s: totals in seconds (search = FAISS + guards).
        recent_lookup_s: the last lookup durations (seconds), for percentiles.
        explorations: misses a ``max_error`` cache chose in order to learn (its candidate's answer was
            not served; the fresh answer, once stored, is compared with it). Counted in ``misses``,
            never in ``hits``.
        outcomes_correct, outcomes_wrong: explorations resolved (the cached answer would have been
            right / wrong).
    """

    SHOWN = (("hit_rate", "misses"), ("mean_lookup_ms", "search_time_s"), ("p50_lookup_ms", "search_time_s"),
             ("p99_lookup_ms", "search_time_s"))
    HIDDEN = frozenset({"recent_lookup_s"})

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    rejections: dict[str, int] = field(default_factory=dict)
    rejected_lookups: int = 0
    stores: int = 0
    evictions: int = 0
    expirations: int = 0
    invalidations: int = 0
    lookup_time_s: float = 0.0
    embed_time_s: float = 0.0
    search_time_s: float = 0.0
    recent_lookup_s: deque[float] = field(default_factory=lambda: deque(maxlen=4096), repr=False)  # percentiles, not a screenful
    explorations: int = 0
    outcomes_correct: int = 0
    outcomes_wrong: int = 0

    @property
    def mean_lookup_ms(self) -> float | None:
        """Mean lookup time in milliseconds (``None`` before the first lookup)."""
        return self.lookup_time_s / self.lookups * 1e3 if self.lookups else None

    @property
    def p50_lookup_ms(self) -> float | None:
        """Median of the recent lookup times in milliseconds (``None`` when none)."""
        return self.lookup_ms(50) if self.recent_lookup_s else None

    @property
    def p99_lookup_ms(self) -> float | None:
        """99th percentile of the recent lookup times in milliseconds (``None`` when none)."""
        return self.lookup_ms(99) if self.recent_lookup_s else None

    def lookup_ms(self, q: float) -> float:
        """Percentile ``q`` in [0, 100] of the recent lookup times, in milliseconds (nan when none)."""
        if not self.recent_lookup_s:
            return float("nan")
        return float(np.percentile(np.fromiter(self.recent_lookup_s, float), q) * 1e3)

    def record_lookup(self, seconds: float, embed_s: float, rejected: list[str], hit: bool,
                      explored: bool = False) -> None:
        """Account one lookup: its time (seconds, of which ``embed_s`` embedding), the guard reasons
        that rejected candidates at or above the threshold, whether it hit, and whether it was an
        exploration (a miss). Callers hold their lock."""
        self.lookups += 1
        self.lookup_time_s += seconds
        self.embed_time_s += embed_s
        self.search_time_s += seconds - embed_s
        self.recent_lookup_s.append(seconds)
        for r in rejected:
            self.rejections[r] = self.rejections.get(r, 0) + 1
        if hit:
            self.hits += 1
        else:
            self.misses += 1
            self.rejected_lookups += bool(rejected)
            self.explorations += bool(explored)

    def record_outcome(self, correct: bool) -> None:
        """Account one resolved exploration. Callers hold their lock."""
        if correct:
            self.outcomes_correct += 1
        else:
            self.outcomes_wrong += 1

    def copy(self) -> SemanticStats:
        out = SemanticStats(**{f: getattr(self, f) for f in self.__slots__ if f not in ("rejections", "recent_lookup_s")})
        out.rejections = dict(self.rejections)
        out.recent_lookup_s = deque(self.recent_lookup_s, maxlen=4096)
        return out
