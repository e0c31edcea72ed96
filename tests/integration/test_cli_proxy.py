"""The caching proxy (serve --upstream) in front of ragcache's own local Anthropic server: real SDK, real
HTTP on loopback, semantic hits without an upstream call, breakpoints placed, usage and cost accounted,
streaming relayed; /health, /v1/models, /metrics; the local mode's extra routes."""


import json

import httpx
import pytest

anthropic = pytest.importorskip("anthropic")
pytest.importorskip("prometheus_client")

import uvicorn  # noqa: E402

from ragcache.providers.anthropic.backend import sdk_kwargs  # noqa: E402
from ragcache.metrics import CacheMetrics  # noqa: E402
from ragcache.semantic import SemanticCache  # noqa: E402
from ragcache.server.app import running_server  # noqa: E402
from ragcache.prompt.layout import PromptLayout  # noqa: E402
from ragcache.answering import AnswerPath  # noqa: E402
from ragcache.server.proxy import AnthropicProxy, body_request, request_sampling  # noqa: E402
from ragcache.testing import HashingEmbedder  # noqa: E402

MODEL = "claude-sonnet-4-6"
SYSTEM = "You answer questions about the bicycle shop manual. Be brief. " * 6
DOCS = [f"Manual section {i}: adjust the {p} with a {t} until it turns freely. " * 3 for i, (p, t) in
        enumerate([("brake cable", "5 mm hex key"), ("derailleur", "screwdriver"), ("headset", "32 mm spanner")])]


def serving(app):
    """Serve any ASGI app on a free loopback port (the servers' own runner)."""
    return running_server(None, app=app)


pytestmark = pytest.mark.engine("tiny_wide")  # wide init: varied text, so a stop string occurs


@pytest.fixture()
def proxy(engine):
    with running_server(engine, min_tokens=64) as upstream:
        p = AnthropicProxy(upstream, semantic=SemanticCache(None, embedder=HashingEmbedder()), api_key="k",
                           min_tokens=64, metrics=CacheMetrics("prometheus"))
        with serving(p.app) as url:
            yield p, url


def kw(method, b):
    return sdk_kwargs(method, b)  # temperature travels in extra_body with anthropic 2.x


def body(question, mark=False, **extra):
    content = [{"type": "text", "text": d} for d in DOCS] + [{"type": "text", "text": question}]
    if mark:  # the caller's own breakpoint on the last document (local mode places none)
        content[len(DOCS) - 1]["cache_control"] = {"type": "ephemeral"}
    return {"model": MODEL, "max_tokens": 16, "temperature": 0, "stop_sequences": ["e"], "system": SYSTEM,
            "messages": [{"role": "user", "content": content}], **extra}


def test_body_request_keys_only_deterministic_requests():
    req = body_request(body("How do I fix the brakes?"), tenant="t")
    assert req.question == "How do I fix the brakes?" and req.model == MODEL and req.tenant == "proxy-t"
    assert len(req.layout.documents) == 3  # the documents are in the partition, not in the question
    assert req.layout == PromptLayout.from_messages(body("How do I fix the brakes?")["messages"], system=SYSTEM)
    assert req.partition.namespace == "proxy-t" and req.max_tokens == 16
    sampled = body("x?", temperature=1.0)  # keyed, but the answer path's replay rule makes it a fresh draw
    assert body_request(sampled).partition is not None and AnswerPath(None).fresh_draw(body_request(sampled).sampling)
    assert AnswerPath(None).fresh_draw(request_sampling({k: v for k, v in sampled.items() if k != "temperature"}))
    assert body_request(body("x?", temperature="hot")).partition is None
    assert body_request({"model": MODEL, "messages": [{"role": "assistant", "content": "hi"}],
                         "temperature": 0}).partition is None


