"""The answer-path contract (:mod:`ragcache.testing.answer_contract`) over the adapters: the LlamaIndex
query engine (plain, streamed, async), the LangChain middleware (sync, async), ChatRagCache's stream
(and the LangChain LLM cache reading what it stored), and the Anthropic proxy (plain and streamed, the
real anthropic SDK over loopback HTTP).

Each entry point answers the contract's question with the contract's scripted model behind it: a
LlamaIndex backend, a LangChain chat model and an Anthropic-compatible upstream server that call
:class:`~ragcache.testing.answer_contract.ScriptedBackend` (the model is the one part replaced).
The answer store is a real in-memory SemanticCache (FAISS) with the hashing embedder. An answer is
read back from what each entry point returns (LlamaIndex ``Response.metadata``, LangChain
``response_metadata["ragcache"]``, the proxy's message and ``x-ragcache-layer``) into an
:class:`~ragcache.answering.Answer`.

Cross-entry pairs share a partition: the query engine's four modes; the middleware's two; ChatRagCache's
stream, astream and the LangChain LLM cache (``invoke``); the proxy's plain and streamed requests (a
streamed miss is relayed as upstream sends it, inside the path's flight). The LLM cache (LangChain's
own loop) is a reader here, not a writer.

The tenant case (:class:`~ragcache.testing.answer_contract.TenantKVContract`) runs over every adapter
entry point with a local engine: ChatRagCache (invoke, stream, astream; the ``tenant`` field and the
``tenant`` call option), the LangChain middleware over ChatRagCache, RagCacheLLM (the ``tenant`` field
and per-call ``tenant=``) and the LlamaIndex query engine over RagCacheLLM (query, stream, aquery,
astream; ``namespace=`` and ``for_tenant``). The proxy has no case: its upstream is a provider, whose
prompt cache is per API key; the local servers' tenants are checked in ``test_tenant_kv.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("llama_index.core")
pytest.importorskip("langchain")
anthropic = pytest.importorskip("anthropic")

from langchain_core.messages import HumanMessage  # noqa: E402

from adapter_doubles import (  # noqa: E402
    DOCS,
    SYSTEM,
    ScriptedChat,
    lc_answer,
    lc_call,
    scripted_chat_rag_cache,
    usage_of as _usage,
)
from contract_entries import (  # noqa: E402
    fixed_nodes,
    fixed_retriever,
    scripted_llamaindex_backend,
    scripted_upstream,
)
from ragcache.answering import Answer  # noqa: E402
from ragcache.backend import CacheUsage  # noqa: E402
from ragcache.providers.table import usage_of  # noqa: E402
from ragcache.provenance import Provenance  # noqa: E402
from ragcache.semantic import SemanticCache  # noqa: E402
from ragcache.testing import HashingEmbedder  # noqa: E402
from ragcache.testing.answer_contract import (  # noqa: E402
    TENANT_DOCS,
    TENANT_SYSTEM,
    AnswerPathContract,
    ScriptedBackend,
    TenantKVContract,
)


# ---------------------------------------------------------------------------------------------- LlamaIndex
class LlamaIndexEntry:
    """RagCacheQueryEngine over two fixed nodes; its LLM backend calls the scripted model."""

    stores_length = True  # the one rule (ragcache.answering.CACHE_TRUNCATED)

    def __init__(self, backend: ScriptedBackend, store: SemanticCache, mode: str) -> None:
        from llama_index.core.llms import MockLLM
        from llama_index.query_engine.ragcache import RagCacheQueryEngine

        self.name, self.mode = f"LlamaIndex {mode}", mode
        self.engine = RagCacheQueryEngine(fixed_retriever(fixed_nodes(DOCS)), MockLLM(), semantic_cache=store,
                                          system_prompt=SYSTEM, lint="off", streaming=mode in ("stream", "astream"))
        self.engine._backend = scripted_llamaindex_backend(backend, MockLLM(), declares_blend=True)

    def ask(self, question: str) -> Answer:
        if self.mode == "query":
            resp = self.engine.query(question)
            text = str(resp)
        elif self.mode == "stream":
            resp = self.engine.query(question)
            text = "".join(resp.response_gen)
        else:
            async def run() -> tuple[Any, str]:
                r = await self.engine.aquery(question)
                if self.mode == "astream":
                    return r, "".join([t async for t in r.async_response_gen()])
                return r, str(r)

            resp, text = asyncio.run(run())
        m = resp.metadata
        return Answer(question, text, m["layer"], _usage(m["usage"]), provenance=Provenance.from_metadata(m))


# ---------------------------------------------------------------------------------------------- LangChain
class MiddlewareEntry:
    """An agent (``create_agent``) whose model is the scripted chat model, with RagCacheMiddleware."""

    stores_length = True

    def __init__(self, backend: ScriptedBackend, store: SemanticCache, mode: str) -> None:
        from langchain.agents import create_agent
        from langchain_ragcache import RagCacheSemanticCache
        from langchain_ragcache.middleware import RagCacheMiddleware

        self.name, self.mode = f"middleware {mode}", mode
        self.agent = create_agent(ScriptedChat(backend=backend), [], system_prompt=SYSTEM,
                                  middleware=[RagCacheMiddleware(RagCacheSemanticCache(store))])

    def ask(self, question: str) -> Answer:
        inp = {"messages": [HumanMessage(question)]}
        out = self.agent.invoke(inp) if self.mode == "sync" else asyncio.run(self.agent.ainvoke(inp))
        return lc_answer(question, out["messages"][-1])


class ChatRagCacheEntry:
    """ChatRagCache (the tiny random engine for its identity) whose answer pieces come from the scripted
    model; ``stream`` goes through the answer path, ``astream`` through its lookup and record, ``invoke``
    through the LangChain LLM cache (the framework's loop)."""

    stores_length = True

    def __init__(self, backend: ScriptedBackend, store: SemanticCache, mode: str) -> None:
        from langchain_ragcache import RagCacheSemanticCache

        self.name, self.mode = f"ChatRagCache {mode}", mode
        self.model = scripted_chat_rag_cache(backend, declares_blend=True, max_tokens=64,
                                             cache=RagCacheSemanticCache(store))

    def ask(self, question: str) -> Answer:
        return lc_answer(question, lc_call(self.model, [HumanMessage(question)], self.mode))


# ---------------------------------------------------------------------------------------------- proxy
class ProxyEntry:
    """The proxy in front of the scripted upstream, called with the real anthropic SDK. An Anthropic
    upstream reports no blended prefill, so the scripted model here reports none either; Anthropic
    has no ``content_filter`` stop reason (its kind is ``refusal``)."""

    stores_length = True

    def __init__(self, backend: ScriptedBackend, store: SemanticCache, mode: str, servers: list) -> None:
        from ragcache.server.app import running_server
        from ragcache.server.proxy import AnthropicProxy

        backend.approximate, backend.recompute_ratio = False, None
        self.name, self.mode = f"proxy {mode}", mode
        if not servers:
            up = running_server(None, app=scripted_upstream(backend))
            upstream = up.__enter__()
            proxy = AnthropicProxy(upstream, semantic=store, api_key="k")
            down = running_server(None, app=proxy.app)
            servers += [up, down, down.__enter__()]
        self.client = anthropic.Anthropic(base_url=servers[2], api_key="k", max_retries=0)

    def ask(self, question: str) -> Answer:
        from ragcache.providers.anthropic.backend import sdk_kwargs
        from ragcache.providers.anthropic.usage import finish_reason

        content = [{"type": "text", "text": d} for d in DOCS] + [{"type": "text", "text": question}]
        body = {"model": "claude-sonnet-4-6", "max_tokens": 64, "temperature": 0, "system": SYSTEM,
                "messages": [{"role": "user", "content": content}]}
        if self.mode == "plain":
            raw = self.client.messages.with_raw_response.create(**sdk_kwargs(self.client.messages.create, body))
            msg, layer = raw.parse(), raw.headers["x-ragcache-layer"]
        else:
            with self.client.messages.stream(**sdk_kwargs(self.client.messages.stream, body)) as s:
                layer = s.response.headers["x-ragcache-layer"]
                "".join(s.text_stream)
                msg = s.get_final_message()
        usage = usage_of("anthropic", msg.usage)
        return Answer(question, "".join(b.text for b in msg.content if b.type == "text"), layer, usage,
                      provenance=Provenance.from_metadata({"layer": layer,
                                                           "finish_reason": finish_reason(msg.stop_reason)}))


# ---------------------------------------------------------------------------------------------- wiring
WRITERS = {  # entry point -> (factory, the peer that reads what it stored)
    "llamaindex-query": (lambda b, s, x: LlamaIndexEntry(b, s, "query"), "llamaindex-stream"),
    "llamaindex-stream": (lambda b, s, x: LlamaIndexEntry(b, s, "stream"), "llamaindex-astream"),
    "llamaindex-aquery": (lambda b, s, x: LlamaIndexEntry(b, s, "aquery"), "llamaindex-query"),
    "llamaindex-astream": (lambda b, s, x: LlamaIndexEntry(b, s, "astream"), "llamaindex-stream"),
    "middleware-sync": (lambda b, s, x: MiddlewareEntry(b, s, "sync"), "middleware-async"),
    "middleware-async": (lambda b, s, x: MiddlewareEntry(b, s, "async"), "middleware-sync"),
    "chatragcache-stream": (lambda b, s, x: ChatRagCacheEntry(b, s, "stream"), "chatragcache-invoke"),
    "chatragcache-astream": (lambda b, s, x: ChatRagCacheEntry(b, s, "astream"), "chatragcache-stream"),
    "proxy-plain": (lambda b, s, x: ProxyEntry(b, s, "plain", x), "proxy-stream"),
    "proxy-stream": (lambda b, s, x: ProxyEntry(b, s, "stream", x), "proxy-plain"),
}
READERS = {
    "chatragcache-invoke": lambda b, s, x: ChatRagCacheEntry(b, s, "invoke"),
}


@pytest.fixture()
def store() -> SemanticCache:
    return SemanticCache(None, embedder=HashingEmbedder())


@pytest.fixture()
def servers():
    """The proxy's two loopback servers (upstream, proxy), started by the first proxy entry of a test."""
    held: list = []
    yield held
    if held:
        held[1].__exit__(None, None, None)
        held[0].__exit__(None, None, None)


@pytest.fixture(params=sorted(WRITERS))
def make_entry(request, store, servers):
    def make(backend: ScriptedBackend) -> Any:
        return WRITERS[request.param][0](backend, store, servers)

    make.writer = request.param  # type: ignore[attr-defined]
    return make


@pytest.fixture(params=["itself", "peer"])
def make_other(request, make_entry, store, servers):
    name = make_entry.writer if request.param == "itself" else WRITERS[make_entry.writer][1]
    factory = WRITERS[name][0] if name in WRITERS else READERS[name]
    return lambda backend: factory(backend, store, servers)


class TestAdaptersAnswerPath(AnswerPathContract):
    """Every check of the contract over the adapters' entry points."""

    def test_miss_then_store_then_hit(self, make_entry) -> None:
        if not make_entry.writer.startswith("proxy"):
            return super().test_miss_then_store_then_hit(make_entry)
        backend = ScriptedBackend()
        entry = make_entry(backend)  # an Anthropic upstream: no blending reported
        first = entry.ask("When do the backups run?")
        hit = entry.ask("When do the backups run?")
        assert first.layer == "provider" and hit.layer == "semantic" and backend.calls == 1
        assert hit.text == first.text and hit.usage == CacheUsage()
        assert (hit.finish_reason, hit.approximate, hit.recompute_ratio) == ("stop", False, None)

    def test_a_blended_answer_is_served_only_at_its_blend_setting(self, make_entry, make_other) -> None:
        if make_entry.writer.startswith("proxy"):
            pytest.skip("an Anthropic upstream reports no blended prefill")
        super().test_a_blended_answer_is_served_only_at_its_blend_setting(make_entry, make_other)

    @pytest.mark.parametrize("finish", ["content_filter", "incomplete", "refusal", "length"])
    def test_an_unfinished_answer_is_not_stored(self, make_entry, finish: str) -> None:
        if make_entry.writer.startswith("proxy") and finish == "content_filter":
            pytest.skip("the Anthropic Messages API has no content_filter stop reason (its kind is refusal)")
        super().test_an_unfinished_answer_is_not_stored(make_entry, finish)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_async_stream_readers_serve_what_a_writer_stored(reader, store, servers) -> None:
    """The reader (the LLM cache's framework loop, which looks up and stores through the path without a
    flight) stores a miss that the writer serves, and serves what it stored."""
    writer = next(k for k, (_, peer) in WRITERS.items() if peer == reader)
    backend = ScriptedBackend()
    if reader.startswith("proxy"):
        backend.approximate, backend.recompute_ratio = False, None
    r = READERS[reader](backend, store, servers)
    first = r.ask("When do the backups run?")
    assert first.layer != "semantic" and backend.calls == 1
    hit = WRITERS[writer][0](backend, store, servers).ask("When do the backups run?")
    assert hit.layer == "semantic" and backend.calls == 1 and hit.text == first.text
    assert (hit.approximate, hit.recompute_ratio, hit.finish_reason) == (first.approximate, first.recompute_ratio,
                                                                         "stop")
    assert r.ask("When do the backups run?").layer == "semantic" and backend.calls == 1


# ---------------------------------------------------------------------------------------------- tenants
class ChatTenantEntry:
    """ChatRagCache over the contract's engine: ``tenant`` as its field (``invoke`` / ``stream`` /
    ``astream``) or as a call option (``bind``); no LLM cache, so every ask reaches the engine."""

    def __init__(self, engine: Any, tenant: str, mode: str) -> None:
        from langchain_ragcache import ChatRagCache

        self.name, self.mode = f"ChatRagCache {mode}", mode
        if mode == "bind":
            self.model = ChatRagCache(engine=engine, max_tokens=2, cache=False).bind(tenant=tenant)
        else:
            self.model = ChatRagCache(engine=engine, max_tokens=2, cache=False, tenant=tenant)

    def ask(self, question: str) -> Answer:
        from langchain_core.messages import SystemMessage

        msgs = [SystemMessage(TENANT_SYSTEM), HumanMessage("\n\n".join([*TENANT_DOCS, f"Question: {question}"]))]
        return lc_answer(question, lc_call(self.model, msgs, self.mode))


class MiddlewareTenantEntry:
    """An agent whose model is ChatRagCache(tenant=...) over the contract's engine, with RagCacheMiddleware."""

    name = "middleware"

    def __init__(self, engine: Any, tenant: str) -> None:
        from langchain.agents import create_agent
        from langchain_ragcache import ChatRagCache, RagCacheSemanticCache
        from langchain_ragcache.middleware import RagCacheMiddleware

        model = ChatRagCache(engine=engine, max_tokens=2, tenant=tenant)
        store = SemanticCache(None, embedder=HashingEmbedder())
        self.agent = create_agent(model, [], system_prompt=TENANT_SYSTEM,
                                  middleware=[RagCacheMiddleware(RagCacheSemanticCache(store))])

    def ask(self, question: str) -> Answer:
        text = "\n\n".join([*TENANT_DOCS, f"Question: {question}"])
        return lc_answer(question, self.agent.invoke({"messages": [HumanMessage(text)]})["messages"][-1])


class LlmTenantEntry:
    """RagCacheLLM over the contract's engine: ``tenant`` as its field or per call (``chat(..., tenant=)``)."""

    def __init__(self, engine: Any, tenant: str, mode: str) -> None:
        from llama_index.llms.ragcache import RagCacheLLM

        self.name, self.mode, self.tenant = f"RagCacheLLM {mode}", mode, tenant
        self.llm = RagCacheLLM(engine, max_new_tokens=2, tenant=tenant if mode == "field" else None)

    def ask(self, question: str) -> Answer:
        from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock

        msgs = [ChatMessage(role=MessageRole.SYSTEM, content=TENANT_SYSTEM),
                ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text=t) for t in (*TENANT_DOCS, question)])]
        kw = {"tenant": self.tenant} if self.mode == "per-call" else {}
        extra = self.llm.chat(msgs, **kw).additional_kwargs
        return Answer(question, "", extra["layer"], _usage(extra["usage"]),
                      provenance=Provenance.from_metadata({k: extra[k] for k in (
                          "layer", "finish_reason", "approximate", "recompute_ratio")}))


