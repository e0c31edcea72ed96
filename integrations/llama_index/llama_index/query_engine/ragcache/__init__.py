"""Cache-aware LlamaIndex query engine: stable node order, semantic cache, ragcache prompt layout,
prefix / chunk KV reuse (RagCacheLLM) or Anthropic prompt caching (at most 4 CachePoints)."""

from llama_index.query_engine.ragcache.base import (
    LiveIndexRetriever,
    PreparedQuery,
    RagCacheQueryEngine,
)
from llama_index.query_engine.ragcache.messages import (
    LaidOutMessages,
    layout_messages,
    llm_kind,
)

__all__ = [
    "LaidOutMessages",
    "LiveIndexRetriever",
    "PreparedQuery",
    "RagCacheQueryEngine",
    "layout_messages",
    "llm_kind",
]
