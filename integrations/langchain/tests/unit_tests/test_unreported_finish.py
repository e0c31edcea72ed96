"""Issue 50, item 3 (LangChain): a model that reports no finish reason behind RagCacheSemanticCache gets
its answers not stored and one warning per model saying how to allow it (``unreported_finish="stop"``);
``with_cache_info()`` gives a record on every call, a plain model's miss included."""

from __future__ import annotations

import warnings

import pytest
from langchain_core.globals import set_llm_cache
from langchain_core.language_models import FakeListChatModel
from langchain_core.messages import AIMessage
from langchain_ragcache import RagCacheSemanticCache, cache_info, with_cache_info
from langchain_ragcache import cache as cache_module

from langchain_core.language_models import BaseChatModel
from langchain_core.outputs import ChatGeneration, ChatResult



class Reporting(BaseChatModel):
    """Answers ``answer #n`` with the given response metadata."""

    meta: dict = {}
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "reporting"

    def _generate(self, messages, stop=None, run_manager=None, **kw) -> ChatResult:
        self.calls += 1
        return ChatResult(generations=[ChatGeneration(message=AIMessage(f"answer #{self.calls}",
                                                                        response_metadata=dict(self.meta)))])


QUESTIONS = ["When do backups run?", "How long are backups kept?", "Who approves a deploy?"]


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(cache_module, "_WARNED_NO_FINISH", set())


def _run(chain, questions):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        outs = [chain.invoke(q) for q in questions]
    return outs, [w for w in rec if "report no finish reason" in str(w.message)]


def test_a_model_without_finish_reasons_stores_nothing_and_is_warned_about_once() -> None:
    set_llm_cache(RagCacheSemanticCache(path=None))
    fake = FakeListChatModel(responses=["a", "b", "c", "d", "e", "f"])
    outs, warned = _run(fake | with_cache_info(), QUESTIONS + QUESTIONS)
    assert [o["cache"]["layer"] for o in outs] == ["provider"] * 6  # nothing was stored, so nothing hit
    assert {o["cache"]["finish_reason"] for o in outs} == {"incomplete"}
    assert len(warned) == 1, [str(w.message) for w in warned]
    text = str(warned[0].message)
    assert "fake-list-chat-model" in text and "unreported_finish='stop'" in text and "finish_reason" in text
    assert warned[0].filename == __file__  # the caller's line, not the adapter's
    # a second model is warned about on its own; the first is not warned again
    other = Reporting()
    _, warned = _run(other | with_cache_info(), QUESTIONS[:2])
    assert len(warned) == 1 and "reporting" in str(warned[0].message)
    _, warned = _run(fake | with_cache_info(), QUESTIONS[:1])
    assert warned == []


@pytest.mark.parametrize("meta", [{"finish_reason": "stop"}, {"stop_reason": "end_turn"}, {"finish_reason": None},
                                  {"finish_reason": "content_filter"}])
def test_no_warning_for_a_model_that_reports_an_end_reason(meta) -> None:
    """Reported (even null or a stop that is not stored): the warning is only for a model that says nothing."""
    set_llm_cache(RagCacheSemanticCache(path=None))
    _, warned = _run(Reporting(meta=meta) | with_cache_info(), QUESTIONS[:2])
    assert warned == []


def test_unreported_finish_stop_stores_and_serves_them() -> None:
    set_llm_cache(RagCacheSemanticCache(path=None, unreported_finish="stop"))
    fake = FakeListChatModel(responses=["a", "b", "c"])
    outs, warned = _run(fake | with_cache_info(), [QUESTIONS[0], QUESTIONS[0], QUESTIONS[1]])
    assert [o["cache"]["layer"] for o in outs] == ["provider", "semantic", "provider"] and warned == []
    assert [o["answer"] for o in outs] == ["a", "a", "b"]
    assert outs[1]["cache"]["finish_reason"] == "stop"
    # a message that reports a stop which is not stored stays not stored under the option
    set_llm_cache(RagCacheSemanticCache(path=None, unreported_finish="stop"))
    refused = Reporting(meta={"finish_reason": "content_filter"})
    outs, _ = _run(refused | with_cache_info(), [QUESTIONS[0], QUESTIONS[0]])
    assert [o["cache"]["layer"] for o in outs] == ["provider", "provider"]


@pytest.mark.parametrize("value", ["yes", True, None, "length"])
def test_unreported_finish_takes_only_its_two_words(value) -> None:
    with pytest.raises(ValueError, match="unreported_finish must be 'incomplete'"):
        RagCacheSemanticCache(path=None, unreported_finish=value)


@pytest.mark.parametrize("message,layer,finish", [
    (AIMessage("x"), "provider", "incomplete"),
    (AIMessage("x", response_metadata={"finish_reason": "stop"}), "provider", "stop"),
    (AIMessage("x", response_metadata={"stop_reason": "max_tokens"},
               usage_metadata={"input_tokens": 9, "output_tokens": 2, "total_tokens": 11,
                               "input_token_details": {"cache_read": 5}}), "provider-cache", "length"),
])
def test_cache_info_gives_a_record_for_a_message_no_ragcache_layer_touched(message, layer, finish) -> None:
    rec = cache_info(message)
    assert rec["layer"] == layer and rec["finish_reason"] == finish and rec["approximate"] is False
    assert set(rec) >= {"layer", "finish_reason", "approximate", "recompute_ratio", "blend_setting", "ttft_s", "usage"}
