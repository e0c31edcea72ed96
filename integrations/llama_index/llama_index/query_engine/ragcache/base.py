"""RagCacheQueryEngine: a LlamaIndex query engine that runs every ragcache layer.

LlamaIndex's default ``RetrieverQueryEngine`` joins the retrieved nodes into one
``context_str`` in retrieval-score order, so the prompt bytes change whenever the
scores do and no cache can reuse them. This engine, built from any retriever:

1. retrieves, runs the caller's node postprocessors, then puts the nodes into a
   canonical order without duplicates (:class:`StableOrderPostprocessor`);
2. looks the question up in the semantic response cache, in the partition keyed by
   the nodes' content hashes, the model identity and the generation parameters (an
   edited document has a new content hash, so its old answers are never served);
3. on a miss, lays the prompt out with ragcache (system text, one block per node,
   question last; :mod:`.messages`) and calls the LLM: :class:`RagCacheLLM` reuses
   prefix and per-document KV, ``llama_index.llms.anthropic.Anthropic`` gets at most
   4 ``CachePoint`` breakpoints;
4. stores the answer in the semantic cache.

The :class:`~llama_index.core.base.response.schema.Response` carries ``source_nodes``
and ``metadata``: ``layer`` (``semantic``, ``prefix``, ``chunk``, ``prefix+chunk``,
``model``, ``provider-cache``, ``provider``), ``tokens_reused``, ``ttft_s`` and more
(see :meth:`RagCacheQueryEngine._query`). Streaming returns a ``StreamingResponse``
(``AsyncStreamingResponse`` from ``aquery``) whose ``metadata`` is completed when the
stream ends.
"""

from __future__ import annotations

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
from llama_index.postprocessor.ragcache import (
    StableOrderPostprocessor,
    node_key,
    node_segment,
)
from llama_index.query_engine.ragcache.messages import (
    LaidOutMessages,
    layout_messages,
    llm_kind,
)

from ragcache.layout import LintMode, PromptLayout
from ragcache.pipeline import DEFAULT_SYSTEM
from ragcache.semantic import PartitionKey, SemanticCache, SemanticHit, partition_key

_PARAM_FIELDS = ("temperature", "top_p", "top_k", "max_tokens", "max_new_tokens", "stop", "seed")


@dataclass(slots=True)
class PreparedQuery:
    """Everything decided before the LLM call: the nodes in final order, the layout, the
    semantic partition and the LLM-shaped messages."""

    question: str
    nodes: list[NodeWithScore]
    layout: PromptLayout
    partition: PartitionKey
    laid: LaidOutMessages


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


def _usage_get(usage: Any, name: str) -> int:
    v = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
    return int(v or 0)


