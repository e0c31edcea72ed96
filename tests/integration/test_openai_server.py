"""The local OpenAI-compatible endpoint (``POST /v1/chat/completions``, ``GET /v1/models``) with the
real ``openai`` SDK, sync / async / streaming, on a tiny random model with a chunk cache:
cached_tokens is the engine's own reuse count, documents in another order still reuse their KV,
bad requests get OpenAI's error bodies, and the Anthropic routes share the app and the KV."""

from __future__ import annotations

import json

import httpx
import pytest

openai = pytest.importorskip("openai")

from engine_doubles import RecordingEngine  # noqa: E402
from ragcache.server.app import running_server  # noqa: E402

SYSTEM = "You are the support assistant of a bicycle shop. Answer from the manual excerpts in one sentence."
DOCS = [
    ("Brakes: adjust the brake cable tension with the barrel adjuster, then centre the caliper with a 5 mm hex key "
    "until the pads clear the rim by one millimetre on each side."),
    ("Gears: index the rear derailleur by turning the barrel adjuster a quarter turn at a time until the chain "
    "climbs to the next sprocket without hesitation or noise."),
    ("Headset: loosen the stem bolts, tighten the top cap with a 5 mm key until the play is gone, align the stem "
    "with the front wheel and tighten the stem bolts to 5 Nm."),
]


pytestmark = pytest.mark.engine(cls=RecordingEngine, blending=True)


@pytest.fixture(scope="module")
def base_url(engine):
    with running_server(engine, min_tokens=64) as url:
        yield url


@pytest.fixture(scope="module")
def model(base_url):
    return httpx.get(f"{base_url}/v1/models").json()["data"][0]["id"]


@pytest.fixture()
def client(base_url):
    with openai.OpenAI(base_url=f"{base_url}/v1", api_key="local", max_retries=0) as c:
        yield c


def messages(question, docs=DOCS, system=SYSTEM):
    parts = [{"type": "text", "text": d} for d in docs] + [{"type": "text", "text": question}]
    return [{"role": "system", "content": system}, {"role": "user", "content": parts}]


def reuse(gen):
    return gen.stats.prefix_tokens_reused + gen.stats.chunk_tokens_reused


def test_models_list_serves_the_engine_under_its_name(client, engine):
    ids = [m.id for m in client.models.list()]
    assert ids == ["tiny-llama"]
    raw = client.models.with_raw_response.list().http_response.json()
    assert raw["object"] == "list" and raw["data"][0]["object"] == "model" and raw["data"][0]["owned_by"]
    assert raw["data"][0]["type"] == "model"  # Anthropic's fields too: one route for both SDKs


def test_second_request_of_a_session_reports_the_engines_reuse(client, engine, model):
    system = SYSTEM + " Session one."
    first = client.chat.completions.create(model=model, messages=messages("How do I fix the brakes?", system=system),
                                           max_tokens=3, temperature=0)
    g1 = engine.generations[-1]
    assert first.object == "chat.completion" and first.id.startswith("chatcmpl-") and first.model == model
    assert first.choices[0].message.role == "assistant" and first.choices[0].finish_reason in ("stop", "length")
    assert first.usage.prompt_tokens == g1.stats.prompt_tokens and first.usage.completion_tokens == len(g1.token_ids)
    assert first.usage.total_tokens == first.usage.prompt_tokens + first.usage.completion_tokens
    assert first.usage.prompt_tokens_details.cached_tokens == reuse(g1)
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=messages("Which key for the headset?", system=system), max_tokens=3, temperature=0)
    second, g2 = raw.parse(), engine.generations[-1]
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached == reuse(g2) > 0  # the system turn and the documents, from the prefix cache
    assert g2.stats.prefix_tokens_reused > 0.8 * second.usage.prompt_tokens
    assert second.usage.prompt_tokens == g2.stats.prompt_tokens
    assert raw.headers["x-ragcache-layer"] == "prefix"
    assert int(raw.headers["x-ragcache-prefix-reused"]) == g2.stats.prefix_tokens_reused


def test_documents_in_another_order_reuse_their_kv(client, engine, model):
    system = SYSTEM + " Session two."
    client.chat.completions.create(model=model, messages=messages("How do I fix the brakes?", system=system),
                                   max_tokens=2, temperature=0)
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=messages("How do I fix the brakes?", DOCS[::-1], system=system), max_tokens=2,
        temperature=0)
    r, g = raw.parse(), engine.generations[-1]
    assert g.stats.docs_hit == 3 and g.stats.chunk_tokens_reused > 0  # every document from the chunk cache
    assert r.usage.prompt_tokens_details.cached_tokens == reuse(g) > g.stats.prefix_tokens_reused
    assert raw.headers["x-ragcache-layer"] == "prefix+chunk"
    assert int(raw.headers["x-ragcache-chunk-reused"]) == g.stats.chunk_tokens_reused
    assert int(raw.headers["x-ragcache-recomputed"]) == g.stats.tokens_recomputed  # computed, so not cached


