"""RagCacheSemanticCache: ragcache's semantic response cache as a LangChain ``BaseCache``.

LangChain hands a cache the whole serialized message list as ``prompt`` and the
model's parameters as ``llm_string``. Embedding that whole prompt is the classic
semantic-cache bug: two different questions under the same 2,000-character
context embed almost identically (cosine > 0.9) and one is served the other's
answer. This cache never embeds context (:mod:`langchain_ragcache._keys`): it embeds
the question alone (RagPrompt's question block, a labelled ``Question:``, a
question-sized last human turn, or what a ``question_extractor`` returns), and puts
everything else into the exact partition built by ragcache's one keyer
(:mod:`ragcache.request`, the same for every entry point): model and parameters,
system text, earlier turns, the documents (content and rendered bytes), volatile
text, and the template around the question. When it cannot tell the question from
the context, the whole prompt is matched exactly (hash), never by embedding.

A request laid out by :class:`~langchain_ragcache.RagPrompt` for
:class:`~langchain_ragcache.ChatRagCache` gets the partition :class:`ragcache.RagCache`
gives the same request, so the two entry points share answers (and ``invalidate``).

Use it with ``set_llm_cache(RagCacheSemanticCache())`` or a model's ``cache=``. By default answers
persist under ``$RAGCACHE_HOME`` (the store ``ragcache ask`` uses); ``path=None`` keeps them in memory.
"""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import threading
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from langchain_core.caches import RETURN_VAL_TYPE, BaseCache
from langchain_core.load import dumps, loads
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGeneration, Generation
from pydantic import BaseModel

from langchain_ragcache._keys import (
    QuestionExtractor,
    blend_setting_of,
    call_identity,
    call_tenant,
    checked_tenant,
    key_messages,
    key_text,
    llm_params,
    local_identity,
    sampling_in,
    sampling_of,
)
from langchain_ragcache._messages import parse_cache_prompt, plain_messages, without_ids
from langchain_ragcache.embeddings import RagCacheEmbeddings
from langchain_ragcache.results import (
    answer_message,
    answer_record,
    message_result,
    reports_no_finish,
)
from langchain_ragcache.usage import HIT_USAGE, PROVIDER_USAGE_KEYS
from ragcache.answering import (
    CACHE_TRUNCATED,
    DEFAULT_LOOKUP_TIMEOUT_S,
    Answer,
    AnswerPath,
    hit_answer,
)
from ragcache.backend import DEFAULT_TENANT, BackendResult
from ragcache.config import Config
from ragcache.prompt.volatile import warn_at_caller
from ragcache.provenance import may_serve
from ragcache.request import CacheRequest, KeyedPrompt
from ragcache.semantic import PartitionKey, SemanticCache, SemanticHit
from ragcache.semantic.decision.checks import check_path
from ragcache.semantic.defaults import DEFAULT_LOCATION, default_cache

_GENERATIONS_KEY = "langchain_generations"
_UNREADABLE_REMEMBERED = 256
log = logging.getLogger(__name__)


def _json_form(value: Any) -> Any:
    """``value`` with every pydantic model in it (at any depth of dicts, lists and tuples) as its JSON
    form (``model_dump(mode="json")``): what ``with_structured_output(method="json_schema")`` leaves in
    ``additional_kwargs["parsed"]``, which LangChain's serializer cannot write and whose parser reads
    the dict form as well (``schema(**parsed)``)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {k: _json_form(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_form(v) for v in value]
    return value


def _budget_in(*sources: Mapping[str, Any]) -> int | None:
    """The first int (not bool) ``max_tokens`` / ``max_new_tokens`` / ``max_output_tokens`` of ``sources``."""
    for source in sources:
        for k in ("max_tokens", "max_new_tokens", "max_output_tokens"):
            v = source.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    return None


def _slot(req: CacheRequest) -> tuple[str, str]:
    """Which request a remembered unreadable entry belongs to: its question and partition digest."""
    return req.question, req.partition.digest if req.partition is not None else ""


def _load_generations(raw: str) -> Any:
    """Stored generations read back (``langchain_core.load.loads``, core objects only)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return loads(raw, allowed_objects="core")


