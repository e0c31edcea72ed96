"""ragcache: the caching layer for retrieval-augmented generation.

Layers, in the order a request meets them: a semantic response cache, a stable-first prompt
layout, provider prompt caching (Anthropic, OpenAI-compatible servers) and local KV caching
(exact prefix cache + CacheBlend chunk cache) on Hugging Face models. The public names are importable from here;
heavy modules (torch, transformers, FAISS) load on first use of a name that needs them.

    from ragcache import RagCache, LocalBackend, LocalEngine, SemanticCache

    rag = RagCache(LocalBackend(LocalEngine.from_pretrained()), semantic=SemanticCache(None))
    answer = rag.answer("How do I rotate the keys?", documents)
    print(answer.text, answer.layer, answer.usage.reused, answer.ttft_s)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

_EXPORTS = {
    "Answer": "ragcache.pipeline",
    "RagCache": "ragcache.pipeline",
    "Request": "ragcache.pipeline",
    "CacheRequest": "ragcache.request",
    "DEFAULT_SYSTEM": "ragcache.pipeline",
    "Backend": "ragcache.backend",
    "AsyncBackend": "ragcache.backend",
    "BackendResult": "ragcache.backend",
    "CacheUsage": "ragcache.backend",
    "Layer": "ragcache.backend",
    "Block": "ragcache.prompt.layout",
    "PromptLayout": "ragcache.prompt.layout",
    "Segment": "ragcache.prompt.layout",
    "as_document": "ragcache.prompt.layout",
    "SemanticCache": "ragcache.semantic",
    "PartitionKey": "ragcache.semantic",
    "partition_key": "ragcache.semantic",
    "request_partition": "ragcache.request",
    "LocalEngine": "ragcache.engine.engine",
    "LocalBackend": "ragcache.engine.backend",
    "ChunkCache": "ragcache.engine.chunk.cache",
    "MemoryChunkStore": "ragcache.engine.chunk.stores",
    "DiskChunkStore": "ragcache.engine.chunk.stores",
    "AnthropicBackend": "ragcache.providers.anthropic",
    "OpenAIBackend": "ragcache.providers.openai",
    "load_model": "ragcache.models",
    "load_embedder": "ragcache.models",
    "Config": "ragcache.config",
    "Home": "ragcache.home",
}

if TYPE_CHECKING:
    from ragcache.providers.anthropic import AnthropicBackend
    from ragcache.backend import AsyncBackend, Backend, BackendResult, CacheUsage, Layer
    from ragcache.config import Config
    from ragcache.home import Home
    from ragcache.engine.backend import LocalBackend
    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.chunk.stores import DiskChunkStore, MemoryChunkStore
    from ragcache.engine.engine import LocalEngine
    from ragcache.prompt.layout import Block, PromptLayout, Segment, as_document
    from ragcache.models import load_embedder, load_model
    from ragcache.providers.openai import OpenAIBackend
    from ragcache.pipeline import DEFAULT_SYSTEM, Answer, RagCache, Request
    from ragcache.request import CacheRequest, request_partition
    from ragcache.semantic import PartitionKey, SemanticCache, partition_key


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ragcache' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = sorted(_EXPORTS)
