"""OpenAIBackend: the stable-first message layout, and RagCache through the real ``openai`` SDK
against the local OpenAI-compatible endpoint (tiny random model, chunk cache): usage read back
into CacheUsage adds up and equals the engine's own accounting, provider-cache from the 2nd request."""

from __future__ import annotations

import pytest

openai = pytest.importorskip("openai")

from ragcache import PromptLayout, RagCache, SemanticCache  # noqa: E402
from engine_doubles import RecordingEngine  # noqa: E402
from ragcache.prompt.segments import as_document as _as_document, canonical_documents, render_document  # noqa: E402
from ragcache.providers.openai import OpenAIBackend, layout_messages, openai_tools  # noqa: E402
from ragcache.server.app import running_server  # noqa: E402
from ragcache.testing import HashingEmbedder  # noqa: E402

DOCS = [
    {"id": "refunds", "text": "Refunds reach the original card within 14 days of the warehouse inspection, which "
                              "takes two business days; shipping costs are refunded only for damaged bikes."},
    {"id": "returns", "text": "Bikes can be returned within 30 days of delivery when ridden less than 50 km; start "
                              "the return from the Orders page and use the prepaid label we email."},
    {"id": "warranty", "text": "Frames carry a lifetime warranty for the first owner; brakes, gears and wheels are "
                               "covered for two years, crash damage and wear parts are not."},
]


pytestmark = pytest.mark.engine({"seed": 2}, cls=RecordingEngine, blending=True)


@pytest.fixture(scope="module")
def base_url(engine):
    with running_server(engine) as url:
        yield url + "/v1"


@pytest.fixture()
def client(base_url):
    with openai.OpenAI(base_url=base_url, api_key="local", max_retries=0) as c:
        yield c


def reuse(gen):
    return gen.stats.prefix_tokens_reused + gen.stats.chunk_tokens_reused


def check_usage(answer, gen):
    """The answer's CacheUsage adds up and is the engine's own accounting of the request."""
    u = answer.usage
    assert u.reused + u.computed + u.recomputed == u.prompt_tokens == gen.stats.prompt_tokens
    assert u.cache_read == u.reused == reuse(gen) and u.cache_write == 0 and u.recomputed == 0
    assert u.completion_tokens == len(gen.token_ids)
    assert answer.layer == ("provider-cache" if u.cache_read else "provider")
    assert answer.text == gen.text and answer.finish_reason == gen.stats.finish_reason


# -- layout -----------------------------------------------------------------------------------
def test_layout_messages_are_stable_first():
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]}]
    layout = PromptLayout.build(question="How long do refunds take?", system="Be brief.", documents=DOCS[::-1],
                                history=history, volatile="Order 5521 was placed on 2026-11-30.", lint="off")
    msgs = layout_messages(layout)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[0]["content"] == "Be brief." and msgs[1]["content"] == "Hi" and msgs[2]["content"] == "Hello"
    parts = [p["text"] for p in msgs[-1]["content"]]
    # canonical (by content, ids not rendered), any given order
    assert parts[:3] == [render_document(d) for d in canonical_documents([_as_document(d) for d in DOCS])]
    assert parts[3] == "Order 5521 was placed on 2026-11-30.\n\nHow long do refunds take?"  # volatile, question last
    assert layout_messages(PromptLayout.build(question="How long do refunds take?", system="Be brief.",
                                              documents=DOCS, history=history,
                                              volatile="Order 5521 was placed on 2026-11-30.", lint="off")) == msgs
    flat = layout_messages(layout, content_parts=False)
    assert flat[:-1] == msgs[:-1] and flat[-1]["content"] == "\n\n".join(parts)


def test_tools_and_request_arguments():
    import ragcache

    assert ragcache.OpenAIBackend is OpenAIBackend  # public import
    anthropic_tool = {"name": "lookup", "description": "Find an order", "input_schema": {"type": "object"}}
    fn = {"type": "function", "function": {"name": "ship", "parameters": {"type": "object"}}}
    assert openai_tools([anthropic_tool, fn]) == [
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"},
                                          "description": "Find an order"}}, fn]
    with pytest.raises(ValueError, match="'name'"):
        openai_tools([{"description": "no name"}])
    b = OpenAIBackend(object(), "m", max_tokens_param="max_completion_tokens", extra={"seed": 7})
    layout = PromptLayout.build(question="Q?", tools=[anthropic_tool], lint="off")
    kw = b.request(layout, max_new_tokens=9, temperature=0.0)
    assert kw["max_completion_tokens"] == 9 and "max_tokens" not in kw and kw["seed"] == 7
    assert kw["tools"][0]["function"]["name"] == "lookup" and kw["model"] == "m"
    for bad in (dict(client=None), dict(client=object(), model=""), dict(client=object(), max_tokens_param="x")):
        with pytest.raises(ValueError):
            OpenAIBackend(**{"model": "m", **bad})
    with pytest.raises(TypeError, match="PromptLayout"):  # a wrong type
        b.request([{"role": "user", "content": "hi"}], max_new_tokens=1, temperature=0.0)


