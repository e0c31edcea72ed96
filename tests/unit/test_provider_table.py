"""The provider table (issue 49 item 4): one row per provider, read by the record, the backends and both
integrations.

- the rows reproduce the tables they replaced, value for value (behaviour unchanged);
- a bad row, a taken name or a spelling with two meanings is refused with the fix named;
- an unknown provider reads as unknown usage, ``incomplete`` ends and the old greedy default;
- the names kept for older code (``CacheUsage.from_anthropic`` / ``from_openai``, ``UNSET_TEMPERATURE``,
  ``SAMPLING_BY_DEFAULT``, ``llm_kind``) still answer, through the table;
- a provider added as the contributor docs say (a module with its row, registered) is read by the record,
  LangChain and LlamaIndex without touching them (``test_a_new_provider_is_read_everywhere``).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from ragcache.backend import FINISH_REASONS, CacheUsage
from ragcache.providers.spec import Provider, UsageCounts, count_of
from ragcache.providers.table import (
    PROVIDERS,
    UNKNOWN,
    finish_spellings,
    for_langchain,
    for_llama_index,
    provider,
    register,
    rows,
    unregister,
    usage_of,
)

OLD_LANGCHAIN_FINISH = {
    "stop": "stop", "length": "length", "content_filter": "content_filter", "tool_calls": "tool_calls",
    "function_call": "tool_calls", "end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
    "tool_use": "tool_calls", "pause_turn": "pause_turn", "refusal": "refusal",
    "model_context_window_exceeded": "context_window", "max_output_tokens": "length", "safety": "content_filter",
    "recitation": "content_filter", "blocklist": "content_filter", "prohibited_content": "content_filter",
    "spii": "content_filter", "guardrail_intervened": "content_filter", "complete": "stop", "eos_token": "stop",
    "model_length": "length", "tool_call": "tool_calls", "error": "error",
}
"""``langchain_ragcache.results.FINISH_REASONS`` as it was written out before the table."""

OLD_SAMPLING_BY_DEFAULT = frozenset({
    "openai-chat", "azure-openai-chat", "anthropic-chat", "chat-ollama", "ollama-chat", "mistralai-chat",
    "groq-chat", "chat-google-generative-ai", "fireworks-chat", "together-chat", "deepseek-chat", "xai-chat",
    "chat-bedrock-converse", "amazon_bedrock_converse_chat", "openai", "anthropic-llm"})
"""``langchain_ragcache._keys.SAMPLING_BY_DEFAULT`` as it was written out before the table."""


# -- the rows reproduce what they replaced ----------------------------------------------------------
def test_langchain_reads_the_same_end_reasons_as_before():
    from langchain_ragcache.results import FINISH_REASONS as LC

    assert dict(finish_spellings()) == OLD_LANGCHAIN_FINISH
    assert dict(LC) == OLD_LANGCHAIN_FINISH


def test_langchain_samples_the_same_models_as_before_and_cohere():
    from langchain_ragcache._keys import SAMPLING_BY_DEFAULT, sampling_of

    assert SAMPLING_BY_DEFAULT == OLD_SAMPLING_BY_DEFAULT | {"cohere-chat"}  # Cohere samples by default (0.3)
    for t in sorted(OLD_SAMPLING_BY_DEFAULT | {"cohere-chat"}):
        assert sampling_of(f"[('_type', {t!r}), ('temperature', None)]").samples, t
    for t in ("ragcache-local", "fake-chat-model", "custom"):
        assert not sampling_of(f"[('_type', {t!r}), ('temperature', None)]").samples, t
    assert sampling_of("[('_type', 'ragcache-local'), ('temperature', 0.7)]").samples


def test_the_unset_temperature_of_each_backend_is_as_before():
    from ragcache.answering import UNSET_TEMPERATURE

    assert {k: UNSET_TEMPERATURE[k] for k in ("anthropic", "openai", "local")} == {
        "anthropic": 1.0, "openai": 1.0, "local": 0.0}
    with pytest.raises(TypeError):
        UNSET_TEMPERATURE["anthropic"] = 0.0  # read-only: the row decides


def test_the_backends_are_named_by_their_rows():
    from ragcache.engine.backend import LocalBackend
    from ragcache.providers.anthropic.backend import AnthropicBackend
    from ragcache.providers.openai.backend import OpenAIBackend

    assert [provider(b.name) for b in (AnthropicBackend, OpenAIBackend, LocalBackend)] == list(PROVIDERS[:3])


@pytest.mark.parametrize("name", ["anthropic", "openai"])
@pytest.mark.parametrize("usage", [
    None, {}, {"input_tokens": 7, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 3, "output_tokens": 2},
    {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 80}, "completion_tokens": 4},
    {"prompt_cache_hit_tokens": 30, "prompt_cache_miss_tokens": 70, "prompt_tokens_details": {"cached_tokens": 30}},
    {"input_tokens": None, "output_tokens": True, "cache_read_input_tokens": -4},
])
def test_the_names_kept_for_older_code_read_the_table(name, usage):
    with pytest.warns(DeprecationWarning, match=f"usage_of\\('{name}'"):
        old = getattr(CacheUsage, f"from_{name}")(usage, cost_usd=0.5, uncached_cost_usd=1.0)
    assert old == usage_of(name, usage, cost_usd=0.5, uncached_cost_usd=1.0)
    assert old.reused + old.computed + old.recomputed == old.prompt_tokens


def test_the_moved_openai_field_lists_still_import():
    import ragcache.backend as backend
    from ragcache.providers.openai.provider import OPENAI_CACHE_READ

    with pytest.warns(DeprecationWarning, match="ragcache.providers.openai.provider"):
        assert backend.OPENAI_CACHE_READ is OPENAI_CACHE_READ
    with pytest.raises(AttributeError):
        backend.NOT_A_NAME  # noqa: B018


# -- unknown providers ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["mistery-llm", "", None, "ANTHROPIC", "local"])
def test_a_provider_without_a_dialect_reports_unknown_usage(name):
    u = usage_of(name, {"input_tokens": 9, "prompt_tokens": 9, "output_tokens": 3})
    assert u == CacheUsage()


@pytest.mark.parametrize("native", ["end_turn", "stop", None, 3, "STOP"])
def test_an_unknown_provider_never_reports_a_finished_answer(native):
    assert provider("mistery-llm") is UNKNOWN and UNKNOWN.finish_reason(native) == "incomplete"


def test_framework_lookups_fall_back_to_unknown():
    class Custom:
        _llm_type = "my-own-chat"

    assert for_langchain(Custom()) is UNKNOWN and for_langchain(llm_type=None) is UNKNOWN
    assert for_langchain(llm_type=["not", "a", "type"]) is UNKNOWN  # type: ignore[arg-type]
    assert for_llama_index(object()) is UNKNOWN
    assert UNKNOWN.unset_temperature == 0.0 and UNKNOWN.prompt_caching == "none"


def test_langchain_finds_chat_anthropic_by_type_and_by_class():
    from langchain_anthropic import ChatAnthropic

    from langchain_ragcache.providers import takes_breakpoints

    model = ChatAnthropic(model="claude-sonnet-4-6", api_key="x")
    assert for_langchain(model).name == "anthropic" and takes_breakpoints(model)

    class ChatAnthropic2:  # a non-LangChain object named like it: found by class name, but no chat model
        pass

    ChatAnthropic2.__name__ = "ChatAnthropic"
    assert for_langchain(ChatAnthropic2()).name == "anthropic" and not takes_breakpoints(ChatAnthropic2())


def test_llama_index_finds_its_llms_by_class():
    from llama_index.core.llms import MockLLM
    from llama_index.llms.ragcache import RagCacheLLM

    from llama_index.query_engine.ragcache import llm_kind

    assert for_llama_index(MockLLM()) is UNKNOWN and llm_kind(MockLLM()) == "generic"
    assert for_llama_index(RagCacheLLM.model_construct()).name == "local"
    assert llm_kind(RagCacheLLM.model_construct()) == "ragcache"


# -- refusing a bad row ----------------------------------------------------------------------------
@pytest.mark.parametrize(("kw", "match"), [
    ({"name": ""}, "non-empty name"),
    ({"name": "x", "finish_reasons": {"done": "finished"}}, "not ragcache's words"),
    ({"name": "x", "unset_temperature": -1.0}, "unset_temperature"),
    ({"name": "x", "unset_temperature": True}, "unset_temperature"),
    ({"name": "x", "unset_temperature": float("nan")}, "unset_temperature"),
    ({"name": "x", "prompt_caching": "markers"}, "prompt_caching"),
])
def test_a_bad_row_is_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        Provider(**kw)


def test_register_refuses_a_taken_name_a_spelling_with_two_meanings_and_a_non_row():
    with pytest.raises(ValueError, match="already in the table"):
        register(Provider(name="anthropic"))
    with pytest.raises(ValueError, match="one spelling has one meaning"):
        register(Provider(name="odd", finish_reasons={"END_TURN": "length"}))
    with pytest.raises(TypeError, match="Provider"):
        register({"name": "dict"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shipped rows stay"):
        unregister("openai")
    with pytest.raises(ValueError, match="not a registered provider"):
        unregister("never-registered")
    assert rows() == PROVIDERS and "odd" not in {p.name for p in rows()}


def test_every_shipped_row_speaks_ragcaches_words():
    for p in PROVIDERS:
        assert set(p.finish_reasons.values()) <= set(FINISH_REASONS), p.name
        assert p.unset_temperature >= 0, p.name


# -- a new provider, added as docs/design/architecture.md says ---------------------------------------
def _acme_usage(usage: Any) -> UsageCounts:
    """Acme's dialect: ``{"fresh": n, "remembered": n, "saved": n, "said": n}``."""
    return UsageCounts(input_tokens=count_of(usage, "fresh"), cache_read=count_of(usage, "remembered"),
                       cache_write=count_of(usage, "saved"), completion_tokens=count_of(usage, "said"))


