"""Who may call the servers, and whose answers a caller can get (issue 24, kinds 2, 3 and 12): the
real anthropic and openai SDKs against ragcache's local server and the caching proxy on loopback."""

import logging

import httpx
import pytest

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

from typer.testing import CliRunner  # noqa: E402

from ragcache.providers.anthropic.backend import sdk_kwargs  # noqa: E402
from ragcache.semantic import SemanticCache  # noqa: E402
from ragcache.server.app import running_server  # noqa: E402
from ragcache.server.auth import check_bind, parse_keys, tenant_of  # noqa: E402
from ragcache.server.proxy import AnthropicProxy  # noqa: E402

UPSTREAM = ("provider", "provider-cache")  # x-ragcache-layer of an answer that came from upstream
from ragcache.testing import HashingEmbedder  # noqa: E402

KEY_A, KEY_B = "key-a-" + "x" * 20, "key-b-" + "y" * 20
MODEL = "claude-sonnet-4-6"


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)


pytestmark = pytest.mark.engine("tiny_wide")


class Recorder:
    """ASGI wrapper that records the headers of every request the upstream receives."""

    def __init__(self, app):
        self.app, self.seen = app, []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await self.app(scope, receive, send)


# ------------------------------------------------------------------ kind 12: keys and bind
@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::", "10.0.0.1", "example.org"])
def test_non_loopback_bind_needs_a_key_or_insecure(host):
    with pytest.raises(ValueError, match="RAGCACHE_SERVE_KEY"):
        check_bind(host, ())
    check_bind(host, (KEY_A,))
    check_bind(host, (), insecure=True)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_loopback_bind_needs_no_key(host):
    check_bind(host, ())


def test_short_keys_are_refused():
    assert parse_keys(f" {KEY_A}, {KEY_B} ,") == (KEY_A, KEY_B)
    with pytest.raises(ValueError, match="16 characters"):
        parse_keys("secret")


def test_cli_serve_refuses_a_public_bind_without_a_key(tmp_path, monkeypatch):
    from ragcache.app.cli import app

    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path))
    monkeypatch.delenv("RAGCACHE_SERVE_KEY", raising=False)
    for host in ("0.0.0.0", "192.168.1.20"):
        r = CliRunner().invoke(app, ["serve", "--host", host])
        assert r.exit_code != 0 and "RAGCACHE_SERVE_KEY" in r.output and "--insecure" in r.output
    r = CliRunner().invoke(app, ["config", "--json"], env={"RAGCACHE_SERVE_KEY": KEY_A})
    assert KEY_A not in r.output and "hidden" in r.output  # the key is never printed


def test_local_server_with_keys_answers_only_its_callers(engine):
    with running_server(engine, keys=f"{KEY_A},{KEY_B}") as url:
        ok = anthropic.Anthropic(base_url=url, api_key=KEY_A, max_retries=0)
        assert ok.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hi"}]).input_tokens > 0
        bearer = anthropic.Anthropic(base_url=url, auth_token=KEY_B, max_retries=0)
        assert bearer.messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": "hi"}]).id
        oa = openai.OpenAI(base_url=url + "/v1", api_key=KEY_B, max_retries=0)
        assert [m.id for m in oa.models.list().data] == ["tiny-llama"]
        for bad in ("wrong-key-" + "z" * 20, KEY_A[:-1], KEY_A + "x"):
            with pytest.raises(anthropic.AuthenticationError) as err:
                anthropic.Anthropic(base_url=url, api_key=bad, max_retries=0).messages.create(
                    model=MODEL, max_tokens=2, messages=[{"role": "user", "content": "hi"}])
            assert err.value.body["error"]["type"] == "authentication_error"
            with pytest.raises(openai.AuthenticationError) as err:
                openai.OpenAI(base_url=url + "/v1", api_key=bad, max_retries=0).chat.completions.create(
                    model="tiny-llama", max_tokens=2, messages=[{"role": "user", "content": "hi"}])
            assert err.value.code == "invalid_api_key"
        assert httpx.post(f"{url}/v1/messages", json={}).status_code == 401  # no credential at all


def test_local_prompt_cache_is_kept_per_caller(engine):
    """Caller B does not read the prompt-cache entry caller A wrote (the real API keeps them per
    organization); A's repeat does."""
    system = [{"type": "text", "text": "You answer questions about the shop manual. " * 40,
               "cache_control": {"type": "ephemeral"}}]
    req = {"model": MODEL, "max_tokens": 1, "system": system, "messages": [{"role": "user", "content": "Brakes?"}]}
    with running_server(engine, min_tokens=64) as url:
        a = anthropic.Anthropic(base_url=url, api_key=KEY_A, max_retries=0)
        b = anthropic.Anthropic(base_url=url, api_key=KEY_B, max_retries=0)
        first = a.messages.create(**req).usage
        assert first.cache_creation_input_tokens > 0
        assert b.messages.create(**req).usage.cache_read_input_tokens == 0
        assert a.messages.create(**req).usage.cache_read_input_tokens == first.cache_creation_input_tokens


