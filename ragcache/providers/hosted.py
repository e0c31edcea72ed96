"""Rows of the provider table (:mod:`ragcache.providers.table`) for hosted chat APIs that ragcache has
no backend for, known through their LangChain models: how they spell the end of an answer and whether
they sample when no temperature is sent. Their usage is read from LangChain's own ``usage_metadata``
(:func:`langchain_ragcache.usage.cache_usage`), so they declare no usage dialect.

A provider with a backend of its own gets its own
module (as :mod:`ragcache.providers.anthropic.provider`); one known only by its spellings may join this one.
"""

from __future__ import annotations

from ragcache.providers.spec import Provider

GOOGLE = Provider(
    name="google",
    finish_reasons={"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter",
                    "RECITATION": "content_filter", "BLOCKLIST": "content_filter",
                    "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
                    "MAX_OUTPUT_TOKENS": "length"},
    finish_field="finish_reason",  # upper case in Gemini's responses
    unset_temperature=1.0,
    prompt_caching="automatic-prefix",
    langchain_types=frozenset({"chat-google-generative-ai"}),
)
"""Google Gemini (``ChatGoogleGenerativeAI``)."""

OLLAMA = Provider(
    name="ollama",
    finish_reasons={"stop": "stop", "length": "length"},
    finish_field="done_reason",
    unset_temperature=0.8,  # Ollama's documented default
    prompt_caching="automatic-prefix",
    langchain_types=frozenset({"chat-ollama", "ollama-chat"}),
)
"""Ollama (``ChatOllama``)."""

MISTRAL = Provider(
    name="mistral",
    finish_reasons={"stop": "stop", "length": "length", "model_length": "length", "tool_calls": "tool_calls",
                    "error": "error"},
    finish_field="finish_reason",
    unset_temperature=0.7,  # Mistral's documented default
    prompt_caching="none",
    langchain_types=frozenset({"mistralai-chat"}),
)
"""Mistral AI (``ChatMistralAI``)."""

BEDROCK = Provider(
    name="bedrock",
    finish_reasons={"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                    "guardrail_intervened": "content_filter"},
    finish_field="stop_reason",
    unset_temperature=1.0,
    prompt_caching="none",
    langchain_types=frozenset({"chat-bedrock-converse", "amazon_bedrock_converse_chat"}),
)
"""Amazon Bedrock's Converse API (``ChatBedrockConverse``)."""

COHERE = Provider(
    name="cohere",
    finish_reasons={"COMPLETE": "stop", "MAX_TOKENS": "length", "TOOL_CALL": "tool_calls", "ERROR": "error"},
    finish_field="finish_reason",
    unset_temperature=0.3,  # Cohere's documented default: a request without a temperature samples
    prompt_caching="none",
    langchain_types=frozenset({"cohere-chat"}),
)
"""Cohere (``ChatCohere``): a call without a temperature samples, so it is a fresh draw, never one stored
sample replayed."""

HUGGINGFACE = Provider(
    name="huggingface",
    finish_reasons={"eos_token": "stop", "length": "length", "stop_sequence": "stop"},
    finish_field="finish_reason",
)
"""Hugging Face text-generation-inference endpoints (their end-reason spellings)."""

HOSTED: tuple[Provider, ...] = (GOOGLE, OLLAMA, MISTRAL, BEDROCK, COHERE, HUGGINGFACE)

__all__ = ["BEDROCK", "COHERE", "GOOGLE", "HOSTED", "HUGGINGFACE", "MISTRAL", "OLLAMA"]