def test_proxy_round_trip(proxy):
    p, url = proxy
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    raw = client.messages.with_raw_response.create(**kw(client.messages.create, body("How do I fix the brakes?")))
    msg = raw.parse()
    assert raw.headers["x-ragcache-layer"] == "provider" and int(raw.headers["x-ragcache-breakpoints"]) >= 1
    u = msg.usage
    assert u.cache_creation_input_tokens > 0 and u.cache_read_input_tokens == 0  # breakpoints placed by the proxy
    assert float(raw.headers["x-ragcache-cost-usd"]) > 0
    text = msg.content[0].text
    assert msg.stop_reason in ("stop_sequence", "end_turn", "max_tokens")

    raw2 = client.messages.with_raw_response.create(**kw(client.messages.create, body("Which tool adjusts the headset?")))
    assert raw2.parse().usage.cache_read_input_tokens > 0  # the stable prefix was read back
    assert raw2.headers["x-ragcache-layer"] == "provider-cache"  # a Layer value
    stats = httpx.get(f"{url}/v1/ragcache/stats").json()
    assert stats["models"][MODEL]["cache_read_tokens"] > 0 and stats["models"][MODEL]["cost_usd"] > 0

    if msg.stop_reason != "max_tokens" and text.strip():  # complete answers are stored
        before = stats["models"][MODEL]["requests"]
        raw3 = client.messages.with_raw_response.create(**kw(client.messages.create, body("How do I fix the brakes?")))
        hit = raw3.parse()
        assert raw3.headers["x-ragcache-layer"] == "semantic" and hit.content[0].text == text
        assert hit.usage.input_tokens == 0 and hit.stop_reason == msg.stop_reason
        after = httpx.get(f"{url}/v1/ragcache/stats").json()
        assert after["models"][MODEL]["requests"] == before and after["semantic_hits"] == 1  # upstream not called
    else:
        pytest.fail(f"the tiny model's answer was not complete ({msg.stop_reason!r}, {text!r}): pick another stop string")
    m = httpx.get(f"{url}/metrics").text
    assert 'ragcache_requests_total{layer="semantic"} 1.0' in m and 'ragcache_tokens_total{kind="cache_read"}' in m
    assert 'ragcache_semantic_lookups_total{outcome="hit"} 1.0' in m


def test_proxy_streaming_relayed_and_replayed(proxy):
    p, url = proxy
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    with client.messages.stream(**kw(client.messages.stream, body("Which tool adjusts the derailleur?"))) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert final.usage.cache_creation_input_tokens + final.usage.cache_read_input_tokens > 0
    assert final.content[0].text == text
    stats = httpx.get(f"{url}/v1/ragcache/stats").json()
    assert stats["models"][MODEL]["requests"] == 1  # the streamed usage was accounted
    with client.messages.stream(**kw(client.messages.stream, body("Which tool adjusts the derailleur?"))) as s:
        again = "".join(s.text_stream)
        assert s.get_final_message().usage.input_tokens == 0
    assert again == text and httpx.get(f"{url}/v1/ragcache/stats").json()["semantic_hits"] == 1


