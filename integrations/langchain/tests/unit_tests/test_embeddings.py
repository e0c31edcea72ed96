"""RagCacheEmbeddings: langchain-tests' embeddings suites, and sharing the model with the cache."""

from __future__ import annotations

import numpy as np
import pytest
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_ragcache import RagCacheEmbeddings, RagCacheSemanticCache
from langchain_tests.integration_tests import EmbeddingsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests

from ragcache.semantic.embedding import resolve_embedder
from ragcache.testing import HashingEmbedder


class TestRagCacheEmbeddingsUnit(EmbeddingsUnitTests):
    @property
    def embeddings_class(self) -> type[RagCacheEmbeddings]:
        return RagCacheEmbeddings


class TestRagCacheEmbeddingsIntegration(EmbeddingsIntegrationTests):
    @property
    def embeddings_class(self) -> type[RagCacheEmbeddings]:
        return RagCacheEmbeddings


def test_vectors_are_normalised_and_shared(embedder) -> None:
    emb = RagCacheEmbeddings()
    assert emb.embedder is embedder  # one loaded model per process
    v = np.asarray(emb.embed_documents(["refund policy", "password reset"]))
    assert v.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    cache = RagCacheSemanticCache(embedder=emb)
    assert cache.semantic_cache.embedder.encode(["refund policy"]).shape == (1, 384)
    assert cache.semantic_cache.embedder is resolve_embedder(embedder)  # its loaded model, wrapped once


def test_only_ragcache_embeddings_are_unwrapped() -> None:
    class Lookalike:  # an `embedder` and `embed_query`, but not RagCacheEmbeddings: not unwrapped
        embedder = HashingEmbedder()

        def embed_query(self, text: str) -> list[float]:
            return [0.0]

    with pytest.raises(TypeError, match="an object with encode"):
        RagCacheSemanticCache(embedder=Lookalike(), path=None)


def test_retriever_over_the_packaged_model() -> None:
    store = InMemoryVectorStore.from_texts(
        ["Refunds take 14 days.", "Reset your password under Security.", "Shipping to Canada takes a week."],
        embedding=RagCacheEmbeddings())
    docs = store.as_retriever(search_kwargs={"k": 1}).invoke("how do I change my password")
    assert docs[0].page_content == "Reset your password under Security."
