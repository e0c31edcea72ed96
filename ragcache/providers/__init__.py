"""Provider prompt caching: Anthropic request building, breakpoints, usage and cost, and a
local Anthropic-compatible server.

Modules: :mod:`.blocks` (requests as flat cacheable blocks), :mod:`.breakpoints`
(placement), :mod:`.usage` (usage, cost, miss diagnosis), :mod:`.pricing`
(prices, minimum cacheable lengths), :mod:`.anthropic` (SDK backend),
:mod:`.cache_rules` and :mod:`.server` (the local server; needs the
``anthropic`` extra), :mod:`.lint` (``ragcache lint``).
"""

from ragcache.providers.anthropic import AnthropicBackend, AnthropicCaching, ProviderResult
from ragcache.providers.breakpoints import (
                                            Breakpoint,
                                            CachedRequest,
                                            SkippedBreakpoint,
                                            add_breakpoints,
                                            estimate_tokens,
                                            layout_request,
)
from ragcache.providers.pricing import MIN_CACHEABLE_TOKENS, PRICES, ModelPrice, min_cacheable_tokens, price_for
from ragcache.providers.usage import CacheMonitor, CacheStats, PromptCacheWarning, UsageRecord

__all__ = [
    "AnthropicBackend", "AnthropicCaching", "Breakpoint", "CacheMonitor", "CacheStats", "CachedRequest",
    "MIN_CACHEABLE_TOKENS", "ModelPrice", "PRICES", "PromptCacheWarning", "ProviderResult", "SkippedBreakpoint",
    "UsageRecord", "add_breakpoints", "estimate_tokens", "layout_request", "min_cacheable_tokens", "price_for",
]
