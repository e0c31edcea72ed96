"""Reading back prompt-cache usage: per-request records, cumulative stats, cost, miss diagnosis.

The Messages API reports ``input_tokens`` (after the last cache breakpoint),
``cache_creation_input_tokens`` (written, split by TTL in ``cache_creation``)
and ``cache_read_input_tokens``; their sum is the prompt's size. Cost is
computed against the same request without caching (reads 0.1x, 5-minute
writes 1.25x, 1-hour writes 2x the input price, see :mod:`.pricing`).

:class:`CacheMonitor` remembers which prefixes earlier requests cached and warns
(:class:`PromptCacheWarning`) when a request that should have read the cache
wrote it instead, naming the likely cause: the prefix changed at block N, the
entry's TTL expired, or the prefix is below the model's minimum.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ragcache.backend import CacheUsage, FinishReason
from ragcache.counters import Counters
from ragcache.providers.anthropic.blocks import LOOKBACK_BLOCKS, TTL_SECONDS, thinking_setting
from ragcache.providers.anthropic.blocks import PromptCacheWarning as PromptCacheWarning  # re-exported
from ragcache.providers.anthropic.breakpoints import CachedRequest
from ragcache.providers.anthropic.provider import ANTHROPIC, FINISH_REASONS  # noqa: F401 - FINISH_REASONS re-exported
from ragcache.providers.anthropic.pricing import ModelPrice, price_for, request_cost

if TYPE_CHECKING:
    from ragcache.providers.anthropic.ledger import WriteLedger


def finish_reason(stop_reason: Any) -> FinishReason:
    """An Anthropic ``stop_reason`` in ragcache's words, by the provider's row
    (:data:`ragcache.providers.anthropic.provider.FINISH_REASONS`; ``None`` or unknown: ``incomplete``)."""
    return ANTHROPIC.finish_reason(stop_reason)


@dataclass(frozen=True, slots=True)
class MessageRead:
    """What a Messages response says, read once (:func:`read_message`).

    Attributes:
        text: the text blocks joined.
        finish_reason: :func:`finish_reason` of ``stop_reason``.
        stop_reason / stop_sequence: the native values.
        only_text: every content block is text (no tool use, thinking, server tool blocks).
        model: the model the response names.
    """

    text: str
    finish_reason: FinishReason
    stop_reason: str | None
    stop_sequence: str | None
    only_text: bool
    model: str | None


def read_message(message: Any) -> MessageRead:
    """Read an Anthropic message (SDK ``Message`` or its dict; also a stream's final snapshot, whose
    ``stop_reason`` is ``None`` when the stream was cut before its end)."""
    blocks = _get(message, "content", None) or []
    kinds = [_get(b, "type", "") for b in blocks]
    text = "".join(_get(b, "text", "") for b, k in zip(blocks, kinds, strict=True) if k == "text")
    stop = _get(message, "stop_reason", None)
    seq = _get(message, "stop_sequence", None)
    model = _get(message, "model", None)
    return MessageRead(text, finish_reason(stop), stop if isinstance(stop, str) else None,
                       seq if isinstance(seq, str) else None, all(k == "text" for k in kinds),
                       model if isinstance(model, str) else None)


def _get(obj: Any, name: str, default: Any = 0) -> Any:
    if obj is None:
        return default
    v = obj.get(name, default) if isinstance(obj, Mapping) else getattr(obj, name, default)
    return default if v is None else v


@dataclass(slots=True)
class UsageRecord:
    """One response's usage in tokens and its cost in USD (with and without caching)."""

    input_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    cache_write_5m: int
    cache_write_1h: int
    output_tokens: int
    cost_usd: float
    uncached_cost_usd: float
    diagnosis: list[str] = field(default_factory=list)

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens

    @classmethod
    def from_usage(cls, usage: Any, price: ModelPrice) -> UsageRecord:
        """From an SDK ``Usage`` object or its dict form. The token fields are read by the provider's
        usage dialect (:func:`ragcache.providers.anthropic.provider.read_usage`, the one mapping); only
        the TTL split of the cache write (``cache_creation``) is read here."""
        c = ANTHROPIC.read_usage(usage)
        inp, write, read, out = c.input_tokens, c.cache_write, c.cache_read, c.completion_tokens
        split = _get(usage, "cache_creation", None)
        w1 = int(_get(split, "ephemeral_1h_input_tokens")) if split is not None else 0
        w5 = int(_get(split, "ephemeral_5m_input_tokens")) if split is not None else write
        cost, uncached = request_cost(price, input_tokens=inp, write_5m=w5, write_1h=w1, read=read, output_tokens=out)
        return cls(inp, write, read, w5, w1, out, cost, uncached)

    def usage(self) -> CacheUsage:
        """This record as :class:`~ragcache.backend.CacheUsage` (with its costs)."""
        return CacheUsage.provider(input_tokens=self.input_tokens, cache_read=self.cache_read_tokens,
                                   cache_write=self.cache_write_tokens, completion_tokens=self.output_tokens,
                                   cost_usd=self.cost_usd, uncached_cost_usd=self.uncached_cost_usd)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "prompt_tokens": self.prompt_tokens}


