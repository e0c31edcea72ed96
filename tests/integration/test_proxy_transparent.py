"""The caching proxy is transparent where it does not cache (issue 47, item 5), through the real
``anthropic`` SDK against the proxy and a local fake upstream on loopback:

- the headers that steer clients (``retry-after``, ``retry-after-ms``, ``x-should-retry``,
  ``anthropic-ratelimit-*``, ``request-id``, ``x-request-id``) are relayed on errors and successes,
  JSON and streamed: the SDK waits as long as upstream asked and does not retry what upstream said
  not to;
- an unreachable upstream is a 502, a timed-out one a 504, each with the Messages API's error body;
- a stream the client cuts is billed (stats and the write ledger) for what ``message_start`` reported.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import threading
import time

import httpx
import pytest

anthropic = pytest.importorskip("anthropic")

from anthropic_doubles import message, message_events, running_upstream  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, StreamingResponse  # noqa: E402

from ragcache.semantic import SemanticCache  # noqa: E402
from ragcache.server.app import running_server  # noqa: E402
from ragcache.server.proxy import AnthropicProxy  # noqa: E402
from ragcache.testing import HashingEmbedder  # noqa: E402

MODEL = "claude-sonnet-4-6"
SYSTEM = "You answer questions about the bicycle shop manual. Be brief. " * 8
STEER = {"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "0",
         "anthropic-ratelimit-tokens-reset": "2026-12-06T07:00:00Z", "request-id": "req_upstream_1",
         "x-request-id": "xr_upstream_1"}
CUT_USAGE = {"input_tokens": 40, "cache_creation_input_tokens": 1200, "cache_read_input_tokens": 0, "output_tokens": 1}


def _message(text, usage=None):
    return message(text, model=MODEL, usage=usage)


def _events(text, usage=None):
    return message_events(_message(text, usage))


def _error(status, kind, headers):
    return JSONResponse({"type": "error", "error": {"type": kind, "message": kind}}, status_code=status,
                        headers={**STEER, **headers})


class Upstream:
    """A Messages API double: what it does depends on the question's first word."""

    def __init__(self):
        self.calls = collections.Counter()
        self.release = threading.Event()  # ends a held stream

    async def messages(self, request: Request):
        body = await request.json()
        q = body["messages"][-1]["content"]
        self.calls[q] += 1
        word = q.split()[0]
        if word == "limited" and self.calls[q] == 1:
            return _error(429, "rate_limit_error", {"retry-after": "2", "retry-after-ms": "1250"})
        if word == "limited-seconds" and self.calls[q] == 1:
            return _error(429, "rate_limit_error", {"retry-after": "1"})
        if word == "final":
            return _error(529, "overloaded_error", {"x-should-retry": "false"})
        if word == "busy":
            return _error(529, "overloaded_error", {"retry-after-ms": "20"})
        if word == "slow":
            await asyncio.sleep(3)
        if word in ("cut", "stall"):
            async def held():
                yield from_events[0]
                yield from_events[1]
                yield from_events[2]
                for _ in range(400 if word == "cut" else 40):  # until the test lets go
                    if self.release.is_set():
                        return
                    await asyncio.sleep(0.05)

            from_events = list(_events("partial", CUT_USAGE))
            return StreamingResponse(held(), media_type="text/event-stream", headers=STEER)
        if body.get("stream"):
            async def pieces():
                for e in _events("answer to " + q):
                    yield e
            return StreamingResponse(pieces(), media_type="text/event-stream", headers=STEER)
        return JSONResponse(_message("answer to " + q), headers=STEER)


@pytest.fixture()
def upstream():
    up = Upstream()
    with running_upstream(up.messages) as url:
        yield up, url
        up.release.set()


def _proxy(url, **kw):
    p = AnthropicProxy(url, semantic=SemanticCache(None, embedder=HashingEmbedder()), api_key="k", min_tokens=1, **kw)
    return p, running_server(None, app=p.app)


def _req(q, **extra):
    return {"model": MODEL, "max_tokens": 16, "system": SYSTEM, "messages": [{"role": "user", "content": q}], **extra}


def _recording_client(url, monkeypatch, retries):
    """An SDK client whose retry waits are the SDK's own, recorded."""
    client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=retries)
    waits = []
    real = client._calculate_retry_timeout

    def calc(*a, **kw):
        waits.append(real(*a, **kw))
        return waits[-1]

    monkeypatch.setattr(client, "_calculate_retry_timeout", calc)
    return client, waits


# ---------------------------------------------------------------- headers that steer clients
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("word,wait", [("limited", 1.25), ("limited-seconds", 1.0)])
def test_retry_after_reaches_the_sdk_and_is_honoured(upstream, monkeypatch, stream, word, wait):
    up, url = upstream
    p, serving = _proxy(url)
    with serving as purl:
        client, waits = _recording_client(purl, monkeypatch, retries=2)
        q = f"{word} question {stream}"
        if stream:
            with client.messages.stream(**_req(q)) as s:
                text = "".join(s.text_stream)
        else:
            text = client.messages.create(**_req(q)).content[0].text
    assert text == "answer to " + q and up.calls[q] == 2
    assert waits == [wait]  # retry-after-ms before retry-after, as upstream asked (not the SDK's 0.5 s backoff)


