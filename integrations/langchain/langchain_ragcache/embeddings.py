"""RagCacheEmbeddings: ragcache's packaged sentence embedder as a LangChain ``Embeddings``.

One loaded model serves both the retriever (a LangChain vector store) and
ragcache's semantic cache (``RagCacheSemanticCache(embedder=embeddings)``), so the
process loads all-MiniLM-L6-v2 once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.embeddings import Embeddings

from ragcache.models import Embedder, load_embedder


class RagCacheEmbeddings(Embeddings):
    """LangChain embeddings over :func:`ragcache.models.load_embedder`.

    Args:
        model: ``None`` for the packaged all-MiniLM-L6-v2 (384 dimensions), or a local
            sentence-transformers directory / a model id in the local cache.
        batch_size: texts per forward pass.

    Vectors are L2-normalised float lists (cosine similarity = dot product).

    Raises:
        ragcache.models.ModelNotFoundError: the model cannot be loaded (the message names the fix).
    """

    def __init__(self, model: str | None = None, *, batch_size: int = 64) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.batch_size = batch_size
        self._embedder: Embedder | None = None

    @property
    def embedder(self) -> Embedder:
        """The shared ragcache :class:`~ragcache.models.Embedder` (loaded once per process)."""
        if self._embedder is None:
            from ragcache.config import Config  # this facade reads the settings and passes the home down

            self._embedder = load_embedder(self.model, home=Config.from_env().paths)
        return self._embedder

    @property
    def dim(self) -> int:
        """Embedding width."""
        return self.embedder.dim

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed documents: one ``dim``-float list per text."""
        if not texts:
            return []
        return self.embedder.encode(list(texts), batch_size=self.batch_size).tolist()

    def embed_query(self, text: str) -> list[float]:
        """Embed one query text."""
        return self.embed_documents([text])[0]

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> list[float]:
        return await asyncio.to_thread(self.embed_query, text)

    def __repr__(self) -> str:
        return f"RagCacheEmbeddings(model={self.model!r})"

    def __getstate__(self) -> dict[str, Any]:  # the loaded model is process state, not data
        return {"model": self.model, "batch_size": self.batch_size, "_embedder": None}
