"""ChatRagCache has one tenant per call (issue 49 item 5): the tenant the engine salts the call's KV with
(``EngineRequest.tenant``), the tenant of its ``CacheRequest`` and the namespace the semantic cache looks the
answer up in are one value: the call's ``tenant`` (the model's, or ``invoke(..., tenant=)``), else the cache's
namespace. Two tenants that share one engine and one cache are never served each other's answers, on
``invoke`` (LangChain's own cache loop) and on ``stream`` (ragcache's answer path)."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_ragcache import ChatRagCache, RagCacheSemanticCache

from ragcache.backend import DEFAULT_TENANT

MESSAGES = [SystemMessage("You are the support desk of a bike shop."), HumanMessage("How long do refunds take?")]


class Seen:
    """What one engine and one cache were handed: the engine requests' tenants and KV salts, the
    partitions' namespaces of the cache's lookups."""

    def __init__(self, engine, cache: RagCacheSemanticCache, monkeypatch) -> None:
        self.tenants: list[str | None] = []
        self.salts: list[str | None] = []
        self.namespaces: list[str] = []
        stream, lookup = engine.stream, cache.semantic_cache.lookup

        def seen_stream(request, **options):
            self.tenants.append(request.tenant)
            self.salts.append(engine.kv_salt(request.tenant))
            return stream(request, **options)

        def seen_lookup(question, *, partition=None, **kw):
            self.namespaces.append(partition.namespace)
            return lookup(question, partition=partition, **kw)

        monkeypatch.setattr(engine, "stream", seen_stream)
        monkeypatch.setattr(cache.semantic_cache, "lookup", seen_lookup)

    def clear(self) -> None:
        self.tenants.clear(), self.salts.clear(), self.namespaces.clear()


def _layer(msg) -> str:
    return msg.response_metadata["ragcache"]["layer"]


def _streamed(chat, **kw):
    chunks = list(chat.stream(MESSAGES, **kw))
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    return full


def _chat(engine, cache, tenant):
    # seeded sampling: the tiny random model's greedy answer is blank, and a blank answer is never stored
    return ChatRagCache(engine=engine, max_tokens=4, cache=cache, temperature=1.0, seed=3, tenant=tenant)


@pytest.mark.parametrize("namespace", [DEFAULT_TENANT, "team-x"])
@pytest.mark.parametrize("how", ["invoke", "stream"])
def test_two_tenants_sharing_one_cache_are_never_served_each_other(tiny_engine_plain, embedder, monkeypatch,
                                                                   how, namespace):
    cache = RagCacheSemanticCache(path=None, embedder=embedder, namespace=namespace, cache_truncated=True)
    seen = Seen(tiny_engine_plain, cache, monkeypatch)
    a, b = _chat(tiny_engine_plain, cache, "a"), _chat(tiny_engine_plain, cache, "b")
    ask = (lambda chat: chat.invoke(MESSAGES)) if how == "invoke" else _streamed

    ta, tb = cache.tenant_for("a"), cache.tenant_for("b")
    assert (ta, tb) == (("a", "b") if namespace == DEFAULT_TENANT else (f"{namespace}/a", f"{namespace}/b"))
    first_a = ask(a)
    assert _layer(first_a) != "semantic" and len(cache.semantic_cache) == 1
    assert seen.tenants == [ta] and set(seen.namespaces) == {ta}  # (a miss is read twice: single flight)
    seen.clear()
    first_b = ask(b)  # the same request by another tenant: a miss, answered by the engine under b's salt
    assert _layer(first_b) != "semantic" and len(cache.semantic_cache) == 2
    assert seen.tenants == [tb] and set(seen.namespaces) == {tb}
    assert seen.salts[0] not in (None, tiny_engine_plain.kv_salt(ta))
    seen.clear()
    for chat, first in ((a, first_a), (b, first_b)):  # each tenant is served its own answer
        again = ask(chat)
        assert _layer(again) == "semantic" and again.content == first.content
    assert seen.tenants == [] and list(dict.fromkeys(seen.namespaces)) == [ta, tb]


@pytest.mark.parametrize("tenant", ["a", "team-y", "x/a"])
def test_one_tenant_name_in_two_namespaces_is_two_tenants(embedder, tenant):
    """Two caches of other namespaces (one store or two) key a call of the same tenant apart: neither its
    answers nor its KV salt are shared; a call naming its cache's own namespace is that namespace."""
    x, y = (RagCacheSemanticCache(path=None, embedder=embedder, namespace=n) for n in ("team-x", "team-z"))
    assert x.tenant_for(tenant) == f"team-x/{tenant}" != y.tenant_for(tenant) == f"team-z/{tenant}"
    assert x.tenant_for(None) == x.tenant_for(DEFAULT_TENANT) == "team-x"
    assert x.tenant_for("team-x") == "team-x/team-x"  # a tenant named like the namespace is not the calls naming none
    plain = RagCacheSemanticCache(path=None, embedder=embedder)
    assert plain.tenant_for(tenant) == tenant and plain.tenant_for(None) == DEFAULT_TENANT


@pytest.mark.parametrize("namespace", [DEFAULT_TENANT, "team-x"])
@pytest.mark.parametrize("model_tenant,call_tenant,want", [
    ("a", None, "a"), ("a", "b", "b"), (None, "b", "b"), (None, None, None), (DEFAULT_TENANT, None, None),
    (None, DEFAULT_TENANT, None)])
