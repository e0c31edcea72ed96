"""Anthropic prompt caching, client side: request building, breakpoints, usage and cost.

Modules: :mod:`.blocks` (requests as flat cacheable blocks), :mod:`.breakpoints`
(placement), :mod:`.usage` (usage, cost, miss diagnosis), :mod:`.pricing`
(prices, minimum cacheable lengths), :mod:`.backend` (SDK backend). The local
Anthropic-compatible server is :mod:`ragcache.server`.
"""

from ragcache.providers.anthropic.backend import AnthropicBackend, AnthropicCaching
from ragcache.providers.anthropic.breakpoints import (
                                            Breakpoint,
                                            CachedRequest,
                                            SkippedBreakpoint,
                                            add_breakpoints,
                                            estimate_tokens,
                                            layout_request,
)
from ragcache.providers.anthropic.pricing import MIN_CACHEABLE_TOKENS, PRICES, ModelPrice, min_cacheable_tokens, price_for
from ragcache.providers.anthropic.usage import CacheMonitor, CacheStats, PromptCacheWarning, UsageRecord

__all__ = [
    "AnthropicBackend", "AnthropicCaching", "Breakpoint", "CacheMonitor", "CacheStats", "CachedRequest",
    "MIN_CACHEABLE_TOKENS", "ModelPrice", "PRICES", "PromptCacheWarning", "SkippedBreakpoint",
    "UsageRecord", "add_breakpoints", "estimate_tokens", "layout_request", "min_cacheable_tokens", "price_for",
]
