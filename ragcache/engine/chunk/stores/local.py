"""Chunk KV stores: one protocol, an in-memory LRU store and a disk (safetensors) store.

A :class:`ChunkKV` is one document's KV cache computed on its own after a fixed sink
(CacheBlend, Yao et al., EuroSys 2025, arXiv 2405.16444, §5), stored without the sink and
keyed by a position-independent :data:`~ragcache.hashing.ChunkHash`. Stores hold them under a
byte budget and evict the least recently used first. The disk store writes one safetensors
file per chunk (never pickles), atomically; a file that fails its check is logged, deleted and
reported as a miss, so the caller recomputes and rewrites it.

Formats. A chunk is stored dense (float16, or bfloat16 / float32) or quantized to int8 /
int4 with KIVI grouping (:mod:`ragcache.engine.quant`). The format tag (``"float16"``,
``"int8-g64"``, ``"int4-g64"``, ...) is part of the chunk key (:func:`~ragcache.hashing.hash_chunk`)
and of its metadata, and byte budgets count the stored bytes (codes, scales and zero points).

What a store must persist (any store, e.g. a remote one): exactly the tensors and string
metadata of :meth:`ChunkKV.to_payload` (:mod:`ragcache.engine.chunk_kv`), rebuilt with
:func:`chunk_from_payload`, which checks the container version, digest, key, format tag,
shapes and dtypes; a ``ValueError`` from it (or a missing tensor, ``KeyError``) means the
stored value must be logged, dropped and reported as a miss. The metadata fields are
``format`` (container version ``ragcache-chunk-kv-v2``), ``key``, ``fingerprint``,
``kv_format``, ``shape`` (``[L, H, n, D]``), ``start``, ``n_tokens``, ``dtype`` (dense only)
and ``digest`` (sha256 of the tensors); the tensors are ``token_ids`` plus ``keys`` /
``values`` (dense) or ``keys.codes``, ``keys.scale``, ``keys.zero``, ``values.codes``,
``values.scale``, ``values.zero`` (quantized). A store of byte values can use
:func:`~ragcache.engine.chunk_kv.chunk_to_bytes` / :func:`~ragcache.engine.chunk_kv.chunk_from_bytes`
(one safetensors byte string, metadata included), which do all of this.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from ragcache.engine.chunk_kv import ChunkKV, chunk_from_payload
from ragcache.hashing import ChunkHash

__all__ = ["ChunkKV", "ChunkStore", "DiskChunkStore", "MemoryChunkStore", "StoreStats", "chunk_from_payload"]

log = logging.getLogger(__name__)


@runtime_checkable
class ChunkStore(Protocol):
    """Where chunk KVs live. Implementations: :class:`MemoryChunkStore`, :class:`DiskChunkStore`."""

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


@dataclass(slots=True)
class StoreStats:
    """Counters of a store: hits, misses, puts, evictions, corrupt files dropped."""

    hits: int = 0
    misses: int = 0
    puts: int = 0
    evictions: int = 0
    corrupt: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def to_dict(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "puts": self.puts, "evictions": self.evictions,
                "corrupt": self.corrupt, "hit_rate": self.hit_rate}


class _BatchedMixin:
    def get_many(self, keys: Sequence[ChunkHash], *, fingerprint: str | None = None) -> list[ChunkKV | None]:
        return [self.get(k, fingerprint=fingerprint) for k in keys]  # type: ignore[attr-defined]

    def put_many(self, kvs: Iterable[ChunkKV]) -> int:
        return sum(bool(self.put(kv)) for kv in kvs)  # type: ignore[attr-defined]

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()  # type: ignore[attr-defined]


def _check_budget(max_bytes: int | None) -> int | None:
    if max_bytes is not None and max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive or None (unbounded); got {max_bytes}")
    return max_bytes


class MemoryChunkStore(_BatchedMixin):
    """In-process chunk store, least recently used evicted first under ``max_bytes``.

    Args:
        max_bytes: byte budget over the stored K and V (:attr:`ChunkKV.nbytes`: codes, scales and zero
            points of quantized chunks) (default 1 GiB); ``None`` = unbounded.
    """

    def __init__(self, max_bytes: int | None = 1 << 30) -> None:
        self.max_bytes = _check_budget(max_bytes)
        self._entries: OrderedDict[str, ChunkKV] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.stats = StoreStats()

    def get(self, key: ChunkHash, *, fingerprint: str | None = None) -> ChunkKV | None:
        with self._lock:
            kv = self._entries.get(key)
            if kv is None or (fingerprint is not None and kv.fingerprint != fingerprint):
                self.stats.misses += 1
                return None
            self._entries.move_to_end(key)
            self.stats.hits += 1
            return kv

    def put(self, kv: ChunkKV) -> bool:
        size = kv.nbytes
        with self._lock:
            if self.max_bytes is not None and size > self.max_bytes:
                log.warning("chunk %s (%d bytes) exceeds the store budget of %d bytes; not cached",
                            kv.key[:12], size, self.max_bytes)
                return False
            old = self._entries.pop(kv.key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._entries[kv.key] = kv
            self._bytes += size
            self.stats.puts += 1
            while self.max_bytes is not None and self._bytes > self.max_bytes:
                _, victim = self._entries.popitem(last=False)
                self._bytes -= victim.nbytes
                self.stats.evictions += 1
            return True

    def contains(self, key: ChunkHash) -> bool:
        return key in self._entries

    def remove(self, key: ChunkHash) -> bool:
        with self._lock:
            kv = self._entries.pop(key, None)
            if kv is None:
                return False
            self._bytes -= kv.nbytes
            return True

    def close(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes


@dataclass(slots=True)
class _DiskEntry:
    path: Path
    nbytes: int = field(default=0)


class DiskChunkStore(_BatchedMixin):
    """One safetensors file per chunk under ``root``, LRU (by access order) under ``max_bytes``.

    Files are written to a temporary name and moved into place with :func:`os.replace`, so a
    reader never sees half a file. Metadata is :meth:`ChunkKV.to_payload`'s (container version,
    key, model fingerprint, KV format tag, shape, start position); a file whose metadata or
    tensors fail :func:`chunk_from_payload`'s check (truncated, corrupt, another key) is a miss: it is logged, deleted, and rewritten by the next ``put``. Nothing is unpickled.

    Args:
        root: directory (created if missing).
        max_bytes: byte budget over file sizes; ``None`` = unbounded.
    """

    def __init__(self, root: str | os.PathLike, max_bytes: int | None = None) -> None:
        self.root = Path(root).expanduser()
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = _check_budget(max_bytes)
        self._lock = threading.Lock()
        self.stats = StoreStats()
        self._index: OrderedDict[str, _DiskEntry] = OrderedDict()
        files = sorted(self.root.glob("*.safetensors"), key=lambda p: p.stat().st_mtime)
        for p in files:  # oldest first = least recently used first
            self._index[p.stem] = _DiskEntry(p, p.stat().st_size)
        self._bytes = sum(e.nbytes for e in self._index.values())

    def _path(self, key: str) -> Path:
        if not key or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"chunk key must be a lower-case hex digest; got {key!r}")
        return self.root / f"{key}.safetensors"

    def _drop(self, key: str) -> None:
        entry = self._index.pop(key, None)
        if entry is not None:
            self._bytes -= entry.nbytes
        self._path(key).unlink(missing_ok=True)

    def get(self, key: ChunkHash, *, fingerprint: str | None = None) -> ChunkKV | None:
        from safetensors import safe_open

        path = self._path(key)
        with self._lock:
            if not path.is_file():
                self._index.pop(key, None)
                self.stats.misses += 1
                return None
            try:
                with safe_open(str(path), framework="pt") as f:
                    meta = f.metadata() or {}
                    tensors = {name: f.get_tensor(name) for name in f.keys()}
                kv = chunk_from_payload(tensors, meta, key)
            except Exception as e:  # noqa: BLE001 - any unreadable file is a miss, then rewritten
                log.warning("chunk file %s failed its check (%s); treating as a miss and deleting it", path, e)
                self.stats.corrupt += 1
                self.stats.misses += 1
                self._drop(key)
                return None
            if fingerprint is not None and kv.fingerprint != fingerprint:
                log.warning("chunk file %s belongs to model %s..., not %s...; miss",
                            path, kv.fingerprint[:12], fingerprint[:12])
                self.stats.misses += 1
                return None
            self.stats.hits += 1
            entry = self._index.pop(key, None) or _DiskEntry(path, path.stat().st_size)
            self._index[key] = entry
            try:
                os.utime(path)  # keeps LRU order across restarts
            except OSError:
                pass
            return kv

    def put(self, kv: ChunkKV) -> bool:
        from safetensors.torch import save_file

        path = self._path(kv.key)
        tensors, meta = kv.to_payload()
        with self._lock:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".safetensors", dir=self.root)
            os.close(fd)
            try:
                save_file(tensors, tmp, metadata=meta)
                size = os.path.getsize(tmp)
                if self.max_bytes is not None and size > self.max_bytes:
                    log.warning("chunk %s (%d bytes) exceeds the disk budget of %d bytes; not cached",
                                kv.key[:12], size, self.max_bytes)
                    return False
                os.replace(tmp, path)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            old = self._index.pop(kv.key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._index[kv.key] = _DiskEntry(path, size)
            self._bytes += size
            self.stats.puts += 1
            while self.max_bytes is not None and self._bytes > self.max_bytes:
                victim = next(iter(self._index))
                self._drop(victim)
                self.stats.evictions += 1
            return True

    def contains(self, key: ChunkHash) -> bool:
        return self._path(key).is_file()

    def remove(self, key: ChunkHash) -> bool:
        with self._lock:
            existed = self._path(key).is_file()
            self._drop(key)
            return existed

    def close(self) -> None:
        """Nothing to flush (every put is already on disk)."""

    def __len__(self) -> int:
        return len(self._index)

    @property
    def nbytes(self) -> int:
        return self._bytes