def test_the_kv_salt_the_request_and_the_lookup_have_one_tenant(tiny_engine_plain, embedder, monkeypatch, namespace,
                                                                model_tenant, call_tenant, want):
    """``want`` ``None``: the call names no tenant, so it is the cache's namespace (the default tenant's KV salt
    for the default namespace)."""
    want = namespace if want is None else want if namespace == DEFAULT_TENANT else f"{namespace}/{want}"
    cache = RagCacheSemanticCache(path=None, embedder=embedder, namespace=namespace, cache_truncated=True)
    seen = Seen(tiny_engine_plain, cache, monkeypatch)
    chat = _chat(tiny_engine_plain, cache, model_tenant)
    kw = {} if call_tenant is None else {"tenant": call_tenant}
    req = chat._path_key(cache, MESSAGES, None, chat._options(None, kw), kw)[0]
    assert req.tenant == req.partition.namespace == want
    # one value: the namespace, no tenant parameter beside it (the same key as a tenant-less call to a cache of
    # that namespace)
    own = RagCacheSemanticCache(path=None, embedder=embedder, namespace=want)
    plain = _chat(tiny_engine_plain, own, None)
    assert plain._path_key(own, MESSAGES, None, plain._options(None, {}), {})[0].partition == req.partition
    prompt, llm_string = chat._cache_key(MESSAGES, None, kw)
    assert cache.request(prompt, llm_string, model=chat.model_name) == req  # LangChain's own loop: the same
    chat.invoke(MESSAGES, **kw)  # LangChain's loop, then the engine
    list(chat.stream([*MESSAGES[:1], HumanMessage("Can I return a bike?")], **kw))  # the answer path, a miss
    assert seen.tenants == [want, want] and set(seen.namespaces) == {want}
    assert seen.salts == [tiny_engine_plain.kv_salt(want)] * 2


def test_without_ragcaches_cache_the_tenant_is_the_models(tiny_engine_plain, monkeypatch):
    """No semantic cache of ragcache's: the engine is handed the call's own tenant (``None``: the default)."""
    calls = []
    stream = tiny_engine_plain.stream
    monkeypatch.setattr(tiny_engine_plain, "stream", lambda r, **o: calls.append(r.tenant) or stream(r, **o))
    ChatRagCache(engine=tiny_engine_plain, max_tokens=2, tenant="a", cache=False).invoke(MESSAGES)
    ChatRagCache(engine=tiny_engine_plain, max_tokens=2, cache=False).invoke(MESSAGES)
    list(ChatRagCache(engine=tiny_engine_plain, max_tokens=2, cache=False).stream(MESSAGES, tenant="b"))
    assert calls == ["a", None, "b"]


@pytest.mark.parametrize("namespace", [DEFAULT_TENANT, "team-x"])
@pytest.mark.parametrize("tenant", [None, "a", "b"])
def test_the_middleware_keys_a_call_under_the_same_tenant(tiny_engine_plain, embedder, namespace, tenant):
    """An agent's model call through :class:`RagCacheMiddleware` is keyed under the tenant the model's own call
    is (:meth:`RagCacheSemanticCache.tenant_for`): one value, and the same digest for the same messages."""
    from langchain.agents.middleware.types import ModelRequest
    from langchain_ragcache import RagCacheMiddleware

    cache = RagCacheSemanticCache(path=None, embedder=embedder, namespace=namespace)
    chat = _chat(tiny_engine_plain, cache, tenant)
    key = RagCacheMiddleware(cache).key(ModelRequest(model=chat, messages=MESSAGES[1:], system_message=MESSAGES[0],
                                                     tools=[], model_settings={}))
    own = chat._path_key(cache, MESSAGES, None, chat._options(None, {}), {})[0]
    assert key.tenant == key.partition.namespace == own.tenant == cache.tenant_for(tenant)
    others = {RagCacheMiddleware(cache).key(ModelRequest(model=_chat(tiny_engine_plain, cache, t),
                                                         messages=MESSAGES[1:], system_message=MESSAGES[0],
                                                         tools=[], model_settings={})).partition.digest
              for t in (None, "a", "b")}
    assert len(others) == 3  # three tenants, three partitions


@pytest.mark.parametrize("bad,err", [("", ValueError), (3, TypeError), (b"a", TypeError)])
def test_tenant_for_refuses_what_a_call_refuses(embedder, bad, err):
    cache = RagCacheSemanticCache(path=None, embedder=embedder, namespace="team-x")
    with pytest.raises(err, match="tenant must be a non-empty str or None"):
        cache.tenant_for(bad)


@pytest.mark.parametrize("how", ["invoke", "stream"])
def test_a_tenant_named_like_the_namespace_is_not_served_the_unnamed_calls(tiny_engine_plain, embedder, how):
    cache = RagCacheSemanticCache(path=None, embedder=embedder, namespace="team-x", cache_truncated=True)
    ask = (lambda chat: chat.invoke(MESSAGES)) if how == "invoke" else _streamed
    first = ask(_chat(tiny_engine_plain, cache, None))
    assert _layer(first) != "semantic" and _layer(ask(_chat(tiny_engine_plain, cache, None))) == "semantic"
    assert _layer(ask(_chat(tiny_engine_plain, cache, "team-x"))) != "semantic"
