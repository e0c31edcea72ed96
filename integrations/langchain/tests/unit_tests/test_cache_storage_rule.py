"""The LangChain LLM cache stores only answers that ended normally (issue 32, section 2; the one rule,
:func:`ragcache.answering.cacheable`): not a content filter, a tool call, a null or missing finish
reason, a refusal, a pause, a context-window stop or a stream cut before its end, in every provider's
spelling; and a hit says where the answer came from (:class:`ragcache.answering.Provenance`).
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_ragcache import RagCacheSemanticCache
from langchain_ragcache.results import finish_reason_of

Q = "How many days do returns stay open?"


class Reporting(BaseChatModel):
    """Answers ``answer #n`` with the given response metadata (and tool calls)."""

    meta: dict = {}
    tool_calls: list = []
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "reporting"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        self.calls += 1
        msg = AIMessage(f"answer #{self.calls}", response_metadata=dict(self.meta), tool_calls=list(self.tool_calls))
        return ChatResult(generations=[ChatGeneration(message=msg)])


class Streaming(BaseChatModel):
    """A streaming chat model whose last chunk carries the end reason, unless the stream is ``cut``."""

    cut: bool = False
    calls: int = 0
    streaming: bool = True

    @property
    def _llm_type(self) -> str:
        return "streaming"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        raise AssertionError("streaming=True: LangChain builds the answer from _stream")

    def _stream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        self.calls += 1
        for piece in ["Thirty ", "days ", f"(#{self.calls})."]:
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece))
        if not self.cut:
            yield ChatGenerationChunk(message=AIMessageChunk(content="", response_metadata={"finish_reason": "stop"}))


@pytest.fixture
def cache(embedder):
    return RagCacheSemanticCache(path=None, embedder=embedder)


NOT_STORED = [
    {"finish_reason": "content_filter"}, {"finish_reason": None}, {}, {"finish_reason": "tool_calls"},
    {"finish_reason": "length"}, {"stop_reason": "max_tokens"}, {"stop_reason": "refusal"},
    {"stop_reason": "pause_turn"}, {"stop_reason": "model_context_window_exceeded"}, {"stop_reason": None},
    {"finish_reason": "SAFETY"}, {"finish_reason": "MAX_TOKENS"}, {"done_reason": "length"},
    {"finish_reason": "something_new"},
]
STORED = [{"finish_reason": "stop"}, {"stop_reason": "end_turn"}, {"stop_reason": "stop_sequence"},
          {"finish_reason": "STOP"}, {"done_reason": "stop"}, {"finish_reason": "COMPLETE"}]


@pytest.mark.parametrize("meta", NOT_STORED, ids=repr)
def test_an_answer_that_did_not_end_normally_is_not_stored(cache, meta):
    model = Reporting(meta=meta, cache=cache)
    model.invoke([HumanMessage(Q)])
    second = model.invoke([HumanMessage(Q)])
    assert model.calls == 2 and len(cache.semantic_cache) == 0, f"stored an answer ending {meta}"
    assert second.content == "answer #2"


@pytest.mark.parametrize("meta", STORED, ids=repr)
def test_an_answer_that_ended_normally_is_stored_with_its_provenance(cache, meta):
    model = Reporting(meta={**meta, "model_name": "reporting-1"}, cache=cache)
    first = model.invoke([HumanMessage(Q)])
    hit = model.invoke([HumanMessage(Q)])
    assert model.calls == 1 and hit.content == first.content
    rec = hit.response_metadata["ragcache"]
    assert rec["layer"] == "semantic" and rec["finish_reason"] == "stop" and rec["model"] == "reporting-1"
    assert hit.usage_metadata["total_tokens"] == 0


def test_a_tool_call_is_not_stored(cache):
    model = Reporting(meta={"finish_reason": "stop"}, cache=cache,
                      tool_calls=[{"name": "lookup", "args": {"q": "returns"}, "id": "call_1"}])
    model.invoke([HumanMessage(Q)])
    model.invoke([HumanMessage(Q)])
    assert model.calls == 2 and len(cache.semantic_cache) == 0


@pytest.mark.parametrize("cut", [True, False])
async def test_a_cut_stream_is_not_stored(cache, cut):
    model = Streaming(cut=cut, cache=cache, streaming=True)
    first = model.invoke([HumanMessage(Q)])
    second = await model.ainvoke([HumanMessage(Q)])
    assert first.content.startswith("Thirty days")
    if cut:  # no end reason on the last chunk: the stream ended early
        assert model.calls == 2 and len(cache.semantic_cache) == 0
    else:
        assert model.calls == 1 and second.response_metadata["ragcache"]["layer"] == "semantic"


def test_budget_cut_answers_are_stored_only_with_cache_truncated_and_served_to_the_same_budget(embedder):
    cache = RagCacheSemanticCache(path=None, embedder=embedder, cache_truncated=True)
    model = Reporting(meta={"finish_reason": "length"}, cache=cache)
    model.invoke([HumanMessage(Q)], max_tokens=5)
    hit = model.invoke([HumanMessage(Q)], max_tokens=5)
    assert model.calls == 1 and hit.response_metadata["ragcache"]["finish_reason"] == "length"
    model.invoke([HumanMessage(Q)], max_tokens=50)  # another budget: another partition
    assert model.calls == 2


@pytest.mark.parametrize("meta,expected", [
    ({"finish_reason": "stop"}, "stop"), ({"stop_reason": "end_turn"}, "stop"), ({"finish_reason": "length"}, "length"),
    ({"finish_reason": "content_filter"}, "content_filter"), ({"stop_reason": "refusal"}, "refusal"),
    ({"stop_reason": "pause_turn"}, "pause_turn"), ({"finish_reason": None}, "incomplete"), ({}, "incomplete"),
    ({"stop_reason": "model_context_window_exceeded"}, "context_window"), ({"finish_reason": "SAFETY"}, "content_filter"),
])
def test_finish_reason_of_a_message(meta, expected):
    assert finish_reason_of(AIMessage("x", response_metadata=meta)) == expected


def test_a_plain_completion_generation_without_a_reason_is_finished():
    """LangChain's generic cache API (completion LLMs, langchain-tests' suite) hands plain Generations."""
    from langchain_core.outputs import Generation

    assert finish_reason_of(Generation(text="x")) == "stop"
    assert finish_reason_of(Generation(text="x", generation_info={"finish_reason": "length"})) == "length"
    assert finish_reason_of(Generation(text="x", generation_info={"finish_reason": None})) == "incomplete"


@pytest.mark.parametrize("budget", [4, 64, 1024])
def test_the_budget_is_read_from_a_serialisable_models_kwargs(budget):
    """ChatAnthropic / ChatOpenAI write their parameters into the serialised model before ``---``, not
    into the parameter list after it: the budget of a cut answer is found there too (else a cut answer
    stored with ``cache_truncated`` could never be served)."""
    from langchain_anthropic import ChatAnthropic
    from langchain_openai import ChatOpenAI

    from langchain_ragcache import RagCacheSemanticCache

    for llm in (ChatAnthropic(model="claude-sonnet-4-6", api_key="k", max_tokens=budget),
                ChatOpenAI(model="gpt-4o-mini", api_key="k", max_tokens=budget)):
        assert RagCacheSemanticCache.budget(llm._get_llm_string()) == budget
    assert RagCacheSemanticCache.budget("[('max_tokens', 7), ('stop', None)]") == 7
    assert RagCacheSemanticCache.budget('{"kwargs": {"temperature": 0}}---[]') is None
    assert RagCacheSemanticCache.budget("not json---[('stop', None)]") is None
