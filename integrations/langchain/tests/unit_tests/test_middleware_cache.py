"""RagCacheMiddleware on langchain 1.x agents (issue 16, item 1): one model call per question,
reworded hits, negated and other-system / other-tools requests miss, fresh ids, tool loops.

The agent's model is a scripted chat model (answers numbered by call, so a served answer is
recognisable); the semantic cache is the real one (packaged MiniLM, FAISS).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langchain_ragcache import RagCacheSemanticCache
from langchain_ragcache.middleware import RagCacheMiddleware
from langgraph.checkpoint.memory import InMemorySaver

SYSTEM = "You are the bike shop's assistant. Answer from the shop's policies."
Q = "Is the warranty valid after a crash?"
REWORDED = "Is the warranty still valid after a crash?"
NEGATED = "Is the warranty not valid after a crash?"

SEARCHES: list[str] = []
POLICY = {"text": "Frames carry a two-year warranty; crash damage is not covered."}


@tool
def search_policies(query: str) -> str:
    """Search the shop's policy documents."""
    SEARCHES.append(query)
    return POLICY["text"]


@tool(response_format="content_and_artifact")
def search_docs(query: str) -> tuple[str, list]:
    """Search the shop's policy documents; returns the documents as the artifact."""
    from langchain_core.documents import Document

    return POLICY["text"], [Document(id="warranty", page_content=POLICY["text"])]


@tool
def order_status(order_id: str) -> str:
    """Look up an order's status."""
    return "shipped"


