"""The one record every layer and entry point shares: what served an answer and what it cost.

A backend (the local engine, Anthropic, an OpenAI-compatible server) answers a
:class:`~ragcache.prompt.layout.PromptLayout` with a :class:`BackendResult`; its token accounting is a
:class:`CacheUsage`. The pipeline builds an :class:`~ragcache.pipeline.Answer` on them, and the
LangChain / LlamaIndex adapters only map :class:`CacheUsage` onto their own usage types. Nothing
here imports the rest of ragcache.

Accounting rule (the same for every backend): every prompt token is exactly one of *reused*
(its KV, or the provider's cache, was read and kept), *recomputed* (it had cached KV but was
computed again: CacheBlend's HKVD tokens) or *computed* (it had no cached KV), so
``reused + recomputed + computed == prompt_tokens``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ragcache.prompt.layout import PromptLayout

Layer = Literal["semantic", "prefix", "chunk", "prefix+chunk", "model", "provider-cache", "provider"]
"""Which layer served an answer: ``semantic`` (a stored answer, no model call); for the local
engine ``prefix`` / ``chunk`` / ``prefix+chunk`` (which KV caches supplied reused tokens) or
``model`` (nothing reused); for a provider ``provider-cache`` (the provider read part of the
prompt from its cache) or ``provider``."""

FinishReason = Literal["stop", "length", "content_filter", "tool_calls", "pause_turn", "refusal", "context_window",
                       "incomplete", "error"]
"""Why an answer ended, the same words for every backend (each provider adapter maps its native
value in one table: :data:`ragcache.providers.openai.backend.FINISH_REASONS`,
:data:`ragcache.providers.anthropic.usage.FINISH_REASONS`):

- ``stop``: a normal end (end of turn, a stop string / sequence);
- ``length``: cut at the request's token budget (``max_new_tokens`` / ``max_tokens``);
- ``content_filter``: the provider withheld or cut the content;
- ``tool_calls``: the model asked for a tool instead of answering;
- ``pause_turn``: the provider paused a long turn (Anthropic server tools), to be continued;
- ``refusal``: the model refused (Anthropic ``refusal``);
- ``context_window``: the prompt plus the answer reached the model's context window;
- ``incomplete``: the response never said how it ended (a null finish reason, a stream cut
  before its end event, an unknown native value);
- ``error``: the backend failed part-way.

