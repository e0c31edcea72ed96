"""The fault-injection contract (``test_fault_contract.py``) over the adapters' entry points.

The same faults in the answer cache (its embedder, its SQLite + FAISS answer store, its single-flight
locks: an exception of a type no store documents, or a hang released only after the answer came back)
through the entry points ``test_fault_contract.py`` does not reach: LangChain's ``RagCacheSemanticCache``
as a chat model's cache (``cache=`` and ``set_llm_cache``, a chat model that reports ``finish_reason``
``stop``), ``ChatRagCache`` (``invoke`` through that cache, ``stream`` and ``astream`` through the answer
path), ``RagCacheMiddleware``, LlamaIndex's ``RagCacheQueryEngine`` (query, stream, aquery, astream) and
the Anthropic proxy (plain and streamed, the real anthropic SDK over loopback HTTP against a scripted
upstream). ``ragcache serve``'s local Anthropic / OpenAI apps have no answer cache (the proxy is its
answer-cache mode); their cache dependency is the engine's chunk store, faulted here under both APIs.

The bound is the suite's: the request gets the model's own answer, while a hung dependency still hangs;
nothing is stored for the request whose lookup failed; during the back-off the dependency is not called;
once the fault clears (a fake clock passes the back-off) the stored answer is served again and a new
answer is stored and then hit. Whether an ask was answered by the model is read from the scripted
model's call count, the same for every entry point.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

pytest.importorskip("llama_index.core")
pytest.importorskip("langchain")
anthropic = pytest.importorskip("anthropic")

import test_fault_contract
from adapter_doubles import DOCS, SYSTEM, ScriptedChat, lc_call, scripted_chat_rag_cache
from contract_entries import (
    fixed_nodes,
    fixed_retriever,
    scripted_llamaindex_backend,
    scripted_upstream,
)
from langchain_core.messages import HumanMessage
from fault_doubles import ERRORS, Q2, Fault, Faulty, Q
from test_fault_contract import DEADLINE_S, _cache

from ragcache.testing.answer_contract import ScriptedBackend

clock = test_fault_contract.clock  # the suite's fake clock (the back-off passes at once)


# ---------------------------------------------------------------------------------------------- entry points
class LangChainCacheEntry:
    """A chat model (finish_reason ``stop``) with ``RagCacheSemanticCache`` as its cache: given as
    ``cache=`` or set with ``set_llm_cache`` (``global``); LangChain's own loop (lookup, call, update), no
    single flight."""

    flight = False

    def __init__(self, backend: ScriptedBackend, store: Any, mode: str, held: list) -> None:
        from langchain_ragcache import RagCacheSemanticCache

        backend.approximate, backend.recompute_ratio = False, None  # a provider's model: no blended prefill
        self.mode, cache = mode, RagCacheSemanticCache(store, lookup_timeout_s=DEADLINE_S)
        if mode.startswith("global"):
            from langchain_core.globals import set_llm_cache

            set_llm_cache(cache)
            held.append(lambda: set_llm_cache(None))
            self.model = ScriptedChat(backend=backend)
        else:
            self.model = ScriptedChat(backend=backend, cache=cache)

    def ask(self, question: str) -> str:
        msgs = [HumanMessage(question)]
        if self.mode.endswith("async"):
            return asyncio.run(self.model.ainvoke(msgs)).text
        return self.model.invoke(msgs).text


class ChatRagCacheEntry:
    """ChatRagCache whose answer comes from the scripted model: ``invoke`` through its LLM cache
    (LangChain's loop, no flight), ``stream`` / ``astream`` through the answer path."""

    def __init__(self, backend: ScriptedBackend, store: Any, mode: str, held: list) -> None:
        from langchain_ragcache import RagCacheSemanticCache

        self.mode, self.flight = mode, mode != "invoke"
        self.model = scripted_chat_rag_cache(backend, declares_blend=True, max_tokens=64,
                                             cache=RagCacheSemanticCache(store, lookup_timeout_s=DEADLINE_S))

    def ask(self, question: str) -> str:
        return lc_call(self.model, [HumanMessage(question)], self.mode).text


class MiddlewareEntry:
    """An agent over the scripted chat model with ``RagCacheMiddleware`` (the answer path's run / arun)."""

    flight = True

    def __init__(self, backend: ScriptedBackend, store: Any, mode: str, held: list) -> None:
        from langchain.agents import create_agent
        from langchain_ragcache import RagCacheSemanticCache
        from langchain_ragcache.middleware import RagCacheMiddleware

        backend.approximate, backend.recompute_ratio = False, None  # a provider's model: no blended prefill
        self.mode = mode
        self.agent = create_agent(ScriptedChat(backend=backend), [], system_prompt=SYSTEM, middleware=[
            RagCacheMiddleware(RagCacheSemanticCache(store, lookup_timeout_s=DEADLINE_S))])

    def ask(self, question: str) -> str:
        inp = {"messages": [HumanMessage(question)]}
        out = self.agent.invoke(inp) if self.mode == "sync" else asyncio.run(self.agent.ainvoke(inp))
        return out["messages"][-1].text


class QueryEngineEntry:
    """RagCacheQueryEngine over two fixed nodes; its LLM backend calls the scripted model."""

    flight = True

    def __init__(self, backend: ScriptedBackend, store: Any, mode: str, held: list) -> None:
        from llama_index.core.llms import MockLLM
        from llama_index.query_engine.ragcache import RagCacheQueryEngine

        self.mode = mode
        self.engine = RagCacheQueryEngine(fixed_retriever(fixed_nodes(DOCS)), MockLLM(), semantic_cache=store,
                                          system_prompt=SYSTEM, lint="off", lookup_timeout_s=DEADLINE_S,
                                          streaming=mode in ("stream", "astream"))
        self.engine._backend = scripted_llamaindex_backend(backend, MockLLM(), declares_blend=True)

    def ask(self, question: str) -> str:
        if self.mode == "query":
            return str(self.engine.query(question))
        if self.mode == "stream":
            return "".join(self.engine.query(question).response_gen)

        async def run() -> str:
            r = await self.engine.aquery(question)
            return "".join([t async for t in r.async_response_gen()]) if self.mode == "astream" else str(r)

        return asyncio.run(run())


class ProxyEntry:
    """The Anthropic proxy in front of the scripted upstream, called with the real anthropic SDK."""

    flight = True

    def __init__(self, backend: ScriptedBackend, store: Any, mode: str, held: list) -> None:
        from ragcache.server.app import running_server
        from ragcache.server.proxy import AnthropicProxy

        backend.approximate, backend.recompute_ratio = False, None  # an Anthropic upstream reports no blend
        self.mode = mode
        up = running_server(None, app=scripted_upstream(backend))
        upstream = up.__enter__()
        held.append(lambda: up.__exit__(None, None, None))
        proxy = AnthropicProxy(upstream, semantic=store, api_key="k", lookup_timeout_s=DEADLINE_S)
        down = running_server(None, app=proxy.app)
        url = down.__enter__()
        held.append(lambda: down.__exit__(None, None, None))
        self.client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)

    def ask(self, question: str) -> str:
        content = [{"type": "text", "text": d} for d in DOCS] + [{"type": "text", "text": question}]
        body = {"model": "claude-sonnet-4-6", "max_tokens": 64, "temperature": 0, "system": SYSTEM,
                "messages": [{"role": "user", "content": content}]}
        if self.mode == "plain":
            msg = self.client.messages.create(**body)
        else:
            with self.client.messages.stream(**body) as s:
                "".join(s.text_stream)
                msg = s.get_final_message()
        return "".join(b.text for b in msg.content if b.type == "text")


