"""Streaming: token chunks, final metadata chunk, and the LLM cache when streaming.

LangChain's ``stream()`` skips the LLM cache; ChatRagCache consults it itself
(``stream_cache=True``): a cached answer streams back marked ``layer="semantic"`` (one text
chunk through ragcache's answer path, word chunks from another LangChain cache); a streamed miss
is stored for later calls.
"""

from __future__ import annotations

import pytest
from langchain_core.caches import InMemoryCache
from langchain_core.messages import AIMessageChunk, HumanMessage
from langchain_ragcache import ChatRagCache, RagCacheSemanticCache

Q = [HumanMessage("What is the boiling point of water at sea level?")]
REWORDED = [HumanMessage("At sea level, what is the boiling point of water?")]


def collect(it) -> tuple[list[AIMessageChunk], AIMessageChunk]:
    chunks = list(it)
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    return chunks, full


def test_stream_yields_tokens_then_a_final_chunk(tiny_engine_plain) -> None:
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=6)
    chunks, full = collect(llm.stream(Q))
    assert len(chunks) >= 2
    assert chunks[-1].chunk_position == "last"
    assert full.usage_metadata["output_tokens"] == 6
    assert full.response_metadata["ragcache"]["layer"] in ("model", "prefix")
    assert full.content == llm.invoke(Q).content  # greedy: the same text either way


def test_streaming_serves_and_fills_the_semantic_cache(tiny_engine_plain, embedder) -> None:
    sem = RagCacheSemanticCache(embedder=embedder, cache_truncated=True)
    # seeded sampling: the tiny random model's greedy answer is blank, and a blank answer is never stored
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=6, cache=sem, temperature=1.0, seed=3)
    _, first = collect(llm.stream(Q))
    assert first.response_metadata["ragcache"]["layer"] != "semantic"
    assert len(sem.semantic_cache) == 1  # the streamed answer was stored
    chunks, hit = collect(llm.stream(REWORDED))
    assert hit.response_metadata["ragcache"]["layer"] == "semantic"
    assert hit.response_metadata["ragcache"]["similarity"] >= 0.75
    assert hit.content == first.content
    assert chunks[-1].chunk_position == "last"
    # invoke() sees what stream() stored, and vice versa
    assert llm.invoke(REWORDED).response_metadata["ragcache"]["layer"] == "semantic"


def test_stream_cache_can_be_bypassed(tiny_engine_plain, embedder) -> None:
    sem = RagCacheSemanticCache(embedder=embedder, cache_truncated=True)
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=4, cache=sem, stream_cache=False)
    collect(llm.stream(Q))
    assert len(sem.semantic_cache) == 0
    llm.invoke(Q)
    _, again = collect(llm.stream(Q))
    assert again.response_metadata["ragcache"]["layer"] != "semantic"


def test_streaming_with_exact_cache(tiny_engine_plain) -> None:
    cache = InMemoryCache()
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=4, cache=cache)
    _, first = collect(llm.stream(Q))
    chunks, second = collect(llm.stream(Q))
    assert second.content == first.content
    assert second.response_metadata["ragcache"]["layer"] == "semantic"
    _, other = collect(llm.stream(REWORDED))  # exact cache: a reworded question misses
    assert other.response_metadata["ragcache"]["layer"] != "semantic"


async def test_astream_and_early_close(tiny_engine_plain) -> None:
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=6)
    chunks = [c async for c in llm.astream(Q)]
    assert chunks[-1].chunk_position == "last"
    text = "".join(c.content for c in chunks)
    assert text == (await llm.ainvoke(Q)).content
    agen = llm.astream(Q)
    first = await agen.__anext__()
    assert isinstance(first, AIMessageChunk)
    await agen.aclose()  # the worker thread stops; the engine is free for the next call
    assert (await llm.ainvoke(Q)).content == text


def test_stop_and_call_options(tiny_engine_plain) -> None:
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=6)
    out = llm.invoke(Q, max_tokens=3)
    assert out.usage_metadata["output_tokens"] == 3
    with pytest.raises(ValueError, match="unknown call options"):
        llm.invoke(Q, frequency_penalty=1.0)


def test_batch(tiny_engine_plain) -> None:
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=3)
    outs = llm.batch([Q, REWORDED, Q])
    assert outs[0].content == outs[2].content
    assert all(o.usage_metadata["output_tokens"] == 3 for o in outs)
