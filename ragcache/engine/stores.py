"""Chunk KV stores: one protocol, an in-memory LRU store and a disk (safetensors) store.

A :class:`ChunkKV` is one document's KV cache computed on its own after a fixed sink
(CacheBlend, Yao et al., EuroSys 2025, arXiv 2405.16444, §5), stored without the sink and
keyed by a position-independent :data:`~ragcache.hashing.ChunkHash`. Stores hold them under a
byte budget and evict the least recently used first. The disk store writes one safetensors
file per chunk (never pickles), atomically, with the model fingerprint, dtype and shapes in
the file's metadata; a file that fails its check is logged, deleted and reported as a miss,
so the caller recomputes and rewrites it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from ragcache.hashing import ChunkHash

log = logging.getLogger(__name__)

_FORMAT = "ragcache-chunk-kv-v1"


@dataclass(slots=True)
class ChunkKV:
    """One document chunk's KV cache, computed after the sink and stored without it.

    Attributes:
        key: position-independent chunk hash (model fingerprint, sink ids, token ids).
        fingerprint: model fingerprint digest the KV was computed with.
        token_ids: the chunk's own token ids, ``n`` of them (re-checked on a hit).
        keys: ``[num_layers, kv_heads, n, head_dim]`` post-RoPE keys at :attr:`positions`.
        values: ``[num_layers, kv_heads, n, head_dim]`` values.
        start: position of the chunk's first token when it was computed (= sink length);
            token ``i`` sits at ``start + i``.
    """

    key: ChunkHash
    fingerprint: str
    token_ids: list[int]
    keys: torch.Tensor
    values: torch.Tensor
    start: int

    def __post_init__(self) -> None:
        if self.keys.shape != self.values.shape or self.keys.dim() != 4:
            raise ValueError(f"keys {tuple(self.keys.shape)} and values {tuple(self.values.shape)} must both be "
                             "[num_layers, kv_heads, n_tokens, head_dim]")
        if self.keys.shape[2] != len(self.token_ids):
            raise ValueError(f"KV covers {self.keys.shape[2]} tokens but token_ids has {len(self.token_ids)}")

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def positions(self) -> torch.Tensor:
        """int64 ``[n]``: the positions the KV was computed at."""
        return torch.arange(self.start, self.start + self.n_tokens, dtype=torch.int64)

    @property
    def dtype(self) -> torch.dtype:
        return self.keys.dtype

    @property
    def nbytes(self) -> int:
        """Bytes held by the K and V tensors."""
        return self.keys.numel() * self.keys.element_size() + self.values.numel() * self.values.element_size()


@runtime_checkable
class ChunkStore(Protocol):
    """Where chunk KVs live. Implementations: :class:`MemoryChunkStore`, :class:`DiskChunkStore`."""

    def get(self, key: ChunkHash, *, fingerprint: str | None = None) -> ChunkKV | None:
        """The chunk under ``key``, or ``None`` on a miss (also when its fingerprint differs)."""
        ...

    def put(self, kv: ChunkKV) -> bool:
        """Store ``kv`` (evicting LRU entries over the byte budget); ``False`` if it cannot fit at all."""
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
        max_bytes: byte budget over the K and V tensors (default 1 GiB); ``None`` = unbounded.
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
    reader never sees half a file. Metadata holds the format tag, key, model fingerprint,
    dtype, shapes and start position; a file whose metadata or tensors fail the check is a
    miss: it is logged, deleted, and rewritten by the next ``put``. Nothing is unpickled.

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
                    if meta.get("format") != _FORMAT or meta.get("key") != key:
                        raise ValueError(f"metadata format/key mismatch: {meta.get('format')!r}")
                    keys, values = f.get_tensor("keys"), f.get_tensor("values")
                    token_ids = f.get_tensor("token_ids").tolist()
                shape = json.loads(meta["shape"])
                if list(keys.shape) != shape or list(values.shape) != shape:
                    raise ValueError(f"tensor shapes {tuple(keys.shape)}/{tuple(values.shape)} != metadata {shape}")
                if str(keys.dtype).replace("torch.", "") != meta["dtype"]:
                    raise ValueError(f"dtype {keys.dtype} != metadata {meta['dtype']}")
                kv = ChunkKV(ChunkHash(key), meta["fingerprint"], token_ids, keys, values, int(meta["start"]))
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
        meta = {
            "format": _FORMAT, "key": kv.key, "fingerprint": kv.fingerprint,
            "dtype": str(kv.keys.dtype).replace("torch.", ""), "shape": json.dumps(list(kv.keys.shape)),
            "start": str(kv.start), "n_tokens": str(kv.n_tokens),
        }
        tensors = {"keys": kv.keys.contiguous(), "values": kv.values.contiguous(),
                   "token_ids": torch.tensor(kv.token_ids, dtype=torch.int64)}
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