class RagCacheQueryEngine(BaseQueryEngine):
    """Cache-aware query engine over any LlamaIndex retriever.

    Args:
        retriever: any ``BaseRetriever`` (``index.as_retriever(similarity_top_k=k)``).
        llm: :class:`~llama_index.llms.ragcache.RagCacheLLM` (default: ``Settings.llm`` when it
            was set, else a RagCacheLLM over the embedded SmolLM2-135M-Instruct with a chunk cache),
            ``llama_index.llms.anthropic.Anthropic``
            (e.g. pointed at ``ragcache serve --anthropic``), or any other LlamaIndex LLM.
        semantic_cache: a :class:`ragcache.semantic.SemanticCache`, ``True`` for an in-memory
            one with the packaged embedder, or ``False`` / ``None`` to skip that layer.
        system_prompt: system text (stable; volatile text in it is linted per ``lint``).
        node_postprocessors: run after retrieval, before the stable order.
        order_by: canonical node order (see :class:`StableOrderPostprocessor`).
        id_source: document id rendered into each block (see :func:`node_segment`).
        namespace: tenant / cache salt of the semantic partition.
        streaming: return streaming responses.
        similarity_threshold: semantic-cache cosine threshold per lookup (None: the cache's).
        lint: volatile-text lint of the layout (``off``, ``warn``, ``move``, ``raise``).
        anthropic_min_tokens: minimum cacheable length overrides for breakpoint placement
            (an int for every model, or by model family), as the server applies them.
        token_counter: exact token counter for breakpoint placement (default: an estimate).
        callback_manager: LlamaIndex callback manager.

    Raises:
        ValueError: a bad option (``order_by``, ``lint``, ``semantic_cache`` type).
    """

    def __init__(self, retriever: BaseRetriever, llm: Any = None, *, semantic_cache: SemanticCache | bool | None = True,
                 system_prompt: str | None = DEFAULT_SYSTEM,
                 node_postprocessors: Sequence[BaseNodePostprocessor] = (), order_by: str = "content_hash",
                 id_source: str = "none", namespace: str = "default", streaming: bool = False,
                 similarity_threshold: float | None = None, lint: LintMode = "warn",
                 anthropic_min_tokens: Mapping[str, int] | int | None = None,
                 token_counter: Callable[[str], int] | None = None,
                 callback_manager: CallbackManager | None = None) -> None:
        if lint not in ("off", "warn", "move", "raise"):
            raise ValueError(f"lint must be one of off, warn, move, raise; got {lint!r}")
        if semantic_cache is True:
            semantic_cache = SemanticCache()
        elif semantic_cache is False:
            semantic_cache = None
        elif semantic_cache is not None and not hasattr(semantic_cache, "lookup"):
            raise ValueError("semantic_cache must be a ragcache.semantic.SemanticCache, True or False")
        if llm is None:
            from llama_index.core import Settings

            if getattr(Settings, "_llm", None) is not None:  # set explicitly: Settings.llm = ...
                llm = Settings.llm
            else:
                from llama_index.llms.ragcache import RagCacheLLM

                llm = RagCacheLLM()
        self._retriever = retriever
        self._llm = llm
        self._kind = llm_kind(llm)
        self._semantic = semantic_cache
        self._system = system_prompt
        self._postprocessors = list(node_postprocessors)
        self._stable = StableOrderPostprocessor(order_by=order_by, id_source=id_source)
        self._id_source = id_source
        self._namespace = namespace
        self._streaming = streaming
        self._threshold = similarity_threshold
        self._lint = lint
        self._min_tokens = anthropic_min_tokens
        self._token_counter = token_counter
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
        """
        return cls(LiveIndexRetriever(index, similarity_top_k=similarity_top_k, **dict(retriever_kwargs or {})),
                   llm, **kwargs)

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

    def _llm_params(self) -> dict[str, Any]:
        out = {}
        for name in _PARAM_FIELDS:
            v = getattr(self._llm, name, None)
            if v is not None:
                out[name] = list(v) if isinstance(v, list | tuple) else v
        return out

    def _model_key(self) -> tuple[str, dict[str, Any]]:
        if self._kind == "ragcache":
            return self._llm.fingerprint, {}
        name = str(getattr(self._llm, "model", None) or self._llm.metadata.model_name)
        extra = {"llm": type(self._llm).__name__, "base_url": str(getattr(self._llm, "base_url", None) or "")}
        return f"{self._kind}:{name}", extra

    def prepare(self, query_bundle: QueryBundle, nodes: Sequence[NodeWithScore]) -> PreparedQuery:
        """Order ``nodes`` canonically and build the layout, partition key and messages
        (no cache lookup, no LLM call)."""
        question = query_bundle.query_str
        nodes = self._stable.postprocess_nodes(list(nodes), query_bundle=query_bundle)
        segments = [node_segment(n.node, id_source=self._id_source) for n in nodes]
        layout = PromptLayout.build(question=question, system=self._system, documents=segments, doc_order="given",
                                    lint=self._lint)
        model, extra = self._model_key()
        pk = partition_key(namespace=self._namespace, model=model, params=self._llm_params(),
                           system=layout.system_text, extra={**extra, "volatile": layout.volatile},
                           documents=[node_key(n.node, s) for n, s in zip(nodes, segments)])
        laid = layout_messages(layout, self._kind, model=str(getattr(self._llm, "model", "")),
                               max_tokens=int(getattr(self._llm, "max_tokens", 0) or 256),
                               min_tokens=self._min_tokens, token_counter=self._token_counter)
        return PreparedQuery(question, nodes, layout, pk, laid)

    def _base_meta(self, prep: PreparedQuery, retrieve_s: float) -> dict[str, Any]:
        return {"layer": None, "similarity": None, "cached_question": None, "tokens_reused": 0,
                "tokens_recomputed": 0, "prompt_tokens": 0, "ttft_s": None, "retrieve_s": retrieve_s, "total_s": None,
                "partition": prep.partition.digest, "documents": list(prep.partition.documents),
                "cache_markers": prep.laid.markers, "breakpoints": list(prep.laid.breakpoints),
                "notes": list(prep.laid.notes)}

    @staticmethod
    def _semantic_meta(meta: dict[str, Any], hit: SemanticHit, t0: float) -> dict[str, Any]:
        now = time.perf_counter()
        meta.update(layer="semantic", similarity=float(hit.similarity), cached_question=hit.question,
                    ttft_s=now - t0, total_s=now - t0)
        return meta

    def _llm_meta(self, meta: dict[str, Any], last: Any, t0: float, t_call: float,
                  first_token_at: float | None) -> None:
        """Fill ``meta`` from the last LLM response (its ``additional_kwargs`` / ``raw``).

        ``t0``: query start; ``t_call``: when the LLM was called; ``first_token_at``: first
        streamed delta (None when not streaming)."""
        now = time.perf_counter()
        extra = dict(getattr(last, "additional_kwargs", None) or {})
        raw = getattr(last, "raw", None) or {}
        if self._kind == "ragcache":
            meta.update({k: extra.get(k, meta.get(k)) for k in (
                "layer", "tokens_reused", "tokens_recomputed", "prompt_tokens", "prefix_tokens_reused",
                "chunk_tokens_reused", "docs_hit", "docs_missed", "completion_tokens", "finish_reason")})
            meta["llm_ttft_s"] = extra.get("ttft_s")
            meta["prompt_sha256"] = raw.get("prompt_sha256") if isinstance(raw, Mapping) else None
        elif self._kind == "anthropic":
            usage = raw.get("usage") if isinstance(raw, Mapping) else None
            read = _usage_get(usage, "cache_read_input_tokens")
            write = _usage_get(usage, "cache_creation_input_tokens")
            fresh = _usage_get(usage, "input_tokens")
            meta.update(layer="provider-cache" if read > 0 else "provider", tokens_reused=read,
                        cache_read_tokens=read, cache_write_tokens=write, prompt_tokens=fresh + read + write,
                        completion_tokens=_usage_get(usage, "output_tokens"))
        else:
            meta["layer"] = "model"
        if first_token_at is None and self._kind == "ragcache" and meta.get("llm_ttft_s") is not None:
            first_token_at = t_call + float(meta["llm_ttft_s"])
        meta["ttft_s"] = (first_token_at or now) - t0
        meta["total_s"] = now - t0

    def _store(self, prep: PreparedQuery, text: str, meta: dict[str, Any]) -> None:
        if self._semantic is not None and text.strip():
            self._semantic.store(prep.question, text, partition=prep.partition,
                                 metadata={"layer": meta.get("layer"), "documents": len(prep.nodes)})

    async def _astore(self, prep: PreparedQuery, text: str, meta: dict[str, Any]) -> None:
        if self._semantic is not None and text.strip():
            await self._semantic.astore(prep.question, text, partition=prep.partition,
                                        metadata={"layer": meta.get("layer"), "documents": len(prep.nodes)})

    # ------------------------------------------------------------------ sync
    def synthesize(self, query_bundle: QueryBundle, nodes: list[NodeWithScore],
                   additional_source_nodes: Sequence[NodeWithScore] | None = None) -> RESPONSE_TYPE:
        """Answer from given nodes (semantic lookup -> layout -> LLM -> store); the nodes are
        put into canonical order first, so any order of the same nodes gives the same prompt."""
        return self._answer(query_bundle, list(nodes) + list(additional_source_nodes or ()), time.perf_counter(), 0.0)

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        """Retrieve and answer.

        ``Response.metadata``: ``layer``; ``similarity`` / ``cached_question`` (semantic hits);
        ``tokens_reused`` (prefill tokens whose KV was reused, or provider cache-read tokens),
        ``tokens_recomputed``, ``prompt_tokens``; ``ttft_s`` (seconds from the start of the
        query, retrieval included, to the first answer token: the cached answer for a
        semantic hit, the whole response for a non-streaming provider call), ``retrieve_s``,
        ``total_s``; ``partition`` (semantic partition digest), ``documents`` (content
        hashes); ``cache_markers`` / ``breakpoints`` / ``notes`` (prompt caching);
        RagCacheLLM adds ``prefix_tokens_reused``, ``chunk_tokens_reused``, ``docs_hit``,
        ``llm_ttft_s``, ``prompt_sha256``; Anthropic adds ``cache_read_tokens``,
        ``cache_write_tokens``.
        """
        t0 = time.perf_counter()
        nodes = self.retrieve(query_bundle)
        return self._answer(query_bundle, nodes, t0, time.perf_counter() - t0)

    def _answer(self, query_bundle: QueryBundle, nodes: list[NodeWithScore], t0: float,
                retrieve_s: float) -> RESPONSE_TYPE:
        prep = self.prepare(query_bundle, nodes)
        meta = self._base_meta(prep, retrieve_s)
        hit = (self._semantic.lookup(prep.question, partition=prep.partition, threshold=self._threshold)
               if self._semantic is not None else None)
        if hit is not None:
            meta = self._semantic_meta(meta, hit, t0)
            if self._streaming:
                return StreamingResponse(iter([hit.answer]), source_nodes=prep.nodes, metadata=meta,
                                         response_txt=None)
            return Response(hit.answer, source_nodes=prep.nodes, metadata=meta)
        if self._streaming:
            return StreamingResponse(self._stream(prep, meta, t0), source_nodes=prep.nodes, metadata=meta)
        t_call = time.perf_counter()
        resp = self._llm.chat(prep.laid.messages)
        text = resp.message.content or ""
        self._llm_meta(meta, resp, t0, t_call, None)
        self._store(prep, text, meta)
        return Response(text, source_nodes=prep.nodes, metadata=meta)

    def _stream(self, prep: PreparedQuery, meta: dict[str, Any], t0: float) -> Iterator[str]:
        text, last, first, t_call = "", None, None, time.perf_counter()
        for r in self._llm.stream_chat(prep.laid.messages):
            if r.delta:
                first = first or time.perf_counter()
                text += r.delta
                yield r.delta
            last = r
        self._llm_meta(meta, last, t0, t_call, first)
        self._store(prep, text, meta)

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
        prep = self.prepare(query_bundle, nodes)
        meta = self._base_meta(prep, retrieve_s)
        hit = (await self._semantic.alookup(prep.question, partition=prep.partition, threshold=self._threshold)
               if self._semantic is not None else None)
        if hit is not None:
            meta = self._semantic_meta(meta, hit, t0)
            if self._streaming:
                return AsyncStreamingResponse(_one(hit.answer), source_nodes=prep.nodes, metadata=meta)
            return Response(hit.answer, source_nodes=prep.nodes, metadata=meta)
        if self._streaming:
            return AsyncStreamingResponse(self._astream(prep, meta, t0), source_nodes=prep.nodes, metadata=meta)
        t_call = time.perf_counter()
        resp = await self._llm.achat(prep.laid.messages)
        text = resp.message.content or ""
        self._llm_meta(meta, resp, t0, t_call, None)
        await self._astore(prep, text, meta)
        return Response(text, source_nodes=prep.nodes, metadata=meta)

    async def _astream(self, prep: PreparedQuery, meta: dict[str, Any], t0: float) -> AsyncIterator[str]:
        text, last, first, t_call = "", None, None, time.perf_counter()
        async for r in await self._llm.astream_chat(prep.laid.messages):
            if r.delta:
                first = first or time.perf_counter()
                text += r.delta
                yield r.delta
            last = r
        self._llm_meta(meta, last, t0, t_call, first)
        await self._astore(prep, text, meta)


async def _one(text: str) -> AsyncIterator[str]:
    yield text