class ScriptedChat(BaseChatModel):
    """Answers ``answer #n`` (n = its call count); with ``use_tool``, first calls ``search_policies``."""

    calls: int = 0
    use_tool: bool = False
    tool_name: str = "search_policies"

    @property
    def _llm_type(self) -> str:
        return "scripted-chat"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChat:
        return self

    def _generate(self, messages: list, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.calls += 1
        if self.use_tool and messages[-1].type == "human":
            msg = AIMessage("", tool_calls=[{"name": self.tool_name, "args": {"query": "warranty crash"},
                                             "id": f"call_{self.calls}"}])
        else:
            msg = AIMessage(f"answer #{self.calls}", response_metadata={"finish_reason": "stop"})
        return ChatResult(generations=[ChatGeneration(message=msg)])


@pytest.fixture
def cache(embedder) -> RagCacheSemanticCache:
    return RagCacheSemanticCache(embedder=embedder)


def ask(agent, question: str, **config: Any) -> list:
    return agent.invoke({"messages": [HumanMessage(question)]}, **config)["messages"]


def test_same_question_twice_one_model_call(cache) -> None:
    model = ScriptedChat()
    mw = RagCacheMiddleware(cache)
    agent = create_agent(model, tools=[search_policies], system_prompt=SYSTEM, middleware=[mw])
    first = ask(agent, Q)[-1]
    second = ask(agent, Q)[-1]
    assert model.calls == 1 and (mw.model_calls, mw.hits) == (1, 1)
    assert second.content == first.content == "answer #1"
    assert second.response_metadata["ragcache"]["layer"] == "semantic"
    assert second.response_metadata["ragcache"]["similarity"] == pytest.approx(1.0, abs=1e-4)
    assert second.id != first.id


def test_reworded_hits_negated_misses(cache) -> None:
    model = ScriptedChat()
    agent = create_agent(model, tools=[search_policies], system_prompt=SYSTEM, middleware=[RagCacheMiddleware(cache)])
    first = ask(agent, Q)[-1]
    reworded = ask(agent, REWORDED)[-1]
    assert reworded.content == first.content and model.calls == 1
    assert reworded.response_metadata["ragcache"]["matched_question"] == Q
    negated = ask(agent, NEGATED)[-1]
    assert negated.content == "answer #2" and model.calls == 2
    for other in ("Does the shop ship to Canada?", "Who repairs crashed frames?"):
        assert ask(agent, other)[-1].content == f"answer #{model.calls}"
    assert model.calls == 4


@pytest.mark.parametrize("change", ["system prompt", "tool set", "tool description", "model settings"])
def test_another_system_prompt_or_tool_set_misses(cache, change) -> None:
    model = ScriptedChat()
    base = create_agent(model, tools=[search_policies], system_prompt=SYSTEM, middleware=[RagCacheMiddleware(cache)])
    ask(base, Q)
    assert ask(base, REWORDED)[-1].content == "answer #1"  # the partition works at all
    tools, system, other_model = [search_policies], SYSTEM, model
    if change == "system prompt":
        system = SYSTEM + " Be brief."
    elif change == "tool set":
        tools = [search_policies, order_status]
    elif change == "tool description":
        tools = [search_policies.model_copy(update={"description": "Search the shop's archive."})]
    else:
        other_model = model.bind(temperature=0.7)  # bound settings are part of the model's identity
    agent = create_agent(other_model, tools=tools, system_prompt=system, middleware=[RagCacheMiddleware(cache)])
    assert ask(agent, Q)[-1].content == "answer #2" and model.calls == 2


def test_hits_have_fresh_ids_in_one_thread(cache) -> None:
    model = ScriptedChat()
    agent = create_agent(model, tools=[], system_prompt=SYSTEM, middleware=[RagCacheMiddleware(cache)],
                         checkpointer=InMemorySaver())
    ask(agent, Q, config={"configurable": {"thread_id": "a"}})
    ask(agent, Q, config={"configurable": {"thread_id": "b"}})  # hit, fresh id
    ask(agent, Q, config={"configurable": {"thread_id": "c"}})
    msgs = []
    for t in "abc":
        msgs += agent.get_state({"configurable": {"thread_id": t}}).values["messages"]
    ai = [m for m in msgs if m.type == "ai"]
    assert [m.content for m in ai] == ["answer #1"] * 3 and model.calls == 1
    assert len({m.id for m in ai}) == 3
    # within one thread the second turn has history, so it is its own partition: both turns stay
    thread = {"configurable": {"thread_id": "d"}}
    ask(agent, Q, config=thread)
    ask(agent, REWORDED, config=thread)
    state = agent.get_state(thread).values["messages"]
    assert [m.type for m in state] == ["human", "ai", "human", "ai"] and len({m.id for m in state}) == 4


def test_tool_loop_served_only_for_the_same_tool_call_and_result(cache) -> None:
    SEARCHES.clear()
    POLICY["text"] = "Frames carry a two-year warranty; crash damage is not covered."
    model = ScriptedChat(use_tool=True)
    agent = create_agent(model, tools=[search_policies], system_prompt=SYSTEM, middleware=[RagCacheMiddleware(cache)])
    first = ask(agent, Q)
    assert [m.type for m in first] == ["human", "ai", "tool", "ai"] and model.calls == 2
    again = ask(agent, REWORDED)
    # a tool call is not an answer and is never stored (issue 32): the model is asked again and calls
    # the tool; the answer turn after the same tool call and result is served
    assert model.calls == 3 and len(SEARCHES) == 2
    assert again[1].tool_calls[0]["name"] == "search_policies"
    assert again[-1].content == first[-1].content
    # the tool now returns something else: the turn after it is not served from the cache
    POLICY["text"] = "Frames carry a lifetime warranty, crash damage included."
    third = ask(agent, Q)
    assert model.calls == 5 and third[-1].content == "answer #5"


async def test_async_agent(cache) -> None:
    model = ScriptedChat()
    agent = create_agent(model, tools=[], system_prompt=SYSTEM, middleware=[RagCacheMiddleware(cache)])
    a = (await agent.ainvoke({"messages": [HumanMessage(Q)]}))["messages"][-1]
    b = (await agent.ainvoke({"messages": [HumanMessage(REWORDED)]}))["messages"][-1]
    assert a.content == b.content and model.calls == 1 and a.id != b.id


def test_invalidating_a_retrieved_document_drops_the_answers_built_on_it(cache) -> None:
    POLICY["text"] = "Frames carry a two-year warranty; crash damage is not covered."
    model = ScriptedChat(use_tool=True, tool_name="search_docs")
    agent = create_agent(model, tools=[search_docs], system_prompt=SYSTEM, middleware=[RagCacheMiddleware(cache)])
    ask(agent, Q)
    assert model.calls == 2
    ask(agent, Q)  # the tool-call turn is asked again (never stored); the answer turn is served
    assert model.calls == 3
    assert cache.invalidate("warranty") == 1  # the answer turn read the document
    assert ask(agent, Q)[-1].content == "answer #5" and model.calls == 5


@pytest.mark.parametrize("layout_first", [True, False])
def test_with_the_layout_middleware_in_either_order(cache, layout_first) -> None:
    from langchain_ragcache.middleware import RagPromptLayoutMiddleware

    model = ScriptedChat()

    def agent_for(day: str):
        mws = [RagCacheMiddleware(cache), RagPromptLayoutMiddleware()]
        return create_agent(model, tools=[search_policies], system_prompt=f"{SYSTEM} Today is {day}.",
                            middleware=mws[::-1] if layout_first else mws)

    first = ask(agent_for("2026-11-29"), Q)[-1]
    assert ask(agent_for("2026-11-29"), REWORDED)[-1].content == first.content and model.calls == 1
    assert ask(agent_for("2026-11-30"), Q)[-1].content == "answer #2"  # the date is in the partition
    assert model.calls == 2
