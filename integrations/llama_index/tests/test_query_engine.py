"""RagCacheQueryEngine with real llama-index-core objects (VectorStoreIndex, Document, retrievers)."""

import asyncio

import pytest
from llama_index.core import Document
from llama_index.core.base.response.schema import (
    AsyncStreamingResponse,
    StreamingResponse,
)
from llama_index.core.schema import QueryBundle
from llama_index.llms.ragcache import RagCacheLLM
from llama_index.query_engine.ragcache import RagCacheQueryEngine

from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.engine import LocalEngine
from ragcache.semantic import SemanticCache

Q = "How long do I have to get a refund on an annual plan?"
REWORDED = "Could you tell me how long I have to get a refund on an annual plan?"
NEGATED = "How long do I not have to get a refund on an annual plan?"


@pytest.fixture()
def semantic(embed_model):
    return SemanticCache(embedder=embed_model.embedder)


def test_semantic_layer_hits_rewording_misses_negation_and_edit(index, smol, semantic):
    llm = RagCacheLLM(LocalEngine(smol, chunk_cache=ChunkCache()), max_new_tokens=24)
    qe = RagCacheQueryEngine.from_index(index, similarity_top_k=2, llm=llm, semantic_cache=semantic)

    first = qe.query(Q)
    assert first.metadata["layer"] != "semantic" and "30 days" in str(first)
    assert {n.node.ref_doc_id for n in first.source_nodes} >= {"refunds"}
    assert first.metadata["ttft_s"] > 0 and first.metadata["prompt_tokens"] > 0

    again = qe.query(Q)
    assert again.metadata["layer"] == "semantic" and str(again) == str(first)
    assert again.metadata["similarity"] == pytest.approx(1.0, abs=1e-4)
    assert again.metadata["tokens_reused"] == 0 and len(again.source_nodes) == len(first.source_nodes)

    reworded = qe.query(REWORDED)
    assert reworded.metadata["layer"] == "semantic" and str(reworded) == str(first)
    assert reworded.metadata["cached_question"] == Q

    negated = qe.query(NEGATED)
    assert negated.metadata["layer"] != "semantic"

    # edit the refunds document: its content hash changes, so the old answer must not be served
    index.refresh_ref_docs([Document(text="Refunds: annual plans can be refunded within 14 days of purchase.",
                                     id_="refunds")])
    edited = qe.query(Q)
    assert edited.metadata["layer"] != "semantic"
    assert edited.metadata["partition"] != first.metadata["partition"]
    assert any("14 days" in n.node.get_content() for n in edited.source_nodes), [n.node.get_content() for n in edited.source_nodes]
    assert "30 days" not in str(edited)


def test_other_node_order_gives_same_prompt_and_reuses_chunk_kv(index, tiny):
    # prefix cache off so that the documents can only come from the chunk cache
    llm = RagCacheLLM(LocalEngine(tiny, chunk_cache=ChunkCache(), min_reuse_tokens=0, calibration=False, recompute_ratio=0.15,
                                  chunk_admission=1, chunk_queue=0), max_new_tokens=4, use_prefix_cache=False)
    qe = RagCacheQueryEngine.from_index(index, similarity_top_k=3, llm=llm, semantic_cache=False)
    nodes = qe.retriever.retrieve(Q)
    assert len(nodes) == 3
    a = qe.synthesize(QueryBundle(Q), nodes)
    b = qe.synthesize(QueryBundle(Q), nodes[::-1])
    c = qe.synthesize(QueryBundle(Q), nodes[1:] + nodes[:1])
    assert a.metadata["prompt_sha256"] == b.metadata["prompt_sha256"] == c.metadata["prompt_sha256"]
    assert [n.node.node_id for n in a.source_nodes] == [n.node.node_id for n in b.source_nodes]
    assert a.metadata["docs_missed"] == 3
    assert b.metadata["docs_hit"] == 3 and b.metadata["chunk_tokens_reused"] > 0 and b.metadata["layer"] == "chunk"
    prompt = qe.prepare(QueryBundle(Q), nodes).laid.messages
    assert len(prompt[-1].blocks) == 3 + 1 + 1  # one block per node, the CachePoint, the question last
    assert prompt[-1].blocks[-1].text == Q


def test_streaming_and_async(index, tiny, embed_model):
    llm = RagCacheLLM(LocalEngine(tiny, chunk_cache=ChunkCache()), max_new_tokens=6)
    sem = SemanticCache(embedder=embed_model.embedder)
    qe = RagCacheQueryEngine.from_index(index, similarity_top_k=2, llm=llm, semantic_cache=sem, streaming=True,
                                        cache_truncated=True)  # 6 tokens cut the random model's answers
    r = qe.query(Q)
    assert isinstance(r, StreamingResponse) and r.metadata["layer"] is None
    text = "".join(r.response_gen)
    assert r.metadata["layer"] in ("model", "prefix", "chunk", "prefix+chunk") and r.metadata["ttft_s"] > 0
    hit = qe.query(Q)
    assert "".join(hit.response_gen) == text and hit.metadata["layer"] == "semantic"

    async def run():
        s = await qe.aquery("Which region stores EU customer data?")
        assert isinstance(s, AsyncStreamingResponse)
        streamed = "".join([t async for t in s.async_response_gen()])
        plain = RagCacheQueryEngine.from_index(index, similarity_top_k=2, llm=llm, semantic_cache=sem,
                                               cache_truncated=True)
        h = await plain.aquery("Which region stores EU customer data?")
        return streamed, s.metadata, h

    streamed, meta, h = asyncio.run(run())
    assert meta["layer"] != "semantic" and meta["prompt_tokens"] > 0
    assert h.metadata["layer"] == "semantic" and str(h) == streamed


def test_bad_options(index, tiny):
    llm = RagCacheLLM(LocalEngine(tiny), max_new_tokens=2)
    with pytest.raises(ValueError, match="lint"):
        RagCacheQueryEngine.from_index(index, llm=llm, semantic_cache=False, lint="loud")
    with pytest.raises(ValueError, match="semantic_cache"):
        RagCacheQueryEngine.from_index(index, llm=llm, semantic_cache="yes")


def test_llm_defaults_to_settings_llm(index, tiny):
    from llama_index.core import Settings

    llm = RagCacheLLM(LocalEngine(tiny), max_new_tokens=2)
    Settings.llm = llm
    try:
        qe = RagCacheQueryEngine.from_index(index, semantic_cache=False)
        assert qe.llm is llm
    finally:
        Settings._llm = None


def test_any_other_llm_gets_plain_blocks(index, embed_model):
    from llama_index.core.base.llms.types import CachePoint
    from llama_index.core.llms import MockLLM
    from llama_index.core.postprocessor import SimilarityPostprocessor

    qe = RagCacheQueryEngine.from_index(index, llm=MockLLM(max_tokens=4), similarity_top_k=3,
                                        semantic_cache=SemanticCache(embedder=embed_model.embedder),
                                        node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=0.2)])
    r = qe.query(Q)
    # any LLM but the local engine is a provider: "provider" when it reports no cache read (one rule,
    # ragcache.backend.provider_layer; "model" is the local engine's label for "nothing reused")
    assert r.metadata["layer"] == "provider" and r.metadata["cache_markers"] == 0
    assert all(n.score >= 0.2 for n in r.source_nodes) and 1 <= len(r.source_nodes) <= 3
    msgs = qe.prepare(QueryBundle(Q), r.source_nodes).laid.messages
    assert not any(isinstance(b, CachePoint) for m in msgs for b in m.blocks)
    assert qe.query(Q).metadata["layer"] == "semantic"
