"""The tenant in every KV key (issue 29 item 5, issue 32 section 2 "one tenant reads another's prompt
through the KV cache"): a request's namespace salts its prefix and chunk KV keys, as vLLM's
``cache_salt``; sharing KV across tenants is an explicit opt-in. End to end, on the local servers with
the real anthropic and openai SDKs: a tenant's cached-token counts and ``x-ragcache-*`` headers do
not say whether its guess of another tenant's system text is right."""

from __future__ import annotations

import pytest
import torch

from ragcache.engine.backend import LocalBackend
from ragcache.engine.chunk import ChunkCache, DiskChunkStore, MemoryChunkStore
from ragcache.engine.engine import LocalEngine
from ragcache.engine.keys import kv_salt

DOCS = ["The canary deployment lasts fifteen minutes before traffic shifts to the new version entirely.",
        "Rollbacks are triggered automatically when the error rate exceeds two percent for five minutes.",
        "Each region keeps three replicas of the service, and a fourth one is added during peak hours."]
SYSTEM = ("You are the support assistant of the Northwind Traders warehouse. Answer from the passages only, "
          "cite the passage number, and say so when the passages do not hold the answer. ") * 3


def rag(question="How long does the canary last?", docs=DOCS, system=SYSTEM):
    return [{"role": "system", "content": system},
            {"role": "user", "content": [{"type": "text", "text": d, "ragcache_kind": "document"} for d in docs]
             + [{"type": "text", "text": question, "ragcache_kind": "question"}]}]


def make(loaded, store=None, **kw):
    # blending on any chunk hit (r given, no calibration), so the chunk store alone decides chunk reuse
    cc = ChunkCache(store if store is not None else MemoryChunkStore(), dtype=torch.float32)
    return LocalEngine(loaded, chunk_cache=cc, min_reuse_tokens=0, calibration=False, recompute_ratio=0.15,
                       **{"chunk_admission": 1, "chunk_queue": 0, **kw})


# ------------------------------------------------------------------ the salt
def test_kv_salt_keeps_tenants_apart_and_never_holds_the_name():
    tenants = ["acme", "globex", "Acme", "acme ", "", "k:0123456789abcdef", "h:team-1"]
    salts = {kv_salt(None, t) for t in tenants}
    assert len(salts) == len(tenants)
    assert all(s.startswith("tenant:") and "acme" not in s.lower() and "team" not in s for s in salts)
    assert kv_salt(None, None) is None and kv_salt(None, "default") is None  # the default tenant: the engine's own
    assert kv_salt("eng", None) == "eng" and kv_salt("eng", "acme") != kv_salt("other", "acme")
    assert kv_salt("eng", "acme", share=True) == "eng"
    for bad in (1, b"acme", ["acme"]):
        with pytest.raises(TypeError, match="namespace"):
            kv_salt(None, bad)


def test_share_setting_is_checked(tiny):
    with pytest.raises(TypeError, match="share_kv_across_namespaces"):
        LocalEngine(tiny, share_kv_across_namespaces="yes")


# ------------------------------------------------------------------ the engine
@pytest.mark.parametrize("a,b", [("acme", "globex"), ("acme", None), (None, "globex"), ("tenant-1", "Tenant-1")])
def test_second_tenant_reuses_no_prefix_or_chunk_kv_by_default(tiny, a, b):
    eng = make(tiny)
    first = eng.generate(rag(), max_new_tokens=2, namespace=a).stats
    assert first.prefix_tokens_reused == 0 and first.docs_missed == 3
    # the documents in another order: the prefix ends at the system text, the documents are chunk hits
    own = eng.generate(rag("When do rollbacks happen?", DOCS[::-1]), max_new_tokens=2, namespace=a).stats
    assert own.prefix_tokens_reused > 0 and own.docs_hit == 3  # a tenant reuses its own KV
    other = eng.generate(rag("When do rollbacks happen?", DOCS[::-1]), max_new_tokens=2, namespace=b).stats
    assert other.prefix_tokens_reused == 0 and other.docs_hit == 0 and other.chunk_tokens_reused == 0
    assert not other.approximate


@pytest.mark.parametrize("a,b", [("acme", "globex"), ("acme", None), ("x", "y")])
def test_second_tenant_reuses_kv_with_the_opt_in(tiny, a, b):
    eng = make(tiny, share_kv_across_namespaces=True)
    eng.generate(rag(), max_new_tokens=2, namespace=a)
    other = eng.generate(rag("When do rollbacks happen?", DOCS[::-1]), max_new_tokens=2, namespace=b).stats
    assert other.prefix_tokens_reused > 0 and other.docs_hit == 3


def test_default_namespace_is_the_engines_own(tiny):
    """``RagCache``'s default namespace ("default") and a request with none are one tenant, whose KV
    is the engine's own (so chunks warmed with ``ChunkCache.precompute(engine, ...)`` keep serving)."""
    eng = make(tiny)
    eng.generate(rag(), max_new_tokens=1)
    got = eng.generate(rag("How many replicas?", DOCS[::-1]), max_new_tokens=1, namespace="default").stats
    assert got.prefix_tokens_reused > 0 and got.docs_hit == 3
    acme = eng.generate(rag("How many replicas?", DOCS[::-1]), max_new_tokens=1, namespace="acme").stats
    assert acme.prefix_tokens_reused == 0 and acme.docs_hit == 0


