"""A local Anthropic-compatible Messages API server with the documented prompt-caching rules.

``ragcache serve --anthropic`` (127.0.0.1) answers ``POST /v1/messages`` (JSON
and SSE streaming) and ``POST /v1/messages/count_tokens`` with the local engine
(:class:`ragcache.engine.engine.LocalEngine`), so the official SDK works
offline::

    client = anthropic.Anthropic(base_url="http://127.0.0.1:8788", api_key="local")

Prompt caching follows :mod:`ragcache.server.cache_rules` (prefix-keyed
entries tools -> system -> messages, 20-block lookback, per-model minimum
cacheable length, 5m / 1h TTL refreshed on hit, at most 4 breakpoints, 1h
before 5m) and the ``usage`` object has the real API's fields. Token counts
are the engine tokenizer's counts of each block's text (tools as canonical
JSON); chat-template tokens are not counted. The engine's own exact prefix KV
cache does the work the provider's cache stands for (response header
``x-ragcache-prefill-reused``: prompt tokens whose KV was reused).

The engine needs ``count_tokens(text) -> int``, ``tokenizer.decode`` and
``stream(messages, max_new_tokens=, temperature=, stop=) -> Iterator[StreamEvent]``
whose last event carries a ``Generation`` (``text``, ``token_ids``,
``stats.finish_reason`` "stop" | "length", ``stats.prefill_tokens_reused``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

from ragcache.hashing import canonical_json
from ragcache.providers.anthropic.blocks import (
    RequestError,
    check_breakpoints,
    check_cache_control,
    flatten_request,
    nearest_cacheable,
    prefix_hashes,
)
from ragcache.server.cache_rules import CacheOutcome, ProviderPromptCache

try:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route
except ImportError as e:  # pragma: no cover - exercised only without the extra
    msg = "the local Anthropic server needs the 'anthropic' extra: pip install 'ragcache[anthropic]'"
    raise ImportError(msg) from e


def _error(status: int, kind: str, message: str) -> JSONResponse:
    rid = "req_" + uuid.uuid4().hex[:24]
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}, "request_id": rid},
                        status_code=status, headers={"request-id": rid})


def _engine_messages(body: Mapping[str, Any]) -> list[dict]:
    """Anthropic request -> the engine's chat messages (system text + tools, text blocks)."""
    system = body.get("system")
    parts = [system] if isinstance(system, str) else [b["text"] for b in system or []]
    if body.get("tools"):
        parts.append("Tools:\n" + "\n".join(canonical_json({k: v for k, v in t.items() if k != "cache_control"})
                                           for t in body["tools"]))
    msgs = [{"role": "system", "content": "\n\n".join(p for p in parts if p)}] if any(parts) else []
    for m in body["messages"]:
        content = m["content"]
        if isinstance(content, str):
            msgs.append({"role": m["role"], "content": content})
            continue
        blocks = []
        for b in content:
            if b["type"] == "text":
                text = b["text"]
            elif b["type"] == "tool_result":
                c = b.get("content", "")
                text = c if isinstance(c, str) else "\n".join(x.get("text", "") for x in c if isinstance(x, Mapping))
            else:
                text = canonical_json({k: v for k, v in b.items() if k != "cache_control"})
            blocks.append({"type": "text", "text": text})
        msgs.append({"role": m["role"], "content": blocks})
    return msgs


def _check_params(body: Any) -> None:
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise RequestError("model: Field required")
    mt = body.get("max_tokens")
    if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
        raise RequestError("max_tokens: Field required (an integer >= 1)")
    t = body.get("temperature", 1.0)
    if not isinstance(t, int | float) or not 0.0 <= t <= 1.0:
        raise RequestError("temperature: Input should be a number between 0 and 1")
    stops = body.get("stop_sequences", [])
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise RequestError("stop_sequences: Input should be a list of strings")
    if not isinstance(body.get("stream", False), bool):
        raise RequestError("stream: Input should be a valid boolean")


