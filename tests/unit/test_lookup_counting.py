"""One request is one lookup in the cache's hit rate: the single flight's re-read of a miss is not counted."""

import asyncio

import pytest

from ragcache.answering import AnswerPath
from ragcache.backend import BackendResult, CacheUsage
from ragcache.semantic import SemanticCache, partition_key
from ragcache.testing import HashingEmbedder
from ragcache.request import CacheRequest

PK = partition_key(namespace="n", model="m")
Q = "How long are backups kept?"


def result() -> BackendResult:
    return BackendResult("30 days", "model", CacheUsage.local(prompt_tokens=5), finish_reason="stop")


async def acall() -> BackendResult:
    return result()


def ask(path: AnswerPath, how: str, question: str = Q):
    if how == "run":
        return path.run(CacheRequest(question, None, PK), result)
    if how == "arun":
        return asyncio.run(path.arun(CacheRequest(question, None, PK), acall))
    if how == "stream":
        return list(path.stream(CacheRequest(question, None, PK), lambda: iter(["30 ", "days", result()])))[-1]

    async def collect():
        async def pieces():
            yield "30 days"
            yield result()
        return [x async for x in path.astream(CacheRequest(question, None, PK), pieces)][-1]
    return asyncio.run(collect())


@pytest.mark.parametrize("how", ["run", "arun", "stream", "astream"])
def test_a_miss_then_a_hit_are_two_lookups(tmp_path, how):
    with SemanticCache(tmp_path, embedder=HashingEmbedder()) as c:
        path = AnswerPath(c)
        assert not ask(path, how).hit
        assert ask(path, how).hit
        s = c.stats
        assert (s.lookups, s.hits, s.misses) == (2, 1, 1)
        assert (c.answer_store.counters.lookup_hits, c.answer_store.counters.lookup_misses) == (1, 1)


def test_a_caller_that_looked_first_is_not_counted_twice(tmp_path):
    with SemanticCache(tmp_path, embedder=HashingEmbedder()) as c:
        path = AnswerPath(c)
        assert path.lookup(CacheRequest(Q, None, PK)) is None  # `ragcache ask` looks before loading the model
        assert not path.run(CacheRequest(Q, None, PK), result, looked=True).hit
        assert (c.stats.lookups, c.stats.misses) == (1, 1)