def test_tenants_stay_apart_in_a_disk_store_shared_by_two_engines(tiny, tmp_path):
    one, two = make(tiny, DiskChunkStore(tmp_path / "kv")), make(tiny, DiskChunkStore(tmp_path / "kv"))
    one.generate(rag(), max_new_tokens=1, namespace="acme")
    assert two.generate(rag(), max_new_tokens=1, namespace="globex").stats.docs_hit == 0
    assert two.generate(rag("Replicas?", DOCS[::-1]), max_new_tokens=1, namespace="acme").stats.docs_hit == 3


def test_backend_passes_the_tenant(tiny):
    backend = LocalBackend(make(tiny))
    backend.generate(rag(), max_new_tokens=2, temperature=0.0, tenant="acme")
    again = backend.generate(rag("Rollbacks?"), max_new_tokens=2, temperature=0.0, tenant="acme")
    other = backend.generate(rag("Rollbacks?"), max_new_tokens=2, temperature=0.0, tenant="globex")
    assert again.usage.prefix_reused > 0 and again.layer != "model"
    assert other.usage.prefix_reused == 0 and other.usage.chunk_reused == 0 and other.layer == "model"
    events = list(backend.stream(rag("Rollbacks?"), max_new_tokens=2, temperature=0.0, tenant="initech"))
    assert events[-1].generation.stats.prefix_tokens_reused == 0


@pytest.mark.parametrize("a,b", [("acme", "globex"), ("default", "globex"), ("team-1", "Team-1")])
def test_ragcache_namespace_salts_the_kv_of_its_request(tiny, a, b):
    """``RagCache.answer(namespace=...)`` partitions the answers *and* salts the prefix / chunk KV: a
    second tenant sending the same system text and documents reuses none of the first one's KV."""
    from ragcache import RagCache

    rag_ = RagCache(LocalBackend(make(tiny)), semantic=None, system=SYSTEM, max_new_tokens=2)
    rag_.answer("How long does the canary last?", DOCS, namespace=a)
    # canonical document order: the system text and the documents are one cached prefix of this tenant
    own = rag_.answer("When do rollbacks happen?", DOCS[::-1], namespace=a)
    assert own.usage.prefix_reused > 0
    other = rag_.answer("When do rollbacks happen?", DOCS[::-1], namespace=b)
    assert other.usage.reused == 0 and other.usage.prefix_reused == 0 and other.usage.chunk_reused == 0


def test_ragcache_tenants_share_kv_only_with_the_opt_in(tiny):
    from ragcache import RagCache

    rag_ = RagCache(LocalBackend(make(tiny, share_kv_across_namespaces=True)), semantic=None, system=SYSTEM,
                    max_new_tokens=2)
    rag_.answer("How long does the canary last?", DOCS, namespace="acme")
    other = rag_.answer("When do rollbacks happen?", DOCS[::-1], namespace="globex")
    assert other.usage.prefix_reused > 0


def test_ragcache_gives_every_backend_the_tenant():
    """The tenant is part of the Backend contract: RagCache gives it to every backend, sync and async (a
    provider backend keeps its cache per API key and leaves it unused)."""
    import asyncio

    from ragcache import RagCache
    from ragcache.backend import BackendResult, CacheUsage

    class Provider:
        name, model_id = "provider", "m"

        def __init__(self):
            self.tenants = []

        def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
            self.tenants.append(tenant)
            return BackendResult("ok", "provider", CacheUsage())

        async def agenerate(self, layout, *, max_new_tokens, temperature, tenant=None):
            return self.generate(layout, max_new_tokens=max_new_tokens, temperature=temperature, tenant=tenant)

    p = Provider()
    rag_ = RagCache(p, semantic=None, namespace="initech")
    assert rag_.answer("Why?", ["doc"], namespace="acme").text == "ok"
    assert asyncio.run(rag_.aanswer("Why?", ["doc"], namespace="globex")).text == "ok"
    rag_.answer("Why?", ["doc"])
    assert p.tenants == ["acme", "globex", "initech"]


# ------------------------------------------------------------------ end to end: the local servers
anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

KEYS = ["key-alice-" + "a" * 20, "key-bob-" + "b" * 22, "key-carol-" + "c" * 20, "key-dave-" + "d" * 21]
SECRET = ("Internal policy of Tailspin Toys: refunds above 400 euros need the approval of Marta Quintero, "
          "the discount code STAFF-7781 is never given to customers, and the Lisbon warehouse closes early "
          "on Fridays. ") * 4
WRONG = ("Internal policy of Tailspin Toys: refunds above 900 euros need the approval of Pedro Alvares, "
         "the discount code SPRING-2210 is given to every customer, and the Porto warehouse opens late "
         "on Mondays. ") * 4


