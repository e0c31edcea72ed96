"""Any LlamaIndex LLM as a ragcache pipeline backend, so the query engine runs ``RagCache``'s steps.

The backend turns a :class:`~ragcache.prompt.layout.PromptLayout` into LlamaIndex chat messages for
the LLM's prompt caching (:func:`.messages.layout_messages`), calls the LLM, and maps what came back onto
ragcache's one record (:class:`ragcache.BackendResult` with a :class:`ragcache.CacheUsage`):

- :class:`~llama_index.llms.ragcache.RagCacheLLM`: the engine's own record
  (:func:`ragcache.engine.backend.result_of`); its name and model id are the local engine's, so
  a request has the same semantic partition through the query engine and through
  ``RagCache(LocalBackend(engine))``;
- an LLM of a provider in ragcache's provider table (``llama_index.llms.anthropic.Anthropic``:
  :func:`ragcache.providers.table.for_llama_index`): the response's ``usage`` read by the row's usage
  dialect (input, cache write, cache read tokens), its end reason by the row's finish reasons;
- any other LLM: the text, with token counts from the response's ``usage`` when it reports one.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from ragcache.backend import DEFAULT_TENANT, BackendResult, provider_layer
from ragcache.prompt.layout import PromptLayout
from ragcache.providers.table import BEST_EFFORT, UNKNOWN, for_llama_index

from llama_index.query_engine.ragcache.messages import LaidOutMessages, layout_messages, llm_kind


DEFAULT_MAX_NEW_TOKENS = 256
"""Decode budget (tokens) of an LLM that states none (``num_output`` of -1 or unset): LlamaIndex's
``DEFAULT_NUM_OUTPUTS``. Part of the semantic partition, as every budget."""

SHAPING_ATTRS = ("additional_kwargs", "thinking_dict", "reasoning_effort", "response_format", "tool_choice",
                 "output_config", "presence_penalty", "frequency_penalty", "logit_bias", "repetition_penalty")
"""LlamaIndex LLM attributes that reach the API request and change the answer (``additional_kwargs``
carries any raw request field, e.g. a ``response_format`` or ``thinking``): part of the partition."""


class LlamaIndexBackend:
    """A LlamaIndex ``LLM`` as a :class:`ragcache.Backend`.

    Args:
        llm: the LLM.
        anthropic_min_tokens / token_counter: Anthropic breakpoint placement (minimum cacheable
            length overrides; an exact token counter, default an estimate).

    Attributes:
        provider: the LLM's row of the provider table (:func:`ragcache.providers.table.for_llama_index`):
            its usage dialect, finish reasons and prompt caching; an LLM the table does not know is
            :data:`~ragcache.providers.table.UNKNOWN`, read at best effort (:data:`~ragcache.providers.table.BEST_EFFORT`).
        kind: ``ragcache``, ``anthropic`` or ``generic`` (:func:`.messages.llm_kind`; kept for older code).
        last_messages: the :class:`.messages.LaidOutMessages` of the latest request (markers,
            breakpoints and notes, for the response metadata).
    """

    def __init__(self, llm: Any, *, anthropic_min_tokens: Mapping[str, int] | int | None = None,
                 token_counter: Callable[[str], int] | None = None) -> None:
        self.llm = llm
        self.provider = for_llama_index(llm)
        self.kind = llm_kind(llm)
        self.min_tokens = anthropic_min_tokens
        self.token_counter = token_counter
        self.last_messages: LaidOutMessages | None = None

    @property
    def name(self) -> str:
        return f"llamaindex-{type(self.llm).__name__}" if self.provider is UNKNOWN else self.provider.name

    @property
    def _local_kv(self) -> bool:
        """An LLM over ragcache's own KV caches (:class:`~llama_index.llms.ragcache.RagCacheLLM`): its engine's
        fingerprint, record, blend setting and tenant salt."""
        return self.provider.prompt_caching == "local-kv"

    @property
    def model_id(self) -> str:
        if self._local_kv:
            return self.llm.fingerprint
        base = str(getattr(self.llm, "base_url", None) or "")
        name = str(getattr(self.llm, "model", None) or self.llm.metadata.model_name)
        return f"{name}@{base}" if base else name

    @property
    def blend_setting(self) -> str | None:
        """The blend setting a :class:`~llama_index.llms.ragcache.RagCacheLLM` answers at (``None`` for
        exact prefill and for every other LLM): a stored blended answer is served only at that setting."""
        return self.llm.blend_setting if self._local_kv else None

    @property
    def max_new_tokens(self) -> int:
        """The LLM's decode budget: its ``max_new_tokens`` / ``max_tokens`` / ``metadata.num_output``,
        the first that is a positive number; else :data:`DEFAULT_MAX_NEW_TOKENS`. LlamaIndex uses
        ``num_output=-1`` (``MockLLM``, ``DEFAULT_NUM_OUTPUTS`` unset) and ``None`` for "not stated"."""
        for v in self._stated_budgets():
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v
        return DEFAULT_MAX_NEW_TOKENS

    def _stated_budgets(self) -> Iterator[Any]:
        yield getattr(self.llm, "max_new_tokens", None)
        yield getattr(self.llm, "max_tokens", None)
        # read only when the others state none: RagCacheLLM's metadata loads its engine (a lookup needs none)
        yield getattr(getattr(self.llm, "metadata", None), "num_output", None)

    @property
    def temperature(self) -> float:
        return float(getattr(self.llm, "temperature", 0.0) or 0.0)

    @property
    def params(self) -> dict[str, Any]:
        """Other generation parameters that change the answer (``None`` and neutral values left out)."""
        out: dict[str, Any] = {}
        top_p = getattr(self.llm, "top_p", None)
        if top_p is not None and float(top_p) != 1.0:
            out["top_p"] = float(top_p)
        for name in ("top_k", "seed"):
            v = getattr(self.llm, name, None)
            if v is not None:
                out[name] = v
        stop = getattr(self.llm, "stop", None)
        if stop:
            out["stop"] = list(stop)
        for name in SHAPING_ATTRS:  # request fields the LLM adds to every call (issue 24, kind 3)
            v = getattr(self.llm, name, None)
            if v:
                out[name] = json.loads(json.dumps(v, sort_keys=True, default=repr))
        own = self.llm.tenant if self._local_kv else None
        if own not in (None, DEFAULT_TENANT):  # RagCacheLLM(tenant=...): answers stay per tenant too
            out["tenant"] = own
        return out

    def _call_kw(self, tenant: str | None) -> dict[str, Any]:
        """The LLM call's keyword arguments for the request's ``tenant``: ``RagCacheLLM`` takes it (its
        engine salts the request's KV with it; the default tenant leaves the LLM's own ``tenant``);
        other LLMs call a provider, whose prompt cache is per API key, and take nothing."""
        return {"tenant": tenant} if self._local_kv and tenant not in (None, DEFAULT_TENANT) else {}

    def messages(self, layout: PromptLayout) -> LaidOutMessages:
        """The chat messages for ``layout``, shaped for the LLM's prompt caching."""
        laid = layout_messages(layout, self.provider.prompt_caching, model=str(getattr(self.llm, "model", "")),
                               max_tokens=self.max_new_tokens, min_tokens=self.min_tokens,
                               token_counter=self.token_counter)
        self.last_messages = laid
        return laid

    def result(self, response: Any, text: str, ttft_s: float) -> BackendResult:
        """Map the LLM's final response onto :class:`ragcache.BackendResult`: the one mapping from a
        LlamaIndex response (plain or the last of a stream).

        The usage and finish reason are read by the LLM's provider row: RagCacheLLM's engine record; for a
        provider the table knows (Anthropic) its usage dialect and its end-reason field (``stop_reason``:
        the message's, or on a stream the last event's, which LlamaIndex copies into ``additional_kwargs``;
        a stream cut before its ``message_delta`` has none: ``incomplete``) mapped by its finish reasons;
        for other LLMs, at best effort (:data:`~ragcache.providers.table.BEST_EFFORT`), the OpenAI-compatible
        usage and ``finish_reason`` when the response carries one, else ``stop``: LlamaIndex has no common
        end-reason field, so an LLM that reports none is taken as finished (labelled approximation)."""
        raw = getattr(response, "raw", None) or {}
        if self._local_kv and isinstance(raw, Mapping) and raw.get("generation") is not None:
            from ragcache.engine.backend import result_of

            r = result_of(raw["generation"])
            return replace(r, details={**r.details, "prompt_sha256": raw.get("prompt_sha256")})
        usage = raw.get("usage") if isinstance(raw, Mapping) else getattr(raw, "usage", None)
        extra = getattr(getattr(response, "message", None), "additional_kwargs", None) or {}
        row = BEST_EFFORT if self.provider is UNKNOWN else self.provider
        field = row.finish_field or "finish_reason"
        native = _native(raw, field) or extra.get(field)
        finish = "stop" if native is None and self.provider is UNKNOWN else row.finish_reason(native)
        u = row.usage_of(usage)
        model = str(getattr(self.llm, "model", None) or "") or None
        details = {k: v for k, v in (("model", model), ("stop_reason", native)) if isinstance(v, str)}
        return BackendResult(text, provider_layer(u.cache_read), u, ttft_s, finish, details=details)

    # -- Backend protocol ----------------------------------------------------------------------
    def generate(self, layout: PromptLayout, *, max_new_tokens: int, temperature: float,
                 tenant: str | None = None) -> BackendResult:
        """Answer ``layout`` with the LLM (its own budget and temperature, which the partition holds);
        ``tenant`` salts the KV of a ``RagCacheLLM`` (:class:`ragcache.backend.Backend`)."""
        t0 = time.perf_counter()
        resp = self.llm.chat(self.messages(layout).messages, **self._call_kw(tenant))
        return self.result(resp, resp.message.content or "", time.perf_counter() - t0)

    async def agenerate(self, layout: PromptLayout, *, max_new_tokens: int, temperature: float,
                        tenant: str | None = None) -> BackendResult:
        """Async :meth:`generate`."""
        t0 = time.perf_counter()
        resp = await self.llm.achat(self.messages(layout).messages, **self._call_kw(tenant))
        return self.result(resp, resp.message.content or "", time.perf_counter() - t0)

    def stream(self, layout: PromptLayout, *, tenant: str | None = None) -> Iterator[str | BackendResult]:
        """Text deltas, then the final :class:`ragcache.BackendResult` (the shape
        :meth:`ragcache.answering.AnswerPath.stream` reads); ``tenant`` as in :meth:`generate`."""
        t0, first, text, last = time.perf_counter(), None, "", None
        for r in self.llm.stream_chat(self.messages(layout).messages, **self._call_kw(tenant)):
            if r.delta:
                first = first or time.perf_counter()
                text += r.delta
                yield r.delta
            last = r
        yield self.result(last, text, (first or time.perf_counter()) - t0)

    async def astream(self, layout: PromptLayout, *, tenant: str | None = None) -> AsyncIterator[str | BackendResult]:
        """Async :meth:`stream`."""
        t0, first, text, last = time.perf_counter(), None, "", None
        async for r in await self.llm.astream_chat(self.messages(layout).messages, **self._call_kw(tenant)):
            if r.delta:
                first = first or time.perf_counter()
                text += r.delta
                yield r.delta
            last = r
        yield self.result(last, text, (first or time.perf_counter()) - t0)


def _native(raw: Any, name: str) -> str | None:
    """A response's native end reason: ``raw[name]`` (a message), ``raw["delta"].stop_reason`` (an
    Anthropic ``message_delta`` event) or ``raw.choices[0].finish_reason`` (an OpenAI completion)."""
    def get(obj: Any, key: str) -> Any:
        return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)

    v = get(raw, name) or get(get(raw, "delta"), name)
    choices = get(raw, "choices")
    if v is None and choices:
        v = get(choices[0], name)
    return v if isinstance(v, str) else None

__all__ = ["DEFAULT_MAX_NEW_TOKENS", "LlamaIndexBackend"]
