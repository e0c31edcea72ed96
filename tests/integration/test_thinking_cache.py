"""Thinking settings and the prompt cache (issue 32 section 2): after thinking is turned on or off or its
budget changed, the Anthropic API reads from cache only the tools and system part and writes the
messages again. The local Anthropic server emulates that rule (usage, and the engine's KV reuse that
follows it), and the miss diagnosis names the cause instead of blaming eviction."""

from __future__ import annotations

import warnings

import pytest

anthropic = pytest.importorskip("anthropic")

from ragcache.providers.anthropic.backend import AnthropicCaching  # noqa: E402
from ragcache.providers.anthropic.blocks import thinking_setting  # noqa: E402
from ragcache.server.app import running_server  # noqa: E402

MODEL = "claude-sonnet-4-6"
SYSTEM = "You review pull requests for the payments service; cite the file and line of every finding. " * 4
TURNS = [{"role": "user", "content": "Review the retry logic in the charge handler."},
         {"role": "assistant", "content": "The handler retries without a backoff; add jitter."},
         {"role": "user", "content": "And the refund path?"}]
OFF, ON_1024, ON_1500, DISABLED = None, {"type": "enabled", "budget_tokens": 1024}, \
    {"type": "enabled", "budget_tokens": 1500}, {"type": "disabled"}


pytestmark = pytest.mark.engine({"seed": 4, "max_position_embeddings": 8192}, calibration=False)


def body(thinking):
    b = {"model": MODEL, "max_tokens": 1600, "temperature": 1, "stop_sequences": ["e", "a", "o", " "],
         "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
         "messages": [*TURNS[:-1], {"role": "user", "content": [
             {"type": "text", "text": TURNS[-1]["content"], "cache_control": {"type": "ephemeral"}}]}]}
    if thinking is not None:
        b["thinking"] = thinking
    return b


def send(client, thinking):
    raw = client.messages.with_raw_response.create(**body(thinking))
    return raw.parse().usage, raw.headers


@pytest.mark.parametrize("first,second", [(OFF, ON_1024), (ON_1024, OFF), (ON_1024, ON_1500), (DISABLED, ON_1500),
                                          (ON_1500, DISABLED)])
def test_changed_thinking_settings_read_only_tools_and_system(engine, first, second):
    engine.prefix_cache.clear()
    with running_server(engine, min_tokens=64) as url:
        c = anthropic.Anthropic(base_url=url, api_key="local", max_retries=0)
        system_tokens = c.messages.count_tokens(model=MODEL, system=SYSTEM,
                                                messages=[{"role": "user", "content": "x"}]).input_tokens - 1
        written, _ = send(c, first)
        total = written.input_tokens + written.cache_creation_input_tokens
        again, h = send(c, first)
        assert again.cache_read_input_tokens == total  # unchanged settings: the whole prefix is read
        full_reuse = int(h["x-ragcache-prefill-reused"])
        changed, h = send(c, second)
        assert changed.cache_read_input_tokens == system_tokens  # the system part only
        assert changed.cache_creation_input_tokens == total - system_tokens  # the messages written again
        assert 0 < int(h["x-ragcache-prefill-reused"]) < full_reuse  # the engine follows the same rule
        settled, _ = send(c, second)
        assert settled.cache_read_input_tokens == total  # the messages cached under the new settings


@pytest.mark.parametrize("a,b", [(OFF, DISABLED), (DISABLED, OFF), (ON_1024, {"type": "enabled", "budget_tokens": 1024})])
def test_same_thinking_settings_keep_the_messages(engine, a, b):
    with running_server(engine, min_tokens=64) as url:
        c = anthropic.Anthropic(base_url=url, api_key="local", max_retries=0)
        first, _ = send(c, a)
        total = first.input_tokens + first.cache_creation_input_tokens
        assert send(c, b)[0].cache_read_input_tokens == total


@pytest.mark.parametrize("first,second,words", [(OFF, ON_1024, "off -> enabled, budget 1024"),
                                                (ON_1024, OFF, "enabled, budget 1024 tokens -> off"),
                                                (ON_1024, ON_1500, "budget 1024 tokens -> enabled, budget 1500")])
def test_miss_diagnosis_names_the_thinking_change_not_eviction(engine, first, second, words):
    with running_server(engine, min_tokens=64) as url:
        c = anthropic.Anthropic(base_url=url, api_key="local", max_retries=0)
        caching = AnthropicCaching(MODEL, min_tokens=64, token_counter=engine.count_tokens, warn=False)
        for thinking in (first, first, second):
            req = caching.prepare(body(thinking))
            rec = caching.record(req, c.messages.create(**req.kwargs).usage)
    assert len(rec.diagnosis) == 1 and "thinking settings changed" in rec.diagnosis[0]
    assert words in rec.diagnosis[0] and "evicted" not in rec.diagnosis[0]


def test_a_real_eviction_is_still_called_one(engine):
    caching = AnthropicCaching(MODEL, min_tokens=64, token_counter=engine.count_tokens, warn=False)
    for _ in range(2):  # a new server: its cache is empty, the settings unchanged
        with running_server(engine, min_tokens=64) as url:
            c = anthropic.Anthropic(base_url=url, api_key="local", max_retries=0)
            req = caching.prepare(body(ON_1024))
            rec = caching.record(req, c.messages.create(**req.kwargs).usage)
    assert any("evicted" in d for d in rec.diagnosis) and not any("thinking" in d for d in rec.diagnosis)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert thinking_setting({"thinking": {"type": "disabled"}}) is None


@pytest.mark.parametrize("thinking,words", [({"type": "enabled", "budget_tokens": 512}, "greater than or equal to 1024"),
                                            ({"type": "enabled"}, "budget_tokens"),
                                            ({"type": "on"}, "expected tags"),
                                            ({"type": "enabled", "budget_tokens": 1600}, "max_tokens"),
                                            ("enabled", "expected tags")])
def test_bad_thinking_settings_are_refused_in_the_apis_words(engine, thinking, words):
    with running_server(engine) as url:
        c = anthropic.Anthropic(base_url=url, api_key="local", max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match=words):
            c.messages.create(**{**body(None), "thinking": thinking})