@pytest.fixture(scope="module")
def server_engine(tiny_wide):
    return LocalEngine(tiny_wide, calibration=False)


def _openai_reuse(client, system):
    raw = client.chat.completions.with_raw_response.create(
        model="tiny-llama", max_tokens=1, temperature=0,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": "Summarise the policy."}])
    return raw.parse().usage.prompt_tokens_details.cached_tokens, int(raw.headers["x-ragcache-prefix-reused"])


def _anthropic_reuse(client, system):
    raw = client.messages.with_raw_response.create(
        model="claude-sonnet-4-6", max_tokens=1, temperature=0,
        system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "Summarise the policy."}])
    return raw.parse().usage.cache_read_input_tokens, int(raw.headers["x-ragcache-prefill-reused"])


def _guesses(make_client, reuse):
    """Tenant 0 sends the secret twice (it reuses its own KV); tenants 1 and 2, new to the server,
    guess it right and wrong. Returns (victim's repeat, right guess, wrong guess)."""
    victim = make_client(0)
    reuse(victim, SECRET)
    repeat = reuse(victim, SECRET)
    return repeat, reuse(make_client(1), SECRET), reuse(make_client(2), WRONG)


@pytest.mark.parametrize("credential", ["api_key", "bearer", "tenant_header"])
@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_tenant_cannot_tell_whether_its_guess_of_another_tenants_system_text_is_right(server_engine, api,
                                                                                          credential):
    from ragcache.server.app import running_server

    server_engine.prefix_cache.clear()
    opts = {"tenant_header": "x-tenant"} if credential == "tenant_header" else {"keys": KEYS}

    def client(i):
        if api == "openai":
            extra = {"default_headers": {"x-tenant": f"team-{i}"}} if credential == "tenant_header" else {}
            return openai.OpenAI(base_url=url + "/v1", api_key=KEYS[i], max_retries=0, **extra)
        if credential == "bearer":
            return anthropic.Anthropic(base_url=url, auth_token=KEYS[i], max_retries=0)
        extra = {"default_headers": {"x-tenant": f"team-{i}"}} if credential == "tenant_header" else {}
        return anthropic.Anthropic(base_url=url, api_key=KEYS[i], max_retries=0, **extra)

    with running_server(server_engine, min_tokens=64, **opts) as url:
        repeat, right, wrong = _guesses(client, _openai_reuse if api == "openai" else _anthropic_reuse)
    assert repeat[0] > 0 and repeat[1] > 0  # the victim's own repeat is served from its KV
    assert right == wrong == (0, 0)  # the right guess looks exactly like the wrong one


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_with_the_opt_in_a_right_guess_shows(server_engine, api):
    """The side channel the default closes: with ``share_kv_across_namespaces=True`` the engine
    reuses the victim's KV for the right guess (the Anthropic usage stays per tenant, as the API's)."""
    from ragcache.server.app import running_server

    server_engine.prefix_cache.clear()
    with running_server(server_engine, min_tokens=64, keys=KEYS, share_kv_across_namespaces=True) as url:
        def client(i):
            if api == "openai":
                return openai.OpenAI(base_url=url + "/v1", api_key=KEYS[i], max_retries=0)
            return anthropic.Anthropic(base_url=url, api_key=KEYS[i], max_retries=0)

        oa = api == "openai"
        victim = client(0)
        (_openai_reuse if oa else _anthropic_reuse)(victim, SECRET)
        right = (_openai_reuse if oa else _anthropic_reuse)(client(1), SECRET)
        wrong = (_openai_reuse if oa else _anthropic_reuse)(client(2), WRONG)
    if oa:
        assert right[0] > wrong[0] and right[1] > wrong[1]
    else:
        assert right[0] == wrong[0] == 0  # the emulated provider cache is per tenant whatever the engine does


def test_missing_tenant_header_is_refused_in_each_apis_shape(server_engine):
    from ragcache.server.app import running_server

    with running_server(server_engine, tenant_header="x-tenant") as url:
        with pytest.raises(openai.BadRequestError, match="x-tenant"):
            openai.OpenAI(base_url=url + "/v1", api_key="local", max_retries=0).chat.completions.create(
                model="tiny-llama", max_tokens=1, messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(anthropic.BadRequestError, match="x-tenant"):
            anthropic.Anthropic(base_url=url, api_key="local", max_retries=0).messages.create(
                model="claude-sonnet-4-6", max_tokens=1, messages=[{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("ns", [None, "default", "acme"])
def test_precompute_for_a_tenant_serves_that_tenant_only(tiny, ns):
    eng = make(tiny)
    docs = [{"text": d, "id": f"d{i}"} for i, d in enumerate(DOCS)]
    assert eng.chunk_cache.precompute(eng, docs, tenant=ns, progress=False) == 3
    assert eng.chunk_cache.precompute(eng, docs, tenant=ns, progress=False) == 0
    others = {None: "acme", "default": "acme", "acme": None}
    assert eng.chunk_cache.precompute(eng, docs, tenant=others[ns], progress=False) == 3  # another tenant's own