def storable_generations(gens: Sequence[Generation]) -> str | None:
    """The serialised form of ``gens`` that reads back to the same generations, or ``None`` when
    there is none: only what can be served is stored. Chat messages lose their id (a hit gets a
    fresh one) and their pydantic values become their JSON form (:func:`_json_form`); the form is
    then loaded back and must serialise to the same JSON value (a value LangChain cannot write, such as
    an arbitrary object in ``generation_info``, fails that and nothing is stored)."""
    plain = []
    for g in gens:
        if isinstance(g, ChatGeneration):
            msg = g.message.model_copy(update={"id": None, "additional_kwargs": _json_form(g.message.additional_kwargs),
                                               "response_metadata": _json_form(g.message.response_metadata)})
            g = ChatGeneration(message=msg, generation_info=g.generation_info)
        plain.append(g)
    try:
        raw = dumps(plain)
        back = _load_generations(raw)
        if isinstance(back, list) and json.loads(dumps(back)) == json.loads(raw):  # the same value (key order aside)
            return raw
    except Exception as e:  # noqa: BLE001 - any failure to write or read back means: do not store
        log.info("answer not stored: its generations do not survive LangChain serialisation (%s: %s)",
                 type(e).__name__, e)
        return None
    log.info("answer not stored: its generations do not read back as they were written (LangChain serialisation)")
    return None


_WARNED_NO_FINISH: set[str] = set()
"""Models already warned about in this process (:meth:`RagCacheSemanticCache._warn_no_finish`)."""
UnreportedFinish = Literal["incomplete", "stop"]