class AnthropicLocalServer:
    """The Starlette app (:attr:`app`) around an engine and a :class:`ProviderPromptCache`.

    Args:
        engine: a LocalEngine (or any object with the API in the module docstring).
        min_tokens: minimum cacheable length overrides (int for all models, or by family).
        clock: seconds, for cache TTLs (tests pass a fake clock).
    """

    def __init__(self, engine: Any, *, min_tokens: Mapping[str, int] | int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.engine = engine
        self.cache = ProviderPromptCache(min_tokens=min_tokens, clock=clock)
        self.app = Starlette(routes=[
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
        ])

    def _prepare(self, body: dict, *, count_only: bool = False) -> tuple[list, list[int]]:
        if not count_only:
            _check_params(body)
        elif not isinstance(body, dict) or not isinstance(body.get("model"), str):
            raise RequestError("model: Field required")
        blocks = flatten_request(body)
        auto = body.get("cache_control")
        if auto is not None and not count_only:  # top-level automatic caching: the last block that can carry it
            last = nearest_cacheable(blocks, len(blocks) - 1)
            cc = check_cache_control(auto, "cache_control")
            if last is not None:
                blocks[last] = dataclasses.replace(blocks[last], cache_control=cc)
        check_breakpoints(blocks)
        return blocks, [self.engine.count_tokens(b.text) for b in blocks]

    async def count_tokens(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
            blocks, toks = self._prepare(body, count_only=True)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "invalid_request_error", "request body is not valid JSON")
        except RequestError as e:
            return _error(400, "invalid_request_error", str(e))
        return JSONResponse({"input_tokens": sum(toks)})

    async def messages(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
            blocks, toks = self._prepare(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return _error(400, "invalid_request_error", "request body is not valid JSON")
        except RequestError as e:
            return _error(400, "invalid_request_error", str(e))
        model = body["model"]
        limit = int(getattr(self.engine, "context_window", 1 << 30))
        if sum(toks) + body["max_tokens"] > limit:
            return _error(400, "invalid_request_error", f"prompt is too long: {sum(toks)} tokens + max_tokens "
                          f"{body['max_tokens']} > {limit} (the local model's context window)")
        outcome = self.cache.apply(model, blocks, toks, prefix_hashes(model, blocks, body.get("tool_choice")))
        kwargs = {"max_new_tokens": body["max_tokens"], "temperature": float(body.get("temperature", 1.0)),
                  "stop": body.get("stop_sequences") or None}
        msg_id = "msg_" + uuid.uuid4().hex[:24]
        events = self._run(_engine_messages(body), kwargs)
        if body.get("stream"):
            return StreamingResponse(self._sse(events, msg_id, model, outcome, kwargs["stop"]),
                                     media_type="text/event-stream", headers={"request-id": "req_" + msg_id[4:]})
        text, gen = "", None
        async for ev in events:
            if isinstance(ev, ValueError):
                return _error(400, "invalid_request_error", str(ev))
            if isinstance(ev, Exception):
                return _error(500, "api_error", f"{type(ev).__name__}: {ev}")
            text += ev.text
            gen = ev.generation or gen
        stop_reason, stop_seq = self._stop(gen, kwargs["stop"])
        return JSONResponse({
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": gen.text}], "stop_reason": stop_reason, "stop_sequence": stop_seq,
            "usage": outcome.usage(len(gen.token_ids)),
        }, headers={"request-id": "req_" + msg_id[4:],
                    "x-ragcache-prefill-reused": str(getattr(gen.stats, "prefill_tokens_reused", 0))})

    async def _run(self, messages: list[dict], kwargs: dict) -> AsyncIterator[Any]:
        """The engine's stream through its one async bridge (:meth:`LocalEngine.astream`); an engine
        exception is yielded as the event (ValueError -> 400, others -> 500). A client that goes away
        ends the stream, which stops generation within one decode step."""
        try:
            async for ev in self.engine.astream(messages, **kwargs):
                yield ev
        except Exception as e:  # noqa: BLE001 - handed to the request as an error response
            yield e

    def _stop(self, gen: Any, stops: list[str] | None) -> tuple[str, str | None]:
        if gen.stats.finish_reason == "length":
            return "max_tokens", None
        if stops:
            full = self.engine.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
            hits = sorted((full.find(s), s) for s in stops if s in full)
            if hits:
                return "stop_sequence", hits[0][1]
        return "end_turn", None

    async def _sse(self, events: AsyncIterator[Any], msg_id: str, model: str, outcome: CacheOutcome,
                   stops: list[str] | None) -> AsyncIterator[bytes]:
        def sse(kind: str, data: dict) -> bytes:
            return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

        start_usage = outcome.usage(1)
        yield sse("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": start_usage}})
        yield sse("content_block_start", {"type": "content_block_start", "index": 0,
                                          "content_block": {"type": "text", "text": ""}})
        yield sse("ping", {"type": "ping"})
        gen = None
        async for ev in events:
            if isinstance(ev, Exception):
                kind = "invalid_request_error" if isinstance(ev, ValueError) else "api_error"
                yield sse("error", {"type": "error", "error": {"type": kind, "message": str(ev)}})
                return
            if ev.text:
                yield sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                  "delta": {"type": "text_delta", "text": ev.text}})
            gen = ev.generation or gen
        stop_reason, stop_seq = self._stop(gen, stops)
        yield sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        usage = {k: v for k, v in outcome.usage(len(gen.token_ids)).items()
                 if k not in ("cache_creation", "service_tier")}
        yield sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason,
                                                                       "stop_sequence": stop_seq}, "usage": usage})
        yield sse("message_stop", {"type": "message_stop"})


def create_app(engine: Any, **kwargs: Any) -> Starlette:
    """The ASGI app for ``engine``: these routes and the OpenAI-compatible ones
    (:func:`ragcache.server.app.create_local_app`; keyword arguments of :class:`AnthropicLocalServer`,
    and ``models`` / ``default_max_tokens`` of :class:`~ragcache.server.openai.OpenAILocalServer`)."""
    from ragcache.server.app import create_local_app

    return create_local_app(engine, **kwargs)


def serve(engine: Any, host: str = "127.0.0.1", port: int = 8788, **kwargs: Any) -> None:
    """Serve the Messages API for ``engine`` until interrupted (blocking)."""
    uvicorn.run(create_app(engine, **kwargs), host=host, port=port, log_level="info")


@contextlib.contextmanager
def running_server(engine: Any, *, host: str = "127.0.0.1", **kwargs: Any) -> Iterator[str]:
    """Run the server in a background thread on a free port; yields its base URL.

    Keyword arguments go to :func:`create_app` (``min_tokens``, ``clock``; ``models``).

    Raises:
        RuntimeError: the server did not start within 30 s.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(engine, **kwargs), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True,
                              name="ragcache-anthropic-server")
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("the local Anthropic server did not start")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
