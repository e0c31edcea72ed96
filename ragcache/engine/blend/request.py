"""How a :class:`~ragcache.engine.engine.LocalEngine` blends one request under its blend setting.

The setting in force (:func:`setting_for`): the engine config's ``blend_setting``; else, when the
caller gave a recompute ratio (config or request), that ratio with the engine's selection rule
and sink-context chunks (the behaviour before settings existed); else the setting the model's
calibration record licenses (:func:`licensed_setting
<ragcache.engine.blend.setting.licensed_setting>`), or none (exact prefill).

The setting decides which chunk KV a request reads and stores (:func:`chunk_view`: the chunk
cache itself, or its view keyed by the request's stable prefix,
:func:`ragcache.engine.blend.setting.context_view`) and what :func:`blend_request` recomputes.
Every blended answer is labelled approximate with the setting's name; a request whose
per-request budget passes its ceiling is recomputed in full and is labelled exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ragcache.engine.blend.setting import BlendSetting, context_view, licensed_setting

if TYPE_CHECKING:
    from ragcache.engine.interface import EngineView


def default_ratio(engine: EngineView) -> float | None:
    """The r a request that gives none blends at (:attr:`LocalEngine.recompute_ratio
    <ragcache.engine.engine.LocalEngine.recompute_ratio>`): the engine's configured r, else its configured
    blend setting's, else its calibration record's; ``None``: exact prefill."""
    if engine.configured_recompute_ratio is not None:
        return engine.configured_recompute_ratio
    configured = engine.config.blend_setting
    if configured is not None:  # a configured blend setting wins over the record
        return configured.recompute_ratio
    cal = engine.calibration
    return cal.recompute_ratio if cal is not None else None


def selection_rule(engine: EngineView) -> str:
    """The name of the KV selection rule a caller's r blends with (:attr:`LocalEngine.rank_by
    <ragcache.engine.engine.LocalEngine.rank_by>`): the config's ``rank_by``, else the calibration record's
    when the engine was given no r, else ``DEFAULT_SELECTION``."""
    from ragcache.engine.blend.selection import resolve_selection

    return resolve_selection(engine.config.rank_by,
                             engine.calibration if engine.configured_recompute_ratio is None else None)


def setting_for(engine: EngineView, r: float | None) -> BlendSetting | None:
    """The blend setting of a request whose ratio is ``r`` (``None``: none given by the caller)."""
    configured = engine.config.blend_setting
    if configured is not None:
        return configured if r is None or r == configured.recompute_ratio else \
            BlendSetting(**{**configured.to_dict(), "recompute_ratio": r, "name": ""})
    if r is not None and (engine.configured_recompute_ratio is not None or engine.calibration is None
                          or engine.calibration.recompute_ratio != r):
        return BlendSetting(recompute_ratio=r, rank_by=engine.rank_by)
    return licensed_setting(engine.calibration)


def blend_name(engine: EngineView, r: float | None = None, use_chunk_cache: bool | None = None) -> str | None:
    """The name of the blend setting a request with ratio ``r`` (``None``: the engine's) blends at, or
    ``None`` when it is prefilled exactly whatever the caches hold (no chunk cache, chunk reuse off,
    attention the caches do not support, no ratio and no licensing record). What a request allows:
    a stored answer made at this setting may be served to it (:func:`ragcache.provenance.may_serve`).
    Mirrors :meth:`LocalEngine.prefill <ragcache.engine.engine.LocalEngine.prefill>` and :func:`blend_request`."""
    if engine.chunk_cache is None or use_chunk_cache is False or engine.kv_reuse_blocker:
        return None
    r = engine.recompute_ratio if r is None else r
    if r is None:
        return None
    return (setting_for(engine, r) or BlendSetting(recompute_ratio=r, rank_by=engine.rank_by)).name


def chunk_view(engine: EngineView, ids: Sequence[int], spans: Sequence[tuple[int, int]], r: float | None,
               tenant: str | None = None) -> Any:
    """The bound chunk cache this request reads and stores its documents' chunk KV in: the engine's
    chunk cache under the KV salt of the request's ``tenant`` (``engine.chunks_for``), in the chunk
    context of the blend setting (BOS sink, or the request's stable prefix)."""
    setting = setting_for(engine, r)
    return context_view(engine.chunks_for(tenant), ids, spans, setting.chunk_context if setting else "sink")


def blend_request(engine: EngineView, ids: list[int], p: int, cache: Any, plan: Any, r: float, stats: Any
                  ) -> tuple[Any, int, Any]:
    """Blend the chunk hits of ``plan`` into the request (``blend_prefill``); fills ``stats``.

    Returns ``(last logits float32 [vocab], exact_upto, cache)``: ``exact_upto`` is the first hit
    document's start (everything before it is exact), or ``len(ids)`` when the setting's ceiling
    sent the request to a full recomputation.
    """
    from ragcache.engine.blend.prefill import blend_prefill

    setting = setting_for(engine, r) or BlendSetting(recompute_ratio=r, rank_by=engine.rank_by)
    kwargs = setting.blend_kwargs()
    kwargs["recompute_ratio"] = r
    if plan.hits[-1][1] >= len(ids):  # query rules need a question after the last document
        kwargs.update(rank_by="deviation", doc_top=0, mass_bound=None, max_share=None, query_layers=None)
    res = blend_prefill(engine.model, ids, prefix_len=p, prefix_cache=cache if p else None,
                        doc_spans=[(s, e) for s, e, _ in plan.hits], chunk_kvs=[c for _, _, c in plan.hits],
                        check_layer=engine.reuse_policy.check_layer, **kwargs)
    stats.recompute_ratio = r
    stats.tokens_recomputed = res.tokens_recomputed
    stats.prefill_tokens_computed = len(res.selected)
    if res.exact:
        stats.approximate = False
        stats.chunk_tokens_reused = 0
        stats.reuse_decision = f"{stats.reuse_decision}; {setting.name}: past its ceiling, every token recomputed (exact)"
        return res.last_logits.float(), len(ids), res.cache
    stats.approximate = True
    stats.blend_setting = setting.name
    stats.chunk_tokens_reused = res.chunk_tokens_reused
    return res.last_logits.float(), plan.hits[0][0], res.cache


__all__ = ["blend_name", "blend_request", "chunk_view", "default_ratio", "selection_rule", "setting_for"]
