"""The caching proxy in front of upstreams shaped as the field has them (issue 39, section 2), through
the real ``anthropic`` SDK on loopback:

- an upstream that compresses its responses (a gateway gzipping the stream): the client gets a stream
  it can read, the streamed answer is stored, the stats count the call;
- a request with the request-level ``cache_control`` (automatic caching) beside ragcache's markers:
  never "Found 5";
- an upstream answer whose text blocks carry citations: a hit replays the blocks as they were (JSON
  and streamed).
"""

from __future__ import annotations

import json
import zlib

import httpx
import pytest

anthropic = pytest.importorskip("anthropic")

from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from ragcache.providers.anthropic.backend import sdk_kwargs  # noqa: E402
from ragcache.semantic import SemanticCache  # noqa: E402
from ragcache.server.app import create_local_app, running_server  # noqa: E402
from ragcache.server.proxy import AnthropicProxy  # noqa: E402
from ragcache.testing import HashingEmbedder  # noqa: E402

MODEL = "claude-sonnet-4-6"
SYSTEM = "You answer questions about the bicycle shop manual. Be brief. " * 6
DOCS = [f"Manual section {i}: adjust the {p} with a {t} until it turns freely. " * 3 for i, (p, t) in
        enumerate([("brake cable", "5 mm hex key"), ("derailleur", "screwdriver"), ("headset", "32 mm spanner")])]


