"""Deprecated import path: moved to :mod:`ragcache.engine.prefix.cache` (issue 23: the engine in rooms). Kept so that
``from ragcache.engine.prefix_cache import ...`` keeps working; new code imports from the new module."""

from __future__ import annotations

from ragcache.engine.prefix.cache import KVBlock, PrefixCache, PrefixCacheStats, PrefixMatch  # noqa: F401

__all__ = ["KVBlock", "PrefixCache", "PrefixCacheStats", "PrefixMatch"]
