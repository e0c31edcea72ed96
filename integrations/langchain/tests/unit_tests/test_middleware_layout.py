"""RagPromptLayoutMiddleware against ragcache's local Anthropic-compatible server (issue 16, item 1),
and the agent example (examples/langchain_agent.py) executed on the tiny random model.

The server applies Anthropic's prompt-caching rules (breakpoints, 20-block lookback, minimum
cacheable length, at most 4 breakpoints: a fifth is a 400 error), so the read shares below are
what the API would report for the same requests.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from langchain.agents.middleware.types import ModelRequest
from langchain_anthropic import ChatAnthropic
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_ragcache.chat_models import TINY_RANDOM_MODEL
from langchain_ragcache.middleware import MAX_BREAKPOINTS, RagPromptLayoutMiddleware, canonical_documents

from ragcache import LocalEngine
from ragcache.backend import CacheUsage
from ragcache.testing import tiny_llama

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


def _example():
    spec = importlib.util.spec_from_file_location("langchain_agent", EXAMPLES / "langchain_agent.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["langchain_agent"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def ex():
    return _example()


@pytest.fixture(scope="module")
def long_engine():
    """The tiny random model with room for a 10-turn session (2,500 tokens)."""
    return LocalEngine(tiny_llama(max_position_embeddings=8192))


@pytest.mark.parametrize("current_time", [True, False])
def test_ten_turn_session_reads_at_least_85_percent(ex, long_engine, current_time) -> None:
    rows = ex.run_session(layout="ragcache", current_time=current_time, engine=long_engine, quiet=True)
    assert len(rows) == 10
    assert ex.read_share(rows) >= 0.85
    assert all(len(r["breakpoints"]) <= MAX_BREAKPOINTS for r in rows)
    assert rows[0]["cache_read"] == 0 and rows[0]["cache_creation"] > 0  # the first request writes ...
    assert all(r["cache_read"] > 0 for r in rows[1:])  # ... every later one reads


def test_compared_with_langchain_anthropic_middleware(ex, long_engine) -> None:
    ours = ex.read_share(ex.run_session(layout="ragcache", current_time=True, engine=long_engine, quiet=True))
    theirs = ex.read_share(ex.run_session(layout="langchain-anthropic", current_time=True, engine=long_engine,
                                          quiet=True))
    none = ex.read_share(ex.run_session(layout="none", current_time=True, engine=long_engine, quiet=True))
    # the time in the system prompt changes the prefix of every request for a marker-only layout
    assert none == 0.0 and theirs < 0.1 < 0.85 <= ours


def test_usage_read_back(ex, long_engine) -> None:
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from ragcache.server.app import running_server

    with running_server(long_engine, min_tokens=256) as url:
        llm = ChatAnthropic(model="claude-sonnet-4-6", base_url=url, api_key="local", max_tokens=4, max_retries=0)
        agent = create_agent(llm, tools=[ex.search_policies], system_prompt=ex.SYSTEM,
                             middleware=[RagPromptLayoutMiddleware()], checkpointer=InMemorySaver())
        thread = {"configurable": {"thread_id": "t"}}
        out = [agent.invoke({"messages": [ex.turn_message(i)]}, config=thread)["messages"][-1] for i in range(2)]
    for msg, layer in zip(out, ("provider", "provider-cache"), strict=True):
        rc = msg.response_metadata["ragcache"]
        usage = CacheUsage(**rc["usage"])
        assert rc["layer"] == layer
        assert usage.reused + usage.computed + usage.recomputed == usage.prompt_tokens == msg.usage_metadata["input_tokens"]
        details = msg.usage_metadata["input_token_details"]
        assert (details["cache_read"], details["cache_creation"]) == (usage.cache_read, usage.cache_write)
    assert out[0].usage_metadata["input_token_details"]["cache_creation"] > 0
    assert out[1].usage_metadata["input_token_details"]["cache_read"] > 0


def _request(messages, *, system="You are the shop's agent. Today is 2026-11-30.", settings=None, tools=()):
    model = ChatAnthropic(model="claude-sonnet-4-6", api_key="unused", base_url="http://127.0.0.1:9")
    return ModelRequest(model=model, messages=messages, system_message=SystemMessage(system),
                        tools=list(tools), model_settings=settings or {})


def _markers(request) -> int:
    n = sum(1 for m in [request.system_message, *request.messages] if isinstance(m.content, list)
            for b in m.content if isinstance(b, dict) and "cache_control" in b)
    n += sum(1 for t in request.tools if (getattr(t, "extras", None) or {}).get("cache_control"))
    return n + ("cache_control" in request.model_settings)


@pytest.mark.parametrize("n_caller", [0, 3, 6])
def test_never_more_than_four_breakpoints(ex, n_caller) -> None:
    cc = {"type": "ephemeral"}
    msgs = []
    for i in range(6):
        mark = i < n_caller
        msgs.append(HumanMessage([{"type": "text", "text": f"question {i}", **({"cache_control": cc} if mark else {})}]))
        msgs.append(AIMessage([{"type": "text", "text": f"answer {i}", **({"cache_control": cc} if mark else {})}]))
    msgs.append(HumanMessage("last question"))
    req = _request(msgs, settings={"cache_control": cc}, tools=[ex.search_policies, ex.order_status])
    laid, placed = RagPromptLayoutMiddleware().layout(req)
    assert _markers(laid) == len(placed) <= MAX_BREAKPOINTS
    assert placed[:2] == ["tools", "system"] and placed[-1] == f"message[{len(msgs) - 1}]"


def test_empty_blocks_are_never_marked() -> None:
    msgs = [HumanMessage("q1"), AIMessage(""), HumanMessage([{"type": "text", "text": "q2"}, {"type": "text", "text": ""}])]
    laid, placed = RagPromptLayoutMiddleware().layout(_request(msgs))
    for m in laid.messages:
        for b in m.content if isinstance(m.content, list) else []:
            if isinstance(b, dict) and "cache_control" in b:
                assert b["text"].strip()
    assert "message[1]" not in placed  # the empty assistant turn: its neighbour carries the marker


def test_volatile_system_text_moves_after_the_last_breakpoint() -> None:
    for day in ("2026-11-29", "2026-11-30"):
        laid, _ = RagPromptLayoutMiddleware().layout(
            _request([HumanMessage("When do orders ship?")], system=f"You are the shop's agent. Today is {day}."))
        assert laid.system_message.content[0]["text"] == "You are the shop's agent."
        assert laid.messages[-1].content == [{"type": "text", "text": f"Today is {day}."}]
        assert "cache_control" in laid.messages[-2].content[-1]


def test_other_models_get_the_layout_without_markers(ex) -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    req = ModelRequest(model=FakeListChatModel(responses=["x"]), messages=[HumanMessage("q")],
                       system_message=SystemMessage("Agent. Today is 2026-11-30."), tools=[ex.search_policies])
    laid, placed = RagPromptLayoutMiddleware().layout(req)
    assert placed == [] and _markers(laid) == 0 and laid.system_message.content == "Agent."


def test_retrieved_documents_are_rendered_canonically() -> None:
    docs = [Document(id="b", page_content="Shipping takes a week.", metadata={"source": "s.md"}),
            Document(id="a", page_content="Refunds take 14 days.", metadata={"source": "r.md"})]
    one = ToolMessage("raw", tool_call_id="1", artifact=docs)
    two = ToolMessage("raw, other order", tool_call_id="1", artifact=docs[::-1] + docs[:1])
    a, b = canonical_documents(one), canonical_documents(two)
    assert a.content == b.content and 'id="' not in a.content  # ids are metadata: never rendered
    from ragcache.hashing import content_hash

    first, second = sorted(d.page_content for d in docs)[:: 1 if content_hash("Refunds take 14 days.") <
                                                          content_hash("Shipping takes a week.") else -1]
    assert a.content.index(first) < a.content.index(second)  # by content, not by id
    plain = ToolMessage("no documents", tool_call_id="2")
    assert canonical_documents(plain) is plain


def test_cached_agent_example(ex) -> None:
    rows = ex.run_cached_agent(model=TINY_RANDOM_MODEL, max_tokens=4, quiet=True)
    assert [r["step"] for r in rows] == ["ask", "reworded", "negated"]
    assert rows[0]["layer"] != "semantic" and rows[0]["model_calls"] >= 1
    assert rows[1]["layer"] == "semantic" and rows[1]["model_calls"] == 0 and rows[1]["answer"] == rows[0]["answer"]
    assert rows[2]["layer"] != "semantic" and rows[2]["model_calls"] >= 1
    assert len({r["id"] for r in rows}) == 3