class RagCacheSemanticCache(BaseCache):
    """Semantic LLM cache for LangChain over :class:`ragcache.semantic.SemanticCache`.

    Args:
        semantic_cache: an existing :class:`SemanticCache` to share (for example with
            ragcache's pipeline); when given, ``path``/``embedder``/``threshold`` are not used.
        path: where answers are kept. ``"default"`` (the default): the persistent store that
            ``ragcache ask`` uses, ``$RAGCACHE_SEMANTIC_URL`` if set, else SQLite + FAISS under
            ``$RAGCACHE_HOME/answers`` (one cache object per process, shared with
            ``RagCacheMiddleware()`` and the LlamaIndex query engine:
            :func:`ragcache.semantic.defaults.default_cache`); a directory or ``postgresql://`` URL:
            that store; ``None``: in memory (lost at exit).
        embedder: ``None`` for the packaged all-MiniLM-L6-v2 (one per process, shared by every
            cache: :func:`ragcache.semantic.embedding.shared_embedder`), a sentence-transformers path,
            an object with ``encode(list[str])``, or a :class:`~langchain_ragcache.RagCacheEmbeddings`.
        threshold: cosine similarity needed for a hit (``sim >= threshold``, and the decider's yes);
            1.0 serves exact repeats only. Default ``None``: the cache's own gate, that is
            ``$RAGCACHE_THRESHOLD`` for the default store when set, else the decider's: 0.94 with the
            guards (the default decider), the recorded threshold after ``ragcache calibrate semantic``.
        namespace: the tenant of calls that name none: the partition's namespace of every request keyed
            here. A :class:`~langchain_ragcache.ChatRagCache` call that names a tenant (``tenant=``, other than
            the default) is keyed under that tenant instead, the one its KV is salted with
            (:meth:`tenant_for`); one that names none is salted with this namespace.
        ttl_s: time to live of stored answers in seconds (``None``: no expiry).
        question_extractor: ``text -> question | None`` applied to the last human turn (or a
            completion prompt) when it is not a RagPrompt message; the question must occur in
            the text. ``None`` returns mean "cannot tell": the whole prompt is matched exactly.
        cache_truncated: also store answers cut at the token budget, served only to the same budget
            (the budget is in the partition): on by default, the rule of every entry point
            (:data:`ragcache.answering.CACHE_TRUNCATED`). A model whose budget the cache cannot read
            from LangChain's ``llm_string`` has its cut answers not stored.
        cache_sampled: replay one stored sample to later calls that sample without a seed (labelled
            ``provenance.sampled``); default ``False``: such a call (temperature > 0, or unset on a
            provider model, whose API samples by default) is a fresh draw, neither looked up nor stored.
            A call for ``n > 1`` choices is never served one stored sample
            (:func:`~langchain_ragcache._keys.sampling_of`).
        lookup_timeout_s: deadline (seconds) of each lookup and store; an embedder or store that fails or
            hangs past it is a logged miss (nothing stored), never the model's answer.
        unreported_finish: how a chat answer that reports no finish reason at all is read
            (:func:`~langchain_ragcache.results.reports_no_finish`): ``"incomplete"`` (the default; not
            stored, since a stream cut before its last chunk looks the same, and a ``UserWarning`` says
            so once per model) or ``"stop"`` (stored as finished: for a fake or custom chat model whose
            answers always end normally, such as ``FakeListChatModel``).
        **kwargs: other :class:`SemanticCache` options (``guards``, ``max_entries``...).

    A hit returns the stored generations (a ``list``; LangChain treats anything else as a miss)
    with zero usage (no model call was made) and, on chat messages, a fresh message id and
    ``response_metadata["ragcache"]`` (:func:`~langchain_ragcache.results.answer_record`:
    ``layer="semantic"``, ``similarity``, ``matched_question``, ``finish_reason``, ``approximate``,
    ``recompute_ratio``, ``usage``) read from the entry's :class:`ragcache.answering.Provenance`.
    Plain completion ``Generation`` objects are returned unchanged. Only generations that ended
    normally are stored (:meth:`update`). ``alookup`` / ``aupdate`` / ``aclear`` are native (the
    embedding and FAISS search run in a worker thread, same code and threshold as the sync path).
    """

    def __init__(self, semantic_cache: SemanticCache | None = None, *, path: str | Path | None = DEFAULT_LOCATION,
                 embedder: Any = None, threshold: float | None = None, namespace: str = "default",
                 ttl_s: float | None = None, question_extractor: QuestionExtractor | None = None,
                 cache_truncated: bool = CACHE_TRUNCATED, cache_sampled: bool = False,
                 lookup_timeout_s: float | None = DEFAULT_LOOKUP_TIMEOUT_S,
                 unreported_finish: UnreportedFinish = "incomplete", **kwargs: Any) -> None:
        if unreported_finish not in ("incomplete", "stop"):
            raise ValueError(f"unreported_finish must be 'incomplete' (do not store answers that report no finish "
                             f"reason) or 'stop' (store them as finished), got {unreported_finish!r}")
        if not isinstance(namespace, str):
            raise TypeError(f"namespace must be a non-empty str (use 'default' for a single tenant), "
                            f"got {type(namespace).__name__}")
        if not namespace:
            raise ValueError("namespace must be a non-empty string (use 'default' for a single tenant)")
        if semantic_cache is None:
            if isinstance(embedder, RagCacheEmbeddings):
                embedder = embedder.embedder  # share its loaded model
            cfg = Config.from_env()  # this facade reads the RAGCACHE_* settings and passes them down
            if path == DEFAULT_LOCATION:  # threshold and ttl_s are applied per lookup / store
                semantic_cache = default_cache(embedder, config=cfg, **kwargs)
            else:
                check_path("path", path)
                if threshold is not None:
                    kwargs["threshold"] = threshold
                kwargs.setdefault("home", cfg.paths)
                semantic_cache = SemanticCache(None, embedder=embedder, ttl_s=ttl_s, **kwargs) if path is None \
                    else SemanticCache.from_url(str(path), embedder=embedder, ttl_s=ttl_s, **kwargs)
        elif path != DEFAULT_LOCATION or embedder is not None or kwargs:
            raise ValueError("give either semantic_cache=... or path/embedder/options for a new cache, not both")
        self.semantic_cache = semantic_cache
        self.threshold = threshold
        self.namespace = namespace
        self.ttl_s = ttl_s
        self.question_extractor = question_extractor
        self.cache_truncated = cache_truncated
        self.cache_sampled = cache_sampled
        self._unreadable: dict[tuple[str, str], str] = {}  # (question, partition) -> unreadable entry's question
        self._unreadable_lock = threading.Lock()
        self.unreported_finish = unreported_finish
        self.path = AnswerPath(semantic_cache, cache_truncated=cache_truncated, ttl_s=ttl_s,
                               cache_sampled=cache_sampled, lookup_timeout_s=lookup_timeout_s)
        """The one answer path over this cache (:class:`ragcache.answering.AnswerPath`): the middleware and
        ``ChatRagCache``'s stream answer through it; :meth:`update` stores through it."""

    # ------------------------------------------------------------------ keys
    def keyed(self, prompt: str, tools: Sequence[Mapping[str, Any]] = ()) -> KeyedPrompt:
        """The question / layout / exact rest of a LangChain ``prompt`` (:func:`ragcache.request.key_messages`)."""
        messages = parse_cache_prompt(prompt)
        if messages is None:  # a completion LLM's raw prompt
            return key_text(prompt, extractor=self.question_extractor, tools=tools)
        return key_messages(messages, extractor=self.question_extractor, tools=tools)

    def tenant_for(self, tenant: str | None) -> str:
        """The tenant of a call, the one value a ChatRagCache call is keyed under (:attr:`CacheRequest.tenant
        <ragcache.request.CacheRequest.tenant>`, the partition's namespace) and whose KV the engine salts.

        A call that names no tenant (``None`` or the default tenant) is this cache's namespace; a call's own
        tenant (a :class:`~langchain_ragcache.ChatRagCache` call's ``tenant``) under the default namespace is
        itself; under another namespace it is ``"<namespace>/<tenant>"``, so the same tenant
        name in two namespaces sharing one store never shares answers or KV (tenant ``"b/a"`` of the default
        namespace is tenant ``"a"`` of namespace ``"b"``; a tenant named like the namespace is
        ``"b/b"``, not the calls that name none). Derived once per call, from the tenant the call names.

        Raises:
            TypeError / ValueError: a tenant that is not a non-empty str or ``None``.
        """
        if checked_tenant(tenant) is None or tenant == DEFAULT_TENANT:
            return self.namespace
        return tenant if self.namespace == DEFAULT_TENANT else f"{self.namespace}/{tenant}"

    def request(self, prompt: str, llm_string: str, *, model: str | None = None) -> CacheRequest:
        """The :class:`~ragcache.request.CacheRequest` of a LangChain ``(prompt, llm_string)`` pair: the
        partition of :func:`~langchain_ragcache._keys.call_identity`, the call's tenant (:meth:`tenant_for`),
        the budget, sampling and threshold (1.0 when the whole prompt is matched exactly); ``model``: the model
        recorded with a stored answer (default: the partition's model identity)."""
        ident, params, tools, tenant = call_identity(llm_string)
        return self._request(self.keyed(prompt, tools), ident, params, self.budget(llm_string),
                             sampling_of(llm_string), model, self.tenant_for(tenant))

    def chat_request(self, messages: Sequence[BaseMessage], params: Mapping[str, Any], *,
                     model: str | None = None) -> CacheRequest:
        """The :class:`~ragcache.request.CacheRequest` of a :class:`~langchain_ragcache.ChatRagCache` call
        from what the model holds: its messages (message ids play no part; messages that hold more than
        plain data, :func:`~langchain_ragcache._messages.plain_messages`, are keyed by their LangChain
        prompt string as :meth:`request` keys it) and its parameters (the mapping
        LangChain's ``llm_string`` is ``str(sorted(...))`` of: identifying params, ``_type``, ``stop``, the
        call's options), its tenant the call's (:meth:`tenant_for` of ``params["tenant"]``). The same request
        :meth:`request` reads back from the call's LangChain pair ``(dumps(messages), llm_string)``, without
        serialising and parsing it, so an answer stored through either is found through the other.

        Raises:
            ValueError: ``params`` are not a ChatRagCache call's (:func:`~langchain_ragcache._keys.local_identity`).
        """
        identity = local_identity(params)
        if identity is None:
            raise ValueError("chat_request keys ChatRagCache calls (_type 'ragcache-local' with a model_fingerprint); "
                             "key another model's call with request(prompt, llm_string)")
        ident, key_params, tools = identity
        given = {k: v for k, v in params.items() if v is not None}  # as an llm_string's parameters are read
        if plain_messages(messages):
            keyed = key_messages(messages, extractor=self.question_extractor, tools=tools)
        else:  # LangChain's prompt string of these messages does not read back as messages: keyed as text
            keyed = key_text(dumps(without_ids(messages)), extractor=self.question_extractor, tools=tools)
        return self._request(keyed, ident, key_params, _budget_in(params), sampling_in(given), model,
                             self.tenant_for(call_tenant(params)))

    def _request(self, keyed: KeyedPrompt, ident: str, params: dict[str, Any], budget: int | None,
                 sampling: Any, model: str | None, tenant: str) -> CacheRequest:
        """The request of a keyed prompt for ``tenant`` (the partition's namespace) under this cache's threshold."""
        return keyed.request(model=ident, tenant=tenant, params=params, max_tokens=budget,
                             sampling=sampling, threshold=self.threshold, provenance_model=model)

    def key_for(self, prompt: str, llm_string: str) -> tuple[str, PartitionKey]:
        """The (question, partition) a LangChain ``(prompt, llm_string)`` pair is cached under.

        The question is :data:`~ragcache.request.EXACT_QUESTION` when the whole prompt
        is matched exactly (then lookups use threshold 1.0).
        """
        req = self.request(prompt, llm_string)
        return req.question, req.partition

    @staticmethod
    def budget(llm_string: str) -> int | None:
        """The new-token budget an ``llm_string`` names (``max_tokens`` / ``max_new_tokens`` /
        ``max_output_tokens`` among its parameters: LangChain's ``str(sorted(params.items()))``, after
        the serialised model and ``---`` for a serialisable one), or ``None``. An answer cut at its budget
        is served only to that budget."""
        head, _, tail = llm_string.rpartition("---")
        try:
            pairs = ast.literal_eval(tail) if tail.startswith("[") else None
            params = dict(pairs) if isinstance(pairs, list) else {}
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
        try:  # a serialisable model (ChatAnthropic, ChatOpenAI): its constructor kwargs hold the budget
            model = json.loads(head) if head.startswith("{") else {}
            kwargs = model.get("kwargs") if isinstance(model, dict) else None
        except (ValueError, RecursionError):
            kwargs = None
        return _budget_in(params, kwargs if isinstance(kwargs, dict) else {})

    # ------------------------------------------------------------------ BaseCache
    # LangChain owns this loop (lookup, then update after the model call), so it reads and writes the
    # semantic cache itself; what may be stored and what a hit says are ragcache's one rule
    # (:func:`ragcache.answering.cacheable`) and record (:class:`ragcache.answering.Provenance`).
    def lookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        """Cached generations for a semantically equal question in the same partition, else ``None`` (also for
        a call that must be a fresh draw, :meth:`ragcache.answering.AnswerPath.fresh_draw`, and when the cache
        fails or hangs: logged)."""
        if self.path.fresh_draw(sampling_of(llm_string)) is not None:
            return None
        req = self.request(prompt, llm_string)
        t0 = time.perf_counter()
        hit = self.path.guard("lookup", lambda: self.semantic_cache.lookup(
            req.question, partition=req.partition, threshold=req.threshold, max_tokens=req.max_tokens))
        return self._served(req, hit, llm_string, t0)

    def _served(self, req: CacheRequest, hit: SemanticHit | None, llm_string: str, t0: float) -> RETURN_VAL_TYPE | None:
        """A hit's generations, unless it was made by a blend at another setting than the model's
        (``blend_setting`` in ``ChatRagCache``'s identifying params; absent: exact prefill), which is a
        miss (:func:`ragcache.provenance.may_serve`, the answer path's rule)."""
        if hit is None:
            return None
        answer = hit_answer(req.question, hit, time.perf_counter() - t0)
        if not may_serve(answer.provenance, blend_setting_of(llm_string)) or self.path.stale(req, answer):
            return None
        try:
            return self._to_generations(answer, hit)
        except Exception as e:  # noqa: BLE001 - an entry this LangChain cannot read is a miss, never an error
            log.warning("semantic cache entry %s could not be read back (%s: %s; written by another langchain-core?): "
                        "a miss, and the new answer replaces it", hit.entry_id, type(e).__name__, e)
            with self._unreadable_lock:
                self._unreadable[_slot(req)] = hit.question
                while len(self._unreadable) > _UNREADABLE_REMEMBERED:
                    self._unreadable.pop(next(iter(self._unreadable)))
            return None

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        """Store generations for this prompt's question (a same-words entry is replaced), when every
        generation ended normally (:func:`ragcache.answering.cacheable`; cut at the token budget only
        with ``cache_truncated``). Not stored: ``content_filter``, tool calls, a null or missing
        finish reason on a chat message (a cut stream), refusals, pauses, context-window stops, and
        generations that would not read back as they were (:func:`storable_generations`).

        Raises:
            ValueError: ``return_val`` is empty.
        """
        stored = self._storable(prompt, llm_string, return_val)
        if stored is not None:
            for req in self._targets(stored[0]):
                self.path.record(req, stored[1], metadata=stored[2])

    def _targets(self, req: CacheRequest) -> list[CacheRequest]:
        """Where an answer is stored: under the request's question, and, when its lookup found an entry
        this cache could not read (a logged miss), under that entry's question too, which replaces it
        (same words) with one that reads back."""
        with self._unreadable_lock:
            old = self._unreadable.pop(_slot(req), None)
        return [req] if old is None or old == req.question else [req, replace(req, question=old)]

    def clear(self, **kwargs: Any) -> None:
        """Drop this cache's entries (``namespace=`` another namespace, e.g. a ChatRagCache tenant's; ``all=True``
        every namespace)."""
        if kwargs.get("all"):
            self.semantic_cache.clear()
        else:
            self.semantic_cache.clear(kwargs.get("namespace", self.namespace))

    async def alookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        return await asyncio.to_thread(self.lookup, prompt, llm_string)

    async def aupdate(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        stored = self._storable(prompt, llm_string, return_val)
        if stored is not None:
            for req in self._targets(stored[0]):
                await self.path.arecord(req, stored[1], metadata=stored[2])

    async def aclear(self, **kwargs: Any) -> None:
        await asyncio.to_thread(self.clear, **kwargs)

    # ------------------------------------------------------------------ helpers
    def _storable(self, prompt: str, llm_string: str, return_val: Sequence[Generation]
                  ) -> tuple[CacheRequest, BackendResult, dict[str, Any]] | None:
        gens = list(return_val)
        if not gens:
            raise ValueError("update() needs at least one generation to store")
        results = [message_result(g) for g in gens]
        unreported = [reports_no_finish(g) for g in gens]
        if self.unreported_finish == "stop":
            results = [replace(r, finish_reason="stop") if u else r for r, u in zip(results, unreported)]
        model = call_identity(llm_string)[0]
        req = self.request(prompt, llm_string, model=results[0].details.get("model") or model)
        self.path.observe(req, results[0])  # the snapshot the response named, stored or not
        if not all(self.path.cacheable(r) for r in results):
            if any(unreported):
                self._warn_no_finish(llm_string)
            return None
        raw = storable_generations(gens)
        if raw is None:
            return None
        return req, results[0], {_GENERATIONS_KEY: raw}

    @staticmethod
    def _warn_no_finish(llm_string: str) -> None:
        """Warn, once per model and process, that a model's answers are not stored because its messages
        report no finish reason, and how to allow them."""
        model = call_identity(llm_string)[0]
        if model == "langchain":  # another LangChain model: its name, else its LangChain type
            params = llm_params(llm_string)
            model = next((str(params[k]) for k in ("model_name", "model", "_type") if params.get(k)), model)
        if model in _WARNED_NO_FINISH:
            return
        _WARNED_NO_FINISH.add(model)
        warn_at_caller(
            f"RagCacheSemanticCache stores no answer of model {model[:80]!r}: its messages report no finish "
            "reason (finish_reason, stop_reason or done_reason), which is how a stream cut before its end looks. "
            "If its answers always end normally (a fake or custom chat model), pass "
            "RagCacheSemanticCache(unreported_finish='stop'), or set generation_info={'finish_reason': 'stop'} "
            "on its generations.", UserWarning)

    @staticmethod
    def _to_generations(answer: Answer, hit: SemanticHit) -> list[Generation] | None:
        """The generations of a hit: the stored LangChain generations (chat messages marked with
        :func:`~langchain_ragcache.results.answer_record`, zero usage, fresh ids), or for an answer stored
        by another entry point (``RagCache``, the proxy, the middleware) one message built from the
        :class:`~ragcache.answering.Answer`.

        Raises:
            Exception: whatever reading the stored generations raises (``ValueError``,
                ``NotImplementedError``...): :meth:`lookup` makes it a logged miss."""
        raw = hit.metadata.get(_GENERATIONS_KEY)
        if raw is None:
            return [ChatGeneration(message=answer_message(answer))]
        gens = _load_generations(raw)
        if not isinstance(gens, list) or not all(isinstance(g, Generation) for g in gens):
            raise ValueError(f"stored generations are a {type(gens).__name__}, not a list of Generation")
        record = answer_record(answer)
        out: list[Generation] = []
        for g in gens:
            if isinstance(g, ChatGeneration):
                msg = g.message
                meta = {k: v for k, v in msg.response_metadata.items() if k not in PROVIDER_USAGE_KEYS}
                meta["ragcache"] = record
                # a hit made no model call: zero tokens, so usage callbacks do not count the stored call again
                update: dict[str, Any] = {"response_metadata": meta, "id": f"lc_ragcache-{uuid.uuid4()}",
                                          "usage_metadata": dict(HIT_USAGE)}
                g = ChatGeneration(message=msg.model_copy(update=update), generation_info=g.generation_info)
            out.append(g)
        return out

    def invalidate(self, document: str) -> int:
        """Drop every answer built from ``document`` (a LangChain ``Document.id``, a content hash,
        or the document text). Returns the number of answers removed."""
        return self.semantic_cache.invalidate(document)

    @property
    def stats(self) -> dict[str, Any]:
        """The semantic cache's counters (lookups, hits, misses, rejections...) as a dict."""
        return self.semantic_cache.stats.to_dict()

    def __repr__(self) -> str:
        return f"RagCacheSemanticCache(namespace={self.namespace!r}, threshold={self.threshold!r})"

