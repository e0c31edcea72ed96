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
cache does the work the provider's cache stands for, and no more: the engine
reuses prefix KV only up to the end of what the emulated cache read (its
``prefix_limit``; found as the common token prefix of the prompt and the prompt
with every later block replaced). So the ``x-ragcache-*`` headers and the
``usage`` come from one record (:class:`ragcache.server.record.LocalRecord`) and
agree: no cache read, no reused prefix KV. Documents (every text block of the
last user turn but the question) reuse their chunk KV at any position, as on
the OpenAI route: the engine's own saving, which the API has no cache for, so it
shows in ``x-ragcache-chunk-reused`` and never in the ``usage``. A blended
answer is labelled approximate with its setting in ``x-ragcache-approximate`` /
``x-ragcache-blend-setting`` and in the body's ``ragcache`` object (the JSON
message; streamed, ``message_start``'s message and ``message_delta``).

Thinking settings (``thinking``: enabled or not, and its ``budget_tokens``) are
folded into the prefix hashes where the messages start, as ``tool_choice`` is:
after a change the API reads from cache only the tools and system part and
writes the messages again, and so does this server.

The engine is a :class:`~ragcache.engine.interface.ServedEngine` (a :class:`~ragcache.engine.engine.LocalEngine`):
``count_tokens(text) -> int``, ``tokenizer.decode``, ``context_window``,
``build_prompt(messages).input_ids`` and ``astream(request)`` of an
:class:`~ragcache.engine.request.EngineRequest` (the messages, ``max_new_tokens``, ``temperature``,
``stop``, ``prefix_limit`` and the caller's ``tenant``) whose events carry the request's ``stats`` and whose last carries a ``Generation``.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from ragcache.text_checks import is_blank
from ragcache.hashing import canonical_json
from ragcache.providers.anthropic.blocks import (
    RequestError,
    check_breakpoints,
    check_cache_control,
    flatten_request,
    nearest_cacheable,
    prefix_hashes,
    thinking_setting,
)
from ragcache.providers.anthropic.pricing import PRICES, model_family
from ragcache.providers.anthropic.provider import ANTHROPIC
from ragcache.server.auth import kv_namespace, tenant_of
from ragcache.engine.interface import ServedEngine, served_engine
from ragcache.engine.records import ContextWindowError
from ragcache.engine.request import EngineRequest
from ragcache.server.cache_rules import CacheOutcome, ProviderPromptCache
from ragcache.server.openai import prompt_tokens_in
from ragcache.server.record import LocalRecord
from ragcache.server.disconnect import ClientGone, while_connected
from ragcache.server.sse import anthropic_event, event_stream

try:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
except ImportError as e:  # pragma: no cover - exercised only without the extra
    msg = "the local Anthropic server needs the 'anthropic' extra: pip install 'ragcache[anthropic]'"
    raise ImportError(msg) from e


def anthropic_error(status: int, kind: str, message: str) -> JSONResponse:
    rid = "req_" + uuid.uuid4().hex[:24]
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}, "request_id": rid},
                        status_code=status, headers={"request-id": rid})


def _engine_messages(body: Mapping[str, Any]) -> list[dict]:
    """Anthropic request -> the engine's chat messages (system text + tools, text blocks)."""
    system = body.get("system")
    parts = [] if not body.get("tools") else [  # tools first: the provider's prefix order (tools, system, messages)
        "Tools:\n" + "\n".join(canonical_json({k: v for k, v in t.items() if k != "cache_control"}) for t in body["tools"])]
    parts += [system] if isinstance(system, str) else [b["text"] for b in system or []]
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


def _message_settings(body: Mapping[str, Any]) -> Any:
    """What is folded into the prefix hashes where the messages start (a change invalidates the cached
    messages, not tools or system, per the API's prompt-caching docs): ``tool_choice``, and the thinking
    settings when thinking is on (:func:`~ragcache.providers.anthropic.blocks.thinking_setting`).
    Thinking off hashes as before."""
    thinking = thinking_setting(body)
    return body.get("tool_choice") if thinking is None else {"tool_choice": body.get("tool_choice"),
                                                             "thinking": thinking}


