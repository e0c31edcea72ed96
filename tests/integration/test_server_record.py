"""Headers and usage of the local servers come from one record (issue 29 item 2): every ``x-ragcache-*``
header and the ``usage`` block of a response agree, from the first request on, streamed or not, with
the real anthropic and openai SDKs. The case: the local Anthropic server sent
``x-ragcache-prefill-reused: 256`` on a request whose usage said ``cache_read_input_tokens=0``."""

from __future__ import annotations

import pytest

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

from ragcache.server.app import running_server  # noqa: E402

MODEL = "claude-sonnet-4-6"
MANUAL = ("The espresso machine descales every 200 shots; the grinder burrs are replaced every 18 months, "
          "and the steam wand is purged after every drink. ") * 5


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


pytestmark = pytest.mark.engine({"seed": 2}, calibration=False)


def _body(question, *, mark=True, system=MANUAL, **extra):
    sys_block = {"type": "text", "text": system}
    if mark:
        sys_block["cache_control"] = {"type": "ephemeral"}
    return {"model": MODEL, "max_tokens": 3, "temperature": 0, "system": [sys_block],
            "messages": [{"role": "user", "content": question}], **extra}


def _anthropic(client, body, stream):
    """(usage at the end, usage at message_start or None, headers) of one request."""
    if not stream:
        raw = client.messages.with_raw_response.create(**body)
        return raw.parse().usage.model_dump(), None, raw.headers
    raw = client.messages.with_raw_response.create(**body, stream=True)
    start = end = None
    for ev in raw.parse():
        if ev.type == "message_start":
            start = ev.message.usage.model_dump()
        elif ev.type == "message_delta":
            end = ev.usage.model_dump()
    return end, start, raw.headers


def _check_anthropic(usage, start, h):
    assert int(h["x-ragcache-cache-read"]) == usage["cache_read_input_tokens"]
    assert int(h["x-ragcache-cache-write"]) == usage["cache_creation_input_tokens"]
    reused, prompt = int(h["x-ragcache-prefill-reused"]), int(h["x-ragcache-prompt-tokens"])
    assert reused == int(h["x-ragcache-prefix-reused"]) + int(h["x-ragcache-chunk-reused"]) <= prompt
    assert (reused == 0) == (usage["cache_read_input_tokens"] == 0)  # no cache read, no reused KV (and back)
    assert h["x-ragcache-layer"] == ("prefix" if reused else "model")
    if start is not None:
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            assert start[k] == usage[k]
    return reused


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_anthropic_headers_and_usage_agree_from_the_first_request(engine, stream):
    engine.prefix_cache.clear()
    clock = Clock()
    with running_server(engine, min_tokens=64, clock=clock) as url:
        c = anthropic.Anthropic(base_url=url, api_key="local", max_retries=0)
        first = _anthropic(c, _body("When are the burrs replaced?"), stream)
        assert first[0]["cache_read_input_tokens"] == 0 and first[0]["cache_creation_input_tokens"] > 0
        assert _check_anthropic(*first) == 0
        second = _anthropic(c, _body("How often is descaling?"), stream)
        assert second[0]["cache_read_input_tokens"] > 0 and _check_anthropic(*second) > 0
        # the engine still holds the KV, but the emulated cache reads nothing: neither does the engine
        clock.t += 400  # past the 5-minute TTL
        expired = _anthropic(c, _body("And the steam wand?"), stream)
        assert expired[0]["cache_read_input_tokens"] == 0 and _check_anthropic(*expired) == 0


@pytest.mark.parametrize("case", ["no-marker", "below-minimum", "other-model"])
def test_engine_kv_the_emulated_cache_would_not_read_is_not_reported_or_used(engine, case):
    """The issue's kind: the engine has the prefix, the API's rules read nothing."""
    engine.prefix_cache.clear()
    minimum = 100_000 if case == "below-minimum" else 64
    with running_server(engine, min_tokens=minimum) as url:
        c = anthropic.Anthropic(base_url=url, api_key="local", max_retries=0)
        body = _body("When are the burrs replaced?", mark=case != "no-marker")
        _anthropic(c, body, False)
        if case == "other-model":
            body = {**body, "model": "claude-haiku-4-5"}
        usage, start, h = _anthropic(c, {**body, "messages": [{"role": "user", "content": "Descaling?"}]}, False)
        assert usage["cache_read_input_tokens"] == 0 and _check_anthropic(usage, start, h) == 0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_openai_headers_and_usage_agree(engine, stream):
    engine.prefix_cache.clear()
    with running_server(engine) as url:
        c = openai.OpenAI(base_url=url + "/v1", api_key="local", max_retries=0)
        seen = []
        for q in ("When are the burrs replaced?", "How often is descaling?", "Steam wand?"):
            msgs = [{"role": "system", "content": MANUAL}, {"role": "user", "content": q}]
            if stream:
                raw = c.chat.completions.with_raw_response.create(
                    model="tiny-llama", messages=msgs, max_tokens=3, temperature=0, stream=True,
                    stream_options={"include_usage": True})
                usage = [ch for ch in raw.parse()][-1].usage
            else:
                raw = c.chat.completions.with_raw_response.create(model="tiny-llama", messages=msgs, max_tokens=3,
                                                                  temperature=0)
                usage = raw.parse().usage
            h = raw.headers
            assert int(h["x-ragcache-prefill-reused"]) == usage.prompt_tokens_details.cached_tokens
            assert int(h["x-ragcache-prompt-tokens"]) == usage.prompt_tokens
            assert int(h["x-ragcache-prefix-reused"]) + int(h["x-ragcache-chunk-reused"]) == \
                usage.prompt_tokens_details.cached_tokens
            seen.append(usage.prompt_tokens_details.cached_tokens)
    assert seen[0] == 0 and seen[1] > 0 and seen[2] > 0
