"""The OpenAI-compatible row of the provider table (:mod:`ragcache.providers.table`): every documented
usage dialect of OpenAI-style servers, their ``finish_reason`` words, their default temperature and
their automatic prefix caching.

Read by the OpenAI-compatible backend, the LangChain package (``ChatOpenAI`` and the hosted
OpenAI-compatible APIs LangChain names) and, as the best-effort reading of an unknown LlamaIndex LLM,
the LlamaIndex backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragcache.backend import FinishReason
from ragcache.providers.spec import Provider, UsageCounts, count_of, field_of

FINISH_REASONS: Mapping[str, FinishReason] = {
    "stop": "stop", "length": "length", "content_filter": "content_filter", "tool_calls": "tool_calls",
    "function_call": "tool_calls",  # the pre-tools name of a tool call
}
"""OpenAI Chat Completions ``finish_reason`` -> :data:`ragcache.backend.FinishReason`: the one mapping
of this provider. A null finish reason (a stream cut before its last chunk, a server that did not
say) and any value not listed are ``incomplete``: never stored as an answer."""

OPENAI_CACHE_READ: tuple[tuple[str, str], ...] = (
    ("details", "cached_tokens"),           # OpenAI, vLLM, SGLang, Groq, OpenRouter, DeepSeek (both shapes)
    ("usage", "prompt_cache_hit_tokens"),   # DeepSeek (prompt_cache_miss_tokens: the rest of the prompt)
    ("usage", "cached_tokens"),             # Kimi / Moonshot: at the top of usage
    ("usage", "cache_read_input_tokens"),   # LiteLLM's Anthropic-style fields
)
"""Where OpenAI-compatible providers report prompt tokens read from their cache: ``(where, field)``,
``details`` being ``usage.prompt_tokens_details`` (or the Responses API's ``input_tokens_details``).
Read by :func:`read_usage`; a count reported in several shapes is read once."""

OPENAI_CACHE_WRITE: tuple[tuple[str, str], ...] = (
    ("details", "cache_write_tokens"),        # OpenRouter
    ("usage", "cache_write_tokens"),          # OpenRouter, at the top of usage
    ("usage", "cache_creation_input_tokens"),  # LiteLLM's Anthropic-style fields
)
"""Where OpenAI-compatible providers report prompt tokens written to their cache (read as
:attr:`ragcache.backend.CacheUsage.cache_write`); the same rule as :data:`OPENAI_CACHE_READ`."""


def read_usage(usage: Any) -> UsageCounts:
    """The usage dialect of an OpenAI-compatible response, in every documented shape (:data:`OPENAI_CACHE_READ`,
    :data:`OPENAI_CACHE_WRITE`); SDK object or dict, the non-streamed ``usage`` or a stream's usage chunk alike.

    Prompt size: ``prompt_tokens`` (Chat Completions), else ``input_tokens`` (Responses API), else
    DeepSeek's ``prompt_cache_hit_tokens + prompt_cache_miss_tokens``. Each dialect's prompt count
    includes the cached and the written tokens. One count reported in two shapes (DeepSeek sends
    ``prompt_cache_hit_tokens`` and ``prompt_tokens_details.cached_tokens``; OpenRouter may send
    ``cache_write_tokens`` at the top and in ``prompt_tokens_details``) is read once: the largest of its
    shapes, never their sum. A read or write above the prompt (a server that reports nonsense) is
    clipped to it (reads first)."""
    details = [d for d in (field_of(usage, "prompt_tokens_details"), field_of(usage, "input_tokens_details"))
               if d is not None]
    hit_miss = count_of(usage, "prompt_cache_hit_tokens") + count_of(usage, "prompt_cache_miss_tokens")
    prompt = count_of(usage, "prompt_tokens") or count_of(usage, "input_tokens") or hit_miss
    cached = min(_largest(usage, details, OPENAI_CACHE_READ), prompt)
    written = min(_largest(usage, details, OPENAI_CACHE_WRITE), prompt - cached)
    completion = count_of(usage, "completion_tokens") or count_of(usage, "output_tokens")
    return UsageCounts(input_tokens=prompt - cached - written, cache_read=cached, cache_write=written,
                       completion_tokens=completion)


def _largest(usage: Any, details: list[Any], fields: tuple[tuple[str, str], ...]) -> int:
    """The largest count among ``fields`` (two shapes of one count are never added)."""
    return max([count_of(usage, f) for w, f in fields if w == "usage"]
               + [count_of(d, f) for w, f in fields if w == "details" for d in details], default=0)


OPENAI = Provider(
    name="openai",
    usage=read_usage,
    finish_reasons=FINISH_REASONS,
    finish_field="finish_reason",
    unset_temperature=1.0,  # OpenAI-compatible APIs sample at 1.0 when no temperature is sent
    prompt_caching="automatic-prefix",
    # LangChain models of OpenAI and of the hosted OpenAI-compatible APIs (they sample when unset)
    langchain_types=frozenset({"openai-chat", "azure-openai-chat", "openai", "groq-chat", "fireworks-chat",
                               "together-chat", "deepseek-chat", "xai-chat"}),
)
"""Any OpenAI-compatible chat-completions server (OpenAI, Azure, vLLM, SGLang, llama.cpp's server, DeepSeek,
Groq, Fireworks, Together, xAI, OpenRouter, ``ragcache serve``)."""

__all__ = ["FINISH_REASONS", "OPENAI", "OPENAI_CACHE_READ", "OPENAI_CACHE_WRITE", "read_usage"]
