"""ragcache's local engine (exact prefix KV cache + CacheBlend chunk KV cache) as a LlamaIndex LLM."""

from llama_index.llms.ragcache.base import (
    RagCacheLLM,
    prompt_digest,
    stats_kwargs,
    to_engine_messages,
    to_layout,
)

__all__ = ["RagCacheLLM", "prompt_digest", "stats_kwargs", "to_engine_messages", "to_layout"]
