"""The engine's records: what one request cost and produced (:class:`RequestStats`, :class:`Generation`,
:class:`StreamEvent`, :class:`PrefillResult`) and the context-window error. Times in seconds, counts in
tokens. :func:`ragcache.engine.backend.result_of` maps them onto the shared
:class:`ragcache.backend.BackendResult`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch


class ContextWindowError(ValueError):
    """The prompt (plus the tokens to generate) does not fit the model's context window."""


@dataclass(slots=True)
class RequestStats:
    """What one request cost and what the caches saved. Times in seconds, counts in tokens.

    ``approximate`` is True when document KV from the chunk cache was blended (CacheBlend) or
    the answer was decoded from a quantized KV cache (``decode_cache`` is then its format tag,
    else ``"dynamic"``): the answer may then differ from exact prefill and decoding;
    ``recompute_ratio`` is the r used for blending and ``None`` without it; ``blend_setting`` names the
    blend setting (rule, budget, chunk context) of a blended answer. ``reuse_decision`` says why the path was taken.
    ``chunk_store_s`` is the time the request spent computing and storing missed documents' chunk KV on
    its own thread: 0 with the engine's chunk queue (computed in the background), after the answer with
    ``chunk_queue=0``.
    """

    prompt_tokens: int = 0
    prefill_tokens_computed: int = 0
    prefill_tokens_reused: int = 0
    prefix_tokens_reused: int = 0
    chunk_tokens_reused: int = 0
    tokens_recomputed: int = 0
    docs_hit: int = 0
    docs_missed: int = 0
    recompute_ratio: float | None = None
    approximate: bool = False
    blend_setting: str | None = None  # the blend setting's name when blended (BlendSetting.name)
    decode_cache: str = "dynamic"
    reuse_decision: str = ""
    chunk_store_s: float = 0.0
    ttft_s: float = 0.0
    prefill_s: float = 0.0
    decode_tokens: int = 0
    decode_s: float = 0.0
    decode_tokens_per_s: float = 0.0
    finish_reason: str = "length"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True)
class Generation:
    """Result of :meth:`LocalEngine.generate`.

    Attributes:
        text: decoded answer (stop string removed).
        token_ids: generated ids.
        stats: timings and cache accounting.
        first_logits: float32 ``[vocab]`` logits that produced the first token.
    """

    text: str
    token_ids: list[int]
    stats: RequestStats
    first_logits: torch.Tensor | None = field(default=None, repr=False)


@dataclass(slots=True)
class StreamEvent:
    """One streamed delta; ``generation`` is set on the final event only. ``stats`` is set on the first
    event: the request's :class:`RequestStats`, whose prefill part (prompt, reused, recomputed tokens,
    approximate) is final by then, so a server can send headers before decoding ends."""

    text: str
    token_id: int | None = None
    generation: Generation | None = None
    stats: RequestStats | None = None


@dataclass(slots=True)
class PrefillResult:
    """Result of :meth:`LocalEngine.prefill`; ``missed_docs`` are the token ids of documents whose
    chunk KV is not stored yet (see :meth:`LocalEngine.store_chunks`)."""

    cache: Any
    last_logits: torch.Tensor
    stats: RequestStats
    exact_upto: int
    missed_docs: list[list[int]] = field(default_factory=list)
    chunk_view: Any = None  # the chunk cache view (chunk context) the request's documents are read from / stored in


__all__ = ["ContextWindowError", "Generation", "PrefillResult", "RequestStats", "StreamEvent"]
