"""What the caching proxy relays where it does not cache: the upstream headers that steer clients,
and the errors of an upstream that cannot be reached.

Clients decide when and whether to retry from the response headers (the Anthropic SDK reads
``retry-after-ms``, then ``retry-after``, and never retries when ``x-should-retry: false``), keep
``request-id`` for support, and pace themselves by ``anthropic-ratelimit-*``. A proxy that relays
only status and body makes a client retry too soon, retry what it was told not to, and lose the
id of the failed request (litellm PR #37767, aisix #144). :func:`steering_headers` is the one list,
applied to every upstream response the proxy relays: JSON and streamed, errors and successes.

An upstream that cannot be reached is a ``502`` (``api_error``), one that does not answer in time a
``504`` (``timeout_error``), each with the Messages API's error body, so the SDK reads it as the
API's own error (and retries it as such) instead of a plain-text ``500``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx

STEERING_HEADERS = ("retry-after", "retry-after-ms", "x-should-retry", "request-id", "x-request-id")
"""Response headers relayed from upstream as they are, besides every ``anthropic-ratelimit-*`` header."""
STEERING_PREFIXES = ("anthropic-ratelimit-",)


def steering_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of an upstream response that steer its client (:data:`STEERING_HEADERS` and
    every header starting with one of :data:`STEERING_PREFIXES`), lower-cased, values as sent."""
    out: dict[str, str] = {}
    for k, v in headers.items():
        name = k.lower()
        if name in STEERING_HEADERS or name.startswith(STEERING_PREFIXES):
            out[name] = v
    return out


def error_body(kind: str, message: str) -> dict[str, Any]:
    """The Messages API's error body: ``{"type": "error", "error": {"type": kind, "message": message}}``."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def upstream_failure(e: httpx.HTTPError, upstream: str) -> tuple[int, dict[str, Any]]:
    """``(status, error body)`` for an upstream call that raised ``e`` before a response came:
    ``504`` / ``timeout_error`` for a timeout, else ``502`` / ``api_error`` (refused connection,
    unknown host, a connection cut before the status line)."""
    if isinstance(e, httpx.TimeoutException):
        return 504, error_body("timeout_error", f"the upstream {upstream} did not answer in time "
                                                f"({type(e).__name__}); try again, or raise the proxy's timeout")
    return 502, error_body("api_error", f"the upstream {upstream} could not be reached ({type(e).__name__}: {e}); "
                                        "check --upstream and that the upstream is up")


def error_event(body: Mapping[str, Any]) -> bytes:
    """An ``error`` event of a Messages stream carrying ``body``: how the API ends a stream that
    fails after it started (its status line has gone out already)."""
    return f"event: error\ndata: {json.dumps(body)}\n\n".encode()


__all__ = ["STEERING_HEADERS", "STEERING_PREFIXES", "error_body", "error_event", "steering_headers",
           "upstream_failure"]
