"""ragcache: the caching layer for retrieval-augmented generation.

Layers, in the order a request meets them: a semantic response cache, a
stable-first prompt layout, provider prompt caching (Anthropic) and local KV
caching (exact prefix cache + CacheBlend chunk cache) on Hugging Face models.
"""

__version__ = "0.1.0"