@pytest.mark.parametrize("stream", [False, True])
def test_x_should_retry_false_is_not_retried_and_a_plain_529_is(upstream, monkeypatch, stream):
    up, url = upstream
    p, serving = _proxy(url)
    with serving as purl:
        client, waits = _recording_client(purl, monkeypatch, retries=3)
        for word, calls in (("final", 1), ("busy", 4)):
            q = f"{word} question {stream}"
            with pytest.raises(anthropic.APIStatusError) as e:
                if stream:
                    with client.messages.stream(**_req(q)) as s:
                        "".join(s.text_stream)
                else:
                    client.messages.create(**_req(q))
            assert e.value.status_code == 529 and e.value.body["error"]["type"] == "overloaded_error"
            assert up.calls[q] == calls, word  # nothing stored: every retry reached upstream
            assert e.value.response.headers["request-id"] == "req_upstream_1"
            assert e.value.response.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert waits == [0.02] * 3


@pytest.mark.parametrize("stream", [False, True])
def test_a_success_relays_rate_limit_headers_and_request_ids(upstream, stream):
    _, url = upstream
    p, serving = _proxy(url)
    with serving as purl:
        client = anthropic.Anthropic(base_url=purl, api_key="k", max_retries=0)
        q = f"plain question {stream}"
        if stream:
            with client.messages.stream(**_req(q)) as s:
                "".join(s.text_stream)
            headers = s.response.headers
        else:
            raw = client.messages.with_raw_response.create(**_req(q))
            headers = raw.headers
            assert raw.parse().content[0].text == "answer to " + q
    for k, v in STEER.items():
        assert headers[k] == v, k
    assert headers["x-ragcache-layer"] == "provider"


# ---------------------------------------------------------------- an upstream that cannot answer
def _closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("stream", [False, True])
def test_an_unreachable_upstream_is_a_502_with_an_anthropic_error_body(stream):
    p, serving = _proxy(f"http://127.0.0.1:{_closed_port()}")
    with serving as purl:
        client = anthropic.Anthropic(base_url=purl, api_key="k", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as e:
            if stream:
                with client.messages.stream(**_req("unreachable?")) as s:
                    "".join(s.text_stream)
            else:
                client.messages.create(**_req("unreachable?"))
        r = httpx.post(f"{purl}/v1/messages/count_tokens", json=_req("count?"), timeout=30)
    assert e.value.status_code == 502 and e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "api_error" and "could not be reached" in e.value.body["error"]["message"]
    assert r.status_code == 502 and r.json()["error"]["type"] == "api_error"


@pytest.mark.parametrize("stream", [False, True])
def test_a_timed_out_upstream_is_a_504_with_an_anthropic_error_body(upstream, stream):
    up, url = upstream
    p, serving = _proxy(url, timeout_s=0.5)
    with serving as purl:
        client = anthropic.Anthropic(base_url=purl, api_key="k", max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as e:
            if stream:
                with client.messages.stream(**_req(f"slow question {stream}")) as s:
                    "".join(s.text_stream)
            else:
                client.messages.create(**_req(f"slow question {stream}"))
    assert e.value.status_code == 504
    assert e.value.body == {"type": "error", "error": {"type": "timeout_error", "message": e.value.body["error"]["message"]}}


# ---------------------------------------------------------------- a stream the client cuts is billed
def test_a_stream_cut_by_the_client_is_billed_from_message_start(upstream):
    up, url = upstream
    p, serving = _proxy(url)
    with serving as purl:
        client = anthropic.Anthropic(base_url=purl, api_key="k", max_retries=0)
        with client.messages.stream(**_req("cut question")) as s:
            for ev in s:
                if ev.type == "content_block_delta":
                    break  # the client hangs up mid-stream
        stats = {}
        for _ in range(400):  # the proxy notices the hang-up when it next writes or reads
            stats = httpx.get(f"{purl}/v1/ragcache/stats", timeout=30).json()
            if stats["models"].get(MODEL, {}).get("requests"):
                break
            time.sleep(0.05)
        up.release.set()
    m = stats["models"][MODEL]
    assert m["requests"] == 1 and m["input_tokens"] == 40 and m["cache_write_tokens"] == 1200
    assert m["cost_usd"] > 0
    ledger = p.accounts.get(MODEL).ledger  # the write ledger saw the write
    assert sum(c.writes for c in ledger.classes.values()) >= 1
    assert up.calls["cut question"] == 1


def test_a_stream_that_stalls_after_it_started_ends_with_an_error_event_billed_and_unstored(upstream):
    up, url = upstream
    p, serving = _proxy(url, timeout_s=1.0)
    with serving as purl:
        client = anthropic.Anthropic(base_url=purl, api_key="k", max_retries=0)
        for n in (1, 2):
            with pytest.raises(anthropic.APIStatusError) as e:
                with client.messages.stream(**_req("stall question")) as s:
                    "".join(s.text_stream)
            assert e.value.body["error"]["type"] == "timeout_error"
            assert up.calls["stall question"] == n  # a failed stream is never stored
        m = httpx.get(f"{purl}/v1/ragcache/stats", timeout=30).json()["models"][MODEL]
    assert m["requests"] == 2 and m["cache_write_tokens"] == 2 * 1200
