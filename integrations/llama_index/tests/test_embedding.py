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


def test_vector_store_index_retrieves_the_right_document(index):
    nodes = index.as_retriever(similarity_top_k=1).retrieve("Where is the data of EU customers stored?")
    assert nodes[0].node.ref_doc_id == "regions"
    nodes = index.as_retriever(similarity_top_k=1).retrieve("When do password reset links expire?")
    assert nodes[0].node.ref_doc_id == "passwords"
