"""EngineConfig: every setting of a :class:`~ragcache.engine.engine.LocalEngine` in one record.

Values are checked when the record is built (``ValueError`` naming the field), so a bad setting
fails before a model is loaded. Nothing here reads the environment: the app layer passes the
``RAGCACHE_*`` settings (:class:`ragcache.config.Config`) as these fields.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragcache.engine.blend.reuse import ReusePolicy
from ragcache.engine.prompt import TemplateDate, resolve_template_date
from ragcache.home import Home
from ragcache.limits import (
    DECODE_BACKENDS,
    DEFAULT_ADMISSION,
    DEFAULT_CHUNK_BATCH,
    DEFAULT_QUEUE_DOCS,
    check_admission,
    check_chunk_batch,
    check_queue_docs,
    check_recompute_ratio,
)

if TYPE_CHECKING:
    from ragcache.engine.blend.calibration import Calibration
    from ragcache.engine.blend.setting import BlendSetting


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Settings of a local engine (see :class:`~ragcache.engine.engine.LocalEngine` for each field).

    Attributes:
        prefix_cache_bytes: byte budget of the exact prefix KV cache (bytes, >= 1).
        block_size: prefix-cache block size (tokens, >= 1).
        recompute_ratio: the blend's r in [0, 1]; ``None``: the model's calibration record, else exact prefill.
        rank_by: the name of the blend's KV selection rule (a serving rule of
            :data:`ragcache.engine.blend.rules.SELECTION_RULES`); ``None``: the calibration record's rule,
            else :data:`ragcache.engine.blend.selection.DEFAULT_SELECTION`.
        selection: deprecated name of ``rank_by`` (accepted with a ``DeprecationWarning``).
        namespace: cache salt; KV never crosses namespaces.
        share_kv_across_namespaces: let requests of different namespaces (tenants) reuse each other's
            prefix and chunk KV (default False: a request's namespace salts its KV keys; sharing lets a
            tenant learn from cached-token counts and time-to-first-token what another sent,
            :mod:`ragcache.engine.keys`).
        reuse_policy / min_reuse_tokens: the rule that chooses blending or exact prefill (one of them).
        calibration: ``True`` (load the recorded one), ``False`` / ``None`` (ignore), or a Calibration.
        template_date: the date a clock-reading chat template renders (``"live"``: the real clock).
        decode_cache: ``"dynamic"`` or ``"quantized"`` (``None``: ``"dynamic"``).
        decode_backend / decode_nbits / residual_length / decode_sink_tokens: the quantized decode
            cache's backend, bits, and the recent and first (attention sink) tokens kept in full precision.
        home: the ragcache home the calibration and decode-check records are read from (a
            :class:`~ragcache.home.Home` or folder; ``None``: ``~/.cache/ragcache``).
        blend_setting: a :class:`~ragcache.engine.blend.setting.BlendSetting` (rule, budget, chunk
            context) that wins over the calibration record's; ``None``: the record's licensed setting.
        chunk_admission: requests that must miss a document before its chunk KV is computed (>= 1; default
            2, the second: a document seen once costs nothing, :mod:`ragcache.engine.chunk.admission`).
        chunk_queue: documents waiting for their chunk KV in the background queue (>= 0; default 64, more
            are dropped; 0: computed after each answer on the request's thread,
            :mod:`ragcache.engine.chunk.queue`).
        chunk_batch: admitted documents of one chunk context the queue computes in one right-padded forward
            pass (>= 1; default 1, one at a time: on CPU a batch costs its padding and saves nothing,
            :data:`~ragcache.limits.DEFAULT_CHUNK_BATCH`).

    Raises:
        ValueError: a value out of range, or both ``reuse_policy`` and ``min_reuse_tokens``.
    """

    prefix_cache_bytes: int = 512 << 20
    block_size: int = 16
    recompute_ratio: float | None = None
    selection: str | None = None
    namespace: str | None = None
    share_kv_across_namespaces: bool = False
    reuse_policy: ReusePolicy | None = None
    min_reuse_tokens: int | None = None
    calibration: bool | Calibration | None = True
    template_date: TemplateDate | None = None
    decode_cache: str | None = None
    decode_backend: str = "quanto"
    decode_nbits: int = 4
    residual_length: int = 128
    decode_sink_tokens: int = 0
    home: Home | str | Path | None = None
    blend_setting: BlendSetting | None = None
    rank_by: str | None = None  # the fields before it keep their positions
    chunk_admission: int = DEFAULT_ADMISSION
    chunk_queue: int = DEFAULT_QUEUE_DOCS
    chunk_batch: int = DEFAULT_CHUNK_BATCH

    def __post_init__(self) -> None:
        check_recompute_ratio(self.recompute_ratio)
        if self.blend_setting is not None and type(self.blend_setting).__name__ != "BlendSetting":
            raise TypeError(f"blend_setting must be a BlendSetting or None; got {type(self.blend_setting).__name__}")
        if self.selection is not None:
            warnings.warn("EngineConfig(selection=...) is deprecated: the selection rule's name is rank_by=... "
                          "(ragcache.engine.blend.rules)", DeprecationWarning, stacklevel=3)
            if self.rank_by is not None and self.rank_by != self.selection:
                raise ValueError(f"selection={self.selection!r} (deprecated) and rank_by={self.rank_by!r} disagree: "
                                 "give rank_by only")
            object.__setattr__(self, "rank_by", self.selection)
            object.__setattr__(self, "selection", None)
        if self.rank_by is not None:
            from ragcache.engine.blend.rules import check_serving_rule

            check_serving_rule(self.rank_by)
        if not isinstance(self.share_kv_across_namespaces, bool):
            raise TypeError(f"share_kv_across_namespaces must be True or False, got {self.share_kv_across_namespaces!r}")
        if self.reuse_policy is not None and self.min_reuse_tokens is not None:
            raise ValueError("give reuse_policy or min_reuse_tokens, not both")
        if self.prefix_cache_bytes < 1 or self.block_size < 1:
            raise ValueError(f"prefix_cache_bytes and block_size must be >= 1, got {self.prefix_cache_bytes} "
                             f"and {self.block_size}")
        decode_cache = (self.decode_cache or "dynamic").strip().lower()
        if decode_cache not in ("dynamic", "quantized"):
            raise ValueError(f"decode_cache must be 'dynamic' or 'quantized'; got {decode_cache!r}")
        object.__setattr__(self, "decode_cache", decode_cache)
        if self.decode_backend not in DECODE_BACKENDS:
            raise ValueError(f"decode_backend must be one of {DECODE_BACKENDS}; got {self.decode_backend!r}")
        resolve_template_date(self.template_date)  # bad values fail here, not on the first request
        check_admission(self.chunk_admission)
        check_queue_docs(self.chunk_queue)
        check_chunk_batch(self.chunk_batch)

    @classmethod
    def of(cls, config: EngineConfig | None = None, **overrides: Any) -> EngineConfig:
        """``config`` (default: all defaults) with ``overrides`` applied.

        Raises:
            TypeError: an override that is not an EngineConfig field (named).
            ValueError: as the constructor.
        """
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise TypeError(f"LocalEngine got unexpected keyword arguments {unknown}; settings are {sorted(names)}")
        return replace(config, **overrides) if config is not None else cls(**overrides)

    @property
    def reuse(self) -> ReusePolicy:
        """The reuse policy in force (``reuse_policy``, else one built from ``min_reuse_tokens``)."""
        return self.reuse_policy or ReusePolicy(min_reuse_tokens=self.min_reuse_tokens)


__all__ = ["EngineConfig"]
