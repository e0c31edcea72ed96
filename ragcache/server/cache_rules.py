"""Anthropic's documented prompt-caching rules, as a state machine (the local server's cache).

For one request (blocks in tools -> system -> messages order, their token counts
and chained prefix hashes, see :mod:`ragcache.providers.anthropic.blocks`):

1. **Read.** Each breakpoint at block ``b`` looks for a live entry whose prefix
   ends at ``b, b-1, ..., b-20`` (the 20-block lookback); the longest prefix
   found over all breakpoints is read (``cache_read_input_tokens``) and its
   TTL is refreshed (a hit restarts the 5-minute or 1-hour clock).
2. **Write.** Every breakpoint after the read position whose prefix holds at
   least the model's minimum cacheable tokens writes an entry with its TTL. The
   tokens between the read position and the last written breakpoint are
   ``cache_creation_input_tokens``, split by the TTL of the breakpoint that
   covers them (``ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``).
3. **Input.** The rest (after the last breakpoint used) is ``input_tokens``;
   input + creation + read = the prompt's total.

Entries are keyed by the exact prefix hash, which includes the model, so
nothing is shared across models. Below the minimum nothing is cached and the
usage says nothing beyond write = read = 0, as with the real API.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ragcache.providers.anthropic.blocks import LOOKBACK_BLOCKS, TTL_SECONDS, FlatBlock
from ragcache.providers.anthropic.pricing import min_cacheable_tokens


@dataclass(slots=True)
class CacheEntry:
    """A cached prefix: its token count, TTL label and expiry (clock seconds)."""

    tokens: int
    ttl: str
    expires_at: float


@dataclass(slots=True)
class CacheOutcome:
    """Usage of one request: ``input_tokens`` (uncached), ``read_tokens``,
    ``write_5m`` / ``write_1h`` (cache creation by TTL), ``total_tokens``, the block
    index read from (None on a miss) and the block indices written."""

    input_tokens: int
    read_tokens: int
    write_5m: int
    write_1h: int
    total_tokens: int
    read_at: int | None = None
    written_at: list[int] = field(default_factory=list)

    @property
    def write_tokens(self) -> int:
        return self.write_5m + self.write_1h

    def usage(self, output_tokens: int) -> dict:
        """The ``usage`` object as the Messages API reports it."""
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.write_tokens,
            "cache_read_input_tokens": self.read_tokens,
            "cache_creation": {"ephemeral_5m_input_tokens": self.write_5m, "ephemeral_1h_input_tokens": self.write_1h},
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }


class ProviderPromptCache:
    """Prefix-keyed cache entries with TTL, lookback and per-model minimums.

    Args:
        min_tokens: one minimum for every model, or family -> minimum overrides of
            :data:`ragcache.providers.anthropic.pricing.MIN_CACHEABLE_TOKENS`.
        clock: seconds (monotonic by default); tests pass a fake clock to expire entries.
        max_entries: entries kept (least recently used dropped first).
    Thread-safe.
    """

    def __init__(
        self,
        *,
        min_tokens: Mapping[str, int] | int | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 100_000,
    ) -> None:
        self.min_tokens = min_tokens
        self.clock = clock
        self.max_entries = max_entries
        self._entries: OrderedDict[str, CacheEntry] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def minimum(self, model: str) -> int:
        return min_cacheable_tokens(model, self.min_tokens)

    def apply(
        self, model: str, blocks: Sequence[FlatBlock], block_tokens: Sequence[int], hashes: Sequence[str]
    ) -> CacheOutcome:
        """Run the read / write rules for one request and update the entries."""
        if not (len(blocks) == len(block_tokens) == len(hashes)):
            raise ValueError("blocks, block_tokens and hashes must have the same length")
        cum: list[int] = []
        total = 0
        for n in block_tokens:
            total += int(n)
            cum.append(total)
        bps = [b.index for b in blocks if b.cache_control is not None]
        now = self.clock()
        with self._lock:
            for k in [k for k, e in self._entries.items() if e.expires_at <= now]:
                del self._entries[k]
            read_at = None
            for b in bps:
                for j in range(b, max(-1, b - LOOKBACK_BLOCKS - 1), -1):
                    if hashes[j] in self._entries:
                        if read_at is None or j > read_at:
                            read_at = j
                        break
            read = cum[read_at] if read_at is not None else 0
            if read_at is not None:
                e = self._entries[hashes[read_at]]
                e.expires_at = now + TTL_SECONDS[e.ttl]
                self._entries.move_to_end(hashes[read_at])
            minimum = self.minimum(model)
            written: list[int] = []
            w5 = w1 = 0
            pos = read
            for b in bps:
                if (read_at is not None and b <= read_at) or cum[b] < minimum:
                    continue
                ttl = blocks[b].ttl or "5m"
                self._entries[hashes[b]] = CacheEntry(cum[b], ttl, now + TTL_SECONDS[ttl])
                self._entries.move_to_end(hashes[b])
                if ttl == "1h":
                    w1 += cum[b] - pos
                else:
                    w5 += cum[b] - pos
                pos = cum[b]
                written.append(b)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return CacheOutcome(total - pos, read, w5, w1, total, read_at, written)