def _replaced(body: Mapping[str, Any], later: Sequence[Any]) -> dict:
    """A copy of ``body`` with every block in ``later`` (flat blocks) replaced by a one-character text
    that differs from the block's own first character (see ``AnthropicLocalServer._prefix_limit``)."""
    out = json.loads(json.dumps(body))

    def mark(text: str) -> str:
        return "\u00b6" if text.startswith("\u00a4") else "\u00a4"

    for b in later:
        section, i = b.path[0], b.path[1]
        if section == "tools":
            out["tools"][i] = {"name": mark(""), "input_schema": {}}
        elif section == "system":
            if isinstance(out["system"], str):
                out["system"] = mark(out["system"])
            else:
                out["system"][i] = {"type": "text", "text": mark(out["system"][i].get("text", ""))}
        else:
            msg = out["messages"][i]
            if isinstance(msg["content"], str):
                msg["content"] = mark(msg["content"])
            else:
                old = msg["content"][b.path[2]]
                msg["content"][b.path[2]] = {"type": "text", "text": mark(old.get("text", "") if old.get(
                    "type") == "text" else "{")}
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_thinking(thinking: Any, max_tokens: int) -> None:
    """The API's checks of ``thinking`` (the local model does not think; the setting changes caching)."""
    if thinking is None:
        return
    if not isinstance(thinking, Mapping) or thinking.get("type") not in ("enabled", "disabled", "adaptive"):
        raise RequestError("thinking: Input tag does not match any of the expected tags: 'enabled', 'disabled', "
                           "'adaptive'")
    if thinking["type"] == "enabled":
        budget = thinking.get("budget_tokens")
        if not _is_int(budget):
            raise RequestError("thinking.enabled.budget_tokens: Field required (an integer >= 1024)")
        if budget < 1024:
            raise RequestError(f"thinking.enabled.budget_tokens: Input should be greater than or equal to 1024, "
                               f"got {budget}")
        if budget >= max_tokens:
            raise RequestError(f"`max_tokens` must be greater than `thinking.budget_tokens` ({max_tokens} <= {budget})")


