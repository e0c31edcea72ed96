"""Per-document KV cache: compute each document's KV on its own, key it, look it up.

CacheBlend (Yao et al., EuroSys 2025, arXiv 2405.16444, §5) precomputes every retrieved
chunk's KV independently and fuses them at query time. Here each document's token ids are
run after a short fixed *sink* (default: the model's BOS token), the sink's KV is dropped,
and the rest is stored with the positions it was computed at. The key is
``hash_chunk(model fingerprint, sink ids, document ids, format tag, KV salt)``: position
independent, so the same document is a hit after any system text and in any order, and never
shared across engines with different namespaces or across tenants (:mod:`ragcache.engine.chunk.bound`).

A :class:`ChunkCache` holds the settings and the store; :meth:`ChunkCache.bind` ties it to one
model, fingerprint and KV salt (:class:`~ragcache.engine.chunk.bound.BoundChunkCache`, what
:class:`~ragcache.engine.engine.LocalEngine` uses: one batched lookup per request).

Storage format (``kv_format``): ``"fp16"`` (dense, in ``dtype``), ``"int8"`` or ``"int4"``
(KIVI groups, :mod:`ragcache.engine.quant`). The format tag is part of the key, so a cache in
one format never reads a chunk stored in another; the CLI and apps that build a default
``ChunkCache`` pick it up from ``RAGCACHE_KV_FORMAT`` / ``RAGCACHE_KV_GROUP_SIZE``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from ragcache.engine.chunk.admission import SightingCounts
from ragcache.engine.chunk.bound import BoundChunkCache, context_window
from ragcache.engine.chunk.stores import ChunkKV, ChunkStore, DiskChunkStore, MemoryChunkStore, StoreStats
from ragcache.engine.interface import KeyedEngine
from ragcache.engine.quant import KVFormat
from ragcache.engine.request import renamed_salt, renamed_tenant
from ragcache.hashing import ChunkHash
from ragcache.identity import ModelFingerprint

DEFAULT_STORE_TIMEOUT_S = 10.0
"""Deadline (seconds) of a chunk store call before the request goes on without it (a miss: exact prefill)."""

__all__ = ["DEFAULT_STORE_TIMEOUT_S", "BoundChunkCache", "ChunkCache", "ChunkKV", "ChunkStore", "DiskChunkStore", "MemoryChunkStore",
           "context_window"]


@runtime_checkable
class StoreCalls(Protocol):
    """What a :class:`ChunkCache` checks of the store it is given: every member of
    :class:`~ragcache.engine.chunk.stores.ChunkStore` but ``nbytes``. ``isinstance`` evaluates a property on
    Python 3.11, and a remote store's ``nbytes`` is a round trip that fails while the server is down: a cache
    must open without its store (an architecture test keeps these names equal to ``ChunkStore``'s)."""

    stats: StoreStats

    def get(self, key: ChunkHash, *, fingerprint: str | None = None) -> ChunkKV | None: ...

    def put(self, kv: ChunkKV) -> bool: ...

    def contains(self, key: ChunkHash) -> bool: ...

    def remove(self, key: ChunkHash) -> bool: ...

    def get_many(self, keys: Sequence[ChunkHash], *, fingerprint: str | None = None) -> list[ChunkKV | None]: ...

    def put_many(self, kvs: Iterable[ChunkKV]) -> int: ...

    def close(self) -> None: ...

    def __len__(self) -> int: ...


def fingerprint_digest(fingerprint: str | ModelFingerprint) -> str:
    """The digest every chunk key carries: a :class:`~ragcache.identity.ModelFingerprint`'s ``digest``, or a digest
    given as a str (the one place the chunk cache's public methods convert what they are given).

    Raises:
        TypeError: anything else.
    """
    if isinstance(fingerprint, ModelFingerprint):
        return fingerprint.digest
    if isinstance(fingerprint, str):
        return fingerprint
    raise TypeError(f"fingerprint must be a ModelFingerprint or its digest (a str), got {type(fingerprint).__name__}: "
                    "pass engine.fingerprint, or loaded.fingerprint of ragcache.models.load_model")


class ChunkCache:
    """Chunk KV cache over a :class:`~ragcache.engine.chunk.stores.ChunkStore`.

    Args:
        store: where chunk KVs live (default: a 1 GiB :class:`MemoryChunkStore`).
        sink_ids: token ids every chunk is computed after (attention sink); ``None`` uses
            ``[model.config.bos_token_id]`` (or no sink if the model has no BOS) at first use.
        dtype: storage dtype of dense K and V (default float16; float32 for exactness tests).
        kv_format: ``"fp16"`` (dense in ``dtype``), ``"int8"`` or ``"int4"`` (keys per channel,
            values per token, KIVI); ``None``: ``"fp16"`` (the CLI passes ``RAGCACHE_KV_FORMAT``).
        group_size: KIVI group size for int formats (tokens per key group, channels per value
            group, capped at head_dim); ``None``: 64 (the CLI passes ``RAGCACHE_KV_GROUP_SIZE``).

        store_timeout_s: deadline (seconds, > 0) of each read or write of the store; one that hangs past it
            is a miss and the store is backed off (:mod:`ragcache.boundary`); ``None``: no deadline (the
            store's own timeouts only).

    Attributes:
        hits / misses: lookups served from the store / computed.
        kv_format: the :class:`~ragcache.engine.quant.KVFormat` chunks are stored in.

    Raises:
        ValueError: an unknown ``kv_format`` or a group size < 1.
    """

    def __init__(self, store: ChunkStore | None = None, *, sink_ids: Sequence[int] | None = None,
                 dtype: torch.dtype = torch.float16, kv_format: str | None = None,
                 group_size: int | None = None, store_timeout_s: float | None = DEFAULT_STORE_TIMEOUT_S) -> None:
        from ragcache.boundary import check_deadline

        store_timeout_s = check_deadline(store_timeout_s, "store_timeout_s")
        if store is not None and not isinstance(store, StoreCalls):
            raise TypeError(f"store must be a ChunkStore (MemoryChunkStore, DiskChunkStore, RedisChunkStore, or a class "
                             f"with every member of ragcache.engine.chunk.stores.ChunkStore) or None, got "
                             f"{type(store).__name__}: e.g. ChunkCache(DiskChunkStore('~/kv'))")
        self.store: ChunkStore = store if store is not None else MemoryChunkStore()
        self._sink_ids: list[int] | None = None if sink_ids is None else [int(t) for t in sink_ids]
        self.dtype = dtype
        name = kv_format if kv_format is not None else "fp16"
        if group_size is None:
            group_size = 64
        self.kv_format = KVFormat.of(name.strip().lower(), group_size=group_size, dtype=dtype)
        self.hits = 0
        self.misses = 0
        self.store_timeout_s: float | None = store_timeout_s
        """Deadline (seconds) of each call into the store; one that hangs past it is a miss (:mod:`ragcache.boundary`)."""
        self.sightings = SightingCounts()
        """Sighting counts kept in this process for a store that keeps none (:mod:`ragcache.engine.chunk.admission`)."""

    def sink_for(self, model: Any) -> list[int]:
        """The sink token ids used with ``model`` (resolved from its BOS when not configured)."""
        if self._sink_ids is None:
            bos = getattr(model.config, "bos_token_id", None)
            if isinstance(bos, list):
                bos = bos[0] if bos else None
            self._sink_ids = [] if bos is None else [int(bos)]
        return list(self._sink_ids)

    def bind(self, model: Any, fingerprint: str | ModelFingerprint, salt: str | None = None) -> BoundChunkCache:
        """This cache for one model: every key carries ``fingerprint`` (a ``ModelFingerprint`` or its digest,
        :func:`fingerprint_digest`) and ``salt`` (the KV salt, :func:`ragcache.engine.keys.kv_salt`; the
        per-document methods below take it as ``salt=``).

        Raises:
            TypeError: a ``fingerprint`` that is neither.
        """
        return BoundChunkCache(self, model, fingerprint_digest(fingerprint), salt)

    def _bound(self, model: Any, fingerprint: str | ModelFingerprint, salt: str | None, namespace: str | None,
               where: str) -> BoundChunkCache:
        """:meth:`bind` under ``salt`` or the deprecated ``namespace`` of the public method ``where``."""
        return self.bind(model, fingerprint, renamed_salt(salt, namespace, f"ChunkCache.{where}", stacklevel=4))

    def key(self, model: Any, fingerprint: str | ModelFingerprint, doc_ids: Sequence[int], *,
            salt: str | None = None, namespace: str | None = None) -> ChunkHash:
        """Position-independent chunk key of ``doc_ids`` for this model, sink, storage format and KV salt."""
        return self._bound(model, fingerprint, salt, namespace, "key").key(doc_ids)

    def compute(self, model: Any, fingerprint: str | ModelFingerprint, doc_ids: Sequence[int], *,
                salt: str | None = None, namespace: str | None = None) -> ChunkKV:
        """:meth:`BoundChunkCache.compute <ragcache.engine.chunk.bound.BoundChunkCache.compute>`
        (``sink + doc_ids`` prefilled from position 0, the document's KV kept)."""
        return self._bound(model, fingerprint, salt, namespace, "compute").compute(doc_ids)

    def encode(self, model: Any, fingerprint: str | ModelFingerprint, doc_ids: Sequence[int], keys: torch.Tensor,
               values: torch.Tensor, *, salt: str | None = None, namespace: str | None = None) -> ChunkKV:
        """A :class:`ChunkKV` in :attr:`kv_format` from a chunk's dense KV (computed after this
        cache's sink): ``keys`` / ``values`` ``[num_layers, kv_heads, n, head_dim]``, any float dtype.
        :meth:`compute` ends here; one dense computation can be encoded in several formats."""
        return self._bound(model, fingerprint, salt, namespace, "encode").encode(doc_ids, keys, values)

    def lookup(self, model: Any, fingerprint: str | ModelFingerprint, doc_ids: Sequence[int], *,
               salt: str | None = None, namespace: str | None = None) -> ChunkKV | None:
        """The cached chunk for ``doc_ids`` or ``None``; token ids are re-checked on a hit."""
        return self._bound(model, fingerprint, salt, namespace, "lookup").lookup(doc_ids)

    def lookup_or_compute(self, model: Any, fingerprint: str | ModelFingerprint, doc_ids: Sequence[int], *,
                          salt: str | None = None, namespace: str | None = None) -> tuple[ChunkKV, bool]:
        """The chunk KV of ``doc_ids`` and whether it was a hit (computed and stored on a miss).

        Args:
            model: a causal LM (Llama family) the KV belongs to.
            fingerprint: the model fingerprint digest (``str``) or a ``ModelFingerprint``.
            doc_ids: the document's own token ids, as they appear in the prompt.
            salt: the KV salt (:func:`ragcache.engine.keys.kv_salt`; ``None``: none).
            namespace: the deprecated name of ``salt`` (every per-document method of this class takes it and
                warns ``DeprecationWarning``; both given: ``TypeError``).
        """
        return self._bound(model, fingerprint, salt, namespace, "lookup_or_compute").lookup_or_compute(doc_ids)

    def add(self, model: Any, fingerprint: str | ModelFingerprint, doc_ids: Sequence[int], *,
            salt: str | None = None, namespace: str | None = None) -> bool:
        """Compute ``doc_ids``' chunk KV on its own (after the sink) and store it, unless already stored.

        Used for documents that missed the cache in a request (they were computed in that
        request's context; what is stored is the position-independent KV, as :meth:`precompute`
        stores). Returns whether a chunk was computed.
        """
        return self._bound(model, fingerprint, salt, namespace, "add").add_many([doc_ids]) == 1

    def precompute(self, engine_or_model: KeyedEngine | torch.nn.Module, documents: Sequence[Any], *,
                   tokenizer: Any = None, fingerprint: str | ModelFingerprint | None = None, tenant: str | None = None,
                   salt: str | None = None, namespace: str | None = None, progress: bool = True) -> int:
        """Warm the cache from a corpus ahead of queries, with exactly the chunks ``RagCache`` will ask for.

        Args:
            engine_or_model: a ``LocalEngine`` (its model, tokenizer, fingerprint and KV salt are used: any
                :class:`~ragcache.engine.interface.KeyedEngine`) or a bare model (then give ``tokenizer`` for
                documents and ``fingerprint``).
            documents: the documents as you will pass them to ``RagCache.answer`` (str, dicts with
                ``text`` / ``id`` / ``metadata``, LangChain Documents, LlamaIndex nodes): each is
                rendered and tokenised as in a prompt
                (:func:`ragcache.engine.prompt.document_token_ids`), so id and metadata must match;
                or lists of token ids, used as they are.
            tenant: with an engine, the tenant the documents will be asked for
                (``RagCache.answer(namespace=...)``, a backend's ``tenant``): the chunks are keyed under
                that request's KV salt (``engine.kv_salt(tenant)``; default: the engine's own).
            salt: with a bare model, the KV salt itself (default ``None``).
            namespace: deprecated (warns ``DeprecationWarning``): with an engine, ``tenant``; with a bare
                model, ``salt``.
            progress: show a tqdm progress bar.

        Returns:
            The number of chunks computed (documents already cached are skipped).

        Raises:
            ValueError: no fingerprint, or documents without a tokenizer.
            TypeError: ``engine_or_model`` neither a ``LocalEngine`` nor a torch module; ``tenant`` with a bare model
                (give it the salt: ``salt=engine.kv_salt(tenant)``) or ``salt`` with an engine (give the tenant);
                a new name and its deprecated one (``namespace``) both given.
        """
        from tqdm.auto import tqdm

        from ragcache.engine.prompt import document_token_ids

        is_model = isinstance(engine_or_model, torch.nn.Module)
        if not is_model and not isinstance(engine_or_model, KeyedEngine):
            raise TypeError(f"precompute takes a LocalEngine or a bare torch model, got {type(engine_or_model).__name__}:"
                            " chunk_cache.precompute(engine, documents)")
        if is_model:
            if tenant is not None:
                raise TypeError("precompute(model, ..., tenant=...): a bare model has no tenant rule; pass the engine, "
                                "or the salt as salt=engine.kv_salt(tenant)")
            salt = renamed_salt(salt, namespace, "ChunkCache.precompute")
            model = engine_or_model
        else:
            if salt is not None:
                raise TypeError("precompute(engine, ..., salt=...): an engine derives the salt from the tenant; pass "
                                "tenant=..., or the bare model (engine.model) with salt=...")
            tenant = renamed_tenant(tenant, namespace, "ChunkCache.precompute")
            model, salt = engine_or_model.model, engine_or_model.kv_salt(tenant)
            tokenizer = tokenizer or engine_or_model.tokenizer
            fingerprint = fingerprint or engine_or_model.fingerprint  # live
        if fingerprint is None:
            raise ValueError("precompute needs the model fingerprint: pass an engine or fingerprint=...")
        bound = self.bind(model, fingerprint, salt)
        computed = 0
        for doc in tqdm(documents, desc="chunk KV precompute", unit="doc", disable=not progress):
            if isinstance(doc, Sequence) and not isinstance(doc, str) and all(isinstance(t, int) for t in doc):
                ids = [int(t) for t in doc]
            elif tokenizer is None:
                raise ValueError("documents need a tokenizer: pass an engine or tokenizer=...")
            else:
                ids = document_token_ids(tokenizer, doc)
            computed += bound.add_many([ids])
        return computed

    def memory_stats(self, model: Any) -> dict[str, Any]:
        """KV bytes of this cache's format for ``model``, and what the store holds.

        Returns a dict: ``kv_format`` (tag), ``bytes_per_token`` (stored K+V bytes per token,
        long-chunk limit, scales and zero points included), ``fp16_bytes_per_token`` (the same
        for float16, for comparison), ``chunks``, ``stored_bytes`` (the store's byte count, the
        one its budget is checked against) and ``bytes_per_chunk`` (their mean; 0 when empty).
        """
        cfg = model.config
        layers = int(cfg.num_hidden_layers)
        heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        n, stored = len(self.store), int(self.store.nbytes)
        return {"kv_format": self.kv_format.tag,
                "bytes_per_token": self.kv_format.bytes_per_token(layers, heads, head_dim),
                "fp16_bytes_per_token": KVFormat.of("fp16").bytes_per_token(layers, heads, head_dim),
                "chunks": n, "stored_bytes": stored, "bytes_per_chunk": stored / n if n else 0.0}

    @property
    def stats(self) -> StoreStats:
        """The store's counters (:attr:`ChunkStore.stats <ragcache.engine.chunk.stores.ChunkStore.stats>`)."""
        return self.store.stats
