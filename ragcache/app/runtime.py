"""What the app builds from a :class:`~ragcache.config.Config`: embedders, the engine with its
persisted chunk KV, a backend that loads the model only when it must, the answer cache.

The expensive parts load lazily and in order of need: a semantic hit needs the embedder (NumPy
runtime, no torch) and the answer cache only; the LLM is loaded by the first ``generate``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ragcache.backend import BackendResult
from ragcache.config import Config, setting_source

if TYPE_CHECKING:
    from ragcache.engine.engine import LocalEngine
    from ragcache.prompt.layout import PromptLayout

log = logging.getLogger(__name__)


def setting_name(cfg: Config, field: str, given: str | None = None) -> str:
    """How an error names where the model or embedder came from: the option (``--model``) when
    ``given`` on the command line, else ``RAGCACHE_MODEL`` when ``cfg``'s value is the environment's
    (:func:`ragcache.config.setting_source`)."""
    return f"--{field}" if given is not None else setting_source(field, getattr(cfg, field))


def query_embedder(cfg: Config, name: str | None = None) -> Any:
    """The embedder for questions: the NumPy runtime when the model allows it (fast start), else torch.
    ``name``: the ``--embedder`` option (``None``: ``cfg.embedder``)."""
    from ragcache.models import ModelNotFoundError, load_embedder

    setting = setting_name(cfg, "embedder", name)
    name = name if name is not None else cfg.embedder
    try:
        return load_embedder(name, allow_downloads=cfg.allow_downloads, runtime="numpy", home=cfg.paths,
                             setting=setting)
    except ModelNotFoundError as e:
        log.info("embedder %s: NumPy runtime unavailable (%s); using sentence-transformers", name, e)
        return load_embedder(name, allow_downloads=cfg.allow_downloads, home=cfg.paths, setting=setting)


def bulk_embedder(cfg: Config, name: str | None = None) -> Callable[[], Any]:
    """Zero-argument factory of the embedder for many chunks (sentence-transformers on torch)."""
    from ragcache.models import load_embedder

    setting = setting_name(cfg, "embedder", name)
    name = name if name is not None else cfg.embedder
    return lambda: load_embedder(name, allow_downloads=cfg.allow_downloads, home=cfg.paths, setting=setting)


def chunk_store(cfg: Config) -> Any:
    """The chunk KV store: Redis / Valkey when ``cfg.kv_url`` is set (shared by every process), else
    on disk under ``cfg.kv_dir`` within ``cfg.kv_max_bytes`` (LRU), or in memory when the budget is 0 or
    ``cfg.kv_dir`` cannot be written (a read-only home: this process's chunk KV is kept until it exits)."""
    from ragcache.engine.chunk.stores import DiskChunkStore, MemoryChunkStore
    from ragcache.home import writable

    if cfg.kv_url:
        from ragcache.engine.chunk.stores import open_chunk_store

        return open_chunk_store(cfg.kv_url)
    if cfg.kv_max_bytes == 0 or not writable(cfg.kv_dir):
        return MemoryChunkStore()
    return DiskChunkStore(cfg.kv_dir, max_bytes=cfg.kv_max_bytes)


def build_engine(cfg: Config, model: str | None = None, *, chunk_cache: bool = True,
                 recompute_ratio: float | None = None) -> Any:
    """A :class:`~ragcache.engine.engine.LocalEngine` with the prefix cache budget of ``cfg`` and,
    when ``chunk_cache``, a CacheBlend chunk cache over :func:`chunk_store`. ``model``: the
    ``--model`` option (``None``: ``cfg.model``)."""
    from ragcache.engine.engine import LocalEngine
    from ragcache.models import load_model

    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    cc = None
    if chunk_cache:
        from ragcache.engine.chunk.cache import ChunkCache

        cc = ChunkCache(chunk_store(cfg), kv_format=cfg.kv_format, group_size=cfg.kv_group_size)
    loaded = load_model(model if model is not None else cfg.model, allow_downloads=cfg.allow_downloads,
                        home=cfg.paths, setting=setting_name(cfg, "model", model))
    return LocalEngine(loaded, chunk_cache=cc, prefix_cache_bytes=cfg.prefix_max_bytes,
                       recompute_ratio=cfg.recompute_ratio if recompute_ratio is None else recompute_ratio,
                       decode_cache=cfg.decode_cache, min_reuse_tokens=cfg.min_reuse_tokens, home=cfg.paths,
                       chunk_admission=cfg.chunk_admission, chunk_queue=cfg.chunk_queue)


class LazyLocalBackend:
    """:class:`~ragcache.engine.backend.LocalBackend` that loads the engine on the first ``generate``.

    ``model_id`` (part of the semantic partition) comes from :func:`ragcache.models.model_fingerprint`
    without loading the model where that is possible (the embedded model even before its conversion),
    so a lookup in the answer cache needs no model and no conversion.

    Args:
        factory: zero-argument callable returning a LocalEngine.
        model: the model name or path the factory loads (for the fingerprint).
        predict: whether the engine's answer identity is its bare fingerprint (no namespace, exact
            decoding) and so can be predicted; otherwise it is read from the engine once loaded.
        home: the ragcache home the embedded model is converted under (:class:`~ragcache.home.Home`).
        setting: where ``model`` came from, as an error names it (:func:`setting_name`).
        recompute_ratio: the ratio the factory's engine is built with (``RAGCACHE_RECOMPUTE_RATIO``), so
            :attr:`blend_setting` is known without loading the model.

    Raises:
        RuntimeError: the loaded engine's fingerprint differs from the one predicted (the model folder
            changed in between).
    """

    name = "local"

    def __init__(self, factory: Callable[[], Any], model: str | None = None, *, predict: bool = True,
                 home: Any = None, setting: str = "--model", recompute_ratio: float | None = None) -> None:
        from ragcache.engine.predicted import PredictedEngine

        self._factory = factory
        self._backend: Any = None
        self._predicted = PredictedEngine.of(model, home=home, setting=setting,
                                             recompute_ratio=recompute_ratio) if predict else None
        self._model_id = self._predicted.digest if self._predicted is not None else None

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded."""
        return self._backend is not None

    def _load(self) -> Any:
        if self._backend is None:
            from ragcache.engine.backend import LocalBackend
            from ragcache.engine.predicted import check_prediction

            backend = LocalBackend(self._factory())
            if self._model_id is not None:
                check_prediction(self._model_id, backend.model_id)
            self._backend = backend
        return self._backend

    @property
    def engine(self) -> LocalEngine:
        """The loaded engine (the factory's :class:`~ragcache.engine.engine.LocalEngine`); loads the model when
        it is not (:attr:`loaded` says whether it is, without loading it)."""
        return self._load().engine

    @property
    def model_id(self) -> str:
        if self._model_id is None:  # a hub id: its revision is known only once loaded
            self._model_id = self._load().model_id
        return self._model_id

    @property
    def blend_setting(self) -> str | None:
        """The blend setting the engine answers at (:attr:`ragcache.engine.backend.LocalBackend.blend_setting`),
        predicted without loading the model where it can be (:meth:`PredictedEngine.blend_setting_name
        <ragcache.engine.predicted.PredictedEngine.blend_setting_name>`: the engine's rule over the given
        ratio and the calibration record of the predicted identity). Read by the answer path only when a
        stored answer was blended."""
        if self._backend is not None or self._predicted is None:
            return self._load().blend_setting
        return self._predicted.blend_setting_name()

    def generate(self, layout: PromptLayout, *, max_new_tokens: int, temperature: float,
                 tenant: str | None = None) -> BackendResult:
        """:meth:`LocalBackend.generate <ragcache.engine.backend.LocalBackend.generate>` on the loaded
        model; ``tenant`` salts the request's KV."""
        return self._load().generate(layout, max_new_tokens=max_new_tokens, temperature=temperature, tenant=tenant)


PROVIDERS = ("anthropic", "openai")
"""The providers whose API answers a miss through their SDK (:func:`provider_backend`)."""

BACKENDS = ("local", *PROVIDERS)
"""What ``ragcache ask --backend`` takes: the local engine (default), or a provider's API through its SDK."""

_PROVIDER_ENV = {"anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"), "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL")}


