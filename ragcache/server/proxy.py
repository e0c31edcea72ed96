"""A caching proxy in front of the Anthropic Messages API (``ragcache serve --anthropic --upstream URL``).

Clients keep the official SDK and point ``base_url`` at the proxy. On the way through, for
``POST /v1/messages`` (JSON or SSE streaming):

1. **semantic cache** (the one replay rule, :class:`ragcache.answering.Sampling`: a request that samples,
   at ``temperature`` > 0 or unset (the Messages API's default is 1.0), is a fresh draw, neither looked up
   nor stored, unless the proxy is built with ``cache_sampled=True``; the API has no seed): the request's
   request is ragcache's one keyer (:func:`body_request`, :mod:`ragcache.request`): the question is the
   question of the last text block of the last user turn (the whole body matched exactly when it cannot be
   told from its context), the blocks before it are documents; everything else (model, system, tools,
   earlier turns, the documents' identities, every answer-shaping field and the
   ``anthropic-version`` / ``anthropic-beta`` headers, and the caller's tenant as the namespace) is
   the exact partition (:func:`ragcache.request.request_partition`); a body field the partition
   does not know (:mod:`ragcache.server.body_fields`) bypasses the cache (logged). The tenant is a
   digest of the caller's credential, or an operator-named header (:mod:`ragcache.server.auth`), so
   caller B is never served caller A's answer. A hit is answered without calling upstream (zero
   usage, ``x-ragcache-layer: semantic``).
   The request goes through ragcache's one answer path (:class:`ragcache.answering.AnswerPath`):
   identical concurrent requests of one tenant make one upstream call (streamed ones too: the leader
   relays upstream's stream, the others wait for it and are answered from the cache);
2. **breakpoints**: ``cache_control`` markers are placed on a copy of the body
   (:meth:`ragcache.providers.anthropic.backend.AnthropicCaching.prepare`; the caller's own are kept,
   a request-level one counts among the 4; a breakpoint class whose writes go unread stops being
   placed, learned per tenant: :mod:`ragcache.providers.anthropic.ledger`);
3. **forwarding**: the body goes to ``{upstream}/v1/messages`` with the credential the operator chose
   (``upstream_auth``: the caller's ``x-api-key`` / ``Authorization``, or the operator's
   ``$ANTHROPIC_API_KEY``) and ``anthropic-*`` headers; a stream is relayed chunk by chunk as it
   arrives, and parsed on the side for text and usage. Upstream may compress its responses (gzip,
   deflate; the proxy asks for them): the proxy decodes them, parses the decoded bytes and relays
   them to the client without a ``Content-Encoding`` (identity, which every client accepts);
   Where it does not cache the proxy is transparent (:mod:`ragcache.server.relay`): upstream's status,
   body and the headers that steer clients (``retry-after``, ``retry-after-ms``, ``x-should-retry``,
   ``anthropic-ratelimit-*``, ``request-id``, ``x-request-id``) are relayed, JSON and streamed, errors
   and successes; an unreachable upstream is a ``502``, a timed-out one a ``504``, with the API's
   error body; a stream that fails after it started ends with an ``error`` event;
4. **accounting**: the response's usage is read back (cache read / write, cost and cost without
   caching at list prices) per model; ``GET /v1/ragcache/stats`` returns the totals. A stream is
   accounted once from what it said (``message_start`` carries the input and cache tokens), so a
   stream cut by the client or upstream is billed for what it cost; an answer is stored by the one
   rule (:func:`ragcache.answering.cacheable`: text that ended normally; never one cut at
   ``max_tokens``, a tool use, a refusal, a pause or a cut stream). ``x-ragcache-layer``
   is a :data:`ragcache.backend.Layer`: ``provider-cache`` when upstream read part of the prompt
   from its cache, else ``provider``; ``semantic`` for a hit, which replays the stored answer's
   content blocks as they were (text blocks with their citations), JSON or streamed.

Also ``GET /health``, ``GET /v1/models``, ``POST /v1/messages/count_tokens`` (forwarded).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

try:
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse  # raw upstream relay
    from starlette.routing import Route
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError("the proxy needs the 'anthropic' extra: pip install 'ragcache[anthropic]'") from e

from ragcache.answering import DEFAULT_LOOKUP_TIMEOUT_S, Answer, AnswerPath, Sampling
from ragcache.backend import BackendResult, CacheUsage, provider_layer
from ragcache.request import CacheRequest, KeyedPrompt, key_messages
from ragcache.providers.anthropic.backend import AnthropicCaching
from ragcache.providers.anthropic.pricing import PRICES
from ragcache.providers.anthropic.provider import ANTHROPIC
from ragcache.providers.anthropic.provider import FINISH_REASONS as ANTHROPIC_FINISH
from ragcache.providers.anthropic.usage import MessageRead, read_message
from ragcache.metrics import CacheMetrics
from ragcache.server.auth import ServeKeyMiddleware, credential, tenant_of
from ragcache.server.body_fields import shaping_fields
from ragcache.server.message_events import SSEParser, message_events, replay_blocks
from ragcache.server.relay import error_event, steering_headers, upstream_failure
from ragcache.server.sse import anthropic_event, event_stream

if TYPE_CHECKING:
    from ragcache.semantic import SemanticCache

_FORWARD = ("anthropic-version", "anthropic-beta", "content-type")
log = logging.getLogger(__name__)


def _text(block: Any) -> str | None:
    if isinstance(block, str):
        return block
    if isinstance(block, Mapping) and block.get("type") == "text":
        return str(block.get("text", ""))
    return None


def _strip(block: Any) -> Any:
    return {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, Mapping) else block


def _keyed(body: Mapping[str, Any]) -> tuple[KeyedPrompt, dict[str, Any]] | None:
    """``(keyed prompt, answer-shaping params)`` of a body the semantic cache may answer, else ``None``."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs or not isinstance(msgs[-1], Mapping) or msgs[-1].get("role") != "user":
        return None
    if request_sampling(body) is None or body.get("stream") not in (None, True, False):
        return None
    params, unknown = shaping_fields(body)
    if unknown:
        log.info("semantic cache bypassed: request field(s) %s are not in the partition (they may change the "
                 "answer); the request is forwarded uncached", ", ".join(unknown))
        return None
    content = msgs[-1].get("content")
    blocks = [content] if isinstance(content, str) else list(content or [])
    if not blocks or _text(blocks[-1]) is None or not _text(blocks[-1]).strip():
        return None
    system = params.pop("system", None)
    texts = [_text(b) for b in system] if isinstance(system, list) else []
    system_text = system if isinstance(system, str) or system is None else "\n\n".join(texts) if all(
        t is not None and set(_strip(b)) <= {"type", "text"} for t, b in zip(texts, system)) else json.dumps(
        [_strip(b) for b in system], sort_keys=True)  # text blocks are the system text; anything else exactly
    tools = params.pop("tools", None) or []
    messages = [{"role": m.get("role"), "content": m.get("content") if isinstance(m.get("content"), str)
                else [_strip(b) for b in m.get("content") or []]} for m in msgs]
    try:
        keyed = key_messages(messages, system=system_text or None, tools=[_strip(t) for t in tools])
    except (ValueError, TypeError):  # a message the layout rule refuses: not answered from the cache
        return None
    return keyed, params


