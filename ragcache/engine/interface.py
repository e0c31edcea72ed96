"""What the blend, the calibration and the decode check read of an engine: :class:`EngineView`.

:mod:`ragcache.engine.blend.request` (the blend of one request), :mod:`ragcache.engine.blend.setting`
(settings calibration), :mod:`ragcache.engine.blend.calibration` and :mod:`ragcache.engine.decode_cache`
(the decode check) run forward passes on an engine's model under its lock and read its settings.
They depend on this protocol, never on :class:`~ragcache.engine.engine.LocalEngine`'s private state:
every member here is public on ``LocalEngine`` (an architecture test fails when a module outside
``engine.py`` reads an underscore attribute of an engine).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol


class EngineView(Protocol):
    """The public face of a local engine that the blend, the calibration and the decode check use.

    Attributes:
        model: the Llama-family causal LM (adapters unwrapped).
        tokenizer: its tokenizer.
        fingerprint: the model's identity (``.digest``: hex str; ``str()``: a readable name).
        namespace: the engine's own namespace, in every KV salt (``None``: none).
        config: the :class:`~ragcache.engine.engine_config.EngineConfig` (``blend_setting`` is read).
        chunk_cache: the :class:`~ragcache.engine.chunk.ChunkCache` or ``None`` (no chunk reuse).
        calibration: the model's :class:`~ragcache.engine.blend.calibration.Calibration` record or ``None``.
        reuse_policy: when blending pays (``check_layer`` is read).
        decode: the configured decode cache spec (:class:`~ragcache.engine.decode_cache.DecodeCacheSpec`).
        kv_reuse_blocker: why prefix / chunk KV reuse is off for this model, or ``None``.
    """

    model: Any
    tokenizer: Any
    fingerprint: Any
    namespace: str | None
    config: Any
    chunk_cache: Any
    calibration: Any
    reuse_policy: Any
    decode: Any
    kv_reuse_blocker: str | None

    @property
    def lock(self) -> threading.RLock:
        """Held for every forward pass over :attr:`model` and every cache write."""

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """Token ids that end an answer."""

    @property
    def recompute_ratio(self) -> float | None:
        """The r a request that gives none blends at (``None``: exact prefill)."""

    @property
    def configured_recompute_ratio(self) -> float | None:
        """The r the engine was given (not one taken from a setting or record), or ``None``."""

    @property
    def rank_by(self) -> str:
        """The name of the KV selection rule a caller's r blends with (:mod:`ragcache.engine.blend.rules`)."""

    def build_prompt(self, source: Any) -> Any:
        """The :class:`~ragcache.engine.prompt.Prompt` of a messages list, layout, prompt or string."""

    def chunks_for(self, tenant: str | None) -> Any:
        """The chunk cache bound to this model under the KV salt of a request of ``tenant``."""


__all__ = ["EngineView"]
