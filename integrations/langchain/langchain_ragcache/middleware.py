"""LangChain v1 agent middleware: ragcache's semantic cache and stable-first layout around the model call.

Add to an agent built with ``langchain.agents.create_agent``::

    agent = create_agent(model, tools, system_prompt=...,
                         middleware=[RagCacheMiddleware(), RagPromptLayoutMiddleware()])

:class:`RagCacheMiddleware` serves a model call from the semantic response cache: the question
is the last human turn (its question part, see :mod:`langchain_ragcache._keys`); the partition
is ragcache's one partition function over the model and its settings, the system prompt, the
tools, the earlier turns and documents, and every message after the last human turn (tool calls
by name and arguments, tool results): so a turn inside a tool loop is only served when the
cached turn made the same tool calls and got the same results. The call goes through ragcache's
one answer path (:class:`ragcache.answering.AnswerPath`): lookup, single flight (concurrent
identical misses make one model call), the call, the one storage rule (only an answer that ended
normally; never a tool call, a filtered, refused or cut answer), store. A hit is a new ``AIMessage``
(fresh id, zero usage) with ``response_metadata["ragcache"]`` giving the layer, similarity and the
stored answer's provenance.

:class:`RagPromptLayoutMiddleware` lays the request out stable-first for a provider prompt cache:
volatile text (dates, times, ids) leaves the system prompt for a block after the last breakpoint,
documents in tool results (a retriever tool's ``Document`` artifacts) are rendered canonically
(:func:`ragcache.prompt.layout.render_document`, sorted), and for ``ChatAnthropic`` at most 4
``cache_control`` breakpoints go on the last tool, the system prompt, the end of the stable
history and the last message (history is append-only, so the next turn reads all of it). The
provider's usage is read back as ragcache's :class:`~ragcache.backend.CacheUsage`
(``response_metadata["ragcache"]``) and ``usage_metadata.input_token_details``
(``cache_read`` / ``cache_creation``).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import replace
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, get_args

try:
    from langchain.agents.middleware.types import AgentMiddleware, ModelRequest, ModelResponse
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("the agent middleware needs langchain>=1: pip install 'langchain-ragcache[agents]'") from e
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from langchain_ragcache._keys import METADATA_KEY, QuestionExtractor, key_messages, model_identity, sampling_of
from langchain_ragcache.cache import RagCacheSemanticCache
from langchain_ragcache.providers import takes_breakpoints
from langchain_ragcache.results import answer_message, message_result
from langchain_ragcache.usage import cache_usage, cache_write_by_ttl, own_record, with_one_write_total
from ragcache.providers.anthropic.blocks import carries_marker, code_execution_tool_ids
from ragcache.answering import Answer
from ragcache.backend import BackendResult, Blending, CacheUsage, provider_layer
from ragcache.prompt.layout import as_document, canonicalize, render_document
from ragcache.prompt.segments import canonical_documents as canonical_order
from ragcache.request import CacheRequest
from ragcache.prompt.volatile import move_volatile

if TYPE_CHECKING:
    from langchain_ragcache.chat_models import ChatRagCache

MAX_BREAKPOINTS = 4
log = logging.getLogger(__name__)


# ============================================================================== semantic cache
class RagCacheMiddleware(AgentMiddleware):
    """The semantic response cache around an agent's model call.

    Args:
        cache: a :class:`~langchain_ragcache.RagCacheSemanticCache` to share (with an LCEL chain's
            ``set_llm_cache``, for example); otherwise one is built from ``**kwargs``
            (``path``, ``embedder``, ``threshold``, ``namespace``, ``ttl_s``,
            ``question_extractor``, ``cache_truncated``, SemanticCache options). By default the
            answers persist under ``$RAGCACHE_HOME`` (``path="default"``, shared with
            ``RagCacheSemanticCache()`` and ``ragcache ask``); ``path=None`` keeps them in memory.

    Requests with a ``response_format`` (structured output) are passed through uncached. An answer
    whose ``response_metadata`` names another model than the requested one (a
    ``ModelFallbackMiddleware`` fallback answered while the primary was down) is not stored under
    the requested model's partition (:attr:`fallback_answers` counts them); a model that reports no
    name cannot be checked.
    """

    def __init__(self, cache: RagCacheSemanticCache | None = None, *,
                 question_extractor: QuestionExtractor | None = None, **kwargs: Any) -> None:
        super().__init__()
        if cache is not None and kwargs:
            raise ValueError("give either cache=RagCacheSemanticCache(...) or options for a new one, not both")
        self.cache = cache or RagCacheSemanticCache(question_extractor=question_extractor, **kwargs)
        self.model_calls = 0
        self.hits = 0
        self.fallback_answers = 0  # answers by another model than the requested one: not stored

    # -- keys -----------------------------------------------------------------------------------
    def key(self, request: ModelRequest) -> CacheRequest:
        """The :class:`~ragcache.request.CacheRequest` of an agent's model request (ragcache's one keyer over
        its messages, system message and tools; the model's identity, budget and sampling)."""
        system = request.system_message.text if request.system_message is not None else None
        llm_string = _llm_string(request.model, request.model_settings)
        model, params, _ = model_identity(llm_string)
        if request.tool_choice is not None:
            params = {**params, "tool_choice": canonicalize(request.tool_choice)}
        keyed = key_messages(request.messages, system=system, extractor=self.cache.question_extractor,
                             tools=[_tool_schema(t) for t in request.tools])
        return keyed.request(model=model, tenant=self.cache.namespace, params=params,
                             max_tokens=self.cache.budget(llm_string), sampling=sampling_of(llm_string),
                             threshold=self.cache.threshold, provenance_model=_declared_model(request.model))

    def _result(self, request: ModelRequest, response: Any) -> BackendResult:
        """The handler's response as ragcache's :class:`BackendResult` (:func:`~langchain_ragcache.results.message_result`),
        which the one rule (:func:`ragcache.answering.cacheable`) then judges. A response that is not one
        ``AIMessage`` is ``incomplete``; an answer by another model than the requested one (a
        ``ModelFallbackMiddleware`` fallback, a router) is the requested model's ``error``: the partition
        names the requested model, so it is not stored under it."""
        msg = response if isinstance(response, AIMessage) else None
        if isinstance(response, ModelResponse) and len(response.result) == 1 and isinstance(response.result[0], AIMessage):
            msg = response.result[0]
        if msg is None:
            return BackendResult("", "provider", CacheUsage(), finish_reason="incomplete")
        result = message_result(msg)
        answered = answering_model(msg)
        if answered is not None and not same_model(_declared_model(request.model), answered):
            self.fallback_answers += 1
            log.info("answer not stored: model %r answered a request for %r (a fallback); the partition names "
                     "the requested model", answered, _declared_model(request.model))
            return replace(result, finish_reason="error")
        return result

    def _served(self, answer: Answer, response: list[Any]) -> Any:
        if answer.layer != "semantic":
            return response[0]
        self.hits += 1
        return ModelResponse(result=[answer_message(answer)])

    # -- hooks ----------------------------------------------------------------------------------
    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        """The model call through the one answer path (:class:`ragcache.answering.AnswerPath`): a stored
        answer, else one handler call among concurrent identical misses, stored when it ended normally."""
        if request.response_format is not None:
            return handler(request)
        req = self.key(request)
        response: list[Any] = []

        def call() -> BackendResult:
            self.model_calls += 1
            response.append(handler(request))
            return self._result(request, response[0])

        answer = self.cache.path.run(req, call, blend_setting=_blend_of(request.model))
        return self._served(answer, response)

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]]) -> Any:
        """Async :meth:`wrap_model_call`."""
        if request.response_format is not None:
            return await handler(request)
        req = self.key(request)
        response: list[Any] = []

        async def call() -> BackendResult:
            self.model_calls += 1
            response.append(await handler(request))
            return self._result(request, response[0])

        answer = await self.cache.path.arun(req, call, blend_setting=_blend_of(request.model))
        return self._served(answer, response)


