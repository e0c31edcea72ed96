"""Markers only where the Anthropic API accepts them, and a caller's 1h TTL kept (issue 24, kind 8):
the layout middleware and ``AnthropicCaching.prepare`` on requests with programmatic tool calling
(tool calls made by code execution, whose blocks the API refuses ``cache_control`` on)."""

from __future__ import annotations

import pytest
from langchain.agents.middleware.types import ModelRequest
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langchain_ragcache.middleware import RagPromptLayoutMiddleware

from ragcache.providers.anthropic import AnthropicCaching
from ragcache.providers.anthropic.blocks import RequestError, carries_marker, code_execution_tool_ids, flatten_request

CALLER = {"type": "code_execution_20250825", "tool_id": "srvtoolu_1"}


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


def _code_exec_turns(n_calls: int = 2) -> list:
    """An agent history in which code execution called ``get_weather`` ``n_calls`` times."""
    calls = [{"type": "tool_use", "id": f"toolu_{i}", "name": "get_weather", "input": {"city": f"c{i}"},
              "caller": CALLER} for i in range(n_calls)]
    ai = AIMessage(content=[{"type": "text", "text": "Checking the weather."},
                            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "code_execution",
                             "input": {"code": "..."}}, *calls],
                   tool_calls=[{"id": c["id"], "name": "get_weather", "args": c["input"]} for c in calls])
    return [HumanMessage("Weather in two cities?"), ai,
            *[ToolMessage(f"sunny {i}", tool_call_id=f"toolu_{i}") for i in range(n_calls)]]


def _request(messages, *, system="You are a weather agent. " * 20, settings=None):
    model = ChatAnthropic(model="claude-sonnet-4-6", api_key="x")
    return ModelRequest(model=model, messages=messages, system_message=SystemMessage(system), tools=[get_weather],
                        model_settings=settings or {})


def _marked(msg) -> list[dict]:
    return [b for b in msg.content if isinstance(b, dict) and "cache_control" in b] if isinstance(msg.content, list) \
        else []


@pytest.mark.parametrize("n_calls", [1, 2, 3])
def test_middleware_never_marks_code_execution_tool_results(n_calls) -> None:
    laid, placed = RagPromptLayoutMiddleware().layout(_request(_code_exec_turns(n_calls)))
    for m in laid.messages:
        if isinstance(m, ToolMessage):
            assert not _marked(m), f"marker on a tool result called by code execution ({m.tool_call_id})"
        for b in _marked(m):
            assert b.get("type") == "text"
    # the breakpoint moved to the nearest earlier block that can carry it (the assistant's text)
    assert any(p.startswith("message[") for p in placed)


def test_middleware_still_marks_ordinary_tool_results() -> None:
    ai = AIMessage("", tool_calls=[{"id": "toolu_9", "name": "get_weather", "args": {"city": "Oslo"}}])
    msgs = [HumanMessage("Weather in Oslo?"), ai, ToolMessage("rain", tool_call_id="toolu_9")]
    laid, placed = RagPromptLayoutMiddleware().layout(_request(msgs))
    assert _marked(laid.messages[-1]) and f"message[{len(msgs) - 1}]" in placed


@pytest.mark.parametrize("where", ["system", "message", "settings"])
def test_callers_one_hour_marker_is_kept(where) -> None:
    hour = {"type": "ephemeral", "ttl": "1h"}
    msgs = [HumanMessage("first"), AIMessage("answer"), HumanMessage("second")]
    system: object = "You are a weather agent. " * 20
    settings = None
    if where == "system":
        system = [{"type": "text", "text": system, "cache_control": hour}]
    elif where == "message":
        msgs[1] = AIMessage(content=[{"type": "text", "text": "answer", "cache_control": hour}])
    else:
        settings = {"cache_control": hour}
    laid, placed = RagPromptLayoutMiddleware(ttl="5m").layout(_request(msgs, system=system, settings=settings))
    ttls = []
    if "tools" in placed:
        ttls.append(laid.tools[-1].extras["cache_control"]["ttl"])
    ttls += [b["cache_control"]["ttl"] for m in [laid.system_message, *laid.messages] for b in _marked(m)]
    assert "1h" in ttls, f"the caller's 1h marker became {ttls}"
    assert ttls == sorted(ttls, key=lambda t: t != "1h")  # 1h markers precede 5m ones (the API's rule)
    if where == "settings":
        assert set(ttls) == {"1h"}


def _body(n_calls: int, marker_on: str | None = None) -> dict:
    calls = [{"type": "tool_use", "id": f"toolu_{i}", "name": "get_weather", "input": {"city": f"c{i}"},
              "caller": CALLER} for i in range(n_calls)]
    results = [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": f"sunny {i}"} for i in range(n_calls)]
    if marker_on == "result":
        results[-1]["cache_control"] = {"type": "ephemeral"}
    if marker_on == "call":
        calls[-1]["cache_control"] = {"type": "ephemeral"}
    return {"model": "claude-sonnet-4-6", "max_tokens": 8, "system": "You are a weather agent. " * 40,
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": "Weather?"},
                         {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                                           {"type": "server_tool_use", "id": "srvtoolu_1",
                                                            "name": "code_execution", "input": {}}, *calls]},
                         {"role": "user", "content": results}]}


@pytest.mark.parametrize("n_calls", [1, 3])
@pytest.mark.parametrize("marker_on", [None, "result", "call"])
def test_prepare_never_leaves_a_marker_on_code_execution_blocks(n_calls, marker_on) -> None:
    body = _body(n_calls, marker_on)
    assert code_execution_tool_ids(body["messages"]) == {f"toolu_{i}" for i in range(n_calls)}
    if marker_on:
        with pytest.raises(RequestError, match="called by code execution cannot have cache_control"):
            flatten_request(body)  # what the API (and ragcache's local server) answers with a 400
    req = AnthropicCaching("claude-sonnet-4-6", min_tokens=16, warn=False).prepare(body)
    for m in req.kwargs["messages"]:
        for b in m["content"] if isinstance(m["content"], list) else []:
            if "cache_control" in b:
                assert carries_marker(b, code_execution_tool_ids(req.kwargs["messages"])), b
    flatten_request(req.kwargs)  # the prepared request is one the API accepts
    if marker_on:
        assert any("code-execution" in n for n in req.notes)
