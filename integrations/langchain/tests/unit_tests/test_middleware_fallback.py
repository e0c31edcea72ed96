"""RagCacheMiddleware with ModelFallbackMiddleware (issue 24, kind 4): while the primary model is
down the fallback answers, and that answer is never stored under (nor later served as) the
primary's. The models report their names in ``response_metadata`` as the provider packages do."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelFallbackMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_ragcache import RagCacheSemanticCache
from langchain_ragcache.middleware import RagCacheMiddleware, RagPromptLayoutMiddleware, same_model

Q = "Is the warranty valid after a crash?"


class NamedChat(BaseChatModel):
    """Answers ``<name> answer #n``; reports ``reported`` (default: its name) as the model that answered;
    raises while ``down``."""

    model_name: str
    reported: str | None = None
    down: bool = False
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "named-chat"

    def bind_tools(self, tools: Any, **kwargs: Any) -> NamedChat:
        return self

    def _generate(self, messages: list, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        if self.down:
            raise ConnectionError(f"{self.model_name} is down")
        self.calls += 1
        msg = AIMessage(f"{self.model_name} answer #{self.calls}",
                        response_metadata={"model_name": self.reported or self.model_name, "finish_reason": "stop"})
        return ChatResult(generations=[ChatGeneration(message=msg)])


def ask(agent, question: str) -> AIMessage:
    return agent.invoke({"messages": [HumanMessage(question)]})["messages"][-1]


@pytest.mark.parametrize("primary_name,fallback_name", [
    ("claude-sonnet-4-6", "gpt-4o-mini"),
    ("gpt-4o", "gpt-4o-mini-2024-07-18"),   # a name that starts with the primary's is still another model
    ("smollm2-135m-instruct", "claude-haiku-4-5"),
])
@pytest.mark.parametrize("with_layout", [False, True])
def test_fallback_answer_is_never_served_as_the_primarys(embedder, primary_name, fallback_name, with_layout) -> None:
    primary, fallback = NamedChat(model_name=primary_name, down=True), NamedChat(model_name=fallback_name)
    mw = RagCacheMiddleware(RagCacheSemanticCache(embedder=embedder))
    chain = [mw, RagPromptLayoutMiddleware(breakpoints="off")] if with_layout else [mw]
    agent = create_agent(primary, tools=[], system_prompt="Shop assistant.",
                         middleware=[*chain, ModelFallbackMiddleware(fallback)])
    during = ask(agent, Q)
    assert during.content == f"{fallback_name} answer #1" and mw.fallback_answers == 1
    primary.down = False
    after = ask(agent, Q)  # the primary is back: it answers; the fallback's answer is not served
    assert after.content == f"{primary_name} answer #1" and primary.calls == 1
    again = ask(agent, Q)  # and the primary's own answer is stored and served
    assert again.content == after.content and primary.calls == 1
    assert again.response_metadata["ragcache"]["layer"] == "semantic"


@pytest.mark.parametrize("declared,answered,same", [
    ("claude-sonnet-4-6", "claude-sonnet-4-6-20260101", True),
    ("gpt-4o-mini", "gpt-4o-mini-2024-07-18", True),
    ("Tiny-Llama", "tiny-llama", True),
    ("gpt-4o", "gpt-4o-mini", False),
    ("claude-sonnet-4-6", "claude-haiku-4-5", False),
    (None, "anything", True),
])
def test_same_model_rule(declared, answered, same) -> None:
    assert same_model(declared, answered) is same


def test_dated_snapshot_of_the_primary_is_stored(embedder) -> None:
    primary = NamedChat(model_name="claude-sonnet-4-6", reported="claude-sonnet-4-6-20260101")
    mw = RagCacheMiddleware(RagCacheSemanticCache(embedder=embedder))
    agent = create_agent(primary, tools=[], system_prompt="Shop assistant.", middleware=[mw])
    assert ask(agent, Q).content == ask(agent, Q).content and primary.calls == 1 and mw.fallback_answers == 0
