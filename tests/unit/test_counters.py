"""One counters base (:class:`ragcache.counters.Counters`) for the five counter records: ``hit_rate`` and
``to_dict`` written once, each record's dict keys and values as before."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from ragcache.counters import Counters
from ragcache.engine.chunk.stores.base import StoreStats
from ragcache.engine.prefix.cache import PrefixCacheStats
from ragcache.providers.anthropic.usage import CacheStats
from ragcache.providers.openai.backend import OpenAIStats
from ragcache.semantic.stats import SemanticStats


@dataclass(slots=True)
class _Tally(Counters):
    RATE = ("hits", ("hits", "misses"))
    SHOWN = (("hit_rate", "hits"), ("total", None))
    HIDDEN = frozenset({"scratch"})

    hits: int = 0
    misses: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    scratch: list[int] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.hits + self.misses


def test_the_base_divides_places_hides_and_copies():
    t = _Tally(3, 1, {"number": 2}, [1])
    d = t.to_dict()
    assert list(d) == ["hits", "hit_rate", "misses", "reasons", "total"] and d["hit_rate"] == 0.75 == t.hit_rate
    assert d["reasons"] == {"number": 2} and d["reasons"] is not t.reasons  # a copy, not the live counter
    assert _Tally().hit_rate == 0.0 and not hasattr(_Tally(), "__dict__")  # slots kept


@pytest.mark.parametrize("record", [PrefixCacheStats, StoreStats, OpenAIStats, CacheStats, SemanticStats])
def test_every_counter_record_is_one_base(record):
    assert issubclass(record, Counters) and "hit_rate" not in vars(record) and "to_dict" not in vars(record)


def test_each_record_keeps_its_keys_and_rate():
    p = PrefixCacheStats(lookups=4, hits=3, tokens_looked_up=100, tokens_reused=50, blocks_inserted=7, evictions=1)
    assert p.to_dict() == {"lookups": 4, "hits": 3, "hit_rate": 0.75, "tokens_looked_up": 100, "tokens_reused": 50,
                           "blocks_inserted": 7, "evictions": 1}
    assert list(p.to_dict())[:3] == ["lookups", "hits", "hit_rate"]
    s = StoreStats(hits=3, misses=1, puts=5, evictions=2)
    assert s.to_dict() == {"hits": 3, "misses": 1, "puts": 5, "evictions": 2, "corrupt": 0, "hit_rate": 0.75}
    c = CacheStats(requests=2, input_tokens=100, cache_write_tokens=30, cache_read_tokens=50, cost_usd=0.5,
                   uncached_cost_usd=1.0)
    d = c.to_dict()
    assert list(d)[-4:] == ["prompt_tokens", "read_share", "write_share", "cost_ratio"]
    assert (d["prompt_tokens"], d["read_share"], d["write_share"], d["cost_ratio"]) == (180, 50 / 180, 30 / 180, 0.5)
    assert c.read_share == c.hit_rate and CacheStats().to_dict()["cost_ratio"] == 1.0
    o = OpenAIStats(requests=2, prompt_tokens=100, cached_tokens=40)
    assert o.read_share == o.hit_rate == 0.4 and o.to_dict()["read_share"] == 0.4 and OpenAIStats().read_share == 0.0
    m = SemanticStats(lookups=4, hits=1, misses=3, lookup_time_s=0.4)
    m.recent_lookup_s.extend([0.1, 0.3])
    d = m.to_dict()
    assert "recent_lookup_s" not in d and d["hit_rate"] == 0.25 and d["mean_lookup_ms"] == pytest.approx(100.0)
    assert d["p50_lookup_ms"] == pytest.approx(200.0) and list(d)[3] == "hit_rate"
    assert SemanticStats().to_dict()["p99_lookup_ms"] is None
