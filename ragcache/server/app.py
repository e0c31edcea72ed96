"""The local server's one Starlette app, and the functions that serve it.

The Anthropic Messages API (:mod:`.anthropic`) and the OpenAI chat-completions API (:mod:`.openai`)
run on the same engine, so both share its prefix and chunk KV caches. This module owns building
the app (:func:`create_local_app`), serving it (:func:`serve`) and running it in a thread
(:func:`running_server`); the route modules never import it (no import cycle).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from starlette.applications import Starlette

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ragcache.server.anthropic import AnthropicLocalServer, anthropic_error
from ragcache.server.auth import ServeKeyMiddleware, check_bind, parse_keys
from ragcache.server.openai import OpenAILocalServer, error_response

_OPENAI_PATHS = ("/v1/chat/", "/v1/models", "/v1/completions", "/v1/embeddings")


async def http_error(request: Request, exc: Exception) -> Response:
    """A wrong path or method (404 / 405) in the error body of the API the path belongs to, as the
    real APIs answer, never Starlette's plain-text page."""
    status = getattr(exc, "status_code", 500)
    path, method = request.url.path, request.method
    allow = (getattr(exc, "headers", None) or {}).get("Allow", "")
    message = (f"{method} {path} is not allowed: use {allow or 'another method'}" if status == 405
               else f"no route {method} {path}" if status == 404 else str(getattr(exc, "detail", exc)))
    if path.startswith(_OPENAI_PATHS):
        return error_response(status, message, kind="invalid_request_error", code="not_found" if status == 404 else None)
    return anthropic_error(status, "not_found_error" if status == 404 else "invalid_request_error", message)


def create_local_app(engine: Any, *, models: Sequence[str] | None = None, default_max_tokens: int = 256,
                     keys: str | Iterable[str] | None = None, tenant_header: str | None = None,
                     share_kv_across_namespaces: bool = False, **anthropic: Any) -> Any:
    """One ASGI app answering ``POST /v1/messages``, ``POST /v1/messages/count_tokens``,
    ``POST /v1/chat/completions`` and ``GET /v1/models`` with ``engine``.

    Args:
        models / default_max_tokens: see :class:`~ragcache.server.openai.OpenAILocalServer`; the
            Anthropic route accepts the same ids (case-insensitively) and the Claude model ids whose
            prompt-caching rules it emulates.
        keys: serve keys callers must send (:class:`~ragcache.server.auth.ServeKeyMiddleware`);
            ``None``: open (fine on loopback, see :func:`~ragcache.server.auth.check_bind`).
        tenant_header: header naming the caller's tenant (else a digest of its key or bearer token):
            the prompt cache's entries and the engine's prefix and chunk KV are kept per tenant.
        share_kv_across_namespaces: let tenants reuse each other's prefix and chunk KV (default False:
            sharing lets one caller learn from cached-token counts and time-to-first-token whether
            another sent the same system text or document; :mod:`ragcache.engine.keys`).
        **anthropic: keyword arguments of :class:`~ragcache.server.anthropic.AnthropicLocalServer`
            (``min_tokens``, ``clock``).
    """
    tenancy = {"tenant_header": tenant_header, "share_kv_across_namespaces": share_kv_across_namespaces}
    chat = OpenAILocalServer(engine, models=models, default_max_tokens=default_max_tokens, **tenancy)
    messages = AnthropicLocalServer(engine, models=chat.models, **tenancy, **anthropic)
    app = Starlette(routes=[*messages.app.routes, *chat.routes], exception_handlers={HTTPException: http_error})
    parsed = parse_keys(keys)
    return ServeKeyMiddleware(app, parsed) if parsed else app


create_app = create_local_app
"""Alias of :func:`create_local_app` (the name 0.2 used in :mod:`ragcache.server.anthropic`)."""


def serve(engine: Any, host: str = "127.0.0.1", port: int = 8788, *, keys: str | Iterable[str] | None = None,
          insecure: bool = False, **kwargs: Any) -> None:
    """Serve both APIs for ``engine`` until interrupted (blocking).

    Raises:
        ValueError: ``host`` is not loopback and there is no key (:func:`~ragcache.server.auth.check_bind`).
    """
    import uvicorn

    check_bind(host, parse_keys(keys), insecure=insecure)
    uvicorn.run(create_local_app(engine, keys=keys, **kwargs), host=host, port=port, log_level="info")


@contextlib.contextmanager
def running_server(engine: Any, *, host: str = "127.0.0.1", app: Any = None, **kwargs: Any) -> Iterator[str]:
    """Run the server in a background thread on a free port; yields its base URL.

    Keyword arguments go to :func:`create_local_app` (``min_tokens``, ``clock``, ``models``, ``keys``,
    ``tenant_header``, ``share_kv_across_namespaces``); ``app`` serves another ASGI app instead (the caching proxy in tests).

    Raises:
        RuntimeError: the server did not start within 30 s.
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    asgi = app if app is not None else create_local_app(engine, **kwargs)
    server = uvicorn.Server(uvicorn.Config(asgi, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="ragcache-server")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("the local server did not start")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


__all__ = ["create_app", "create_local_app", "running_server", "serve"]
