import asyncio

import numpy as np


def test_vectors_are_unit_length_and_match_the_ragcache_embedder(embed_model):
    v = embed_model.get_query_embedding("How do I reset my password?")
    assert len(v) == embed_model.dim == 384
    assert abs(np.linalg.norm(v) - 1.0) < 1e-4
    direct = embed_model.embedder.encode(["How do I reset my password?"])[0]
    np.testing.assert_allclose(v, direct, atol=1e-6)
    batch = embed_model.get_text_embedding_batch(["a", "b", "c"])
    assert len(batch) == 3 and all(len(x) == 384 for x in batch)
    assert asyncio.run(embed_model.aget_query_embedding("How do I reset my password?")) == v


def test_the_model_name_is_the_embedders_own():
    from llama_index.embeddings.ragcache import RagCacheEmbedding

    from ragcache.models import DEFAULT_EMBEDDER
    from ragcache.testing import HashingEmbedder

    hashing = HashingEmbedder()
    assert RagCacheEmbedding(embedder=hashing).model_name == hashing.name == "hashing-trigram-64"

    class Unnamed:  # encode alone: the name given, else the default's
        def encode(self, texts):
            return hashing.encode(texts)

    assert RagCacheEmbedding("my-model", embedder=Unnamed()).model_name == "my-model"
    assert RagCacheEmbedding(embedder=Unnamed()).model_name == DEFAULT_EMBEDDER


def test_vector_store_index_retrieves_the_right_document(index):
    nodes = index.as_retriever(similarity_top_k=1).retrieve("Where is the data of EU customers stored?")
    assert nodes[0].node.ref_doc_id == "regions"
    nodes = index.as_retriever(similarity_top_k=1).retrieve("When do password reset links expire?")
    assert nodes[0].node.ref_doc_id == "passwords"