def provider_backend(kind: str, model: str | None, env: Any = None) -> Any:
    """The pipeline backend of ``--backend anthropic|openai``: the provider's SDK client with its key and
    base URL from the usual variables (``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``, ``OPENAI_API_KEY`` /
    ``OPENAI_BASE_URL``; ``env``: else ``os.environ``), sending ``model`` (the id the provider or server
    serves). The same layers, labels and stats as the local engine: semantic hit first, then the provider
    call, labelled ``provider`` or ``provider-cache``.

    Raises:
        ValueError: an unknown ``kind``, no ``model``, or the key's variable unset.
        ImportError: the SDK is not installed (names the extra).
    """
    import os

    if kind not in _PROVIDER_ENV:
        raise ValueError(f"--backend must be one of {', '.join(BACKENDS)}, got {kind!r}")
    if not model:
        raise ValueError(f"--backend {kind} needs --model: the model id the provider serves (the local servers of "
                         "`ragcache serve` list theirs at GET /v1/models)")
    env = os.environ if env is None else env
    key_var, url_var = _PROVIDER_ENV[kind]
    key, base_url = env.get(key_var), env.get(url_var) or None
    if not key:
        raise ValueError(f"--backend {kind} reads its API key from {key_var}, which is not set: export {key_var}=... "
                         f"(and {url_var}=http://127.0.0.1:{Config.__dataclass_fields__['port'].default}"
                         f"{'/v1' if kind == 'openai' else ''} "
                         f"for `ragcache serve`)")
    try:
        if kind == "anthropic":
            import anthropic

            from ragcache.providers.anthropic.backend import AnthropicBackend

            return AnthropicBackend(anthropic.Anthropic(api_key=key, base_url=base_url, max_retries=1), model)
        import openai

        from ragcache.providers.openai.backend import OpenAIBackend

        return OpenAIBackend(openai.OpenAI(api_key=key, base_url=base_url, max_retries=1), model)
    except ImportError as e:
        raise ImportError(f"--backend {kind} needs the {kind} SDK: pip install 'ragcache[{kind}]' ({e})") from e