def body_request(body: Mapping[str, Any], headers: Mapping[str, str] | None = None, *, tenant: str = "default",
                 cached: bool = True) -> CacheRequest:
    """The :class:`~ragcache.request.CacheRequest` of a Messages API body, by ragcache's one keyer
    (:func:`ragcache.request.key_messages`): the question is the final user turn's question (its last text
    block, a labelled question in it, or the whole block when question-sized; else the whole prompt is
    matched exactly), the text blocks before it are documents (so ``invalidate(document)`` reaches the
    answer), earlier turns are history. The partition's namespace is ``proxy-<tenant>``, its model
    ``anthropic:<model>``, its params every answer-shaping body field
    (:data:`ragcache.server.body_fields.ANTHROPIC_SHAPING`: budget, sampling, stop sequences, tool policy,
    thinking, structured-output settings...), and its extra the request's metadata and the
    ``anthropic-version`` / ``anthropic-beta`` headers (a beta can change the answer's shape).

    A request the cache may not answer has no partition (``partition is None``, question ``""``): a
    temperature that is not a number >= 0, a field the partition does not know (logged), a final turn
    that does not end with text, no user turn last, or ``cached=False`` (whether a sampled request may be
    answered from the cache is the answer path's rule: :func:`request_sampling`).
    """
    budget = body.get("max_tokens") if isinstance(body.get("max_tokens"), int) else None
    keyed = _keyed(body) if cached else None
    if keyed is None:
        return CacheRequest("", None, None, f"proxy-{tenant}", budget, request_sampling(body), model=body.get("model"))
    h = {k: (headers or {}).get(k) for k in ("anthropic-version", "anthropic-beta")}
    return keyed[0].request(model=f"anthropic:{body.get('model')}", tenant=f"proxy-{tenant}", params=keyed[1],
                            extra={"metadata": body.get("metadata"), "headers": h}, max_tokens=budget,
                            sampling=request_sampling(body), provenance_model=body.get("model"))


