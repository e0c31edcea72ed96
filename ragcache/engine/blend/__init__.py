"""Chunk KV reuse at any position: CacheBlend-style blending of independently cached documents.

- :mod:`~ragcache.engine.blend.prefill`: :func:`blend_prefill`, the fused prefill with selective recomputation
  (CacheBlend, Yao et al. 2024, §4).
- :mod:`~ragcache.engine.blend.selection` and :mod:`~ragcache.engine.blend.hkvd`: which tokens are recomputed.
- :mod:`~ragcache.engine.blend.layers`: one decoder layer run by hand for a subset of positions.
- :mod:`~ragcache.engine.blend.setting`: a named :class:`~ragcache.engine.blend.setting.BlendSetting` and its
  calibration; :mod:`~ragcache.engine.blend.calibration`: the per-model record that licenses one.
- :mod:`~ragcache.engine.blend.reuse`: when blending pays; :mod:`~ragcache.engine.blend.request`: how a
  :class:`~ragcache.engine.engine.LocalEngine` blends one request.
"""

from __future__ import annotations

from ragcache.engine.blend.prefill import (
    BlendResult,
    Deviation,
    blend_prefill,
    select_hkvd,
)

__all__ = ["BlendResult", "Deviation", "blend_prefill", "select_hkvd"]
