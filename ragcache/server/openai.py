"""OpenAI-compatible chat completions answered by the local engine, with its real KV caches.

``ragcache serve`` (127.0.0.1) answers ``POST /v1/chat/completions`` (JSON, and SSE streaming
with the final usage chunk when ``stream_options.include_usage``) and ``GET /v1/models`` beside
the Anthropic routes, so the official ``openai`` SDK, LangChain's ``ChatOpenAI`` and LlamaIndex's
``OpenAILike`` work offline::

    client = openai.OpenAI(base_url="http://127.0.0.1:8788/v1", api_key="local")

Messages -> engine: ``system`` / ``developer`` messages become the system turn; in the last user
message, content given as a list of text parts is read as documents then question (every part
but the last is a document, whose KV the chunk cache stores and reuses at any position; the last
part is the question); plain-string content is one block. Earlier turns are history.

``usage.prompt_tokens`` is the engine's prompt length (chat-template tokens included) and
``usage.prompt_tokens_details.cached_tokens`` the engine's own reuse count for the request:
prefix-cache tokens plus chunk-cache tokens kept (CacheBlend's recomputed tokens are not counted:
they were computed). The ``x-ragcache-*`` response headers (JSON and streamed responses) and the
usage are views of one record (:class:`ragcache.server.record.LocalRecord`), and so is the
``ragcache`` object in the body (and in a stream's first chunk and its ``finish_reason`` chunk):
``layer``, ``approximate``, ``blend_setting``, ``recompute_ratio`` (a blended answer is labelled
approximate with its setting there and in ``x-ragcache-approximate`` / ``x-ragcache-blend-setting``).
A request's tenant
(:func:`ragcache.server.auth.tenant_of`: its key or bearer token, hashed, or the operator's tenant
header) salts its KV keys, so ``cached_tokens`` never counts another tenant's KV.

Errors use OpenAI's body ``{"error": {"message", "type", "param", "code"}}``: 400
``invalid_request_error`` for bad or unsupported parameters (``n > 1``, tools, images, logprobs,
non-text response formats), 404 ``model_not_found`` for a model this server does not serve.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import PurePath
from typing import Any

from ragcache.text_checks import is_blank
from ragcache.engine.backend import result_of
from ragcache.engine.interface import ServedEngine, served_engine
from ragcache.engine.records import ContextWindowError
from ragcache.engine.request import EngineRequest
from ragcache.providers.openai.provider import OPENAI
from ragcache.server.auth import kv_namespace, tenant_of
from ragcache.server.record import LocalRecord
from ragcache.server.disconnect import ClientGone, while_connected
from ragcache.server.sse import event_stream, openai_event

try:
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
except ImportError as e:  # pragma: no cover - exercised only without the extra
    msg = "the local OpenAI-compatible server needs starlette and uvicorn: pip install 'ragcache[openai]'"
    raise ImportError(msg) from e

CREATED = 1_735_689_600  # 2025-01-01T00:00:00Z: the listed models' fixed creation time
_UNSUPPORTED = {  # parameter -> why; rejected when given a value that asks for the feature
    "tools": "tools / function calling are not supported by the local engine",
    "functions": "function calling is not supported by the local engine",
    "logprobs": "logprobs are not supported by the local engine",
    "top_logprobs": "logprobs are not supported by the local engine",
    "logit_bias": "logit_bias is not supported by the local engine",
    "audio": "audio output is not supported by the local engine",
    "prediction": "predicted outputs are not supported by the local engine",
}


class OpenAIRequestError(ValueError):
    """A request the server rejects; rendered as OpenAI's error body."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 status: int = 400, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.param, self.code, self.status, self.kind = param, code, status, kind

    def response(self) -> JSONResponse:
        return error_response(self.status, str(self), param=self.param, code=self.code, kind=self.kind)


