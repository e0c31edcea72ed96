"""The exact prefix KV cache: chained block hashes (model identity + KV salt at the root), ref counts, LRU."""

from __future__ import annotations

from ragcache.engine.prefix.cache import PrefixCache, PrefixCacheStats, PrefixMatch

__all__ = ["PrefixCache", "PrefixCacheStats", "PrefixMatch"]
