"""ragcache embeddings for LlamaIndex."""

from llama_index.embeddings.ragcache.base import RagCacheEmbedding

__all__ = ["RagCacheEmbedding"]
