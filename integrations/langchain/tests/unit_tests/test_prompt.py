"""RagPrompt: stable-first layout, canonical document order, Anthropic breakpoints."""

from __future__ import annotations

import json

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.documents import Document
from langchain_core.load import dumps
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.prompt_values import ChatPromptValue
from langchain_core.runnables import RunnableLambda
from langchain_ragcache import ChatRagCache, RagPrompt
from langchain_ragcache._keys import to_dicts
from langchain_ragcache._messages import engine_messages, to_layout

DOCS = [
    Document(page_content=f"Document number {i}: " + "facts about the product line. " * 40,
             metadata={"source": f"doc{i}.md", "score": 0.9 - i / 10})
    for i in range(5)
]
SYSTEM = "You are a support assistant. Answer from the documents."


def test_layout_is_stable_first() -> None:
    value = RagPrompt(system=SYSTEM).invoke(
        {"question": "What is in doc 3?", "context": DOCS, "volatile": "User plan: pro",
         "history": [("human", "hi"), ("ai", "hello")]})
    assert isinstance(value, ChatPromptValue)
    msgs = value.to_messages()
    assert [m.type for m in msgs] == ["system", "human", "ai", "human"]
    assert msgs[0].content == SYSTEM
    blocks = msgs[-1].content
    kinds = [b["kind"] for b in msgs[-1].additional_kwargs["ragcache"]["blocks"]]
    assert kinds == ["document"] * 5 + ["volatile", "question"]
    assert blocks[-1] == {"type": "text", "text": "What is in doc 3?"}
    assert blocks[-2]["text"] == "User plan: pro"
    assert all(b.keys() == {"type", "text"} for b in blocks)  # plain blocks for non-Anthropic models
    assert all(b["text"].startswith("<document") for b in blocks[:5])
    assert "score" not in blocks[0]["text"]  # volatile retrieval scores are not rendered


def test_reordered_documents_give_identical_request_bytes(tiny_engine_plain) -> None:
    prompt = RagPrompt(system=SYSTEM)
    a = prompt.invoke({"question": "q?", "context": DOCS})
    b = prompt.invoke({"question": "q?", "context": [DOCS[i] for i in (3, 0, 4, 2, 1)]})
    assert dumps(a.to_messages()) == dumps(b.to_messages())
    # ... and the token ids the local engine prefills are identical too
    ids = [tiny_engine_plain.build_prompt(to_layout(v.to_messages())).input_ids for v in (a, b)]
    assert ids[0] == ids[1]


def test_reordered_documents_identical_anthropic_payload() -> None:
    llm = ChatAnthropic(model="claude-sonnet-4-6", api_key="test", base_url="http://127.0.0.1:9")
    prompt = RagPrompt.for_model(llm, system=SYSTEM)
    assert prompt.provider == "anthropic" and prompt.anthropic_model == "claude-sonnet-4-6"
    payloads = []
    for order in ((0, 1, 2, 3, 4), (4, 2, 0, 3, 1)):
        value = prompt.invoke({"question": "q?", "context": [DOCS[i] for i in order]})
        payloads.append(json.dumps(llm._get_request_payload(value), sort_keys=True).encode())
    assert payloads[0] == payloads[1]
    body = json.loads(payloads[0])
    assert "ragcache" not in json.dumps(body)  # the side channel is never sent
    marked = [b for b in body["messages"][-1]["content"] if "cache_control" in b]
    assert len(marked) >= 1
    # the last document block carries the breakpoint; the question never does
    assert "cache_control" in body["messages"][-1]["content"][4]
    assert "cache_control" not in body["messages"][-1]["content"][-1]


def test_anthropic_breakpoints_follow_the_rules() -> None:
    many = [Document(page_content=f"doc {i} " + "lorem ipsum dolor " * 30) for i in range(45)]
    value = RagPrompt(system=SYSTEM * 30, provider="anthropic", anthropic_model="claude-sonnet-4-6").invoke(
        {"question": "q?", "context": many})
    msgs = value.to_messages()
    system_marks = [b for b in msgs[0].content if "cache_control" in b]
    user_blocks = msgs[-1].content
    user_marks = [i for i, b in enumerate(user_blocks) if "cache_control" in b]
    assert len(system_marks) + len(user_marks) <= 4
    assert user_marks[-1] == 44  # last stable block
    gaps = [b - a for a, b in zip([-1, *user_marks], user_marks)]
    assert all(g <= 20 for g in gaps[1:])  # 20-block lookback inside the long document run


