"""Prompted tool calling: the tool text in the prompt, parsing calls back, tool turns in the history."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_ragcache import ChatRagCache
from langchain_ragcache._keys import to_dicts
from langchain_ragcache._messages import engine_messages
from langchain_ragcache.tools import normalize_tool_choice, parse_tool_calls, tools_system_text


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_parse_tool_calls() -> None:
    rest, calls, bad = parse_tool_calls('Sure. <tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>',
                                        ["add"])
    assert rest == "Sure." and bad == []
    assert [(c["name"], c["args"]) for c in calls] == [("add", {"a": 1, "b": 2})]
    _, calls, bad = parse_tool_calls('[{"name": "add", "arguments": "{\\"a\\": 3, \\"b\\": 4}"}]', ["add"])
    assert calls[0]["args"] == {"a": 3, "b": 4}
    _, calls, bad = parse_tool_calls('<tool_call>{"name": "mul", "arguments": {}}</tool_call>', ["add"])
    assert calls == [] and bad[0]["name"] == "mul"
    assert parse_tool_calls("The answer is 3.", ["add"]) == ("The answer is 3.", [], [])


def test_tool_choice_and_prompt_text() -> None:
    tools = [convert_to_openai_tool(add)]
    assert normalize_tool_choice("required", ["add"]) == "any"
    assert normalize_tool_choice({"type": "function", "function": {"name": "add"}}, ["add"]) == "add"
    with pytest.raises(ValueError, match="bound tools"):
        normalize_tool_choice("mul", ["add"])
    text = tools_system_text(tools, "add")
    assert "<tools>" in text and '"name": "add"' in text and "must call the function add" in text
    assert tools_system_text(tools, "none") == ""


def test_bound_tools_reach_the_prompt_and_calls_are_parsed(tiny_engine_plain, monkeypatch) -> None:
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=2)
    with pytest.raises(ValueError, match="bound tools"):
        llm.bind_tools([add], tool_choice="mul")
    seen = {}
    real = tiny_engine_plain.generate

    def fake_generate(prompt, **kw):  # the engine answers as a tool-following model would
        seen["text"] = prompt.prompt.text  # the backend hands the engine an EngineRequest
        gen = real(prompt, **kw)
        gen.text = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 5}}</tool_call>'
        return gen

    monkeypatch.setattr(tiny_engine_plain, "generate", fake_generate)
    msg = llm.bind_tools([add], tool_choice="any").invoke("What is 2 + 5?")
    assert "<tools>" in seen["text"] and "You must call one of these functions." in seen["text"]
    assert msg.tool_calls[0]["name"] == "add" and msg.tool_calls[0]["args"] == {"a": 2, "b": 5}
    assert msg.content == ""
    chunks = list(llm.bind_tools([add]).stream("What is 2 + 5?"))
    full = chunks[0]
    for c in chunks[1:]:
        full = full + c
    assert full.tool_calls[0]["args"] == {"a": 2, "b": 5}
    out = llm.with_structured_output(add.args_schema, method="json_mode").invoke("2 + 5")
    assert out.a == 2 and out.b == 5


def test_tool_turns_in_history() -> None:
    msgs = engine_messages(to_dicts([
        HumanMessage("2+5?"),
        AIMessage("", tool_calls=[{"name": "add", "args": {"a": 2, "b": 5}, "id": "c1"}]),
        ToolMessage("7", tool_call_id="c1", name="add"),
    ]))
    call = '<tool_call>{"arguments": {"a": 2, "b": 5}, "name": "add"}</tool_call>'
    assert msgs[1] == {"role": "assistant", "content": call}
    assert msgs[2] == {"role": "user", "content": '<tool_response name="add">7</tool_response>'}