def _blend_of(model: Any) -> Callable[[], str | None]:
    """The blend setting of the wrapped model, read only for a blended hit: a :class:`ragcache.backend.Blending`
    model's (``ChatRagCache.blend_setting``); any other model never blends: ``None``."""

    def setting() -> str | None:
        m = _unbound(model)
        return m.blend_setting if isinstance(m, Blending) else None

    return setting


def _chat_ragcache(model: Any) -> ChatRagCache | None:
    """The wrapped model (bindings unwrapped) when it is ragcache's own :class:`~langchain_ragcache.ChatRagCache`,
    else ``None`` (a provider's chat model). Its module is not imported here (it imports torch): when it was never
    imported, no ``ChatRagCache`` exists."""
    chat_models = sys.modules.get("langchain_ragcache.chat_models")
    m = _unbound(model)
    return m if chat_models is not None and isinstance(m, chat_models.ChatRagCache) else None


def _unbound(model: Any) -> Any:
    while not isinstance(model, BaseChatModel) and hasattr(model, "bound"):
        model = model.bound
    return model


def _declared_model(model: Any) -> str | None:
    """The model name a chat model (or a binding of one) declares: :class:`~langchain_ragcache.ChatRagCache`'s
    ``model_name``; for a provider's chat model, the first of LangChain's fields ``model_name`` / ``model`` /
    ``model_id`` it has."""
    own = _chat_ragcache(model)
    if own is not None:
        return own.model_name or None
    m = _unbound(model)
    for attr in ("model_name", "model", "model_id"):  # a third-party model's fields: each provider names its own
        v = getattr(m, attr, None)
        if isinstance(v, str) and v:
            return v
    return None


