"""RagPromptLayoutMiddleware(ttl="5m") raises a breakpoint's TTL to 1h where a caller's 1h marker
follows it, and now says so in ``response_metadata["ragcache"]["notes"]`` in prepare()'s words
(issue 32, section 3)."""

from __future__ import annotations

import pytest
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_ragcache.middleware import RagPromptLayoutMiddleware

from ragcache.providers.anthropic import AnthropicCaching

HOUR = {"type": "ephemeral", "ttl": "1h"}
SYSTEM = "You are a weather agent. " * 40
RAISED = "ttl raised to '1h' (a '1h' breakpoint may not follow a '5m' one)"


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return "sunny"


def _request(where: str | None):
    msgs = [HumanMessage("first question " * 20), AIMessage("an answer " * 20), HumanMessage("second")]
    system: object = SYSTEM
    settings = {}
    if where == "system":
        system = [{"type": "text", "text": SYSTEM, "cache_control": HOUR}]
    elif where == "message":
        msgs[1] = AIMessage(content=[{"type": "text", "text": "an answer " * 20, "cache_control": HOUR}])
    elif where == "settings":
        settings = {"cache_control": HOUR}
    return ModelRequest(model=ChatAnthropic(model="claude-sonnet-4-6", api_key="x"), messages=msgs,
                        system_message=SystemMessage(system), tools=[get_weather], model_settings=settings)


def _answer(_req):
    return ModelResponse(result=[AIMessage("ok", usage_metadata={"input_tokens": 900, "output_tokens": 2,
                                                                  "total_tokens": 902,
                                                                  "input_token_details": {"cache_read": 0,
                                                                                          "cache_creation": 800}})])


def _ttls(laid, placed) -> dict[str, str]:
    out = {}
    if "tools" in placed:
        out["tools"] = laid.tools[-1].extras["cache_control"].get("ttl", "5m")
    if "system" in placed:
        out["system"] = next(b["cache_control"]["ttl"] for b in laid.system_message.content if "cache_control" in b)
    for i, m in enumerate(laid.messages):
        for b in m.content if isinstance(m.content, list) else []:
            if isinstance(b, dict) and "cache_control" in b:
                out[f"message[{i}]"] = b["cache_control"]["ttl"]
    return out


@pytest.mark.parametrize("where", ["system", "message", "settings"])
def test_raised_ttls_are_reported(where) -> None:
    mw = RagPromptLayoutMiddleware(ttl="5m")
    req = _request(where)
    laid, placed = mw.layout(req)
    msg = mw.wrap_model_call(req, _answer).result[0]
    notes = msg.response_metadata["ragcache"]["notes"]
    raised = [p for p, t in _ttls(laid, placed).items() if t == "1h"]
    assert raised and notes == [f"{p}: {RAISED}" for p in placed if p in raised], (notes, _ttls(laid, placed))


@pytest.mark.parametrize("ttl", ["5m", "1h"])
def test_nothing_raised_nothing_reported(ttl) -> None:
    mw = RagPromptLayoutMiddleware(ttl=ttl)
    msg = mw.wrap_model_call(_request(None), _answer).result[0]
    assert msg.response_metadata["ragcache"]["notes"] == []


@pytest.mark.asyncio
async def test_async_path_reports_too() -> None:
    async def answer(req):
        return _answer(req)

    msg = (await RagPromptLayoutMiddleware(ttl="5m").awrap_model_call(_request("message"), answer)).result[0]
    assert any(n.endswith(RAISED) for n in msg.response_metadata["ragcache"]["notes"])


def test_same_words_as_prepare() -> None:
    body = {"model": "claude-sonnet-4-6", "max_tokens": 8, "system": SYSTEM,
            "messages": [{"role": "user", "content": "first question " * 20},
                         {"role": "assistant", "content": [{"type": "text", "text": "an answer " * 20,
                                                            "cache_control": HOUR}]},
                         {"role": "user", "content": "second"}]}
    req = AnthropicCaching("claude-sonnet-4-6", min_tokens=16, warn=False).prepare(body)
    assert any(n.endswith(RAISED) for n in req.notes), req.notes
