"""The local engine through the pipeline: precomputed documents are chunk hits with usage that adds up, the async answer
is the sync one, and an async stream that is left or fails releases the engine."""

from __future__ import annotations

import asyncio
import threading

import pytest
from pipeline_doubles import DOCS

from ragcache import (
    Answer,
    ChunkCache,
    LocalBackend,
    LocalEngine,
    MemoryChunkStore,
    RagCache,
)


def test_precomputed_documents_are_chunk_hits_and_usage_adds_up(tiny_wide3):
    cc = ChunkCache(MemoryChunkStore(), dtype=__import__("torch").float32)
    # blend even small documents, at an explicit r (without a calibration record an engine prefills exactly)
    engine = LocalEngine(tiny_wide3, chunk_cache=cc, min_reuse_tokens=0, calibration=False, recompute_ratio=0.15)
    assert cc.precompute(engine, DOCS[:2], progress=False) == 2
    rag = RagCache(LocalBackend(engine), semantic=None, max_new_tokens=3)
    a = rag.answer("How long do refunds take?", DOCS)
    u = a.usage
    assert a.details["docs_hit"] == 2 and a.details["docs_missed"] == 2
    assert u.reused + u.computed + u.recomputed == u.prompt_tokens > 0
    assert u.chunk_reused > 0 and "chunk" in a.layer and a.approximate and a.recompute_ratio is not None
    assert u.cache_read == u.reused and u.cache_write == 0
    assert isinstance(a, Answer) and a.tokens_reused == u.reused


def test_async_answer_matches_sync(tiny_wide3):
    engine = LocalEngine(tiny_wide3)
    rag = RagCache(LocalBackend(engine), semantic=None, max_new_tokens=4)
    sync = rag.answer("When do orders ship?", DOCS[:2])
    engine2 = LocalEngine(tiny_wide3)
    rag2 = RagCache(LocalBackend(engine2), semantic=None, max_new_tokens=4)
    got = asyncio.run(rag2.aanswer("When do orders ship?", DOCS[:2]))
    assert got.text == sync.text and got.usage == sync.usage


def test_astream_cancel_releases_the_engine(tiny_wide3):
    engine = LocalEngine(tiny_wide3)

    async def first_delta_then_leave():
        async for ev in engine.astream("Tell me a long story about caches.", max_new_tokens=200):
            if ev.text:
                return ev.text
        return ""

    async def main():
        await first_delta_then_leave()
        # the worker closes the generator at its next step, which releases the engine's lock
        return await asyncio.wait_for(asyncio.to_thread(engine.generate, "Hi", max_new_tokens=2), timeout=60)

    gen = asyncio.run(main())
    assert gen.stats.decode_tokens >= 1
    assert _joined("ragcache-engine-stream")


def _joined(name: str, timeout: float = 10.0) -> bool:
    for t in threading.enumerate():
        if t.name == name:
            t.join(timeout)
            if t.is_alive():
                return False
    return True


def test_astream_errors_reach_the_consumer(tiny_wide3):
    engine = LocalEngine(tiny_wide3)

    async def main():
        async for _ in engine.astream("", max_new_tokens=2):
            pass

    with pytest.raises(ValueError, match="empty"):
        asyncio.run(main())
