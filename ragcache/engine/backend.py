"""The local engine as a pipeline backend, and the one rule for which layer served a local answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ragcache.backend import BackendResult, CacheUsage, Layer
from ragcache.engine.request import EngineRequest, engine_request

if TYPE_CHECKING:
    from ragcache.engine.engine import LocalEngine, PromptSource


def layer_of(prefix_reused: int, chunk_reused: int) -> Layer:
    """Which local layer served a prefill: ``prefix`` / ``chunk`` / ``prefix+chunk`` by which caches
    supplied reused tokens (counts in tokens), else ``model``. A chunk-cache miss reuses nothing,
    so a cold request is ``model`` whatever caches are attached."""
    parts = [name for name, n in (("prefix", prefix_reused), ("chunk", chunk_reused)) if n > 0]
    return "+".join(parts) or "model"  # type: ignore[return-value]


def usage_of(stats: Any) -> CacheUsage:
    """:class:`CacheUsage` of a :class:`~ragcache.engine.engine.RequestStats`."""
    return CacheUsage.local(prompt_tokens=stats.prompt_tokens, prefix_reused=stats.prefix_tokens_reused,
                            chunk_reused=stats.chunk_tokens_reused, recomputed=stats.tokens_recomputed,
                            completion_tokens=stats.decode_tokens)


def result_of(generation: Any) -> BackendResult:
    """:class:`BackendResult` of a :class:`~ragcache.engine.engine.Generation`: the one mapping from
    the engine's stats to the shared record, used by every entry point."""
    s = generation.stats
    approximate = bool(s.approximate)
    return BackendResult(
        text=generation.text, layer=layer_of(s.prefix_tokens_reused, s.chunk_tokens_reused), usage=usage_of(s),
        ttft_s=s.ttft_s, finish_reason=s.finish_reason, approximate=approximate,
        recompute_ratio=s.recompute_ratio if approximate else None, details=s.to_dict(),
        blend_setting=s.blend_setting if approximate else None)


class LocalBackend:
    """The local transformers engine as a backend.

    Args:
        engine: a :class:`ragcache.engine.engine.LocalEngine` (a ``TypeError`` names the fix for anything else).
        **options: fields of every :class:`~ragcache.engine.request.EngineRequest` it sends (``stop``,
            ``recompute_ratio``, ``use_chunk_cache``...).
    """

    name = "local"

    def __init__(self, engine: LocalEngine, **options: Any) -> None:
        from ragcache.engine.engine import LocalEngine

        if not isinstance(engine, LocalEngine):
            raise TypeError(f"LocalBackend needs a LocalEngine, got {type(engine).__name__}: "
                             "LocalBackend(LocalEngine.from_pretrained())")
        self.engine = engine
        self.options = options

    @property
    def model_id(self) -> str:
        """The engine's :attr:`~ragcache.engine.engine.LocalEngine.answer_identity` (model fingerprint
        digest, plus its namespace and quantized decode format when set; part of semantic partition
        keys), plus the date its chat template renders when that is not the default pin
        (``template_date``; for ``"live"``, today's date): a date that reaches the model is in the key."""
        from ragcache.engine.prompt import resolve_template_date

        digest = self.engine.answer_identity
        setting = self.engine.template_date
        if setting is None:
            return digest
        pinned = resolve_template_date(setting)
        day = (pinned or datetime.now()).date().isoformat()
        return f"{digest}@template-date={day}"

    @property
    def blend_setting(self) -> str | None:
        """The blend setting this backend's requests blend chunk hits at (its name; ``None``: exact
        prefill): :meth:`ragcache.engine.engine.LocalEngine.blend_setting_name` with this backend's
        ``recompute_ratio`` / ``use_chunk_cache`` options. The answer path serves a stored blended
        answer only to a request at the same setting."""
        return self.engine.blend_setting_name(self.options.get("recompute_ratio"), self.options.get("use_chunk_cache"))

    def request(self, layout: PromptSource, *, max_new_tokens: int, temperature: float,
                tenant: str | None = None) -> EngineRequest:
        """The engine request of one call: ``layout`` with this backend's options, the call's budget and
        temperature, and its ``tenant`` (when given: over an option's).

        Raises:
            TypeError: an option that is no :class:`~ragcache.engine.request.EngineRequest` field.
        """
        opts = {**self.options, "max_new_tokens": max_new_tokens, "temperature": temperature}
        if tenant is not None:
            opts.pop("namespace", None)
            opts["tenant"] = tenant
        return engine_request(layout, opts, "LocalBackend")

    def generate(self, layout: PromptSource, *, max_new_tokens: int, temperature: float,
                 tenant: str | None = None) -> BackendResult:
        """Answer a layout (or messages / a Prompt) on the engine; blocking.

        Args:
            tenant: the request's tenant (:class:`ragcache.backend.Backend`): salts its prefix and
                chunk KV keys (the engine request's ``tenant``,
                :meth:`ragcache.engine.engine.LocalEngine.kv_salt`), so no KV is reused across tenants
                unless the engine has ``share_kv_across_namespaces=True``. ``None`` / ``"default"``:
                the engine's own KV.
        """
        return result_of(self.engine.generate(self.request(layout, max_new_tokens=max_new_tokens,
                                                           temperature=temperature, tenant=tenant)))

    async def agenerate(self, layout: PromptSource, *, max_new_tokens: int, temperature: float,
                        tenant: str | None = None) -> BackendResult:
        """:meth:`generate` off the event loop (through the engine's one async bridge)."""
        gen = None
        async for ev in self.engine.astream(self.request(layout, max_new_tokens=max_new_tokens,
                                                         temperature=temperature, tenant=tenant)):
            gen = ev.generation or gen
        assert gen is not None
        return result_of(gen)

    def stream(self, layout: PromptSource, *, max_new_tokens: int, temperature: float,
               tenant: str | None = None) -> Any:
        """The engine's stream events (``StreamEvent``; the last carries the ``Generation``); ``tenant``
        as in :meth:`generate`."""
        return self.engine.stream(self.request(layout, max_new_tokens=max_new_tokens, temperature=temperature,
                                               tenant=tenant))

    def astream(self, layout: PromptSource, *, max_new_tokens: int, temperature: float,
                tenant: str | None = None) -> AsyncIterator[Any]:
        """Async :meth:`stream`."""
        return self.engine.astream(self.request(layout, max_new_tokens=max_new_tokens, temperature=temperature,
                                                tenant=tenant))

__all__ = ["LocalBackend", "layer_of", "result_of", "usage_of"]
