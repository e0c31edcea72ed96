"""Which attention layouts the KV reuse paths support.

The prefix cache and the CacheBlend chunk cache store every position's K/V and splice them
into a full-attention cache. Models whose layers keep only part of the past do not fit:
sliding-window attention (Mistral ``sliding_window``, Gemma 2/3 and Qwen 2 sliding layers),
chunked attention (Llama 4 ``attention_chunk_size``), or any cache layer transformers builds
as something other than a plain full layer (linear attention, state-space layers, shared KV).
For those models :func:`kv_reuse_blocker` names the reason and the engine computes every
request in full (exactly what the model computes without any cache of ours).
"""

from __future__ import annotations

from typing import Any

from ragcache.limits import context_window_of


def kv_reuse_blocker(model: Any) -> str | None:
    """Why prefix / chunk KV reuse cannot be used with ``model``, or ``None`` when it can.

    A sliding window at least as long as the context window never slides and does not block.
    """
    config = model.config
    window = context_window_of(config)
    layer_types = getattr(config, "layer_types", None)
    sliding = getattr(config, "sliding_window", None)
    if getattr(config, "use_sliding_window", True) is False:
        sliding = None  # Qwen 2 style: the window is configured but switched off
    if layer_types:
        kinds = sorted({t for t in layer_types if t != "full_attention"})
        if kinds == ["sliding_attention"] and sliding is not None and sliding >= window:
            kinds = []
        if kinds:
            detail = f" (sliding_window={sliding})" if "sliding_attention" in kinds and sliding else ""
            return f"the model has {', '.join(kinds)} layers{detail}"
    elif sliding is not None and sliding < window:
        return f"the model uses sliding-window attention (sliding_window={sliding})"
    chunk = getattr(config, "attention_chunk_size", None)
    if chunk is not None and chunk < window:
        return f"the model uses chunked attention (attention_chunk_size={chunk})"
    from ragcache.engine import kv

    cache = kv.new_cache(model)
    odd = sorted({type(layer).__name__ for layer in cache.layers if type(layer).__name__ != "DynamicLayer"})
    if odd:
        if odd == ["DynamicSlidingWindowLayer"] and sliding is not None and sliding >= window:
            return None
        return f"transformers builds its KV cache with {', '.join(odd)} layers"
    return None


__all__ = ["kv_reuse_blocker"]
