"""No cache_control marker on a block type the Anthropic API refuses one on (issue 32, section 3):
``AnthropicCaching.prepare`` (the proxy's path) marked a ``server_tool_use`` block. Every path
(prepare, add_breakpoints, a caller's own marker, the layout middleware) keeps markers on the types
the prompt-caching guide lists as cacheable, and the local server refuses the rest as the API does."""

import copy

import pytest

from ragcache.providers.anthropic import AnthropicCaching, add_breakpoints
from ragcache.providers.anthropic.blocks import (
    MARKER_TYPES,
    NOT_CACHEABLE_TYPES,
    RequestError,
    carries_marker,
    flatten_request,
)

SYSTEM = "You are a research agent. " * 60
REFUSED = {
    "server_tool_use": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
    "web_search_tool_result": {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                               "content": [{"type": "web_search_result", "url": "https://e.com", "title": "E",
                                            "encrypted_content": "abc"}]},
    "web_fetch_tool_result": {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_2",
                              "content": {"type": "web_fetch_result", "url": "https://e.com",
                                          "content": {"type": "document", "source": {"type": "text", "media_type":
                                                      "text/plain", "data": "page"}}}},
    "code_execution_tool_result": {"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_3",
                                   "content": {"type": "code_execution_result", "stdout": "4", "stderr": "",
                                               "return_code": 0, "content": []}},
    "thinking": {"type": "thinking", "thinking": "Let me search.", "signature": "sig"},
    "redacted_thinking": {"type": "redacted_thinking", "data": "opaque"},
    "mcp_tool_use": {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "lookup", "server_name": "s", "input": {}},
}


def _body(last_block: dict, *, marker: bool = False) -> dict:
    block = {**copy.deepcopy(last_block), **({"cache_control": {"type": "ephemeral"}} if marker else {})}
    return {"model": "claude-sonnet-4-6", "max_tokens": 8, "system": SYSTEM,
            "messages": [{"role": "user", "content": "Find the backup policy. " * 40},
                         {"role": "assistant", "content": [{"type": "text", "text": "Searching the web."}, block]},
                         {"role": "user", "content": "And the retention?"}]}


def _marked(kwargs: dict) -> list[dict]:
    return [b for m in kwargs["messages"] if isinstance(m["content"], list) for b in m["content"]
            if isinstance(b, dict) and "cache_control" in b]


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_prepare_never_marks_a_refused_block(kind):
    req = AnthropicCaching("claude-sonnet-4-6", min_tokens=16, warn=False).prepare(_body(REFUSED[kind]))
    assert _marked(req.kwargs), "the history breakpoint is placed somewhere"
    assert all(b["type"] in MARKER_TYPES for b in _marked(req.kwargs)), _marked(req.kwargs)
    assert not any(b["type"] == kind for b in _marked(req.kwargs))
    flatten_request(req.kwargs)  # a request the API (and the local server) accepts


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_a_callers_marker_on_a_refused_block_is_moved(kind):
    body = _body(REFUSED[kind], marker=True)
    with pytest.raises(RequestError, match=f"cannot be set on a {kind} block"):
        flatten_request(body)  # what the API answers, and so the local server
    req = add_breakpoints(body, min_tokens=16, warn=False)
    assert not any(b["type"] == kind for b in _marked(req.kwargs))
    assert any(f"{kind} block" in n and "moved to" in n for n in req.notes), req.notes
    flatten_request(req.kwargs)


@pytest.mark.parametrize("block", [{"type": "text", "text": ""}, {"type": "text", "text": "  \n"},
                                   {"type": "some_future_block", "x": 1}, *REFUSED.values()])
def test_carries_marker_refuses(block):
    assert not carries_marker(block)


@pytest.mark.parametrize("block", [{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "t", "name": "f",
                                                                    "input": {}},
                                   {"type": "tool_result", "tool_use_id": "t", "content": "ok"},
                                   {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                "data": "iVBORw0KGgo="}},
                                   {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                                                   "data": "doc"}}])
def test_carries_marker_accepts(block):
    assert carries_marker(block)


def test_the_two_lists_do_not_overlap():
    assert not MARKER_TYPES & NOT_CACHEABLE_TYPES


def test_a_server_tool_block_last_moves_the_marker_to_the_text_before_it():
    body = _body(REFUSED["server_tool_use"])
    body["messages"][-1] = {"role": "user", "content": [REFUSED["web_search_tool_result"] | {}]}
    body["messages"].append({"role": "user", "content": "Summarise."})
    req = add_breakpoints(body, min_tokens=16, warn=False)
    assert all(b["type"] in MARKER_TYPES for b in _marked(req.kwargs))
    flatten_request(req.kwargs)


def test_middleware_never_marks_a_refused_block():
    pytest.importorskip("langchain.agents")
    from langchain.agents.middleware.types import ModelRequest
    from langchain_anthropic import ChatAnthropic
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from langchain_ragcache.middleware import RagPromptLayoutMiddleware

    for block in REFUSED.values():
        msgs = [HumanMessage("Find the backup policy. " * 40),
                AIMessage(content=[{"type": "text", "text": "Searching."}, copy.deepcopy(block)]),
                HumanMessage("And the retention?")]
        req = ModelRequest(model=ChatAnthropic(model="claude-sonnet-4-6", api_key="x"), messages=msgs,
                           system_message=SystemMessage(SYSTEM), tools=[], model_settings={})
        laid, _ = RagPromptLayoutMiddleware().layout(req)
        for m in laid.messages:
            for b in m.content if isinstance(m.content, list) else []:
                if isinstance(b, dict) and "cache_control" in b:
                    assert b.get("type") in MARKER_TYPES, (block["type"], b)
