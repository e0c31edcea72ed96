"""Local transformers backend: engine, exact prefix KV cache, CacheBlend chunk KV cache."""