def answering_model(msg: AIMessage) -> str | None:
    """The model that produced ``msg``, as its provider reported it (``response_metadata``
    ``model_name`` / ``model`` / ``model_id``), or ``None`` when not reported."""
    meta = msg.response_metadata or {}
    for key in ("model_name", "model", "model_id"):
        v = meta.get(key)
        if isinstance(v, str) and v:
            return v
    return None


def same_model(declared: str | None, answered: str) -> bool:
    """Whether a response from ``answered`` comes from the ``declared`` model: equal ignoring case,
    or a dated snapshot of it (``claude-sonnet-4-6`` -> ``claude-sonnet-4-6-20260101``, ``gpt-4o-mini``
    -> ``gpt-4o-mini-2024-07-18``). A model that declares no name cannot be compared (True)."""
    if declared is None:
        return True
    d, a = declared.lower().rsplit("/", 1)[-1], answered.lower().rsplit("/", 1)[-1]
    return a == d or (a.startswith(d + "-") and a[len(d) + 1:].replace("-", "").isdigit())


def _llm_string(model: Any, settings: Mapping[str, Any]) -> str:
    """LangChain's ``llm_string`` of the model an agent calls: a ``model.bind(...)`` binding's
    arguments count as settings (they change the answer)."""
    bound: dict[str, Any] = {}
    while not isinstance(model, BaseChatModel) and hasattr(model, "bound"):
        bound = {**dict(getattr(model, "kwargs", None) or {}), **bound}
        model = model.bound
    if not isinstance(model, BaseChatModel):
        raise TypeError(f"RagCacheMiddleware needs a chat model, got {type(model).__name__}")
    return model._get_llm_string(**{**bound, **settings})


def _tool_schema(tool: BaseTool | Mapping[str, Any]) -> dict[str, Any]:
    """A tool's definition as it enters the partition (OpenAI function schema, markers dropped)."""
    if isinstance(tool, Mapping):
        return canonicalize({k: v for k, v in tool.items() if k != "cache_control"})
    return canonicalize(convert_to_openai_tool(tool))


# ============================================================================== layout + breakpoints
Breakpoints = Literal["anthropic", "off"]
"""The middleware's ``breakpoints`` option: place ``cache_control`` breakpoints for a model whose provider
caches by them (:func:`langchain_ragcache.providers.takes_breakpoints`), or place none."""


def _strip_markers(content: Any) -> Any:
    if isinstance(content, list):
        return [{k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, Mapping) else b
                for b in content]
    return content


def _mark(content: Any, cc: Mapping[str, str], code_ids: frozenset[str] = frozenset()) -> Any | None:
    """Content with ``cache_control`` on its last non-empty text or tool-result block that can carry
    it (:func:`ragcache.providers.anthropic.blocks.carries_marker`: never a code-execution tool result), or
    None if there is none."""
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    for i in range(len(blocks) - 1, -1, -1):
        b = blocks[i]
        if isinstance(b, str):
            b = {"type": "text", "text": b}
        if isinstance(b, Mapping) and b.get("type", "text") in ("text", "tool_result") and (
                b.get("type") == "tool_result" or str(b.get("text", "")).strip()) and carries_marker(b, code_ids):
            blocks[i] = {**b, "cache_control": dict(cc)}
            return blocks
    return None


def _markable(message: BaseMessage, code_ids: frozenset[str]) -> bool:
    """A tool message answering a tool called by code execution becomes such a tool_result: no marker."""
    return not (isinstance(message, ToolMessage) and message.tool_call_id in code_ids)


