"""The query engine runs RagCache's own steps: same partition, same usage, invalidation that works (issue 10)."""

import pytest
import torch
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.llms.ragcache import RagCacheLLM
from llama_index.postprocessor.ragcache import node_segment
from llama_index.query_engine.ragcache import RagCacheQueryEngine

from ragcache import ChunkCache, LocalBackend, LocalEngine, MemoryChunkStore, RagCache, SemanticCache
from ragcache.testing import HashingEmbedder

Q = "How long do I have to get a refund on an annual plan?"
SYSTEM = "Answer from the documents."


def _nodes(index):
    return index.as_retriever(similarity_top_k=4).retrieve(Q)


def _pair(tiny, semantic=None, chunk_cache=None, **kw):
    """RagCache on a LocalBackend and a query engine on a RagCacheLLM over engines built the same way."""
    def engine():
        return LocalEngine(tiny, chunk_cache=chunk_cache() if chunk_cache else None, min_reuse_tokens=0, calibration=False,
                           recompute_ratio=0.15)

    rag = RagCache(LocalBackend(engine()), semantic=semantic, system=SYSTEM, max_new_tokens=3, temperature=0.0, **kw)
    llm = RagCacheLLM(engine(), max_new_tokens=3)
    return rag, llm


@pytest.mark.parametrize("volatile_system", [SYSTEM, SYSTEM + " Today is 2026-11-30."])
def test_same_partition_as_ragcache(index, tiny, volatile_system):
    sem = SemanticCache(None, embedder=HashingEmbedder())
    rag, llm = _pair(tiny, semantic=sem, lint="move")
    rag.system = volatile_system
    qe = RagCacheQueryEngine(index.as_retriever(similarity_top_k=4), llm, semantic_cache=sem,
                             system_prompt=volatile_system, lint="move")
    nodes = _nodes(index)
    prep = qe.prepare(QueryBundle(Q), nodes)
    segments = [node_segment(n.node) for n in prep.nodes]
    mine = rag.prepare(Q, segments)
    assert prep.partition.digest == mine.partition.digest
    assert prep.layout.segments == mine.layout.segments
    # another day's volatile text, or another node set, is another partition
    other = qe.prepare(QueryBundle(Q), nodes[:2])
    assert other.partition.digest != prep.partition.digest


def test_invalidate_through_the_query_engine(index, tiny):
    sem = SemanticCache(None, embedder=HashingEmbedder())
    llm = RagCacheLLM(LocalEngine(tiny), max_new_tokens=3)
    qe = RagCacheQueryEngine.from_index(index, similarity_top_k=2, llm=llm, semantic_cache=sem, cache_truncated=True)
    first = qe.query(Q)
    assert first.metadata["layer"] != "semantic"
    assert qe.query(Q).metadata["layer"] == "semantic"
    source = first.source_nodes[0].node
    for key in (source.ref_doc_id, source.get_content()):  # by source document id, then by text
        assert sem.invalidate(key) == 1
        assert qe.query(Q).metadata["layer"] != "semantic"


def test_same_usage_with_two_of_four_documents_cached(index, tiny):
    nodes = _nodes(index)
    segments = [node_segment(n.node) for n in nodes]

    def chunk_cache():
        return ChunkCache(MemoryChunkStore(), dtype=torch.float32)

    rag, llm = _pair(tiny, chunk_cache=chunk_cache)
    for eng in (rag.backend.engine, llm.engine):
        assert eng.chunk_cache.precompute(eng, segments[:2], progress=False) == 2
    a = rag.answer(Q, segments)
    qe = RagCacheQueryEngine(index.as_retriever(similarity_top_k=4), llm, semantic_cache=False, system_prompt=SYSTEM)
    r = qe.synthesize(QueryBundle(Q), [NodeWithScore(node=n.node, score=n.score) for n in nodes])
    u = a.usage
    assert r.metadata["usage"] == u.to_dict()
    assert u.reused + u.recomputed + u.computed == u.prompt_tokens and u.chunk_reused > 0
    assert r.metadata["docs_hit"] == a.details["docs_hit"] == 2 and r.metadata["docs_missed"] == 2
    assert r.metadata["layer"] == a.layer and r.metadata["approximate"] == a.approximate
    assert r.metadata["recompute_ratio"] == a.recompute_ratio
