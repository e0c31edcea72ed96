"""What a provider row says: the columns of the provider table (:mod:`ragcache.providers.table`).

A provider (Anthropic, any OpenAI-compatible server, ragcache's local engine, a hosted chat API known
through LangChain) is one :class:`Provider` record, declared in its own module under
:mod:`ragcache.providers` and listed once in :data:`ragcache.providers.table.PROVIDERS`. Everything
that differs between providers is a column here, read by the core record
(:meth:`Provider.usage_of`), the backends, the servers and both integrations, so none of them branches
on a provider's name:

- ``usage``: its usage dialect, a function from the native usage object to :class:`UsageCounts`
  (``None``: the provider reports no usage ragcache can read);
- ``finish_reasons``: its native end reasons in ragcache's words (:data:`ragcache.backend.FinishReason`), and
  back (:meth:`Provider.native_finish`: what a server speaking its API reports);
- ``unset_temperature``: what a request without a temperature means (also the default of a server
  speaking its API);
- ``prompt_caching``: how its prompt cache is addressed (:data:`PromptCaching`);
- how the frameworks name it: LangChain ``_llm_type`` values and class names, LlamaIndex classes.

The rows sit above the core record (:mod:`ragcache.backend`): they map onto its words
(:data:`~ragcache.backend.FinishReason`) and its record (:class:`~ragcache.backend.CacheUsage`), which
knows no provider.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ragcache.backend import FINISH_REASONS, CacheUsage, FinishReason

PromptCaching = Literal["breakpoints", "automatic-prefix", "local-kv", "none"]
"""How a provider's prompt cache is addressed:

- ``breakpoints``: explicit ``cache_control`` markers on the last stable blocks (Anthropic: at most 4,
  placed by :func:`ragcache.providers.anthropic.breakpoints.layout_request`);
- ``automatic-prefix``: the server caches prompt prefixes itself, no markers; what pays is sending
  the same bytes first (OpenAI, vLLM, SGLang, DeepSeek...);
- ``local-kv``: ragcache's own engine: exact prefix KV plus per-document chunk KV, told where the
  documents end by one marker after the last document;
