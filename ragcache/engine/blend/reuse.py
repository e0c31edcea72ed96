"""When chunk KV reuse pays: the chunk lookups of one request and the cost rule that picks blending.

CacheBlend (Yao et al., EuroSys 2025, arXiv 2405.16444, §4-5) trades exactness for prefill time:
reused document tokens are computed only at layers ``0 .. check_layer`` and, for the
``r`` share of them with the largest KV deviation, at every layer. Where few tokens are
reused the saving is a few milliseconds and the answer is still approximate, so a request is
blended only when the predicted saving is worth it; everything else takes the exact path
(full prefill after the exact prefix hit), where a missed document is computed in the
request's own context like any other token.

Cost rule (:meth:`ReusePolicy.decide`): with ``R`` reusable tokens (documents found in the
chunk cache), ``L`` layers, check layer ``c`` and recompute ratio ``r``, blending skips about
``R * (1 - r) * (L - 1 - c) / L`` token-layers of work, i.e. that many tokens of prefill at
the measured exact prefill rate (tokens/s). Blend iff ``R >= threshold``, where the threshold is
``min_reuse_tokens`` when configured, else the ``R`` that saves ``min_saving_s`` seconds at the
measured rate (``fallback_min_tokens`` before any rate is known).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class ReuseDecision:
    """Outcome of the cost rule. ``threshold`` is in reusable tokens (``None`` when blending is off)."""

    blend: bool
    reusable_tokens: int
    threshold: int | None
    reason: str


@dataclass(slots=True)
class ReusePolicy:
    """The cost rule that chooses exact prefill or CacheBlend for one request.

    Args:
        min_reuse_tokens: a fixed threshold in reusable document tokens; ``None`` derives it
            from the measured prefill rate and ``min_saving_s``. ``0`` blends whenever a
            document hits (tests, benchmarks).
        min_saving_s: the prefill time (seconds) blending must be predicted to save.
        fallback_min_tokens: the threshold while no prefill rate has been measured yet.
        check_layer: CacheBlend's check layer (layers ``0..check_layer`` are computed in full).

    Raises:
        ValueError: negative thresholds.
    """

    min_reuse_tokens: int | None = None
    min_saving_s: float = 0.1
    fallback_min_tokens: int = 256
    check_layer: int = 1

    def __post_init__(self) -> None:
        if (self.min_reuse_tokens is not None and self.min_reuse_tokens < 0) or self.min_saving_s < 0 \
                or self.fallback_min_tokens < 0:
            raise ValueError("min_reuse_tokens, min_saving_s and fallback_min_tokens must be >= 0")

    def threshold(self, rate: float | None, recompute_ratio: float, n_layers: int) -> int | None:
        """Reusable tokens needed to blend; ``None`` when blending can save nothing (r = 1, or no
        layer after the check layer)."""
        share = (1.0 - recompute_ratio) * max(n_layers - 1 - self.check_layer, 0) / max(n_layers, 1)
        if share <= 0:
            return None
        if self.min_reuse_tokens is not None:
            return self.min_reuse_tokens
        if not rate:
            return self.fallback_min_tokens
        return math.ceil(self.min_saving_s * rate / share)

    def decide(self, reusable_tokens: int, *, rate: float | None, recompute_ratio: float,
               n_layers: int) -> ReuseDecision:
        """Blend or not, for ``reusable_tokens`` tokens of chunk-cache hits."""
        if reusable_tokens == 0:
            return ReuseDecision(False, 0, None, "no chunk hit: exact prefill")
        t = self.threshold(rate, recompute_ratio, n_layers)
        if t is None:
            return ReuseDecision(False, reusable_tokens, None,
                                 f"r={recompute_ratio:g} saves nothing: exact prefill")
        if reusable_tokens < t:
            return ReuseDecision(False, reusable_tokens, t,
                                 f"{reusable_tokens} reusable tokens < threshold {t}: exact prefill")
        return ReuseDecision(True, reusable_tokens, t, f"{reusable_tokens} reusable tokens >= threshold {t}: blend")


@dataclass(slots=True)
class PrefillRate:
    """Exponential moving average of the exact prefill rate (computed tokens per second).

    Only prefills of at least ``min_tokens`` tokens count (short ones are dominated by fixed
    per-call costs).
    """

    alpha: float = 0.3
    min_tokens: int = 64
    value: float | None = None
    samples: int = 0

    def update(self, tokens: int, seconds: float) -> None:
        if tokens < self.min_tokens or seconds <= 0:
            return
        x = tokens / seconds
        self.value = x if self.value is None else (1 - self.alpha) * self.value + self.alpha * x
        self.samples += 1
