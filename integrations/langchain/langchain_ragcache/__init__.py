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
  :class:`RagCacheGraphCache` (a LangGraph node cache in SQLite): ``langchain`` and ``langgraph``
  are needed only for them (``pip install langchain-ragcache[agents]``).

Every name is imported on first use from its own module, so ``from langchain_ragcache import
RagCacheGraphCache`` (or ``RagCacheSemanticCache``) does not import torch or transformers; only
:class:`ChatRagCache` and the local engine need them.
"""

from importlib import metadata
from typing import TYPE_CHECKING, Any

try:
    __version__ = metadata.version("langchain-ragcache")
except metadata.PackageNotFoundError:  # running from a source checkout without install
    __version__ = ""
del metadata

# Each public name is imported on first use, from its own module only: a SQLite node cache or the
# semantic cache must not pay for torch and transformers (``ChatRagCache`` needs them, they don't).
_LAZY = {"CallRecord": "langchain_ragcache.callbacks",
         "ChatRagCache": "langchain_ragcache.chat_models",
         "RagCacheCallbackHandler": "langchain_ragcache.callbacks",
         "RagCacheEmbeddings": "langchain_ragcache.embeddings",
         "RagCacheGraphCache": "langchain_ragcache.graph_cache",
         "RagCacheMiddleware": "langchain_ragcache.middleware",
         "RagCacheSemanticCache": "langchain_ragcache.cache",
         "RagPrompt": "langchain_ragcache.prompts",
         "RagPromptLayoutMiddleware": "langchain_ragcache.middleware",
         "cache_info": "langchain_ragcache.cache_info",
         "with_cache_info": "langchain_ragcache.cache_info"}

if TYPE_CHECKING:
    from langchain_ragcache.cache import RagCacheSemanticCache
    from langchain_ragcache.cache_info import cache_info, with_cache_info
    from langchain_ragcache.callbacks import CallRecord, RagCacheCallbackHandler
    from langchain_ragcache.chat_models import ChatRagCache
    from langchain_ragcache.embeddings import RagCacheEmbeddings
    from langchain_ragcache.graph_cache import RagCacheGraphCache
    from langchain_ragcache.middleware import (
        RagCacheMiddleware,
        RagPromptLayoutMiddleware,
    )
    from langchain_ragcache.prompts import RagPrompt


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'langchain_ragcache' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


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