class AcmeLLM:
    """Stands for a LlamaIndex LLM class of the new provider (the table matches it by class)."""

    model = "acme-1"
    metadata = None


ACME = Provider(name="acme", usage=_acme_usage, finish_reasons={"ACME_DONE": "stop", "ACME_BUDGET": "length"},
                finish_field="acme_reason", unset_temperature=0.4, prompt_caching="automatic-prefix",
                langchain_types=frozenset({"acme-chat"}), llama_index_classes=(f"{__name__}:AcmeLLM",))


@pytest.fixture
def acme():
    register(ACME)
    try:
        yield ACME
    finally:
        unregister("acme")


def test_a_new_provider_is_unknown_until_registered():
    from langchain_core.messages import AIMessage

    from langchain_ragcache._keys import sampling_of
    from langchain_ragcache.results import finish_reason_of

    assert usage_of("acme", {"fresh": 5}) == CacheUsage()
    assert finish_reason_of(AIMessage(content="x", response_metadata={"finish_reason": "ACME_DONE"})) == "incomplete"
    assert not sampling_of("[('_type', 'acme-chat'), ('temperature', None)]").samples
    assert for_llama_index(AcmeLLM()) is UNKNOWN


def test_a_new_provider_is_read_everywhere(acme):
    from langchain_core.messages import AIMessage
    from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole

    from langchain_ragcache._keys import sampling_of
    from langchain_ragcache.results import finish_reason_of
    from llama_index.query_engine.ragcache.backend import LlamaIndexBackend
    from ragcache.prompt.layout import PromptLayout

    # the record: the row's dialect
    u = usage_of("acme", {"fresh": 5, "remembered": 20, "saved": 3, "said": 7}, cost_usd=0.1)
    assert (u.prompt_tokens, u.cache_read, u.cache_write, u.completion_tokens, u.cost_usd) == (28, 20, 3, 7, 0.1)
    # LangChain: its end reasons and its unset temperature
    for native, word in (("ACME_DONE", "stop"), ("acme_budget", "length"), ("ACME_OTHER", "incomplete")):
        assert finish_reason_of(AIMessage(content="x", response_metadata={"finish_reason": native})) == word
    assert sampling_of("[('_type', 'acme-chat'), ('temperature', None)]").samples
    # LlamaIndex: found by class; named, read and laid out by the row
    be = LlamaIndexBackend(AcmeLLM())
    assert be.provider is acme and be.name == "acme" and be.kind == "generic"
    resp = ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content="hi"),
                        raw={"acme_reason": "ACME_BUDGET", "usage": {"fresh": 4, "remembered": 6, "said": 2}})
    r = be.result(resp, "hi", 0.01)
    assert (r.finish_reason, r.layer, r.usage.cache_read, r.usage.prompt_tokens) == ("length", "provider-cache", 6, 10)
    cut = ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content="h"), raw={})
    assert be.result(cut, "h", 0.01).finish_reason == "incomplete"  # a known provider that said nothing
    laid = be.messages(PromptLayout.build(question="q", documents=["d"]))
    assert laid.markers == 0 and laid.breakpoints == []


def test_an_unknown_llama_index_llm_is_read_at_best_effort_as_before():
    from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
    from llama_index.core.llms import MockLLM

    from llama_index.query_engine.ragcache.backend import LlamaIndexBackend

    be = LlamaIndexBackend(MockLLM())
    assert be.name == "llamaindex-MockLLM"
    said_nothing = ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content="a"), raw={})
    assert be.result(said_nothing, "a", 0.0).finish_reason == "stop"  # LlamaIndex has no common end field
    openai_style = ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content="a"),
                                raw={"finish_reason": "length",
                                     "usage": {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 4}}})
    r = be.result(openai_style, "a", 0.0)
    assert (r.finish_reason, r.usage.cache_read, r.usage.prompt_tokens) == ("length", 4, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the library itself never calls the deprecated names
        be.result(openai_style, "a", 0.0)
