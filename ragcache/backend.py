"""The one record every layer and entry point shares: what served an answer and what it cost.

A backend (the local engine, Anthropic, an OpenAI-compatible server) answers a
:class:`~ragcache.prompt.layout.PromptLayout` with a :class:`BackendResult`; its token accounting is a
:class:`CacheUsage`. The pipeline builds an :class:`~ragcache.pipeline.Answer` on them, and the
LangChain / LlamaIndex adapters only map :class:`CacheUsage` onto their own usage types. Nothing
here imports the rest of ragcache and nothing here knows a provider: each provider's row in the provider
table (:mod:`ragcache.providers.table`) reads its native usage into :meth:`CacheUsage.provider` (the two
``from_anthropic`` / ``from_openai`` kept for older code call the table).

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
"""Why an answer ended, the same words for every backend (each provider's row in the provider
table maps its native values onto them: :attr:`ragcache.providers.spec.Provider.finish_reasons`):

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
        """Deprecated: the Anthropic row's ``usage_of`` (:func:`ragcache.providers.table.usage_of`
        ``("anthropic", usage, ...)``). Kept, as a thin call into the provider table, for code written before
        it; warns ``DeprecationWarning``."""
        return _from_table("anthropic", "from_anthropic", usage, cost_usd, uncached_cost_usd)

    @classmethod
    def from_openai(cls, usage: Any, *, cost_usd: float | None = None,
                    uncached_cost_usd: float | None = None) -> CacheUsage:
        """Deprecated: the OpenAI-compatible row's ``usage_of`` (:func:`ragcache.providers.table.usage_of`
        ``("openai", usage, ...)``). Kept, as a thin call into the provider table, for code written before
        it; warns ``DeprecationWarning``."""
        return _from_table("openai", "from_openai", usage, cost_usd, uncached_cost_usd)

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


_TABLE = "ragcache.providers.table"
_MOVED = {"OPENAI_CACHE_READ": "ragcache.providers.openai.provider",
          "OPENAI_CACHE_WRITE": "ragcache.providers.openai.provider"}
"""Where the names kept here for older code now live: the provider table and its OpenAI row. Loaded by name
on first use, as the store tables load their classes (:func:`ragcache.store_kinds.load`): the table sits
above this record (its rows map onto it), and this record imports nothing of ragcache."""


def __getattr__(name: str) -> Any:
    """``OPENAI_CACHE_READ`` / ``OPENAI_CACHE_WRITE``, deprecated here: they live in
    :mod:`ragcache.providers.openai.provider` (loaded on first use, warns ``DeprecationWarning``)."""
    if name in _MOVED:
        import importlib
        import warnings

        warnings.warn(f"ragcache.backend.{name} is deprecated: import it from {_MOVED[name]}",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _from_table(provider: str, old: str, usage: Any, cost_usd: float | None,
                uncached_cost_usd: float | None) -> CacheUsage:
    """The deprecated ``CacheUsage.from_*`` names: the provider table's reading
    (:func:`ragcache.providers.table.usage_of`), with a ``DeprecationWarning``."""
    import importlib
    import warnings

    warnings.warn(f"CacheUsage.{old}(usage) is deprecated: use ragcache.providers.table.usage_of({provider!r}, usage)",
                  DeprecationWarning, stacklevel=3)
    usage_of = importlib.import_module(_TABLE).usage_of
    return usage_of(provider, usage, cost_usd=cost_usd, uncached_cost_usd=uncached_cost_usd)


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
                             "(map the provider's native value with its row's finish_reasons, ragcache.providers.table)")


DEFAULT_TENANT = "default"
"""The tenant of a request that names none (``RagCache``'s and the adapters' default namespace):
``None`` and ``"default"`` are one tenant, whose KV is the local engine's own."""


@runtime_checkable
class Backend(Protocol):
    """An LLM backend that answers a laid-out prompt.

    ``name`` (``local``, ``anthropic``, ``openai``...) and ``model_id`` (the model fingerprint or
    provider model name) are part of the semantic cache's partition key. A backend whose answers
    may be blended (the local engine) is also :class:`Blending`: its ``blend_setting`` is the
    name of the blend setting it answers at, ``None`` for exact prefill (absent: never blended); a stored
    blended answer is served only to a request at the same setting (:func:`ragcache.provenance.may_serve`).

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


@runtime_checkable
class Blending(Protocol):
    """A backend or chat model whose answers may be blended (CacheBlend chunk KV with selective
    recomputation). The optional part of :class:`Backend`: the local engine's
    :class:`~ragcache.engine.backend.LocalBackend`, ``ragcache ask``'s lazy local model, the LlamaIndex
    backend and LangChain's ``ChatRagCache`` are ones; whatever is not one never blends (its setting is
    ``None``). An answer path reads :attr:`blend_setting` only for a stored blended answer, which it serves
    only to a request at the same setting (:func:`ragcache.provenance.may_serve`)."""

    @property
    def blend_setting(self) -> str | None:
        """The name of the blend setting this answers at (e.g. ``"infoflow r=0.15"``); ``None``: exact
        prefill."""
        ...


__all__ = ["AsyncBackend", "Backend", "BackendResult", "Blending", "CacheUsage", "DEFAULT_TENANT", "FINISH_REASONS", "FinishReason", "LAYERS", "Layer", "model_with_fields",
           "provider_layer"]
