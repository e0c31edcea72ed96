"""Ranges checked once: the recompute ratio r, a model's context window with its one fallback, and
the floor of a semantic cache threshold, the decode cache backends.

Every entry point that takes an r (``RAGCACHE_RECOMPUTE_RATIO``, ``EngineConfig``, ``LocalEngine``,
``blend_prefill``, the LangChain and LlamaIndex chat models) checks it with
:func:`check_recompute_ratio`; every place that needs a model's context window reads it with
:func:`context_window_of`. Nothing here imports torch or the rest of ragcache (the settings module
uses it).
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

UNKNOWN_CONTEXT_WINDOW = 1 << 62
"""The context window of a model whose config states none (tokens): ragcache sets no limit of its
own, so a prompt too long for such a model fails in the model, not with a guessed bound."""

CONTEXT_WINDOW_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
"""Config attributes that state a model's context window, in the order read (Llama / Qwen / Mistral,
GPT-2, BLOOM-style and ChatGLM-style configs)."""


DECODE_BACKENDS = ("quanto", "hqq", "fp8")
"""The quantized decode cache backends (``EngineConfig.decode_backend``; :mod:`ragcache.engine.quant`),
kept here so a config is checked without importing torch."""


THRESHOLD_FLOOR = 0.5
"""The lowest cosine threshold the hit decision is built for. The word guards look for what makes
two *near* questions different (a number, a negation, a question type, an entity); below this
floor two questions on different topics ("How do I rotate an API key?" / "Where do I find the
on-call calendar?", cosine 0.11 with all-MiniLM-L6-v2) differ in everything and in nothing a guard
names. The CLI refuses a threshold below it (``--allow-low-threshold`` / ``RAGCACHE_ALLOW_LOW_THRESHOLD=1``
to use one anyway); the library warns (:class:`~ragcache.semantic.decision.checks.LowThresholdWarning`); and below it the question-type
guard accepts only the same type of question (:class:`~ragcache.semantic.decision.qtype.QuestionTypeGuard`)."""


def low_threshold_message(t: float, setting: str = "threshold") -> str | None:
    """Why ``t`` (a checked threshold) is below :data:`THRESHOLD_FLOOR`, naming ``setting``; ``None`` at or above it."""
    if t >= THRESHOLD_FLOOR:
        return None
    shown = f"{t:g}"
    if float(shown) != t or shown == "-0":  # ":g" rounds (0.49999999999 -> 0.5): the value as given instead
        shown = repr(float(t))
    return (f"{setting} {shown} is below the floor {THRESHOLD_FLOOR:g}, the lowest the guards are built for: below it "
            f"questions on other topics can pass the threshold (all-MiniLM-L6-v2 puts 'How do I rotate an API key?' "
            f"and 'Where do I find the on-call calendar?' at cosine 0.11) and no guard is built to tell such "
            f"questions apart, so answers to other questions may be served")


def check_recompute_ratio(r: Any, name: str = "recompute_ratio") -> float | None:
    """``r`` as a float in [0, 1] (the CacheBlend recompute ratio, arXiv 2405.16444 section 4.3:
    the fraction of document tokens recomputed per layer), or ``None`` (no ratio given).

    Args:
        r: the value to check.
        name: how the error names the setting (``"RAGCACHE_RECOMPUTE_RATIO"`` for the variable).

    Raises:
        TypeError: ``r`` is not a real number (a bool, a string...).
        ValueError: ``r`` is NaN or outside [0, 1].
    """
    if r is None:
        return None
    if isinstance(r, bool) or not isinstance(r, Real):
        raise TypeError(f"{name} must be a number in [0, 1] (or None), got {type(r).__name__} {r!r}")
    if math.isnan(r) or not 0.0 <= r <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {r}")
    return float(r)


def context_window_of(config: Any) -> int:
    """The context window (tokens) a model config states (:data:`CONTEXT_WINDOW_FIELDS`), else
    :data:`UNKNOWN_CONTEXT_WINDOW`."""
    for field in CONTEXT_WINDOW_FIELDS:
        n = getattr(config, field, None)
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            return n
    return UNKNOWN_CONTEXT_WINDOW




# chunk KV admission and queue bounds (ragcache.engine.chunk.admission / .queue): here so the engine's settings
# read them without importing torch
DEFAULT_ADMISSION = 2
"""Sightings of a document at which its chunk KV is computed: the second request that misses it."""

def check_admission(n: object) -> int:
    """``n`` as a sighting count >= 1. Raises ValueError naming the fix otherwise."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"chunk_admission must be an integer >= 1 (sightings of a document before its chunk KV is "
                         f"computed; 1: every miss, {DEFAULT_ADMISSION}: the second); got {n!r}")
    return n


DEFAULT_QUEUE_DOCS = 64
"""Documents waiting for their chunk KV at most (a 6-document request a second for ~10 s of backlog)."""


def check_queue_docs(n: object) -> int:
    """``n`` as a queue bound >= 0. Raises ValueError naming the fix otherwise."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"chunk_queue must be an integer >= 0 (documents waiting for their chunk KV; 0: compute "
                         f"after each answer on the caller's thread); got {n!r}")
    return n


DEFAULT_CHUNK_BATCH = 1
"""Admitted documents the chunk queue computes in one padded forward pass. 1: one at a time. Measured on CPU
(SmolLM2-135M, one thread, 4 documents of 209-387 tokens after a 218-token stable prefix): 3.8-4.0 CPU s in
one batch against 3.0-3.1 s one at a time; a batch's tokens cost what they cost alone and its padding is extra,
so batching pays only where a forward pass over more rows costs little more (an accelerator)."""


def check_chunk_batch(n: object) -> int:
    """``n`` as a batch size >= 1. Raises ValueError naming the fix otherwise."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"chunk_batch must be an integer >= 1 (admitted documents per padded forward pass; 1: one "
                         f"at a time); got {n!r}")
    return n


__all__ = ["CONTEXT_WINDOW_FIELDS", "DEFAULT_ADMISSION", "DEFAULT_CHUNK_BATCH", "DEFAULT_QUEUE_DOCS", "UNKNOWN_CONTEXT_WINDOW", "check_admission",
           "check_chunk_batch", "check_queue_docs", "check_recompute_ratio", "context_window_of"]