def test_below_minimum_places_no_breakpoint() -> None:
    value = RagPrompt(system="Short.", provider="anthropic", anthropic_model="claude-sonnet-4-6").invoke(
        {"question": "q?", "context": ["tiny doc"]})
    msgs = value.to_messages()
    assert not any("cache_control" in b for m in msgs if isinstance(m.content, list) for b in m.content)
    assert "below the minimum" in msgs[-1].additional_kwargs["ragcache"]["skipped_breakpoints"][0]


def test_same_chain_works_with_either_model(tiny_engine_plain) -> None:
    inputs = {"question": "What does document 2 say?", "context": DOCS[:3]}
    local = RagPrompt.for_model(ChatRagCache(engine=tiny_engine_plain)) | ChatRagCache(engine=tiny_engine_plain,
                                                                                     max_tokens=2)
    assert local.invoke(inputs).response_metadata["model_provider"] == "ragcache"
    # The Anthropic variant of the same chain produces a valid request without network access.
    llm = ChatAnthropic(model="claude-sonnet-4-6", api_key="test")
    chain = RagPrompt.for_model(llm, system=SYSTEM) | RunnableLambda(llm._get_request_payload)
    payload = chain.invoke(inputs)
    assert payload["model"] == "claude-sonnet-4-6"
    assert payload["messages"][-1]["content"][-1]["text"] == inputs["question"]


def test_chat_rag_cache_reads_block_kinds(tiny_engine_plain) -> None:
    value = RagPrompt(system=SYSTEM).invoke({"question": "q?", "context": DOCS[:2], "volatile": "v"})
    layout = to_layout(value.to_messages())
    kinds = [b.kind for b in layout.blocks()]
    assert kinds == ["system", "document", "document", "volatile", "question"]
    want = RagPrompt(system=SYSTEM).layout({"question": "q?", "context": DOCS[:2], "volatile": "v"}).documents
    assert [(d.id, d.content_hash, d.render_hash) for d in layout.documents] == [
        (d.id, d.content_hash, d.render_hash) for d in want]
    prompt = tiny_engine_plain.build_prompt(layout)
    assert len(prompt.document_spans()) == 2


@pytest.mark.parametrize(("bad", "exc"), [({"context": DOCS}, ValueError), ({"question": "", "context": DOCS}, ValueError),
                                          ("just a string", TypeError), ({"question": 5, "context": DOCS}, TypeError)])
def test_bad_input_is_a_clear_error(bad, exc) -> None:
    with pytest.raises(exc, match="question"):
        RagPrompt().invoke(bad)


def test_inputs_are_not_mutated() -> None:
    docs = [Document(page_content="a", metadata={"source": "x"}), Document(page_content="b")]
    before = [d.model_dump() for d in docs]
    RagPrompt(provider="anthropic", min_tokens=0).invoke({"question": "q", "context": docs})
    assert [d.model_dump() for d in docs] == before


def test_messages_without_rag_prompt() -> None:
    msgs = engine_messages(to_dicts([SystemMessage("s1"), SystemMessage("s2"),
                                     HumanMessage([{"type": "text", "text": "d", "cache_control": {"type": "ephemeral"}},
                                                   {"type": "text", "text": "q"}])]))
    assert msgs[0] == {"role": "system", "content": "s1\n\ns2"}
    assert msgs[1]["content"] == ["d", "q"]  # kinds left to PromptLayout.from_messages
    layout = to_layout(msgs_in := [SystemMessage("s1"), HumanMessage(["d", "q"])])
    assert [(b.kind, b.text) for b in layout.blocks()] == [("system", "s1"), ("document", "<document>\nd\n</document>"),
                                                          ("question", "q")]
    assert layout == to_layout(msgs_in)
    with pytest.raises(ValueError, match="text only"):
        to_layout([HumanMessage([{"type": "image", "url": "http://x"}])])
