"""A semantic hit reports zero tokens and says it was a hit (issue 32, section 2): LangChain's
usage callback counts one model call once, through the LLM cache, the agent middleware and
ChatRagCache's streamed replay; and LangChain usage maps onto CacheUsage one way
(:mod:`langchain_ragcache.usage`) for the layout middleware and the callback handler alike.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import UsageMetadataCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_ragcache import RagCacheCallbackHandler, RagCacheSemanticCache
from langchain_ragcache.usage import cache_usage, usage_metadata
from ragcache.backend import CacheUsage

QUESTIONS = ["How long is the warranty on a frame?", "Which parcels ship on Saturdays?",
             "What does the premium plan cost per month?"]


class Metered(BaseChatModel):
    """Answers with provider-style usage: 120 input tokens (40 read, 30 written), 9 output."""

    calls: int = 0
    anthropic_style: bool = False

    @property
    def _llm_type(self) -> str:
        return "metered"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        self.calls += 1
        details = ({"cache_read": 40, "cache_creation": 0, "ephemeral_5m_input_tokens": 30} if self.anthropic_style
                   else {"cache_read": 40, "cache_creation": 30})
        msg = AIMessage(f"answer #{self.calls}", usage_metadata={
            "input_tokens": 120, "output_tokens": 9, "total_tokens": 129, "input_token_details": details},
            response_metadata={"finish_reason": "stop", "model_name": "metered-1",
                               "token_usage": {"prompt_tokens": 120, "completion_tokens": 9}})
        return ChatResult(generations=[ChatGeneration(message=msg)])


@pytest.fixture
def cache(embedder):
    return RagCacheSemanticCache(path=None, embedder=embedder)


@pytest.mark.parametrize("question", QUESTIONS)
def test_llm_cache_hit_counts_zero_tokens(cache, question):
    model = Metered(cache=cache)
    counter, record = UsageMetadataCallbackHandler(), RagCacheCallbackHandler()
    first = model.invoke([HumanMessage(question)], config={"callbacks": [counter, record]})
    second = model.invoke([HumanMessage(question)], config={"callbacks": [counter, record]})
    assert model.calls == 1 and second.content == first.content
    assert second.usage_metadata["input_tokens"] == second.usage_metadata["output_tokens"] == 0
    assert second.usage_metadata["total_tokens"] == 0
    assert "token_usage" not in second.response_metadata  # the stored call's raw usage is not replayed
    assert second.response_metadata["ragcache"]["layer"] == "semantic"
    assert second.response_metadata["ragcache"]["usage"] == CacheUsage().to_dict()
    # one model call, counted once
    (usage,) = counter.usage_metadata.values()
    assert (usage["input_tokens"], usage["output_tokens"], usage["total_tokens"]) == (120, 9, 129)
    assert [r.layer for r in record.records] == ["provider-cache", "semantic"]
    assert record.records[1].input_tokens is None and record.records[0].input_tokens == 120


async def test_llm_cache_async_hit_counts_zero_tokens(cache):
    model = Metered(cache=cache)
    counter = UsageMetadataCallbackHandler()
    for _ in range(3):
        await model.ainvoke([HumanMessage(QUESTIONS[0])], config={"callbacks": [counter]})
    assert model.calls == 1
    (usage,) = counter.usage_metadata.values()
    assert usage["total_tokens"] == 129


def test_middleware_hit_counts_zero_tokens(cache):
    from langchain.agents import create_agent
    from langchain_ragcache.middleware import RagCacheMiddleware

    model = Metered()
    agent = create_agent(model, [], system_prompt="Answer briefly.", middleware=[RagCacheMiddleware(cache)])
    counter = UsageMetadataCallbackHandler()
    outs = [agent.invoke({"messages": [HumanMessage(q)]}, config={"callbacks": [counter]})
            for q in (QUESTIONS[1], QUESTIONS[1], QUESTIONS[2], QUESTIONS[2])]
    assert model.calls == 2
    hits = [o["messages"][-1] for o in outs[1::2]]
    for hit in hits:
        assert hit.usage_metadata["total_tokens"] == 0
        assert hit.response_metadata["ragcache"]["layer"] == "semantic"
    (usage,) = counter.usage_metadata.values()
    assert usage["total_tokens"] == 2 * 129


@pytest.mark.parametrize("anthropic_style", [False, True])
def test_one_usage_mapping(anthropic_style):
    """The layout middleware and the callback handler read the same CacheUsage from a message."""
    from langchain_ragcache.middleware import _with_usage

    msg = Metered(anthropic_style=anthropic_style).invoke("hi")
    u = cache_usage(msg)
    assert (u.prompt_tokens, u.cache_read, u.cache_write, u.completion_tokens) == (120, 40, 30, 9)
    assert u.reused == 40 and u.computed == 80
    laid = _with_usage(msg, ["system"])
    assert laid.response_metadata["ragcache"]["usage"] == u.to_dict()
    assert laid.usage_metadata["input_token_details"]["cache_creation"] == 30
    assert cache_usage(laid) == u  # read back from ragcache's own record, exactly
    record = RagCacheCallbackHandler()
    Metered(anthropic_style=anthropic_style).invoke("hi", config={"callbacks": [record]})
    r = record.last
    assert (r.input_tokens, r.cache_read, r.cache_creation) == (120, 40, 30)


@pytest.mark.parametrize("usage", [CacheUsage(), CacheUsage.local(prompt_tokens=50, prefix_reused=16, recomputed=3,
                                                                    completion_tokens=7),
                                   CacheUsage.provider(input_tokens=10, cache_read=5, cache_write=2, completion_tokens=4)])
def test_usage_round_trip(usage):
    """CacheUsage -> LangChain usage -> CacheUsage keeps the counts LangChain has fields for."""
    back = cache_usage(AIMessage("x", usage_metadata=usage_metadata(usage)))
    assert (back.prompt_tokens, back.cache_read, back.cache_write, back.completion_tokens) == (
        usage.prompt_tokens, usage.cache_read, usage.cache_write, usage.completion_tokens)
    assert cache_usage(AIMessage("x")) is None


def test_chat_ragcache_streamed_hit_counts_zero_tokens(embedder, tiny_engine_plain):
    from functools import reduce
    from operator import add

    from langchain_ragcache import ChatRagCache

    # the tiny random model never ends by itself: its answers are cut at the budget, stored by this rule
    cache = RagCacheSemanticCache(path=None, embedder=embedder, cache_truncated=True)
    # seeded sampling: the tiny random model's greedy answer is blank, and a blank answer is never stored
    model = ChatRagCache(engine=tiny_engine_plain, cache=cache, max_tokens=4, temperature=1.0, seed=3)
    counter = UsageMetadataCallbackHandler()
    msgs = [HumanMessage(QUESTIONS[0])]
    first = reduce(add, model.stream(msgs, config={"callbacks": [counter]}))
    second = reduce(add, model.stream(msgs, config={"callbacks": [counter]}))
    assert first.usage_metadata["input_tokens"] > 0
    assert second.response_metadata["ragcache"]["layer"] == "semantic"
    assert second.usage_metadata["total_tokens"] == 0
    (usage,) = counter.usage_metadata.values()
    assert usage["total_tokens"] == first.usage_metadata["total_tokens"]
