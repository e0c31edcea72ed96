"""Process-wide engines, and ragcache's record of a local answer as LangChain response metadata
(usage: :mod:`langchain_ragcache.usage`)."""

from __future__ import annotations

import threading
from typing import Any

from ragcache.backend import BackendResult
from ragcache.engine.engine import LocalEngine
from ragcache.models import DEFAULT_MODEL

TINY_RANDOM_MODEL = "ragcache/tiny-random-llama"
"""Model name of :func:`ragcache.testing.tiny_llama` (random weights; for structure-only tests)."""

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
    key = _engine_key(model_name, chunk_cache, prefix_cache_bytes)
    with _ENGINES_LOCK:
        eng = _ENGINES.get(key)
        if eng is None:
            from ragcache.config import Config
            from ragcache.models import load_model
            from ragcache.testing import tiny_llama

            cfg = Config.from_env()  # this facade reads the RAGCACHE_* settings and passes them down
            cc = None
            if chunk_cache:
                from ragcache.engine.chunk.cache import ChunkCache

                cc = ChunkCache(kv_format=cfg.kv_format, group_size=cfg.kv_group_size)
            # wide init: the random model writes varied text (a blank answer is never stored, and the
            # default init writes only newlines)
            loaded = tiny_llama(seed=1, initializer_range=0.2) if model_name == TINY_RANDOM_MODEL else load_model(model_name, home=cfg.paths)
            eng = LocalEngine(loaded, chunk_cache=cc, prefix_cache_bytes=prefix_cache_bytes,
                              decode_cache=cfg.decode_cache, home=cfg.paths)
            _ENGINES[key] = eng
        return eng


def loaded_engine(model_name: str = DEFAULT_MODEL, *, chunk_cache: bool = True,
                  prefix_cache_bytes: int = 512 << 20) -> LocalEngine | None:
    """The process-wide engine :func:`shared_engine` returns for these settings when it is loaded already,
    else ``None`` (nothing is loaded)."""
    with _ENGINES_LOCK:
        return _ENGINES.get(_engine_key(model_name, chunk_cache, prefix_cache_bytes))


def _engine_key(model_name: str, chunk_cache: bool, prefix_cache_bytes: int) -> tuple:
    return model_name, bool(chunk_cache), int(prefix_cache_bytes)


def ragcache_metadata(result: BackendResult) -> dict[str, Any]:
    """``response_metadata["ragcache"]`` of a backend answer: the layer (:data:`ragcache.backend.Layer`),
    why it ended (:data:`ragcache.backend.FinishReason`), whether it is approximate (CacheBlend) with its blend
    setting and recompute ratio, TTFT, the whole
    :class:`~ragcache.backend.CacheUsage` and the engine's details (timings, documents hit / missed)."""
    d = dict(result.details)
    return {
        "layer": result.layer,
        "finish_reason": result.finish_reason,
        "approximate": result.approximate,
        "recompute_ratio": result.recompute_ratio,
        "blend_setting": result.blend_setting,
        "ttft_s": result.ttft_s,
        "usage": result.usage.to_dict(),
        "tokens_recomputed": result.usage.recomputed,
        "docs_hit": d.get("docs_hit", 0),
        "docs_missed": d.get("docs_missed", 0),
        "prefill_s": d.get("prefill_s"),
        "decode_s": d.get("decode_s"),
    }