# -- through RagCache against the local endpoint ----------------------------------------------
@pytest.mark.parametrize("stream", [True, False])
def test_ragcache_over_the_endpoint_provider_cache_from_the_second_request(client, engine, stream):
    tag = "streamed" if stream else "whole"
    system = f"{tag.title()} responses. You answer for Northwind Bikes, using the documents."
    docs = [{**d, "text": f"{d['text']} ({tag} edition)"} for d in DOCS]  # bytes no other test cached
    backend = OpenAIBackend(client, "tiny-llama", stream=stream, price=(0.15, 0.075, 0.60))
    rag = RagCache(backend, semantic=None, system=system, max_new_tokens=3)
    first = rag.answer("How long do refunds take?", docs)
    check_usage(first, engine.generations[-1])
    assert first.layer == "provider" and first.usage.cache_read == 0
    second = rag.answer("Can I return a bike I rode?", docs)
    check_usage(second, engine.generations[-1])
    assert second.layer == "provider-cache" and second.usage.reuse_share > 0.8  # all but the question's turn
    third = rag.answer("What does the warranty cover?", docs[::-1])  # retriever order changed: same bytes
    g = engine.generations[-1]
    check_usage(third, g)
    assert g.stats.chunk_tokens_reused == 0 and third.usage.reuse_share > 0.8  # the exact prefix covered it all
    assert 0 < second.ttft_s <= second.total_s
    s = backend.stats
    assert s.requests == 3 and s.cached_tokens == second.usage.cache_read + third.usage.cache_read
    assert s.read_share == pytest.approx(s.cached_tokens / s.prompt_tokens)
    u = second.usage
    assert u.cost_usd == pytest.approx(((u.prompt_tokens - u.cache_read) * 0.15 + u.cache_read * 0.075
                                        + u.completion_tokens * 0.60) / 1e6)
    assert u.uncached_cost_usd > u.cost_usd


def test_length_finish_and_volatile_history(client, engine):
    rag = RagCache(OpenAIBackend(client, "tiny-llama"), semantic=None, system="Support desk of Northwind Bikes, history kept.",
                   max_new_tokens=2)
    history = [{"role": "user", "content": "I bought a bike."}, {"role": "assistant", "content": "Great choice."}]
    rag.answer("When will my refund arrive?", DOCS[:2], history=history, volatile="Today is 2026-11-30.")
    a = rag.answer("When will my refund arrive?", DOCS[:2], history=history, volatile="Today is 2026-12-01.")
    g = engine.generations[-1]
    check_usage(a, g)
    assert a.finish_reason == g.stats.finish_reason and (a.finish_reason == "length") == (len(g.token_ids) == 2)
    assert a.usage.reuse_share > 0.8  # only the volatile line and the question were computed


async def test_async_client_and_thread_fallback(base_url, client, engine):
    async with openai.AsyncOpenAI(base_url=base_url, api_key="local", max_retries=0) as ac:
        for stream in (True, False):
            backend = OpenAIBackend(async_client=ac, model="tiny-llama", stream=stream)
            rag = RagCache(backend, semantic=None, system=f"Async Northwind desk, stream={stream}.", max_new_tokens=3)
            await rag.aanswer("How long do refunds take?", DOCS)
            a = await rag.aanswer("Can I return a bike I rode?", DOCS)
            check_usage(a, engine.generations[-1])
            assert a.layer == "provider-cache" and a.ttft_s > 0
            with pytest.raises(ValueError, match="no sync client"):
                backend.generate(PromptLayout.build(question="Q?"), max_new_tokens=1)
    sync_only = RagCache(OpenAIBackend(client, "tiny-llama"), semantic=None, system="Async Northwind desk, stream=True.",
                         max_new_tokens=3)
    a = await sync_only.aanswer("Is crash damage covered?", DOCS)  # the sync client, in a worker thread
    check_usage(a, engine.generations[-1])
    assert a.layer == "provider-cache"


def test_semantic_hit_skips_the_endpoint(client, engine):
    backend = OpenAIBackend(client, "tiny-llama", extra={"seed": 0})  # sampled: not the random model's greedy blanks
    rag = RagCache(backend, semantic=SemanticCache(None, embedder=HashingEmbedder()), max_new_tokens=3,
                   temperature=1.0, cache_truncated=True,  # a random model's answers run to the budget
                   params={"seed": 0})  # seeded: the sample repeats, so it may be served again
    a = rag.answer("How long do refunds take?", DOCS)
    n = len(engine.generations)
    b = rag.answer("How long do refunds take?", DOCS[::-1])
    assert a.text.strip() and b.layer == "semantic" and b.text == a.text
    assert len(engine.generations) == n and backend.stats.requests == 1


def test_precomputed_documents_are_chunk_hits_over_the_endpoint(client, engine):
    # The backend sends each document as its own part with the layout's exact bytes, and the endpoint
    # tokenises parts as document pieces: the chunk keys RagCache would use locally hold over HTTP too.
    # Chunk KV is per tenant: the caller of the endpoint (its API key, hashed) is the tenant the
    # documents are precomputed for (ragcache.server.auth.tenant_of / kv_namespace).
    from ragcache.server.auth import kv_namespace, tenant_of

    docs = [{**d, "text": d["text"] + " (precomputed edition)"} for d in DOCS]
    tenant = kv_namespace(tenant_of({"authorization": "Bearer local"}))
    assert engine.chunk_cache.precompute(engine, docs, progress=False, tenant=tenant) == 3
    a = RagCache(OpenAIBackend(client, "tiny-llama"), semantic=None, system="Precomputed desk.", max_new_tokens=2).answer(
        "How long do refunds take?", docs)
    g = engine.generations[-1]
    check_usage(a, g)
    assert g.stats.docs_hit == 3 and g.stats.docs_missed == 0 and g.stats.chunk_tokens_reused > 0
    assert a.layer == "provider-cache" and a.usage.cache_read > g.stats.prefix_tokens_reused