def error_response(status: int, message: str, *, param: str | None = None, code: str | None = None,
                   kind: str = "invalid_request_error") -> JSONResponse:
    """OpenAI's error body ``{"error": {"message", "type", "param", "code"}}`` with ``status``."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}},
                        status_code=status)


def default_model_id(engine: ServedEngine) -> str:
    """The id the engine is served under: the last path part of its model name
    (``SmolLM2-135M-Instruct``), else ``local``."""
    return PurePath(engine.fingerprint.name or "").name or "local"



def _text_of(content: Any, where: str, *, parts: bool) -> str | list[dict]:
    """A message's content as a string, or (``parts``) a list of ``{"type": "text"}`` blocks."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise OpenAIRequestError(f"{where}.content must be a string or a list of content parts",
                                 param=f"{where}.content")
    if not content:
        raise OpenAIRequestError(f"Invalid '{where}.content': empty array. Expected an array with minimum length 1, "
                                 "but got an empty array instead.", param=f"{where}.content", code="empty_array")
    blocks = []
    for i, p in enumerate(content):
        if not isinstance(p, Mapping) or p.get("type") not in ("text", "refusal"):
            kind = p.get("type") if isinstance(p, Mapping) else type(p).__name__
            raise OpenAIRequestError(f"{where}.content[{i}]: content part type {kind!r} is not supported; the local "
                                     "engine reads text parts only", param=f"{where}.content[{i}].type")
        text = p.get("text", p.get("refusal"))
        if not isinstance(text, str):
            raise OpenAIRequestError(f"{where}.content[{i}].text must be a string", param=f"{where}.content[{i}].text")
        blocks.append({"type": "text", "text": text})
    return blocks if parts else "\n\n".join(b["text"] for b in blocks)


def engine_messages(messages: Any) -> list[dict]:
    """OpenAI ``messages`` -> the engine's chat messages (see the module docstring).

    Raises:
        OpenAIRequestError: not a non-empty list, an unknown or unsupported role (``tool``,
            ``function``), tool calls, non-text content parts.
    """
    if not isinstance(messages, list) or not messages:
        raise OpenAIRequestError("messages: a non-empty list of messages is required", param="messages",
                                 code="missing_required_parameter" if not messages else None)
    out: list[dict] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, Mapping):
            raise OpenAIRequestError(f"{where} must be an object with 'role' and 'content'", param=where)
        role = m.get("role")
        if role in ("tool", "function") or m.get("tool_calls") or m.get("function_call"):
            raise OpenAIRequestError(f"{where}: tool and function messages are not supported by the local engine",
                                     param=f"{where}.role", code="unsupported_value")
        if role not in ("system", "developer", "user", "assistant"):
            raise OpenAIRequestError(f"{where}.role must be one of system, developer, user, assistant; got {role!r}",
                                     param=f"{where}.role")
        if role == "user" and "content" not in m:
            raise OpenAIRequestError(f"{where}.content is required", param=f"{where}.content")
        content = _text_of(m.get("content"), where, parts=role == "user")
        out.append({"role": "system" if role == "developer" else role, "content": content})
    last = out[-1]["content"]
    text = last if isinstance(last, str) else "".join(b["text"] for b in last)
    if out[-1]["role"] == "user" and is_blank(text):  # control / zero-width characters only count as empty
        where = f"messages[{len(out) - 1}]"
        raise OpenAIRequestError(f"Invalid '{where}.content': the last user message is empty, so there is no "
                                 "question to answer; send its text", param=f"{where}.content", code="empty_string")
    return out


def _int(body: Mapping[str, Any], key: str, *, low: int) -> int | None:
    v = body.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise OpenAIRequestError(f"{key} must be an integer >= {low}, got {v!r}", param=key,
                                 code="integer_below_min_value" if isinstance(v, int) else "invalid_type")
    return v


