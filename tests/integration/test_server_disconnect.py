"""The caller hangs up, the server stops (issue 39, section 2): a client that closes its connection
mid-generation stops the local server's generation within a few decode steps on every route (OpenAI
chat completions and Anthropic messages, streamed and not), so the next caller does not wait for an
answer nobody reads.

The client is a real TCP client: it sends the request, waits until the engine has decoded a few
tokens, and closes the socket. The engine is the tiny random model, slowed to 5 ms per decode step so
an abandoned 1,500-token generation would run for seconds; what is asserted is the engine's own count of
decode steps after the close, never wall-clock time.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from urllib.parse import urlparse

import httpx
import pytest

from ragcache.engine.engine import LocalEngine
from ragcache.server.app import running_server

BUDGET = 1500
STEP_S = 0.005


class CountingEngine(LocalEngine):
    """Counts decode events per request and keeps each finished Generation; each event takes >= 5 ms."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.events = 0
        self.generations = []
        self.decoding = threading.Event()

    def stream(self, *a, **kw):
        for ev in super().stream(*a, **kw):
            if ev.generation is not None:
                self.generations.append(ev.generation)
            else:
                self.events += 1
                if self.events >= 5:
                    self.decoding.set()
                time.sleep(STEP_S)
            yield ev


pytestmark = pytest.mark.engine(cls=CountingEngine, calibration=False)


@pytest.fixture(scope="module")
def base_url(engine):
    with running_server(engine) as url:
        yield url


def _request(path: str, body: dict) -> bytes:
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\n"
            f"x-api-key: local\r\nauthorization: Bearer local\r\nanthropic-version: 2023-06-01\r\n"
            f"content-length: {len(data)}\r\n\r\n")
    return head.encode() + data


ROUTES = {
    "openai": ("/v1/chat/completions", lambda stream: {
        "model": "tiny", "max_tokens": BUDGET, "temperature": 0, "stream": stream,
        "messages": [{"role": "user", "content": "Tell me everything about bicycles."}]}),
    "anthropic": ("/v1/messages", lambda stream: {
        "model": "claude-sonnet-4-6", "max_tokens": BUDGET, "temperature": 0, "stream": stream,
        "messages": [{"role": "user", "content": "Tell me everything about bicycles."}]}),
}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_a_client_that_hangs_up_stops_the_generation(engine, base_url, route, stream):
    path, body = ROUTES[route]
    payload = body(stream)
    if route == "openai":
        payload["model"] = httpx.get(f"{base_url}/v1/models").json()["data"][0]["id"]
    url = urlparse(base_url)
    done = len(engine.generations)
    engine.decoding.clear()
    engine.events = 0
    sock = socket.create_connection((url.hostname, url.port))
    sock.sendall(_request(path, payload))
    assert engine.decoding.wait(60), "the engine never started decoding"
    at_close = engine.events
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()  # the caller hangs up mid-generation
    # the next caller: it needs the engine, which the abandoned request holds until it stops
    r = httpx.post(f"{base_url}/v1/messages", headers={"x-api-key": "local", "anthropic-version": "2023-06-01"},
                   json={"model": "claude-sonnet-4-6", "max_tokens": 2, "temperature": 0,
                         "messages": [{"role": "user", "content": "Brakes?"}]}, timeout=120)
    assert r.status_code == 200
    # the abandoned request never reached its final event; the next one did
    assert len(engine.generations) == done + 1 and engine.generations[-1].text == r.json()["content"][0]["text"]
    abandoned = engine.events - len(engine.generations[-1].token_ids) - at_close
    assert abandoned <= 20, f"{abandoned} decode steps after the client left ({route}, stream={stream})"