def test_plain_string_content_and_history(client, engine, model):
    system = SYSTEM + " Strings."
    history = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi, how can I help?"}]
    msgs = [{"role": "developer", "content": system}, *history, {"role": "user", "content": "Brakes squeal."}]
    a = client.chat.completions.create(model=model, messages=msgs, max_tokens=2, temperature=0)
    msgs2 = [*msgs[:-1], {"role": "user", "content": "The gears slip."}]
    b = client.chat.completions.create(model=model, messages=msgs2, max_tokens=2, temperature=0)
    g = engine.generations[-1]
    assert a.usage.prompt_tokens_details.cached_tokens == engine.generations[-2].stats.prefix_tokens_reused
    assert b.usage.prompt_tokens_details.cached_tokens == g.stats.prefix_tokens_reused > 0
    assert g.stats.docs_hit + g.stats.docs_missed == 0  # string content is not split into documents


def test_stream_chunks_and_final_usage(client, engine, model):
    system = SYSTEM + " Streaming."
    client.chat.completions.create(model=model, messages=messages("How do I fix the brakes?", system=system),
                                   max_tokens=2, temperature=0)
    chunks = list(client.chat.completions.create(
        model=model, messages=messages("Which key for the headset?", system=system), max_tokens=5, temperature=0,
        stream=True, stream_options={"include_usage": True}))
    g = engine.generations[-1]
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].object == "chat.completion.chunk"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == g.text and text
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [g.stats.finish_reason]
    assert all(c.usage is None for c in chunks[:-1]) and chunks[-1].choices == []
    u = chunks[-1].usage
    assert u.prompt_tokens_details.cached_tokens == reuse(g) > 0 and u.completion_tokens == len(g.token_ids)


def test_stream_without_usage_and_done_marker(base_url, model):
    body = {"model": model, "messages": messages("Brakes?"), "max_tokens": 3, "stream": True}
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    events = [json.loads(x) for x in lines[:-1]]
    assert all("usage" not in e and len(e["choices"]) == 1 for e in events)
    assert events[-1]["choices"][0]["finish_reason"] in ("stop", "length")


async def test_async_client_json_and_stream(base_url, engine, model):
    system = SYSTEM + " Async."
    async with openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="local", max_retries=0) as c:
        a = await c.chat.completions.create(model=model, messages=messages("Brakes?", system=system), max_tokens=2,
                                            temperature=0)
        assert a.choices[0].message.content == engine.generations[-1].text
        stream = await c.chat.completions.create(model=model, messages=messages("Gears?", system=system),
                                                 max_tokens=3, temperature=0, stream=True,
                                                 stream_options={"include_usage": True})
        chunks = [ch async for ch in stream]
    g = engine.generations[-1]
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == g.text
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == reuse(g) > 0


def test_anthropic_routes_share_the_app_and_the_kv(base_url, client, engine, model):
    """One engine, one KV cache: the Anthropic route's prefill is stored for the OpenAI route, and the
    Anthropic route reuses the engine's prefix KV as far as its emulated prompt cache reads (no further: its
    headers and usage agree, :mod:`ragcache.server.record`); its documents' chunk KV is the engine's own
    saving, beyond the emulated cache's usage."""
    system = "Both APIs answer from one engine and one KV cache. " + SYSTEM * 3  # a prefix no earlier test stored
    content = [{"type": "text", "text": d} for d in DOCS] + [{"type": "text", "text": "Gears?"}]
    body = {"model": "claude-sonnet-4-6", "max_tokens": 2, "messages": [{"role": "user", "content": content}],
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]}
    key = {"x-api-key": "local"}  # the OpenAI client's key: one tenant (another's KV is never reused)
    r = httpx.post(f"{base_url}/v1/messages", json=body, headers=key, timeout=120)
    assert r.status_code == 200 and r.json()["usage"]["cache_creation_input_tokens"] > 0
    assert r.headers["x-ragcache-prefix-reused"] == "0" and r.json()["usage"]["cache_read_input_tokens"] == 0
    client.chat.completions.create(model=model, messages=messages("Brakes?", system=system), max_tokens=2,
                                   temperature=0)
    assert engine.generations[-1].stats.prefix_tokens_reused >= 16  # the system turn the Anthropic route stored
    r = httpx.post(f"{base_url}/v1/messages", json=body, headers=key, timeout=120)
    g = engine.generations[-1]
    assert r.json()["usage"]["cache_read_input_tokens"] > 0
    assert int(r.headers["x-ragcache-prefill-reused"]) == reuse(g)
    assert int(r.headers["x-ragcache-prefix-reused"]) == g.stats.prefix_tokens_reused >= 16
    assert int(r.headers["x-ragcache-chunk-reused"]) == g.stats.chunk_tokens_reused  # documents: any position