@dataclass(slots=True)
class CacheStats(Counters):
    """Cumulative provider-cache accounting over a session (tokens, USD); ``hit_rate`` (= :attr:`read_share`)
    is the share of prompt tokens read from the cache."""

    RATE = ("cache_read_tokens", "prompt_tokens")
    SHOWN = (("prompt_tokens", None), ("read_share", None), ("write_share", None), ("cost_ratio", None))

    requests: int = 0
    input_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    uncached_cost_usd: float = 0.0
    warnings: int = 0

    def add(self, r: UsageRecord) -> None:
        self.requests += 1
        self.input_tokens += r.input_tokens
        self.cache_write_tokens += r.cache_write_tokens
        self.cache_read_tokens += r.cache_read_tokens
        self.cache_write_5m += r.cache_write_5m
        self.cache_write_1h += r.cache_write_1h
        self.output_tokens += r.output_tokens
        self.cost_usd += r.cost_usd
        self.uncached_cost_usd += r.uncached_cost_usd
        self.warnings += bool(r.diagnosis)

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens

    @property
    def read_share(self) -> float:
        """Fraction of prompt tokens read from the cache (the hit rate in tokens)."""
        return self.hit_rate

    @property
    def write_share(self) -> float:
        return self.cache_write_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def cost_ratio(self) -> float:
        """Cost relative to the same requests without caching (1.0 = no saving)."""
        return self.cost_usd / self.uncached_cost_usd if self.uncached_cost_usd else 1.0


@dataclass(slots=True)
class _Known:
    block_index: int
    tokens: int
    ttl: str
    last_used: float


def _thinking_words(setting: Mapping[str, Any] | None) -> str:
    if setting is None:
        return "off"
    budget = setting.get("budget_tokens")
    return str(setting.get("type")) + (f", budget {budget} tokens" if budget is not None else "")