# ------------------------------------------------------------------ kind 2: the proxy's tenants
def _ask(client, question, **extra):
    body = {"model": MODEL, "max_tokens": 16, "temperature": 0, "stop_sequences": ["e"], "system": "Answer briefly.",
            "messages": [{"role": "user", "content": question}], **extra}
    raw = client.messages.with_raw_response.create(**sdk_kwargs(client.messages.create, body))
    return raw.headers.get("x-ragcache-layer"), raw.parse()


@pytest.fixture()
def upstream(engine):
    rec = Recorder(None)
    from ragcache.server.app import create_local_app

    rec.app = create_local_app(engine, min_tokens=64)
    with running_server(engine, app=rec) as url:
        yield url, rec


def test_proxy_never_serves_one_callers_answer_to_another(upstream):
    url, rec = upstream
    proxy = AnthropicProxy(url, semantic=SemanticCache(None, embedder=HashingEmbedder()), api_key="operator-key")
    with running_server(None, app=proxy.app) as purl:
        callers = [anthropic.Anthropic(base_url=purl, api_key=KEY_A, max_retries=0),
                   anthropic.Anthropic(base_url=purl, auth_token=KEY_B, max_retries=0),
                   anthropic.Anthropic(base_url=purl, auth_token="key-c-" + "w" * 20, max_retries=0)]
        for i, c in enumerate(callers):
            layer, _ = _ask(c, "How do I fix the brakes?")
            assert layer in UPSTREAM, f"caller {i} was served another caller's answer"
            sent = rec.seen[-1]
            # upstream gets this caller's own credential, never the operator's or another caller's
            assert sent.get("x-api-key") == KEY_A if i == 0 else sent.get("authorization") == f"Bearer {c.auth_token}"
            assert "operator-key" not in sent.values()
        for c in callers:  # each caller's repeat is its own hit
            assert _ask(c, "How do I fix the brakes?")[0] == "semantic"


def test_proxy_operator_mode_and_tenant_header(upstream):
    url, rec = upstream
    proxy = AnthropicProxy(url, semantic=SemanticCache(None, embedder=HashingEmbedder()), api_key="operator-key",
                           keys=(KEY_A, KEY_B), tenant_header="x-tenant")
    assert proxy.upstream_auth == "operator"  # callers send serve keys: those never go upstream
    with running_server(None, app=proxy.app) as purl:
        t1 = anthropic.Anthropic(base_url=purl, api_key=KEY_A, default_headers={"x-tenant": "acme"}, max_retries=0)
        t2 = anthropic.Anthropic(base_url=purl, api_key=KEY_A, default_headers={"x-tenant": "globex"}, max_retries=0)
        t1b = anthropic.Anthropic(base_url=purl, api_key=KEY_B, default_headers={"x-tenant": "acme"}, max_retries=0)
        assert _ask(t1, "Where is the spanner?")[0] in UPSTREAM
        assert rec.seen[-1]["x-api-key"] == "operator-key" and KEY_A not in rec.seen[-1].values()
        assert _ask(t2, "Where is the spanner?")[0] in UPSTREAM  # another tenant
        assert _ask(t1b, "Where is the spanner?")[0] == "semantic"  # same tenant (the gateway's header)
        with pytest.raises(anthropic.BadRequestError, match="x-tenant"):
            _ask(anthropic.Anthropic(base_url=purl, api_key=KEY_A, max_retries=0), "Where is the spanner?")
        with pytest.raises(anthropic.AuthenticationError):
            _ask(anthropic.Anthropic(base_url=purl, api_key="nope-" + "n" * 20, max_retries=0), "Where?")
    with pytest.raises(ValueError, match="operator"):
        AnthropicProxy(url, keys=(KEY_A,), upstream_auth="caller")


def test_tenant_is_a_digest_never_the_secret():
    for headers in ({"x-api-key": KEY_A}, {"authorization": f"Bearer {KEY_A}"}):
        t = tenant_of(headers)
        assert KEY_A not in t and t == tenant_of({"x-api-key": KEY_A})
    assert tenant_of({"x-api-key": KEY_A}) != tenant_of({"x-api-key": KEY_B}) != tenant_of({})


# ------------------------------------------------------------------ kind 3: the output contract
SHAPING = [
    {"output_config": {"format": {"type": "json_schema", "schema": {"type": "object", "properties": {
        "answer": {"type": "string"}}, "required": ["answer"], "additionalProperties": False}}}},
    {"output_format": {"type": "json_schema", "schema": {"type": "object"}}},
    {"tool_choice": {"type": "none"}},
    {"thinking": {"type": "disabled"}},
    {"stop_sequences": ["e", "a"]},
    {"max_tokens": 15},
    {"top_k": 5},
    {"metadata": {"user_id": "u-42"}},
]


