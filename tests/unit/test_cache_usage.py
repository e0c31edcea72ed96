"""The one usage record (:class:`ragcache.CacheUsage`, :class:`ragcache.BackendResult`): its token counts must add up, and a
result names a known layer."""

from __future__ import annotations

import pytest

from ragcache import BackendResult, CacheUsage


def test_cache_usage_must_add_up():
    u = CacheUsage.local(prompt_tokens=100, prefix_reused=30, chunk_reused=40, recomputed=6)
    assert (u.reused, u.computed, u.recomputed, u.cache_read) == (70, 24, 6, 70)
    p = CacheUsage.provider(input_tokens=12, cache_read=900, cache_write=88)
    assert (p.prompt_tokens, p.reused, p.computed, p.cache_write) == (1000, 900, 100, 88)
    for bad in (dict(prompt_tokens=10, reused=5, computed=4), dict(prompt_tokens=-1, computed=-1),
                dict(prompt_tokens=3, reused=1, computed=1, recomputed=2)):
        with pytest.raises(ValueError):
            CacheUsage(**bad)
    with pytest.raises(ValueError, match="unknown layer"):
        BackendResult("x", "prefix+model", CacheUsage())  # type: ignore[arg-type]
