"""langchain-tests' BaseCache suites (sync and async) against RagCacheSemanticCache."""

from __future__ import annotations

import pytest
from langchain_core.caches import BaseCache
from langchain_ragcache import RagCacheSemanticCache
from langchain_tests.integration_tests.cache import AsyncCacheTestSuite, SyncCacheTestSuite


class TestRagCacheSemanticCacheSync(SyncCacheTestSuite):
    @pytest.fixture
    def cache(self, embedder) -> BaseCache:
        return RagCacheSemanticCache(embedder=embedder)


class TestRagCacheSemanticCacheAsync(AsyncCacheTestSuite):
    @pytest.fixture
    async def cache(self, embedder) -> BaseCache:
        return RagCacheSemanticCache(embedder=embedder)


class TestRagCacheSemanticCachePersistent(SyncCacheTestSuite):
    """The same suite on a persistent (SQLite + FAISS) cache directory."""

    @pytest.fixture
    def cache(self, embedder, tmp_path) -> BaseCache:
        return RagCacheSemanticCache(path=tmp_path / "semantic", embedder=embedder)
