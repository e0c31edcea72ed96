"""Which attention layouts the KV reuse paths support.

The prefix cache and the CacheBlend chunk cache store every position's K/V and splice them
into a full-attention cache. Models whose layers keep only part of the past do not fit:
sliding-window attention (Mistral ``sliding_window``, Gemma 2/3 and Qwen 2 sliding layers),
chunked attention (Llama 4 ``attention_chunk_size``), or any cache layer transformers builds
as something other than a plain full layer (linear attention, state-space layers, shared KV).
For those models :func:`kv_reuse_blocker` names the reason and the engine computes every
request in full (exactly what the model computes without any cache of ours).

Position encodings whose tables depend on the prompt's length do not fit either as they are. LongRoPE
(Phi-3 / Phi-3.5 / Phi-4-mini ``rope_type="longrope"``, Ding et al. 2024, arXiv 2402.13753) rotates a
forward whose positions end past ``original_max_position_embeddings`` with the long factors and one
that ends before it with the short ones; dynamic NTK scaling rescales the base from some length on.
KV cached by a short prompt and spliced into a long one (or the reverse) is rotated by the wrong
table, and the output is not the model's. :func:`rope_switch` finds such a switch inside the context
window (asking the installed transformers what it computes at both ends of the window). A two-regime
switch (LongRoPE) keys the prefix cache by the regime (:meth:`RopeSwitch.regime`: KV is reused only
between prompts on the same side of the threshold, and the suffix after a hit is computed in one
forward, whose last position decides the table as the full prefill's does) and turns chunk reuse off
(CacheBlend's re-rotation assumes one table); any other length dependence turns prefix and chunk
reuse off (:func:`kv_reuse_blocker`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ragcache.limits import context_window_of


@dataclass(frozen=True, slots=True)
class RopeSwitch:
    """A RoPE whose tables depend on the length of the forward pass, inside the context window.

    Attributes:
        rope_type: the config's ``rope_type`` (``"longrope"``, ``"dynamic"``...).
        threshold: the last length (tokens) of the short regime: a forward whose positions end past it
            uses the other table (LongRoPE's ``original_max_position_embeddings``); ``None`` when the
            table changes with every length (no two regimes to key).
    """

    rope_type: str
    threshold: int | None

    @property
    def keyed(self) -> bool:
        """Whether the regime can key the prefix cache (two regimes split at :attr:`threshold`)."""
        return self.threshold is not None

    def regime(self, length: int) -> str:
        """The regime of a forward whose positions end at ``length`` (tokens): ``"rope:<type>:short"`` or
        ``"rope:<type>:long"``, hashed into the prefix root with the KV salt.

        Raises:
            ValueError: a switch without two regimes (:attr:`keyed` is False)."""
        if self.threshold is None:
            raise ValueError(f"RoPE {self.rope_type!r} has no two regimes to key")
        return f"rope:{self.rope_type}:{'long' if length > self.threshold else 'short'}"

    def describe(self) -> str:
        at = f" at {self.threshold} tokens" if self.threshold is not None else ""
        return f"its RoPE ({self.rope_type!r}) switches tables with the prompt's length{at}"


def rope_switch(model: Any) -> RopeSwitch | None:
    """The length-dependent RoPE of ``model`` inside its context window, or ``None`` (one table for every length).

    The installed transformers is asked for the inverse frequencies at lengths 1 and the context
    window (:func:`ragcache.engine.kv.rope_inv_freq`); when they differ the RoPE switches. LongRoPE
    switches once, after ``original_max_position_embeddings`` (a keyed switch); anything else that
    changes with the length is unkeyed (reuse off).
    """
    from ragcache.engine import kv

    config = model.config
    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, dict):
        return None
    rope_type = str(params.get("rope_type", params.get("type", "default")))
    window = context_window_of(config)
    short, long = kv.rope_inv_freq(config, 1), kv.rope_inv_freq(config, window)
    if short is None or long is None:
        if rope_type in ("longrope", "dynamic"):  # transformers cannot say: assume the worst
            return RopeSwitch(rope_type, None)
        return None
    if short.shape == long.shape and bool((short == long).all()):
        return None
    orig = params.get("original_max_position_embeddings", getattr(config, "original_max_position_embeddings", None))
    if rope_type == "longrope" and isinstance(orig, int) and 0 < orig < window:
        at, past = kv.rope_inv_freq(config, orig), kv.rope_inv_freq(config, orig + 1)
        if at is not None and past is not None and bool((at == short).all()) and bool((past == long).all()):
            return RopeSwitch(rope_type, orig)
    return RopeSwitch(rope_type, None)


def kv_reuse_blocker(model: Any) -> str | None:
    """Why prefix / chunk KV reuse cannot be used with ``model``, or ``None`` when it can.

    A sliding window at least as long as the context window never slides and does not block; nor
    does a RoPE switch that keys the prefix cache by its regime (:func:`rope_switch`).
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
    switch = rope_switch(model)
    if switch is not None and not switch.keyed:
        return f"the model's RoPE ({switch.rope_type!r}) changes its tables with the prompt's length"
    return None


__all__ = ["RopeSwitch", "kv_reuse_blocker", "rope_switch"]
