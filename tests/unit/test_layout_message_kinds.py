"""The prompt layout's blocks and the kinds of unmarked chat text (issue 23 item 2): the blocks are the prompt in order,
and one rule (``PromptLayout.from_messages``) gives the same kinds through every adapter."""

from __future__ import annotations

import pytest
from pipeline_doubles import DOCS

from ragcache import PromptLayout


def test_blocks_are_the_prompt_in_order():
    lay = PromptLayout.build(question="Q?", system="S.", documents=DOCS[:2], volatile="User: ann",
                             history=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    kinds = [(b.kind, b.role) for b in lay.blocks()]
    assert kinds == [("system", "system"), ("history", "user"), ("history", "assistant"), ("document", "user"),
                     ("document", "user"), ("volatile", "user"), ("question", "user")]
    # ids are metadata (kept, not rendered); the canonical order is by content, not by id
    from ragcache.prompt.segments import as_document, canonical_documents
    assert [b.doc_id for b in lay.blocks() if b.kind == "document"] == [
        d.id for d in canonical_documents([as_document(d) for d in DOCS[:2]])]
    final = lay.to_messages()[-1]["content"]
    assert [b["ragcache_kind"] for b in final] == ["document", "document", "volatile", "question"]


KIND_CASES = {
    "question only": ("S.", [], ["How long do refunds take?"]),
    "documents then question": ("S.", [], ["Refunds take 30 days.", "Orders ship on weekdays.", "How long?"]),
    "history, then documents and question": (None, [("user", "hi"), ("assistant", "hello")],
                                             ["Refunds take 30 days.", "How long?"]),
    "a rendered document keeps its attributes": ("S.", [], ['<document id="refunds">\nRefunds take 30 days.\n</document>',
                                                     "How long?"]),
}


def _via_every_adapter(system, history, final):
    """The layout of one chat request mapped by each adapter (LangChain, LlamaIndex, the OpenAI and
    Anthropic servers, the proxy) and by PromptLayout.from_messages itself."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from langchain_ragcache._messages import to_layout as lc_layout
    from llama_index.core.llms import ChatMessage, MessageRole, TextBlock
    from llama_index.llms.ragcache import to_layout as li_layout

    from ragcache.server.anthropic import _engine_messages
    from ragcache.server.openai import engine_messages
    from ragcache.server.proxy import body_request

    plain = ([{"role": "system", "content": system}] if system else []) + [
        {"role": r, "content": t} for r, t in history] + [{"role": "user", "content": list(final)}]
    lc = ([SystemMessage(system)] if system else []) + [
        HumanMessage(t) if r == "user" else AIMessage(t) for r, t in history] + [HumanMessage(list(final))]
    role = {"system": MessageRole.SYSTEM, "user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}
    li = [ChatMessage(role=role[m["role"]], blocks=[TextBlock(text=t) for t in (
        m["content"] if isinstance(m["content"], list) else [m["content"]])]) for m in plain]
    openai_body = [{"role": m["role"], "content": m["content"] if isinstance(m["content"], str)
                    else [{"type": "text", "text": t} for t in m["content"]]} for m in plain]
    anthropic_body = {"model": "m", "max_tokens": 8, "temperature": 0, **({"system": system} if system else {}),
                      "messages": [m for m in openai_body if m["role"] != "system"]}
    return {
        "from_messages": PromptLayout.from_messages(plain),
        "langchain": lc_layout(lc),
        "llamaindex": li_layout(li),
        "openai server": PromptLayout.from_messages(engine_messages(openai_body)),
        "anthropic server": PromptLayout.from_messages(_engine_messages(anthropic_body)),
        "proxy": body_request(anthropic_body).layout,
    }


@pytest.mark.parametrize("case", list(KIND_CASES))
def test_same_messages_same_kinds_through_every_adapter(case):
    layouts = _via_every_adapter(*KIND_CASES[case])
    want = [(b.kind, b.role, b.text, b.doc_id) for b in layouts["from_messages"].blocks()]
    for name, layout in layouts.items():
        assert [(b.kind, b.role, b.text, b.doc_id) for b in layout.blocks()] == want, name
    kinds = [k for k, *_ in want]
    assert kinds[-1] == "question" and kinds.count("document") == len(KIND_CASES[case][2]) - 1


def test_from_messages_rule_and_errors():
    from ragcache.prompt.layout import CACHE_POINT, Segment

    lay = PromptLayout.from_messages([{"role": "user", "content": ["d1", CACHE_POINT, "as of 09:14", "q?"]}])
    assert [b.kind for b in lay.blocks()] == ["document", "volatile", "question"]
    marked = PromptLayout.from_messages([{"role": "user", "content": [Segment("question", "q?"), "d"]}])
    assert [b.kind for b in marked.blocks()] == ["document", "question"]  # a marked question: the rest are documents
    mid = PromptLayout.from_messages([{"role": "user", "content": "a"}, {"role": "system", "content": "be brief"},
                                      {"role": "user", "content": "q?"}])
    assert mid.history[1] == {"role": "user", "content": "be brief", "type": "system"}
    for bad, match in (([], "non-empty"), ([{"role": "tool", "content": "x"}], "role"),
                       ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "follows"),
                       ([{"role": "user", "content": [{"type": "image", "url": "x"}]}], "image"),
                       ([{"role": "user", "content": [Segment("document", "d")]}], "no question"),
                       ([{"role": "system", "content": "s"}], "no user message")):
        with pytest.raises(ValueError, match=match):
            PromptLayout.from_messages(bad)