ENTRIES = {
    "langchain-cache": lambda b, s, h: LangChainCacheEntry(b, s, "field", h),
    "langchain-cache-async": lambda b, s, h: LangChainCacheEntry(b, s, "field-async", h),
    "langchain-set_llm_cache": lambda b, s, h: LangChainCacheEntry(b, s, "global", h),
    "chatragcache-invoke": lambda b, s, h: ChatRagCacheEntry(b, s, "invoke", h),
    "chatragcache-stream": lambda b, s, h: ChatRagCacheEntry(b, s, "stream", h),
    "chatragcache-astream": lambda b, s, h: ChatRagCacheEntry(b, s, "astream", h),
    "middleware-sync": lambda b, s, h: MiddlewareEntry(b, s, "sync", h),
    "middleware-async": lambda b, s, h: MiddlewareEntry(b, s, "async", h),
    "llamaindex-query": lambda b, s, h: QueryEngineEntry(b, s, "query", h),
    "llamaindex-stream": lambda b, s, h: QueryEngineEntry(b, s, "stream", h),
    "llamaindex-aquery": lambda b, s, h: QueryEngineEntry(b, s, "aquery", h),
    "llamaindex-astream": lambda b, s, h: QueryEngineEntry(b, s, "astream", h),
    "proxy-plain": lambda b, s, h: ProxyEntry(b, s, "plain", h),
    "proxy-stream": lambda b, s, h: ProxyEntry(b, s, "stream", h),
}


