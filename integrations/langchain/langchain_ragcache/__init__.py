"""LangChain integration for ragcache.

- :class:`RagCacheSemanticCache`: a semantic ``BaseCache`` keyed by the question alone,
  partitioned exactly by everything else (``set_llm_cache(RagCacheSemanticCache())``).
- :class:`RagPrompt`: a stable-first RAG prompt step (canonical document order;
  Anthropic ``cache_control`` breakpoints for ``ChatAnthropic``).
- :class:`ChatRagCache`: a local chat model with prefix and CacheBlend KV reuse.
- :class:`RagCacheEmbeddings`: the packaged embedder for retrievers and the cache.
- :class:`RagCacheCallbackHandler`: which layer served each call, with TTFT and tokens.
"""

from importlib import metadata

from langchain_ragcache.cache import RagCacheSemanticCache
from langchain_ragcache.callbacks import CallRecord, RagCacheCallbackHandler
from langchain_ragcache.chat_models import ChatRagCache
from langchain_ragcache.embeddings import RagCacheEmbeddings
from langchain_ragcache.prompts import RagPrompt

try:
    __version__ = metadata.version("langchain-ragcache")
except metadata.PackageNotFoundError:  # running from a source checkout without install
    __version__ = ""
del metadata

__all__ = [
    "CallRecord",
    "ChatRagCache",
    "RagCacheCallbackHandler",
    "RagCacheEmbeddings",
    "RagCacheSemanticCache",
    "RagPrompt",
    "__version__",
]