def request_sampling(body: Mapping[str, Any]) -> Sampling | None:
    """The Messages request's :class:`~ragcache.answering.Sampling` (its ``temperature``; unset means the API's
    default, 1.0; the API has no seed and one choice), or ``None`` for a temperature that is not a number >= 0."""
    t = body.get("temperature")
    if t is not None and (isinstance(t, bool) or not isinstance(t, int | float) or not t >= 0):
        return None
    return Sampling(None if t is None else float(t), None, 1, unset_temperature=ANTHROPIC.unset_temperature)


def _refused(e: Exception) -> JSONResponse:
    return JSONResponse({"type": "error", "error": {"type": "invalid_request_error", "message": str(e)}},
                        status_code=400)


def upstream_result(read: MessageRead, blocks: list[Any], usage: CacheUsage, ttft_s: float,
                    details: Mapping[str, Any]) -> BackendResult:
    """An upstream Anthropic response (read by :func:`~ragcache.providers.anthropic.usage.read_message`,
    or a stream by :meth:`~ragcache.server.message_events.SSEParser.read`) and its content ``blocks``
    as :class:`~ragcache.backend.BackendResult`, which the one rule (:func:`ragcache.answering.cacheable`)
    judges. A normal end with blocks beside text is not a text answer: ``tool_calls`` when a block is
    a (server) tool's, else ``incomplete`` (thinking and other blocks the cache cannot replay). ``details``
    gets the model, native stop reason / sequence and the text blocks when their text alone would lose
    something (citations: :func:`~ragcache.server.message_events.replay_blocks`); the provenance keeps
    them, so a hit replays them."""
    finish = read.finish_reason
    kinds = [str(b.get("type")) if isinstance(b, Mapping) else "" for b in blocks]
    if finish == "stop" and not read.only_text:
        finish = "tool_calls" if any("tool" in k for k in kinds) else "incomplete"
    extra = {"content_blocks": replay_blocks(blocks, read.text)} if read.only_text else {}
    return BackendResult(read.text, provider_layer(usage.cache_read), usage, ttft_s, finish, details={
        **details, **extra, "model": read.model, "stop_reason": read.stop_reason, "stop_sequence": read.stop_sequence})


class _Accounts:
    """Per-model :class:`AnthropicCaching` (breakpoint placement + usage/cost accounting)."""

    def __init__(self, min_tokens: Mapping[str, int] | int | None) -> None:
        self._by_model: dict[str, AnthropicCaching] = {}
        self._lock = threading.Lock()
        self.min_tokens = min_tokens
        self.semantic_hits = 0
        self.requests = 0

    def get(self, model: str) -> AnthropicCaching:
        with self._lock:
            if model not in self._by_model:
                self._by_model[model] = AnthropicCaching(model, min_tokens=self.min_tokens, warn=False)
            return self._by_model[model]

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "semantic_hits": self.semantic_hits,
                "models": {m: c.stats.to_dict() for m, c in self._by_model.items()}}


