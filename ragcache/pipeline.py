"""RagCache: the layers run as steps, the same for every entry point.

    prepare   question + documents -> CacheRequest (stable-first PromptLayout, partition, tenant, budget...)
    lookup    semantic response cache (hit -> Answer, no model call)
    generate  backend: local engine (prefix + chunk KV cache) or a provider (prompt caching)
    record    store the answer in the semantic cache when it may be stored; build the Answer

``answer()`` / ``aanswer()`` run the steps through the one answer path
(:class:`ragcache.answering.AnswerPath`: lookup, single flight, the call, ``cacheable``, store with
the :class:`~ragcache.answering.Provenance`), which the CLI, the LangChain adapters, the LlamaIndex
query engine and the proxy call too, so one request has one layout, one partition and one storage
rule whatever the entry point.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ragcache.answering import CACHE_TRUNCATED, DEFAULT_LOOKUP_TIMEOUT_S, Answer, AnswerPath, Sampling
from ragcache.config import Config
from ragcache.backend import AsyncBackend, Backend, BackendResult, Blending
from ragcache.prompt.layout import LintMode, PromptLayout
from ragcache.request import CacheRequest, cache_request
from ragcache.text_checks import checked_question

if TYPE_CHECKING:
    from ragcache.semantic import SemanticCache

DEFAULT_SYSTEM = (
    "You are a concise technical assistant. Answer the question using only the documents provided. "
    "If the documents do not contain the answer, say so. Answer in two or three sentences."
)


Request = CacheRequest
"""The prepared request of :meth:`RagCache.prepare`: the same class as :class:`ragcache.request.CacheRequest`
(the one request shape of every entry point), under its earlier name."""


@runtime_checkable
class _Generates(Protocol):
    """A backend's blocking call (:meth:`ragcache.backend.Backend.generate`): with it, or with an async
    :class:`~ragcache.backend.AsyncBackend`'s ``agenerate``, an object can answer a request."""

    def generate(self, layout: PromptLayout, *, max_new_tokens: int, temperature: float,
                 tenant: str | None = None) -> BackendResult: ...


@runtime_checkable
class _Named(Protocol):
    """A backend's ``name`` (:attr:`ragcache.backend.Backend.name`), part of the partition key."""

    name: str


@runtime_checkable
class _Identified(Protocol):
    """A backend's ``model_id`` (:attr:`ragcache.backend.Backend.model_id`), part of the partition key."""

    @property
    def model_id(self) -> str: ...


def _check_backend(backend: object) -> None:
    """Refuse what :class:`RagCache` cannot call or key, once, where the user passes it.

    Raises:
        TypeError: ``backend`` is a class (not an instance), has neither ``generate()`` nor ``agenerate()``, or its
            ``name`` / ``model_id`` is missing or not a str. Their parameters (``tenant=`` among them) are the
            :class:`~ragcache.backend.Backend` protocol's, for a type checker to hold a backend to; they are not
            read here.
        ValueError: an empty ``name`` / ``model_id``.
    """
    if isinstance(backend, type):
        raise TypeError(f"backend is the class {backend.__name__}, not a backend: pass an instance, "
                        f"backend={backend.__name__}(...)")
    if not isinstance(backend, (_Generates, AsyncBackend)):
        raise TypeError(f"backend must be a ragcache Backend (with generate() or agenerate()), got "
                        f"{type(backend).__name__}: wrap an engine in LocalBackend(engine), or use "
                        "AnthropicBackend / OpenAIBackend")
    keys = (("name", backend.name if isinstance(backend, _Named) else None),
            ("model_id", backend.model_id if isinstance(backend, _Identified) else None))
    for attr, value in keys:  # both go into the semantic cache's partition key
        if not isinstance(value, str) or not value:
            raise (ValueError if isinstance(value, str) else TypeError)(
                f"backend {type(backend).__name__} needs a non-empty str attribute {attr!r} (the provider name "
                "and model id key the semantic cache, so that one model's answers are never served for another's)")


