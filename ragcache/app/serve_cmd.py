"""``ragcache serve --anthropic``: the local Anthropic-compatible server, or the caching proxy.

Local mode (default) answers with the local engine (:mod:`ragcache.server.app`: both APIs) and adds
``GET /health``, ``GET /v1/models`` and, with ``--metrics prometheus``, ``GET /metrics``; its
chunk KV is kept on disk under ``$RAGCACHE_KV_DIR``. Proxy mode (``--upstream URL``) runs
:class:`ragcache.server.proxy.AnthropicProxy` with the semantic answer cache under
``$RAGCACHE_ANSWERS_DIR``.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

from ragcache.app.output import say
from ragcache.config import Config, provider_api_key
from ragcache.metrics import CONTENT_TYPE, CacheMetrics


class UsageMetrics:
    """ASGI middleware: reads the ``usage`` of each ``/v1/messages`` response (JSON or event
    stream) on its way out and records it in a :class:`CacheMetrics`. The response is unchanged."""

    def __init__(self, app: Any, metrics: CacheMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") != "/v1/messages" or not self.metrics.enabled:
            await self.app(scope, receive, send)
            return
        import time

        from ragcache.server.message_events import SSEParser

        t0 = time.perf_counter()
        parser, body, state = SSEParser(), bytearray(), {"status": 0, "sse": False}

        async def wrapped(message: dict) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                ctype = dict(message.get("headers") or []).get(b"content-type", b"")
                state["sse"] = ctype.startswith(b"text/event-stream")
            elif message["type"] == "http.response.body" and state["status"] == 200:
                chunk = message.get("body", b"")
                parser.feed(chunk) if state["sse"] else body.extend(chunk)
                if not message.get("more_body", False):
                    usage = parser.usage if state["sse"] else _json_usage(bytes(body))
                    if usage:
                        self._record(usage, (parser.first_token_at or time.perf_counter()) - t0)
            await send(message)

        await self.app(scope, receive, wrapped)

    def _record(self, usage: dict, ttft_s: float) -> None:
        from ragcache.backend import provider_layer
        from ragcache.providers.anthropic.provider import ANTHROPIC

        u = ANTHROPIC.usage_of(usage)
        self.metrics.request(provider_layer(u.cache_read), u, ttft_s)


def _json_usage(body: bytes) -> dict:
    try:
        return dict(json.loads(body).get("usage") or {})
    except (ValueError, AttributeError):
        return {}


def local_app(engine: Any, metrics: CacheMetrics, *, keys: Any = None, **server_kwargs: Any) -> Any:
    """The local server's app (Anthropic ``/v1/messages``, OpenAI ``/v1/chat/completions``, ``/v1/models``)
    with ``/health`` and ``/metrics`` beside it, behind the serve-key check when ``keys`` are given."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Mount, Route

    from ragcache.server.app import create_local_app
    from ragcache.server.auth import ServeKeyMiddleware, parse_keys

    async def health(request: Any) -> Response:
        return JSONResponse({"status": "ok", "mode": "local", "model": str(engine.fingerprint),
                             "metrics": metrics.mode})

    async def render(request: Any) -> Response:
        if metrics.mode != "prometheus":
            return JSONResponse({"error": "metrics are off: start with --metrics prometheus"}, status_code=404)
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    inner = UsageMetrics(create_local_app(engine, **server_kwargs), metrics)
    # /v1/models (OpenAI and Anthropic shapes), /v1/messages and /v1/chat/completions come from the mounted app
    app = Starlette(routes=[Route("/health", health), Route("/metrics", render), Mount("/", app=inner)])
    parsed = parse_keys(keys)
    return ServeKeyMiddleware(app, parsed) if parsed else app


def run_serve(cfg: Config, *, semantic: bool = True, insecure: bool = False, console: Console) -> None:
    """Serve until interrupted (blocking).

    Raises:
        ValueError: a non-loopback ``cfg.host`` without ``cfg.serve_key`` and not ``insecure``
            (:func:`ragcache.server.auth.check_bind`), or a serve key shorter than 16 characters.
    """
    import uvicorn

    from ragcache.server.auth import check_bind, parse_keys

    keys = parse_keys(cfg.serve_key)
    check_bind(cfg.host, keys, insecure=insecure)
    access = (f"key required ({len(keys)} key(s))" if keys else
              "open: no key (loopback only)" if not insecure else "OPEN TO THE NETWORK: no key (--insecure)")
    tenants = f"tenant from header {cfg.tenant_header}" if cfg.tenant_header else "tenant = digest of the caller's key"
    metrics = CacheMetrics(cfg.metrics)
    if cfg.upstream:
        from ragcache.app.runtime import answer_cache, query_embedder
        from ragcache.server.proxy import AnthropicProxy

        sem = answer_cache(cfg, query_embedder(cfg)) if semantic else None
        proxy = AnthropicProxy(cfg.upstream, semantic=sem, metrics=metrics, timeout_s=cfg.upstream_timeout_s,
                               api_key=provider_api_key("anthropic"), keys=keys, tenant_header=cfg.tenant_header,
                               upstream_auth=cfg.upstream_auth)
        say(console, f"caching proxy (Anthropic Messages API) for {cfg.upstream} on http://{cfg.host}:{cfg.port} "
                     f"(semantic cache {'on' if sem else 'off'}, {access}, {tenants}, upstream credential: "
                     f"{cfg.upstream_auth}, metrics {metrics.mode})")
        try:
            uvicorn.run(proxy.app, host=cfg.host, port=cfg.port, log_level="info")
        finally:
            if sem is not None:
                sem.close()
        return
    from ragcache.app.runtime import build_engine
    from ragcache.server.openai import default_model_id

    engine = build_engine(cfg)
    model_id = default_model_id(engine)
    say(console, f"serving the Anthropic Messages API (POST /v1/messages) and the OpenAI Chat Completions API "
                 f"(POST /v1/chat/completions) on http://{cfg.host}:{cfg.port}: model id {model_id!r} "
                 f"(case-insensitive; {engine.fingerprint}), {access}, chunk KV in {cfg.kv_dir}, metrics {metrics.mode}")
    say(console, f"  openai:    OpenAI(base_url='http://{cfg.host}:{cfg.port}/v1', api_key=...), model={model_id!r}")
    say(console, f"  anthropic: Anthropic(base_url='http://{cfg.host}:{cfg.port}', api_key=...), model={model_id!r}")
    uvicorn.run(local_app(engine, metrics, keys=keys, tenant_header=cfg.tenant_header), host=cfg.host,
                port=cfg.port, log_level="info")


__all__ = ["UsageMetrics", "local_app", "run_serve"]
