"""The caching proxy's rule for a raw Messages API body: which fields shape the answer.

The proxy (:mod:`ragcache.server.proxy`) keys a raw API body, not a laid-out request: its known
answer-shaping fields become the partition's ``params`` (:func:`ragcache.request.cache_request`), and
a field it does not know bypasses the semantic cache. These lists are the proxy's: the semantic
cache receives a key and never reads a request body.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ANTHROPIC_SHAPING = frozenset({
    "max_tokens", "temperature", "top_p", "top_k", "stop_sequences", "tool_choice", "tools", "thinking", "system",
    "output_config", "output_format", "container", "mcp_servers", "context_management", "metadata"})
"""Messages API body fields that change the answer (its content, shape, length or tool use): each is
part of the partition of a request that carries it (``metadata`` too: it names the end user)."""

ANTHROPIC_NEUTRAL = frozenset({"model", "messages", "stream", "service_tier", "cache_control", "inference_geo"})
"""Messages API body fields that do not go into the params (``model`` and ``messages`` are keyed on
their own; streaming, the service tier, the top-level caching marker and the region leave the
answer unchanged)."""


def shaping_fields(body: Mapping[str, Any], *, shaping: frozenset[str] = ANTHROPIC_SHAPING,
                   neutral: frozenset[str] = ANTHROPIC_NEUTRAL) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Split a request body: ``(fields that shape the answer, names of unknown fields)``.

    The rule for every entry point that keys a raw API body (the caching proxy): a known shaping
    field goes into the partition's ``params``; a field in neither set is *unknown* (a new API
    feature such as a structured-output option), and the caller must then bypass the semantic cache
    (and log it) rather than ignore a field that may change the answer.
    """
    params = {k: body[k] for k in sorted(body) if k in shaping}
    unknown = tuple(sorted(k for k in body if k not in shaping and k not in neutral))
    return params, unknown


__all__ = ["ANTHROPIC_NEUTRAL", "ANTHROPIC_SHAPING", "shaping_fields"]
