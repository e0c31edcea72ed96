"""The local Anthropic-compatible server: wire format, SSE event sequence, errors, count_tokens,
caching rules over HTTP (with a small minimum so prompts stay short)."""

import json

import httpx
import pytest

anthropic = pytest.importorskip("anthropic")

from ragcache.server.app import running_server  # noqa: E402

MODEL = "claude-sonnet-4-6"
SYSTEM = "You are a terse assistant for a bicycle repair shop. Answer from the manual excerpts. " * 4
DOCS = [f"Manual section {i}: adjust the {part} with a {tool} until it turns freely." for i, (part, tool) in
        enumerate([("brake cable", "5 mm hex key"), ("derailleur", "screwdriver"), ("headset", "32 mm spanner")])]


pytestmark = pytest.mark.engine("tiny_seed1")


@pytest.fixture(scope="module")
def base_url(engine):
    with running_server(engine, min_tokens=64) as url:
        yield url


@pytest.fixture()
def client(base_url):
    with anthropic.Anthropic(base_url=base_url, api_key="local", max_retries=0) as c:
        yield c


def body(question="How do I fix the brakes?", *, mark=True, system=SYSTEM, model=MODEL, **extra):
    content = [{"type": "text", "text": d} for d in DOCS] + [{"type": "text", "text": question}]
    if mark:
        content[len(DOCS) - 1]["cache_control"] = {"type": "ephemeral"}
    return {"model": model, "max_tokens": 3, "system": system, "messages": [{"role": "user", "content": content}],
            **extra}


def test_json_response_shape_and_usage_fields(client, base_url):
    raw = httpx.post(f"{base_url}/v1/messages", json=body(system=SYSTEM + " shape"))
    assert raw.status_code == 200 and raw.headers["request-id"].startswith("req_")
    data = raw.json()
    assert data["type"] == "message" and data["role"] == "assistant" and data["model"] == MODEL
    assert data["id"].startswith("msg_") and data["content"][0]["type"] == "text"
    assert data["stop_reason"] in ("end_turn", "max_tokens")
    assert set(data["usage"]) >= {"input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens",
                                  "cache_creation", "output_tokens"}
    assert set(data["usage"]["cache_creation"]) == {"ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"}
    assert 1 <= data["usage"]["output_tokens"] <= 3


