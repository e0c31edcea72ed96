"""The local engine's row of the provider table (:mod:`ragcache.providers.table`): ragcache's own
transformers engine, answering through :class:`ragcache.engine.backend.LocalBackend`, ``ragcache serve``,
LangChain's ``ChatRagCache`` and LlamaIndex's ``RagCacheLLM``.

Its usage is ragcache's own record (:meth:`ragcache.backend.CacheUsage.local`, built by the engine), so
there is no native usage to read; it decodes greedily when no temperature is given; its prompt cache is
the local prefix and chunk KV cache, told where the documents end by one marker after the last
document.
"""

from __future__ import annotations

from ragcache.providers.spec import Provider

LOCAL = Provider(
    name="local",
    usage=None,  # the engine reports CacheUsage itself (prefix / chunk reuse); nothing native to read
    finish_reasons={"stop": "stop", "length": "length"},  # the engine's decode loop says these two
    finish_field="finish_reason",
    unset_temperature=0.0,  # greedy: LocalEngine, ChatRagCache, RagCacheLLM and RagCache
    prompt_caching="local-kv",
    langchain_types=frozenset({"ragcache-local"}),
    langchain_classes=frozenset({"ChatRagCache"}),
    llama_index_classes=("llama_index.llms.ragcache:RagCacheLLM",),
)
"""ragcache's local engine."""

__all__ = ["LOCAL"]