def _number(body: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    v = body.get(key, default)
    v = default if v is None else v
    if not isinstance(v, int | float) or isinstance(v, bool) or not low <= v <= high:
        raise OpenAIRequestError(f"{key} must be a number between {low:g} and {high:g}, got {v!r}", param=key)
    return float(v)


def parse_request(body: Any, served: Sequence[str], *, default_max_tokens: int) -> dict[str, Any]:
    """Check a ``/v1/chat/completions`` body; the engine's arguments and the response options.

    Raises:
        OpenAIRequestError: see the module docstring (400, or 404 for an unknown model).
    """
    if not isinstance(body, dict):
        raise OpenAIRequestError("request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIRequestError("model: a model id is required (GET /v1/models lists them)", param="model",
                                 code="missing_required_parameter")
    exact = {m.lower(): m for m in served}.get(model.lower())
    if exact is None:
        raise OpenAIRequestError(f"The model {model!r} does not exist on this server; it serves "
                                 f"{', '.join(map(repr, served))} (GET /v1/models)", param="model",
                                 code="model_not_found", status=404)
    for key, why in _UNSUPPORTED.items():
        if body.get(key) not in (None, False, [], {}, 0):
            raise OpenAIRequestError(f"{key}: {why}", param=key, code="unsupported_parameter")
    if body.get("tool_choice") not in (None, "none"):
        raise OpenAIRequestError("tool_choice: tools are not supported by the local engine", param="tool_choice",
                                 code="unsupported_parameter")
    n = _int(body, "n", low=1)
    if n is not None and n > 1:
        raise OpenAIRequestError(f"n: only n=1 is supported by the local engine, got {n}", param="n",
                                 code="unsupported_value")
    for key in ("frequency_penalty", "presence_penalty"):
        if _number(body, key, 0.0, -2.0, 2.0) != 0.0:
            raise OpenAIRequestError(f"{key}: penalties are not supported by the local engine (use 0)", param=key,
                                     code="unsupported_value")
    fmt = body.get("response_format")
    if fmt is not None and (not isinstance(fmt, Mapping) or fmt.get("type") != "text"):
        raise OpenAIRequestError("response_format: only {'type': 'text'} is supported by the local engine",
                                 param="response_format", code="unsupported_value")
    mt, mct = _int(body, "max_tokens", low=1), _int(body, "max_completion_tokens", low=1)
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop
    if stops is not None and (not isinstance(stops, list) or len(stops) > 4
                              or not all(isinstance(s, str) for s in stops)):
        raise OpenAIRequestError("stop must be a string or a list of at most 4 strings", param="stop")
    stream = body.get("stream", False)
    if not isinstance(stream, bool | None):
        raise OpenAIRequestError("stream must be a boolean", param="stream")
    opts = body.get("stream_options")
    if opts is not None and not stream:
        raise OpenAIRequestError("The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                                 param="stream_options")
    if opts is not None and not isinstance(opts, Mapping):
        raise OpenAIRequestError("stream_options must be an object", param="stream_options")
    seed = _int(body, "seed", low=-(1 << 63))
    kwargs = {"max_new_tokens": mct or mt or default_max_tokens,
              "temperature": _number(body, "temperature", OPENAI.unset_temperature, 0.0, 2.0),
              "top_p": _number(body, "top_p", 1.0, 0.0, 1.0) or 1.0,
              "stop": [s for s in stops or [] if s] or None,
              "seed": seed}
    return {"model": exact, "messages": engine_messages(body.get("messages")), "kwargs": kwargs,
            "budget_param": "max_completion_tokens" if mct else "max_tokens",
            "stream": bool(stream), "include_usage": bool((opts or {}).get("include_usage"))}


def usage_body(gen: Any) -> dict[str, Any]:
    """OpenAI's ``usage`` for an engine :class:`~ragcache.engine.engine.Generation`
    (:meth:`ragcache.server.record.LocalRecord.openai_usage`: ``cached_tokens`` is the engine's reuse)."""
    return LocalRecord.of(gen.stats).openai_usage()


def prompt_tokens_in(engine_message: str) -> int | None:
    """The prompt length a :class:`~ragcache.engine.records.ContextWindowError` message states, if any."""
    m = re.search(r"prompt is (\d+) tokens", engine_message)
    return int(m.group(1)) if m else None


def _context_message(engine_message: str, budget: int, limit: int) -> str:
    """OpenAI's words for a prompt that does not fit (the engine's message names its own knobs)."""
    n = prompt_tokens_in(engine_message)
    if n is None:
        return (f"This model's maximum context length is {limit} tokens. Please reduce the length of the messages "
                "or completion.")
    return (f"This model's maximum context length is {limit} tokens. However, you requested {n + budget} tokens "
            f"({n} in the messages, {budget} in the completion). Please reduce the length of the messages or "
            "completion.")


class OpenAILocalServer:
    """The OpenAI-compatible routes (:attr:`routes`) around a local engine.

    Args:
        engine: a :class:`~ragcache.engine.engine.LocalEngine`, or any
            :class:`~ragcache.engine.interface.ServedEngine` (what this server reads of it).
        models: the model ids requests may name (all answered by ``engine``); default: one id,
            :func:`default_model_id`. Give aliases (``["gpt-4o-mini"]``) for clients with a fixed name.
        default_max_tokens: the decode budget when a request gives neither ``max_tokens`` nor
            ``max_completion_tokens``.
        tenant_header: header naming the caller's tenant (else a digest of its key or bearer token,
            :func:`ragcache.server.auth.tenant_of`); the tenant salts the request's KV keys.
        share_kv_across_namespaces: let tenants reuse each other's prefix and chunk KV (default
            False; True lets a caller learn from ``cached_tokens`` and time-to-first-token whether
            another sent the same text: only when every caller may see every prompt).

    Raises:
        ValueError: an empty ``models`` list or ``default_max_tokens < 1``.
        TypeError: ``engine`` is not a :class:`~ragcache.engine.interface.ServedEngine`.
    """

    def __init__(self, engine: ServedEngine, *, models: Sequence[str] | None = None, default_max_tokens: int = 256,
                 tenant_header: str | None = None, share_kv_across_namespaces: bool = False) -> None:
        self.engine = served_engine(engine, "OpenAILocalServer")
        self.tenant_header, self.share_kv = tenant_header, share_kv_across_namespaces
        self.models = tuple(models) if models is not None else (default_model_id(engine),)
        if not self.models or not all(isinstance(m, str) and m for m in self.models):
            raise ValueError("models must be a non-empty list of model id strings")
        if default_max_tokens < 1:
            raise ValueError(f"default_max_tokens must be >= 1, got {default_max_tokens}")
        self.default_max_tokens = default_max_tokens
        digest = self.engine.fingerprint.digest
        self.system_fingerprint = f"ragcache-{digest[:12]}" if digest else "ragcache"
        self.routes = [Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                       Route("/v1/models", self.list_models, methods=["GET"])]

    async def list_models(self, request: Request) -> Response:
        """``GET /v1/models``: OpenAI's list; each entry also carries Anthropic's model fields
        (``type``, ``display_name``, ``created_at``), so both SDKs read the same route."""
        data = [{"id": m, "object": "model", "created": CREATED, "owned_by": "ragcache", "type": "model",
                 "display_name": f"{m} (local: {self.engine.fingerprint})", "created_at": "2025-01-01T00:00:00Z"}
                for m in self.models]
        return JSONResponse({"object": "list", "data": data, "has_more": False, "first_id": self.models[0],
                             "last_id": self.models[-1]})

    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions`` (see the module docstring)."""
        try:
            body = json.loads(await request.body())
            req = parse_request(body, self.models, default_max_tokens=self.default_max_tokens)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return error_response(400, "We could not parse the JSON body of your request: send valid JSON.")
        except OpenAIRequestError as e:
            return e.response()
        try:
            tenant = kv_namespace(tenant_of(request.headers, tenant_header=self.tenant_header), share=self.share_kv)
        except PermissionError as e:
            return error_response(400, str(e), code="missing_tenant")
        limit = self.engine.context_window
        budget, param = req["kwargs"]["max_new_tokens"], req["budget_param"]
        if budget >= limit:
            return error_response(400, f"{param} is too large: {budget}. This model supports at most {limit - 1} "
                                  f"completion tokens, whereas you provided {budget}.", param=param,
                                  code="invalid_value")
        cid = "chatcmpl-" + uuid.uuid4().hex[:24]
        events = self.engine.astream(EngineRequest(req["messages"], **req["kwargs"], tenant=tenant))
        try:  # the first event (prefill done) or the request's error, before any header goes out
            first = await anext(events)
        except StopAsyncIteration:  # pragma: no cover - the engine always ends with a Generation event
            return error_response(500, "the engine produced no output", kind="server_error")
        except ContextWindowError as e:
            return error_response(400, _context_message(str(e), budget, limit), param="messages",
                                  code="context_length_exceeded")
        except (ValueError, TypeError) as e:  # bad prompt
            return error_response(400, str(e), param="messages")
        except Exception as e:  # noqa: BLE001 - reported to the client as OpenAI's server_error
            return error_response(500, f"{type(e).__name__}: {e}", kind="server_error")
        stats = first.stats if first.stats is not None else first.generation.stats
        headers = LocalRecord.of(stats).headers()  # the prefill part of the request's one record
        if req["stream"]:
            return event_stream(self._sse(first, events, cid, req), headers=headers)
        gen = first.generation
        try:  # a client that hangs up stops the generation within a decode step (ragcache.server.disconnect)
            async for ev in while_connected(request, events):
                gen = ev.generation or gen
        except ClientGone:
            return Response(status_code=499)  # nobody reads it
        except Exception as e:  # noqa: BLE001
            return error_response(500, f"{type(e).__name__}: {e}", kind="server_error")
        finally:
            await events.aclose()
        r, record = result_of(gen), LocalRecord.of(gen.stats)
        return JSONResponse({
            "id": cid, "object": "chat.completion", "created": int(time.time()), "model": req["model"],
            "system_fingerprint": self.system_fingerprint,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": gen.text, "refusal": None},
                         "logprobs": None, "finish_reason": OPENAI.native_finish(r.finish_reason)}],
            "usage": record.openai_usage(), "ragcache": record.body(),
        }, headers=record.headers())

    async def _sse(self, first: Any, events: AsyncIterator[Any], cid: str, req: dict) -> AsyncIterator[Any]:
        created = int(time.time())
        include_usage = req["include_usage"]

        def chunk(delta: dict, finish: str | None = None, stats: Any = None) -> Any:
            data = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": req["model"],
                    "system_fingerprint": self.system_fingerprint,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            if include_usage:
                data["usage"] = None
            if stats is not None:  # the first and the finish chunk say how the answer was made
                data["ragcache"] = LocalRecord.of(stats).body()
            return openai_event(data)

        yield chunk({"role": "assistant", "content": "", "refusal": None},
                    stats=first.stats if first.stats is not None else first.generation.stats)
        gen, ev = None, first
        try:
            while True:
                if ev.text:
                    yield chunk({"content": ev.text})
                gen = ev.generation or gen
                ev = await anext(events)
        except StopAsyncIteration:
            pass
        except Exception as e:  # noqa: BLE001 - the status line is gone; OpenAI sends an error event
            err = {"error": {"message": f"{type(e).__name__}: {e}", "type": "server_error", "param": None,
                             "code": None}}
            yield openai_event(err)
            return
        finally:  # also when the client goes away: stops generation within one decode step
            await events.aclose()
        yield chunk({}, OPENAI.native_finish(result_of(gen).finish_reason), stats=gen.stats)
        if include_usage:
            data = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": req["model"],
                    "system_fingerprint": self.system_fingerprint, "choices": [],
                    "usage": LocalRecord.of(gen.stats).openai_usage()}
            yield openai_event(data)
        yield openai_event("[DONE]")


__all__ = ["OpenAILocalServer", "OpenAIRequestError", "default_model_id", "prompt_tokens_in", "engine_messages", "error_response",
           "parse_request", "usage_body"]