def test_sse_event_sequence(base_url):
    with httpx.stream("POST", f"{base_url}/v1/messages", json=body(stream=True, system=SYSTEM + " sse")) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["message_start", "content_block_start", "ping"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(kinds[3:-3]) <= {"content_block_delta"}
    start_usage = events[0]["message"]["usage"]
    assert start_usage["cache_creation_input_tokens"] > 0 and start_usage["cache_read_input_tokens"] == 0
    assert events[-2]["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    assert events[-2]["usage"]["output_tokens"] >= 1


def test_sdk_stream_accumulates_usage_and_reads_cache(client):
    b = body(system=SYSTEM + " stream")
    first = client.messages.create(**b)
    with client.messages.stream(**body("Which key for the headset?", system=SYSTEM + " stream")) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert final.content[0].text == text if final.content else text == ""
    assert final.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens > 0
    assert final.usage.cache_creation_input_tokens == 0
    assert final.usage.output_tokens >= 1


def test_count_tokens_matches_usage_total(client, engine):
    b = body(system=SYSTEM + " count")
    counted = client.messages.count_tokens(model=MODEL, system=b["system"], messages=b["messages"]).input_tokens
    u = client.messages.create(**b).usage
    assert counted == u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
    assert counted == engine.count_tokens(b["system"]) + sum(engine.count_tokens(d) for d in DOCS) + \
        engine.count_tokens("How do I fix the brakes?")


def test_more_than_four_breakpoints_is_a_400(client):
    content = [{"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": content}])
    assert err.value.status_code == 400 and "maximum of 4" in str(err.value)
    assert err.value.body["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("bad,match", [
    ({"model": MODEL, "max_tokens": 2}, "messages"),
    ({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
    ({"model": MODEL, "max_tokens": 2, "messages": [{"role": "robot", "content": "hi"}]}, "role"),
    ({"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [{"type": "text"}]}]}, "text"),
    ({"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "b", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]}, "must not come after"),
    ({"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral", "ttl": "2h"}}]}]}, "ttl"),
    ({"model": MODEL, "max_tokens": 2, "temperature": 3, "messages": [{"role": "user", "content": "x"}]}, "temperature"),
])
def test_malformed_requests_are_400(base_url, bad, match):
    r = httpx.post(f"{base_url}/v1/messages", json=bad)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert match in err["error"]["message"]
    assert httpx.post(f"{base_url}/v1/messages", content=b"{oops").status_code == 400


def test_cache_is_per_model_and_top_level_automatic_marker(client):
    b = body(system=SYSTEM + " models")
    w = client.messages.create(**b).usage.cache_creation_input_tokens
    assert w > 0
    other = client.messages.create(**body(system=SYSTEM + " models", model="claude-opus-4-6")).usage
    assert other.cache_read_input_tokens == 0  # entries never cross models
    auto = body("q", mark=False, system=SYSTEM + " auto")
    u1 = client.messages.create(**auto, cache_control={"type": "ephemeral"}).usage
    u2 = client.messages.create(**auto, cache_control={"type": "ephemeral"}).usage
    assert u1.cache_creation_input_tokens > 0 and u2.cache_read_input_tokens == u1.cache_creation_input_tokens
    assert u2.input_tokens == 0  # the automatic marker sits on the last block: everything was cached


def test_stop_reasons(base_url, engine):
    b = {**body(mark=False), "max_tokens": 1, "temperature": 0.0}
    r = httpx.post(f"{base_url}/v1/messages", json=b).json()
    assert r["stop_reason"] == "max_tokens" and r["usage"]["output_tokens"] == 1
    first = engine.tokenizer.decode(engine.tokenizer.encode(r["content"][0]["text"], add_special_tokens=False)[:1])
    assert first  # the greedy first token, used as the stop sequence
    stopped = httpx.post(f"{base_url}/v1/messages", json={**b, "max_tokens": 3, "stop_sequences": [first]}).json()
    assert stopped["stop_reason"] == "stop_sequence" and stopped["stop_sequence"] == first
    assert stopped["content"][0]["text"] == ""


def test_one_hour_ttl_split(client):
    b = body(system=SYSTEM + " 1h")
    b["system"] = [{"type": "text", "text": b["system"], "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    u = client.messages.create(**b).usage
    assert u.cache_creation.ephemeral_1h_input_tokens > 0 and u.cache_creation.ephemeral_5m_input_tokens > 0
    assert u.cache_creation_input_tokens == (u.cache_creation.ephemeral_1h_input_tokens
                                             + u.cache_creation.ephemeral_5m_input_tokens)


def test_prepared_requests_with_empty_blocks_get_the_real_apis_400(client):
    """The real API refuses empty and whitespace-only text blocks (``messages: text content blocks must
    be non-empty`` / ``... non-whitespace text``), so this server does too; ragcache's breakpoints
    never land on them, and the same request without them is accepted and read on repeat."""
    from ragcache.providers.anthropic import AnthropicCaching

    caching = AnthropicCaching(MODEL, token_counter=lambda t: len(t.split()) + 1, min_tokens=64, warn=False)

    def request(question, *, empty="", assistant=" "):
        content = [{"type": "text", "text": d} for d in DOCS] + [{"type": "text", "text": empty}] * (empty is not None) \
            + [{"type": "text", "text": question}]
        return {"model": MODEL, "max_tokens": 2, "system": SYSTEM + " empty blocks", "messages": [
            {"role": "user", "content": "What tools do I need?"},
            {"role": "assistant", "content": [{"type": "text", "text": assistant}]},
            {"role": "user", "content": content}]}

    first = caching.prepare(request("How do I fix the brakes?"))
    assert not [b for b in first.blocks if b.cache_control is not None and not b.text.strip()]
    for bad, words in ((request("q", assistant="Hammer."), "must be non-empty"),
                       (request("q", empty="\n", assistant="Hammer."), "non-whitespace text")):
        with pytest.raises(anthropic.BadRequestError, match=words):
            client.messages.create(**caching.prepare(bad).kwargs)
    ok = lambda q: caching.prepare(request(q, empty=None, assistant="A hammer.")).kwargs  # noqa: E731
    u1 = client.messages.create(**ok("How do I fix the brakes?")).usage
    u2 = client.messages.create(**ok("How do I adjust the headset?")).usage
    assert u1.cache_creation_input_tokens > 0
    assert u2.cache_read_input_tokens == u1.cache_creation_input_tokens


@pytest.mark.parametrize("content", ["", [], "   ", [{"type": "text", "text": ""}], [{"type": "text", "text": " \t"}]])
def test_empty_user_content_is_a_400_like_the_real_api(client, content):
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": content}])
    assert err.value.status_code == 400 and "content" in err.value.body["error"]["message"]


def test_automatic_marker_is_refused_on_a_request_with_a_trailing_empty_block(client):
    auto = body("q", mark=False, system=SYSTEM + " auto-empty")
    auto["messages"][0]["content"].append({"type": "text", "text": ""})
    with pytest.raises(anthropic.BadRequestError, match="must be non-empty"):
        client.messages.create(**auto, cache_control={"type": "ephemeral"})
