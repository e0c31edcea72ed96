"""ChatRagCache: ragcache's local backend (LocalEngine) as a LangChain chat model.

The engine reuses KV at two levels (see :mod:`ragcache.engine.engine`): the system
text and any repeated prefix through the exact prefix cache (chained 16-token block
hashes), and each document block produced by :class:`~langchain_ragcache.RagPrompt`
through the CacheBlend chunk cache (Yao et al., EuroSys 2025, arXiv 2405.16444,
sections 3-5: per-document KV computed once, RoPE re-rotated to its new position, the
top ``recompute_ratio`` of deviating tokens recomputed). The question is always computed.

Every answer goes through the pipeline's :class:`ragcache.engine.backend.LocalBackend` and
reports ragcache's one record (:class:`ragcache.backend.BackendResult`):
``usage_metadata["input_token_details"]["cache_read"]`` is the number of prompt tokens whose
KV was reused (``cache_creation`` is 0: local KV writes cost nothing), and
``response_metadata["ragcache"]`` holds the layer (``prefix``, ``chunk``, ``prefix+chunk``,
``model``, or ``semantic`` for an answer served by the LLM cache), ``approximate`` and
``recompute_ratio`` (CacheBlend reused document KV), TTFT and the whole ``CacheUsage``.

Tenants: ``ChatRagCache(tenant="acme")``, or per call ``invoke(..., tenant="acme")`` /
``bind(tenant="acme")``, names who a request is for; the engine salts the request's prefix and chunk KV
with it (:class:`ragcache.backend.Backend`'s ``tenant``), so tenants that share one engine in one
process reuse none of each other's KV unless the engine opts in (``share_kv_across_namespaces=True``).
With :class:`~langchain_ragcache.RagCacheSemanticCache` the call has one tenant: its own, else the cache's
``namespace`` (:meth:`~langchain_ragcache.RagCacheSemanticCache.tenant_for`), the engine's KV tenant, the
``CacheRequest``'s tenant and the namespace its answer is looked up in. The messages are read once
(:func:`langchain_ragcache._keys.to_dicts`), for the key and for the engine's prompt.

Streaming and the LLM cache: LangChain's ``stream()`` does not consult the LLM cache
(``set_llm_cache`` / ``cache=``); ChatRagCache does it itself (``stream_cache=True``). With
:class:`~langchain_ragcache.RagCacheSemanticCache` the stream goes through ragcache's one answer path
(:class:`ragcache.answering.AnswerPath`): a cached answer comes back as one text chunk and a closing
chunk marked ``layer="semantic"`` with zero usage; a streamed answer is stored on completion only
when it ended normally (or at its budget with ``cache_truncated``). Another LangChain cache is used
with LangChain's own loop (a hit is replayed as word chunks).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.caches import BaseCache
from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.globals import get_llm_cache
from langchain_core.language_models import (
    BaseChatModel,
    LangSmithParams,
    LanguageModelInput,
)
from langchain_core.load import dumps
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    SystemMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from langchain_ragcache._engine import (
    TINY_RANDOM_MODEL,
    loaded_engine,
    ragcache_metadata,
    shared_engine,
)
from langchain_ragcache._keys import checked_tenant
from langchain_ragcache._messages import to_layout, without_ids
from langchain_ragcache.cache import RagCacheSemanticCache
from langchain_ragcache.results import answer_message, message_result
from langchain_ragcache.tools import (
    normalize_tool_choice,
    parse_tool_calls,
    tools_system_text,
)
from langchain_ragcache.usage import HIT_USAGE, usage_metadata
from ragcache.answering import Answer
from ragcache.backend import DEFAULT_TENANT, BackendResult
from ragcache.engine.backend import LocalBackend, result_of
from ragcache.engine.engine import Generation, LocalEngine
from ragcache.engine.predicted import PredictedEngine
from ragcache.limits import check_recompute_ratio
from ragcache.request import CacheRequest
from ragcache.models import DEFAULT_MODEL

_CALL_OPTIONS = frozenset({"max_tokens", "temperature", "top_p", "seed", "recompute_ratio", "use_chunk_cache",
                           "use_prefix_cache", "stream", "tools", "tool_choice", "tenant"})


class ChatRagCache(BaseChatModel):
    """A local Hugging Face chat model with ragcache's prefix and CacheBlend KV caches.

    Args:
        model: model name or path (alias of ``model_name``): default the embedded
            SmolLM2-135M-Instruct; ``ragcache/tiny-random-llama`` for structure-only tests. The embedded
            model is loaded (converted first on a new ``RAGCACHE_HOME``) by the first call the LLM cache
            does not answer: until then the cache key holds its predicted fingerprint and blend setting
            (:class:`ragcache.engine.predicted.PredictedEngine`).
        engine: an existing :class:`LocalEngine` to use (shares its caches); overrides ``model``.
        temperature: 0 for greedy decoding (default), > 0 samples.
        max_tokens: decode budget in tokens per answer.
        top_p: nucleus sampling mass (with temperature > 0).
        stop: stop strings (the answer ends before the first one).
        seed: sampling seed (reproducible sampling when set).
        chunk_cache: reuse document KV CacheBlend-style (default ``True``).
        recompute_ratio: the blend's r, share of reused document tokens recomputed (0..1); ``None``
            (default): the engine's, i.e. the model's calibration record, else exact prefill.
        prefix_cache_bytes: byte budget of the exact prefix KV cache.
        stream_cache: serve / fill the LLM cache when streaming (see module docstring).
        tenant: who the requests are for (an opaque id, not a secret); ``None`` (default): the default
            tenant. The engine salts each request's prefix and chunk KV with it (the root of the
            block-hash chain and every chunk key, as vLLM's ``cache_salt``), so two tenants of one
            process reuse none of each other's KV unless the engine has
            ``share_kv_across_namespaces=True``; with ragcache's semantic cache it is also the namespace
            the answers are keyed under, so they stay per tenant (a call that names none: the cache's
            ``namespace``, for the KV too). Per call: ``invoke(..., tenant="acme")`` or ``bind(tenant="acme")``; from a
            ``RunnableConfig``: ``configurable_fields(tenant=ConfigurableField(id="tenant"))`` and
            ``config={"configurable": {"tenant": "acme"}}``.
        timeout / max_retries: LangChain's standard parameters; a local model has no network
            call to time out or retry, so they are accepted and not used.

    Call options (``invoke(..., max_tokens=..)``): ``max_tokens``, ``temperature``, ``top_p``,
    ``seed``, ``recompute_ratio``, ``use_chunk_cache``, ``use_prefix_cache``, ``tenant``; ``bind_tools`` adds
    ``tools`` / ``tool_choice`` (prompted tool calling, see :mod:`langchain_ragcache.tools`).

    Raises (on call):
        ValueError: non-text content, tool messages, unknown call options, a prompt longer
            than the context window (``ContextWindowError``).
        RuntimeError: the embedded model, loaded, is not the one predicted (:meth:`get_engine`).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, populate_by_name=True)

    model_name: str = Field(default=DEFAULT_MODEL, alias="model")
    engine: Any = Field(default=None, exclude=True)
    temperature: float = 0.0
    max_tokens: int = 256
    top_p: float = 1.0
    stop: list[str] | None = Field(default=None, alias="stop_sequences")
    seed: int | None = None
    chunk_cache: bool = True
    recompute_ratio: float | None = None
    prefix_cache_bytes: int = 512 << 20
    streaming: bool = False
    stream_cache: bool = True
    tenant: str | None = None
    timeout: float | None = None
    max_retries: int | None = None
    api_key: Any = Field(default=None, exclude=True, repr=False)
    """Accepted for drop-in use where LangChain's standard chat-model options are passed; a local
    model needs no key, so it is never read or stored in the cache key."""

    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _predicted: Any = PrivateAttr(default=None)  # PredictedEngine, False (cannot be predicted) or None (not yet)

    @model_validator(mode="before")
    @classmethod
    def _known_options(cls, values: Any) -> Any:
        """Refuse an unknown constructor option (LangChain's base ignores them: ``max_new_tokens=5``
        would otherwise leave ``max_tokens`` at 256 without a word)."""
        if not isinstance(values, dict):
            return values
        known = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
        unknown = sorted(str(k) for k in values if k not in known)
        if unknown:
            import difflib

            hints = [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, sorted(known), 1, 0.6))
                     else repr(k) for k in unknown]
            raise ValueError(f"ChatRagCache got unknown option(s) {', '.join(hints)}; its options are "
                             f"{', '.join(sorted(n for n in cls.model_fields if not n.startswith('_')))}")
        return values

    @model_validator(mode="after")
    def _check(self) -> ChatRagCache:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        check_recompute_ratio(self.recompute_ratio)
        checked_tenant(self.tenant)
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError("need temperature >= 0 and 0 < top_p <= 1")
        if self.engine is not None:
            if not isinstance(self.engine, LocalEngine):
                raise TypeError(f"engine must be a ragcache LocalEngine, got {type(self.engine).__name__}")
            if "model_name" not in self.model_fields_set:
                self.model_name = self.engine.fingerprint.name
        return self

    # ------------------------------------------------------------------ identity
    @property
    def _llm_type(self) -> str:
        return "ragcache-local"

    def get_engine(self) -> LocalEngine:
        """The engine answering this model's calls (loaded on first use).

        Raises:
            RuntimeError: the loaded model's fingerprint is not the one this model's calls were keyed by
                before it was loaded (:meth:`ragcache.engine.predicted.PredictedEngine.check`); the next
                call keys by the loaded model.
        """
        if self.engine is None:
            with self._lock:
                if self.engine is None:
                    engine = shared_engine(self.model_name, chunk_cache=self.chunk_cache,
                                           prefix_cache_bytes=self.prefix_cache_bytes)
                    predicted, self._predicted = self._predicted, None
                    if predicted:
                        predicted.check(engine.fingerprint.digest)
                    self.engine = engine
        return self.engine

    def _identity(self) -> LocalEngine | PredictedEngine:
        """What this model's cache keys are read from: the engine when it is given or loaded; else, for the
        embedded model, the engine predicted without loading or converting it (its fingerprint and
        calibration record: :class:`~ragcache.engine.predicted.PredictedEngine`), so an LLM-cache lookup
        needs no model; else the engine, loaded now. :meth:`get_engine` checks the loaded model against a
        prediction used."""
        if (self.engine is None and self.model_name == DEFAULT_MODEL and self._predicted is not False
                and loaded_engine(self.model_name, chunk_cache=self.chunk_cache,
                                  prefix_cache_bytes=self.prefix_cache_bytes) is None):
            predicted = self._predicted
            if predicted is None:
                from ragcache.config import Config

                predicted = PredictedEngine.of(None, home=Config.from_env().paths, chunk_cache=self.chunk_cache)
                self._predicted = predicted if predicted is not None else False
            if predicted is not None and self.engine is None:
                return predicted
        return self.get_engine()

    @property
    def blend_setting(self) -> str | None:
        """The blend setting this model's calls blend chunk hits at (its name, e.g. ``"infoflow r=0.15"``;
        ``None``: exact prefill): :meth:`ragcache.engine.engine.LocalEngine.blend_setting_name` with
        ``recompute_ratio``. A stored answer made by a blend is served only at the same setting."""
        return self._blend_for({})

    def _blend_for(self, kwargs: dict[str, Any]) -> str | None:
        """The blend setting of a call with these options (``recompute_ratio``, ``use_chunk_cache``)."""
        return self._identity().blend_setting_name(kwargs.get("recompute_ratio", self.recompute_ratio),
                                                   kwargs.get("use_chunk_cache"))

    @property
    def _identifying_params(self) -> dict[str, Any]:
        # The fingerprint (name, weights digest, dtype) makes LLM-cache keys exact per model; a blending
        # model's setting is read back by the LLM cache to serve blended answers only at that setting.
        # Both are read without loading the embedded model when it is not loaded yet (_identity).
        blend = self.blend_setting
        return {
            "model_name": self.model_name,
            "model_fingerprint": self._identity().fingerprint.digest,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "top_p": self.top_p,
            "seed": self.seed,
            "default_stop": list(self.stop) if self.stop else None,
            **({"blend_setting": blend} if blend is not None else {}),
            **({"tenant": self.tenant} if self.tenant not in (None, DEFAULT_TENANT) else {}),
        }

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = LangSmithParams(
            ls_provider="ragcache",
            ls_model_name=str(kwargs.get("model") or self.model_name),
            ls_model_type="chat",
            ls_temperature=kwargs.get("temperature", self.temperature),
            ls_max_tokens=kwargs.get("max_tokens", self.max_tokens),
        )
        if stop or self.stop:
            params["ls_stop"] = list(stop or self.stop or [])
        return params

    # ------------------------------------------------------------------ generation
    def _options(self, stop: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        unknown = set(kwargs) - _CALL_OPTIONS
        if unknown:
            raise ValueError(
                f"ChatRagCache got unknown call options {sorted(unknown)}; "
                f"supported: {sorted(_CALL_OPTIONS - {'stream'})}"
            )
        opts: dict[str, Any] = {
            "max_new_tokens": int(kwargs.get("max_tokens", self.max_tokens)),
            "temperature": float(kwargs.get("temperature", self.temperature)),
            "top_p": float(kwargs.get("top_p", self.top_p)),
            "stop": list(stop if stop is not None else (self.stop or [])),
            "seed": kwargs.get("seed", self.seed),
        }
        r = kwargs.get("recompute_ratio", self.recompute_ratio)
        if r is not None:
            opts["recompute_ratio"] = float(r)
        for k in ("use_chunk_cache", "use_prefix_cache"):
            if k in kwargs:
                opts[k] = bool(kwargs[k])
        opts["tenant"] = self._tenant(kwargs)
        return opts

    def _answer_cache(self) -> RagCacheSemanticCache | None:
        """ragcache's semantic cache this model's calls are keyed in (its ``cache``, else LangChain's global LLM
        cache), or ``None`` (``cache=False``, another LangChain cache, or none)."""
        if self.cache is False:
            return None
        cache = self.cache if isinstance(self.cache, BaseCache) else get_llm_cache()
        return cache if isinstance(cache, RagCacheSemanticCache) else None

    def _tenant(self, kwargs: dict[str, Any]) -> str | None:
        """The tenant the call names: its ``tenant`` option, else the model's ``tenant`` (``None``: none). It is
        what the call's key carries; the value the engine salts the KV with and the cache keys the answer under
        is :meth:`_engine_tenant` of it (one derivation, in one place).

        Raises:
            TypeError / ValueError: a tenant that is not a non-empty str or ``None``.
        """
        return checked_tenant(kwargs.get("tenant", self.tenant))

    def _engine_tenant(self, tenant: str | None) -> str | None:
        """The call's one tenant from the tenant it names: with ragcache's semantic cache,
        :meth:`RagCacheSemanticCache.tenant_for <langchain_ragcache.RagCacheSemanticCache.tenant_for>` of it (the
        value ``CacheRequest.tenant`` and the lookup namespace hold too), else the tenant itself."""
        cache = self._answer_cache()
        return cache.tenant_for(tenant) if cache is not None else tenant

    # ------------------------------------------------------------------ tools
    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable | BaseTool], *,
                   tool_choice: str | dict | bool | None = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Offer tools to the model by prompting (see :mod:`langchain_ragcache.tools`).

        The tools are described in the system text; ``<tool_call>`` JSON in the answer becomes
        ``AIMessage.tool_calls`` (unreadable calls become ``invalid_tool_calls``). Small local
        models follow the format unreliably. ``tool_choice``: "auto", "any"/"required", "none" or a name.
        """
        formatted = [convert_to_openai_tool(t) for t in tools]
        names = [t["function"]["name"] for t in formatted]
        normalize_tool_choice(tool_choice, names)  # validate now, not at call time
        return super().bind(tools=formatted, tool_choice=tool_choice, **kwargs)

    def with_structured_output(self, schema: Any, *, include_raw: bool = False, method: str = "function_calling",
                               strict: bool | None = None, **kwargs: Any) -> Runnable:
        """Structured output through a prompted tool call.

        A local model has no JSON mode or constrained decoding, so every ``method``
        ("function_calling", "json_schema", "json_mode") is served the same way: the schema is
        offered as the one tool the model must call, and the call's arguments are parsed
        (``strict`` is accepted for API compatibility; nothing enforces the schema while decoding).
        """
        if method not in ("function_calling", "json_schema", "json_mode"):
            raise ValueError(f"method must be 'function_calling', 'json_schema' or 'json_mode', got {method!r}")
        return super().with_structured_output(schema, include_raw=include_raw, **kwargs)

    def _with_tools(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> tuple[list[BaseMessage], list[str]]:
        tools = kwargs.get("tools") or []
        if not tools:
            return messages, []
        names = [t["function"]["name"] for t in tools]
        text = tools_system_text(tools, normalize_tool_choice(kwargs.get("tool_choice"), names))
        if not text:
            return messages, []
        if messages and messages[0].type == "system":
            first = SystemMessage(content=messages[0].text + "\n\n" + text)
            return [first, *messages[1:]], names
        return [SystemMessage(content=text), *messages], names

    @staticmethod
    def _tool_message(text: str, names: list[str], **fields: Any) -> AIMessage:
        if not names:
            return AIMessage(content=text, **fields)
        rest, calls, invalid = parse_tool_calls(text, names)
        return AIMessage(content=rest, tool_calls=calls, invalid_tool_calls=invalid, **fields)

    def _backend(self, opts: dict[str, Any]) -> tuple[LocalBackend, dict[str, Any]]:
        """The pipeline's local backend with this call's options, and the keyword arguments of each of its
        calls: the budget, the temperature and the tenant (:class:`ragcache.backend.Backend`)."""
        per_call = ("max_new_tokens", "temperature", "tenant")
        rest = {k: v for k, v in opts.items() if k not in per_call}
        kw = {k: opts.get(k) for k in per_call}
        kw["tenant"] = self._engine_tenant(kw["tenant"])
        return LocalBackend(self.get_engine(), **rest), kw

    def _response_metadata(self, result: BackendResult) -> dict[str, Any]:
        return {"model_name": self.model_name, "model_provider": "ragcache", "finish_reason": result.finish_reason,
                "ragcache": ragcache_metadata(result)}

    def _message(self, result: BackendResult, names: list[str]) -> AIMessage:
        return self._tool_message(result.text, names, usage_metadata=usage_metadata(result.usage),
                                  response_metadata=self._response_metadata(result))

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        opts = self._options(stop, kwargs)
        messages, names = self._with_tools(messages, kwargs)
        backend, call = self._backend(opts)
        prompt = backend.engine.build_prompt(to_layout(messages))
        result = backend.generate(prompt, **call)
        return ChatResult(generations=[ChatGeneration(message=self._message(result, names))])

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        opts = self._options(stop, kwargs)
        messages, names = self._with_tools(messages, kwargs)
        backend, call = self._backend(opts)
        prompt = backend.engine.build_prompt(to_layout(messages))
        result = await backend.agenerate(prompt, **call)
        return ChatResult(generations=[ChatGeneration(message=self._message(result, names))])

    # ------------------------------------------------------------------ streaming
    def _llm_cache(self) -> BaseCache | None:
        if not self.stream_cache or self.cache is False:
            return None
        return self.cache if isinstance(self.cache, BaseCache) else get_llm_cache()

    def _cache_key(self, messages: list[BaseMessage], stop: list[str] | None,
                   kwargs: dict[str, Any]) -> tuple[str, str]:
        # The same (prompt, llm_string) pair BaseChatModel uses for invoke().
        return dumps(without_ids(messages)), self._get_llm_string(stop=stop, **kwargs)

    def _pieces(self, messages: list[BaseMessage], stop: list[str] | None, opts: dict[str, Any],
                kwargs: dict[str, Any], box: dict[str, Any]) -> Iterator[str | BackendResult]:
        """The engine's answer as text pieces, then its :class:`BackendResult` (the shape
        :meth:`ragcache.answering.AnswerPath.stream` reads). With tools, one whole answer (tool calls are
        parsed from all of it); its message is kept in ``box["message"]``, the result in ``box["result"]``."""
        if kwargs.get("tools"):
            msg = self._generate(messages, stop, None, **kwargs).generations[0].message
            box["message"] = msg
            box["result"] = message_result(msg)
            yield box["result"]
            return
        backend, call = self._backend(opts)
        prompt = backend.engine.build_prompt(to_layout(messages))
        final: Generation | None = None
        for ev in backend.stream(prompt, **call):
            final = ev.generation or final
            if ev.text:
                yield ev.text
        if final is not None:
            box["result"] = result_of(final)
            yield box["result"]

    async def _apieces(self, messages: list[BaseMessage], stop: list[str] | None, opts: dict[str, Any],
                       kwargs: dict[str, Any], box: dict[str, Any]) -> AsyncIterator[str | BackendResult]:
        """Async :meth:`_pieces`: the engine's token stream through :meth:`LocalEngine.astream`
        (:func:`ragcache.aio.iterate_in_thread`; leaving early stops generation within one decode step)."""
        if kwargs.get("tools"):
            msg = (await self._agenerate(messages, stop, None, **kwargs)).generations[0].message
            box["message"] = msg
            box["result"] = message_result(msg)
            yield box["result"]
            return
        backend, call = self._backend(opts)
        prompt = backend.engine.build_prompt(to_layout(messages))  # tokenising: milliseconds
        final: Generation | None = None
        async for ev in backend.astream(prompt, **call):
            final = ev.generation or final
            if ev.text:
                yield ev.text
        if final is not None:
            box["result"] = result_of(final)
            yield box["result"]

    def _chunk(self, item: str | BackendResult | Answer, box: dict[str, Any]) -> ChatGenerationChunk:
        """The LangChain chunk of one item of an answer stream: a text piece, or the closing chunk
        (tool calls, usage and ragcache's record; a semantic hit's with zero usage)."""
        if isinstance(item, str):
            return ChatGenerationChunk(message=AIMessageChunk(content=item))
        if isinstance(item, Answer) and item.layer == "semantic":
            hit = answer_message(item, model_name=self.model_name)
            return ChatGenerationChunk(message=AIMessageChunk(
                content="", response_metadata=hit.response_metadata, usage_metadata=hit.usage_metadata,
                chunk_position="last"), generation_info={"finish_reason": item.finish_reason})
        if "message" in box:
            return self._tool_chunk(box["message"])
        return self._final(box["result"])[0]

    def _path_key(self, cache: RagCacheSemanticCache, messages: list[BaseMessage], stop: list[str] | None,
                  opts: dict[str, Any], kwargs: dict[str, Any]) -> tuple[CacheRequest, dict[str, Any]]:
        """The answer path's request of a call, built from its messages and parameters
        (:meth:`RagCacheSemanticCache.chat_request <langchain_ragcache.RagCacheSemanticCache.chat_request>`:
        the request LangChain's ``(prompt, llm_string)`` of the call is read back as, without the round trip),
        with the tenant the call names (``opts["tenant"]``: :meth:`_tenant`; the request holds its one value)."""
        params = {**self._get_invocation_params(stop=stop, **kwargs), "tenant": opts["tenant"]}
        return (cache.chat_request(messages, params, model=self.model_name),
                {"blend_setting": lambda: self._blend_for(kwargs)})

    def _stream_plan(self, messages: list[BaseMessage], stop: list[str] | None,
                     kwargs: dict[str, Any]) -> _StreamPlan:
        """What :meth:`_stream` and :meth:`_astream` share: the options, the cache, and either the answer
        path's key (ragcache's semantic cache) or LangChain's cache key (another cache)."""
        opts = self._options(stop, kwargs)
        kwargs = {k: v for k, v in kwargs.items() if k != "stream"}
        plan = _StreamPlan(opts, kwargs, self._llm_cache())
        if isinstance(plan.cache, RagCacheSemanticCache):
            plan.path_key = self._path_key(plan.cache, messages, stop, opts, kwargs)
        elif plan.cache is not None:
            plan.key = self._cache_key(messages, stop, kwargs)
        return plan

    def _for_cache(self, plan: _StreamPlan) -> list[ChatGeneration] | None:
        """What LangChain's own cache stores after a stream (``None``: nothing, or the path stored it)."""
        if plan.key is None or "result" not in plan.box:
            return None
        return [ChatGeneration(message=plan.box.get("message") or self._final(plan.box["result"])[1])]

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        """Token chunks, then one closing chunk. With ragcache's semantic cache as the LLM cache, through
        the one answer path (:meth:`ragcache.answering.AnswerPath.stream`: a hit is one text chunk and a
        closing chunk with zero usage; concurrent identical misses make one engine call; only an answer that
        ended normally is stored). With another LangChain cache, LangChain's own loop (lookup, replay, update)."""
        plan = self._stream_plan(messages, stop, kwargs)
        box = plan.box
        if plan.path_key is not None:
            req, kw = plan.path_key
            items: Iterator[Any] = plan.cache.path.stream(
                req, lambda: self._pieces(messages, stop, plan.opts, plan.kwargs, box), **kw)
        else:
            cached = plan.cache.lookup(*plan.key) if plan.key is not None else None
            if isinstance(cached, list) and cached:
                yield from self._replay(cached[0], run_manager)
                return
            items = self._pieces(messages, stop, plan.opts, plan.kwargs, box)
        for item in items:
            chunk = self._chunk(item, box)
            if run_manager and isinstance(item, str):
                run_manager.on_llm_new_token(item, chunk=chunk)
            yield chunk
        stored = self._for_cache(plan)
        if stored is not None:
            plan.cache.update(*plan.key, stored)

    def _final(self, result: BackendResult) -> tuple[ChatGenerationChunk, AIMessage]:
        """The closing chunk of a stream (usage and metadata) and the whole message for the cache."""
        meta, usage = self._response_metadata(result), usage_metadata(result.usage)
        chunk = ChatGenerationChunk(
            message=AIMessageChunk(content="", usage_metadata=usage, response_metadata=meta, chunk_position="last"),
            generation_info={"finish_reason": result.finish_reason})
        return chunk, AIMessage(content=result.text, usage_metadata=usage, response_metadata=meta)

    @staticmethod
    def _tool_chunk(msg: Any) -> ChatGenerationChunk:
        # Tool calls are parsed from the whole answer: one final chunk carries them.
        return ChatGenerationChunk(message=AIMessageChunk(
            content=msg.content, usage_metadata=msg.usage_metadata, response_metadata=msg.response_metadata,
            tool_call_chunks=[{"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i,
                               "type": "tool_call_chunk"} for i, c in enumerate(msg.tool_calls)],
            chunk_position="last"))

    def _replay(self, cached: Any, run_manager: CallbackManagerForLLMRun | None) -> Iterator[ChatGenerationChunk]:
        """Stream a cached answer back as word chunks; the last chunk carries its metadata."""
        message = getattr(cached, "message", None)
        text = cached.text
        for piece in re.findall(r"\s*\S+", text) or [text]:
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
            if run_manager:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk
        meta = dict(getattr(message, "response_metadata", None) or {})
        meta.setdefault("ragcache", {"layer": "semantic"})
        meta["ragcache"] = {**meta["ragcache"], "layer": "semantic", "ttft_s": 0.0}
        yield ChatGenerationChunk(  # a hit made no model call: zero tokens
            message=AIMessageChunk(content="", response_metadata=meta, chunk_position="last",
                                   usage_metadata=dict(HIT_USAGE)),
        )

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        """Native async :meth:`_stream` (:meth:`ragcache.answering.AnswerPath.astream` with ragcache's
        semantic cache: the flight is waited for on the event loop, shared with sync callers)."""
        plan = self._stream_plan(messages, stop, kwargs)
        box = plan.box
        if plan.path_key is not None:
            req, kw = plan.path_key
            items: AsyncIterator[Any] = plan.cache.path.astream(
                req, lambda: self._apieces(messages, stop, plan.opts, plan.kwargs, box), **kw)
        else:
            cached = await plan.cache.alookup(*plan.key) if plan.key is not None else None
            if isinstance(cached, list) and cached:
                for chunk in self._replay(cached[0], None):
                    if run_manager and chunk.text:
                        await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
                    yield chunk
                return
            items = self._apieces(messages, stop, plan.opts, plan.kwargs, box)
        async for item in items:
            chunk = self._chunk(item, box)
            if run_manager and isinstance(item, str):
                await run_manager.on_llm_new_token(item, chunk=chunk)
            yield chunk
        stored = self._for_cache(plan)
        if stored is not None:
            await plan.cache.aupdate(*plan.key, stored)


@dataclass(slots=True)
class _StreamPlan:
    """One stream's options, cache and key (:meth:`ChatRagCache._stream_plan`); ``box`` collects the
    engine's result (and a tool-call message) as the pieces are read."""

    opts: dict[str, Any]
    kwargs: dict[str, Any]
    cache: Any
    path_key: tuple[CacheRequest, dict[str, Any]] | None = None
    key: tuple[str, str] | None = None
    box: dict[str, Any] = field(default_factory=dict)


__all__ = ["TINY_RANDOM_MODEL", "ChatRagCache", "shared_engine"]