def _checked_result(backend: object, result: object) -> BackendResult:
    """``result`` when it is a :class:`~ragcache.backend.BackendResult`, else a ``TypeError`` naming the fix."""
    if not isinstance(result, BackendResult):
        raise TypeError(f"backend {type(backend).__name__} returned {type(result).__name__}, not a BackendResult: "
                        "return ragcache.backend.BackendResult(text, layer, usage, ttft_s, finish_reason)")
    return result


class RagCache:
    """Runs the caching layers for each question.

    Args:
        backend: :class:`ragcache.engine.backend.LocalBackend`, :class:`ragcache.providers.anthropic.AnthropicBackend`,
            or any :class:`~ragcache.backend.Backend`.
        semantic: the answer cache: ``"default"`` (the default) the persistent store every entry point
            shares (:func:`ragcache.semantic.defaults.default_cache`: ``$RAGCACHE_SEMANTIC_URL``, else
            ``$RAGCACHE_ANSWERS_DIR``, default ``$RAGCACHE_HOME/answers``); a
            :class:`ragcache.semantic.SemanticCache` / ``PgSemanticCache``; or ``None`` for no answer cache.
        config: the settings the default answer cache is opened with (:class:`ragcache.config.Config`);
            ``None``: :meth:`Config.from_env() <ragcache.config.Config.from_env>`. ``RagCache`` is the
            library's facade, so it is the one library class that reads the environment, and only here.
        system: default system text (stable: it goes first and is cached).
        namespace: the tenant (``RagCache``'s public name for it; per request, ``answer(namespace=...)``):
            it becomes the request's ``CacheRequest.tenant``, the partition's namespace (answers never cross
            tenants) and the ``tenant`` its backend is given (:class:`ragcache.backend.Backend`), which a
            local engine hashes into the KV salt of its prefix and chunk KV keys (no KV shared across tenants
            unless the engine opts in). The names are in the glossary of ``docs/design/keys.md``.
        doc_order: ``canonical`` (by content, never by id: stable bytes) or ``given``.
        lint: what to do with volatile text (dates, ids) found in stable segments: ``warn``,
            ``move`` (into the volatile segment, which stays in the partition), ``raise`` or ``off``.
        max_new_tokens / temperature: generation parameters (part of the semantic partition).
        params: other generation parameters the backend applies that change the answer (``top_p``,
            ``stop``, ``seed``...); ``None`` values are left out. Part of the partition.
        cache_truncated: also store answers cut at ``max_new_tokens`` (``finish_reason == "length"``);
            on by default, the rule of every entry point (:data:`ragcache.answering.CACHE_TRUNCATED`). A stored truncated answer is only ever served within its own
            ``max_new_tokens`` (the budget is in the partition). No other unfinished answer
            (content filter, tool call, refusal, pause, context window, a cut stream) is ever stored
            (:func:`ragcache.answering.cacheable`).
        single_flight: concurrent identical misses (same partition, same question) make one backend
            call; the others wait (at most ``flight_timeout_s`` seconds per leader) and get the stored
            answer, or the leader's error when its call raised (:class:`ragcache.answering.AnswerPath`;
            across processes through the cache's store lock); ``aanswer`` too.
            ``flight_timeout_s``: a finite number of seconds >= 0 (0: never wait).
        cache_sampled: a request sampled without a seed (``temperature > 0`` and no ``seed`` in
            ``params``) is by default a fresh draw, neither looked up nor stored; ``True`` replays one
            stored sample to later such requests, labelled ``answer.provenance.sampled``. A request for
            several choices (``params["n"] > 1``) is never served one stored sample
            (:class:`ragcache.answering.Sampling`). ``RagCache`` always sends a temperature (default 0.0:
            greedy), so "unset" never reaches a backend from here.
        lookup_timeout_s: deadline (seconds) of each answer-cache lookup and store: an embedder or answer
            store that fails or hangs past it costs a logged miss (nothing stored), never the answer.

    Raises:
        TypeError: ``backend`` without ``generate()`` / ``agenerate()`` or without str ``name`` and
            ``model_id``; ``semantic`` not a cache. ValueError: an empty ``name`` / ``model_id``;
            ``flight_timeout_s`` negative, NaN, infinite or not a number (with a semantic cache).
    """

    def __init__(self, backend: Backend | AsyncBackend, *, semantic: SemanticCache | str | None = "default",
                 system: str = DEFAULT_SYSTEM, namespace: str = "default", doc_order: str = "canonical",
                 lint: LintMode = "move",
                 max_new_tokens: int = 96, temperature: float = 0.0, params: Mapping[str, Any] | None = None,
                 cache_truncated: bool = CACHE_TRUNCATED, single_flight: bool = True, flight_timeout_s: float = 60.0,
                 config: Config | None = None, cache_sampled: bool = False,
                 lookup_timeout_s: float | None = DEFAULT_LOOKUP_TIMEOUT_S) -> None:
        _check_backend(backend)
        if isinstance(semantic, str) and semantic == "default":
            from ragcache.semantic.defaults import default_cache

            semantic = default_cache(config=Config.from_env() if config is None else config)
        from ragcache.semantic.answer_cache import AnswerCache

        if semantic is not None and not isinstance(semantic, AnswerCache):
            raise TypeError(f"semantic must be a SemanticCache (or PgSemanticCache), \"default\" (the shared store) "
                            f"or None (no answer cache), got {type(semantic).__name__}: e.g. "
                            "semantic=SemanticCache('~/.cache/ragcache/answers')")
        self.backend = backend
        self.semantic = semantic
        self.system = system
        self.namespace = namespace
        self.doc_order = doc_order
        self.lint = lint
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.params = {k: v for k, v in dict(params or {}).items() if v is not None}
        self.cache_truncated = cache_truncated
        self.single_flight = single_flight
        self.flight_timeout_s = flight_timeout_s
        if semantic is not None:  # checked here so a bad value fails at construction, not on the first miss
            from ragcache.semantic.flight import check_timeout

            self.flight_timeout_s = check_timeout(flight_timeout_s)
        self.path = AnswerPath(semantic, cache_truncated=cache_truncated, single_flight=single_flight,
                               flight_timeout_s=self.flight_timeout_s if semantic is not None else 60.0,
                               cache_sampled=cache_sampled, lookup_timeout_s=lookup_timeout_s)
        """The answer path this facade runs (:class:`ragcache.answering.AnswerPath`)."""

    # -- step 1 ----------------------------------------------------------------------------------
    def layout(self, question: str, documents: Sequence[Any] = (), *, system: str | None = None,
               tools: Sequence[dict] = (), history: Sequence[dict] = (), volatile: str | None = None) -> PromptLayout:
        """The stable-first layout of one request (see :class:`ragcache.prompt.layout.PromptLayout`)."""
        return PromptLayout.build(question=question, system=self.system if system is None else system,
                                  tools=tools, documents=documents, history=history, volatile=volatile,
                                  doc_order=self.doc_order, lint=self.lint)  # type: ignore[arg-type]

    def partition(self, layout: PromptLayout, *, namespace: str | None = None, max_new_tokens: int | None = None,
                  temperature: float | None = None, document_ids: Sequence[str] = ()) -> Any:
        """The semantic cache's exact partition key for a layout (:func:`ragcache.request.cache_request`,
        the one place a partition is computed)."""
        return self._request("", layout, self.namespace if namespace is None else namespace,
                             self.max_new_tokens if max_new_tokens is None else max_new_tokens,
                             self.temperature if temperature is None else temperature, document_ids, True).partition

    def _request(self, question: str, layout: PromptLayout, namespace: str, max_new_tokens: int, temperature: float,
                 document_ids: Sequence[str], cached: bool) -> CacheRequest:
        n = self.params.get("n", 1)
        sampling = Sampling(temperature, self.params.get("seed"), n if isinstance(n, int) and n >= 1 else 1,
                            unset_temperature=0.0)
        return cache_request(question, layout, tenant=namespace, model=self.model,
                             params={**self.params, "temperature": temperature, "max_tokens": max_new_tokens},
                             document_ids=document_ids, max_tokens=max_new_tokens, sampling=sampling, cached=cached)

    def prepare(self, question: str, documents: Sequence[Any] = (), *, system: str | None = None,
                tools: Sequence[dict] = (), history: Sequence[dict] = (), volatile: str | None = None,
                namespace: str | None = None, max_new_tokens: int | None = None,
                temperature: float | None = None, document_ids: Sequence[str] = (),
                threshold: float | None = None) -> Request:
        """Lay out a request and compute its partition key.

        ``documents``: strings, dicts with ``text``/``id``/``metadata``, layout Segments, LangChain
        Documents or LlamaIndex nodes (:func:`ragcache.prompt.layout.as_document`). ``document_ids``: more
        ids that ``SemanticCache.invalidate`` should accept for this answer (source document ids
        that are not rendered into the prompt). ``threshold``: the similarity a hit needs (``None``: the
        cache's own).

        Raises:
            TypeError: a question, document, system text or tools of the wrong type, ``max_new_tokens``
                not an integer, ``temperature`` not a number. ValueError: empty question, malformed
                document or history, ``max_new_tokens`` < 1, ``temperature`` < 0 or NaN.
        """
        checked_question(question)
        if documents is None:
            documents = ()
        ns = self.namespace if namespace is None else namespace
        mnt = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        temp = self.temperature if temperature is None else temperature
        if isinstance(mnt, bool) or not (hasattr(type(mnt), "__index__") or isinstance(mnt, float)):
            raise TypeError(f"max_new_tokens must be an integer >= 1 (a token budget), got {type(mnt).__name__} {mnt!r:.40}")
        if isinstance(mnt, float) and not mnt.is_integer():
            raise ValueError(f"max_new_tokens must be an integer >= 1 (a token budget), got {mnt!r}")
        mnt = int(mnt)
        if mnt < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {mnt}")
        if isinstance(temp, bool) or not isinstance(temp, numbers.Real):
            raise TypeError(f"temperature must be a number >= 0 (0: greedy), got {type(temp).__name__} {temp!r:.40}")
        if not temp >= 0:  # NaN refused too
            raise ValueError(f"temperature must be a number >= 0 (0: greedy), got {temp!r}")
        temp = float(temp)
        layout = self.layout(question, documents, system=system, tools=tools, history=history, volatile=volatile)
        req = self._request(question, layout, ns, mnt, temp, document_ids, self.semantic is not None)
        return _with_threshold(req, threshold)

    # -- step 2 ----------------------------------------------------------------------------------
    def lookup(self, request: Request, *, threshold: float | None = None) -> Answer | None:
        """The semantic cache's answer for ``request`` (a hit :class:`Answer`: zero usage, the stored
        provenance), or ``None`` (also without a semantic cache)."""
        return self.path.lookup(_with_threshold(request, threshold), blend_setting=self.blend_setting)

    def sampling(self, request: Request) -> Sampling | None:
        """The request's :class:`~ragcache.answering.Sampling` (``request.sampling``: its temperature,
        ``params``' ``seed`` and ``n``)."""
        return request.sampling

    # -- step 3 ----------------------------------------------------------------------------------
    def generate(self, request: Request) -> BackendResult:
        """Run the backend on the request's layout (blocking). The request's ``tenant`` (``RagCache``'s
        ``namespace``) goes to the backend (:class:`ragcache.backend.Backend`): a local engine salts its
        prefix and chunk KV with it, so tenants never share KV unless the engine opts in with
        ``share_kv_across_namespaces``."""
        if not isinstance(self.backend, _Generates):
            raise TypeError(f"backend {type(self.backend).__name__} has only agenerate(): call aanswer() / "
                            "astream() from async code, or give the backend a blocking generate()")
        return _checked_result(self.backend, self.backend.generate(
            request.layout, max_new_tokens=request.max_tokens, temperature=request.temperature,
            tenant=request.tenant))

    async def agenerate(self, request: Request) -> BackendResult:
        """Async :meth:`generate`: the backend's own async path, else a worker thread."""
        import asyncio  # lazily: the sync hit path never needs it
        if isinstance(self.backend, AsyncBackend):
            return _checked_result(self.backend, await self.backend.agenerate(
                request.layout, max_new_tokens=request.max_tokens, temperature=request.temperature,
                tenant=request.tenant))
        return await asyncio.to_thread(self.generate, request)

    # -- step 4 ----------------------------------------------------------------------------------
    def blend_setting(self) -> str | None:
        """The blend setting the backend answers at (``backend.blend_setting`` of a
        :class:`~ragcache.backend.Blending`; ``None``: exact prefill, or a backend that never blends).
        The answer path serves a stored blended answer only to a request at that setting; passed to it as
        this method, so it is read only for such an answer (a lazily loaded model stays unloaded on a hit)."""
        return self.backend.blend_setting if isinstance(self.backend, Blending) else None

    @property
    def model(self) -> str:
        """``backend name:model id``, recorded in each stored answer's provenance."""
        return f"{self.backend.name}:{self.backend.model_id}"

    def cacheable(self, result: BackendResult) -> bool:
        """Whether an answer may be stored (:func:`ragcache.answering.cacheable` with ``cache_truncated``)."""
        return self.path.cacheable(result)

    def record(self, request: Request, result: BackendResult, *, started: float | None = None) -> Answer:
        """Store the backend's answer (when :meth:`cacheable`, with its provenance) and build the
        :class:`Answer`. ``started``: ``time.perf_counter()`` at the start of the request."""
        return self.path.record(request, result, started=started)

    async def arecord(self, request: Request, result: BackendResult, *, started: float | None = None) -> Answer:
        """Async :meth:`record`."""
        return await self.path.arecord(request, result, started=started)

    def run(self, request: Request, *, use_semantic: bool = True, store: bool = True,
            threshold: float | None = None) -> Answer:
        """Answer a prepared request through the answer path (lookup, single flight, generate, store)."""
        return self.path.run(_with_threshold(request, threshold), lambda: self.generate(request),
                             lookup=use_semantic, store=store, blend_setting=self.blend_setting)

    async def arun(self, request: Request, *, use_semantic: bool = True, store: bool = True,
                   threshold: float | None = None) -> Answer:
        """Async :meth:`run` (the backend's async path; waits on the event loop)."""
        return await self.path.arun(_with_threshold(request, threshold), lambda: self.agenerate(request),
                                    lookup=use_semantic, store=store, blend_setting=self.blend_setting)

    # -- all steps -------------------------------------------------------------------------------
    def answer(self, question: str, documents: Sequence[Any] = (), *, system: str | None = None,
               tools: Sequence[dict] = (), history: Sequence[dict] = (), volatile: str | None = None,
               namespace: str | None = None, max_new_tokens: int | None = None, temperature: float | None = None,
               use_semantic: bool = True, threshold: float | None = None) -> Answer:
        """Answer ``question`` over ``documents``: prepare -> lookup -> generate -> record.

        ``use_semantic=False`` skips the lookup (the answer is still stored: a refresh).

        Raises:
            ValueError: empty question, bad documents, or a prompt longer than the model's context
                window (the message states both token counts).
        """
        req = self.prepare(question, documents, system=system, tools=tools, history=history, volatile=volatile,
                           namespace=namespace, max_new_tokens=max_new_tokens, temperature=temperature)
        return self.run(req, use_semantic=use_semantic, threshold=threshold)

    async def aanswer(self, question: str, documents: Sequence[Any] = (), *, system: str | None = None,
                      tools: Sequence[dict] = (), history: Sequence[dict] = (), volatile: str | None = None,
                      namespace: str | None = None, max_new_tokens: int | None = None,
                      temperature: float | None = None, use_semantic: bool = True,
                      threshold: float | None = None) -> Answer:
        """Async :meth:`answer` (semantic lookup and store in worker threads; the backend's async path).
        Single flight as in :meth:`answer`, waited for on the event loop, shared with sync callers of
        the same question."""
        req = self.prepare(question, documents, system=system, tools=tools, history=history, volatile=volatile,
                           namespace=namespace, max_new_tokens=max_new_tokens, temperature=temperature)
        return await self.arun(req, use_semantic=use_semantic, threshold=threshold)


def _with_threshold(request: CacheRequest, threshold: float | None) -> CacheRequest:
    """``request`` with a caller's ``threshold`` (``None``: the request's own)."""
    return request if threshold is None else replace(request, threshold=threshold)


__all__ = ["Answer", "CacheRequest", "DEFAULT_SYSTEM", "RagCache", "Request"]
