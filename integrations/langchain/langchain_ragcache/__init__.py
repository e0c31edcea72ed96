"""LangChain integration for ragcache.

- :class:`RagCacheSemanticCache`: a semantic ``BaseCache`` keyed by the question alone,
  partitioned exactly by everything else (``set_llm_cache(RagCacheSemanticCache())``).
- :class:`RagPrompt`: a stable-first RAG prompt step (canonical document order;
  Anthropic ``cache_control`` breakpoints for ``ChatAnthropic``).
- :class:`ChatRagCache`: a local chat model with prefix and CacheBlend KV reuse.
- :class:`RagCacheEmbeddings`: the packaged embedder for retrievers and the cache.
- :class:`RagCacheCallbackHandler`: which layer served each call, with TTFT and tokens.
- :func:`with_cache_info`: the step after a chat model that keeps which layer answered past the
  output parser (``{"answer": ..., "cache": {...}}``).
- :class:`RagCacheMiddleware` / :class:`RagPromptLayoutMiddleware` (``langchain`` 1.x agents) and
  :class:`RagCacheGraphCache` (a LangGraph node cache in SQLite): imported on first use, so
  ``langchain`` and ``langgraph`` are needed only for them (``pip install langchain-ragcache[agents]``).
"""

from importlib import metadata

from langchain_ragcache.cache import RagCacheSemanticCache
from langchain_ragcache.cache_info import cache_info, with_cache_info
from langchain_ragcache.callbacks import CallRecord, RagCacheCallbackHandler
from langchain_ragcache.chat_models import ChatRagCache
from langchain_ragcache.embeddings import RagCacheEmbeddings
from langchain_ragcache.prompts import RagPrompt

try:
    __version__ = metadata.version("langchain-ragcache")
except metadata.PackageNotFoundError:  # running from a source checkout without install
    __version__ = ""
del metadata

_LAZY = {"RagCacheMiddleware": "langchain_ragcache.middleware",
         "RagPromptLayoutMiddleware": "langchain_ragcache.middleware",
         "RagCacheGraphCache": "langchain_ragcache.graph_cache"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'langchain_ragcache' has no attribute {name!r}")

__all__ = [
    "CallRecord",
    "ChatRagCache",
    "RagCacheCallbackHandler",
    "RagCacheEmbeddings",
    "RagCacheGraphCache",
    "RagCacheMiddleware",
    "RagCacheSemanticCache",
    "RagPrompt",
    "RagPromptLayoutMiddleware",
    "__version__",
    "cache_info",
    "with_cache_info",
]
