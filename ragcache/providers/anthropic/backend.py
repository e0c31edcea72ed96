"""Anthropic prompt caching: cached requests from a :class:`~ragcache.prompt.layout.PromptLayout`,
usage read back, cost accounted; and the pipeline backend that calls the official SDK.

>>> import anthropic
>>> from ragcache.backend import BackendResult, CacheUsage
from ragcache.prompt.layout import PromptLayout
>>> from ragcache.providers.anthropic.backend import AnthropicBackend
>>> backend = AnthropicBackend(anthropic.Anthropic(), model="claude-sonnet-4-6")  # doctest: +SKIP
>>> layout = PromptLayout.build(question="...", system="...", documents=docs)      # doctest: +SKIP
>>> r = backend.generate(layout, max_new_tokens=256, temperature=0.0)            # doctest: +SKIP
>>> r.usage.cache_read, r.usage.cost_usd, backend.stats.read_share              # doctest: +SKIP

Works with ``anthropic.Anthropic`` / ``anthropic.AsyncAnthropic`` against the
real API or the local server (:mod:`ragcache.server.anthropic`), streaming or
not. The caller's layout, tools and messages are never mutated: every request
is built from copies.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from typing import Any

from ragcache.backend import BackendResult, model_with_fields, provider_layer
from ragcache.prompt.layout import PromptLayout
from ragcache.providers.anthropic.breakpoints import (TTL, CachedRequest, PlacementPolicy, TokenCounter, add_breakpoints,
                                                     layout_request)
from ragcache.providers.anthropic.ledger import WriteLedger
from ragcache.providers.anthropic.pricing import ModelPrice
from ragcache.providers.anthropic.provider import ANTHROPIC
from ragcache.providers.anthropic.usage import CacheMonitor, CacheStats, UsageRecord, read_message


class AnthropicCaching:
    """Builds cached ``messages.create`` arguments and accounts their usage (no client needed).

    Args:
        model: Anthropic model id (minimum cacheable length and prices follow it).
        ttl: TTL of the markers ("5m" or "1h"); ``prefix_ttl`` for tools / system markers.
        min_tokens: per-family minimum overrides, or one int for all models.
        token_counter: tokens of a block's text (the local server's tokenizer, for
            exact placement); default: an estimate of 3.5 bytes per token.
        prices: USD-per-MTok overrides by model family.
        clock: seconds, for TTL diagnosis.
        warn: emit :class:`~ragcache.providers.anthropic.usage.PromptCacheWarning` on a diagnosed miss and
            when caller breakpoints had to be dropped (always recorded on the request either way).
        unread_writes: stop placing a breakpoint class after this many of its cache writes in a row
            went unread (a net cost: :class:`~ragcache.providers.anthropic.ledger.WriteLedger`; it is
            re-probed every ``probe_every`` requests and placed whenever its prefix repeats); ``None``
            places every class every time.
        probe_every: requests between two probes of a class no longer placed (doubling after each
            unread probe).

    Raises:
        ValueError: a TTL other than "5m" / "1h", or ``unread_writes`` / ``probe_every`` below 1.
    """

    def __init__(self, model: str, *, ttl: TTL = "5m", prefix_ttl: TTL | None = None,
                 min_tokens: Mapping[str, int] | int | None = None, token_counter: TokenCounter | None = None,
                 prices: Mapping[str, ModelPrice] | None = None, clock: Callable[[], float] = time.monotonic,
                 warn: bool = True, unread_writes: int | None = 2, probe_every: int = 8) -> None:
        if ttl not in ("5m", "1h") or prefix_ttl not in ("5m", "1h", None):
            raise ValueError("ttl and prefix_ttl must be '5m' or '1h'")
        self.model = model
        self.ttl = ttl
        self.prefix_ttl = prefix_ttl
        self.min_tokens = min_tokens
        self.token_counter = token_counter
        self.warn = warn
        self.ledger = None if unread_writes is None else WriteLedger(stop_after=unread_writes, probe_every=probe_every,
                                                                     clock=clock)
        self.monitor = CacheMonitor(model, prices=prices, clock=clock, warn=warn, ledger=self.ledger)

    @property
    def stats(self) -> CacheStats:
        """Cumulative usage and cost over every recorded response."""
        return self.monitor.stats

    def _policy(self, scope: str) -> PlacementPolicy | None:
        ledger = self.ledger
        if ledger is None:
            return None
        return lambda klass, prefix, ttl: ledger.skip(klass, prefix, ttl, scope=scope)

    def build(self, layout: PromptLayout, *, max_tokens: int, temperature: float | None = None,
              extra: Mapping[str, Any] | None = None, scope: str = "") -> CachedRequest:
        """Cached request for a layout (see :func:`~ragcache.providers.anthropic.breakpoints.layout_request`).
        ``scope``: whose writes the ledger judges (a tenant; one scope never learns another's prefixes)."""
        req = layout_request(layout, model=self.model, max_tokens=max_tokens, temperature=temperature,
                             ttl=self.ttl, prefix_ttl=self.prefix_ttl, min_tokens=self.min_tokens,
                             token_counter=self.token_counter, extra=extra, warn=self.warn, policy=self._policy(scope))
        req.meta["scope"] = scope
        return req

    def prepare(self, request: Mapping[str, Any], *, stable_end: int | None = None, scope: str = "") -> CachedRequest:
        """Add breakpoints to an existing ``messages.create`` body (copied, never mutated); ``scope`` as
        in :meth:`build`."""
        req = add_breakpoints({"model": self.model, **dict(request)}, model=request.get("model", self.model),
                              stable_end=stable_end, ttl=self.ttl, prefix_ttl=self.prefix_ttl,
                              min_tokens=self.min_tokens, token_counter=self.token_counter, warn=self.warn,
                              policy=self._policy(scope))
        req.meta["scope"] = scope
        return req

    def record(self, req: CachedRequest, usage: Any) -> UsageRecord:
        """Account a response's ``usage`` (SDK object or dict) for ``req``."""
        return self.monitor.record(req, usage)

    def result(self, req: CachedRequest, message: Any, ttft_s: float) -> BackendResult:
        """The pipeline record of a response: usage read back into :class:`~ragcache.backend.CacheUsage`
        (``input_tokens`` computed, ``cache_creation_input_tokens`` written, ``cache_read_input_tokens``
        read), layer ``provider-cache`` when anything was read, else ``provider``. ``details`` holds
        the usage record, the breakpoints placed and skipped, notes and the miss diagnosis. The finish
        reason is :func:`~ragcache.providers.anthropic.usage.finish_reason` of ``stop_reason`` (a
        tool use, refusal, pause, context-window stop or a cut stream is never a finished answer)."""
        rec = self.record(req, getattr(message, "usage", None))
        read = read_message(message)
        usage = rec.usage()
        details = {
            **{k: v for k, v in rec.to_dict().items() if k != "diagnosis"},
            "diagnosis": list(rec.diagnosis),
            "model": read.model or self.model,  # the snapshot the response named, else the one asked for
            "stop_reason": read.stop_reason,
            "stop_sequence": read.stop_sequence,
            "breakpoints": [p.where for p in req.placed],
            "skipped_breakpoints": [s.detail for s in req.skipped],
            "dropped_breakpoints": [d.where for d in req.dropped],  # the caller's own markers taken off
            "notes": list(req.notes),
        }
        return BackendResult(read.text, provider_layer(usage.cache_read), usage, ttft_s, read.finish_reason,
                             details=details)


def sdk_kwargs(method: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for an SDK ``messages.create``/``stream`` method: parameters the
    installed SDK version does not declare (``temperature`` is gone from anthropic 2.x) move
    into ``extra_body`` so the request body is the same whatever the SDK version."""
    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return dict(kwargs)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(kwargs)
    out = {k: v for k, v in kwargs.items() if k in params}
    extra = {k: v for k, v in kwargs.items() if k not in params}
    if extra:
        out["extra_body"] = {**extra, **dict(out.get("extra_body") or {})}
    return out


class AnthropicBackend:
    """Pipeline backend over the official ``anthropic`` SDK with prompt caching.

    ``generate(layout, *, max_new_tokens, temperature) -> BackendResult`` (sync
    client) and ``agenerate`` (async client). ``stream=True`` streams the
    response to measure TTFT; the usage is the same either way.

    Args:
        client: ``anthropic.Anthropic`` (``base_url=`` points it at the local server).
        model: model id.
        async_client: ``anthropic.AsyncAnthropic`` for :meth:`agenerate`.
        stream: stream responses (TTFT measured at the first text delta).
        extra: more ``messages.create`` keyword arguments for every request.
        **caching: keyword arguments of :class:`AnthropicCaching` (ttl, prefix_ttl,
            min_tokens, token_counter, prices, clock, warn).
    """

    name = ANTHROPIC.name

    def __init__(self, client: Any = None, model: str = "claude-sonnet-4-6", *, async_client: Any = None,
                 stream: bool = True, extra: Mapping[str, Any] | None = None, **caching: Any) -> None:
        if client is None and async_client is None:
            raise ValueError("give client=anthropic.Anthropic(...) and/or async_client=anthropic.AsyncAnthropic(...)")
        self.client = client
        self.async_client = async_client
        self.model = model
        self.stream = stream
        self.extra = dict(extra or {})
        self.caching = AnthropicCaching(model, **caching)

    @property
    def model_id(self) -> str:
        """The model id, part of semantic-cache partition keys: with ``extra`` request fields (a
        response format, thinking, tool policy... they shape every answer) a digest of them is
        appended (``model#<12 hex>``), so backends that differ only there never share answers."""
        return model_with_fields(self.model, self.extra)

    @property
    def stats(self) -> CacheStats:
        """Cumulative usage and cost of this backend's requests."""
        return self.caching.stats

    def _request(self, layout: PromptLayout, max_new_tokens: int, temperature: float) -> CachedRequest:
        if not isinstance(layout, PromptLayout):
            raise TypeError(f"AnthropicBackend needs a PromptLayout, got {type(layout).__name__}; "
                             "build one with PromptLayout.build(question=..., documents=...)")
        return self.caching.build(layout, max_tokens=max_new_tokens, temperature=temperature, extra=self.extra)

    def generate(self, layout: PromptLayout, *, max_new_tokens: int = 256, temperature: float = 0.0,
                 tenant: str | None = None) -> BackendResult:
        """Answer a layout through ``client.messages`` (stream or create). ``tenant`` is left unused: the
        provider keeps its prompt cache per API key (:class:`ragcache.backend.Backend`)."""
        if self.client is None:
            raise ValueError("this backend has no sync client; pass client=anthropic.Anthropic(...) or use agenerate")
        req = self._request(layout, max_new_tokens, temperature)
        t0 = time.perf_counter()
        if not self.stream:
            msg = self.client.messages.create(**sdk_kwargs(self.client.messages.create, req.kwargs))
            return self.caching.result(req, msg, time.perf_counter() - t0)
        ttft = None
        with self.client.messages.stream(**sdk_kwargs(self.client.messages.stream, req.kwargs)) as s:
            for _ in s.text_stream:
                if ttft is None:
                    ttft = time.perf_counter() - t0
            msg = s.get_final_message()
        return self.caching.result(req, msg, ttft if ttft is not None else time.perf_counter() - t0)

    async def agenerate(self, layout: PromptLayout, *, max_new_tokens: int = 256,
                        temperature: float = 0.0, tenant: str | None = None) -> BackendResult:
        """Async :meth:`generate` through ``async_client``."""
        if self.async_client is None:
            raise ValueError("this backend has no async client; pass async_client=anthropic.AsyncAnthropic(...)")
        req = self._request(layout, max_new_tokens, temperature)
        t0 = time.perf_counter()
        if not self.stream:
            msg = await self.async_client.messages.create(
                **sdk_kwargs(self.async_client.messages.create, req.kwargs))
            return self.caching.result(req, msg, time.perf_counter() - t0)
        ttft = None
        async with self.async_client.messages.stream(
                **sdk_kwargs(self.async_client.messages.stream, req.kwargs)) as s:
            async for _ in s.text_stream:
                if ttft is None:
                    ttft = time.perf_counter() - t0
            msg = await s.get_final_message()
        return self.caching.result(req, msg, ttft if ttft is not None else time.perf_counter() - t0)