class CacheMonitor:
    """Keeps :class:`CacheStats` and diagnoses misses for one model.

    Args:
        model: model id (for prices).
        prices: price overrides by model family.
        clock: seconds; must tick like the provider's clock for TTL diagnosis.
        warn: emit :class:`PromptCacheWarning` for each diagnosis (always recorded
            in :attr:`UsageRecord.diagnosis`).
        ledger: a :class:`~ragcache.providers.anthropic.ledger.WriteLedger` told of every response
            (its diagnosis, a breakpoint class whose writes are a net cost, joins the record's).
    """

    def __init__(self, model: str, *, prices: Mapping[str, ModelPrice] | None = None,
                 clock: Callable[[], float] = time.monotonic, warn: bool = True,
                 ledger: WriteLedger | None = None) -> None:
        self.model = model
        self.price, self.price_exact = price_for(model, prices)
        self.clock = clock
        self.warn = warn
        self.stats = CacheStats()
        self.history: list[UsageRecord] = []
        self._known: dict[str, _Known] = {}
        self._last: CachedRequest | None = None
        self.ledger = ledger

    def record(self, req: CachedRequest, usage: Any) -> UsageRecord:
        """Account one response's ``usage`` for the request that produced it."""
        rec = UsageRecord.from_usage(usage, self.price)
        now = self.clock()
        rec.diagnosis = self._diagnose(req, rec, now) + (self.ledger.observe(req, rec) if self.ledger else [])
        for msg in rec.diagnosis:
            if self.warn:
                warnings.warn(msg, PromptCacheWarning, stacklevel=3)
        cached_upto = rec.cache_read_tokens + rec.cache_write_tokens
        scale = rec.prompt_tokens / max(1, sum(req.block_tokens))  # adapter counts -> provider counts
        for p in req.placed:
            est = p.prefix_tokens * scale
            if cached_upto and est <= cached_upto * 1.01 + 1:
                self._known[req.hashes[p.index]] = _Known(p.index, round(est), p.ttl, now)
        self._last = req
        self.stats.add(rec)
        self.history.append(rec)
        return rec

    def _diagnose(self, req: CachedRequest, rec: UsageRecord, now: float) -> list[str]:
        out: list[str] = []
        if req.placed and rec.cache_write_tokens == 0 and rec.cache_read_tokens == 0:
            out.append(f"no cache write or read although {len(req.placed)} breakpoint(s) were sent: the prefix "
                       f"({rec.prompt_tokens} prompt tokens in all) is likely below the minimum cacheable length "
                       f"{req.minimum} for {req.model}")
        unplaced = [s for s in req.skipped if s.reason != "write-only"]  # the ledger's own choice is said once
        if not req.placed and unplaced:
            out.append("no breakpoint placed: " + "; ".join(s.detail for s in unplaced))
        expected = [(self._known[h], i) for i, h in enumerate(req.hashes) if h in self._known]
        if expected:
            k, i = max(expected, key=lambda e: e[1])
            reachable = any(0 <= p.index - i <= LOOKBACK_BLOCKS for p in req.placed)
            if rec.cache_read_tokens < 0.9 * k.tokens:
                age = now - k.last_used
                before = thinking_setting(self._last.kwargs) if self._last is not None else None
                after = thinking_setting(req.kwargs)
                if age > TTL_SECONDS[k.ttl]:
                    out.append(f"expected a cache read up to {req.blocks[i].where} ({k.tokens} tokens) but it was "
                               f"written again: its {k.ttl} TTL expired ({age:.0f} s since last use)")
                elif before != after and req.blocks[i].section == "messages":
                    out.append(f"expected a cache read up to {req.blocks[i].where} ({k.tokens} tokens), got "
                               f"{rec.cache_read_tokens}: the thinking settings changed ({_thinking_words(before)} -> "
                               f"{_thinking_words(after)}) since the previous request, and a change of thinking "
                               "settings invalidates the cached messages: the API reads only the tools and system "
                               "part and writes the messages again (keep thinking settings fixed within a "
                               "conversation)")
                elif not reachable:
                    out.append(f"the entry cached up to {req.blocks[i].where} is more than {LOOKBACK_BLOCKS} blocks "
                               "before every breakpoint of this request (the lookback cannot reach it)")
                else:
                    out.append(f"expected a cache read up to {req.blocks[i].where} ({k.tokens} tokens), got "
                               f"{rec.cache_read_tokens}: the entry was evicted or is not shared (other workspace "
                               "or model)")
        elif rec.cache_write_tokens and self._last is not None and self._last.placed:
            prev = self._last
            n = next((j for j, (a, b) in enumerate(zip(prev.hashes, req.hashes, strict=False)) if a != b),
                     min(len(prev.hashes), len(req.hashes)))
            prev_cached = max((p.index for p in prev.placed), default=-1)
            if n <= prev_cached and n < len(req.blocks):
                out.append(f"cache written instead of read: the prefix changed at block {n} ({req.blocks[n].where}, "
                           f"{req.blocks[n].section}) compared with the previous request, which cached up to "
                           f"block {prev_cached}")
        return out
