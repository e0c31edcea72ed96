"""Server-sent events for both servers and the proxy, framed by ``sse-starlette``.

``sse-starlette``'s :class:`~sse_starlette.EventSourceResponse` writes the ``event:`` / ``data:``
lines, sends a comment ping every 15 s on an idle stream (both SDKs skip comments), sets the
no-cache / no-buffering headers, and cancels the event generator when the client goes away
(which stops generation within one decode step). Lines end with ``\\n``, as the Anthropic and
OpenAI APIs send them (and as :class:`ragcache.server.message_events.SSEParser` reads them).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

try:
    from sse_starlette import EventSourceResponse, ServerSentEvent
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("the servers need sse-starlette: pip install 'ragcache[anthropic]' or 'ragcache[openai]'") from e

PING_S = 15.0
"""Seconds of silence before a comment ping keeps the connection alive."""


def anthropic_event(kind: str, data: Mapping[str, Any]) -> ServerSentEvent:
    """One Messages API event: ``event: <kind>`` and its JSON ``data``."""
    return ServerSentEvent(data=json.dumps(data), event=kind, sep="\n")


def openai_event(data: Mapping[str, Any] | str) -> ServerSentEvent:
    """One chat-completions chunk (``data: <json>``), or the final ``data: [DONE]`` for a string."""
    return ServerSentEvent(data=data if isinstance(data, str) else json.dumps(data), sep="\n")


def event_stream(events: AsyncIterator[ServerSentEvent], *, headers: Mapping[str, str] | None = None) -> EventSourceResponse:
    """The streaming response for ``events`` (``text/event-stream``)."""
    return EventSourceResponse(events, headers=dict(headers or {}), ping=PING_S, sep="\n")


__all__ = ["PING_S", "anthropic_event", "event_stream", "openai_event"]
