"""Sampled answers (issue 39, section 2): one replay rule at every entry point (:class:`ragcache.answering.Sampling`,
:meth:`ragcache.answering.AnswerPath.fresh_draw`).

- a request that samples without a seed gets a fresh draw: neither looked up nor stored;
- ``cache_sampled=True`` (per cache / entry point) replays one stored sample, labelled ``sampled``;
- a request for several choices (``n > 1``) is never served one stored sample, opt-in or not;
- seeded and temperature-0 requests keep hitting; an unset temperature means the backend's default
  (the Anthropic API samples at 1.0; ChatRagCache and unknown LangChain models decode greedily).

Through RagCache (sync and async), the LangChain middleware, ChatRagCache (its stream through the answer path
and ``invoke`` through LangChain's LLM cache), the LlamaIndex query engine and the Anthropic proxy (the real
SDK over loopback HTTP); each over an in-memory SemanticCache and the contract's scripted model.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("llama_index.core")
pytest.importorskip("langchain")
anthropic = pytest.importorskip("anthropic")

from adapter_doubles import (  # noqa: E402
    DOCS,
    SYSTEM,
    ScriptedChat,
    lc_answer,
    lc_call,
    scripted_chat_rag_cache,
)
from contract_entries import (  # noqa: E402
    fixed_nodes,
    fixed_retriever,
    scripted_llamaindex_backend,
    scripted_upstream,
)
from langchain_core.messages import HumanMessage  # noqa: E402

from ragcache.answering import AnswerPath, Sampling  # noqa: E402
from ragcache.semantic import SemanticCache  # noqa: E402
from ragcache.testing import HashingEmbedder  # noqa: E402
from ragcache.testing.answer_contract import ScriptedBackend  # noqa: E402

Q = "When do the backups run?"


class Outcome:
    """What an entry point's answer says: served from the cache, and labelled a replayed sample."""

    def __init__(self, hit: bool, sampled: bool = False) -> None:
        self.hit, self.sampled = hit, sampled


# ---------------------------------------------------------------------------------------------- entries
def rag_entry(backend, store, *, temperature, seed=None, n=1, opt=False, mode="sync", servers=None):
    from ragcache import RagCache

    params = {"seed": seed, "n": n if n > 1 else None}
    rag = RagCache(backend, semantic=store, system=SYSTEM, temperature=temperature, params=params, cache_sampled=opt)

    def ask() -> Outcome:
        a = rag.answer(Q, DOCS) if mode == "sync" else asyncio.run(rag.aanswer(Q, DOCS))
        return Outcome(a.hit, bool(a.provenance and a.provenance.sampled))
    return ask


class SampledChat(ScriptedChat):
    """The scripted chat model with sampling parameters in its identity (LangChain's ``llm_string``)."""

    temperature: float | None = None
    seed: int | None = None
    n: int = 1

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {**super()._identifying_params, "temperature": self.temperature, "seed": self.seed, "n": self.n}


def middleware_entry(backend, store, *, temperature, seed=None, n=1, opt=False, mode="sync", servers=None):
    from langchain.agents import create_agent
    from langchain_ragcache import RagCacheSemanticCache
    from langchain_ragcache.middleware import RagCacheMiddleware

    chat = SampledChat(backend=backend, temperature=temperature, seed=seed, n=n)
    agent = create_agent(chat, [], system_prompt=SYSTEM,
                         middleware=[RagCacheMiddleware(RagCacheSemanticCache(store, cache_sampled=opt))])

    def ask() -> Outcome:
        inp = {"messages": [HumanMessage(Q)]}
        out = agent.invoke(inp) if mode == "sync" else asyncio.run(agent.ainvoke(inp))
        return _lc(out["messages"][-1])
    return ask


def _lc(msg: Any) -> Outcome:
    a = lc_answer(Q, msg)
    return Outcome(a.layer == "semantic", bool(msg.response_metadata["ragcache"].get("sampled")))


def chatragcache_entry(backend, store, *, temperature, seed=None, n=1, opt=False, mode="stream", servers=None):
    from langchain_ragcache import RagCacheSemanticCache

    model = scripted_chat_rag_cache(backend, max_tokens=64, temperature=temperature if temperature is not None else 0.0,
                                    seed=seed, cache=RagCacheSemanticCache(store, cache_sampled=opt))

    def ask() -> Outcome:
        msgs = [HumanMessage(Q)]
        return _lc(lc_call(model, msgs, mode))
    return ask


def llamaindex_entry(backend, store, *, temperature, seed=None, n=1, opt=False, mode="query", servers=None):
    from llama_index.core.llms import MockLLM
    from llama_index.query_engine.ragcache import RagCacheQueryEngine

    llm = MockLLM()
    object.__setattr__(llm, "temperature", temperature)  # what RagCacheQueryEngine reads of an LLM's sampling
    object.__setattr__(llm, "seed", seed)
    engine = RagCacheQueryEngine(fixed_retriever(fixed_nodes(DOCS)), llm, semantic_cache=store, system_prompt=SYSTEM,
                                 lint="off", cache_sampled=opt)
    engine._backend = scripted_llamaindex_backend(backend, llm)

    def ask() -> Outcome:
        m = engine.query(Q).metadata
        return Outcome(m["layer"] == "semantic", bool(m.get("sampled")))
    return ask


