"""The chunk KV store protocol, its counters and the batched forms every store shares.

A :class:`ChunkKV` is one document's KV cache computed on its own after a fixed sink
(CacheBlend, Yao et al., EuroSys 2025, arXiv 2405.16444, §5), stored without the sink and
keyed by a position-independent :data:`~ragcache.hashing.ChunkHash`. Stores hold them under a
byte budget and evict the least recently used first: :class:`~.memory.MemoryChunkStore` (in
process), :class:`~.disk.DiskChunkStore` (one safetensors file per chunk) and
:class:`~.redis_store.RedisChunkStore` (Redis / Valkey); :func:`~.factory.open_chunk_store`
picks one from a URL. A value that fails its check is logged, deleted and reported as a miss,
so the caller recomputes and rewrites it.

Formats. A chunk is stored dense (float16, or bfloat16 / float32) or quantized to int8 /
int4 with KIVI grouping (:mod:`ragcache.engine.quant`). The format tag (``"float16"``,
``"int8-g64"``, ``"int4-g64"``, ...) is part of the chunk key (:func:`~ragcache.hashing.hash_chunk`)
and of its metadata, and byte budgets count the stored bytes (codes, scales and zero points).

What a store must persist (any store, e.g. a remote one): exactly the tensors and string
metadata of :meth:`ChunkKV.to_payload` (:mod:`ragcache.engine.chunk.chunk_kv`), rebuilt with
:func:`chunk_from_payload`, which checks the container version, digest, key, format tag,
shapes and dtypes; a ``ValueError`` from it (or a missing tensor, ``KeyError``) means the
stored value must be logged, dropped and reported as a miss. The metadata fields are
``format`` (container version ``ragcache-chunk-kv-v2``), ``key``, ``fingerprint``,
``kv_format``, ``shape`` (``[L, H, n, D]``), ``start``, ``n_tokens``, ``dtype`` (dense only)
and ``digest`` (sha256 of the tensors); the tensors are ``token_ids`` plus ``keys`` /
``values`` (dense) or ``keys.codes``, ``keys.scale``, ``keys.zero``, ``values.codes``,
``values.scale``, ``values.zero`` (quantized). A store of byte values can use
:func:`~ragcache.engine.chunk.chunk_kv.chunk_to_bytes` / :func:`~ragcache.engine.chunk.chunk_kv.chunk_from_bytes`
(one safetensors byte string, metadata included), which do all of this.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ragcache.counters import Counters
from ragcache.engine.chunk.chunk_kv import ChunkKV, chunk_from_payload
from ragcache.hashing import ChunkHash

__all__ = ["BatchedStore", "ChunkEntry", "ChunkKV", "ChunkStore", "ChunkStoreAdmin", "StoreStats", "check_budget",
           "chunk_from_payload"]


@runtime_checkable
class ChunkStore(Protocol):
    """Where chunk KVs live. Implementations: :class:`MemoryChunkStore`, :class:`DiskChunkStore`,
    :class:`~ragcache.engine.chunk.stores.redis_store.RedisChunkStore`.

    Attributes:
        stats: this process's counts of the store's hits, misses, puts, evictions and corrupt values dropped
            (:class:`StoreStats`; the contract suite reads ``hits``, ``misses`` and ``evictions``).
    """

    stats: StoreStats

    def get(self, key: ChunkHash, *, fingerprint: str | None = None) -> ChunkKV | None:
        """The chunk under ``key``, or ``None`` on a miss (also when its fingerprint differs)."""
        ...

    def put(self, kv: ChunkKV) -> bool:
        """Store ``kv`` in its own format (evicting LRU entries over the byte budget, counted in
        stored bytes); ``False`` if it cannot fit at all."""
        ...

    def contains(self, key: ChunkHash) -> bool: ...

    def remove(self, key: ChunkHash) -> bool:
        """Drop ``key``; ``True`` if it was there."""
        ...

    def get_many(self, keys: Sequence[ChunkHash], *, fingerprint: str | None = None) -> list[ChunkKV | None]: ...

    def put_many(self, kvs: Iterable[ChunkKV]) -> int: ...

    def close(self) -> None: ...

    def __len__(self) -> int: ...

    @property
    def nbytes(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ChunkEntry:
    """One stored chunk as an admin listing sees it, its tensors not read.

    Attributes:
        key: the chunk hash (hex).
        nbytes: the stored value's size in bytes.
        used: when it was last used (Unix seconds).
        metadata: the value's safetensors metadata (:meth:`ChunkKV.to_payload`'s fields: ``n_tokens``,
            ``dtype``, ``fingerprint`` ...), or ``None`` when it could not be read (then ``error`` says why).
        error: why the value could not be read (evicted or expired meanwhile, not safetensors), or ``None``.
    """

    key: str
    nbytes: int
    used: float
    metadata: dict[str, str] | None = None
    error: str | None = None


@runtime_checkable
class ChunkStoreAdmin(Protocol):
    """What ``ragcache cache`` does to a chunk store it opens from a URL (a shared store: Redis / Valkey):
    list, remove, clear, and say where and how big it is. (A folder of chunk files it reads itself, without
    importing torch: :mod:`ragcache.app.cache_cmd`.)"""

    @property
    def where(self) -> str:
        """The store, as ``cache stats`` names it (its URL without a password, and its key prefix)."""
        ...

    def entries(self) -> list[ChunkEntry]:
        """Every stored chunk, least recently used first (the order the store evicts in), with its
        metadata read and its tensors not."""
        ...

    def remove(self, key: ChunkHash) -> bool:
        """Drop ``key``; ``True`` if it was there."""
        ...

    def clear(self) -> int:
        """Delete every chunk of this store. Returns the number deleted."""
        ...

    @property
    def nbytes(self) -> int:
        """Bytes of the stored values."""
        ...

    def close(self) -> None: ...


@dataclass(slots=True)
class StoreStats(Counters):
    """Counters of a store: hits, misses, puts, evictions, corrupt files dropped; ``hit_rate`` = hits /
    (hits + misses)."""

    RATE = ("hits", ("hits", "misses"))

    hits: int = 0
    misses: int = 0
    puts: int = 0
    evictions: int = 0
    corrupt: int = 0


class BatchedStore:
    """``get_many`` / ``put_many`` as loops over ``get`` / ``put``, and the context manager, for
    stores whose single calls are already local (memory, disk)."""

    def get_many(self, keys: Sequence[ChunkHash], *, fingerprint: str | None = None) -> list[ChunkKV | None]:
        return [self.get(k, fingerprint=fingerprint) for k in keys]  # type: ignore[attr-defined]

    def put_many(self, kvs: Iterable[ChunkKV]) -> int:
        return sum(bool(self.put(kv)) for kv in kvs)  # type: ignore[attr-defined]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()  # type: ignore[attr-defined]


def check_budget(max_bytes: int | None) -> int | None:
    if max_bytes is not None and max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive or None (unbounded); got {max_bytes}")
    return max_bytes