Only ``stop`` (and ``length`` where an entry point's budget rule allows it) is ever stored as an
answer (:func:`ragcache.answering.cacheable`)."""
FINISH_REASONS: tuple[str, ...] = ("stop", "length", "content_filter", "tool_calls", "pause_turn", "refusal",
                                   "context_window", "incomplete", "error")
LAYERS: tuple[str, ...] = ("semantic", "prefix", "chunk", "prefix+chunk", "model", "provider-cache", "provider")


@dataclass(frozen=True, slots=True)
class CacheUsage:
    """Token accounting of one request. Counts are tokens; costs are USD (``None`` when unpriced).

    Attributes:
        prompt_tokens: tokens in the prompt the model saw.
        reused: tokens whose KV (or provider cache entry) was read and kept.
        computed: tokens without cached KV, computed fresh.
        recomputed: tokens with cached KV that were computed again (CacheBlend HKVD tokens).
        prefix_reused / chunk_reused: the local engine's split of ``reused`` between the exact
            prefix cache and the chunk (CacheBlend) cache; 0 for providers.
        cache_read: tokens read from a cache (local: ``reused``; provider: ``cache_read_input_tokens``).
        cache_write: tokens written to a provider's prompt cache (``cache_creation_input_tokens``);
            0 for the local engine, whose KV writes cost nothing extra.
        completion_tokens: tokens generated.
        cost_usd / uncached_cost_usd: provider cost of the request and of the same request
            without caching.

    Raises:
        ValueError: a negative count, or ``reused + recomputed + computed != prompt_tokens``.
    """

    prompt_tokens: int = 0
    reused: int = 0
    computed: int = 0
    recomputed: int = 0
    prefix_reused: int = 0
    chunk_reused: int = 0
    cache_read: int = 0
    cache_write: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    uncached_cost_usd: float | None = None

    def __post_init__(self) -> None:
        counts = (self.prompt_tokens, self.reused, self.computed, self.recomputed, self.prefix_reused,
                  self.chunk_reused, self.cache_read, self.cache_write, self.completion_tokens)
        if any(int(c) != c or c < 0 for c in counts):
            raise ValueError(f"token counts must be non-negative integers, got {self}")
        if self.reused + self.recomputed + self.computed != self.prompt_tokens:
            raise ValueError(
                f"usage does not add up: reused {self.reused} + recomputed {self.recomputed} + computed "
                f"{self.computed} != prompt_tokens {self.prompt_tokens}")

    @property
    def reuse_share(self) -> float:
        """``reused / prompt_tokens`` (0 for an empty prompt)."""
        return self.reused / self.prompt_tokens if self.prompt_tokens else 0.0

    @classmethod
    def local(cls, *, prompt_tokens: int, prefix_reused: int = 0, chunk_reused: int = 0, recomputed: int = 0,
              completion_tokens: int = 0) -> CacheUsage:
        """Usage of a local-engine request: ``computed`` is what is left of the prompt."""
        reused = prefix_reused + chunk_reused
        return cls(prompt_tokens=prompt_tokens, reused=reused, recomputed=recomputed,
                   computed=prompt_tokens - reused - recomputed, prefix_reused=prefix_reused,
                   chunk_reused=chunk_reused, cache_read=reused, completion_tokens=completion_tokens)

    @classmethod
    def provider(cls, *, input_tokens: int, cache_read: int = 0, cache_write: int = 0, completion_tokens: int = 0,
                 cost_usd: float | None = None, uncached_cost_usd: float | None = None) -> CacheUsage:
        """Usage of a provider request. ``input_tokens`` are the uncached input tokens (Anthropic's
        ``input_tokens``; for OpenAI pass ``prompt_tokens - cached_tokens``); cache writes count
        as computed (the provider prefilled them)."""
        return cls(prompt_tokens=input_tokens + cache_read + cache_write, reused=cache_read,
                   computed=input_tokens + cache_write, cache_read=cache_read, cache_write=cache_write,
                   completion_tokens=completion_tokens, cost_usd=cost_usd, uncached_cost_usd=uncached_cost_usd)

    @classmethod
    def from_anthropic(cls, usage: Any, *, cost_usd: float | None = None,
                       uncached_cost_usd: float | None = None) -> CacheUsage:
        """Usage of an Anthropic Messages response: ``usage`` is the SDK's ``Usage`` object or its
        dict (``input_tokens`` uncached, ``cache_read_input_tokens``, ``cache_creation_input_tokens``,
        ``output_tokens``; missing or ``None`` fields count 0, a missing ``usage`` is all zeros).
        The one mapping every Anthropic entry point uses (backend, proxy, server metrics, LlamaIndex)."""
        return cls.provider(input_tokens=_count(usage, "input_tokens"),
                            cache_read=_count(usage, "cache_read_input_tokens"),
                            cache_write=_count(usage, "cache_creation_input_tokens"),
                            completion_tokens=_count(usage, "output_tokens"),
                            cost_usd=cost_usd, uncached_cost_usd=uncached_cost_usd)

    @classmethod
    def from_openai(cls, usage: Any, *, cost_usd: float | None = None,
                    uncached_cost_usd: float | None = None) -> CacheUsage:
        """Usage of an OpenAI-compatible response, in every documented dialect (:data:`OPENAI_CACHE_READ`,
        :data:`OPENAI_CACHE_WRITE`); SDK object or dict, the non-streamed ``usage`` or a stream's
        usage chunk alike. The one mapping every OpenAI-compatible entry point uses.

        Prompt size: ``prompt_tokens`` (Chat Completions), else ``input_tokens`` (Responses API),
        else DeepSeek's ``prompt_cache_hit_tokens + prompt_cache_miss_tokens``. Each dialect's prompt
        count includes the cached and the written tokens. One count reported in two shapes (DeepSeek
        sends ``prompt_cache_hit_tokens`` and ``prompt_tokens_details.cached_tokens``; OpenRouter may
        send ``cache_write_tokens`` at the top and in ``prompt_tokens_details``) is read once: the
        largest of its shapes, never their sum. A read or write above the prompt (a server that
        reports nonsense) is clipped to it (reads first)."""
        details = [d for d in (_field(usage, "prompt_tokens_details"), _field(usage, "input_tokens_details"))
                   if d is not None]
        hit_miss = _count(usage, "prompt_cache_hit_tokens") + _count(usage, "prompt_cache_miss_tokens")
        prompt = _count(usage, "prompt_tokens") or _count(usage, "input_tokens") or hit_miss
        cached = min(_largest(usage, details, OPENAI_CACHE_READ), prompt)
        written = min(_largest(usage, details, OPENAI_CACHE_WRITE), prompt - cached)
        completion = _count(usage, "completion_tokens") or _count(usage, "output_tokens")
        return cls.provider(input_tokens=prompt - cached - written, cache_read=cached, cache_write=written,
                            completion_tokens=completion, cost_usd=cost_usd, uncached_cost_usd=uncached_cost_usd)

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


OPENAI_CACHE_READ: tuple[tuple[str, str], ...] = (
    ("details", "cached_tokens"),           # OpenAI, vLLM, SGLang, Groq, OpenRouter, DeepSeek (both shapes)
    ("usage", "prompt_cache_hit_tokens"),   # DeepSeek (prompt_cache_miss_tokens: the rest of the prompt)
    ("usage", "cached_tokens"),             # Kimi / Moonshot: at the top of usage
    ("usage", "cache_read_input_tokens"),   # LiteLLM's Anthropic-style fields
)
"""Where OpenAI-compatible providers report prompt tokens read from their cache: ``(where, field)``,
``details`` being ``usage.prompt_tokens_details`` (or the Responses API's ``input_tokens_details``).
Read by :meth:`CacheUsage.from_openai`; a count reported in several shapes is read once."""

OPENAI_CACHE_WRITE: tuple[tuple[str, str], ...] = (
    ("details", "cache_write_tokens"),        # OpenRouter
    ("usage", "cache_write_tokens"),          # OpenRouter, at the top of usage
    ("usage", "cache_creation_input_tokens"),  # LiteLLM's Anthropic-style fields
)
"""Where OpenAI-compatible providers report prompt tokens written to their cache (read as
:attr:`CacheUsage.cache_write`); the same rule as :data:`OPENAI_CACHE_READ`."""


def _largest(usage: Any, details: list[Any], fields: tuple[tuple[str, str], ...]) -> int:
    """The largest count among ``fields`` (two shapes of one count are never added)."""
    return max([_count(usage, f) for w, f in fields if w == "usage"]
               + [_count(d, f) for w, f in fields if w == "details" for d in details], default=0)


def _field(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def _count(obj: Any, name: str) -> int:
    v = _field(obj, name)
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else 0


def model_with_fields(model: str, fields: Mapping[str, Any] | None) -> str:
    """A provider backend's model id with the request fields it adds to every call (``extra``):
    ``model`` alone when there are none, else ``model#<sha256 of the fields' canonical JSON, 12 hex>``.

    Raises:
        ValueError: a field that is not JSON-like (it could not be compared).
    """
    if not fields:
        return model
    import hashlib
    import json

    try:
        blob = json.dumps(dict(fields), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except TypeError as e:
        raise ValueError(f"backend extra request fields must be JSON-like: {e}") from None
    return f"{model}#{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def provider_layer(cache_read: int) -> Layer:
    """Which layer served a provider answer: ``provider-cache`` when the provider read any prompt
    tokens from its cache (``cache_read`` tokens, :attr:`CacheUsage.cache_read`), else ``provider``.
    The one rule for every provider entry point (Anthropic and OpenAI-compatible backends, the
    proxy, the server metrics, the LangChain callbacks, the LlamaIndex backend); the local engine's
    rule is :func:`ragcache.engine.backend.layer_of`. A provider call is never labelled ``model``
    (that label means the local engine reused nothing)."""
    return "provider-cache" if cache_read > 0 else "provider"


@dataclass(frozen=True, slots=True)
class BackendResult:
    """What a backend returns for one prompt.

    Attributes:
        text: the answer.
        layer: which cache layer served the prefill (see :data:`Layer`).
        usage: token accounting (:class:`CacheUsage`).
        ttft_s: seconds to the first token (for a non-streamed provider call: to the whole response).
        finish_reason: why the answer ended (:data:`FinishReason`: ``stop``, ``length``,
            ``content_filter``, ``tool_calls``, ``pause_turn``, ``refusal``, ``context_window``,
            ``incomplete``, ``error``).
        approximate: True when the prefill reused chunk KV with selective recomputation
            (CacheBlend), so the logits are close to, not equal to, a full prefill's.
        recompute_ratio: CacheBlend's r for an approximate answer, else ``None``.
        details: backend-specific extras (the engine's timings, the provider's breakpoints and
            diagnosis); read-only, for display and debugging, never for accounting.
        blend_setting: the name of the blend setting a blended prefill used (e.g.
            ``"infoflow r=0.15"``, :class:`ragcache.engine.blend.setting.BlendSetting`), else ``None``.
            Stored with the answer: a blended answer is served only to requests at that setting
            (:func:`ragcache.provenance.may_serve`).
    """

    text: str
    layer: Layer
    usage: CacheUsage
    ttft_s: float = 0.0
    finish_reason: FinishReason = "stop"
    approximate: bool = False
    recompute_ratio: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    blend_setting: str | None = None

    def __post_init__(self) -> None:
        if self.layer not in LAYERS:
            raise ValueError(f"unknown layer {self.layer!r}; one of {', '.join(LAYERS)}")
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"unknown finish_reason {self.finish_reason!r}; one of {', '.join(FINISH_REASONS)} "
                             "(map the provider's native value with its adapter's FINISH_REASONS table)")


DEFAULT_TENANT = "default"
"""The tenant of a request that names none (``RagCache``'s and the adapters' default namespace):
``None`` and ``"default"`` are one tenant, whose KV is the local engine's own."""


@runtime_checkable
class Backend(Protocol):
    """An LLM backend that answers a laid-out prompt.

    ``name`` (``local``, ``anthropic``, ``openai``...) and ``model_id`` (the model fingerprint or
    provider model name) are part of the semantic cache's partition key. A backend whose answers
    may be blended (the local engine) also has ``blend_setting``: the name of the blend setting it
    answers at, ``None`` for exact prefill (absent: never blended); a stored blended answer is served
    only to a request at the same setting (:func:`ragcache.provenance.may_serve`).

    ``tenant`` is part of the contract: every entry point passes the request's tenant (its namespace,
    ``None`` or :data:`DEFAULT_TENANT` for the default one) and every backend takes it. A backend with
    KV of its own (:class:`ragcache.engine.backend.LocalBackend`, the LlamaIndex backend over
    ``RagCacheLLM``) salts the request's prefix and chunk KV keys with it: it is hashed into the root of
    the block-hash chain and into every chunk key (:func:`ragcache.engine.keys.kv_salt`), as vLLM's
    ``Request.cache_salt``, so two tenants reuse none of each other's KV unless the engine opts in
    (``share_kv_across_namespaces=True``). A provider backend keeps its prompt cache per API key (per
    organisation) and leaves ``tenant`` unused.
    """

    name: str

    @property
    def model_id(self) -> str: ...

    def generate(self, layout: PromptLayout, *, max_new_tokens: int, temperature: float,
                 tenant: str | None = None) -> BackendResult: ...


@runtime_checkable
class AsyncBackend(Protocol):
    """A backend with a native async path (the pipeline runs ``generate`` in a thread otherwise);
    ``tenant`` as in :class:`Backend`."""

    async def agenerate(self, layout: PromptLayout, *, max_new_tokens: int, temperature: float,
                        tenant: str | None = None) -> BackendResult: ...


__all__ = ["AsyncBackend", "Backend", "BackendResult", "CacheUsage", "DEFAULT_TENANT", "FINISH_REASONS", "FinishReason", "LAYERS", "Layer", "OPENAI_CACHE_READ",
           "OPENAI_CACHE_WRITE", "model_with_fields",
           "provider_layer"]
