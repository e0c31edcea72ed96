"""RagCacheLLM: ragcache's local engine as a LlamaIndex ``LLM``, with prefix and chunk KV reuse.

A subclass of ``LLM`` (not ``CustomLLM``), so the chat structure reaches the engine
intact: system text, earlier turns and, in the last user message, one document per
``TextBlock``. The engine keeps

- an exact prefix KV cache (chained 16-token block hashes) for everything up to the
  first change (system text, history, unchanged leading documents);
- with a chunk cache (the default), each document's KV on its own, reused at any
  position CacheBlend-style (Yao et al., EuroSys 2025, arXiv 2405.16444, sections 3-5):
  K re-rotated to the new position, the ``recompute_ratio`` share of reused tokens
  whose KV deviates most recomputed.

Block roles in the last user message are decided by ragcache's one rule,
:meth:`ragcache.prompt.layout.PromptLayout.from_messages` (a ``CachePoint`` maps to its ``CACHE_POINT``):

- no ``CachePoint``: every text block but the last is a document, the last is the question;
- with ``CachePoint`` blocks: the text blocks before the last ``CachePoint`` are
  documents (the cacheable part), after it the last block is the question and any
  others are volatile text (computed every time, never cached as documents).
Documents are rendered as every ragcache document is (``<document>`` blocks).

Tenants: ``RagCacheLLM(tenant="acme")`` or ``llm.chat(messages, tenant="acme")`` names who a
request is for; the engine salts its prefix and chunk KV with it, so tenants of one engine share no KV
unless the engine opts in (``share_kv_across_namespaces=True``).

Each response carries the cache accounting: ``additional_kwargs`` holds ``layer``,
``approximate`` / ``recompute_ratio`` (a CacheBlend prefill is labelled), ``usage`` (ragcache's
:class:`~ragcache.CacheUsage` as a dict) and flat counts (:func:`stats_kwargs`); ``raw`` holds the
generated ``token_ids``, the engine's ``stats`` dict, the ``generation`` record and
``prompt_sha256`` (the sha256 of the prompt token ids: equal prompts, equal digests).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    CachePoint,
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
    TextBlock,
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.llm import LLM

from ragcache.aio import iterate_in_thread
from ragcache.engine.request import EngineRequest

_ROLES = {
    MessageRole.SYSTEM: "system",
    MessageRole.DEVELOPER: "system",
    MessageRole.USER: "user",
    MessageRole.ASSISTANT: "assistant",
    MessageRole.CHATBOT: "assistant",
    MessageRole.MODEL: "assistant",
}


def stats_kwargs(generation: Any) -> dict[str, Any]:
    """Flat cache accounting of one generation for ``additional_kwargs`` (tokens, seconds), from
    ragcache's one record (:func:`ragcache.engine.backend.result_of`): ``layer``, ``approximate``
    ``recompute_ratio`` and ``blend_setting`` (a CacheBlend prefill), ``usage`` (:class:`ragcache.CacheUsage` as a
    dict: reused + recomputed + computed == prompt_tokens) and the same counts flat."""
    from ragcache.engine.backend import result_of

    r = result_of(generation)
    u = r.usage
    return {
        "layer": r.layer, "approximate": r.approximate, "recompute_ratio": r.recompute_ratio,
        "blend_setting": r.blend_setting, "usage": u.to_dict(), "prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
        "tokens_reused": u.reused, "tokens_recomputed": u.recomputed, "tokens_computed": u.computed,
        "prefix_tokens_reused": u.prefix_reused, "chunk_tokens_reused": u.chunk_reused,
        "docs_hit": r.details.get("docs_hit", 0), "docs_missed": r.details.get("docs_missed", 0),
        "ttft_s": r.ttft_s, "finish_reason": r.finish_reason,
    }


def prompt_digest(input_ids: Sequence[int]) -> str:
    """sha256 of prompt token ids (8-byte little-endian each): equal prompts, equal digests."""
    h = hashlib.sha256()
    for t in input_ids:
        h.update(int(t).to_bytes(8, "little", signed=True))
    return h.hexdigest()


def to_engine_messages(messages: Sequence[ChatMessage]) -> list[dict]:
    """LlamaIndex chat messages -> the chat messages :meth:`ragcache.prompt.layout.PromptLayout.from_messages`
    reads: roles mapped, text blocks as strings, each ``CachePoint`` as
    :data:`ragcache.prompt.layout.CACHE_POINT`. Which block is a document, volatile text or the question is
    decided there (see the module docstring). Empty text blocks are skipped.

    Raises:
        ValueError: a tool / function message, or a non-text block (image, audio,
            document, tool call): the local engine takes text only.
    """
    from ragcache.prompt.layout import CACHE_POINT

    if not messages:
        raise ValueError("messages is empty: give at least one user message")
    out: list[dict] = []
    for m in messages:
        role = _ROLES.get(m.role)
        if role is None:
            raise ValueError(f"RagCacheLLM has no tool calling; got a {m.role.value!r} message. "
                             "Send tool results as user text, or use an LLM with function calling")
        content: list[Any] = []
        for b in m.blocks:
            if isinstance(b, TextBlock):
                if b.text:
                    content.append(b.text)
            elif isinstance(b, CachePoint):
                content.append(CACHE_POINT)
            else:
                msg = (f"RagCacheLLM takes text blocks only, got {type(b).__name__}: "
                       "convert it to a TextBlock or use a multimodal LLM")
                raise ValueError(msg)  # noqa: TRY004 - a user error in the message content, as elsewhere in ragcache
        texts = [c for c in content if isinstance(c, str)]
        if not texts:
            continue
        out.append({"role": role, "content": texts[0] if len(content) == 1 else content})
    if not out:
        raise ValueError("every message is empty: give at least one non-empty text block")
    return out


def to_layout(messages: Sequence[ChatMessage]) -> Any:
    """The :class:`ragcache.prompt.layout.PromptLayout` of LlamaIndex chat messages (what the engine renders).

    Raises:
        ValueError: as :func:`to_engine_messages` and :meth:`~ragcache.prompt.layout.PromptLayout.from_messages`.
    """
    from ragcache.prompt.layout import PromptLayout

    return PromptLayout.from_messages(to_engine_messages(messages))


class RagCacheLLM(LLM):
    """ragcache's local engine as a LlamaIndex chat LLM (greedy by default).

    Args:
        engine: a :class:`ragcache.engine.engine.LocalEngine`; default: the embedded
            SmolLM2-135M-Instruct (``model_name``) with a chunk cache, loaded (converted on a new home)
            on the first call that needs it: its :attr:`fingerprint` and :attr:`blend_setting` are
            predicted without it (:class:`ragcache.engine.predicted.PredictedEngine`), so a query
            engine's semantic hit loads nothing. Another ``model_name`` is loaded at once.
        model_name: model directory or name for the default engine.
        chunk_cache: for the default engine: ``True`` (a memory ``ChunkCache``), ``False``,
            or a ``ChunkCache`` instance.
        max_new_tokens: decode budget in tokens (``LLMMetadata.num_output``).
        temperature / top_p / seed / stop: sampling controls (temperature 0 = greedy).
        recompute_ratio: the blend's r in [0, 1] (None: the engine's: the model's calibration record, else exact prefill).
        use_prefix_cache / use_chunk_cache: per-request cache switches (None: chunk cache
            when the engine has one).
        tenant: who the requests are for (an opaque id, not a secret); ``None`` (default): the default
            tenant. The engine salts each request's prefix and chunk KV with it (the root of the
            block-hash chain and every chunk key, as vLLM's ``cache_salt``): two tenants of one engine
            reuse none of each other's KV unless the engine has ``share_kv_across_namespaces=True``.
            Per call: ``llm.chat(messages, tenant="acme")`` (``complete`` / ``stream_*`` / async too);
            :class:`~llama_index.query_engine.ragcache.RagCacheQueryEngine` passes its ``namespace``.

    Raises:
        ValueError: a parameter out of range.
        RuntimeError: (on the first call that loads the default engine) the loaded model is not the one
            predicted (see :attr:`engine`).
    """

    model_name: str = Field(default="smollm2-135m-instruct", description="engine model name")
    max_new_tokens: int = Field(default=256, gt=0, description="tokens to generate at most")
    temperature: float = Field(default=0.0, ge=0.0, description="0 = greedy")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = Field(default=None)
    stop: list[str] | None = Field(default=None)
    recompute_ratio: float | None = Field(default=None, ge=0.0, le=1.0)
    use_prefix_cache: bool = Field(default=True)
    use_chunk_cache: bool | None = Field(default=None)
    tenant: str | None = Field(default=None, min_length=1, description="KV salt: who the requests are for")

    _engine: Any = PrivateAttr()
    _load: Any = PrivateAttr(default=None)
    _predicted: Any = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, engine: Any = None, *, model_name: str | None = None, chunk_cache: Any = True,
                 **kwargs: Any) -> None:
        load, predicted = None, None
        if engine is None:
            from ragcache.config import Config
            from ragcache.engine.chunk.cache import ChunkCache
            from ragcache.engine.engine import LocalEngine
            from ragcache.models import DEFAULT_MODEL

            cfg = Config.from_env()  # this facade reads the RAGCACHE_* settings and passes them down
            cc = ChunkCache(kv_format=cfg.kv_format, group_size=cfg.kv_group_size) if chunk_cache is True \
                else (chunk_cache or None)

            def load(name: str | None = model_name) -> Any:
                return LocalEngine.from_pretrained(name, chunk_cache=cc, decode_cache=cfg.decode_cache, home=cfg.paths)

            if model_name in (None, DEFAULT_MODEL):  # the embedded model: known before its conversion
                from ragcache.engine.predicted import PredictedEngine

                predicted = PredictedEngine.of(None, home=cfg.paths, chunk_cache=cc is not None)
                model_name = model_name or DEFAULT_MODEL
            if predicted is None:
                engine = load()
        super().__init__(model_name=model_name or str(engine.fingerprint.name), **kwargs)
        self._engine = engine
        self._load, self._predicted = (load, predicted) if engine is None else (None, None)

    @classmethod
    def class_name(cls) -> str:
        return "RagCacheLLM"

    @property
    def engine(self) -> Any:
        """The wrapped :class:`~ragcache.engine.engine.LocalEngine` (the default one is loaded on first use).

        Raises:
            RuntimeError: the loaded model's fingerprint is not the one predicted before the load, by which
                this LLM's answers were keyed (:meth:`ragcache.engine.predicted.PredictedEngine.check`);
                from then on they are keyed by the loaded model.
        """
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    engine = self._load()
                    predicted, self._engine = self._predicted, engine
                    self._predicted = None  # after the engine is set: _identity reads them in the other order
                    predicted.check(engine.fingerprint.digest)
        return self._engine

    @property
    def loaded(self) -> bool:
        """Whether the engine is loaded (an engine given, or the default one after its first use)."""
        return self._engine is not None

    def _identity(self) -> Any:
        """What the answer keys are read from: the engine when it is loaded, else the default engine
        predicted without loading or converting the embedded model
        (:class:`~ragcache.engine.predicted.PredictedEngine`), so a semantic lookup needs no model."""
        predicted = self._predicted
        engine = self._engine
        return engine if engine is not None else predicted

    @property
    def blend_setting(self) -> str | None:
        """The blend setting this LLM's calls blend chunk hits at (its name, e.g. ``"infoflow r=0.15"``; ``None``:
        exact prefill): :meth:`ragcache.engine.engine.LocalEngine.blend_setting_name` with ``recompute_ratio``
        and ``use_chunk_cache``, predicted before the default engine is loaded. A stored answer made by a
        blend is served only at the same setting."""
        return self._identity().blend_setting_name(self.recompute_ratio, self.use_chunk_cache)

    @property
    def fingerprint(self) -> str:
        """Hex digest of the model identity (name, revision, dtype): the semantic cache's model key; for the
        default engine not loaded yet, the embedded model's predicted one (:func:`ragcache.models.model_fingerprint`)."""
        return str(self._identity().fingerprint.digest)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=int(self.engine.context_window), num_output=self.max_new_tokens,
                           is_chat_model=True, is_function_calling_model=False, model_name=self.model_name)

    # ------------------------------------------------------------------ plumbing
    def _request(self, prompt: Any, kwargs: dict[str, Any]) -> EngineRequest:
        """The engine request of one call: ``prompt`` with this LLM's settings and the call's ``kwargs``
        (``max_tokens``: ``max_new_tokens``; a ``tenant`` of ``None``: this LLM's).

        Raises:
            ValueError: an unknown call argument.
        """
        out = {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature, "top_p": self.top_p,
               "stop": self.stop, "seed": self.seed, "use_prefix_cache": self.use_prefix_cache,
               "use_chunk_cache": self.use_chunk_cache, "recompute_ratio": self.recompute_ratio,
               "tenant": self.tenant}
        if "max_tokens" in kwargs:
            kwargs["max_new_tokens"] = kwargs.pop("max_tokens")
        if kwargs.get("tenant", "") is None:  # a caller with no tenant of its own: this LLM's
            del kwargs["tenant"]
        unknown = set(kwargs) - set(out)
        if unknown:
            raise ValueError(f"unknown generation arguments {sorted(unknown)}; RagCacheLLM takes {sorted(out)}")
        out.update(kwargs)
        return EngineRequest(prompt, **out)

    def _completion_messages(self, prompt: str, formatted: bool) -> list[ChatMessage]:
        if not formatted and self.completion_to_prompt is not None:
            prompt = self.completion_to_prompt(prompt)
        msgs = [ChatMessage(role=MessageRole.USER, content=prompt)]
        if self.system_prompt:
            msgs.insert(0, ChatMessage(role=MessageRole.SYSTEM, content=self.system_prompt))
        return msgs

    def _events(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> tuple[Iterator[Any], str]:
        engine = self.engine
        prompt = engine.build_prompt(to_layout(messages))
        return engine.stream(self._request(prompt, dict(kwargs))), prompt_digest(prompt.input_ids)

    def _final(self, gen: Any, digest: str) -> tuple[dict[str, Any], dict[str, Any]]:
        raw = {"text": gen.text, "token_ids": list(gen.token_ids), "stats": gen.stats.to_dict(), "generation": gen,
               "prompt_sha256": digest, "model": str(self.engine.fingerprint)}
        return stats_kwargs(gen), raw

    def _chat(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> ChatResponse:
        events, digest = self._events(messages, kwargs)
        gen = None
        for ev in events:
            gen = ev.generation or gen
        extra, raw = self._final(gen, digest)
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=gen.text), raw=raw,
                            additional_kwargs=extra)

    def _stream_chat(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> Iterator[ChatResponse]:
        events, digest = self._events(messages, kwargs)

        def gen() -> Iterator[ChatResponse]:
            text = ""
            for ev in events:
                if ev.generation is not None:
                    extra, raw = self._final(ev.generation, digest)
                    yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=ev.text,
                                       raw=raw, additional_kwargs=extra)
                elif ev.text:
                    text += ev.text
                    yield ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=ev.text)

        return gen()

    @staticmethod
    def _to_completion(r: ChatResponse) -> CompletionResponse:
        return CompletionResponse(text=r.message.content or "", delta=r.delta, raw=r.raw,
                                  additional_kwargs=r.additional_kwargs)

    # ------------------------------------------------------------------ sync API
    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Answer a chat; see the module docstring for block roles.

        Raises:
            ValueError: unsupported messages or arguments; ``ContextWindowError`` (a
                ValueError) when the prompt does not fit.
        """
        return self._chat(messages, kwargs)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Answer one prompt as a user message (after ``system_prompt`` when set)."""
        return self._to_completion(self._chat(self._completion_messages(prompt, formatted), kwargs))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """Stream a chat: one response per text delta; the last one (``delta`` may be empty)
        carries the stats in ``additional_kwargs`` and ``raw``."""
        return self._stream_chat(messages, kwargs)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        """Stream a completion (see :meth:`stream_chat`)."""
        inner = self._stream_chat(self._completion_messages(prompt, formatted), kwargs)
        return (self._to_completion(r) for r in inner)

    # ------------------------------------------------------------------ async API
    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Async :meth:`chat` (the engine runs in a worker thread)."""
        return await asyncio.to_thread(self._chat, messages, kwargs)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Async :meth:`complete`."""
        msgs = self._completion_messages(prompt, formatted)
        return self._to_completion(await asyncio.to_thread(self._chat, msgs, kwargs))

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        """Async :meth:`stream_chat`: the engine streams on a worker thread."""
        return iterate_in_thread(lambda: self._stream_chat(messages, kwargs), name="ragcache-llamaindex-stream")

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        """Async :meth:`stream_complete`."""
        msgs = self._completion_messages(prompt, formatted)

        async def gen() -> AsyncIterator[CompletionResponse]:
            async for r in iterate_in_thread(lambda: self._stream_chat(msgs, kwargs)):
                yield self._to_completion(r)

        return gen()