@pytest.fixture()
def held():
    """What an entry started (servers, a global LLM cache), undone after the test, last first."""
    undo: list = []
    yield undo
    for fn in reversed(undo):
        fn()


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("dependency", ["embedder", "answer store", "flight locks"])
@pytest.mark.parametrize("kind", ["raise", "hang"])
def test_a_failing_answer_cache_costs_a_miss(tmp_path, clock, held, entry, dependency, kind, caplog):
    if dependency == "flight locks" and kind == "hang":
        pytest.skip("a lock waits for its own timeout by design (the flight timeout): covered by the single-flight tests")
    fault = Fault(ERRORS["Weird"] if kind == "raise" else None)
    backend = ScriptedBackend()
    cache = _cache(tmp_path / "answers", dependency, fault)
    e = ENTRIES[entry](backend, cache, held)
    if dependency == "flight locks" and not e.flight:
        pytest.skip("LangChain's own cache loop takes no flight lock")
    assert e.ask(Q) == backend.text and e.ask(Q) == backend.text and backend.calls == 1  # healthy: a hit

    fault.mode = kind
    with caplog.at_level(logging.WARNING):
        first = e.ask(Q2)
    assert first == backend.text and backend.calls == 2
    assert fault.returned == 0  # the answer came back while the dependency still hung
    assert fault.calls >= 1
    assert any("failed during" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    tried = fault.calls
    again = e.ask(Q2)
    assert again == backend.text
    if dependency == "flight locks":  # answered without the cross-process lock, stored: a hit
        assert backend.calls == 2 and len(cache) == 2
    else:  # a miss; during the back-off the dependency is not called; nothing stored for the request
        assert backend.calls == 3 and fault.calls == tried and len(cache) == 1

    fault.clear()
    clock.pass_backoff()
    calls = backend.calls
    assert e.ask(Q) == backend.text and backend.calls == calls  # the stored answer is served again
    e.ask(Q2)
    calls = backend.calls
    assert e.ask(Q2) == backend.text and backend.calls == calls and len(cache) == 2  # new answers stored again
    cache.close()


@pytest.mark.parametrize("entry", ["langchain-cache", "chatragcache-stream", "llamaindex-query", "proxy-plain"])
@pytest.mark.parametrize("error", sorted(ERRORS))
def test_any_exception_type_is_a_miss(tmp_path, clock, held, entry, error):
    """Every error type of the suite, from the answer store, through one entry point of each adapter:
    an exact repeat and a paraphrase are both answered by the model."""
    fault = Fault(ERRORS[error])
    backend = ScriptedBackend()
    cache = _cache(tmp_path / "answers", "answer store", fault)
    e = ENTRIES[entry](backend, cache, held)
    e.ask(Q)
    fault.mode = "raise"
    for q in (Q, Q2):
        assert e.ask(q) == backend.text
    assert backend.calls == 3 and len(cache) == 1
    cache.close()


# ---------------------------------------------------------------------------------------------- local servers
LOCAL_DOCS = [d * 3 for d in DOCS]


def _server_ask(url: str, api: str) -> tuple[str, dict]:
    """One greedy request to ``ragcache serve``'s app at ``url`` (``api``: its Anthropic or OpenAI route):
    the answer's text and the response's headers."""
    import httpx

    content = [{"type": "text", "text": d} for d in LOCAL_DOCS] + [{"type": "text", "text": Q}]
    if api == "anthropic":
        r = httpx.post(f"{url}/v1/messages", headers={"x-api-key": "local"}, timeout=120, json={
            "model": "claude-sonnet-4-6", "max_tokens": 6, "temperature": 0, "system": SYSTEM,
            "messages": [{"role": "user", "content": content}]})
        assert r.status_code == 200, r.text
        return "".join(b["text"] for b in r.json()["content"] if b["type"] == "text"), dict(r.headers)
    model = httpx.get(f"{url}/v1/models").json()["data"][0]["id"]
    r = httpx.post(f"{url}/v1/chat/completions", headers={"authorization": "Bearer local"}, timeout=120, json={
        "model": model, "max_tokens": 6, "temperature": 0,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"], dict(r.headers)


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("kind", ["raise", "hang"])
def test_local_servers_with_a_failing_chunk_store(tiny_seed1, tmp_path, clock, api, kind):
    """``ragcache serve``'s apps over a tiny model whose chunk store (disk) raises an unexpected type or
    hangs: every request gets the exact answer (the one the same app gives with no chunk cache), no chunk
    reused, while the store still hangs; once it clears, the documents are stored again and reused."""
    from fault_doubles import engine_rag

    from ragcache.engine.chunk.stores.disk import DiskChunkStore
    from ragcache.engine.engine import LocalEngine
    from ragcache.server.app import running_server

    store = DiskChunkStore(tmp_path / "kv")
    engine, _ = engine_rag(tiny_seed1, store, DEADLINE_S)
    fault = Fault(ERRORS["AttributeError"])
    with running_server(LocalEngine(tiny_seed1, calibration=False)) as ref, running_server(engine) as url:
        want, _ = _server_ask(ref, api)

        def ask() -> tuple[str, dict]:
            engine.prefix_cache.clear()  # every request reads its documents from the chunk store
            return _server_ask(url, api)

        assert ask()[0] == want and len(store) >= 1  # stored while healthy
        engine.chunk_cache.store = Faulty(store, fault, {"get", "get_many", "put", "put_many"})
        fault.mode = kind
        try:
            for _ in range(2):
                text, headers = ask()
                assert text == want and headers["x-ragcache-chunk-reused"] == "0"
            assert fault.calls >= 1 and fault.returned == 0  # answered while the store still hung
        finally:
            fault.clear()
        clock.pass_backoff()
        ask()
        text, headers = ask()
        assert int(headers["x-ragcache-chunk-reused"]) > 0
        assert text == want or headers["x-ragcache-approximate"] == "true"  # a blend is labelled