- ``none``: no prompt cache ragcache knows how to address (plain text blocks)."""


@dataclass(frozen=True, slots=True)
class UsageCounts:
    """What a usage dialect reads from a provider's native usage object, in tokens.

    Attributes:
        input_tokens: uncached prompt tokens (neither read from nor written to the provider's cache).
        cache_read: prompt tokens read from the provider's cache.
        cache_write: prompt tokens written to the provider's cache.
        completion_tokens: tokens generated.
    """

    input_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    completion_tokens: int = 0


UsageDialect = Callable[[Any], UsageCounts]
"""A provider's usage reader: the native usage (SDK object, its dict, or ``None``) -> :class:`UsageCounts`.
It never raises on a missing or odd field: missing counts are 0."""


@dataclass(frozen=True, slots=True)
class Provider:
    """One row of the provider table.

    Attributes:
        name: the backend name (:attr:`ragcache.backend.Backend.name`: ``anthropic``, ``openai``,
            ``local``...), part of the semantic partition; the table's key.
        usage: the usage dialect (:data:`UsageDialect`), ``None`` when the provider reports no usage
            ragcache can read (then usage is unknown: all zeros).
        finish_reasons: native end reason -> :data:`~ragcache.backend.FinishReason` (exact spelling; readers that see
            several spellings lower-case them). A value not listed is ``incomplete``: never stored.
        finish_field: the response field holding the native end reason (``stop_reason``,
            ``finish_reason``, ``done_reason``), ``None`` when unknown.
        stop_sequence_reason: the native end reason of an answer that one of the request's stop sequences
            ended, when the provider tells it from a plain end (Anthropic: ``stop_sequence``); ``None``: the
            plain end's (:meth:`native_finish`). Listed in ``finish_reasons`` as ``stop``.
        unset_temperature: what a request without a temperature means (1.0: the API samples; 0.0:
            greedy, as ragcache's local engine); the default temperature of ragcache's servers that speak
            the provider's API (:mod:`ragcache.server.anthropic`, :mod:`ragcache.server.openai`).
        prompt_caching: how its prompt cache is addressed (:data:`PromptCaching`).
        langchain_types: the LangChain ``_llm_type`` values of its chat / completion models.
        langchain_classes: LangChain class names of its models (read when ``_llm_type`` is not set).
        llama_index_classes: LlamaIndex LLM classes, ``"module:Class"``; subclasses match too.

    Raises:
        ValueError: an empty name, a finish reason not in :data:`ragcache.backend.FINISH_REASONS`, a
            ``stop_sequence_reason`` not listed as ``stop``, a negative or non-numeric ``unset_temperature``, an
            unknown ``prompt_caching``.
    """

    name: str
    usage: UsageDialect | None = None
    finish_reasons: Mapping[str, FinishReason] = field(default_factory=dict)
    finish_field: str | None = None
    stop_sequence_reason: str | None = None
    unset_temperature: float = 1.0
    prompt_caching: PromptCaching = "none"
    langchain_types: frozenset[str] = frozenset()
    langchain_classes: frozenset[str] = frozenset()
    llama_index_classes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a provider needs a non-empty name (its backend name), got {self.name!r}")
        bad = {k: v for k, v in self.finish_reasons.items() if v not in FINISH_REASONS}
        if bad:
            raise ValueError(f"provider {self.name!r}: finish reasons {bad} are not ragcache's words; "
                             f"map each native value to one of {', '.join(FINISH_REASONS)}")
        if self.stop_sequence_reason is not None and self.finish_reasons.get(self.stop_sequence_reason) != "stop":
            raise ValueError(f"provider {self.name!r}: stop_sequence_reason {self.stop_sequence_reason!r} must be "
                             "one of its finish_reasons mapped to 'stop' (add it there, or leave it None)")
        t = self.unset_temperature
        if isinstance(t, bool) or not isinstance(t, int | float) or not t >= 0:
            raise ValueError(f"provider {self.name!r}: unset_temperature must be a number >= 0, got {t!r}")
        if self.prompt_caching not in ("breakpoints", "automatic-prefix", "local-kv", "none"):
            raise ValueError(f"provider {self.name!r}: prompt_caching must be breakpoints, automatic-prefix, "
                             f"local-kv or none, got {self.prompt_caching!r}")

    def finish_reason(self, native: Any) -> FinishReason:
        """:attr:`finish_reasons` of a native end reason (``None``, not a string, or not listed: ``incomplete``)."""
        return self.finish_reasons.get(native, "incomplete") if isinstance(native, str) else "incomplete"

    def native_finish(self, reason: FinishReason, *, stop_sequence: bool = False) -> str:
        """The native end reason a server speaking this provider's API reports for ragcache's ``reason``: the
        inverse of :attr:`finish_reasons`, the first native value listed for it (a row lists its plain
        spelling first: Anthropic's ``end_turn`` before ``stop_sequence``); :attr:`stop_sequence_reason`
        instead for a ``stop`` that one of the request's stop sequences made (``stop_sequence=True``), when
        the row has one.

        Raises:
            ValueError: the row lists no native value for ``reason`` (the provider cannot say it).
        """
        if stop_sequence and reason == "stop" and self.stop_sequence_reason is not None:
            return self.stop_sequence_reason
        native = next((k for k, v in self.finish_reasons.items() if v == reason), None)
        if native is None:
            raise ValueError(f"provider {self.name!r} has no native end reason for {reason!r}; its row's "
                             f"finish_reasons list {sorted(set(self.finish_reasons.values()))}")
        return native

    def read_usage(self, usage: Any) -> UsageCounts:
        """The counts of a native usage object by this provider's dialect (no dialect: all zeros)."""
        return UsageCounts() if self.usage is None else self.usage(usage)

    def usage_of(self, usage: Any, *, cost_usd: float | None = None,
                 uncached_cost_usd: float | None = None) -> CacheUsage:
        """A native usage object (SDK object, its dict, or ``None``) as ragcache's record, by this provider's
        dialect (:meth:`~ragcache.backend.CacheUsage.provider`: cache writes count as computed); no dialect:
        unknown usage, all zeros. Costs in USD, ``None`` when unpriced."""
        c = self.read_usage(usage)
        return CacheUsage.provider(input_tokens=c.input_tokens, cache_read=c.cache_read, cache_write=c.cache_write,
                                   completion_tokens=c.completion_tokens, cost_usd=cost_usd,
                                   uncached_cost_usd=uncached_cost_usd)


def field_of(obj: Any, name: str) -> Any:
    """``obj[name]`` of a mapping, else ``obj.name``; ``None`` when absent (or ``obj`` is ``None``)."""
    if obj is None:
        return None
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def count_of(obj: Any, name: str) -> int:
    """A token count field as a non-negative int: missing, ``None``, a bool, a non-number or a negative is 0."""
    v = field_of(obj, name)
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else 0


__all__ = ["PromptCaching", "Provider", "UsageCounts", "UsageDialect", "count_of",
           "field_of"]
