"""Truncated answers (finish_reason 'length' / 'max_tokens'): not stored by default, never served to a larger budget."""

import pytest

from ragcache.semantic import SemanticCache, partition_key
from ragcache.semantic.budget import AnswerBudget, servable
from ragcache.testing import HashingEmbedder

PK = partition_key(namespace="budget", model="m")
Q = "How do I rotate the API keys of a workspace?"


@pytest.fixture()
def cache():
    return SemanticCache(embedder=HashingEmbedder(), threshold=0.99)


@pytest.mark.parametrize("reason", ["length", "max_tokens", "LENGTH"])
def test_truncated_answer_is_not_stored_by_default(cache, reason):
    assert cache.store(Q, "Open Settings, then", partition=PK, finish_reason=reason, max_tokens=8) is None
    assert len(cache) == 0
    assert cache.lookup(Q, partition=PK, max_tokens=8) is None


@pytest.mark.parametrize("reason", ["stop", "end_turn", "stop_sequence", None])
def test_complete_answers_are_stored_and_served(cache, reason):
    i = cache.store(Q, "Open Settings > API keys > Rotate.", partition=PK, finish_reason=reason, max_tokens=64)
    assert isinstance(i, int)
    for budget in (None, 16, 64, 4096):
        hit = cache.lookup(Q, partition=PK, max_tokens=budget)
        assert hit is not None and hit.answer == "Open Settings > API keys > Rotate."
        assert hit.budget.finish_reason == reason and hit.budget.max_tokens == 64


def test_opted_in_truncated_answer_serves_only_the_same_budget():
    c = SemanticCache(embedder=HashingEmbedder(), threshold=0.99, store_truncated=True)
    assert isinstance(c.store(Q, "Open Settings, then", partition=PK, finish_reason="length", max_tokens=8), int)
    assert c.lookup(Q, partition=PK, max_tokens=8).answer == "Open Settings, then"
    for larger in (9, 64, 4096):
        assert c.lookup(Q, partition=PK, max_tokens=larger) is None
    assert c.lookup(Q, partition=PK, max_tokens=4) is None  # the smaller budget would have stopped earlier
    assert c.lookup(Q, partition=PK) is None  # unknown budget: not served
    assert c.stats.rejections.get("budget", 0) == 5
    cand = c.candidates_for(Q, partition=PK, max_tokens=64)[0]
    assert cand.verdict.reason == "budget" and "max_tokens=8" in cand.verdict.detail


def test_complete_answer_of_known_length_needs_a_budget_that_holds_it(cache):
    cache.store(Q, "Open Settings > API keys > Rotate.", partition=PK, finish_reason="stop", max_tokens=64,
                output_tokens=12)
    assert cache.lookup(Q, partition=PK, max_tokens=12) is not None
    assert cache.lookup(Q, partition=PK, max_tokens=200) is not None
    assert cache.lookup(Q, partition=PK, max_tokens=11) is None


def test_budget_survives_reopen_and_stays_out_of_metadata(tmp_path):
    with SemanticCache(tmp_path, embedder=HashingEmbedder(), threshold=0.99, store_truncated=True) as c:
        c.store(Q, "Open Settings, then", partition=PK, finish_reason="length", max_tokens=8, metadata={"k": 1})
    with SemanticCache(tmp_path, embedder=HashingEmbedder(), threshold=0.99) as c2:
        assert c2.lookup(Q, partition=PK, max_tokens=64) is None
        hit = c2.lookup(Q, partition=PK, max_tokens=8)
        assert hit is not None and hit.budget.finish_reason == "length" and dict(hit.metadata) == {"k": 1}


def test_bad_budget_arguments(cache):
    with pytest.raises(ValueError, match="max_tokens"):
        cache.store(Q, "a", partition=PK, max_tokens=-1)
    with pytest.raises(ValueError, match="max_tokens"):
        servable(AnswerBudget(), -3)
    with pytest.raises(ValueError, match="reserved"):
        cache.store(Q, "a", partition=PK, metadata={"_ragcache_answer": 1})
    cache.store(Q, "a", partition=PK)
    with pytest.raises(ValueError, match="max_tokens"):
        cache.lookup(Q, partition=PK, max_tokens=-2)
