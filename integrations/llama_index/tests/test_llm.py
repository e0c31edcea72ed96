"""RagCacheLLM on a tiny random float32 Llama: exactness, block roles, streaming, async, metadata."""

import asyncio

import pytest
from llama_index.core.base.llms.types import ImageBlock
from llama_index.core.llms import (
    CacheControl,
    CachePoint,
    ChatMessage,
    MessageRole,
    TextBlock,
)
from llama_index.llms.ragcache import RagCacheLLM, to_engine_messages, to_layout

from ragcache.prompt.layout import PromptLayout

from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.engine import LocalEngine

DOCS = [
    "Refunds: annual plans can be refunded within 30 days of purchase.",
    "Rate limits: the free tier allows 60 requests per minute.",
    "Passwords: reset links expire after 15 minutes.",
]


def _point():
    return CachePoint(cache_control=CacheControl(type="ephemeral"))


def _chat(docs, question="How long is the refund window?"):
    return [ChatMessage(role=MessageRole.SYSTEM, content="Answer from the documents."),
            ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text=d) for d in docs] + [TextBlock(text=question)])]


@pytest.fixture()
def llm(tiny):
    return RagCacheLLM(LocalEngine(tiny, chunk_cache=ChunkCache(), chunk_admission=1, chunk_queue=0), max_new_tokens=12,
                       recompute_ratio=1.0)  # every miss stored before the answer returns


def test_several_text_blocks_equal_uncached_greedy_tokens(llm, tiny):
    reference = LocalEngine(tiny)
    first = llm.chat(_chat(DOCS))
    assert first.additional_kwargs["docs_missed"] == 3
    # other order: every document comes from the chunk cache at a new position
    again = llm.chat(_chat(DOCS[::-1]))
    # documents render as <document> blocks whose shared head the exact prefix cache may hold: the prefix reused
    # is cut back to the first document, so every document, the first one too, is a chunk hit (issue 48)
    kw = again.additional_kwargs
    assert kw["docs_missed"] == 0 and kw["docs_hit"] == 3
    for resp, docs in ((first, DOCS), (again, DOCS[::-1])):
        want = reference.generate(to_engine_messages(_chat(docs)), max_new_tokens=12, use_prefix_cache=False,
                                  use_chunk_cache=False)
        assert resp.raw["token_ids"] == want.token_ids
        assert resp.message.content == want.text
    assert len(set(first.raw["token_ids"])) > 1  # the tiny model does not emit one repeated token


def test_partial_recompute_reuses_chunk_kv(tiny):
    llm = RagCacheLLM(LocalEngine(tiny, chunk_cache=ChunkCache(), min_reuse_tokens=0, calibration=False, chunk_admission=1, chunk_queue=0),
                      max_new_tokens=4, recompute_ratio=0.15)
    llm.chat(_chat(DOCS))
    r = llm.chat(_chat(DOCS[::-1], "Which tier allows 60 requests?"))
    kw = r.additional_kwargs
    assert kw["docs_hit"] == 3  # the first document too (see above)
    assert kw["chunk_tokens_reused"] > 0 and kw["layer"] in ("chunk", "prefix+chunk")
    assert kw["tokens_reused"] == kw["prefix_tokens_reused"] + kw["chunk_tokens_reused"]
    cold = llm.chat(_chat(["A document never seen before.", "Another new one."], "q?")).additional_kwargs
    assert cold["docs_hit"] == 0 and cold["chunk_tokens_reused"] == 0 and cold["layer"] in ("model", "prefix")
    assert r.raw["stats"]["recompute_ratio"] == 0.15


def test_cache_point_marks_where_documents_end():
    msgs = [ChatMessage(role=MessageRole.USER, blocks=[
        TextBlock(text="doc a"), TextBlock(text="doc b"), _point(), TextBlock(text="as of 09:14"), TextBlock(text="q?")])]
    assert [b.kind for b in to_layout(msgs).blocks()] == ["document", "document", "volatile", "question"]
    plain = [ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text="a"), TextBlock(text="q")])]
    assert [b.kind for b in to_layout(plain).blocks()] == ["document", "question"]  # all but the last are documents
    # the one rule: the same texts as plain chat messages get the same kinds through the layout itself
    assert to_layout(plain) == PromptLayout.from_messages([{"role": "user", "content": ["a", "q"]}])


def test_cache_point_keeps_volatile_text_out_of_the_chunk_cache(llm):
    msgs = [ChatMessage(role=MessageRole.USER, blocks=[
        *(TextBlock(text=d) for d in DOCS[:2]), _point(), TextBlock(text="Request 7 at 09:14."), TextBlock(text="q?")])]
    r = llm.chat(msgs)
    assert r.additional_kwargs["docs_missed"] == 2 and r.additional_kwargs["docs_hit"] == 0


def test_metadata(llm, tiny):
    md = llm.metadata
    assert md.is_chat_model and not md.is_function_calling_model
    assert md.context_window == tiny.model.config.max_position_embeddings
    assert md.num_output == 12 and md.model_name == "tiny-llama"
    assert llm.fingerprint == tiny.fingerprint.digest


def test_stream_chat_and_complete_match_chat(llm):
    full = llm.chat(_chat(DOCS))
    parts = list(llm.stream_chat(_chat(DOCS)))
    assert "".join(p.delta or "" for p in parts) == full.message.content
    assert parts[-1].message.content == full.message.content
    assert parts[-1].raw["token_ids"] == full.raw["token_ids"] and "ttft_s" in parts[-1].additional_kwargs
    c = llm.complete("Say hello.")
    s = list(llm.stream_complete("Say hello."))
    assert "".join(x.delta or "" for x in s) == c.text and s[-1].raw["token_ids"] == c.raw["token_ids"]


def test_async_forms_match_sync(llm):
    want = llm.chat(_chat(DOCS))

    async def run():
        a = await llm.achat(_chat(DOCS))
        parts = [p async for p in await llm.astream_chat(_chat(DOCS))]
        c = await llm.acomplete("Say hello.")
        sc = [p async for p in await llm.astream_complete("Say hello.")]
        return a, parts, c, sc

    a, parts, c, sc = asyncio.run(run())
    assert a.raw["token_ids"] == want.raw["token_ids"]
    assert "".join(p.delta or "" for p in parts) == want.message.content
    assert "".join(p.delta or "" for p in sc) == c.text


def test_unsupported_input_raises_clear_errors(llm):
    with pytest.raises(ValueError, match="text blocks only"):
        llm.chat([ChatMessage(role=MessageRole.USER, blocks=[ImageBlock(url="http://x/y.png"), TextBlock(text="q")])])
    with pytest.raises(ValueError, match="tool calling"):
        llm.chat([ChatMessage(role=MessageRole.TOOL, content="42")])
    with pytest.raises(ValueError, match="unknown generation arguments"):
        llm.chat(_chat(DOCS), beams=4)
    with pytest.raises(ValueError):
        RagCacheLLM(llm.engine, recompute_ratio=1.5)