def _check_params(body: Any) -> None:
    """The real API's checks and words (pydantic-style ``field: problem``)."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise RequestError("model: Field required" if "model" not in body else "model: Input should be a valid string")
    mt = body.get("max_tokens")
    if "max_tokens" not in body:
        raise RequestError("max_tokens: Field required")
    if not _is_int(mt):
        raise RequestError(f"max_tokens: Input should be a valid integer, got {type(mt).__name__} {mt!r}")
    if mt < 1:
        raise RequestError(f"max_tokens: Input should be greater than or equal to 1, got {mt}")
    t = body.get("temperature", ANTHROPIC.unset_temperature)
    if not isinstance(t, int | float) or isinstance(t, bool) or not 0.0 <= t <= 1.0:
        raise RequestError("temperature: Input should be a number between 0 and 1")
    stops = body.get("stop_sequences", [])
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise RequestError("stop_sequences: Input should be a list of strings")
    if not isinstance(body.get("stream", False), bool):
        raise RequestError("stream: Input should be a valid boolean")
    _check_thinking(body.get("thinking"), mt)
    msgs = body.get("messages")
    for i, m in enumerate(msgs if isinstance(msgs, list) else []):
        final_assistant = isinstance(m, Mapping) and m.get("role") == "assistant" and i == len(msgs) - 1
        c = m.get("content") if isinstance(m, Mapping) else None
        if not final_assistant and (c == "" or c == []):
            raise RequestError(f"messages.{i}: all messages must have non-empty content except for the optional "
                               "final assistant message")
        for b in [{"type": "text", "text": c}] if isinstance(c, str) else c if isinstance(c, list) else []:
            text = b.get("text") if isinstance(b, Mapping) and b.get("type") == "text" else None
            if isinstance(text, str) and not text and not final_assistant:
                raise RequestError("messages: text content blocks must be non-empty")
            if isinstance(text, str) and text and is_blank(text) and m.get("role") == "user":
                # the real API refuses whitespace-only assistant text too; accepted here so a tiny test
                # model's blank answer can be sent back in a conversation
                raise RequestError("messages: text content blocks must contain non-whitespace text")


class AnthropicLocalServer:
    """The Starlette app (:attr:`app`) around an engine and a :class:`ProviderPromptCache`.

    Args:
        engine: a LocalEngine, or any :class:`~ragcache.engine.interface.ServedEngine` (the module docstring says
            what this server reads of it).
        models: the local model ids requests may name (case-insensitively); Claude model ids whose
            caching rules this server emulates (:data:`ragcache.providers.anthropic.pricing.PRICES` families)
            are accepted too. Any other name gets the API's 404 ``not_found_error``.
        tenant_header: header naming the caller's tenant (:func:`ragcache.server.auth.tenant_of`);
            prompt-cache entries and the engine's prefix and chunk KV are kept per tenant, so one
            caller never reads another's (nor learns from usage or timing what another sent).
        share_kv_across_namespaces: let tenants reuse each other's engine KV (default False; see
            :func:`ragcache.server.auth.kv_namespace` for the risk). Usage stays per tenant.
        min_tokens: minimum cacheable length overrides (int for all models, or by family).
        clock: seconds, for cache TTLs (tests pass a fake clock).

    Raises:
        TypeError: ``engine`` is not a :class:`~ragcache.engine.interface.ServedEngine`.
    """

    def __init__(self, engine: ServedEngine, *, models: Sequence[str] = (), tenant_header: str | None = None,
                 min_tokens: Mapping[str, int] | int | None = None,
                 clock: Callable[[], float] = time.monotonic, share_kv_across_namespaces: bool = False) -> None:
        self.engine = served_engine(engine, "AnthropicLocalServer")
        self.models = tuple(models)
        self.tenant_header, self.share_kv = tenant_header, share_kv_across_namespaces
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
            return anthropic_error(400, "invalid_request_error", "request body is not valid JSON")
        except RequestError as e:
            return anthropic_error(400, "invalid_request_error", str(e))
        return JSONResponse({"input_tokens": sum(toks)})

    async def messages(self, request: Request) -> Response:
        try:
            body = json.loads(await request.body())
            blocks, toks = self._prepare(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return anthropic_error(400, "invalid_request_error", "request body is not valid JSON")
        except RequestError as e:
            return anthropic_error(400, "invalid_request_error", str(e))
        model = body["model"]
        if model.lower() not in {m.lower() for m in self.models} and model_family(model, PRICES) is None:
            served = ", ".join(repr(m) for m in (*self.models, *PRICES))
            return anthropic_error(404, "not_found_error", f"model: {model} (this server answers {served})")
        try:
            tenant = tenant_of(request.headers, tenant_header=self.tenant_header)
        except PermissionError as e:
            return anthropic_error(400, "invalid_request_error", str(e))
        limit = self.engine.context_window
        if body["max_tokens"] > limit:  # the real API's words for a budget over the model's output limit
            return anthropic_error(400, "invalid_request_error", f"max_tokens: {body['max_tokens']} > {limit}, which "
                                   f"is the maximum allowed number of output tokens for {model}")
        if sum(toks) + body["max_tokens"] > limit:
            return anthropic_error(400, "invalid_request_error", f"prompt is too long: {sum(toks)} tokens + max_tokens "
                                   f"{body['max_tokens']} > {limit} (the local model's context window)")
        salt = f"{tenant}\x00{model}"  # entries per tenant, as the real API keeps them per organization
        hashes = prefix_hashes(salt, blocks, _message_settings(body))
        outcome = self.cache.apply(model, blocks, toks, hashes)
        messages = _engine_messages(body)
        try:
            prefix_limit = self._prefix_limit(body, blocks, outcome, messages)
        except ValueError as e:
            return anthropic_error(400, "invalid_request_error", self._words(e, body["max_tokens"]))
        run = EngineRequest(messages, max_new_tokens=body["max_tokens"],
                            temperature=float(body.get("temperature", ANTHROPIC.unset_temperature)),
                            stop=body.get("stop_sequences") or None,
                            tenant=kv_namespace(tenant, share=self.share_kv), prefix_limit=prefix_limit)
        msg_id = "msg_" + uuid.uuid4().hex[:24]
        events = self._run(run)
        first = await anext(events)  # prefill done (or the request's error), before any header goes out
        if isinstance(first, ValueError):
            return anthropic_error(400, "invalid_request_error", self._words(first, body["max_tokens"]))
        if isinstance(first, Exception):
            return anthropic_error(500, "api_error", f"{type(first).__name__}: {first}")
        opened = LocalRecord.of(first.stats, outcome)  # the prefill part of the request's one record
        headers = {"request-id": "req_" + msg_id[4:], **opened.headers()}
        if body.get("stream"):
            return event_stream(self._sse(first, events, msg_id, model, outcome, run.stop, opened),
                                headers=headers)
        gen, ev = None, first
        rest = while_connected(request, events)
        try:  # a client that hangs up stops the generation within a decode step (ragcache.server.disconnect)
            while True:
                if isinstance(ev, Exception):
                    return anthropic_error(500, "api_error", f"{type(ev).__name__}: {ev}")
                gen = ev.generation or gen
                if gen is not None:
                    break
                ev = await anext(rest)
        except ClientGone:
            return Response(status_code=499)  # nobody reads it
        finally:
            await rest.aclose()
            await events.aclose()
        record = LocalRecord.of(gen.stats, outcome)
        stop_reason, stop_seq = self._stop(gen, run.stop)
        return JSONResponse({
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": gen.text}], "stop_reason": stop_reason, "stop_sequence": stop_seq,
            "usage": record.anthropic_usage(len(gen.token_ids)), "ragcache": record.body(),
        }, headers={**headers, **record.headers()})

    def _prefix_limit(self, body: dict, blocks: list, outcome: CacheOutcome, messages: list[dict]) -> int | None:
        """How many leading engine prompt tokens may come from the prefix KV cache: those of the blocks
        the emulated cache read (0 on a miss; ``None``: the whole prompt was read). The end of the read
        in engine tokens is where the prompt first differs from the prompt with every later block
        replaced (a token earlier at most where the tokenizer merges across the boundary: less reuse,
        never more)."""
        if outcome.read_at is None:
            return 0
        later = [b for b in blocks if b.index > outcome.read_at]
        if not later:
            return None
        full = self.engine.build_prompt(messages).input_ids
        cut = self.engine.build_prompt(_engine_messages(_replaced(body, later))).input_ids
        return next((i for i, (a, b) in enumerate(zip(full, cut)) if a != b), min(len(full), len(cut)))

    async def _run(self, request: EngineRequest) -> AsyncIterator[Any]:
        """The engine's stream through its one async bridge (:meth:`LocalEngine.astream`); an engine
        exception is yielded as the event (ValueError -> 400, others -> 500). A client that goes away
        ends the stream, which stops generation within one decode step."""
        try:
            async for ev in self.engine.astream(request):
                yield ev
        except Exception as e:  # noqa: BLE001 - handed to the request as an error response
            yield e

    def _words(self, e: Exception, max_tokens: int | None) -> str:
        """The API's words for an engine error (a prompt that does not fit names no engine knob)."""
        if not isinstance(e, ContextWindowError):
            return str(e)
        n, limit = prompt_tokens_in(str(e)), self.engine.context_window
        return (f"prompt is too long: {n} tokens + max_tokens {max_tokens} > {limit} maximum" if n is not None
                and max_tokens is not None else f"prompt is too long for the context window of {limit} tokens")

    def _stop(self, gen: Any, stops: list[str] | None) -> tuple[str, str | None]:
        """``(stop_reason, stop_sequence)`` of an answer in the API's words, read from its provider row
        (:meth:`ragcache.providers.spec.Provider.native_finish`: ``max_tokens``, ``stop_sequence`` with the
        sequence that ended it, else ``end_turn``)."""
        if gen.stats.finish_reason == "length":
            return ANTHROPIC.native_finish("length"), None
        if stops:
            full = self.engine.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
            hits = sorted((full.find(s), s) for s in stops if s in full)
            if hits:
                return ANTHROPIC.native_finish("stop", stop_sequence=True), hits[0][1]
        return ANTHROPIC.native_finish("stop"), None

    async def _sse(self, first: Any, events: AsyncIterator[Any], msg_id: str, model: str, outcome: CacheOutcome,
                   stops: list[str] | None, opened: LocalRecord) -> AsyncIterator[Any]:
        sse = anthropic_event
        yield sse("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": outcome.usage(1), "ragcache": opened.body()}})
        yield sse("content_block_start", {"type": "content_block_start", "index": 0,
                                          "content_block": {"type": "text", "text": ""}})
        yield sse("ping", {"type": "ping"})
        gen, ev = None, first
        while True:
            if isinstance(ev, Exception):
                kind = "invalid_request_error" if isinstance(ev, ValueError) else "api_error"
                yield sse("error", {"type": "error", "error": {"type": kind, "message": self._words(ev, None)}})
                return
            if ev.text:
                yield sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                  "delta": {"type": "text_delta", "text": ev.text}})
            gen = ev.generation or gen
            if gen is not None:
                break
            ev = await anext(events)
        await events.aclose()
        stop_reason, stop_seq = self._stop(gen, stops)
        yield sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        record = LocalRecord.of(gen.stats, outcome)
        usage = {k: v for k, v in record.anthropic_usage(len(gen.token_ids)).items()
                 if k not in ("cache_creation", "service_tier")}
        yield sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason,
                                                                       "stop_sequence": stop_seq}, "usage": usage,
                                    "ragcache": record.body()})
        yield sse("message_stop", {"type": "message_stop"})