# -- errors -----------------------------------------------------------------------------------
def _error(exc_info):
    body = exc_info.value.response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    return body["error"]


@pytest.mark.parametrize("extra, param, code", [
    ({"max_tokens": 0}, "max_tokens", "integer_below_min_value"),
    ({"max_completion_tokens": -3}, "max_completion_tokens", "integer_below_min_value"),
    ({"n": 2}, "n", "unsupported_value"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}, "tools",
     "unsupported_parameter"),
    ({"tool_choice": "required"}, "tool_choice", "unsupported_parameter"),
    ({"logprobs": True}, "logprobs", "unsupported_parameter"),
    ({"temperature": 3}, "temperature", None),
    ({"response_format": {"type": "json_object"}}, "response_format", "unsupported_value"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", None),
    ({"stream_options": {"include_usage": True}}, "stream_options", None),
    ({"presence_penalty": 0.5}, "presence_penalty", "unsupported_value"),
])
def test_bad_parameters_get_openai_errors(client, model, extra, param, code):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=messages("Brakes?"), **{"max_tokens": 2, **extra})
    err = _error(e)
    assert e.value.status_code == 400 and err["type"] == "invalid_request_error"
    assert err["param"] == param and err["code"] == code


@pytest.mark.parametrize("msgs, param", [
    ([], "messages"),
    ([{"role": "tool", "content": "42", "tool_call_id": "x"}], "messages[0].role"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}],
     "messages[0].content[0].type"),
    ([{"role": "wizard", "content": "hi"}], "messages[0].role"),
    ([{"role": "user"}], "messages[0].content"),
])
def test_bad_messages_get_openai_errors(client, model, msgs, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=msgs, max_tokens=2)
    assert _error(e)["param"] == param


def test_missing_fields_unknown_model_bad_json_and_context_window(base_url, client, model):
    r = httpx.post(f"{base_url}/v1/chat/completions", json={"model": model, "max_tokens": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    assert r.json()["error"]["code"] == "missing_required_parameter"
    r = httpx.post(f"{base_url}/v1/chat/completions", json={"messages": messages("Brakes?")})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"
    r = httpx.post(f"{base_url}/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=messages("Brakes?"), max_tokens=2)
    err = _error(e)
    assert err["code"] == "model_not_found" and err["param"] == "model" and "tiny-llama" in err["message"]
    long_doc = "spoke tension " * 1200  # > the tiny model's 2048 positions
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=messages("Brakes?", [long_doc]), max_tokens=2,
                                       stream=True)  # rejected before the stream starts
    assert _error(e)["code"] == "context_length_exceeded"


def test_model_aliases(engine):
    with running_server(engine, models=["gpt-4o-mini", "local"]) as url:
        with openai.OpenAI(base_url=f"{url}/v1", api_key="local", max_retries=0) as c:
            assert [m.id for m in c.models.list()] == ["gpt-4o-mini", "local"]
            r = c.chat.completions.create(model="gpt-4o-mini", messages=messages("Brakes?"), max_tokens=2)
            assert r.model == "gpt-4o-mini"
            with pytest.raises(openai.NotFoundError):
                c.chat.completions.create(model="tiny-llama", messages=messages("Brakes?"), max_tokens=2)


def test_client_leaving_a_stream_stops_generation(client, engine, model):
    n = len(engine.generations)
    stream = client.chat.completions.create(model=model, messages=messages("Tell me everything."), max_tokens=1500,
                                            temperature=0, stream=True)
    for i, _ in enumerate(stream):
        if i == 2:
            break
    stream.close()  # the connection goes away mid-generation
    after = client.chat.completions.create(model=model, messages=messages("Brakes?"), max_tokens=2, temperature=0)
    # the abandoned request never reached its final event (stopped within a decode step); the next one ran
    assert len(engine.generations) == n + 1 and engine.generations[-1].text == after.choices[0].message.content
