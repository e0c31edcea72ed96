"""langchain-tests' ChatModelIntegrationTests for ChatRagCache.

The suite runs on ragcache's tiny random Llama (real tokenizer, random weights): the
tests check structure (message types, chunks, usage metadata, stop handling), not
answer quality, so a 2-layer model keeps CI fast. Answer quality on the embedded
SmolLM2-135M-Instruct is covered by the example chain test.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_ragcache import ChatRagCache
from langchain_ragcache.chat_models import TINY_RANDOM_MODEL
from langchain_tests.integration_tests import ChatModelIntegrationTests

# Tool calling and structured output are prompted (langchain_ragcache.tools): the plumbing is
# unit-tested in test_tools.py, but whether a call comes out depends on the model following the
# format. The random 2-layer model never does, and SmolLM2-135M rarely does: expected failures.
_NO_TOOLS = pytest.mark.xfail(
    reason="a random / 135M local model does not reliably emit <tool_call> JSON (prompted tool calling)",
    strict=False)
_NO_STRUCTURED = pytest.mark.xfail(
    reason="structured output is a prompted tool call; a random / 135M local model does not follow the schema",
    strict=False)
_MODEL_VARIANTS = pytest.mark.parametrize("model", [{}, {"output_version": "v1"}], indirect=True)
_SCHEMAS = pytest.mark.parametrize("schema_type", ["pydantic", "typeddict", "json_schema"])

_LONG_SYSTEM = "You are a careful assistant for a hardware store. " * 12


class TestChatRagCacheIntegration(ChatModelIntegrationTests):
    @property
    def chat_model_class(self) -> type[ChatRagCache]:
        return ChatRagCache

    @property
    def chat_model_params(self) -> dict:
        # A short decode budget: the suite checks structure, not long answers.
        return {"model": TINY_RANDOM_MODEL, "max_tokens": 8}

    @property
    def supports_model_override(self) -> bool:
        # Another local model means loading other weights; select it with ChatRagCache(model=...).
        return False

    @property
    def supported_usage_metadata_details(self) -> dict:
        return {"invoke": ["cache_read_input", "cache_creation_input"],
                "stream": ["cache_read_input", "cache_creation_input"]}

    @_NO_TOOLS
    @_MODEL_VARIANTS
    def test_tool_calling(self, model: BaseChatModel) -> None:
        super().test_tool_calling(model)

    @_NO_TOOLS
    async def test_tool_calling_async(self, model: BaseChatModel) -> None:
        await super().test_tool_calling_async(model)

    @_NO_TOOLS
    def test_bind_runnables_as_tools(self, model: BaseChatModel) -> None:
        super().test_bind_runnables_as_tools(model)

    @_NO_TOOLS
    def test_tool_choice(self, model: BaseChatModel) -> None:
        super().test_tool_choice(model)

    @_NO_TOOLS
    def test_tool_calling_with_no_arguments(self, model: BaseChatModel) -> None:
        super().test_tool_calling_with_no_arguments(model)

    @_NO_TOOLS
    @_MODEL_VARIANTS
    def test_agent_loop(self, model: BaseChatModel) -> None:
        super().test_agent_loop(model)

    @_NO_TOOLS
    def test_unicode_tool_call_integration(self, model: BaseChatModel, **kwargs: Any) -> None:
        super().test_unicode_tool_call_integration(model, **kwargs)

    @_NO_STRUCTURED
    @_SCHEMAS
    def test_structured_output(self, model: BaseChatModel, schema_type: str) -> None:
        super().test_structured_output(model, schema_type)

    @_NO_STRUCTURED
    @_SCHEMAS
    async def test_structured_output_async(self, model: BaseChatModel, schema_type: str) -> None:
        await super().test_structured_output_async(model, schema_type)

    @_NO_STRUCTURED
    def test_structured_output_pydantic_2_v1(self, model: BaseChatModel) -> None:
        super().test_structured_output_pydantic_2_v1(model)

    @_NO_STRUCTURED
    def test_structured_output_optional_param(self, model: BaseChatModel) -> None:
        super().test_structured_output_optional_param(model)

    def invoke_with_cache_read_input(self, *, stream: bool = False) -> AIMessage:
        llm = ChatRagCache(model=TINY_RANDOM_MODEL, max_tokens=4)
        msgs = [SystemMessage(_LONG_SYSTEM), HumanMessage("Do you sell hammers?")]
        llm.invoke(msgs)  # fills the exact prefix cache
        out = _run(llm, msgs, stream)
        assert out.usage_metadata["input_token_details"]["cache_read"] > 0
        return out

    def invoke_with_cache_creation_input(self, *, stream: bool = False) -> AIMessage:
        llm = ChatRagCache(model=TINY_RANDOM_MODEL, max_tokens=4)
        doc = "Aisle 7 holds hammers, saws and chisels; aisle 8 holds screws. " * 6
        msgs = [HumanMessage([{"type": "text", "text": doc + str(stream)}, {"type": "text", "text": "Where?"}])]
        return _run(llm, msgs, stream)


def _run(llm: ChatRagCache, msgs: list, stream: bool) -> AIMessage:
    if not stream:
        return llm.invoke(msgs)
    full = None
    for chunk in llm.stream(msgs):
        full = chunk if full is None else full + chunk
    return full