def _caller_hour(request: ModelRequest) -> float:
    """Prefix position (tools 0, system 1, message i at 2 + i) up to which the caller asked for
    ``ttl="1h"`` markers (-1: none; a top-level 1h ``cache_control`` setting covers everything)."""
    def hour(cc: Any) -> bool:
        return isinstance(cc, Mapping) and cc.get("ttl") == "1h"

    def in_content(content: Any) -> bool:
        return isinstance(content, list) and any(isinstance(b, Mapping) and hour(b.get("cache_control"))
                                                 for b in content)

    if hour(request.model_settings.get("cache_control")):
        return float("inf")
    pos = -1.0
    if any(isinstance(t, BaseTool) and hour((t.extras or {}).get("cache_control")) for t in request.tools):
        pos = 0.0
    if request.system_message is not None and in_content(request.system_message.content):
        pos = 1.0
    for i, m in enumerate(request.messages):
        if in_content(m.content):
            pos = 2.0 + i
    return pos


def canonical_documents(message: BaseMessage) -> BaseMessage:
    """A tool result whose artifact is a list of ``Document`` (a retriever tool with
    ``response_format="content_and_artifact"``), rendered canonically: one
    :func:`~ragcache.prompt.layout.render_document` block per document in the canonical order
    (:func:`~ragcache.prompt.layout.canonical_documents`: by content, never by id), duplicates dropped. Other messages are returned unchanged."""
    art = getattr(message, "artifact", None)
    if not isinstance(message, ToolMessage) or not isinstance(art, Sequence) or not art or \
            not all(isinstance(d, Document) for d in art):
        return message
    ordered = canonical_order([as_document(d) for d in art])
    text = "\n\n".join(render_document(s) for s in ordered)
    return message.model_copy(update={"content": text})


class RagPromptLayoutMiddleware(AgentMiddleware):
    """Stable-first layout and Anthropic prompt-cache breakpoints for an agent's model requests.

    Args:
        ttl: breakpoint TTL, ``"5m"`` or ``"1h"``.
        lint: volatile text in the system prompt: ``"move"`` (default: into a text block after the
            last breakpoint, so the system prompt's bytes stay the same), ``"off"``.
        canonical_documents: re-render retriever tool results (``Document`` artifacts) canonically.
        breakpoints: ``"anthropic"`` places ``cache_control`` for ``ChatAnthropic`` (other models
            get the layout only); ``"off"`` never places any.

    Breakpoints (at most 4; caller-set ``cache_control`` markers in messages and a top-level
    ``cache_control`` model setting are replaced): the last tool, the system prompt, the last
    message before the final human turn (the stable history), and the last message. Markers never go
    on blocks the API refuses them on (empty text, thinking, tool calls made by code execution and
    their results: the next earlier block carries it). A caller's ``ttl="1h"`` marker is kept: every
    breakpoint up to the last position the caller marked 1h is placed with ``ttl="1h"`` (1h markers
    must precede 5m ones), the rest with ``ttl``. Each
    response's ``response_metadata["ragcache"]`` holds ``layer`` (``provider-cache`` when part of
    the prompt was read from the cache, else ``provider``), ``breakpoints`` and ``usage``
    (:class:`~ragcache.backend.CacheUsage`). An answer that already carries ragcache's record (a
    local ``ChatRagCache``: ``prefix``, ``chunk``...; a semantic hit) keeps its layer and usage.
    """

    def __init__(self, *, ttl: Literal["5m", "1h"] = "5m", lint: Literal["move", "off"] = "move",
                 canonical_documents: bool = True, breakpoints: Breakpoints = "anthropic") -> None:
        super().__init__()
        if ttl not in ("5m", "1h") or lint not in ("move", "off") or breakpoints not in get_args(Breakpoints):
            raise ValueError("ttl must be '5m' or '1h', lint 'move' or 'off', breakpoints 'anthropic' or 'off'")
        self.ttl, self.lint, self.canonical, self.breakpoints = ttl, lint, canonical_documents, breakpoints

    def layout(self, request: ModelRequest) -> tuple[ModelRequest, list[str]]:
        """The laid-out request and where its breakpoints are (``tools``, ``system``, ``message[i]``)."""
        messages = [canonical_documents(m) if self.canonical else m for m in request.messages]
        system = request.system_message
        volatile = ""
        if system is not None and self.lint == "move" and isinstance(system.content, str):
            stable, volatile, _ = move_volatile(system.content)
            if volatile:
                system = SystemMessage(content=stable)
        anthropic = self.breakpoints != "off" and takes_breakpoints(request.model)
        placed: list[str] = []
        tools = list(request.tools)
        settings = dict(request.model_settings)
        if anthropic:
            hour_until = _caller_hour(request)  # a caller's 1h marker is kept, never silently made 5m
            code_ids = code_execution_tool_ids(request.messages)

            def cc(pos: float) -> dict[str, str]:
                return {"type": "ephemeral", "ttl": "1h" if pos <= hour_until else self.ttl}

            settings.pop("cache_control", None)
            messages = [m.model_copy(update={"content": _strip_markers(m.content)}) for m in messages]
            if tools and isinstance(tools[-1], BaseTool):
                tools[-1] = tools[-1].model_copy(update={"extras": {**(tools[-1].extras or {}), "cache_control": cc(0)}})
                placed.append("tools")
            if system is not None:
                marked = _mark(_strip_markers(system.content), cc(1))
                if marked is not None:
                    system = SystemMessage(content=marked)
                    placed.append("system")
            last_human = max((i for i, m in enumerate(messages) if m.type == "human"), default=None)
            targets = [len(messages) - 1]
            if last_human is not None and last_human > 0:
                targets.insert(0, last_human - 1)
            for i in targets:
                while i >= 0 and len(placed) < MAX_BREAKPOINTS:
                    marked = _mark(messages[i].content, cc(2 + i), code_ids) if _markable(messages[i], code_ids) \
                        else None
                    if marked is not None:
                        if f"message[{i}]" not in placed:
                            messages[i] = messages[i].model_copy(update={"content": marked})
                            placed.append(f"message[{i}]")
                        break
                    i -= 1
        if volatile:
            messages.append(HumanMessage(content=[{"type": "text", "text": volatile}],
                                         additional_kwargs={METADATA_KEY: {"blocks": [{"kind": "volatile"}]}}))
        overrides: dict[str, Any] = {"messages": messages, "model_settings": settings, "tools": tools}
        if system is not request.system_message:
            overrides["system_message"] = system
        return request.override(**overrides), placed

    def notes(self, request: ModelRequest, placed: list[str]) -> list[str]:
        """What the layout changed that the caller did not ask for, worded as ``prepare()`` words it
        (:attr:`~ragcache.providers.anthropic.CachedRequest.notes`): each breakpoint whose TTL was raised
        from this middleware's ``"5m"`` to ``"1h"`` because the caller's own ``"1h"`` marker comes at or
        after it (the API refuses a ``"1h"`` breakpoint after a ``"5m"`` one)."""
        if self.ttl == "1h" or not placed:
            return []
        hour_until = _caller_hour(request)
        pos = {"tools": 0.0, "system": 1.0}
        return [f"{p}: ttl raised to '1h' (a '1h' breakpoint may not follow a '5m' one)" for p in placed
                if pos.get(p, 2.0 + float(p[8:-1]) if p.startswith("message[") else -1.0) <= hour_until]

    @staticmethod
    def _read_back(response: Any, placed: list[str], notes: Sequence[str] = ()) -> Any:
        """A copy of the response whose AI messages carry the usage as ragcache's :class:`CacheUsage`
        (``response_metadata["ragcache"]``, with the layout's ``notes``) and one ``cache_creation`` total."""
        if isinstance(response, ModelResponse):
            return ModelResponse(result=[_with_usage(m, placed, notes) for m in response.result],
                                 structured_response=response.structured_response)
        return _with_usage(response, placed, notes)

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        laid, placed = self.layout(request)
        return self._read_back(handler(laid), placed, self.notes(request, placed))

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]]) -> Any:
        laid, placed = self.layout(request)
        return self._read_back(await handler(laid), placed, self.notes(request, placed))