@pytest.mark.parametrize("extra", SHAPING, ids=lambda e: next(iter(e)))
def test_proxy_partition_covers_every_shaping_field(upstream, extra):
    url, _ = upstream
    proxy = AnthropicProxy(url, semantic=SemanticCache(None, embedder=HashingEmbedder()), api_key="k")
    with running_server(None, app=proxy.app) as purl:
        c = anthropic.Anthropic(base_url=purl, api_key=KEY_A, max_retries=0)
        assert _ask(c, "How do I fix the brakes?")[0] in UPSTREAM
        assert _ask(c, "How do I fix the brakes?")[0] == "semantic"
        # the same question with a field that changes the answer is not served the plain answer
        assert _ask(c, "How do I fix the brakes?", extra_body=extra)[0] in UPSTREAM
        assert _ask(c, "How do I fix the brakes?", extra_body=extra)[0] == "semantic"


def test_proxy_partition_covers_the_beta_header(upstream):
    url, _ = upstream
    proxy = AnthropicProxy(url, semantic=SemanticCache(None, embedder=HashingEmbedder()), api_key="k")
    with running_server(None, app=proxy.app) as purl:
        c = anthropic.Anthropic(base_url=purl, api_key=KEY_A, max_retries=0)
        assert _ask(c, "How do I fix the brakes?")[0] in UPSTREAM
        beta = {"extra_headers": {"anthropic-beta": "structured-outputs-2025-11-13"}}
        assert _ask(c, "How do I fix the brakes?", **beta)[0] in UPSTREAM


@pytest.mark.parametrize("field", ["response_style", "speculative_setting", "output_schema_v9"])
def test_proxy_unknown_field_bypasses_the_semantic_cache_with_a_log_line(upstream, field, caplog):
    url, _ = upstream
    proxy = AnthropicProxy(url, semantic=SemanticCache(None, embedder=HashingEmbedder()), api_key="k")
    with running_server(None, app=proxy.app) as purl, caplog.at_level(logging.INFO, "ragcache.server.proxy"):
        c = anthropic.Anthropic(base_url=purl, api_key=KEY_A, max_retries=0)
        extra = {"extra_body": {field: "x"}}
        for _ in range(2):  # never stored, never served: the field might change the answer
            assert _ask(c, "How do I fix the brakes?", **extra)[0] in UPSTREAM
    assert any(field in r.getMessage() and "bypassed" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------ `ragcache serve` wiring (12, 22.5)
def _run_serve(monkeypatch, tmp_path, engine, **cfg_kw):
    """run_serve with the tiny engine and uvicorn.run captured: (banner text, the app it would serve)."""
    import io

    import uvicorn
    from rich.console import Console

    from ragcache.app import runtime
    from ragcache.app.serve_cmd import run_serve
    from ragcache.config import Config

    served = {}
    monkeypatch.setattr(runtime, "build_engine", lambda cfg: engine)
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.update(app=app, **kw))
    out = io.StringIO()
    insecure = cfg_kw.pop("insecure", False)
    run_serve(Config(home=tmp_path, **cfg_kw), insecure=insecure, console=Console(file=out, width=400))
    return out.getvalue(), served


def test_serve_banner_names_both_apis_and_the_exact_model_id(monkeypatch, tmp_path, engine):
    text, served = _run_serve(monkeypatch, tmp_path, engine)
    for words in ("Anthropic Messages API", "OpenAI Chat Completions API", "/v1/chat/completions",
                  "'tiny-llama'", "case-insensitive", "base_url='http://127.0.0.1:8788/v1'"):
        assert words in text, words
    assert served["host"] == "127.0.0.1"


@pytest.mark.parametrize("upstream", [None, "http://127.0.0.1:9"])
def test_serve_on_a_public_address_requires_the_key(monkeypatch, tmp_path, engine, upstream):
    from starlette.testclient import TestClient

    monkeypatch.setenv("ANTHROPIC_API_KEY", "operator-key")  # with serve keys the proxy pays upstream
    with pytest.raises(ValueError, match="--insecure"):
        _run_serve(monkeypatch, tmp_path, engine, host="0.0.0.0", upstream=upstream)
    text, served = _run_serve(monkeypatch, tmp_path, engine, host="0.0.0.0", upstream=upstream,
                              serve_key=KEY_A, semantic_ttl_s=None)
    assert "key required" in text and KEY_A not in text
    client = TestClient(served["app"])
    assert client.get("/health").status_code == 200  # liveness probes carry no key
    assert client.get("/v1/ragcache/stats" if upstream else "/v1/models").status_code == 401
    assert client.get("/v1/ragcache/stats" if upstream else "/v1/models",
                      headers={"x-api-key": KEY_A}).status_code == 200
    text, _ = _run_serve(monkeypatch, tmp_path, engine, host="0.0.0.0", upstream=upstream, insecure=True)
    assert "OPEN TO THE NETWORK" in text
