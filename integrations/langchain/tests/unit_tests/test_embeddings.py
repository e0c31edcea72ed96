"""RagCacheEmbeddings: langchain-tests' embeddings suites, and sharing the model with the cache."""

from __future__ import annotations

import numpy as np
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_ragcache import RagCacheEmbeddings, RagCacheSemanticCache
from langchain_tests.integration_tests import EmbeddingsIntegrationTests
from langchain_tests.unit_tests import EmbeddingsUnitTests


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


def test_retriever_over_the_packaged_model() -> None:
    store = InMemoryVectorStore.from_texts(
        ["Refunds take 14 days.", "Reset your password under Security.", "Shipping to Canada takes a week."],
        embedding=RagCacheEmbeddings())
    docs = store.as_retriever(search_kwargs={"k": 1}).invoke("how do I change my password")
    assert docs[0].page_content == "Reset your password under Security."