class AnthropicProxy:
    """The proxy's Starlette app (:attr:`app`).

    Args:
        upstream: base URL of the Anthropic API (``https://api.anthropic.com``) or a compatible server.
        semantic: a :class:`ragcache.semantic.SemanticCache`, or ``None`` to skip that layer.
        api_key: the operator's key (``ragcache serve`` passes ``$ANTHROPIC_API_KEY``): sent upstream in
            ``operator`` mode, and in ``caller`` mode for a caller that sends no credential.
        keys: serve keys callers must send (:class:`~ragcache.server.auth.ServeKeyMiddleware`).
        tenant_header: header naming the caller's tenant; default: a digest of the caller's
            credential (:func:`~ragcache.server.auth.tenant_of`). Semantic-cache partitions are per tenant.
        upstream_auth: ``caller`` (forward the caller's own ``x-api-key`` / ``Authorization``
            unchanged), ``operator`` (send ``api_key``; the caller's credential never leaves the
            proxy) or ``auto`` (``operator`` when ``keys`` are set, since callers then send a serve
            key, else ``caller``).
        min_tokens: overrides of the minimum cacheable length used for breakpoint placement.
        metrics: a :class:`ragcache.metrics.CacheMetrics` (default: off).
        timeout_s: seconds before an upstream call fails.
        cache_sampled: replay one stored sample to later sampled requests (labelled in the stored
            provenance); default ``False``: each sampled request is forwarded (a fresh draw).
        lookup_timeout_s: deadline (seconds) of each answer-cache lookup and store: an embedder or store
            that fails or hangs past it costs a logged miss and the request is forwarded.
        transport: an ``httpx`` transport (tests: ``httpx.ASGITransport``).
    """

    def __init__(self, upstream: str, *, semantic: SemanticCache | None = None, api_key: str | None = None,
                 min_tokens: Mapping[str, int] | int | None = None, metrics: CacheMetrics | None = None,
                 timeout_s: float = 600.0, transport: Any = None, keys: tuple[str, ...] = (),
                 tenant_header: str | None = None, upstream_auth: str = "auto", cache_sampled: bool = False,
                 lookup_timeout_s: float | None = DEFAULT_LOOKUP_TIMEOUT_S) -> None:
        if not upstream.startswith(("http://", "https://")):
            raise ValueError(f"--upstream must be an http(s) URL such as https://api.anthropic.com, got {upstream!r}")
        self.upstream = upstream.rstrip("/")
        self.semantic = semantic
        self.api_key = api_key
        self.tenant_header = tenant_header
        mode = ("operator" if keys else "caller") if upstream_auth == "auto" else upstream_auth
        if mode not in ("caller", "operator"):
            raise ValueError(f"upstream_auth must be caller, operator or auto, got {upstream_auth!r}")
        if mode == "caller" and keys:
            raise ValueError("with serve keys callers send a serve key, which must not go upstream: use "
                             "upstream_auth='operator' (RAGCACHE_UPSTREAM_AUTH=operator) with ANTHROPIC_API_KEY")
        if mode == "operator" and not self.api_key:
            raise ValueError("upstream_auth='operator' needs the operator's key: set ANTHROPIC_API_KEY")
        self.upstream_auth = mode
        self.metrics = metrics or CacheMetrics("off")
        self.path = AnswerPath(semantic, cache_sampled=cache_sampled, lookup_timeout_s=lookup_timeout_s)
        """The one answer path (:class:`ragcache.answering.AnswerPath`): lookup, single flight (identical
        concurrent requests of one tenant make one upstream call), the one storage rule, the store."""
        self.accounts = _Accounts(min_tokens)
        self.client = httpx.AsyncClient(base_url=self.upstream, timeout=timeout_s, transport=transport)
        self.routes_app = Starlette(routes=[
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/ragcache/stats", self.stats, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.render_metrics, methods=["GET"]),
        ])
        self.app: Any = ServeKeyMiddleware(self.routes_app, keys) if keys else self.routes_app

    # ------------------------------------------------------------------ helpers
    def _headers(self, request: Request) -> tuple[dict[str, str], str]:
        """Upstream headers and the caller's tenant. ``caller`` mode forwards the caller's own
        credential header unchanged (the operator's key only for a caller that sends none);
        ``operator`` mode sends the operator's key and nothing of the caller's.

        Raises:
            PermissionError: the operator's tenant header is configured and missing.
        """
        h = {k: request.headers[k] for k in _FORWARD if k in request.headers}
        h.setdefault("anthropic-version", "2023-06-01")
        tenant = tenant_of(request.headers, tenant_header=self.tenant_header)
        if self.upstream_auth == "caller" and credential(request.headers):
            for k in ("x-api-key", "authorization"):
                if k in request.headers:
                    h[k] = request.headers[k]
        elif self.api_key:
            h["x-api-key"] = self.api_key
        return h, tenant

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "mode": "proxy", "upstream": self.upstream,
                             "semantic_cache": self.semantic is not None, "metrics": self.metrics.mode})

    async def render_metrics(self, request: Request) -> Response:
        from ragcache.metrics import CONTENT_TYPE

        if self.metrics.mode != "prometheus":
            return JSONResponse({"error": "metrics are off: start with --metrics prometheus"}, status_code=404)
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

    async def stats(self, request: Request) -> Response:
        out = self.accounts.to_dict()
        if self.semantic is not None:
            out["semantic"] = self.semantic.stats.to_dict()
        return JSONResponse(out)

    async def models(self, request: Request) -> Response:
        try:
            headers, _ = self._headers(request)
        except PermissionError as e:
            return _refused(e)
        try:
            r = await self.client.get("/v1/models", headers=headers, params=dict(request.query_params))
            if r.status_code == 200:
                return Response(r.content, media_type="application/json")
        except httpx.HTTPError:
            pass
        return JSONResponse({"data": [{"type": "model", "id": m, "display_name": m} for m in PRICES],
                             "has_more": False, "first_id": next(iter(PRICES)), "last_id": list(PRICES)[-1]})

    async def count_tokens(self, request: Request) -> Response:
        try:
            headers, _ = self._headers(request)
        except PermissionError as e:
            return _refused(e)
        try:
            r = await self.client.post("/v1/messages/count_tokens", content=await request.body(), headers=headers)
        except httpx.HTTPError as e:
            return self._failed(e)
        return Response(r.content, status_code=r.status_code, media_type="application/json",
                        headers=steering_headers(r.headers))

    async def messages(self, request: Request) -> Response:
        t0 = time.perf_counter()
        raw = await request.body()
        try:
            body = json.loads(raw)
            if not isinstance(body, dict) or not isinstance(body.get("model"), str):
                raise ValueError
        except ValueError:
            return JSONResponse({"type": "error", "error": {"type": "invalid_request_error",
                                                             "message": "request body is not a JSON object with a model"}},
                                status_code=400)
        try:
            headers, tenant = self._headers(request)
        except PermissionError as e:
            return _refused(e)
        self.accounts.requests += 1
        key = body_request(body, request.headers, tenant=tenant, cached=self.semantic is not None)
        caching = self.accounts.get(body["model"])
        try:
            req = caching.prepare(body, scope=tenant)  # the write ledger learns per tenant
        except (ValueError, TypeError) as e:
            return _refused(e)
        out = json.dumps(req.kwargs).encode()
        if body.get("stream"):
            return await self._stream(out, headers, caching, req, body, key, t0)
        called: list[float] = []

        async def call() -> BackendResult:
            called.append(time.perf_counter())
            try:
                r = await self.client.post("/v1/messages", content=out, headers=headers)
            except httpx.HTTPError as e:  # unreachable or timed out: 502 / 504, never stored
                return BackendResult("", "provider", CacheUsage(), finish_reason="error", details={"failure": e})
            if r.status_code != 200:  # relayed as is, never stored
                return BackendResult("", "provider", CacheUsage(), finish_reason="error", details={"response": r})
            msg = r.json()
            usage = self._account(caching, req, msg.get("usage") or {}, time.perf_counter() - t0)
            return upstream_result(read_message(msg), list(msg.get("content") or []), usage,
                                   time.perf_counter() - t0, {"response": r})

        cached = key.partition is not None
        answer = await self.path.arun(key, call, lookup=cached, store=cached)
        if cached and self.path.fresh_draw(key.sampling) is None:  # the lookup's time
            self.metrics.lookup((called[0] if called else time.perf_counter()) - t0, answer.hit)
        if answer.hit:
            return self._served(body, answer, t0)
        if "failure" in answer.details:
            return self._failed(answer.details["failure"])
        r = answer.details["response"]
        extra = steering_headers(r.headers)  # retry-after, x-should-retry, rate limits, request ids
        if r.status_code == 200:
            u = answer.usage
            extra |= {"x-ragcache-layer": answer.layer, "x-ragcache-cache-read": str(u.cache_read),
                     "x-ragcache-cache-write": str(u.cache_write), "x-ragcache-cost-usd": f"{u.cost_usd or 0:.6f}",
                     "x-ragcache-breakpoints": str(len(req.placed))}
        return Response(r.content, status_code=r.status_code, media_type="application/json", headers=extra)

    async def _stream(self, out: bytes, headers: dict[str, str], caching: AnthropicCaching, req: Any,
                      body: Mapping[str, Any], key: CacheRequest,
                      t0: float) -> Response:
        """A streamed request through the one answer path (:meth:`ragcache.answering.AnswerPath.astream`):
        a stored answer replayed as events, else the upstream stream relayed as it arrives (the headers
        wait for its first event, whose usage names the layer) and stored when it ended normally
        (:func:`ragcache.answering.cacheable`). Identical concurrent streamed requests of one tenant make
        one upstream call: the leader relays it, the others wait and are answered from the cache.

        The relayed bytes are upstream's decoded body (a compressed stream is decoded as it arrives, so
        the parser and the client read the same events); they travel through the path as ``latin-1``
        text (a lossless byte <-> str map), so the client gets exactly the events upstream sent; the
        stored text is the parser's, never these pieces."""
        leg = _UpstreamStream(self, self.client.build_request("POST", "/v1/messages", content=out, headers=headers),
                              caching, req, t0)
        parser, state, bill = leg.parser, leg.state, leg.bill
        cached = key.partition is not None
        items = self.path.astream(key, leg.events, lookup=cached, store=cached)
        head: list[str] = []
        first: Any = None
        try:
            async for item in items:  # up to the first event (message_start: the usage says the layer)
                if isinstance(item, Answer) or "called" not in state:
                    first = item
                    break
                head.append(item)
                if parser.usage or parser.error:
                    break
        except BaseException:
            await items.aclose()
            raise
        if cached and self.path.fresh_draw(key.sampling) is None:
            self.metrics.lookup(state.get("called", time.perf_counter()) - t0, "called" not in state)
        if "called" not in state:  # a hit: its text, then its Answer
            hit = first if isinstance(first, Answer) else await items.__anext__()
            await items.aclose()
            return self._served(body, hit, t0)
        if "failure" in state:
            await items.aclose()
            return self._failed(state["failure"])
        if "error" in state:
            await items.aclose()
            content, status = state["error"]
            return Response(content, status_code=status, media_type="application/json", headers=state["headers"])
        layer = provider_layer(ANTHROPIC.usage_of(parser.usage).cache_read)

        async def relay() -> AsyncIterator[bytes]:
            try:
                for piece in head:
                    yield piece.encode("latin-1")
                async for item in items:
                    if isinstance(item, str):
                        yield item.encode("latin-1")
            finally:
                bill()  # the client hung up: billed for what message_start reported
                await items.aclose()

        return StreamingResponse(relay(), media_type="text/event-stream", headers={
            **state["headers"], "x-ragcache-layer": layer, "x-ragcache-breakpoints": str(len(req.placed))})

    def _failed(self, e: httpx.HTTPError) -> Response:
        """The answer to a call whose upstream could not be reached (``502``) or did not answer in
        time (``504``), in the Messages API's error shape (:func:`ragcache.server.relay.upstream_failure`)."""
        status, err = upstream_failure(e, self.upstream)
        log.warning("upstream %s failed: %s: %s", self.upstream, type(e).__name__, e)
        return JSONResponse(err, status_code=status)

    def _account(self, caching: AnthropicCaching, req: Any, usage: Mapping[str, Any], ttft_s: float) -> CacheUsage:
        rec = caching.record(req, dict(usage))
        u = ANTHROPIC.usage_of(usage, cost_usd=rec.cost_usd, uncached_cost_usd=rec.uncached_cost_usd)
        self.metrics.request(provider_layer(u.cache_read), u, ttft_s)
        return u

    def _served(self, body: Mapping[str, Any], hit: Answer, t0: float) -> Response:
        """A semantic hit, counted and timed, replayed as the request asked (:meth:`_replay`)."""
        self.accounts.semantic_hits += 1
        self.metrics.request("semantic", None, time.perf_counter() - t0)
        return self._replay(body, hit)

    def _replay(self, body: Mapping[str, Any], hit: Answer) -> Response:
        """A semantic hit as an Anthropic message (or its events,
        :func:`~ragcache.server.message_events.message_events`): zero usage, the stored answer's stop
        reason and content blocks as they were (text blocks with their citations; else one text block)
        from its :class:`~ragcache.answering.Provenance`."""
        msg_id = "msg_" + uuid.uuid4().hex[:24]
        usage = {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        headers = {"x-ragcache-layer": "semantic", "x-ragcache-similarity": f"{hit.similarity or 0:.4f}",
                   "request-id": "req_" + msg_id[4:]}
        prov = hit.provenance
        if prov is not None and prov.sampled:  # one sample replayed under cache_sampled=True
            headers["x-ragcache-sampled"] = "true"
        native = prov.stop_reason if prov is not None else None
        stop_reason = native if native in ANTHROPIC_FINISH and ANTHROPIC_FINISH[native] == hit.finish_reason else \
            ANTHROPIC.native_finish("length" if hit.finish_reason == "length" else "stop")
        stop_seq = prov.stop_sequence if prov is not None and stop_reason == "stop_sequence" else None
        content = [dict(b) for b in prov.content] if prov is not None and prov.content else \
            [{"type": "text", "text": hit.text}]
        model = prov.snapshot if prov is not None and prov.snapshot else body["model"]  # as upstream named it
        message = {"id": msg_id, "type": "message", "role": "assistant", "model": model,
                   "content": content, "stop_reason": stop_reason, "stop_sequence": stop_seq, "usage": usage}
        if not body.get("stream"):
            return JSONResponse(message, headers=headers)

        async def events() -> AsyncIterator[Any]:
            for kind, data in message_events(message):
                yield anthropic_event(kind, data)

        return event_stream(events(), headers=headers)

    async def aclose(self) -> None:
        await self.client.aclose()


class _UpstreamStream:
    """One streamed upstream call of the proxy: relayed as it arrives, parsed on the side, accounted
    once (:meth:`bill`). ``state`` says how it went: ``called`` (when the call began), ``failure``
    (the exception of a call that got no stream: a 502 / 504), ``error`` (a non-200 status and body,
    relayed as is), ``headers`` (the steering headers to relay), ``billed`` / ``usage``."""

    def __init__(self, proxy: AnthropicProxy, request: httpx.Request, caching: AnthropicCaching, req: Any,
                 t0: float) -> None:
        self.proxy, self.request, self.caching, self.req, self.t0 = proxy, request, caching, req, t0
        self.parser = SSEParser()
        self.state: dict[str, Any] = {}

    def bill(self) -> CacheUsage | None:
        """Account the stream's usage once, from what it said so far: ``message_start`` carries the
        input, cache-write and cache-read tokens, so a stream cut by either side is billed for them.
        Synchronous: it runs in ``finally`` blocks before any ``await`` (a cancelled task may not get
        past one)."""
        if self.state.get("billed") or not self.parser.usage:
            return None
        self.state["billed"] = True
        ttft = (self.parser.first_token_at or time.perf_counter()) - self.t0
        self.state["usage"] = self.proxy._account(self.caching, self.req, self.parser.usage, ttft)
        return self.state["usage"]

    async def events(self) -> AsyncIterator[str | BackendResult]:
        """The answer path's call: upstream's decoded bytes as ``latin-1`` text, then the
        :class:`~ragcache.backend.BackendResult` (an ``error`` result for a failed call or status)."""
        parser, state = self.parser, self.state
        state["called"] = time.perf_counter()
        try:
            r = await self.proxy.client.send(self.request, stream=True)
        except httpx.HTTPError as e:  # unreachable or timed out: 502 / 504, never stored
            state["failure"] = e
            yield BackendResult("", "provider", CacheUsage(), finish_reason="error")
            return
        state["headers"] = steering_headers(r.headers)
        relayed = False
        try:
            if r.status_code != 200:  # relayed as is, never stored
                state["error"] = (await r.aread(), r.status_code)
                yield BackendResult("", "provider", CacheUsage(), finish_reason="error")
                return
            try:
                async for chunk in r.aiter_bytes():  # decoded: upstream may gzip its stream
                    parser.feed(chunk)
                    relayed = True
                    yield chunk.decode("latin-1")
            except httpx.HTTPError as e:  # cut or stalled after it started
                if not relayed:
                    state["failure"] = e
                    yield BackendResult("", "provider", CacheUsage(), finish_reason="error")
                    return
                event = error_event(upstream_failure(e, self.proxy.upstream)[1])
                parser.feed(b"\n\n" + event)  # the parser reads the stream as failed: never stored
                yield event.decode("latin-1")
        finally:
            self.bill()  # before any await
            await r.aclose()
        if parser.usage and not parser.error:  # else a cut stream: incomplete, never stored
            ttft = (parser.first_token_at or time.perf_counter()) - self.t0
            yield upstream_result(parser.read(), parser.blocks, state["usage"], ttft, {})


def create_proxy_app(upstream: str, **kwargs: Any) -> Starlette:
    """The proxy's ASGI app (keyword arguments of :class:`AnthropicProxy`)."""
    return AnthropicProxy(upstream, **kwargs).app


__all__ = ["AnthropicProxy", "body_request", "create_proxy_app", "upstream_result"]
