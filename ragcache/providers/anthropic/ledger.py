"""Breakpoints that only ever write: which breakpoint classes pay, learned from the usage read back.

A cache write costs 1.25x the input price (2x for "1h"), a read 0.1x: a breakpoint pays only when
what it writes is read by a later request. When the prefix up to a breakpoint differs on every
request (different documents each time), its class writes every time and is never read, and
caching costs more than not caching (1.24x over 20 such requests). :class:`WriteLedger` keeps, per
breakpoint class (the position class of :func:`~ragcache.providers.anthropic.breakpoints.add_breakpoints`:
system, tools, history, last-stable, lookback) and per scope (a tenant at the proxy), how many of
its writes since its last read went unread; after ``stop_after`` of them the class is no longer
placed, except

- on a prefix seen before within its TTL (a repeat: the write, or the entry, will be read), and
- once every ``probe_every`` requests (a probe: another process may share the provider's cache, or
  the workload may have changed); a probe that is written and not read doubles the interval, up to
  ``max_probe_every``.

A read by the class resets it. The placement notes say when a class is not placed and why, and the
usage record's diagnosis says once that its writes were a net cost. Only ragcache's own markers
are judged: the caller's are the caller's choice.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ragcache.providers.anthropic.blocks import TTL_SECONDS

if TYPE_CHECKING:
    from ragcache.providers.anthropic.breakpoints import CachedRequest


@dataclass(slots=True)
class ClassRecord:
    """One breakpoint class in one scope: ``unread`` writes since its last read and the tokens they
    wrote, requests skipped since the class stopped being placed or last probed, the probe interval
    (requests), whether the last placement was a probe, and the read / write counts in all."""

    unread: int = 0
    unread_tokens: int = 0
    skipped: int = 0
    probe_every: int = 8
    probing: bool = False
    reads: int = 0
    writes: int = 0


class WriteLedger:
    """Decides whether a breakpoint class still pays, from the reads and writes it was seen to cause.

    Args:
        stop_after: unread writes in a row after which a class is no longer placed (>= 1).
        probe_every: requests between two probes of a class that is not placed (>= 1).
        max_probe_every: longest interval, in requests, after doublings.
        clock: seconds, for the TTL of remembered prefixes.
        max_prefixes: prefix hashes remembered per scope (oldest forgotten first).

    Raises:
        ValueError: a count below 1.
    """

    def __init__(self, *, stop_after: int = 2, probe_every: int = 8, max_probe_every: int = 64,
                 clock: Callable[[], float] = time.monotonic, max_prefixes: int = 4096) -> None:
        if min(stop_after, probe_every, max_probe_every, max_prefixes) < 1:
            raise ValueError("stop_after, probe_every, max_probe_every and max_prefixes must be >= 1")
        self.stop_after, self.probe_every, self.max_probe_every = stop_after, probe_every, max(probe_every,
                                                                                                max_probe_every)
        self.clock = clock
        self.max_prefixes = max_prefixes
        self.classes: dict[tuple[str, str], ClassRecord] = {}
        self._seen: dict[str, OrderedDict[str, float]] = {}

    def _class(self, scope: str, klass: str) -> ClassRecord:
        return self.classes.setdefault((scope, klass), ClassRecord(probe_every=self.probe_every))

    def skip(self, klass: str, prefix_hash: str, ttl: str = "5m", *, scope: str = "") -> str | None:
        """Why a ragcache breakpoint of class ``klass`` on the prefix ``prefix_hash`` should not be
        placed, or ``None`` to place it. Remembers the prefix (a later request on it is a repeat)."""
        now = self.clock()
        seen = self._seen.setdefault(scope, OrderedDict())
        last = seen.pop(prefix_hash, None)
        seen[prefix_hash] = now
        while len(seen) > self.max_prefixes:
            seen.popitem(last=False)
        rec = self._class(scope, klass)
        if rec.unread < self.stop_after or (last is not None and now - last <= TTL_SECONDS.get(ttl, 300.0)):
            return None
        rec.skipped += 1
        if rec.skipped >= rec.probe_every:
            rec.skipped, rec.probing = 0, True
            return None
        return (f"{klass} breakpoint not placed: its last {rec.unread} cache writes ({rec.unread_tokens} tokens, "
                f"1.25x the input price each) were never read, a net cost; tried again in "
                f"{rec.probe_every - rec.skipped} request(s), or at once when this prefix repeats")

    def observe(self, req: CachedRequest, rec: Any) -> list[str]:
        """Account which of ``req``'s ragcache breakpoints were read and which written, from ``rec`` (its
        :class:`~ragcache.providers.anthropic.usage.UsageRecord`; prefix lengths scaled to the provider's
        token count); return the diagnosis lines (a class whose writes just became a net cost)."""
        scope = str(req.meta.get("scope", ""))
        scale = rec.prompt_tokens / max(1, sum(req.block_tokens))  # adapter counts -> provider counts
        read, cached = rec.cache_read_tokens, rec.cache_read_tokens + rec.cache_write_tokens
        out: list[str] = []
        covered = read
        for p in sorted(req.placed, key=lambda p: p.index):
            est = p.prefix_tokens * scale
            if p.origin != "ragcache":
                covered = max(covered, round(est))
                continue
            c = self._class(scope, p.position or p.role)
            if read and est <= read * 1.01 + 1:
                c.unread, c.unread_tokens, c.skipped, c.probe_every, c.probing = 0, 0, 0, self.probe_every, False
                c.reads += 1
            elif rec.cache_write_tokens and est <= cached * 1.01 + 1:
                c.writes += 1
                c.unread += 1
                c.unread_tokens += max(0, round(est) - covered)
                if c.probing:
                    c.probe_every, c.probing = min(2 * c.probe_every, self.max_probe_every), False
                if c.unread == self.stop_after:
                    out.append(f"the {p.position or p.role} breakpoint ({p.where}) wrote the cache {c.unread} times "
                               f"({c.unread_tokens} tokens at 1.25x the input price) and was never read: a net cost "
                               "(the prefix up to it differs on every request); it is no longer placed, but tried "
                               f"again every {c.probe_every} requests and whenever its prefix repeats")
            covered = max(covered, round(est))
        return out


__all__ = ["ClassRecord", "WriteLedger"]
