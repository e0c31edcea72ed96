"""OpenAI-compatible chat completions, client side: the pipeline backend for any
OpenAI-compatible server (:mod:`.backend`). The local OpenAI-compatible endpoint over the
engine is :mod:`ragcache.server.openai`. Needs the ``openai`` extra for the SDK client."""

from ragcache.providers.openai.backend import OpenAIBackend, OpenAIStats, layout_messages, openai_tools

__all__ = ["OpenAIBackend", "OpenAIStats", "layout_messages", "openai_tools"]
