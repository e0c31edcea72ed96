"""One request, seven entry points (issue 23 Checks): the same layout, partition and layer label.

The request (system text, two documents with ids, a question) goes through ``RagCache`` and then
through one other entry point, over a fresh engine on the same tiny model:

* entry points with a semantic cache share ``RagCache``'s: they must compute the same partition
  digest and be served ``RagCache``'s stored answer (layer ``semantic``, same text);
* the local servers (OpenAI- and Anthropic-compatible) have no semantic cache: a fresh engine
  computes the answer (layer ``model``, the label the OpenAI server sends in ``x-ragcache-layer``);
* the proxy keys its cache per API key (namespace ``proxy-<key hash>``): the second identical
  request is its ``semantic`` hit, and its partition is ``request_partition`` over the same layout.

Every entry point's layout (what its code lays out, or what the engine is asked to render) must be
block for block the layout ``RagCache`` built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

from ragcache import LocalBackend, LocalEngine, PromptLayout, RagCache, SemanticCache  # noqa: E402
from ragcache.testing import HashingEmbedder  # noqa: E402

SYSTEM = "Answer from the documents only, in one sentence."
QUESTION = "How long do refunds take?"
DOCS = [
    {"id": "refund-policy", "text": "Refunds are issued within 30 days of purchase when the receipt is shown. " * 3},
    {"id": "shipping", "text": "Orders ship from the Leeds warehouse on weekdays before noon, by courier. " * 3},
]
BUDGET = 4
CLAUDE = "claude-sonnet-4-6"


@dataclass
class Seen:
    """What one entry point did with the request."""

    layout: PromptLayout
    partition: str | None  # digest in RagCache's namespace; None where the entry point keys elsewhere / has none
    layer: str
    text: str


@pytest.fixture()
def ref(tiny_wide3):
    """RagCache answers first (its answer is stored in the shared semantic cache)."""
    sem = SemanticCache(None, embedder=HashingEmbedder())
    rag = RagCache(LocalBackend(LocalEngine(tiny_wide3)), semantic=sem, system=SYSTEM, max_new_tokens=BUDGET,
                   cache_truncated=True)
    req = rag.prepare(QUESTION, DOCS)
    first = rag.answer(QUESTION, DOCS)
    assert first.layer == "model"
    return rag, req, first


def _spy(engine: LocalEngine) -> list[PromptLayout]:
    """Record the layout of every prompt the engine renders (the same rule the engine applies)."""
    seen: list[PromptLayout] = []
    build = engine.build_prompt

    def spy(source: Any) -> Any:
        seen.append(source if isinstance(source, PromptLayout) else PromptLayout.from_messages(source))
        return build(source)

    engine.build_prompt = spy  # type: ignore[method-assign]
    return seen


def via_ragcache(lm, rag, req) -> Seen:
    again = rag.answer(QUESTION, DOCS)
    return Seen(rag.prepare(QUESTION, DOCS).layout, rag.prepare(QUESTION, DOCS).partition.digest, again.layer, again.text)


def via_langchain_chain(lm, rag, req) -> Seen:
    from langchain_core.documents import Document
    from langchain_core.load import dumps
    from langchain_ragcache import ChatRagCache, RagCacheSemanticCache, RagPrompt
    from langchain_ragcache._keys import key_messages
    from langchain_ragcache._messages import to_layout

    llm = ChatRagCache(engine=LocalEngine(lm), max_tokens=BUDGET,
                       cache=RagCacheSemanticCache(rag.semantic, cache_truncated=True))
    inputs = {"question": QUESTION, "context": [Document(id=d["id"], page_content=d["text"]) for d in DOCS]}
    messages = RagPrompt(system=SYSTEM).invoke(inputs).to_messages()
    assert key_messages(messages).layout == to_layout(messages)  # the cache's view is the engine's view
    _, pk = llm.cache.key_for(dumps(messages), llm._get_llm_string())
    msg = (RagPrompt(system=SYSTEM) | llm).invoke(inputs)
    return Seen(to_layout(messages), pk.digest, msg.response_metadata["ragcache"]["layer"], msg.content)


def via_langchain_agent_middleware(lm, rag, req) -> Seen:
    from langchain.agents import create_agent
    from langchain_core.documents import Document
    from langchain_ragcache import ChatRagCache, RagCacheSemanticCache, RagPrompt
    from langchain_ragcache.middleware import RagCacheMiddleware

    cache = RagCacheSemanticCache(rag.semantic, cache_truncated=True)
    engine = LocalEngine(lm)
    seen = _spy(engine)
    middleware = RagCacheMiddleware(cache)
    keys: list[Any] = []
    key = middleware.key
    middleware.key = lambda request: keys.append(key(request)) or keys[-1]  # type: ignore[method-assign]
    agent = create_agent(ChatRagCache(engine=engine, max_tokens=BUDGET), system_prompt=SYSTEM, middleware=[middleware])
    turn = RagPrompt().invoke({"question": QUESTION, "context": [Document(id=d["id"], page_content=d["text"])
                                                                for d in DOCS]}).to_messages()[-1]
    out = agent.invoke({"messages": [turn]})["messages"][-1]
    assert not seen  # served from the cache: the model was not called
    from langchain_ragcache._keys import key_messages

    layout = key_messages([turn], system=SYSTEM).layout  # what key() lays out for the model request
    return Seen(layout, keys[-1].partition.digest, out.response_metadata["ragcache"]["layer"], out.content)


def via_llamaindex_query_engine(lm, rag, req) -> Seen:
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from llama_index.llms.ragcache import RagCacheLLM
    from llama_index.query_engine.ragcache import RagCacheQueryEngine

    nodes = [NodeWithScore(node=TextNode(text=d["text"], id_=d["id"]), score=1.0) for d in DOCS]

    class Fixed:  # a retriever returning the request's documents
        def retrieve(self, q: Any) -> list[NodeWithScore]:
            return nodes

    qe = RagCacheQueryEngine(Fixed(), RagCacheLLM(LocalEngine(lm), max_new_tokens=BUDGET),  # type: ignore[arg-type]
                             semantic_cache=rag.semantic, system_prompt=SYSTEM, cache_truncated=True,
                             id_source="node_id")  # the request names its documents
    prep = qe.prepare(QueryBundle(QUESTION), nodes)
    r = qe.synthesize(QueryBundle(QUESTION), nodes)
    return Seen(prep.layout, prep.partition.digest, r.metadata["layer"], str(r.response))


def via_openai_server(lm, rag, req) -> Seen:
    from ragcache.providers.openai import layout_messages
    from ragcache.server.app import running_server

    engine = LocalEngine(lm)
    seen = _spy(engine)
    with running_server(engine, min_tokens=64) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="local", max_retries=0)
        model = client.models.list().data[0].id
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=layout_messages(req.layout), max_tokens=BUDGET, temperature=0.0)
    return Seen(seen[-1], None, raw.headers["x-ragcache-layer"], raw.parse().choices[0].message.content or "")


def via_anthropic_server(lm, rag, req) -> Seen:
    from ragcache.providers.anthropic.backend import sdk_kwargs
    from ragcache.providers.anthropic.breakpoints import layout_request
    from ragcache.server.app import running_server

    engine = LocalEngine(lm)
    seen = _spy(engine)
    body = layout_request(req.layout, model=CLAUDE, max_tokens=BUDGET, min_tokens=0).kwargs
    with running_server(engine, min_tokens=64) as url:
        client = anthropic.Anthropic(base_url=url, api_key="local", max_retries=0)
        msg = client.messages.create(**sdk_kwargs(client.messages.create, {**body, "temperature": 0.0}))
    # the Anthropic API has no layer field: the server reports usage; nothing read from a cache is "model"
    # (a cache write is the prompt computed and kept, not reused)
    layer = "prefix" if msg.usage.cache_read_input_tokens else "model"
    return Seen(seen[-1], None, layer, msg.content[0].text if msg.content else "")


def via_proxy(lm, rag, req) -> Seen:
    from ragcache.providers.anthropic.backend import sdk_kwargs
    from ragcache.providers.anthropic.breakpoints import layout_request
    from ragcache.server.app import running_server
    from ragcache.server.proxy import AnthropicProxy, body_request
    from test_cli_proxy import serving

    body = {**layout_request(req.layout, model=CLAUDE, max_tokens=16, min_tokens=0).kwargs, "temperature": 0,
            "stop_sequences": ["e"]}  # a stop string the tiny model emits: a complete answer, which the proxy stores
    keyed = body_request(body, tenant="t")
    assert keyed.question == QUESTION
    pk = keyed.partition
    assert pk.documents == req.partition.documents  # the documents' identities: invalidate() reaches it
    with running_server(LocalEngine(lm), min_tokens=64) as upstream:
        p = AnthropicProxy(upstream, semantic=SemanticCache(None, embedder=HashingEmbedder()), api_key="k",
                           min_tokens=64)
        with serving(p.app) as url:
            client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
            kw = sdk_kwargs(client.messages.create, body)
            first = client.messages.with_raw_response.create(**kw)
            assert first.headers["x-ragcache-layer"] in ("provider", "provider-cache") and first.parse().stop_reason == "stop_sequence"
            raw = client.messages.with_raw_response.create(**kw)
    return Seen(keyed.layout, None, raw.headers["x-ragcache-layer"], raw.parse().content[0].text)


ENTRY_POINTS = [via_ragcache, via_langchain_chain, via_langchain_agent_middleware, via_llamaindex_query_engine,
                via_openai_server, via_anthropic_server, via_proxy]
WIRE_ONLY = {"via_openai_server", "via_anthropic_server", "via_proxy"}  # get bytes only: no ids on the wire
EXPECTED_LAYER = {"via_openai_server": "model", "via_anthropic_server": "model"}  # no semantic cache there


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=lambda f: f.__name__)
def test_one_request_same_layout_partition_and_layer(tiny_wide3, ref, entry):
    rag, req, first = ref
    seen = entry(tiny_wide3, rag, req)
    # the bytes: ids are never rendered, so doors that only see the wire (the servers, the proxy) lay out
    # the same blocks with content-hash ids; doors given the ids keep them (for invalidate)
    blocks = [(b.kind, b.role, b.text) for b in seen.layout.blocks()]
    assert blocks == [(b.kind, b.role, b.text) for b in req.layout.blocks()]
    if entry.__name__ not in WIRE_ONLY:
        assert [b.doc_id for b in seen.layout.blocks()] == [b.doc_id for b in req.layout.blocks()]
    if seen.partition is not None:
        assert seen.partition == req.partition.digest
    assert seen.layer == EXPECTED_LAYER.get(entry.__name__, "semantic")
    if seen.layer == "semantic" and entry is not via_proxy:
        assert seen.text == first.text  # RagCache's stored answer, served through this entry point
