"""The automatic breakpoint takes a slot (issue 39, section 2): a request-level ``cache_control``
(Anthropic's automatic caching, put by the API on the last cacheable block) counts among the 4
breakpoints, beside the caller's own markers on tools, system and message blocks."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from ragcache.prompt.layout import PromptLayout
from ragcache.providers.anthropic.backend import AnthropicCaching
from ragcache.providers.anthropic.blocks import (RequestError, check_breakpoints, check_cache_control, flatten_request,
                                                 nearest_cacheable)
from ragcache.providers.anthropic.breakpoints import add_breakpoints, layout_request
from ragcache.providers.anthropic.usage import PromptCacheWarning

CHARS = len
AUTO = {"type": "ephemeral"}
TOOLS = [{"name": "lookup", "description": "Look a term up. " * 80, "input_schema": {"type": "object", "properties": {}}}]
HISTORY = [{"role": "user", "content": "earlier turn " + "h" * 1500}, {"role": "assistant", "content": "ok " * 30}]


def docs(n, size=120):
    return [{"id": f"d{i:02d}", "text": f"document {i} " + "x" * size} for i in range(n)]


def as_sent(kwargs):
    """The blocks as the API sees them: the request-level marker on the last cacheable block (what
    :mod:`ragcache.server.anthropic` does), then the API's limits checked."""
    blocks = flatten_request(kwargs)
    auto = check_cache_control(kwargs.get("cache_control"), "cache_control")
    if auto is not None:
        last = nearest_cacheable(blocks, len(blocks) - 1)
        blocks[last] = dataclasses.replace(blocks[last], cache_control=auto)
    check_breakpoints(blocks)
    return [b for b in blocks if b.cache_control is not None]


def test_ragcache_markers_plus_the_automatic_one_stay_within_four():
    lay = PromptLayout.build(question="Q?", system="S" * 2000, tools=TOOLS, documents=docs(25), history=HISTORY,
                             lint="off")
    plain = layout_request(lay, model="claude-sonnet-4-5", max_tokens=16, token_counter=CHARS)
    assert len(plain.placed) == 4  # the case of the report: four block markers...
    with pytest.raises(RequestError, match="Found 5"):
        as_sent({**plain.kwargs, "cache_control": AUTO})  # ...plus the automatic one were refused
    req = layout_request(lay, model="claude-sonnet-4-5", max_tokens=16, token_counter=CHARS,
                         extra={"cache_control": AUTO})
    assert len(req.placed) == 3 and len(as_sent(req.kwargs)) == 4
    # the ones that pay most are kept (tools, system, history by class rank); the documents' marker goes
    assert {p.role for p in plain.placed} - {p.role for p in req.placed} == {"last-stable"}
    assert any(s.reason == "budget" and "request-level cache_control" in s.detail for s in req.skipped)
    assert "automatic caching" in req.notes[0] and "3 block marker(s) kept" in req.notes[0]


def test_caller_markers_on_tools_system_and_blocks_count_with_the_automatic_one():
    tools = copy.deepcopy(TOOLS)
    tools[0]["cache_control"] = {"type": "ephemeral"}
    system = [{"type": "text", "text": "S" * 2000, "cache_control": {"type": "ephemeral"}}]
    content = [{"type": "text", "text": d["text"], "cache_control": {"type": "ephemeral"}} for d in docs(2)]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 16, "tools": tools, "system": system, "cache_control": AUTO,
            "messages": [{"role": "user", "content": [*content, {"type": "text", "text": "Q?"}]}]}
    with pytest.warns(PromptCacheWarning, match="request-level cache_control"):
        req = add_breakpoints(body, token_counter=CHARS)
    assert len(req.placed) == 3 and len(as_sent(req.kwargs)) == 4
    assert [d.where for d in req.dropped] == ["messages[0].content[0]"]  # the earlier of two document markers
    assert body["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}  # the caller's body untouched


def test_a_one_hour_automatic_marker_raises_the_ttl_of_every_marker_before_it():
    lay = PromptLayout.build(question="Q?", system="S" * 2000, documents=docs(3), lint="off")
    req = layout_request(lay, model="claude-sonnet-4-5", max_tokens=16, token_counter=CHARS,
                         extra={"cache_control": {"type": "ephemeral", "ttl": "1h"}})
    assert [p.ttl for p in req.placed] == ["1h", "1h"] and len(as_sent(req.kwargs)) == 3


def test_without_the_automatic_marker_four_are_placed_and_a_bad_one_is_refused():
    lay = PromptLayout.build(question="Q?", system="S" * 2000, tools=TOOLS, documents=docs(25), history=HISTORY,
                             lint="off")
    caching = AnthropicCaching("claude-sonnet-4-5", token_counter=CHARS, warn=False)
    assert len(caching.build(lay, max_tokens=16).placed) == 4
    assert len(caching.build(lay, max_tokens=16, extra={"cache_control": AUTO}).placed) == 3
    with pytest.raises(ValueError, match="ttl"):
        add_breakpoints({"model": "m", "cache_control": {"type": "ephemeral", "ttl": "2h"},
                         "messages": [{"role": "user", "content": "hi"}]})
