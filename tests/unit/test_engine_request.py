"""The engine's request record (``ragcache.engine.request.EngineRequest``): the keyword form of
``LocalEngine.generate`` / ``stream`` / ``astream`` builds it and runs the same request (same tokens, same
first logits, same reuse, float32 tiny model), ``namespace=`` is a deprecated name of ``tenant=``, bad
calls are refused at the call, and the local backend hands the engine a record."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import torch
from engine_doubles import RequestRecordingEngine

from ragcache.engine.backend import LocalBackend
from ragcache.engine.engine import LocalEngine
from ragcache.engine.request import OPTIONS, EngineRequest
from ragcache.prompt.layout import PromptLayout

DOCS = ["The canary deployment lasts fifteen minutes before traffic shifts to the new version entirely.",
        "Rollbacks are triggered automatically when the error rate exceeds two percent for five minutes."]
SYSTEM = "You answer from the passages only and cite the passage number. " * 4

CALLS = [  # (prompt, options): one request per entry, run in order on one engine
    (PromptLayout.build(system=SYSTEM, documents=DOCS, question="How long does the canary last?"),
     {"max_new_tokens": 4}),
    (PromptLayout.build(system=SYSTEM, documents=DOCS[::-1], question="When do rollbacks happen?"),
     {"max_new_tokens": 3, "tenant": "acme"}),
    ([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello there"}],
     {"max_new_tokens": 5, "temperature": 0.8, "top_p": 0.9, "seed": 7, "stop": ["zz"]}),
    ("How long does the canary last?", {"max_new_tokens": 2, "use_prefix_cache": False, "tenant": "default"}),
    (PromptLayout.build(system=SYSTEM, documents=DOCS, question="How long does the canary last?"),
     {"max_new_tokens": 3, "tenant": "acme", "prefix_limit": 16}),
]


def _same(a, b):
    assert a.token_ids == b.token_ids and a.text == b.text
    assert torch.equal(a.first_logits, b.first_logits)
    sa, sb = a.stats, b.stats
    assert (sa.prompt_tokens, sa.prefix_tokens_reused, sa.prefill_tokens_computed, sa.finish_reason) == (
        sb.prompt_tokens, sb.prefix_tokens_reused, sb.prefill_tokens_computed, sb.finish_reason)


def test_the_keyword_form_and_the_record_run_the_same_requests(tiny):
    by_keywords, by_record = LocalEngine(tiny, calibration=False), LocalEngine(tiny, calibration=False)
    for prompt, options in CALLS:
        _same(by_keywords.generate(prompt, **options), by_record.generate(EngineRequest(prompt, **options)))
    # and the stream of a record is the generate of the same record (fresh engines: the same cache states)
    s1, s2 = LocalEngine(tiny, calibration=False), LocalEngine(tiny, calibration=False)
    for prompt, options in CALLS:
        events = list(s1.stream(EngineRequest(prompt, **options)))
        assert "".join(e.text for e in events) == events[-1].generation.text
        _same(events[-1].generation, s2.generate(prompt, **options))


def test_astream_takes_the_record_too(tiny):
    eng, ref = LocalEngine(tiny, calibration=False), LocalEngine(tiny, calibration=False)

    async def run(req):
        return [ev async for ev in eng.astream(req)]

    for prompt, options in CALLS[:3]:
        events = asyncio.run(run(EngineRequest(prompt, **options)))
        _same(events[-1].generation, ref.generate(prompt, **options))


@pytest.mark.parametrize("tenant", ["acme", "default", "k:0123456789abcdef"])
def test_namespace_is_a_deprecated_name_of_tenant(tiny, tenant):
    prompt = PromptLayout.build(system=SYSTEM, documents=DOCS, question="How long does the canary last?")
    old, new = LocalEngine(tiny, calibration=False), LocalEngine(tiny, calibration=False)
    for _ in range(2):  # the second request reuses the first's KV exactly when the tenant's salt is the same
        with pytest.warns(DeprecationWarning, match="tenant="):
            got = old.generate(prompt, max_new_tokens=2, namespace=tenant)
        _same(got, new.generate(prompt, max_new_tokens=2, tenant=tenant))
    other = new.generate(prompt, max_new_tokens=2, tenant=tenant + "-other")
    assert other.stats.prefix_tokens_reused == 0  # another tenant: none of this one's KV
    with pytest.warns(DeprecationWarning):
        assert new.prefill(new.build_prompt(prompt), namespace=tenant).stats.prefix_tokens_reused > 0


def test_bad_calls_are_refused_at_the_call(tiny):
    eng = LocalEngine(tiny, calibration=False)
    req = EngineRequest("Hi", max_new_tokens=2)
    for call in (eng.generate, eng.stream, eng.astream):
        with pytest.raises(TypeError, match=r"max_new_tokens_x.*options are"):
            call("Hi", max_new_tokens_x=2)
        with pytest.raises(TypeError, match="both tenant= and namespace="):
            call("Hi", tenant="a", namespace="b")
        with pytest.raises(TypeError, match=r"dataclasses.replace"):
            call(req, max_new_tokens=3)
    # a bad value is refused when the stream is read, as the keyword form always did
    for bad in ({"max_new_tokens": 0}, {"temperature": -1.0}, {"top_p": 0.0}):
        stream = eng.stream(EngineRequest("Hi", **bad))
        with pytest.raises(ValueError, match="max_new_tokens|temperature"):
            next(stream)
    with pytest.raises(TypeError, match="tenant"):
        eng.generate("Hi", max_new_tokens=1, tenant=3)


def test_the_record_is_frozen_and_names_every_option():
    req = EngineRequest("Hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.tenant = "acme"  # type: ignore[misc]
    assert OPTIONS == ("max_new_tokens", "temperature", "top_p", "stop", "seed", "use_prefix_cache",
                       "use_chunk_cache", "recompute_ratio", "tenant", "prefix_limit")
    assert dataclasses.replace(req, tenant="acme").tenant == "acme" and req.tenant is None


@pytest.mark.parametrize("tenant", [None, "default", "acme"])
def test_the_local_backend_hands_the_engine_a_record(tiny, tenant):
    eng = RequestRecordingEngine(tiny, calibration=False)
    backend = LocalBackend(eng, stop=["zz"], use_chunk_cache=False)
    layout = PromptLayout.build(system=SYSTEM, documents=DOCS, question="How long does the canary last?")
    backend.generate(layout, max_new_tokens=2, temperature=0.0, tenant=tenant)
    asyncio.run(backend.agenerate(layout, max_new_tokens=2, temperature=0.0, tenant=tenant))
    list(backend.stream(layout, max_new_tokens=2, temperature=0.0, tenant=tenant))

    async def drain():
        return [ev async for ev in backend.astream(layout, max_new_tokens=2, temperature=0.0, tenant=tenant)]

    asyncio.run(drain())
    want = EngineRequest(layout, max_new_tokens=2, temperature=0.0, stop=["zz"], use_chunk_cache=False, tenant=tenant)
    assert eng.handed == [(want, {})] * 4


@pytest.mark.parametrize("engine_namespace", [None, "eng-v2"])
@pytest.mark.parametrize("tenant", [None, "default", "acme"])
def test_a_tenants_chunk_view_carries_its_kv_salt(tiny, engine_namespace, tenant):
    from ragcache.engine.chunk import ChunkCache, MemoryChunkStore
    from ragcache.engine.keys import kv_salt

    eng = LocalEngine(tiny, calibration=False, namespace=engine_namespace,
                      chunk_cache=ChunkCache(MemoryChunkStore(), dtype=torch.float32))
    view = eng.chunks_for(tenant)
    assert view.salt == eng.kv_salt(tenant) == kv_salt(engine_namespace, tenant)
    assert (view.salt == engine_namespace) is (tenant in (None, "default"))
    assert not hasattr(view, "namespace")  # one name: the salt


def test_precompute_keys_a_tenants_chunks_under_its_salt(tiny):
    from ragcache.engine.chunk import ChunkCache, MemoryChunkStore

    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    eng = LocalEngine(tiny, calibration=False, chunk_cache=cc)
    docs = [eng.tokenizer.encode(d, add_special_tokens=False) for d in DOCS]
    assert cc.precompute(eng, docs, tenant="acme", progress=False) == 2
    with pytest.warns(DeprecationWarning, match="tenant="):
        assert cc.precompute(eng, docs, namespace="acme", progress=False) == 0  # the old name: the same tenant
    assert all(eng.chunks_for("acme").lookup(d) is not None for d in docs)
    assert all(eng.chunks_for(t).lookup(d) is None for d in docs for t in (None, "globex"))
    with pytest.raises(TypeError, match="both tenant= and namespace="):
        cc.precompute(eng, docs, tenant="acme", namespace="acme", progress=False)
    with pytest.raises(TypeError, match=r"salt=engine.kv_salt\(tenant\)"):
        cc.precompute(eng.model, docs, fingerprint=eng.fingerprint, tenant="acme", progress=False)
