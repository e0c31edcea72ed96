"""RagCacheSemanticCache: ragcache's semantic response cache as a LangChain ``BaseCache``.

LangChain hands a cache the whole serialized message list as ``prompt`` and the
model's parameters as ``llm_string``. Embedding that whole prompt is the classic
semantic-cache bug: two different questions under the same 2,000-character
context embed almost identically (cosine > 0.9) and one is served the other's
answer. This cache instead parses the prompt (``langchain_core.load``), embeds only
the last human turn's question text (no ``cache_control`` or other markers), and
puts everything else into the exact :func:`ragcache.semantic.partition_key`:
``llm_string`` (model name, temperature, max_tokens, stop, bound tools...), the
system text, earlier turns, the retrieved documents' content hashes, volatile
text and any non-text blocks. An answer is only served inside its own partition.

Use it with ``set_llm_cache(RagCacheSemanticCache())`` or a model's ``cache=``.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.caches import RETURN_VAL_TYPE, BaseCache
from langchain_core.load import dumps, loads
from langchain_core.outputs import ChatGeneration, Generation

from langchain_ragcache._messages import parse_cache_prompt, split_request
from ragcache.semantic import PartitionKey, SemanticCache, SemanticHit, partition_key

_GENERATIONS_KEY = "langchain_generations"


class RagCacheSemanticCache(BaseCache):
    """Semantic LLM cache for LangChain over :class:`ragcache.semantic.SemanticCache`.

    Args:
        semantic_cache: an existing :class:`SemanticCache` to share (for example with
            ragcache's pipeline); when given, ``path``/``embedder``/``threshold`` are not used.
        path: directory of a persistent cache (SQLite + FAISS); ``None`` keeps it in memory.
        embedder: ``None`` for the packaged all-MiniLM-L6-v2, a sentence-transformers path,
            an object with ``encode(list[str])``, or a :class:`~langchain_ragcache.RagCacheEmbeddings`.
        threshold: cosine similarity needed for a hit (``sim >= threshold``); 1.0 serves
            only the same words. Default: ragcache's tuned default (0.75, with guards).
        namespace: tenant / cache salt; part of every partition key.
        ttl_s: time to live of stored answers in seconds (``None``: no expiry).
        **kwargs: other :class:`SemanticCache` options (``guards``, ``max_entries``...).

    A hit returns the stored generations (a ``list``; LangChain treats anything else
    as a miss) and marks chat messages with
    ``response_metadata["ragcache"] = {"layer": "semantic", "similarity": s,
    "matched_question": q}``. Plain completion ``Generation`` objects are returned
    unchanged. ``alookup`` / ``aupdate`` / ``aclear`` are native (the embedding and
    FAISS search run in a worker thread, same code and threshold as the sync path).
    """

    def __init__(self, semantic_cache: SemanticCache | None = None, *, path: str | Path | None = None,
                 embedder: Any = None, threshold: float | None = None, namespace: str = "default",
                 ttl_s: float | None = None, **kwargs: Any) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise ValueError("namespace must be a non-empty string (use 'default' for a single tenant)")
        if semantic_cache is None:
            if hasattr(embedder, "embedder") and hasattr(embedder, "embed_query"):
                embedder = embedder.embedder  # a RagCacheEmbeddings: share its loaded model
            if threshold is not None:
                kwargs["threshold"] = threshold
            # path=None: $RAGCACHE_SEMANTIC_URL (e.g. postgresql://...) if set, else in memory
            semantic_cache = SemanticCache.from_url(None if path is None else str(path), embedder=embedder,
                                                    ttl_s=ttl_s, **kwargs)
        elif path is not None or embedder is not None or kwargs:
            raise ValueError("give either semantic_cache=... or path/embedder/options for a new cache, not both")
        self.semantic_cache = semantic_cache
        self.threshold = threshold
        self.namespace = namespace
        self.ttl_s = ttl_s

    # ------------------------------------------------------------------ keys
    def key_for(self, prompt: str, llm_string: str) -> tuple[str, PartitionKey]:
        """The (question, partition) a LangChain ``(prompt, llm_string)`` pair is cached under.

        Raises:
            ValueError: a chat prompt without a human message or question text.
        """
        messages = parse_cache_prompt(prompt)
        if messages is None:  # a completion LLM's raw prompt: the text is the question
            return prompt, partition_key(namespace=self.namespace, model="langchain-llm",
                                         params={"llm_string": llm_string})
        parts = split_request(messages)
        extra = {}
        if parts.volatile:
            extra["volatile"] = parts.volatile
        if parts.other:
            extra["other"] = parts.other
        pk = partition_key(
            namespace=self.namespace,
            model="langchain-chat",
            params={"llm_string": llm_string},
            system=parts.system,
            history=parts.history,
            documents=parts.documents,
            extra=extra,
        )
        return parts.question, pk

    # ------------------------------------------------------------------ BaseCache
    def lookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        """Cached generations for a semantically equal question in the same partition, else ``None``."""
        question, pk = self.key_for(prompt, llm_string)
        return self._to_generations(self.semantic_cache.lookup(question, partition=pk, threshold=self.threshold))

    def update(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        """Store generations for this prompt's question (a same-words entry is replaced)."""
        question, pk = self.key_for(prompt, llm_string)
        answer, meta = self._payload(return_val)
        self.semantic_cache.store(question, answer, partition=pk, metadata=meta, ttl_s=self.ttl_s)

    def clear(self, **kwargs: Any) -> None:
        """Drop this cache's entries (``namespace=`` another namespace; ``all=True`` every namespace)."""
        if kwargs.get("all"):
            self.semantic_cache.clear()
        else:
            self.semantic_cache.clear(kwargs.get("namespace", self.namespace))

    async def alookup(self, prompt: str, llm_string: str) -> RETURN_VAL_TYPE | None:
        question, pk = self.key_for(prompt, llm_string)
        hit = await self.semantic_cache.alookup(question, partition=pk, threshold=self.threshold)
        return self._to_generations(hit)

    async def aupdate(self, prompt: str, llm_string: str, return_val: RETURN_VAL_TYPE) -> None:
        question, pk = self.key_for(prompt, llm_string)
        answer, meta = self._payload(return_val)
        await self.semantic_cache.astore(question, answer, partition=pk, metadata=meta, ttl_s=self.ttl_s)

    async def aclear(self, **kwargs: Any) -> None:
        await asyncio.to_thread(self.clear, **kwargs)

    # ------------------------------------------------------------------ helpers
    @staticmethod
    def _payload(return_val: Sequence[Generation]) -> tuple[str, dict[str, Any]]:
        gens = list(return_val)
        if not gens:
            raise ValueError("update() needs at least one generation to store")
        return gens[0].text, {_GENERATIONS_KEY: dumps(gens)}

    @staticmethod
    def _to_generations(hit: SemanticHit | None) -> list[Generation] | None:
        if hit is None:
            return None
        raw = hit.metadata.get(_GENERATIONS_KEY)
        if raw is None:  # stored by ragcache's own pipeline: plain answer text
            gens: list[Generation] = [Generation(text=hit.answer)]
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                gens = loads(raw, allowed_objects="core")
            if not isinstance(gens, list):
                return None
        mark = {"layer": "semantic", "similarity": round(float(hit.similarity), 6),
                "matched_question": hit.question, "entry_id": hit.entry_id}
        out: list[Generation] = []
        for g in gens:
            if isinstance(g, ChatGeneration):
                msg = g.message
                meta = {**msg.response_metadata, "ragcache": mark}
                g = ChatGeneration(message=msg.model_copy(update={"response_metadata": meta}),
                                   generation_info=g.generation_info)
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

