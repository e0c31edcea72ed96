"""What keys an engine's caches and answers: the model identity and the tenant in every KV key.

:class:`EngineKeys` (a base of :class:`~ragcache.engine.engine.LocalEngine`) gives the engine's
live :attr:`~EngineKeys.fingerprint` (the loaded model's, with the chat template its tokenizer
holds *now*, so a template set in memory after loading changes every key), its
:attr:`~EngineKeys.answer_identity` (the semantic partition's model part) and the KV salt of each
request (:func:`kv_salt`).

vLLM's ``cache_salt`` (OpenAI-compatible server, ``docs/design/prefix_caching.md``, "Cache
isolation for security") exists because a shared prefix cache is a timing side channel: a
request that reuses KV starts faster (lower time-to-first-token) and reports more cached tokens,
so a caller who can send prompts to the same server can learn whether *another* caller already
sent a given system text or document (Wu et al., "I Know What You Asked: Prompt Leakage via
KV-Cache Sharing in Multi-Tenant LLM Serving", NDSS 2025; Gu et al., "Auditing Prompt Caching in
Language Model APIs", arXiv 2502.07776). The hosted APIs keep their prompt caches per
organisation for the same reason.

So a request's tenant (the ``tenant`` every :class:`~ragcache.backend.Backend` takes and
:class:`~ragcache.engine.request.EngineRequest` carries; ``RagCache``'s and the LlamaIndex query
engine's ``namespace``, ``ChatRagCache(tenant=...)``, ``RagCacheLLM(tenant=...)``, the tenant the local
servers derive from a caller's API key, bearer token or tenant header) is hashed, with the engine's own
``namespace``, into the KV salt (:func:`kv_salt`): the root of its prefix block-hash chain and every
chunk KV key. Two tenants never reuse each other's KV, even for byte-identical text. The tenant is only
ever hashed, never stored.

Sharing KV across tenants is an explicit opt-in (``share_kv_across_namespaces=True`` on
:class:`~ragcache.engine.engine_config.EngineConfig` / ``LocalEngine`` / the local servers). It
saves prefill when tenants send the same documents, at the price above: any tenant can then tell
from its cached-token count or its time-to-first-token whether some other tenant sent the same
text. Use it only when every caller may see every other caller's prompts (one team, one app).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ragcache.backend import DEFAULT_TENANT
from ragcache.hashing import canonical_json, encode, sha256_hex

if TYPE_CHECKING:
    from ragcache.engine.chunk import BoundChunkCache
    from ragcache.models import ModelFingerprint

DEFAULT_NAMESPACE = DEFAULT_TENANT
"""The tenant of requests that name none (``RagCache``'s and the adapters' default): its KV
salt is the engine's own, so KV precomputed with ``ChunkCache.precompute(engine, ...)`` and
requests sent to the engine directly reuse each other."""


def kv_tenant(tenant: str | None, *, share: bool = False) -> str | None:
    """The one rule for sharing KV across tenants: the tenant whose own KV a request uses, or ``None``
    for the KV every request without a tenant shares (the engine's own).

    The engine's salt (:func:`kv_salt`) and the local servers
    (:func:`ragcache.server.auth.kv_namespace`) both decide by it.

    Args:
        tenant: the request's tenant (``RagCache``'s ``namespace``, the backend's ``tenant``);
            ``None`` and :data:`DEFAULT_NAMESPACE` are the default tenant.
        share: ``share_kv_across_namespaces``: every tenant uses the shared KV (tenants reuse each
            other's KV; see the module docstring for the risk).

    Returns:
        ``None`` with ``share`` or for the default tenant; otherwise ``tenant``.

    Raises:
        TypeError: ``tenant`` is not a string or ``None``.
    """
    if tenant is not None and not isinstance(tenant, str):
        raise TypeError(f"a tenant (the request's namespace) must be a string or None, got {type(tenant).__name__}")
    return None if share or tenant is None or tenant == DEFAULT_NAMESPACE else tenant


def kv_salt(engine_namespace: str | None, tenant: str | None, *, share: bool = False) -> str | None:
    """The salt of a request's KV keys (prefix root hash and chunk keys).

    Args:
        engine_namespace: the engine's own namespace (``EngineConfig.namespace``; salts every key).
        tenant: the request's tenant; ``None`` or :data:`DEFAULT_NAMESPACE`: none.
        share: ``share_kv_across_namespaces`` (:func:`kv_tenant`).

    Returns:
        ``engine_namespace`` when :func:`kv_tenant` gives ``None`` (the default tenant, or ``share``);
        otherwise ``"tenant:"`` and a sha256 of the engine's namespace and the tenant (the tenant's name
        is never kept in clear).

    Raises:
        TypeError: ``tenant`` is not a string or ``None``.
    """
    own = kv_tenant(tenant, share=share)
    if own is None:
        return engine_namespace
    return "tenant:" + sha256_hex(b"ragcache-kv-tenant-v1", encode(engine_namespace), encode(own))



class EngineKeys:
    """The keys of a local engine's caches and answers (mixed into :class:`~ragcache.engine.engine.LocalEngine`,
    which sets ``_loaded_fingerprint``, ``tokenizer``, ``model``, ``namespace``, ``config``, ``chunk_cache``)."""

    _loaded_fingerprint: ModelFingerprint
    _fingerprint_memo: tuple[Any, ModelFingerprint] | None = None
    tokenizer: Any
    model: Any
    namespace: str | None
    config: Any
    chunk_cache: Any

    @property
    def fingerprint(self) -> ModelFingerprint:
        """The model's fingerprint with the chat template the tokenizer holds now
        (:meth:`ragcache.models.ModelFingerprint.with_template`): setting ``tokenizer.chat_template``
        changes the digest, hence the answer partition and every prefix and chunk KV key."""
        template = getattr(self.tokenizer, "chat_template", None)
        memo = self._fingerprint_memo
        if memo is None or not (memo[0] is template or memo[0] == template):
            memo = self._fingerprint_memo = (template, self._loaded_fingerprint.with_template(template))
        return memo[1]

    @property
    def answer_identity(self) -> str:
        """What decides this engine's answers besides the request: the model fingerprint digest (chat
        template included), plus the namespace and the decode format when set (canonical JSON). The
        semantic partition's model part (:attr:`ragcache.engine.backend.LocalBackend.model_id`)."""
        spec = self._decode_spec()  # type: ignore[attr-defined]
        extra = {k: v for k, v, on in (("namespace", self.namespace, self.namespace is not None),
                                       ("decode", spec.tag, spec.quantized)) if on}
        return self.fingerprint.digest + (f"@{canonical_json(extra)}" if extra else "")

    def kv_salt(self, tenant: str | None = None) -> str | None:
        """The salt of the KV keys of a request of ``tenant`` (``None`` / ``"default"``: the engine's own):
        :func:`kv_salt` with this engine's namespace and ``share_kv_across_namespaces``."""
        return kv_salt(self.namespace, tenant, share=self.config.share_kv_across_namespaces)

    @property
    def chunks(self) -> BoundChunkCache | None:
        """:meth:`chunks_for` the default tenant (``None`` without a chunk cache)."""
        return self.chunks_for(None)

    def chunks_for(self, tenant: str | None) -> BoundChunkCache | None:
        """The chunk cache bound to this engine's model and fingerprint and the KV salt of a request of
        ``tenant`` (:meth:`kv_salt`); ``None`` without a chunk cache."""
        cc = self.chunk_cache
        return None if cc is None else cc.bind(self.model, self.fingerprint.digest, self.kv_salt(tenant))


__all__ = ["DEFAULT_NAMESPACE", "EngineKeys", "kv_salt", "kv_tenant"]
