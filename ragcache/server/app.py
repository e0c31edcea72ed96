"""The local server's one Starlette app: the Anthropic Messages API (:mod:`.anthropic`) and the
OpenAI chat-completions API (:mod:`.openai`) on the same engine, so both share its prefix and
chunk KV caches. :func:`ragcache.server.anthropic.create_app`, ``serve`` and ``running_server``
build this app."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.applications import Starlette

from ragcache.server.anthropic import AnthropicLocalServer
from ragcache.server.openai import OpenAILocalServer


def create_local_app(engine: Any, *, models: Sequence[str] | None = None, default_max_tokens: int = 256,
                     **anthropic: Any) -> Starlette:
    """One app answering ``POST /v1/messages``, ``POST /v1/messages/count_tokens``,
    ``POST /v1/chat/completions`` and ``GET /v1/models`` with ``engine``.

    Args:
        models / default_max_tokens: see :class:`~ragcache.server.openai.OpenAILocalServer`.
        **anthropic: keyword arguments of :class:`~ragcache.server.anthropic.AnthropicLocalServer`
            (``min_tokens``, ``clock``).
    """
    messages = AnthropicLocalServer(engine, **anthropic)
    chat = OpenAILocalServer(engine, models=models, default_max_tokens=default_max_tokens)
    return Starlette(routes=[*messages.app.routes, *chat.routes])


__all__ = ["create_local_app"]