class QueryEngineTenantEntry(LlamaIndexEntry):
    """RagCacheQueryEngine over RagCacheLLM on the contract's engine, without an answer cache: ``namespace=``
    (``query`` / ``stream`` / ``aquery`` / ``astream``) or ``for_tenant`` (``query``)."""

    def __init__(self, engine: Any, tenant: str, mode: str, *, per_request: bool = False) -> None:
        from llama_index.llms.ragcache import RagCacheLLM
        from llama_index.query_engine.ragcache import RagCacheQueryEngine

        self.name = f"query engine {mode}{' for_tenant' if per_request else ''}"
        self.mode = mode
        qe = RagCacheQueryEngine(fixed_retriever(fixed_nodes(TENANT_DOCS)), RagCacheLLM(engine, max_new_tokens=2),
                                 semantic_cache=False, system_prompt=TENANT_SYSTEM, lint="off",
                                 streaming=mode in ("stream", "astream"),
                                 **({} if per_request else {"namespace": tenant}))
        self.engine = qe.for_tenant(tenant) if per_request else qe


TENANT_ENTRIES = {
    "chatragcache-invoke": lambda e, t: ChatTenantEntry(e, t, "invoke"),
    "chatragcache-stream": lambda e, t: ChatTenantEntry(e, t, "stream"),
    "chatragcache-astream": lambda e, t: ChatTenantEntry(e, t, "astream"),
    "chatragcache-bind": lambda e, t: ChatTenantEntry(e, t, "bind"),
    "middleware": MiddlewareTenantEntry,
    "ragcachellm-field": lambda e, t: LlmTenantEntry(e, t, "field"),
    "ragcachellm-per-call": lambda e, t: LlmTenantEntry(e, t, "per-call"),
    "llamaindex-query": lambda e, t: QueryEngineTenantEntry(e, t, "query"),
    "llamaindex-stream": lambda e, t: QueryEngineTenantEntry(e, t, "stream"),
    "llamaindex-aquery": lambda e, t: QueryEngineTenantEntry(e, t, "aquery"),
    "llamaindex-astream": lambda e, t: QueryEngineTenantEntry(e, t, "astream"),
    "llamaindex-for-tenant": lambda e, t: QueryEngineTenantEntry(e, t, "query", per_request=True),
}


@pytest.fixture(params=sorted(TENANT_ENTRIES))
def make_tenant_entry(request):
    return TENANT_ENTRIES[request.param]


class TestAdaptersTenantKV(TenantKVContract):
    """Two tenants through every adapter entry point share no KV unless the engine opts in."""