def proxy_entry(backend, store, *, temperature, seed=None, n=1, opt=False, mode="plain", servers=None):
    from ragcache.providers.anthropic.backend import sdk_kwargs
    from ragcache.server.app import running_server
    from ragcache.server.proxy import AnthropicProxy

    up = running_server(None, app=scripted_upstream(backend))
    proxy = AnthropicProxy(up.__enter__(), semantic=store, api_key="k", cache_sampled=opt)
    down = running_server(None, app=proxy.app)
    servers += [down, up]
    client = anthropic.Anthropic(base_url=down.__enter__(), api_key="k", max_retries=0)
    content = [{"type": "text", "text": d} for d in DOCS] + [{"type": "text", "text": Q}]
    body = {"model": "claude-sonnet-4-6", "max_tokens": 64, "system": SYSTEM, "messages": [{"role": "user", "content": content}]}
    if temperature is not None:
        body["temperature"] = temperature

    def ask() -> Outcome:
        if mode == "plain":
            raw = client.messages.with_raw_response.create(**sdk_kwargs(client.messages.create, body))
            headers = raw.headers
        else:
            with client.messages.stream(**sdk_kwargs(client.messages.stream, body)) as s:
                headers = s.response.headers
                "".join(s.text_stream)
        return Outcome(headers["x-ragcache-layer"] == "semantic", headers.get("x-ragcache-sampled") == "true")
    return ask


ENTRIES = {
    "ragcache-sync": (rag_entry, "sync"), "ragcache-async": (rag_entry, "async"),
    "middleware-sync": (middleware_entry, "sync"), "middleware-async": (middleware_entry, "async"),
    "chatragcache-stream": (chatragcache_entry, "stream"), "chatragcache-invoke": (chatragcache_entry, "invoke"),
    "llamaindex-query": (llamaindex_entry, "query"),
    "proxy-plain": (proxy_entry, "plain"), "proxy-stream": (proxy_entry, "stream"),
}
NO_SEED = {"proxy-plain", "proxy-stream"}  # the Anthropic Messages API has no seed
CHOICES = {"ragcache-sync", "ragcache-async", "middleware-sync", "middleware-async"}  # entry points that take n


@pytest.fixture()
def servers():
    held: list = []
    yield held
    for s in held:
        s.__exit__(None, None, None)


@pytest.fixture(params=sorted(ENTRIES))
def entry(request, servers):
    factory, mode = ENTRIES[request.param]
    store = SemanticCache(None, embedder=HashingEmbedder())

    def make(backend: ScriptedBackend, **kw: Any) -> Any:
        return factory(backend, store, mode=mode, servers=servers, **kw)
    make.name = request.param  # type: ignore[attr-defined]
    return make


def _twice(make, **kw) -> tuple[list[Outcome], int]:
    backend = ScriptedBackend(approximate=False, recompute_ratio=None)  # exact: served at any blend setting
    ask = make(backend, **kw)
    return [ask(), ask()], backend.calls


def test_greedy_requests_hit(entry):
    (first, second), calls = _twice(entry, temperature=0.0)
    assert not first.hit and second.hit and not second.sampled and calls == 1, entry.name


def test_a_sampled_request_without_a_seed_is_a_fresh_draw(entry):
    (first, second), calls = _twice(entry, temperature=0.7)
    assert not first.hit and not second.hit and calls == 2, f"{entry.name} replayed a sample"


def test_a_seeded_sample_hits(entry):
    if entry.name in NO_SEED:
        pytest.skip("the Anthropic Messages API has no seed")
    (first, second), calls = _twice(entry, temperature=0.7, seed=3)
    assert not first.hit and second.hit and not second.sampled and calls == 1, entry.name


def test_the_opt_in_replays_one_sample_labelled(entry):
    (first, second), calls = _twice(entry, temperature=0.7, opt=True)
    assert not first.hit and second.hit and calls == 1, entry.name
    assert second.sampled, f"{entry.name}: a replayed sample is not labelled"


def test_several_choices_are_never_one_stored_sample(entry):
    if entry.name not in CHOICES:
        pytest.skip("this entry point asks for one choice")
    for kw in ({"temperature": 0.7, "opt": True}, {"temperature": 0.7, "seed": 3}, {"temperature": 0.0}):
        (first, second), calls = _twice(entry, n=2, **kw)
        assert not first.hit and not second.hit and calls == 2, f"{entry.name} {kw}"


def test_an_unset_temperature_is_the_backends_default(servers):
    """The Anthropic API samples at 1.0 when the temperature is unset: the proxy forwards each such request;
    ChatRagCache's default is greedy (0), and an unset one on an unknown LangChain model is read as greedy."""
    store = SemanticCache(None, embedder=HashingEmbedder())
    (first, second), calls = _twice(lambda b, **kw: proxy_entry(b, store, servers=servers, **kw), temperature=None)
    assert not second.hit and calls == 2
    store = SemanticCache(None, embedder=HashingEmbedder())
    (first, second), calls = _twice(lambda b, **kw: middleware_entry(b, store, **kw), temperature=None)
    assert second.hit and calls == 1


def test_the_rule_is_one_function():
    path, opted = AnswerPath(None), AnswerPath(None, cache_sampled=True)
    assert path.fresh_draw(None) is None and path.fresh_draw(Sampling(0.0)) is None
    assert path.fresh_draw(Sampling(0.5, seed=1)) is None
    assert "without a seed" in path.fresh_draw(Sampling(0.5))
    assert "unset" in path.fresh_draw(Sampling(None, unset_temperature=1.0))
    assert path.fresh_draw(Sampling(None, unset_temperature=0.0)) is None
    assert opted.fresh_draw(Sampling(0.5)) is None
    assert "2 choices" in opted.fresh_draw(Sampling(0.0, n=2))
    with pytest.raises(ValueError):
        Sampling(-1.0)
    with pytest.raises(ValueError):
        Sampling(0.0, n=0)
