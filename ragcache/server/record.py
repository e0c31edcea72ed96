"""One record per local-server response: every ``x-ragcache-*`` header and the ``usage`` block derive from it.

A :class:`LocalRecord` is built once from the engine's :class:`~ragcache.engine.records.RequestStats`
(through :func:`ragcache.engine.backend.usage_of` and :func:`~ragcache.engine.backend.layer_of`,
the one mapping of the engine's stats) and, on the Anthropic route, the emulated prompt cache's
:class:`~ragcache.server.cache_rules.CacheOutcome`. The headers (:meth:`LocalRecord.headers`), the
OpenAI ``usage`` (:meth:`LocalRecord.openai_usage`), the Anthropic ``usage``
(:meth:`LocalRecord.anthropic_usage`) and the ``ragcache`` object of both routes' response bodies
(:meth:`LocalRecord.body`) are views of it, so they cannot disagree: on the Anthropic route the
engine reuses no more prefix KV than the emulated cache read (the server passes the read's end as
the engine's ``prefix_limit``), so a request whose usage says ``cache_read_input_tokens=0`` also
says ``x-ragcache-prefix-reused: 0``. Chunk KV (documents reused at any position) is the engine's
own saving on both routes, beyond what the emulated provider cache bills: it shows in
``x-ragcache-chunk-reused``, never in the Anthropic ``usage``.

Headers (token counts of the engine's prompt, chat-template tokens included):

- ``x-ragcache-layer``: which local cache served the prefill (``prefix``, ``chunk``,
  ``prefix+chunk``) or ``model``;
- ``x-ragcache-prompt-tokens``: the engine's prompt length;
- ``x-ragcache-prefill-reused``: tokens whose KV was reused (prefix + chunk);
- ``x-ragcache-prefix-reused`` / ``x-ragcache-chunk-reused`` / ``x-ragcache-recomputed``: the split,
  and the chunk tokens CacheBlend recomputed;
- ``x-ragcache-approximate``: ``true`` when the answer may differ from exact prefill and decoding
  (blended chunk KV, a quantized KV decode), else ``false``; with a blend, ``x-ragcache-blend-setting``
  (the setting's name, e.g. ``infoflow r=0.15``) and ``x-ragcache-recompute-ratio``;
- Anthropic route only: ``x-ragcache-cache-read`` / ``x-ragcache-cache-write``: the emulated cache's
  read and written tokens (the usage's counts, block text only).

Bodies: both routes add ``"ragcache": {"layer", "approximate", "blend_setting", "recompute_ratio",
"decode_cache"}`` (:meth:`LocalRecord.body`) to the JSON response, and to the first and last events of
a stream (OpenAI: the first chunk and the chunk with ``finish_reason``; Anthropic: ``message_start``'s
message and ``message_delta``). Clients ignore the unknown field; the SDKs keep it (``model_extra``).
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
        approximate / blend_setting / recompute_ratio / decode_cache: whether the answer may differ from
            exact prefill and decoding, the blend setting's name and r of a blended prefill (else
            ``None``), and the decode cache's format tag (``"dynamic"``: exact).
    """

    usage: CacheUsage
    layer: Layer
    provider: CacheOutcome | None = None
    approximate: bool = False
    blend_setting: str | None = None
    recompute_ratio: float | None = None
    decode_cache: str = "dynamic"

    @classmethod
    def of(cls, stats: Any, provider: CacheOutcome | None = None) -> LocalRecord:
        """The record of a request's :class:`~ragcache.engine.records.RequestStats` (its prefill part is
        final from the first stream event on; ``decode_tokens`` grows until the last)."""
        approximate = bool(stats.approximate)
        blended = approximate and stats.blend_setting is not None
        return cls(usage_of(stats), layer_of(stats.prefix_tokens_reused, stats.chunk_tokens_reused), provider,
                   approximate, stats.blend_setting if blended else None, stats.recompute_ratio if blended else None,
                   str(stats.decode_cache))

    def body(self) -> dict[str, Any]:
        """The ``ragcache`` object of a response body: ``layer``, ``approximate``, ``blend_setting``,
        ``recompute_ratio``, ``decode_cache`` (see the module docstring)."""
        return {"layer": self.layer, "approximate": self.approximate, "blend_setting": self.blend_setting,
                "recompute_ratio": self.recompute_ratio, "decode_cache": self.decode_cache}

    def headers(self) -> dict[str, str]:
        """The ``x-ragcache-*`` response headers (see the module docstring)."""
        u = self.usage
        h = {"x-ragcache-layer": self.layer, "x-ragcache-prompt-tokens": str(u.prompt_tokens),
             "x-ragcache-prefill-reused": str(u.reused), "x-ragcache-prefix-reused": str(u.prefix_reused),
             "x-ragcache-chunk-reused": str(u.chunk_reused), "x-ragcache-recomputed": str(u.recomputed),
             "x-ragcache-approximate": "true" if self.approximate else "false"}
        if self.blend_setting is not None:
            h["x-ragcache-blend-setting"] = self.blend_setting.encode("ascii", "replace").decode("ascii")
        if self.recompute_ratio is not None:
            h["x-ragcache-recompute-ratio"] = f"{self.recompute_ratio:g}"
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