def test_proxy_health_models_and_errors(proxy):
    p, url = proxy
    h = httpx.get(f"{url}/health").json()
    assert h["status"] == "ok" and h["mode"] == "proxy" and h["upstream"] == p.upstream
    models = httpx.get(f"{url}/v1/models").json()["data"]  # the upstream's list (here: the local server's)
    assert models and all(m["id"] for m in models)
    r = httpx.post(f"{url}/v1/messages", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(f"{url}/v1/messages", json={"model": MODEL, "max_tokens": 0, "messages": []})
    assert r.status_code == 400  # upstream's validation error is passed through
    with pytest.raises(ValueError, match="http"):
        AnthropicProxy("api.anthropic.com")


def test_local_mode_routes_and_metrics(engine):
    from ragcache.app.serve_cmd import local_app

    metrics = CacheMetrics("prometheus")
    with serving(local_app(engine, metrics, min_tokens=64)) as url:
        assert httpx.get(f"{url}/health").json()["mode"] == "local"
        assert "tiny-llama" in {m["id"] for m in httpx.get(f"{url}/v1/models").json()["data"]}  # the served model
        client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
        client.messages.create(**kw(client.messages.create, body("How do I fix the brakes?", mark=True)))
        with client.messages.stream(**kw(client.messages.stream, body("Which tool adjusts the headset?", mark=True))) as s:
            "".join(s.text_stream)
        m = httpx.get(f"{url}/metrics").text
    assert 'ragcache_requests_total{layer="provider"} 1.0' in m
    assert 'ragcache_requests_total{layer="provider-cache"} 1.0' in m


def test_metrics_modes():
    from ragcache.backend import CacheUsage

    off = CacheMetrics()
    off.request("model", CacheUsage.local(prompt_tokens=5, prefix_reused=3), 0.1)
    assert off.render() == b"" and not off.enabled
    otel = CacheMetrics("otel")  # the API's no-op provider unless an SDK is configured: records without error
    otel.request("chunk", CacheUsage.local(prompt_tokens=5, chunk_reused=4), 0.2)
    otel.lookup(0.01, hit=False)
    prom = CacheMetrics("prometheus")
    prom.request("prefix+chunk", CacheUsage.local(prompt_tokens=10, prefix_reused=4, chunk_reused=3, recomputed=1), 0.3)
    text = prom.render().decode()
    assert 'ragcache_tokens_total{kind="reused"} 7.0' in text and 'ragcache_tokens_total{kind="recomputed"} 1.0' in text
    assert 'ragcache_tokens_total{kind="computed"} 2.0' in text
    prom = CacheMetrics("prometheus")
    prom.request("provider", CacheUsage.provider(input_tokens=4, cache_read=6, cost_usd=0.25, uncached_cost_usd=1.5))
    text = prom.render().decode()
    assert 'ragcache_cost_usd_total{kind="actual"} 0.25' in text and 'ragcache_cost_usd_total{kind="uncached"} 1.5' in text
    assert 'ragcache_tokens_total{kind="cache_read"} 6.0' in text
    for usage in ({"prompt_tokens": 3}, 3, "usage"):  # a provider's raw usage is mapped by its row first
        with pytest.raises(TypeError, match="usage must be a ragcache CacheUsage"):
            prom.request("provider", usage)
    with pytest.raises(ValueError, match="metrics mode"):
        CacheMetrics("statsd")


def _sse(kind, data):
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def test_proxy_stream_relays_upstream_bytes_exactly_and_errors_as_is():
    """A streamed miss reaches the client byte for byte as upstream sent it (a multi-byte character split
    across chunks included); an upstream error status is relayed as is and nothing is stored."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    text = "Grüße aus 東京 – ok"
    msg = {"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL, "content": [], "stop_reason": None,
           "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 1}}
    raw = b"".join([_sse("message_start", {"type": "message_start", "message": msg}),
                    _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                                 "content_block": {"type": "text", "text": ""}}),
                    _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                 "delta": {"type": "text_delta", "text": text}}),
                    _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                                           "usage": {"output_tokens": 9}}),
                    _sse("message_stop", {"type": "message_stop"})])
    calls = []

    async def messages(request):
        calls.append(1)
        if len(calls) > 1 and (await request.json())["messages"][0]["content"] == "fail":
            return JSONResponse({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
                                status_code=529)

        async def pieces():
            for i in range(0, len(raw), 7):  # 7-byte chunks split the multi-byte characters
                yield raw[i:i + 7]
        return StreamingResponse(pieces(), media_type="text/event-stream")

    upstream_app = Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])
    with serving(upstream_app) as upstream:
        p = AnthropicProxy(upstream, semantic=SemanticCache(None, embedder=HashingEmbedder()), api_key="k")
        with serving(p.app) as url, httpx.Client(timeout=30) as c:
            req = {"model": MODEL, "max_tokens": 64, "temperature": 0, "stream": True,
                   "messages": [{"role": "user", "content": "Say hello?"}]}
            with c.stream("POST", f"{url}/v1/messages", json=req, headers={"x-api-key": "k"}) as r:
                got = b"".join(r.iter_bytes())
                assert r.status_code == 200 and r.headers["x-ragcache-layer"] == "provider"
            assert got == raw and len(calls) == 1
            with c.stream("POST", f"{url}/v1/messages", json=req, headers={"x-api-key": "k"}) as r:  # a hit
                events = [json.loads(line[5:]) for line in b"".join(r.iter_bytes()).decode().splitlines()
                          if line.startswith("data:")]
                assert r.headers["x-ragcache-layer"] == "semantic"
                assert "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta") == text
            assert len(calls) == 1
            bad = {**req, "messages": [{"role": "user", "content": "fail"}]}
            for n in (2, 3):  # the error is not stored: the second one goes upstream too
                r = c.post(f"{url}/v1/messages", json=bad, headers={"x-api-key": "k"})
                assert r.status_code == 529 and r.json()["error"]["type"] == "overloaded_error" and len(calls) == n