def _with_usage(msg: Any, placed: list[str], notes: Sequence[str] = ()) -> Any:
    """``msg`` with the provider's usage read back as ragcache's record. An answer that already
    carries ragcache's record (a local :class:`~langchain_ragcache.ChatRagCache`, a semantic hit) keeps
    its layer and usage: only the breakpoints are added, so a local prefix hit is never called
    ``provider-cache``."""
    if not isinstance(msg, AIMessage):
        return msg
    own = own_record(msg)  # not a local server's body record (its engine layer is no provider call's)
    if own is not None and own.get("layer"):
        return msg.model_copy(update={"response_metadata": {
            **msg.response_metadata, "ragcache": {**own, "breakpoints": list(placed), "notes": list(notes)}}})
    usage = cache_usage(msg)
    if usage is None:
        return msg
    return msg.model_copy(update={
        "usage_metadata": with_one_write_total(msg.usage_metadata, usage.cache_write),
        "response_metadata": {**msg.response_metadata, "ragcache": {
            "layer": provider_layer(usage.cache_read), "breakpoints": list(placed), "notes": list(notes),
            "usage": usage.to_dict(), "cache_creation_by_ttl": cache_write_by_ttl(msg.usage_metadata)}}})


__all__ = ["MAX_BREAKPOINTS", "RagCacheMiddleware", "RagPromptLayoutMiddleware", "canonical_documents"]
