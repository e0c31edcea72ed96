"""Chunk KV reuse at any position: CacheBlend-style blending of independently cached documents.

- :mod:`~ragcache.engine.blend.prefill`: :func:`blend_prefill`, the fused prefill with selective recomputation
  (CacheBlend, Yao et al. 2024, §4).
- :mod:`~ragcache.engine.blend.rules`: the KV selection rules, one table (``SELECTION_RULES``);
  :mod:`~ragcache.engine.blend.selection` and :mod:`~ragcache.engine.blend.hkvd`: how they rank tokens.
- :mod:`~ragcache.engine.blend.layers`: one decoder layer run by hand for a subset of positions.
- :mod:`~ragcache.engine.blend.setting`: a named :class:`~ragcache.engine.blend.setting.BlendSetting` and its
  calibration; :mod:`~ragcache.engine.blend.calibration`: the per-model record that licenses one.
- :mod:`~ragcache.engine.blend.reuse`: when blending pays; :mod:`~ragcache.engine.blend.request`: how a
  :class:`~ragcache.engine.engine.LocalEngine` blends one request.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BlendResult", "Deviation", "blend_prefill", "select_hkvd"]


def __getattr__(name: str) -> Any:
    """The blend's public names, imported on first use: the rule table (:mod:`~ragcache.engine.blend.rules`)
    is read by the command-line help without importing torch."""
    if name in __all__:
        from ragcache.engine.blend import prefill

        return getattr(prefill, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
