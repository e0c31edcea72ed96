"""Issue 11 items 3, 4 and 6 through LangChain: context never embedded, volatile text never crosses
partitions, every hit has a fresh message id.

Model calls are counted on LangChain's ``FakeListChatModel`` / ``FakeListLLM`` (distinct answers,
one per call); the embedder is the packaged all-MiniLM-L6-v2.
"""

from __future__ import annotations

import pytest
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.load import dumps
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration
from langchain_core.prompts import ChatPromptTemplate
from langchain_ragcache import ChatRagCache, RagCacheSemanticCache, RagPrompt
from langchain_ragcache._keys import EXACT_QUESTION, labelled_question

CONTEXT = ("The warehouse policy covers returns, refunds, exchanges, shipping and damaged goods. Refunds are "
           "issued within 14 days of a return reaching the warehouse. Orders to Canada ship with a tracked "
           "courier and take five to seven business days. ") * 8
OTHER_CONTEXT = CONTEXT.replace("14 days", "30 days")
Q, REWORDED, DIFFERENT = ("How long do refunds take?", "how long does a refund take", "Which carrier ships to Canada?")


class FinishingFakeChat(FakeListChatModel):
    """``FakeListChatModel`` reporting how its answers ended, as provider chat models do (an answer
    without a finish reason is never stored: a stream cut before its last chunk has none)."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        result = super()._generate(messages, stop, run_manager, **kwargs)
        for g in result.generations:
            g.message.response_metadata["finish_reason"] = "stop"
        return result


def fake_chat(cache) -> FakeListChatModel:
    return FinishingFakeChat(responses=[f"answer {i}" for i in range(50)], cache=cache)


def calls(llm) -> int:
    return llm.i


@pytest.fixture
def cache(embedder) -> RagCacheSemanticCache:
    return RagCacheSemanticCache(embedder=embedder)


TEMPLATES = {
    "one line": ChatPromptTemplate.from_messages(
        [("human", "Answer using only the context. Context: {ctx} Question: {q}")]),
    "blocks": ChatPromptTemplate.from_messages(
        [("system", "Use the context below."), ("human", "Context:\n{ctx}\n\nQuestion: {q}\nAnswer:")]),
    "q line": ChatPromptTemplate.from_messages([("human", "### Documents\n{ctx}\n\nQ: {q}")]),
    "question first": ChatPromptTemplate.from_messages([("human", "Question: {q}\n\nContext: {ctx}")]),
}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_labelled_question_is_extracted_and_context_stays_exact(cache, name) -> None:
    template = TEMPLATES[name]
    prompt = dumps(template.invoke({"ctx": CONTEXT, "q": Q}).to_messages())
    question, pk = cache.key_for(prompt, "llm")
    assert question == Q  # the embedded text is the question alone
    llm = fake_chat(cache)
    chain = template | llm
    first = chain.invoke({"ctx": CONTEXT, "q": Q})
    assert chain.invoke({"ctx": CONTEXT, "q": DIFFERENT}).content != first.content  # same context, other question
    hit = chain.invoke({"ctx": CONTEXT, "q": REWORDED})
    assert hit.content == first.content and hit.response_metadata["ragcache"]["layer"] == "semantic"
    assert chain.invoke({"ctx": OTHER_CONTEXT, "q": Q}).content != first.content  # context is in the partition
    assert calls(llm) == 3


@pytest.mark.parametrize("text, question", [
    ("Context: a b c Question: What is X? Answer:", "What is X?"),
    ("Documents:\nfoo\n\nQuery: where does Y open", "where does Y open"),
    ("intro\nQ: who wrote Z?\n", "who wrote Z?"),
    ("**Question:** when was it founded?", "when was it founded?"),
    ("No label here, just a statement about questions.", None),
    ("Question: " + "x " * 400, None),  # over-long: cannot be the question alone
    ("Question:\n\nfirst paragraph\n\nsecond paragraph", None),
])
def test_labelled_question_values(text, question) -> None:
    assert labelled_question(text) == question


@pytest.mark.parametrize("human", [
    CONTEXT + "\n\n" + Q,                 # context, blank line, question: no label
    CONTEXT + " " + Q,                    # one long paragraph
    "<document>" + CONTEXT[:200] + "</document> " + Q,  # markup
])
def test_unlabelled_context_is_matched_whole_never_embedded(cache, human) -> None:
    prompt = dumps([HumanMessage(human)])
    question, pk = cache.key_for(prompt, "llm")
    assert question == EXACT_QUESTION
    llm = fake_chat(cache)
    first = llm.invoke([HumanMessage(human)])
    assert llm.invoke([HumanMessage(human)]).content == first.content  # the very same prompt: exact hit
    assert llm.invoke([HumanMessage(human.replace(Q, REWORDED))]).content != first.content  # reworded: miss
    assert llm.invoke([HumanMessage(human.replace(Q, DIFFERENT))]).content != first.content
    assert calls(llm) == 3


def test_short_plain_question_is_embedded(cache) -> None:
    llm = fake_chat(cache)
    first = llm.invoke("What is the capital of France?")
    assert llm.invoke("what's the capital of france").content == first.content
    assert llm.invoke("What is the capital of Spain?").content != first.content
    assert cache.key_for(dumps([HumanMessage("What is the capital of France?")]), "x")[0] == \
        "What is the capital of France?"


def test_question_extractor(embedder) -> None:
    cache = RagCacheSemanticCache(embedder=embedder,
                                  question_extractor=lambda t: t.rsplit("ask >> ", 1)[1] if "ask >> " in t else None)
    template = ChatPromptTemplate.from_messages([("human", "<ctx>{ctx}</ctx>\n\nask >> {q}")])
    prompt = dumps(template.invoke({"ctx": CONTEXT, "q": Q}).to_messages())
    assert cache.key_for(prompt, "llm")[0] == Q
    llm = fake_chat(cache)
    chain = template | llm
    first = chain.invoke({"ctx": CONTEXT, "q": Q})
    assert chain.invoke({"ctx": CONTEXT, "q": REWORDED}).content == first.content
    assert chain.invoke({"ctx": CONTEXT, "q": DIFFERENT}).content != first.content
    # the extractor says "cannot tell": whole prompt, exact
    assert cache.key_for(dumps([HumanMessage(CONTEXT)]), "llm")[0] == EXACT_QUESTION
    bad = RagCacheSemanticCache(embedder=embedder, question_extractor=lambda t: "not in the text")
    with pytest.raises(ValueError, match="substring"):
        bad.key_for(prompt, "llm")


def test_completion_llm_prompts(cache) -> None:
    llm = FakeListLLM(responses=[f"answer {i}" for i in range(50)], cache=cache)
    labelled = "Answer from the context.\nContext: {ctx}\nQuestion: {q}\nAnswer:"
    first = llm.invoke(labelled.format(ctx=CONTEXT, q=Q))
    assert llm.invoke(labelled.format(ctx=CONTEXT, q=REWORDED)) == first
    assert llm.invoke(labelled.format(ctx=CONTEXT, q=DIFFERENT)) != first
    assert llm.invoke(labelled.format(ctx=OTHER_CONTEXT, q=Q)) != first
    assert cache.key_for(labelled.format(ctx=CONTEXT, q=Q), "llm")[0] == Q
    # no label: a completion prompt carries its instructions with the question -> exact only
    plain = "Translate into French: the cheese is on the table."
    assert cache.key_for(plain, "llm")[0] == EXACT_QUESTION
    out = llm.invoke(plain)
    assert llm.invoke(plain) == out
    assert llm.invoke("Translate into French: the cheese is under the table.") != out
    assert llm.i == 5


# -- volatile text: two users, two dates ---------------------------------------------------------
VOLATILE_CASES = [
    ("rag volatile user", lambda v: (RagPrompt(system="Answer briefly."),
                                     {"question": Q, "context": [CONTEXT], "volatile": f"User: {v}"}),
     ("user-a", "user-b")),
    ("rag volatile date", lambda v: (RagPrompt(system="Answer briefly."),
                                     {"question": Q, "context": [CONTEXT], "volatile": f"Today is {v}."}),
     ("2026-11-29", "2026-11-30")),
    ("rag system date moved", lambda v: (RagPrompt(system=f"Answer briefly. Today is {v}."),
                                         {"question": Q, "context": [CONTEXT]}), ("2026-11-29", "2026-11-30")),
    ("rag system date kept", lambda v: (RagPrompt(system=f"Answer briefly. Today is {v}.", lint="off"),
                                        {"question": Q, "context": [CONTEXT]}), ("29 Nov 2026", "30 Nov 2026")),
    ("template system", lambda v: (ChatPromptTemplate.from_messages(
        [("system", "You help {user}. Today is {date}."), ("human", "{q}")]),
        {"user": v[0], "date": v[1], "q": Q}), (("ann", "2026-11-29"), ("bob", "2026-11-29"))),
    ("template system date", lambda v: (ChatPromptTemplate.from_messages(
        [("system", "You help {user}. Today is {date}."), ("human", "{q}")]),
        {"user": v[0], "date": v[1], "q": Q}), (("ann", "2026-11-29"), ("ann", "2026-11-30"))),
    ("template human", lambda v: (ChatPromptTemplate.from_messages(
        [("human", "User: {user}\nDate: {date}\nQuestion: {q}")]),
        {"user": v[0], "date": v[1], "q": Q}), (("user-a", "Monday"), ("user-b", "Monday"))),
]


@pytest.mark.parametrize("name, make, values", VOLATILE_CASES, ids=[c[0] for c in VOLATILE_CASES])
def test_volatile_text_never_crosses_partitions(cache, name, make, values) -> None:
    llm = fake_chat(cache)
    prompt_a, inputs_a = make(values[0])
    prompt_b, inputs_b = make(values[1])
    a = (prompt_a | llm).invoke(inputs_a)
    b = (prompt_b | llm).invoke(inputs_b)
    assert a.content != b.content  # user B / the next day got its own answer
    again = (prompt_a | llm).invoke({**inputs_a, ("question" if "question" in inputs_a else "q"): REWORDED})
    assert again.content == a.content  # each still hits within its own partition
    assert calls(llm) == 2


# -- fresh message ids on every hit path ---------------------------------------------------------
def test_every_hit_path_returns_a_fresh_id(tiny_engine_plain, embedder) -> None:
    cache = RagCacheSemanticCache(embedder=embedder, cache_truncated=True)
    llm = ChatRagCache(engine=tiny_engine_plain, max_tokens=3, cache=cache)
    msgs = [HumanMessage("What is the boiling point of water at sea level?")]
    first = llm.invoke(msgs)
    ids = {first.id}
    hits = [llm.invoke(msgs), llm.invoke(msgs)]
    import asyncio

    hits.append(asyncio.run(llm.ainvoke(msgs)))
    for stream in (list(llm.stream(msgs)),):
        full = stream[0]
        for c in stream[1:]:
            full = full + c
        hits.append(full)

    async def astream():
        chunks = [c async for c in llm.astream(msgs)]
        full = chunks[0]
        for c in chunks[1:]:
            full = full + c
        return full

    hits.append(asyncio.run(astream()))
    for h in hits:
        assert h.response_metadata["ragcache"]["layer"] == "semantic" and h.content == first.content
        assert h.id and h.id not in ids
        ids.add(h.id)


def test_fake_model_hits_get_fresh_ids_and_tool_call_ids(cache) -> None:
    llm = fake_chat(cache)
    first = llm.invoke("What is the capital of France?")
    a, b = llm.invoke("What is the capital of France?"), llm.invoke("what's the capital of france")
    assert len({first.id, a.id, b.id}) == 3 and a.content == b.content == first.content
    # a tool call is not an answer: never stored (issue 32), so never served with stale call ids
    prompt, llm_string = dumps([HumanMessage("Look up the refund policy")]), "tools-model"
    call = AIMessage("", id="orig", response_metadata={"finish_reason": "tool_calls"},
                     tool_calls=[{"name": "search", "args": {"q": "refund"}, "id": "call_1"}])
    cache.update(prompt, llm_string, [ChatGeneration(message=call)])
    assert cache.lookup(prompt, llm_string) is None
