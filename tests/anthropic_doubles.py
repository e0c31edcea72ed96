"""A fake Anthropic Messages API upstream, shared by the proxy tests that run the real ``anthropic`` SDK
against :class:`ragcache.server.proxy.AnthropicProxy` over a local upstream on loopback
(``test_model_snapshot.py``, ``test_proxy_transparent.py``): a message body, its server-sent events, and
the upstream server around a test's own ``messages`` handler. Imports starlette (with the server extra);
a test module skips on a missing ``anthropic`` before importing this one."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route

from ragcache.server.app import running_server

Handler = Callable[[Request], Awaitable[Any]]
"""A ``POST /v1/messages`` handler: the request in, a Starlette response out."""


def sse(kind: str, data: dict) -> bytes:
    """One server-sent event of the Messages API stream."""
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


def message(text: str, *, model: str, msg_id: str = "msg_up", usage: dict | None = None) -> dict:
    """A complete Messages API response: one text block, ``end_turn``, ``usage`` (default 30 in, 3 out)."""
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": usage or {"input_tokens": 30, "output_tokens": 3}}


def message_events(msg: dict) -> Iterator[bytes]:
    """``msg`` (:func:`message`) as the stream sends it: ``message_start`` (its usage, no content), one text
    block in one delta, ``message_delta`` (its stop reason and output tokens), ``message_stop``."""
    text = msg["content"][0]["text"]
    yield sse("message_start", {"type": "message_start", "message": {**msg, "content": [], "stop_reason": None}})
    yield sse("content_block_start", {"type": "content_block_start", "index": 0,
                                      "content_block": {"type": "text", "text": ""}})
    yield sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                      "delta": {"type": "text_delta", "text": text}})
    yield sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    yield sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": msg["stop_reason"]},
                                "usage": {"output_tokens": msg["usage"]["output_tokens"]}})
    yield sse("message_stop", {"type": "message_stop"})


@contextmanager
def running_upstream(messages: Handler) -> Iterator[str]:
    """A Messages API on loopback whose ``POST /v1/messages`` is ``messages``; yields its base URL."""
    app = Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])
    with running_server(None, app=app) as url:
        yield url


__all__ = ["Handler", "message", "message_events", "running_upstream", "sse"]
