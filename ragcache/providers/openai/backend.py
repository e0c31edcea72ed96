"""A pipeline backend for any OpenAI-compatible chat-completions server (OpenAI, vLLM, SGLang,
llama.cpp's server, ``ragcache serve``), laid out so the server's automatic prefix cache hits.

>>> import openai
>>> from ragcache import RagCache
>>> from ragcache.providers.openai import OpenAIBackend
>>> backend = OpenAIBackend(openai.OpenAI(base_url="http://127.0.0.1:8788/v1", api_key="local"),
...                         model="SmolLM2-135M-Instruct")                          # doctest: +SKIP
>>> a = RagCache(backend).answer("How long do refunds take?", docs)                 # doctest: +SKIP
>>> a.layer, a.usage.cache_read, backend.stats.read_share                           # doctest: +SKIP

OpenAI-style servers cache prompt prefixes automatically (no markers): what pays is sending the
same bytes first. :func:`layout_messages` sends the system text, then the history (append-only),
then one user message whose content parts are the documents (canonical order, the same bytes
every time) and last the volatile text with the question. The cached tokens are read back by the
one mapping, the provider's usage dialect (:func:`ragcache.providers.openai.provider.read_usage`), in every
documented dialect (OpenAI's ``prompt_tokens_details.cached_tokens``, DeepSeek's
``prompt_cache_hit_tokens``, Kimi's top-level ``cached_tokens``, OpenRouter's ``cache_write_tokens``),
streamed or not; the layer is ``provider-cache`` when any were read, else ``provider``. The
caller's layout is never mutated.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragcache.backend import BackendResult, CacheUsage, FinishReason, model_with_fields, provider_layer
from ragcache.counters import Counters
from ragcache.prompt.layout import PromptLayout
from ragcache.providers.openai.provider import FINISH_REASONS, OPENAI  # FINISH_REASONS: re-exported

def finish_reason(native: Any) -> FinishReason:
    """An OpenAI ``finish_reason`` in ragcache's words, by the provider's row
    (:data:`ragcache.providers.openai.provider.FINISH_REASONS`; ``None`` or unknown: ``incomplete``)."""
    return OPENAI.finish_reason(native)


def openai_tools(tools: list[dict]) -> list[dict]:
    """Layout tools as OpenAI ``tools``: ``{"type": "function", "function": {...}}`` entries pass
    through; Anthropic-shaped ones (``name``, ``description``, ``input_schema``) are converted.

    Raises:
        ValueError: a tool that is neither shape.
    """
    out = []
    for t in tools:
        if t.get("type") == "function" and isinstance(t.get("function"), Mapping):
            out.append(t)
        elif isinstance(t.get("name"), str):
            fn = {"name": t["name"], "parameters": t.get("input_schema", t.get("parameters", {"type": "object"}))}
            if t.get("description"):
                fn["description"] = t["description"]
            out.append({"type": "function", "function": fn})
        else:
            raise ValueError(f"a tool must be an OpenAI function tool or have a 'name'; got keys {sorted(t)}")
    return out


def layout_messages(layout: PromptLayout, *, content_parts: bool = True) -> list[dict]:
    """Chat-completions ``messages`` for a layout, stable first (:meth:`PromptLayout.blocks` order).

    ``[system] + history + [user: document parts..., volatile text + question]``. With
    ``content_parts`` the final user content is a list of text parts (each document its own part,
    the volatile text and question joined in the last: what ``ragcache serve`` reads as documents
    then question); else one string, the parts joined by a blank line. Tools are not a message
    (see :func:`openai_tools`).
    """
    msgs: list[dict] = []
    docs: list[str] = []
    tail: list[str] = []
    for b in layout.blocks():
        if b.kind == "system":
            msgs.append({"role": "system", "content": b.text})
        elif b.kind == "history":
            msgs.append({"role": b.role, "content": b.text})
        elif b.kind == "document":
            docs.append(b.text)
        elif b.kind in ("volatile", "question"):
            tail.append(b.text)
    parts = [*docs, "\n\n".join(tail)]
    content: Any = [{"type": "text", "text": t} for t in parts] if content_parts else "\n\n".join(parts)
    msgs.append({"role": "user", "content": content})
    return msgs


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


@dataclass(slots=True)
class OpenAIStats(Counters):
    """Running totals of a backend's requests (tokens; USD when priced); ``hit_rate`` (= :attr:`read_share`)
    is the share of prompt tokens read from the provider's cache."""

    RATE = ("cached_tokens", "prompt_tokens")
    SHOWN = (("read_share", None),)

    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    uncached_cost_usd: float = 0.0

    @property
    def read_share(self) -> float:
        """``cached_tokens / prompt_tokens`` over all requests (0 before any)."""
        return self.hit_rate

    def add(self, u: CacheUsage) -> None:
        self.requests += 1
        self.prompt_tokens += u.prompt_tokens
        self.cached_tokens += u.cache_read
        self.cache_write_tokens += u.cache_write
        self.completion_tokens += u.completion_tokens
        self.cost_usd += u.cost_usd or 0.0
        self.uncached_cost_usd += u.uncached_cost_usd or 0.0


