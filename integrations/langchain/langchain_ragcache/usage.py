"""The one mapping between LangChain's usage record and ragcache's :class:`~ragcache.backend.CacheUsage`.

LangChain counts tokens in ``AIMessage.usage_metadata`` (``input_tokens`` is the whole prompt,
cache reads and writes included; ``input_token_details`` splits out ``cache_read`` and
``cache_creation``; langchain-anthropic reports writes per TTL as ``ephemeral_5m_input_tokens`` /
``ephemeral_1h_input_tokens`` and then zeroes ``cache_creation``). ragcache counts them in
:class:`CacheUsage` (every prompt token reused, recomputed or computed). Both directions live here,
so the layout middleware, the callback handler and the chat model read usage the same way, and a
semantic hit (no model call) reports zero tokens everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import UsageMetadata

from ragcache.backend import CacheUsage

TTL_WRITE_KEYS = ("ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens")
"""langchain-anthropic's per-TTL cache-write counts in ``input_token_details``."""

PROVIDER_USAGE_KEYS = ("token_usage", "usage")
"""``response_metadata`` keys in which providers repeat the call's raw usage (langchain-openai's
``token_usage``, langchain-anthropic's ``usage``): dropped from a served hit, which made no call."""


def usage_metadata(usage: CacheUsage) -> UsageMetadata:
    """LangChain's ``UsageMetadata`` of a :class:`~ragcache.backend.CacheUsage`.

    ``input_tokens`` = prompt tokens, ``output_tokens`` = generated tokens,
    ``input_token_details.cache_read`` = tokens read from a cache (local: prefix and chunk KV
    reused; provider: cache reads), ``cache_creation`` = tokens written to a provider's prompt
    cache (0 for the local engine, whose KV writes cost nothing extra).
    """
    return UsageMetadata(
        input_tokens=int(usage.prompt_tokens),
        output_tokens=int(usage.completion_tokens),
        total_tokens=int(usage.prompt_tokens + usage.completion_tokens),
        input_token_details={"cache_read": int(usage.cache_read), "cache_creation": int(usage.cache_write)},
    )


HIT_USAGE: UsageMetadata = usage_metadata(CacheUsage())
"""The usage of a semantic hit: zero tokens (no model call was made)."""


def cache_write_by_ttl(usage: Mapping[str, Any] | None) -> dict[str, int]:
    """Cache writes per TTL (``ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``) in a
    LangChain ``usage_metadata``; empty when the provider gave no breakdown."""
    details = (usage or {}).get("input_token_details") or {}
    return {k: int(details.get(k) or 0) for k in TTL_WRITE_KEYS if k in details}


def own_record(message: Any) -> Mapping[str, Any] | None:
    """ragcache's own record of a chat message (``response_metadata["ragcache"]`` with a ``usage``
    mapping: :class:`~langchain_ragcache.ChatRagCache`, a semantic hit, the layout middleware), else
    ``None``. ragcache's local servers also put a ``"ragcache"`` object in their response bodies
    (the local engine's layer, e.g. ``model``, and the blend labels), which langchain-anthropic copies
    into ``response_metadata``: that one has no ``usage`` and is not this record, since a call through
    a provider client is labelled by :func:`ragcache.backend.provider_layer`."""
    meta = getattr(message, "response_metadata", None) or {}
    own = meta.get("ragcache") if isinstance(meta, Mapping) else None
    return own if isinstance(own, Mapping) and isinstance(own.get("usage"), Mapping) else None


def cache_usage(message: Any) -> CacheUsage | None:
    """ragcache's :class:`CacheUsage` of a LangChain chat message, or ``None`` when it reports none.

    A message that carries ragcache's own record (``response_metadata["ragcache"]["usage"]``:
    :class:`~langchain_ragcache.ChatRagCache`, a semantic hit) is read from it, exactly. Otherwise
    from ``usage_metadata``: cache reads are ``cache_read``; cache writes are ``cache_creation`` plus
    the per-TTL counts; the uncached input is ``input_tokens`` less both (never below 0).
    """
    own = own_record(message)
    if own is not None:
        known = CacheUsage.__dataclass_fields__
        try:
            return CacheUsage(**{k: v for k, v in own["usage"].items() if k in known})
        except (TypeError, ValueError):
            pass  # a record we cannot read: fall back to LangChain's counts
    um = getattr(message, "usage_metadata", None)
    if not um:
        return None
    details = um.get("input_token_details") or {}
    read = int(details.get("cache_read") or 0)
    write = int(details.get("cache_creation") or 0) + sum(cache_write_by_ttl(um).values())
    return CacheUsage.provider(input_tokens=max(int(um.get("input_tokens") or 0) - read - write, 0),
                               cache_read=read, cache_write=write,
                               completion_tokens=int(um.get("output_tokens") or 0))


def with_one_write_total(usage: Mapping[str, Any], cache_write: int) -> UsageMetadata:
    """``usage`` with the per-TTL write counts folded into one ``cache_creation`` total and
    ``cache_read`` always present (what ragcache's callbacks and cost tables read)."""
    details = {k: v for k, v in dict(usage.get("input_token_details") or {}).items() if k not in TTL_WRITE_KEYS}
    details["cache_read"] = int(details.get("cache_read") or 0)
    details["cache_creation"] = int(cache_write)
    return UsageMetadata(**{**dict(usage), "input_token_details": details})  # type: ignore[typeddict-item]


__all__ = ["HIT_USAGE", "PROVIDER_USAGE_KEYS", "TTL_WRITE_KEYS", "cache_usage", "cache_write_by_ttl", "own_record",
           "usage_metadata", "with_one_write_total"]
