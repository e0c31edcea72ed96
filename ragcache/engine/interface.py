"""What the rest of ragcache reads of a local engine: :class:`EngineView` (the blend, the calibration and the
decode check), :class:`ServedEngine` (the local servers), :class:`KeyedEngine` (the chunk cache's precompute).

:mod:`ragcache.engine.blend.request` (the blend of one request), :mod:`ragcache.engine.blend.setting`
(settings calibration), :mod:`ragcache.engine.blend.calibration` and :mod:`ragcache.engine.decode_cache`
(the decode check) run forward passes on an engine's model under its lock and read its settings.
They depend on this protocol, never on :class:`~ragcache.engine.engine.LocalEngine`'s private state:
every member here is public on ``LocalEngine`` (an architecture test fails when a module outside
``engine.py`` reads an underscore attribute of an engine). The local servers (:mod:`ragcache.server`) take
any :class:`ServedEngine`; a :class:`~ragcache.engine.engine.LocalEngine` is one.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ragcache.engine.prompt import Prompt
    from ragcache.engine.records import StreamEvent
    from ragcache.engine.request import EngineRequest
    from ragcache.identity import ModelFingerprint


class BlendConfig(Protocol):
    """What the blend reads of an engine's :class:`~ragcache.engine.engine_config.EngineConfig` (which has these
    fields; declared here so that this module imports none of the modules that use it).

    Attributes:
        blend_setting: the configured :class:`~ragcache.engine.blend.setting.BlendSetting`, or ``None`` (the
            caller's r, else the calibration record's setting).
        rank_by: the configured KV selection rule's name, or ``None`` (the calibration record's, else the default).
    """

    blend_setting: Any
    rank_by: str | None


@runtime_checkable
class KeyedEngine(Protocol):
    """What :meth:`ChunkCache.precompute <ragcache.engine.chunk.cache.ChunkCache.precompute>` reads of an engine to
    key a tenant's chunks as its requests will: its model, tokenizer, fingerprint and KV salt. A
    :class:`~ragcache.engine.engine.LocalEngine` is one."""

    model: Any
    tokenizer: Any
    fingerprint: ModelFingerprint

    def kv_salt(self, tenant: str | None = None) -> str | None:
        """The KV salt of a request of ``tenant`` (:func:`ragcache.engine.keys.kv_salt`)."""


class EngineView(Protocol):
    """The public face of a local engine that the blend, the calibration and the decode check use.

    Attributes:
        model: the Llama-family causal LM (adapters unwrapped).
        tokenizer: its tokenizer.
        fingerprint: the model's :class:`~ragcache.identity.ModelFingerprint` (``.digest``: hex str; ``str()``:
            a readable name).
        config: the :class:`~ragcache.engine.engine_config.EngineConfig` (what is read of it: :class:`BlendConfig`).
        chunk_cache: the :class:`~ragcache.engine.chunk.ChunkCache` or ``None`` (no chunk reuse).
        calibration: the model's :class:`~ragcache.engine.blend.calibration.Calibration` record or ``None``.
        reuse_policy: when blending pays (``check_layer`` is read).
        decode: the configured decode cache spec (:class:`~ragcache.engine.decode_cache.DecodeCacheSpec`).
        kv_reuse_blocker: why prefix / chunk KV reuse is off for this model, or ``None``.
    """

    model: Any
    tokenizer: Any
    fingerprint: ModelFingerprint
    config: BlendConfig
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

    def kv_salt(self, tenant: str | None = None) -> str | None:
        """The KV salt of a request of ``tenant`` (``None``: the default tenant, whose salt is the engine's own
        namespace), :func:`ragcache.engine.keys.kv_salt`."""

    def chunks_for(self, tenant: str | None) -> Any:
        """The chunk cache bound to this model under the KV salt of a request of ``tenant``."""


@runtime_checkable
class ServedEngine(Protocol):
    """What the local servers (:mod:`ragcache.server.openai`, :mod:`ragcache.server.anthropic`) read of the
    engine they answer with. :class:`~ragcache.engine.engine.LocalEngine` implements it; a server refuses an
    object that does not (``isinstance(engine, ServedEngine)``, which checks the names only).

    Attributes:
        fingerprint: the model's :class:`~ragcache.identity.ModelFingerprint`: ``name`` (the served model id's
            default), ``digest`` (OpenAI's ``system_fingerprint``), ``str()`` (the model list's display name).
        tokenizer: the model's tokenizer (``decode`` is read: stop sequences in the answer text).
    """

    fingerprint: ModelFingerprint
    tokenizer: Any

    @property
    def context_window(self) -> int:
        """Maximum positions the model supports (tokens): a request's budget and prompt are checked against it."""

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes as content (the Anthropic route's per-block counts)."""

    def build_prompt(self, source: Any) -> Prompt:
        """The :class:`~ragcache.engine.prompt.Prompt` of chat messages (``input_ids`` is read)."""

    def astream(self, prompt: EngineRequest) -> AsyncIterator[StreamEvent]:
        """The request's :class:`~ragcache.engine.records.StreamEvent` s; the last carries the ``Generation``."""


def served_engine(engine: Any, where: str) -> ServedEngine:
    """``engine``, checked once where a server is given it (``where``: the server's name, for the message): a
    :class:`~ragcache.engine.engine.LocalEngine` or any :class:`ServedEngine`.

    Raises:
        TypeError: anything else (the message names the members a server reads).
    """
    if not isinstance(engine, ServedEngine):
        raise TypeError(f"{where} needs a LocalEngine (or an object with every member of "
                        f"ragcache.engine.interface.ServedEngine: fingerprint, tokenizer, context_window, count_tokens, "
                        f"build_prompt, astream), got {type(engine).__name__}: {where}(LocalEngine.from_pretrained())")
    return engine


__all__ = ["BlendConfig", "EngineView", "KeyedEngine", "ServedEngine", "served_engine"]