def answer_cache(cfg: Config, embedder: Any, path: Any = "default") -> Any:
    """The answer cache: PostgreSQL + pgvector when ``cfg.semantic_url`` is set (shared by every process),
    else the persistent :class:`~ragcache.semantic.SemanticCache` under ``cfg.answers_dir`` (``path=None``:
    in memory). Its guards read WordNet from ``cfg.wordnet_dir`` and a calibration record from ``cfg.paths``."""
    from ragcache.semantic import SemanticCache
    from ragcache.semantic.decision.lexicon import use_wordnet_dir

    use_wordnet_dir(cfg.wordnet_dir)
    if cfg.semantic_url and path == "default":
        return SemanticCache.from_url(cfg.semantic_url, embedder=embedder, threshold=cfg.threshold,
                                      max_entries=cfg.semantic_max_entries, ttl_s=cfg.semantic_ttl_s, home=cfg.paths)
    return SemanticCache(cfg.answers_dir if path == "default" else path, embedder=embedder,
                         threshold=cfg.threshold, max_entries=cfg.semantic_max_entries, ttl_s=cfg.semantic_ttl_s,
                         home=cfg.paths)


__all__ = ["BACKENDS", "PROVIDERS", "LazyLocalBackend", "answer_cache", "build_engine", "bulk_embedder",
           "chunk_store", "provider_backend", "query_embedder", "setting_name"]
