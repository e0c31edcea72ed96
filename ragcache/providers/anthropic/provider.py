"""Anthropic's row of the provider table (:mod:`ragcache.providers.table`): the Messages API's usage
dialect, its ``stop_reason`` words, its default temperature and its ``cache_control`` breakpoints.

Read by the Anthropic backend, the caching proxy, the local server's metrics, the LangChain package
(``ChatAnthropic``) and the LlamaIndex backend (``llama_index.llms.anthropic.Anthropic``), through the
table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragcache.backend import FinishReason
from ragcache.providers.spec import Provider, UsageCounts, count_of

FINISH_REASONS: Mapping[str, FinishReason] = {
    "end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
    "pause_turn": "pause_turn", "refusal": "refusal", "model_context_window_exceeded": "context_window",
}
"""Anthropic Messages ``stop_reason`` -> :data:`ragcache.backend.FinishReason`: the one mapping of
this provider. A null stop reason (a stream cut before its ``message_delta``) and any value not
listed are ``incomplete``."""


def read_usage(usage: Any) -> UsageCounts:
    """The usage dialect of an Anthropic Messages response: ``usage`` is the SDK's ``Usage`` object or its
    dict (``input_tokens`` uncached, ``cache_read_input_tokens``, ``cache_creation_input_tokens``,
    ``output_tokens``; missing or ``None`` fields count 0, a missing ``usage`` is all zeros)."""
    return UsageCounts(input_tokens=count_of(usage, "input_tokens"),
                       cache_read=count_of(usage, "cache_read_input_tokens"),
                       cache_write=count_of(usage, "cache_creation_input_tokens"),
                       completion_tokens=count_of(usage, "output_tokens"))


ANTHROPIC = Provider(
    name="anthropic",
    usage=read_usage,
    finish_reasons=FINISH_REASONS,
    finish_field="stop_reason",
    stop_sequence_reason="stop_sequence",  # a plain end is end_turn (listed first)
    unset_temperature=1.0,  # the Messages API samples at 1.0 when no temperature is sent
    prompt_caching="breakpoints",
    langchain_types=frozenset({"anthropic-chat", "anthropic-llm"}),
    langchain_classes=frozenset({"ChatAnthropic"}),
    llama_index_classes=("llama_index.llms.anthropic:Anthropic",),
)
"""Anthropic (the Messages API, also through Bedrock / Vertex SDK clients of the same shape)."""

__all__ = ["ANTHROPIC", "FINISH_REASONS", "read_usage"]
