"""The model behind the name through ``RagCacheSemanticCache`` (issue 47, item 4): the stored answer
records the model the response named; once responses under the same alias name a new snapshot, the
old snapshot's answers are misses, and the new answers replace them."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_ragcache import RagCacheSemanticCache


class Aliased(BaseChatModel):
    """``model="gpt-4o"`` answering as ``snapshot`` (reported in ``model_name``, as OpenAI does)."""

    model: str = "gpt-4o"
    snapshot: str = "gpt-4o-2024-05-13"
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "aliased"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.model}

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        self.calls += 1
        msg = AIMessage(f"answer {self.calls} by {self.snapshot}",
                        response_metadata={"finish_reason": "stop", "model_name": self.snapshot})
        return ChatResult(generations=[ChatGeneration(message=msg)])


@pytest.fixture
def cache(embedder):
    return RagCacheSemanticCache(path=None, embedder=embedder)


@pytest.mark.parametrize("new", ["gpt-4o-2024-08-06", "gpt-4o-2024-11-20"])
def test_an_old_snapshots_answer_is_a_miss_once_the_alias_moves(cache, new):
    q, other = "How long do refunds take?", "Which cards are accepted?"
    model = Aliased(cache=cache)
    first = model.invoke([HumanMessage(q)])
    hit = model.invoke([HumanMessage(q)])
    assert model.calls == 1 and hit.content == first.content
    assert hit.response_metadata["ragcache"]["model"] == "gpt-4o-2024-05-13"  # the snapshot, not the alias
    model.snapshot = new
    model.invoke([HumanMessage(other)])  # the first fresh answer that names the new snapshot
    assert model.calls == 2
    again = model.invoke([HumanMessage(q)])  # written by the old snapshot: a miss
    assert model.calls == 3 and again.content == f"answer 3 by {new}"
    last = model.invoke([HumanMessage(q)])
    assert model.calls == 3 and last.content == again.content
    assert last.response_metadata["ragcache"]["model"] == new
    assert len(cache.semantic_cache) == 2  # replaced, not added beside it


async def test_the_async_path_follows_the_same_rule(cache):
    model = Aliased(cache=cache)
    await model.ainvoke([HumanMessage("How long do refunds take?")])
    model.snapshot = "gpt-4o-2024-08-06"
    await model.ainvoke([HumanMessage("Which cards are accepted?")])
    again = await model.ainvoke([HumanMessage("How long do refunds take?")])
    assert model.calls == 3 and again.content.endswith("gpt-4o-2024-08-06")
