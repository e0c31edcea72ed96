"""Both local server routes, with blending forced on (``recompute_ratio=0.15``, as
``RAGCACHE_RECOMPUTE_RATIO=0.15 ragcache serve``): documents in another order reuse their chunk KV on
the OpenAI *and* the Anthropic route, and a blended answer is labelled approximate with its blend
setting in the headers and in the body, JSON and streamed (issue 40, "every surface says so")."""

from __future__ import annotations

import json

import httpx
import pytest

from engine_doubles import RecordingEngine
from ragcache.server.app import running_server


DOCS = [
    "Brakes: adjust the brake cable tension with the barrel adjuster, then centre the caliper with a 5 mm hex key "
    "until the pads clear the rim by one millimetre on each side.",
    "Gears: index the rear derailleur by turning the barrel adjuster a quarter turn at a time until the chain "
    "climbs to the next sprocket without hesitation or noise.",
    "Headset: loosen the stem bolts, tighten the top cap with a 5 mm key until the play is gone, align the stem "
    "with the front wheel and tighten the stem bolts to 5 Nm.",
]
KEY = {"x-api-key": "local", "authorization": "Bearer local"}  # one tenant on both routes


pytestmark = [pytest.mark.integration, pytest.mark.engine(cls=RecordingEngine, blending=True)]


@pytest.fixture(scope="module")
def base_url(engine):
    with running_server(engine, min_tokens=64) as url:
        yield url


def _openai(base_url, system, docs, *, stream=False):
    parts = [{"type": "text", "text": d} for d in docs] + [{"type": "text", "text": "How do I fix the brakes?"}]
    body = {"model": "tiny-llama", "max_tokens": 3, "temperature": 0, "stream": stream,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": parts}]}
    if not stream:
        r = httpx.post(f"{base_url}/v1/chat/completions", json=body, headers=KEY, timeout=120)
        return r.headers, [r.json()]
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, headers=KEY, timeout=120) as r:
        events = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: ") and x != "data: [DONE]"]
        return r.headers, events


def _anthropic(base_url, system, docs, *, stream=False):
    content = [{"type": "text", "text": d} for d in docs] + [{"type": "text", "text": "How do I fix the brakes?"}]
    body = {"model": "claude-sonnet-4-6", "max_tokens": 3, "temperature": 0, "stream": stream, "system": system,
            "messages": [{"role": "user", "content": content}]}
    if not stream:
        r = httpx.post(f"{base_url}/v1/messages", json=body, headers=KEY, timeout=120)
        return r.headers, [r.json()]
    with httpx.stream("POST", f"{base_url}/v1/messages", json=body, headers=KEY, timeout=120) as r:
        events = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: ")]
        return r.headers, events


def _labelled(headers, record, engine):
    g = engine.generations[-1]
    assert g.stats.approximate and g.stats.chunk_tokens_reused > 0, g.stats.reuse_decision
    setting = g.stats.blend_setting
    assert setting and "r=0.15" in setting
    assert headers["x-ragcache-approximate"] == "true" and headers["x-ragcache-blend-setting"] == setting
    assert headers["x-ragcache-recompute-ratio"] == "0.15" and "chunk" in headers["x-ragcache-layer"]
    assert int(headers["x-ragcache-chunk-reused"]) == g.stats.chunk_tokens_reused
    assert record == {"layer": headers["x-ragcache-layer"], "approximate": True, "blend_setting": setting,
                      "recompute_ratio": 0.15, "decode_cache": "dynamic"}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_openai_route_labels_a_blended_answer(base_url, engine, stream):
    system = f"You answer from bicycle manual excerpts. OpenAI {stream}."
    _openai(base_url, system, DOCS)  # stores each document's chunk KV
    headers, events = _openai(base_url, system, DOCS[::-1], stream=stream)
    if stream:
        labelled = [e for e in events if "ragcache" in e]
        assert labelled[0] is events[0] and labelled[-1]["choices"][0]["finish_reason"] is not None
        assert len(labelled) == 2 and labelled[0]["ragcache"] == labelled[-1]["ragcache"]
        _labelled(headers, labelled[-1]["ragcache"], engine)
    else:
        _labelled(headers, events[0]["ragcache"], engine)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_anthropic_route_reuses_shifted_documents_and_labels_them(base_url, engine, stream):
    """The trial's Anthropic route answered reordered documents as ``layer: model``: it now reuses their
    chunk KV like the OpenAI route. Its usage still bills what the emulated provider cache read
    (nothing here: no breakpoint), and no prefix KV beyond that read."""
    system = f"You answer from bicycle manual excerpts. Anthropic {stream}."
    _anthropic(base_url, system, DOCS)
    headers, events = _anthropic(base_url, system, DOCS[::-1], stream=stream)
    g = engine.generations[-1]
    assert g.stats.docs_hit == 3 and headers["x-ragcache-prefix-reused"] == "0"
    if stream:
        start = next(e for e in events if e["type"] == "message_start")
        delta = next(e for e in events if e["type"] == "message_delta")
        assert start["message"]["ragcache"] == delta["ragcache"]
        assert delta["usage"]["cache_read_input_tokens"] == 0
        _labelled(headers, delta["ragcache"], engine)
    else:
        body = events[0]
        assert body["usage"]["cache_read_input_tokens"] == 0
        _labelled(headers, body["ragcache"], engine)


def test_an_exact_answer_says_so(base_url, engine):
    system = "You answer from bicycle manual excerpts. Exact."
    fresh = ["Tyres: inflate road tyres to the pressure printed on the sidewall, usually 80 to 100 psi."]
    headers, events = _openai(base_url, system, fresh)  # a document never sent: nothing to reuse, exact
    assert headers["x-ragcache-approximate"] == "false" and "x-ragcache-blend-setting" not in headers
    assert events[0]["ragcache"]["approximate"] is False and events[0]["ragcache"]["blend_setting"] is None