class GzipEverything:
    """ASGI middleware gzipping every response body as it is sent (one gzip member per response,
    sync-flushed after each piece, so a stream stays a stream), when the request accepts gzip: what
    a gateway or CDN in front of an API does (starlette's own GZipMiddleware leaves event streams alone)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or b"gzip" not in dict(scope["headers"]).get(b"accept-encoding", b""):
            return await self.app(scope, receive, send)
        z = zlib.compressobj(wbits=31)

        async def gzipped(message):
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message["headers"] if k.lower() != b"content-length"]
                await send({**message, "headers": [*headers, (b"content-encoding", b"gzip")]})
            elif message["type"] == "http.response.body":
                more = message.get("more_body", False)
                data = z.compress(message.get("body", b"")) + z.flush(zlib.Z_SYNC_FLUSH if more else zlib.Z_FINISH)
                await send({**message, "body": data})
            else:
                await send(message)

        await self.app(scope, receive, gzipped)


def kw(method, b):
    return sdk_kwargs(method, b)


def body(question, **extra):
    content = [{"type": "text", "text": d} for d in DOCS] + [{"type": "text", "text": question}]
    return {"model": MODEL, "max_tokens": 16, "temperature": 0, "stop_sequences": ["e"], "system": SYSTEM,
            "messages": [{"role": "user", "content": content}], **extra}


pytestmark = pytest.mark.engine("tiny_wide")  # wide init: varied text, so the stop string occurs


@pytest.fixture()
def gzip_proxy(engine):
    with running_server(None, app=GzipEverything(create_local_app(engine, min_tokens=64))) as upstream:
        p = AnthropicProxy(upstream, semantic=SemanticCache(None, embedder=HashingEmbedder()), api_key="k",
                           min_tokens=64)
        with running_server(None, app=p.app) as url:
            yield p, url, upstream


def _stats(url):
    return httpx.get(f"{url}/v1/ragcache/stats", timeout=30).json()


# -- a compressed upstream -------------------------------------------------------------------
def test_the_gzip_upstream_really_compresses(gzip_proxy):
    _, _, upstream = gzip_proxy
    with httpx.stream("POST", f"{upstream}/v1/messages", json={**body("Which tool adjusts the brakes?"),
                                                                "stream": True},
                      headers={"accept-encoding": "gzip"}, timeout=120) as r:
        raw = b"".join(r.iter_raw())
    assert r.headers["content-encoding"] == "gzip" and raw[:2] == b"\x1f\x8b"
    assert b"message_start" in zlib.decompress(raw, wbits=31)


def test_a_compressed_upstream_stream_is_relayed_readable_parsed_and_stored(gzip_proxy):
    _, url, _ = gzip_proxy
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    q = body("Which tool adjusts the derailleur?")
    with client.messages.stream(**kw(client.messages.stream, q)) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert "content-encoding" not in s.response.headers  # decoded at the proxy: what every client accepts
    assert s.response.headers["x-ragcache-layer"] == "provider"
    assert final.content[0].text == text and final.stop_reason in ("stop_sequence", "end_turn")
    assert final.usage.cache_creation_input_tokens > 0
    stats = _stats(url)
    assert stats["models"][MODEL]["requests"] == 1 and stats["models"][MODEL]["cache_write_tokens"] > 0
    with client.messages.stream(**kw(client.messages.stream, q)) as s:  # stored: the repeat is a hit
        assert "".join(s.text_stream) == text and s.get_final_message().usage.input_tokens == 0
    assert s.response.headers["x-ragcache-layer"] == "semantic"
    assert _stats(url)["semantic_hits"] == 1 and _stats(url)["models"][MODEL]["requests"] == 1


def test_a_compressed_upstream_json_answer_is_relayed_and_stored(gzip_proxy):
    _, url, _ = gzip_proxy
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    q = body("How do I fix the brakes?")
    raw = client.messages.with_raw_response.create(**kw(client.messages.create, q))
    msg = raw.parse()
    assert raw.headers["x-ragcache-layer"] == "provider" and "content-encoding" not in raw.headers
    assert msg.stop_reason in ("stop_sequence", "end_turn") and _stats(url)["models"][MODEL]["requests"] == 1
    again = client.messages.with_raw_response.create(**kw(client.messages.create, q))
    assert again.headers["x-ragcache-layer"] == "semantic" and again.parse().content[0].text == msg.content[0].text
    # a client that asks for no compression at all reads the same
    r = httpx.post(f"{url}/v1/messages", json={**body("Which tool adjusts the headset?"), "stream": True},
                   headers={"accept-encoding": "identity", "x-api-key": "k"}, timeout=120)
    assert r.status_code == 200 and "content-encoding" not in r.headers and b"message_stop" in r.content


# -- the automatic breakpoint takes a slot ---------------------------------------------------
def test_automatic_caching_beside_four_ragcache_markers_is_accepted_upstream(gzip_proxy):
    _, url, _ = gzip_proxy
    tools = [{"name": "lookup_part", "description": "Look a bicycle part up in the catalogue. " * 8,
              "input_schema": {"type": "object", "properties": {"part": {"type": "string"}}}}]
    history = [{"role": "user", "content": "Earlier: which spanner fits the headset? " * 6},
               {"role": "assistant", "content": "The 32 mm spanner."}]
    q = body("Which tool adjusts the derailleur?", tools=tools, tool_choice={"type": "none"})
    q["messages"] = history + q["messages"]
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
    plain = client.messages.with_raw_response.create(**kw(client.messages.create, q))
    assert plain.headers["x-ragcache-breakpoints"] == "4"  # tools, system, history, documents
    q = {**q, "cache_control": {"type": "ephemeral"}}  # the top-level marker: automatic caching
    q["messages"][-1]["content"][-1]["text"] = "Which tool adjusts the brake cable?"  # a miss, not a hit
    raw = client.messages.with_raw_response.create(**kw(client.messages.create, q))  # was a 400: "Found 5"
    assert raw.headers["x-ragcache-breakpoints"] == "3" and raw.parse().usage.cache_read_input_tokens > 0


# -- a hit keeps the answer's citations ------------------------------------------------------
CITED = [  # what the Messages API answers about a document with citations enabled
    {"type": "text", "text": "According to the manual, "},
    {"type": "text", "text": "the headset takes a 32 mm spanner",
     "citations": [{"type": "char_location", "cited_text": "adjust the headset with a 32 mm spanner",
                    "document_index": 0, "document_title": "Manual", "start_char_index": 17, "end_char_index": 56}]},
    {"type": "text", "text": " and ", "citations": None},
    {"type": "text", "text": "the brake cable a 5 mm hex key.",
     "citations": [{"type": "char_location", "cited_text": "brake cable with a 5 mm hex key", "document_index": 0,
                    "document_title": "Manual", "start_char_index": 80, "end_char_index": 111},
                   {"type": "char_location", "cited_text": "until it turns freely", "document_index": 0,
                    "document_title": "Manual", "start_char_index": 112, "end_char_index": 133}]},
]


def _cited_message(model):
    return {"id": "msg_cited", "type": "message", "role": "assistant", "model": model, "content": CITED,
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 120, "output_tokens": 30, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0}}


async def _cited(request: Request):
    """An upstream answering every request with :data:`CITED`, JSON or as the API streams it."""
    from ragcache.server.message_events import message_events

    body = json.loads(await request.body())
    msg = _cited_message(body["model"])
    if not body.get("stream"):
        return JSONResponse(msg)

    async def events():
        for kind, data in message_events(msg):
            yield f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()
    return StreamingResponse(events(), media_type="text/event-stream")


def cited_body(question):
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": " ".join(DOCS)},
           "title": "Manual", "citations": {"enabled": True}}
    return {"model": MODEL, "max_tokens": 256, "temperature": 0, "messages": [
        {"role": "user", "content": [doc, {"type": "text", "text": "Read the manual."}]},
        {"role": "assistant", "content": "I have read it."},
        {"role": "user", "content": question}]}


@pytest.fixture()
def cited_proxy():
    app = Starlette(routes=[Route("/v1/messages", _cited, methods=["POST"])])
    with running_server(None, app=app) as upstream:
        p = AnthropicProxy(upstream, semantic=SemanticCache(None, embedder=HashingEmbedder()), api_key="k")
        with running_server(None, app=p.app) as url:
            yield url


def _blocks(message):
    return [b.model_dump(exclude_none=True) for b in message.content]


@pytest.mark.parametrize("first, again", [("json", "json"), ("stream", "stream"), ("json", "stream"),
                                          ("stream", "json")])
def test_a_hit_replays_the_text_blocks_with_their_citations(cited_proxy, first, again):
    client = anthropic.Anthropic(base_url=cited_proxy, api_key="k", max_retries=0)

    def ask(how):
        q = cited_body("Which tools adjust the headset and the brake cable?")
        if how == "json":
            raw = client.messages.with_raw_response.create(**kw(client.messages.create, q))
            return raw.headers["x-ragcache-layer"], raw.parse()
        with client.messages.stream(**kw(client.messages.stream, q)) as s:
            text = "".join(s.text_stream)
            msg = s.get_final_message()
        assert text == "".join(b["text"] for b in CITED)
        return s.response.headers["x-ragcache-layer"], msg

    layer, original = ask(first)
    assert layer == "provider" and _blocks(original) == [{k: v for k, v in b.items() if v is not None}
                                                         for b in CITED]
    layer, hit = ask(again)
    assert layer == "semantic" and hit.usage.input_tokens == 0
    assert _blocks(hit) == _blocks(original)  # every block, every citation, in order
    assert hit.stop_reason == "end_turn"