class OpenAIBackend:
    """Pipeline backend over the official ``openai`` SDK's chat completions.

    ``generate(layout, *, max_new_tokens, temperature) -> BackendResult`` (sync client) and
    ``agenerate`` (async client; without one, the sync client in a worker thread). With
    ``stream=True`` responses are streamed with ``stream_options={"include_usage": True}`` and
    TTFT is measured at the first content delta; otherwise TTFT is the whole response's time.

    Args:
        client: ``openai.OpenAI`` (``base_url=`` points it at any compatible server).
        model: the model id sent with each request (also the backend's :attr:`model_id`).
        async_client: ``openai.AsyncOpenAI`` for :meth:`agenerate`.
        stream: stream responses (see above).
        content_parts: send the documents as separate text parts of the final user message
            (default) or as one string (for servers that take string content only).
        max_tokens_param: ``max_tokens`` (default; what most compatible servers read) or
            ``max_completion_tokens`` (OpenAI's reasoning models require it).
        price: optional USD per million tokens ``(input, cached_input, output)``, or
            ``(input, cached_input, output, cache_write)`` for providers that bill cache writes
            apart (OpenRouter's ``cache_write_tokens``; without it a write costs the input price);
            sets ``usage.cost_usd`` and ``uncached_cost_usd``.
        extra: more ``chat.completions.create`` keyword arguments for every request.

    Raises:
        ValueError: no client at all, an unknown ``max_tokens_param``, or a ``price`` that is not 3
            or 4 numbers.
    """

    name = OPENAI.name

    def __init__(self, client: Any = None, model: str = "", *, async_client: Any = None, stream: bool = True,
                 content_parts: bool = True, max_tokens_param: str = "max_tokens",
                 price: tuple[float, ...] | None = None, extra: Mapping[str, Any] | None = None) -> None:
        if client is None and async_client is None:
            raise ValueError("give client=openai.OpenAI(...) and/or async_client=openai.AsyncOpenAI(...)")
        if not isinstance(model, str):
            raise TypeError(f"model must be a str, the id the server serves (GET /v1/models lists them); "
                            f"got {type(model).__name__}")
        if not model:
            raise ValueError("model is required: the id the server serves (GET /v1/models lists them)")
        if max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(f"max_tokens_param must be 'max_tokens' or 'max_completion_tokens', got {max_tokens_param!r}")
        if price is not None and (len(price) not in (3, 4) or not all(isinstance(p, int | float) for p in price)):
            raise ValueError(f"price must be (input, cached_input, output[, cache_write]) in USD per million "
                             f"tokens, got {price!r}")
        self.client = client
        self.async_client = async_client
        self.model = model
        self.stream = stream
        self.content_parts = content_parts
        self.max_tokens_param = max_tokens_param
        self.price = price
        self.extra = dict(extra or {})
        self.stats = OpenAIStats()

    @property
    def model_id(self) -> str:
        """The model id, part of semantic-cache partition keys: with ``extra`` request fields (a
        response format, thinking, tool policy... they shape every answer) a digest of them is
        appended (``model#<12 hex>``), so backends that differ only there never share answers."""
        return model_with_fields(self.model, self.extra)

    def request(self, layout: PromptLayout, *, max_new_tokens: int, temperature: float) -> dict[str, Any]:
        """The ``chat.completions.create`` keyword arguments for a layout (without streaming options).

        Raises:
            ValueError: not a PromptLayout, or ``max_new_tokens < 1``.
        """
        if not isinstance(layout, PromptLayout):
            raise TypeError(f"OpenAIBackend needs a PromptLayout, got {type(layout).__name__}; "
                             "build one with PromptLayout.build(question=..., documents=...)")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        kwargs: dict[str, Any] = {"model": self.model,
                                  "messages": layout_messages(layout, content_parts=self.content_parts),
                                  self.max_tokens_param: max_new_tokens, "temperature": temperature}
        if layout.tools:
            kwargs["tools"] = openai_tools(layout.tools)
        return {**kwargs, **self.extra}

    def result(self, text: str, usage: Any, native_finish: str | None, ttft_s: float,
               response_model: str | None = None, refusal: str | None = None) -> BackendResult:
        """The pipeline record of a response: ``usage`` (SDK object or dict) read into
        :class:`~ragcache.backend.CacheUsage` by the provider's usage dialect (:meth:`~ragcache.providers.spec.Provider.usage_of`; the
        cached tokens read, the written ones and the rest of the prompt computed); layer ``provider-cache`` when anything was read, else ``provider``;
        ``native_finish`` mapped by :func:`finish_reason` (and kept in ``details["finish_reason"]``); a
        ``refusal`` (the message's refusal text, structured outputs) makes it ``refusal``."""
        u = OPENAI.usage_of(usage)
        if self.price is not None:
            p_in, p_cached, p_out = self.price[:3]
            p_write = self.price[3] if len(self.price) == 4 else p_in
            cost = ((u.computed - u.cache_write) * p_in + u.cache_write * p_write + u.cache_read * p_cached
                    + u.completion_tokens * p_out) / 1e6
            uncached = (u.prompt_tokens * p_in + u.completion_tokens * p_out) / 1e6
            u = OPENAI.usage_of(usage, cost_usd=cost, uncached_cost_usd=uncached)
        self.stats.add(u)
        details = {"model": response_model or self.model, "finish_reason": native_finish,
                   "usage_reported": usage is not None}
        if refusal:
            details["refusal"] = refusal
        return BackendResult(text, provider_layer(u.cache_read), u, ttft_s,
                             "refusal" if refusal else finish_reason(native_finish), details=details)

    def _streaming(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        opts = {**dict(kwargs.get("stream_options") or {}), "include_usage": True}
        return {**kwargs, "stream": True, "stream_options": opts}

    def generate(self, layout: PromptLayout, *, max_new_tokens: int = 256, temperature: float = 0.0,
                 tenant: str | None = None) -> BackendResult:
        """Answer a layout through ``client.chat.completions.create`` (streamed or not). ``tenant`` is left unused: the
        provider keeps its prompt cache per API key (:class:`ragcache.backend.Backend`)."""
        if self.client is None:
            raise ValueError("this backend has no sync client; pass client=openai.OpenAI(...) or use agenerate")
        kwargs = self.request(layout, max_new_tokens=max_new_tokens, temperature=temperature)
        t0 = time.perf_counter()
        if not self.stream:
            r = self.client.chat.completions.create(**kwargs)
            return self._complete(r, time.perf_counter() - t0)
        acc = _Chunks(t0)
        with self.client.chat.completions.create(**self._streaming(kwargs)) as chunks:
            for chunk in chunks:
                acc.add(chunk)
        return self.result(acc.text, acc.usage, acc.finish_reason, acc.ttft(), acc.model, acc.refusal)

    async def agenerate(self, layout: PromptLayout, *, max_new_tokens: int = 256,
                        temperature: float = 0.0, tenant: str | None = None) -> BackendResult:
        """Async :meth:`generate` through ``async_client`` (else the sync client in a worker thread)."""
        if self.async_client is None:
            return await asyncio.to_thread(self.generate, layout, max_new_tokens=max_new_tokens,
                                           temperature=temperature)
        kwargs = self.request(layout, max_new_tokens=max_new_tokens, temperature=temperature)
        t0 = time.perf_counter()
        if not self.stream:
            r = await self.async_client.chat.completions.create(**kwargs)
            return self._complete(r, time.perf_counter() - t0)
        acc = _Chunks(t0)
        async with await self.async_client.chat.completions.create(**self._streaming(kwargs)) as chunks:
            async for chunk in chunks:
                acc.add(chunk)
        return self.result(acc.text, acc.usage, acc.finish_reason, acc.ttft(), acc.model, acc.refusal)

    def _complete(self, response: Any, elapsed: float) -> BackendResult:
        choice = (_get(response, "choices") or [None])[0]
        message = _get(choice, "message")
        return self.result(_get(message, "content") or "", _get(response, "usage"), _get(choice, "finish_reason"),
                           elapsed, _get(response, "model"), _get(message, "refusal"))


class _Chunks:
    """Accumulates a chat-completions stream: text, finish reason, the usage chunk, TTFT."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.first: float | None = None
        self.parts: list[str] = []
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.model: str | None = None
        self.refusal: str | None = None

    def add(self, chunk: Any) -> None:
        self.model = _get(chunk, "model") or self.model
        if _get(chunk, "usage") is not None:
            self.usage = _get(chunk, "usage")
        for choice in _get(chunk, "choices") or []:
            if _get(choice, "index") not in (0, None):
                continue
            delta = _get(choice, "delta")
            refusal = _get(delta, "refusal")
            if refusal:
                self.refusal = (self.refusal or "") + refusal
            text = _get(delta, "content")
            if text:
                if self.first is None:
                    self.first = time.perf_counter()
                self.parts.append(text)
            self.finish_reason = _get(choice, "finish_reason") or self.finish_reason

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def ttft(self) -> float:
        return (self.first if self.first is not None else time.perf_counter()) - self.t0


__all__ = ["FINISH_REASONS", "OpenAIBackend", "OpenAIStats", "finish_reason", "layout_messages", "openai_tools"]
