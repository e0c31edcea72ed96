"""A local engine's answer identity before its model is loaded: :class:`PredictedEngine`.

A semantic hit needs no model, only what answers are keyed by: the model's fingerprint and, to serve a
stored blended answer, the blend setting the engine answers at. For the embedded model both are known
before its conversion (:func:`ragcache.models.model_fingerprint`: a ``source:`` revision; the setting
from the calibration record of that identity), so an entry point keys its lookup by the prediction and
loads the model only on a miss. The loaded engine must carry the predicted fingerprint
(:meth:`PredictedEngine.check`), else its answer would be stored for another model.

Used by :class:`ragcache.app.runtime.LazyLocalBackend` (``ragcache ask``), LangChain's ``ChatRagCache``
and LlamaIndex's ``RagCacheLLM`` at their defaults.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from ragcache.engine.engine_config import EngineConfig
    from ragcache.home import Home
    from ragcache.identity import ModelFingerprint

_UNREAD = object()


def check_prediction(predicted: str, loaded: str) -> None:
    """Check a loaded model's identity against the one a lookup was keyed by.

    Args:
        predicted: the digest the lookup used (:attr:`PredictedEngine.digest`, or an identity built on it).
        loaded: the same identity read from the loaded engine.

    Raises:
        RuntimeError: they differ: the model folder changed since the lookup, so this request's answer
            would be stored for another model.
    """
    if loaded != predicted:
        raise RuntimeError(f"loaded model {loaded[:12]} is not the predicted {predicted[:12]}: the model folder "
                           "changed since the lookup (another process converted the embedded model with other "
                           "library versions, or the weights were edited), so this request's answer would be "
                           "stored for another model; run it again")


class PredictedEngine:
    """What a :class:`~ragcache.engine.engine.LocalEngine` on a model not loaded yet answers as.

    It holds the members of :class:`~ragcache.engine.interface.EngineView` that the blend setting's rule
    reads (:func:`ragcache.engine.blend.request.blend_name`), so :meth:`blend_setting_name` names the
    setting the engine will name, by the same rule, with no model loaded. The calibration record is read
    on first use, as the engine reads it (:func:`ragcache.engine.blend.calibration.model_calibration`).
    ``kv_reuse_blocker`` is ``None``: a model whose attention the KV caches do not support never blends,
    so no blended answer is stored under its fingerprint for a predicted setting to match.

    Args:
        fingerprint: the predicted identity (:func:`ragcache.models.model_fingerprint`).
        home: the ragcache home the model is converted and its calibration record kept under.
        chunk_cache: whether the engine is built with a chunk cache (without one nothing blends).
        recompute_ratio / rank_by: the engine's configured r and selection rule
            (:class:`~ragcache.engine.engine_config.EngineConfig`'s; ``None``: the calibration record's).
    """

    kv_reuse_blocker: str | None = None

    def __init__(self, fingerprint: ModelFingerprint, *, home: Home | str | Path | None = None,
                 chunk_cache: bool = True, recompute_ratio: float | None = None, rank_by: str | None = None) -> None:
        self.fingerprint = fingerprint
        self.home = home
        self.chunk_cache = True if chunk_cache else None
        self._settings = {"recompute_ratio": recompute_ratio, "rank_by": rank_by, "home": home}
        self._config: EngineConfig | None = None
        self._calibration: Any = _UNREAD

    @classmethod
    def of(cls, model: str | None = None, *, home: Home | str | Path | None = None, setting: str = "--model",
           **engine: Any) -> PredictedEngine | None:
        """The prediction for ``model`` (``None``: the embedded model), or ``None`` when its identity is known
        only once loaded (a hub id, an adapter folder; :func:`ragcache.models.model_fingerprint`).
        ``engine``: the other constructor arguments. Reads no weights and imports no torch."""
        from ragcache.models import model_fingerprint

        fp = model_fingerprint(model, home=home, setting=setting)
        return None if fp is None else cls(fp, home=home, **engine)

    @property
    def digest(self) -> str:
        """The predicted fingerprint's digest (what ``LocalEngine.fingerprint.digest`` will be)."""
        return self.fingerprint.digest

    @property
    def config(self) -> EngineConfig:
        """The :class:`~ragcache.engine.engine_config.EngineConfig` the engine is predicted to have."""
        if self._config is None:
            from ragcache.engine.engine_config import EngineConfig

            self._config = EngineConfig(**self._settings)
        return self._config

    @property
    def calibration(self) -> Any:
        """The calibration record the engine will load for the predicted identity, or ``None``."""
        if self._calibration is _UNREAD:
            from ragcache.engine.blend.calibration import model_calibration

            self._calibration = model_calibration(self.fingerprint, self.home)
        return self._calibration

    @property
    def configured_recompute_ratio(self) -> float | None:
        return self._settings["recompute_ratio"]

    @property
    def recompute_ratio(self) -> float | None:
        from ragcache.engine.blend.request import default_ratio

        return default_ratio(self)

    @property
    def rank_by(self) -> str:
        from ragcache.engine.blend.request import selection_rule

        return selection_rule(self)

    def blend_setting_name(self, recompute_ratio: float | None = None, use_chunk_cache: bool | None = None) -> str | None:
        """:meth:`LocalEngine.blend_setting_name <ragcache.engine.engine.LocalEngine.blend_setting_name>` of the
        predicted engine (``None``: exact prefill)."""
        from ragcache.engine.blend.request import blend_name

        return blend_name(self, recompute_ratio, use_chunk_cache)

    def check(self, loaded: str) -> None:
        """:func:`check_prediction` of :attr:`digest` against ``loaded``, the loaded engine's digest.

        Raises:
            RuntimeError: they differ.
        """
        check_prediction(self.digest, loaded)


__all__ = ["PredictedEngine", "check_prediction"]
