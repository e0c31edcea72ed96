"""RagCacheQueryEngine: a LlamaIndex query engine that runs every ragcache layer.

LlamaIndex's default ``RetrieverQueryEngine`` joins the retrieved nodes into one
``context_str`` in retrieval-score order, so the prompt bytes change whenever the
scores do and no cache can reuse them. This engine, built from any retriever:

1. retrieves, runs the caller's node postprocessors, then puts the nodes into a
   canonical order without duplicates (:class:`StableOrderPostprocessor`);
2. runs ragcache's own pipeline steps (:class:`ragcache.RagCache`: prepare -> lookup ->
   generate -> record) with the LLM as its backend (:class:`.backend.LlamaIndexBackend`):
   the layout and the semantic partition are the ones ``RagCache`` computes for the same
   request (:func:`ragcache.request.request_partition`: the nodes' content hashes and
   rendered bytes, system and volatile text, model identity, generation parameters), so an
   edited document never gets a stale answer and ``invalidate(ref_doc_id)`` works;
3. on a miss, lays the prompt out (system text, one block per node, question last;
   :mod:`.messages`) and calls the LLM: :class:`~llama_index.llms.ragcache.RagCacheLLM` reuses prefix and
   per-document KV, ``llama_index.llms.anthropic.Anthropic`` gets at most 4 ``CachePoint``
   breakpoints; the answer is stored unless it was cut at the token budget.

The :class:`~llama_index.core.base.response.schema.Response` carries ``source_nodes``
and ``metadata``: ``layer`` (``semantic``, ``prefix``, ``chunk``, ``prefix+chunk``,
``model``, ``provider-cache``, ``provider``), ``tokens_reused``, ``ttft_s`` and more
(see :meth:`RagCacheQueryEngine._query`). Streaming returns a ``StreamingResponse``
(``AsyncStreamingResponse`` from ``aquery``) whose ``metadata`` is completed when the
stream ends.

Tenants: ``namespace=`` (or ``engine.for_tenant(tenant)`` per request) partitions the answers and is the
tenant every LLM call carries (:class:`ragcache.backend.Backend`), so a :class:`~llama_index.llms.ragcache.RagCacheLLM`'s engine
salts the request's prefix and chunk KV with it: two tenants share no KV unless the engine opts in.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.callbacks import CallbackManager
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts.mixin import PromptMixinType
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.postprocessor.ragcache import StableOrderPostprocessor, node_segment
from llama_index.query_engine.ragcache.backend import LlamaIndexBackend
from llama_index.query_engine.ragcache.messages import LaidOutMessages

from ragcache.answering import CACHE_TRUNCATED, DEFAULT_LOOKUP_TIMEOUT_S, Answer
from ragcache.backend import BackendResult
from ragcache.prompt.layout import LintMode, PromptLayout
from ragcache.pipeline import DEFAULT_SYSTEM, RagCache
from ragcache.request import CacheRequest
from ragcache.semantic import PartitionKey, SemanticCache
from ragcache.semantic.answer_cache import AnswerCache
from ragcache.config import Config
from ragcache.semantic.defaults import DEFAULT_LOCATION, default_cache

@dataclass(slots=True)
class PreparedQuery:
    """Everything decided before the LLM call: the nodes in final order, ragcache's prepared
    :class:`~ragcache.request.CacheRequest` (layout, partition, tenant, budget, threshold) and the
    LLM-shaped messages."""

    question: str
    nodes: list[NodeWithScore]
    request: CacheRequest
    laid: LaidOutMessages

    @property
    def layout(self) -> PromptLayout:
        return self.request.layout

    @property
    def partition(self) -> PartitionKey:
        return self.request.partition


class LiveIndexRetriever(BaseRetriever):
    """``index.as_retriever(**kwargs)`` built afresh for each query, so it sees the index's
    current nodes (inserts, deletes and ``refresh_ref_docs`` after construction)."""

    def __init__(self, index: Any, **kwargs: Any) -> None:
        self._index = index
        self._kwargs = kwargs
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._index.as_retriever(**self._kwargs).retrieve(query_bundle)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await self._index.as_retriever(**self._kwargs).aretrieve(query_bundle)


class RagCacheQueryEngine(BaseQueryEngine):
    """Cache-aware query engine over any LlamaIndex retriever.

    Args:
        retriever: any ``BaseRetriever`` (``index.as_retriever(similarity_top_k=k)``).
        llm: :class:`~llama_index.llms.ragcache.RagCacheLLM` (default: ``Settings.llm`` when it
            was set, else a RagCacheLLM over the embedded SmolLM2-135M-Instruct with a chunk cache),
            ``llama_index.llms.anthropic.Anthropic``
            (e.g. pointed at ``ragcache serve --anthropic``), or any other LlamaIndex LLM.
        semantic_cache: ``"default"`` (the default) or ``True``: the persistent store that
            ``ragcache ask`` uses (``$RAGCACHE_SEMANTIC_URL`` if set, else SQLite + FAISS under
            ``$RAGCACHE_HOME/answers``; one per process, shared with LangChain's adapters:
            :func:`ragcache.semantic.defaults.default_cache`); ``None``: an in-memory cache; a
            :class:`ragcache.semantic.SemanticCache` to share; ``False``: skip that layer.
        system_prompt: system text (stable; volatile text in it is linted per ``lint``).
        node_postprocessors: run after retrieval, before the stable order.
        order_by: canonical node order (see :class:`StableOrderPostprocessor`).
        id_source: document id kept with each block, not rendered (see :func:`node_segment`).
        namespace: the tenant (an opaque id, not a secret): it partitions the answers and is the
            ``tenant`` the backend is given, so a ``RagCacheLLM``'s engine salts the request's prefix and
            chunk KV with it (two tenants share no KV unless the engine has
            ``share_kv_across_namespaces=True``). Per request: :meth:`for_tenant`.
        streaming: return streaming responses.
        similarity_threshold: semantic-cache cosine threshold per lookup (None: the cache's).
        lint: volatile-text lint of the layout (``off``, ``warn``, ``move``, ``raise``).
        cache_truncated: also store answers cut at the LLM's token budget, served only to requests
            with the same budget (it is in the partition): on by default, the rule of every entry
            point (:data:`ragcache.answering.CACHE_TRUNCATED`).
        cache_sampled: replay one stored sample when the LLM samples without a seed (``temperature > 0``,
            no ``seed``), labelled in the answer's provenance; default ``False``: each such query is a
            fresh draw, neither looked up nor stored (:class:`ragcache.answering.Sampling`).
        lookup_timeout_s: deadline (seconds) of each answer-cache lookup and store: an embedder or store
            that fails or hangs past it costs a logged miss (nothing stored), never the answer.
        anthropic_min_tokens: minimum cacheable length overrides for breakpoint placement
            (an int for every model, or by model family), as the server applies them.
        token_counter: exact token counter for breakpoint placement (default: an estimate).
        callback_manager: LlamaIndex callback manager.

    Raises:
        ValueError: a bad option (``retriever`` without ``retrieve``, ``order_by``, ``lint``, ``semantic_cache`` type).
    """

    def __init__(self, retriever: BaseRetriever, llm: Any = None, *,
                 semantic_cache: SemanticCache | bool | str | None = DEFAULT_LOCATION,
                 system_prompt: str | None = DEFAULT_SYSTEM,
                 node_postprocessors: Sequence[BaseNodePostprocessor] = (), order_by: str = "content_hash",
                 id_source: str = "none", namespace: str = "default", streaming: bool = False,
                 similarity_threshold: float | None = None, lint: LintMode = "warn", cache_truncated: bool = CACHE_TRUNCATED,
                 cache_sampled: bool = False, lookup_timeout_s: float | None = DEFAULT_LOOKUP_TIMEOUT_S,
                 anthropic_min_tokens: Mapping[str, int] | int | None = None,
                 token_counter: Callable[[str], int] | None = None,
                 callback_manager: CallbackManager | None = None) -> None:
        if not callable(getattr(retriever, "retrieve", None)):
            raise TypeError(f"retriever must be a LlamaIndex retriever (e.g. index.as_retriever()), got "
                             f"{type(retriever).__name__}; to start from an index use RagCacheQueryEngine.from_index(index)")
        if lint not in ("off", "warn", "move", "raise"):
            raise ValueError(f"lint must be one of off, warn, move, raise; got {lint!r}")
        if semantic_cache is True or semantic_cache == DEFAULT_LOCATION:
            semantic_cache = default_cache(config=Config.from_env())  # this facade reads the RAGCACHE_* settings
        elif semantic_cache is None:
            semantic_cache = SemanticCache(None, home=Config.from_env().paths)
        elif semantic_cache is False:
            semantic_cache = None
        elif not isinstance(semantic_cache, AnswerCache):
            raise (ValueError if isinstance(semantic_cache, str) else TypeError)("semantic_cache must be 'default' (persistent, the default), None (in memory), "
                             "a ragcache.semantic.SemanticCache, or False (no semantic layer)")
        if llm is None:
            from llama_index.core import Settings

            if getattr(Settings, "_llm", None) is not None:  # set explicitly: Settings.llm = ...
                llm = Settings.llm
            else:
                from llama_index.llms.ragcache import RagCacheLLM

                llm = RagCacheLLM()
        self._retriever = retriever
        self._llm = llm
        self._backend = LlamaIndexBackend(llm, anthropic_min_tokens=anthropic_min_tokens, token_counter=token_counter)
        self._kind = self._backend.kind
        self._semantic = semantic_cache
        self._system = system_prompt
        self._postprocessors = list(node_postprocessors)
        self._stable = StableOrderPostprocessor(order_by=order_by, id_source=id_source)
        self._id_source = id_source
        self._namespace = namespace
        self._streaming = streaming
        self._threshold = similarity_threshold
        self._lint = lint
        self._cache_truncated = cache_truncated
        self._cache_sampled = cache_sampled
        self._lookup_timeout_s = lookup_timeout_s
        super().__init__(callback_manager=callback_manager or CallbackManager([]))

    @classmethod
    def from_index(cls, index: Any, *, similarity_top_k: int = 4, llm: Any = None,
                   retriever_kwargs: Mapping[str, Any] | None = None, **kwargs: Any) -> RagCacheQueryEngine:
        """The cache-aware replacement of ``index.as_query_engine(similarity_top_k=k)``.

        The retriever is rebuilt from the index on every query, so documents inserted or
        refreshed later (``index.refresh_ref_docs``) are seen: a retriever from
        ``index.as_retriever()`` over the default in-memory vector store keeps the node ids
        it was built with. ``retriever_kwargs`` go to ``index.as_retriever``; the other
        keyword arguments to the constructor.

        Raises:
            ValueError: ``index`` has no ``as_retriever`` (not a LlamaIndex index).
        """
        if not callable(getattr(index, "as_retriever", None)):
            raise TypeError(f"index must be a LlamaIndex index (e.g. VectorStoreIndex.from_documents(docs)), got "
                             f"{type(index).__name__}")
        return cls(LiveIndexRetriever(index, similarity_top_k=similarity_top_k, **dict(retriever_kwargs or {})),
                   llm, **kwargs)

    def for_tenant(self, tenant: str) -> RagCacheQueryEngine:
        """This engine for requests of ``tenant`` (a shallow copy sharing the retriever, the LLM and its
        KV caches, and the answer store): ``engine.for_tenant(user.org_id).query(question)``. Its answers
        are in ``tenant``'s partitions and its LLM calls carry ``tenant``, which salts a ``RagCacheLLM``'s
        prefix and chunk KV (see ``namespace``).

        Raises:
            TypeError / ValueError: ``tenant`` not a string, or empty.
        """
        if not isinstance(tenant, str):
            raise TypeError(f"tenant must be a non-empty str, got {type(tenant).__name__}")
        if not tenant:
            raise ValueError("tenant must be a non-empty str ('default' for the default tenant)")
        other = copy.copy(self)
        other._namespace = tenant
        return other

    @property
    def llm(self) -> Any:
        return self._llm

    @property
    def retriever(self) -> BaseRetriever:
        return self._retriever

    @property
    def semantic_cache(self) -> SemanticCache | None:
        return self._semantic

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    # ------------------------------------------------------------------ steps
    def _order(self, nodes: Sequence[NodeWithScore], query_bundle: QueryBundle) -> list[NodeWithScore]:
        nodes = list(nodes)
        for pp in self._postprocessors:
            nodes = pp.postprocess_nodes(nodes, query_bundle=query_bundle)
        return self._stable.postprocess_nodes(nodes, query_bundle=query_bundle)

    def retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Retrieve, run the node postprocessors, and put the nodes into canonical order."""
        return self._order(self._retriever.retrieve(query_bundle), query_bundle)

    async def aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Async :meth:`retrieve`."""
        nodes = await self._retriever.aretrieve(query_bundle)
        for pp in self._postprocessors:
            nodes = await pp.apostprocess_nodes(nodes, query_bundle=query_bundle)
        return await self._stable.apostprocess_nodes(nodes, query_bundle=query_bundle)

    def pipeline(self) -> RagCache:
        """ragcache's pipeline for the next query: the LLM as backend (:class:`LlamaIndexBackend`)
        and the LLM's current generation parameters; nodes keep the canonical order given here."""
        b = self._backend
        return RagCache(b, semantic=self._semantic, system=self._system, namespace=self._namespace,  # type: ignore[arg-type]
                        doc_order="given", lint=self._lint, max_new_tokens=b.max_new_tokens,
                        temperature=b.temperature, params=b.params, cache_truncated=self._cache_truncated,
                        cache_sampled=self._cache_sampled, lookup_timeout_s=self._lookup_timeout_s)

    def prepare(self, query_bundle: QueryBundle, nodes: Sequence[NodeWithScore]) -> PreparedQuery:
        """Order ``nodes`` canonically and prepare the request with :meth:`RagCache.prepare` (layout,
        partition key) and the LLM's messages (no cache lookup, no LLM call)."""
        question = query_bundle.query_str
        nodes = self._stable.postprocess_nodes(list(nodes), query_bundle=query_bundle)
        segments = [node_segment(n.node, id_source=self._id_source) for n in nodes]
        source_ids = [str(n.node.ref_doc_id or n.node.node_id) for n in nodes]
        req = self.pipeline().prepare(question, segments, document_ids=source_ids, threshold=self._threshold)
        return PreparedQuery(question, nodes, req, self._backend.messages(req.layout))

    def _base_meta(self, prep: PreparedQuery, retrieve_s: float) -> dict[str, Any]:
        pk = prep.partition
        return {"layer": None, "similarity": None, "cached_question": None, "tokens_reused": 0,
                "tokens_recomputed": 0, "tokens_computed": 0, "prompt_tokens": 0, "usage": None,
                "approximate": False, "recompute_ratio": None, "blend_setting": None, "finish_reason": None,
                "ttft_s": None,
                "retrieve_s": retrieve_s, "total_s": None, "partition": pk.digest if pk else None,
                "documents": list(pk.documents) if pk else [d.content_hash for d in prep.layout.documents],
                "cache_markers": prep.laid.markers, "breakpoints": list(prep.laid.breakpoints),
                "notes": list(prep.laid.notes)}

    @staticmethod
    def _answer_meta(meta: dict[str, Any], answer: Answer, t0: float, llm_s: float | None = None) -> dict[str, Any]:
        """Fill ``meta`` from ragcache's :class:`~ragcache.pipeline.Answer`. ``t0``: query start;
        ``llm_s``: seconds from the query start to the LLM call (so ``ttft_s`` counts retrieval)."""
        u = answer.usage
        meta.update(layer=answer.layer, similarity=answer.similarity, cached_question=answer.matched_question,
                    usage=u.to_dict(), prompt_tokens=u.prompt_tokens, tokens_reused=u.reused,
                    tokens_recomputed=u.recomputed, tokens_computed=u.computed, approximate=answer.approximate,
                    recompute_ratio=answer.recompute_ratio, blend_setting=answer.blend_setting,
                    finish_reason=answer.finish_reason,
                    completion_tokens=u.completion_tokens)
        if answer.layer == "semantic":  # one unseeded sample replayed under cache_sampled=True
            meta["sampled"] = bool(answer.provenance and answer.provenance.sampled)
        if answer.layer in ("prefix", "chunk", "prefix+chunk", "model"):
            meta.update(prefix_tokens_reused=u.prefix_reused, chunk_tokens_reused=u.chunk_reused,
                        docs_hit=answer.details.get("docs_hit", 0), docs_missed=answer.details.get("docs_missed", 0),
                        llm_ttft_s=answer.ttft_s, prompt_sha256=answer.details.get("prompt_sha256"))
        if answer.layer in ("provider", "provider-cache"):
            meta.update(cache_read_tokens=u.cache_read, cache_write_tokens=u.cache_write)
        now = time.perf_counter()
        meta["ttft_s"] = (llm_s or 0.0) + answer.ttft_s if answer.layer != "semantic" else now - t0
        meta["total_s"] = now - t0
        return meta

    # ------------------------------------------------------------------ sync
    def synthesize(self, query_bundle: QueryBundle, nodes: list[NodeWithScore],
                   additional_source_nodes: Sequence[NodeWithScore] | None = None) -> RESPONSE_TYPE:
        """Answer from given nodes (semantic lookup -> layout -> LLM -> store); the nodes are
        put into canonical order first, so any order of the same nodes gives the same prompt."""
        return self._answer(query_bundle, list(nodes) + list(additional_source_nodes or ()), time.perf_counter(), 0.0)

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        """Retrieve and answer.

        ``Response.metadata``: ``layer``; ``similarity`` / ``cached_question`` (semantic hits);
        ``usage`` (ragcache's :class:`~ragcache.CacheUsage` as a dict) and its counts flat:
        ``prompt_tokens``, ``tokens_reused``, ``tokens_recomputed``, ``tokens_computed``,
        ``completion_tokens``; ``approximate`` / ``recompute_ratio`` / ``blend_setting`` (True when the
        answer was prefilled from blended chunk KV, with the r and the blend setting used); ``finish_reason``; ``ttft_s`` (seconds
        from the start of the query, retrieval included, to the first answer token: the cached
        answer for a semantic hit, the whole response for a non-streaming provider call),
        ``retrieve_s``, ``total_s``; ``partition`` (semantic partition digest), ``documents``
        (content hashes); ``cache_markers`` / ``breakpoints`` / ``notes`` (prompt caching);
        RagCacheLLM adds ``prefix_tokens_reused``, ``chunk_tokens_reused``, ``docs_hit``,
        ``docs_missed``, ``llm_ttft_s``, ``prompt_sha256``; Anthropic adds ``cache_read_tokens``,
        ``cache_write_tokens``.
        """
        t0 = time.perf_counter()
        nodes = self.retrieve(query_bundle)
        return self._answer(query_bundle, nodes, t0, time.perf_counter() - t0)

    def _answer(self, query_bundle: QueryBundle, nodes: list[NodeWithScore], t0: float,
                retrieve_s: float) -> RESPONSE_TYPE:
        """Answer through ragcache's one answer path (:class:`ragcache.answering.AnswerPath`, as
        ``RagCache.run``): lookup, single flight (concurrent identical misses make one LLM call), the
        call, the one storage rule, store."""
        rag = self.pipeline()
        prep = self.prepare(query_bundle, nodes)
        meta = self._base_meta(prep, retrieve_s)
        called: list[float] = []  # when the LLM was called (so ttft_s counts retrieval and lookup)
        if self._streaming:
            items = rag.path.stream(prep.request,
                                    lambda: _timed(called, self._backend.stream(prep.layout, tenant=prep.request.tenant)),
                                    blend_setting=rag.blend_setting)
            gen = self._stream(items, meta, t0, called)
            first = next(gen, None)  # the lookup runs now; a hit fills the metadata at once
            if first is not None and not called:
                rest = list(gen)  # a hit: its text, then its Answer
                return StreamingResponse(iter([first, *rest]), source_nodes=prep.nodes, metadata=meta)
            return StreamingResponse(_chain(first, gen), source_nodes=prep.nodes, metadata=meta)

        def call() -> BackendResult:
            called.append(time.perf_counter())
            return rag.generate(prep.request)

        answer = rag.path.run(prep.request, call, blend_setting=rag.blend_setting)
        self._answer_meta(meta, answer, t0, called[0] - t0 if called else None)
        return Response(answer.text, source_nodes=prep.nodes, metadata=meta)

    def _stream(self, items: Iterator[str | Answer], meta: dict[str, Any], t0: float,
                called: list[float]) -> Iterator[str]:
        for item in items:
            if isinstance(item, Answer):
                self._answer_meta(meta, item, t0, called[0] - t0 if called else None)
            else:
                yield item

    # ------------------------------------------------------------------ async
    async def asynthesize(self, query_bundle: QueryBundle, nodes: list[NodeWithScore],
                          additional_source_nodes: Sequence[NodeWithScore] | None = None) -> RESPONSE_TYPE:
        """Async :meth:`synthesize`."""
        return await self._aanswer(query_bundle, list(nodes) + list(additional_source_nodes or ()),
                                   time.perf_counter(), 0.0)

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        """Async :meth:`_query` (``AsyncStreamingResponse`` when streaming)."""
        t0 = time.perf_counter()
        nodes = await self.aretrieve(query_bundle)
        return await self._aanswer(query_bundle, nodes, t0, time.perf_counter() - t0)

    async def _aanswer(self, query_bundle: QueryBundle, nodes: list[NodeWithScore], t0: float,
                       retrieve_s: float) -> RESPONSE_TYPE:
        """Async :meth:`_answer` (``AnswerPath.arun`` / ``astream``: waits on the event loop, shares flights
        with sync callers)."""
        rag = self.pipeline()
        prep = self.prepare(query_bundle, nodes)
        meta = self._base_meta(prep, retrieve_s)
        if self._streaming:
            called: list[float] = []
            items = rag.path.astream(prep.request,
                                     lambda: _atimed(called, self._backend.astream(prep.layout,
                                                                                   tenant=prep.request.tenant)),
                                     blend_setting=rag.blend_setting)
            gen = self._astream(items, meta, t0, called)
            first = await anext(gen, None)  # the lookup runs now; a hit fills the metadata at once
            if first is not None and not called:
                rest = [t async for t in gen]  # a hit: its text, then its Answer
                return AsyncStreamingResponse(_aiter([first, *rest]), source_nodes=prep.nodes, metadata=meta)
            return AsyncStreamingResponse(_achain(first, gen), source_nodes=prep.nodes, metadata=meta)
        called: list[float] = []

        async def call() -> BackendResult:
            called.append(time.perf_counter())
            return await rag.agenerate(prep.request)

        answer = await rag.path.arun(prep.request, call, blend_setting=rag.blend_setting)
        self._answer_meta(meta, answer, t0, called[0] - t0 if called else None)
        return Response(answer.text, source_nodes=prep.nodes, metadata=meta)

    async def _astream(self, items: AsyncIterator[str | Answer], meta: dict[str, Any], t0: float,
                       called: list[float]) -> AsyncIterator[str]:
        async for item in items:
            if isinstance(item, Answer):
                self._answer_meta(meta, item, t0, called[0] - t0 if called else None)
            else:
                yield item


def _timed(called: list[float], items: Iterator[Any]) -> Iterator[Any]:
    called.append(time.perf_counter())
    yield from items


async def _atimed(called: list[float], items: AsyncIterator[Any]) -> AsyncIterator[Any]:
    called.append(time.perf_counter())
    async for item in items:
        yield item


async def _aiter(items: list[str]) -> AsyncIterator[str]:
    for item in items:
        yield item


async def _achain(first: str | None, rest: AsyncIterator[str]) -> AsyncIterator[str]:
    if first is not None:
        yield first
    async for item in rest:
        yield item


def _chain(first: str | None, rest: Iterator[str]) -> Iterator[str]:
    if first is not None:
        yield first
    yield from rest
