"""ChatRagCache reads LangChain messages once (issue 49 item 5): ``_keys.to_dicts`` is the one mapping, read by
the keyer and by the engine (``_messages.engine_messages`` over its dicts), so a difference the engine reads is a
difference the key holds, and what the engine reads alike is keyed alike. Before, two mappers disagreed: a
``ChatMessage``'s role and the blank line the engine put between a system message's text blocks reached the
engine but not the key (two prompts keyed as one), and message chunks were keyed apart from the messages they add
up to."""

from __future__ import annotations

import langchain_ragcache._keys as keys
import langchain_ragcache._messages as messages_module
import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    HumanMessage,
    HumanMessageChunk,
    SystemMessage,
    ToolMessage,
)
from langchain_ragcache._keys import key_messages
from langchain_ragcache._messages import to_layout

Q = HumanMessage("How long do refunds take?")

PAIRS = {  # name: (one message list, another)
    "system blocks vs joined text": ([SystemMessage(["Be brief.", "Cite sources."]), Q],
                                     [SystemMessage("Be brief.Cite sources."), Q]),
    "chat roles": ([HumanMessage("hi"), ChatMessage(role="assistant", content="Hello."), Q],
                   [HumanMessage("hi"), ChatMessage(role="user", content="Hello."), Q]),
    "chat assistant vs ai": ([HumanMessage("hi"), ChatMessage(role="assistant", content="Hello."), Q],
                             [HumanMessage("hi"), AIMessage("Hello."), Q]),
    "ai chunk vs ai": ([HumanMessage("hi"), AIMessageChunk(content="Hello."), Q],
                       [HumanMessage("hi"), AIMessage("Hello."), Q]),
    "human chunk vs human": ([HumanMessageChunk(content="How long do refunds take?")], [Q]),
    "message ids": ([SystemMessage("s", id="1"), HumanMessage("How long do refunds take?", id="2")],
                    [SystemMessage("s"), Q]),
    "tool status": ([HumanMessage("2+5?"), AIMessage("", tool_calls=[{"name": "add", "args": {}, "id": "c"}]),
                     ToolMessage("7", tool_call_id="c", name="add", status="error"), Q],
                    [HumanMessage("2+5?"), AIMessage("", tool_calls=[{"name": "add", "args": {}, "id": "c"}]),
                     ToolMessage("7", tool_call_id="c", name="add"), Q]),
    "tool call args": ([HumanMessage("2+5?"), AIMessage("", tool_calls=[{"name": "add", "args": {"a": 2}, "id": "c"}]),
                        Q],
                       [HumanMessage("2+5?"), AIMessage("", tool_calls=[{"name": "add", "args": {"a": 3}, "id": "c"}]),
                        Q]),
    "tool call ids": ([HumanMessage("2+5?"), AIMessage("", tool_calls=[{"name": "add", "args": {}, "id": "c1"}]), Q],
                      [HumanMessage("2+5?"), AIMessage("", tool_calls=[{"name": "add", "args": {}, "id": "c2"}]), Q]),
}


def _key(msgs) -> tuple:
    req = key_messages(msgs).request(model="local:test")
    return req.question, req.partition.digest


KEYED_ALIKE = {"ai chunk vs ai", "human chunk vs human", "message ids", "system blocks vs joined text",
               "tool call ids"}
"""Pairs the engine reads alike that are keyed alike too (a chunk is the message it adds up to; ids are not
read; a system message's text blocks are its text, ``m.text``). A ``ChatMessage`` keeps its type in the key (other chat models may send it otherwise): keyed apart,
a miss, never a wrong answer."""


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_the_key_tells_apart_what_the_engine_tells_apart(tiny_engine_plain, name):
    one, other = PAIRS[name]
    same_prompt = tiny_engine_plain.build_prompt(to_layout(one)).input_ids == \
        tiny_engine_plain.build_prompt(to_layout(other)).input_ids
    same_key = _key(one) == _key(other)
    assert same_prompt or not same_key  # one key, one prompt: never a stored answer to another prompt
    assert same_key == (name in KEYED_ALIKE)


def test_the_pairs_hold_both_outcomes(tiny_engine_plain):
    """The cases are not all alike: some prompts differ, some are the same."""
    same = {tiny_engine_plain.build_prompt(to_layout(a)).input_ids == tiny_engine_plain.build_prompt(to_layout(b)).input_ids
            for a, b in PAIRS.values()}
    assert same == {True, False}


def test_the_key_and_the_prompt_of_a_stream_read_one_mapping(tiny_engine_plain, embedder, monkeypatch):
    from langchain_ragcache import ChatRagCache, RagCacheSemanticCache

    read = []

    def counted(msgs):
        read.append(list(msgs))
        return mapping(msgs)

    mapping = keys.to_dicts
    monkeypatch.setattr(keys, "to_dicts", counted)
    monkeypatch.setattr(messages_module, "to_dicts", counted)
    cache = RagCacheSemanticCache(path=None, embedder=embedder)
    msgs = [SystemMessage("Be brief."), Q]
    list(ChatRagCache(engine=tiny_engine_plain, max_tokens=2, cache=cache).stream(msgs))
    assert read == [msgs, msgs]  # the key's reading, then the engine's
    assert not hasattr(messages_module, "to_engine_messages")  # no second mapper
