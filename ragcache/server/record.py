"""One record per local-server response: every ``x-ragcache-*`` header and the ``usage`` block derive from it.

A :class:`LocalRecord` is built once from the engine's :class:`~ragcache.engine.records.RequestStats`
(through :func:`ragcache.engine.backend.usage_of` and :func:`~ragcache.engine.backend.layer_of`,
the one mapping of the engine's stats) and, on the Anthropic route, the emulated prompt cache's
:class:`~ragcache.server.cache_rules.CacheOutcome`. The headers (:meth:`LocalRecord.headers`), the
OpenAI ``usage`` (:meth:`LocalRecord.openai_usage`) and the Anthropic ``usage``
(:meth:`LocalRecord.anthropic_usage`) are views of it, so they cannot disagree: on the Anthropic
route the engine reuses no more prefix KV than the emulated cache read (the server passes the
read's end as the engine's ``prefix_limit``), so a request whose usage says
``cache_read_input_tokens=0`` also says ``x-ragcache-prefill-reused: 0``.

Headers (token counts of the engine's prompt, chat-template tokens included):

- ``x-ragcache-layer``: which local cache served the prefill (``prefix``, ``chunk``,
  ``prefix+chunk``) or ``model``;
- ``x-ragcache-prompt-tokens``: the engine's prompt length;
- ``x-ragcache-prefill-reused``: tokens whose KV was reused (prefix + chunk);
- ``x-ragcache-prefix-reused`` / ``x-ragcache-chunk-reused`` / ``x-ragcache-recomputed``: the split,
  and the chunk tokens CacheBlend recomputed;
- Anthropic route only: ``x-ragcache-cache-read`` / ``x-ragcache-cache-write``: the emulated cache's
  read and written tokens (the usage's counts, block text only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragcache.backend import CacheUsage, Layer
from ragcache.engine.backend import layer_of, usage_of
from ragcache.server.cache_rules import CacheOutcome


@dataclass(frozen=True, slots=True)
class LocalRecord:
    """What one local-server response reports.

    Attributes:
        usage: the engine's accounting (:class:`~ragcache.backend.CacheUsage`; tokens).
        layer: the local layer that served the prefill (:func:`~ragcache.engine.backend.layer_of`).
        provider: the emulated Anthropic prompt cache's outcome (``None`` on the OpenAI route).
    """

    usage: CacheUsage
    layer: Layer
    provider: CacheOutcome | None = None

    @classmethod
    def of(cls, stats: Any, provider: CacheOutcome | None = None) -> LocalRecord:
        """The record of a request's :class:`~ragcache.engine.records.RequestStats` (its prefill part is
        final from the first stream event on; ``decode_tokens`` grows until the last)."""
        return cls(usage_of(stats), layer_of(stats.prefix_tokens_reused, stats.chunk_tokens_reused), provider)

    def headers(self) -> dict[str, str]:
        """The ``x-ragcache-*`` response headers (see the module docstring)."""
        u = self.usage
        h = {"x-ragcache-layer": self.layer, "x-ragcache-prompt-tokens": str(u.prompt_tokens),
             "x-ragcache-prefill-reused": str(u.reused), "x-ragcache-prefix-reused": str(u.prefix_reused),
             "x-ragcache-chunk-reused": str(u.chunk_reused), "x-ragcache-recomputed": str(u.recomputed)}
        if self.provider is not None:
            h["x-ragcache-cache-read"] = str(self.provider.read_tokens)
            h["x-ragcache-cache-write"] = str(self.provider.write_tokens)
        return h

    def openai_usage(self) -> dict[str, Any]:
        """OpenAI's ``usage``: ``cached_tokens`` is the engine's reuse (prefix + chunk tokens kept)."""
        u = self.usage
        return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
                "total_tokens": u.prompt_tokens + u.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": u.reused, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                              "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}

    def anthropic_usage(self, output_tokens: int | None = None) -> dict[str, Any]:
        """The Messages API ``usage`` of the emulated cache (``output_tokens``: default the engine's
        completion tokens; ``message_start`` sends 1, as the API does).

        Raises:
            ValueError: the record has no provider outcome (an OpenAI-route record).
        """
        if self.provider is None:
            raise ValueError("this record has no Anthropic prompt-cache outcome (an OpenAI-route response)")
        return self.provider.usage(self.usage.completion_tokens if output_tokens is None else output_tokens)


__all__ = ["LocalRecord"]
