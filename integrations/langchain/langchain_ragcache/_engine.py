"""Process-wide engines, and the one mapping from ragcache's records onto LangChain's usage and metadata."""

from __future__ import annotations

import threading
from typing import Any

from langchain_core.messages import UsageMetadata

from ragcache.backend import BackendResult, CacheUsage
from ragcache.engine.engine import LocalEngine
from ragcache.models import DEFAULT_MODEL

TINY_RANDOM_MODEL = "ragcache/tiny-random-llama"
"""Model name of :func:`ragcache.models.tiny_llama` (random weights; for structure-only tests)."""

_ENGINES: dict[tuple, LocalEngine] = {}
_ENGINES_LOCK = threading.Lock()


def shared_engine(model_name: str = DEFAULT_MODEL, *, chunk_cache: bool = True,
                  prefix_cache_bytes: int = 512 << 20) -> LocalEngine:
    """The process-wide :class:`LocalEngine` for a model (loaded on first use, then shared).

    Chat models with the same ``model_name`` / cache settings share one engine and so one
    prefix and chunk cache. ``model_name`` is a local directory, a Hugging Face id in the
    local hub cache, the embedded ``smollm2-135m-instruct``, or ``ragcache/tiny-random-llama``.

    Raises:
        ragcache.models.ModelNotFoundError: the model cannot be found (the message gives the fix).
    """
    key = (model_name, bool(chunk_cache), int(prefix_cache_bytes))
    with _ENGINES_LOCK:
        eng = _ENGINES.get(key)
        if eng is None:
            from ragcache.config import Config
            from ragcache.models import load_model
            from ragcache.testing import tiny_llama

            cfg = Config.from_env()  # this facade reads the RAGCACHE_* settings and passes them down
            cc = None
            if chunk_cache:
                from ragcache.engine.chunk_cache import ChunkCache

                cc = ChunkCache(kv_format=cfg.kv_format, group_size=cfg.kv_group_size)
            loaded = tiny_llama() if model_name == TINY_RANDOM_MODEL else load_model(model_name, home=cfg.paths)
            eng = LocalEngine(loaded, chunk_cache=cc, prefix_cache_bytes=prefix_cache_bytes,
                              decode_cache=cfg.decode_cache, home=cfg.paths)
            _ENGINES[key] = eng
        return eng


def usage_metadata(usage: CacheUsage) -> UsageMetadata:
    """LangChain's ``UsageMetadata`` of a :class:`ragcache.backend.CacheUsage`: the one mapping.

    ``input_tokens`` = prompt tokens, ``output_tokens`` = generated tokens,
    ``input_token_details.cache_read`` = tokens read from a cache (local: prefix and chunk KV
    reused; provider: cache reads), ``cache_creation`` = tokens written to a provider's prompt
    cache (0 for the local engine, whose KV writes cost nothing extra).
    """
    return UsageMetadata(
        input_tokens=int(usage.prompt_tokens),
        output_tokens=int(usage.completion_tokens),
        total_tokens=int(usage.prompt_tokens + usage.completion_tokens),
        input_token_details={"cache_read": int(usage.cache_read), "cache_creation": int(usage.cache_write)},
    )


def ragcache_metadata(result: BackendResult) -> dict[str, Any]:
    """``response_metadata["ragcache"]`` of a backend answer: the layer (:data:`ragcache.backend.Layer`),
    whether it is approximate (CacheBlend) and its recompute ratio, TTFT, the whole
    :class:`~ragcache.backend.CacheUsage` and the engine's details (timings, documents hit / missed)."""
    d = dict(result.details)
    return {
        "layer": result.layer,
        "approximate": result.approximate,
        "recompute_ratio": result.recompute_ratio,
        "ttft_s": result.ttft_s,
        "usage": result.usage.to_dict(),
        "tokens_recomputed": result.usage.recomputed,
        "docs_hit": d.get("docs_hit", 0),
        "docs_missed": d.get("docs_missed", 0),
        "prefill_s": d.get("prefill_s"),
        "decode_s": d.get("decode_s"),
    }
