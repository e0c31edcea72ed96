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
metadata of :meth:`ChunkKV.to_payload`, and rebuild with :func:`chunk_from_payload`, which
checks the container version, digest, key, format tag, shapes and dtypes; a ``ValueError`` from it (or
a missing tensor) means the stored value must be logged, dropped and reported as a miss. The
fields are ``format`` (container version ``ragcache-chunk-kv-v2``), ``key``, ``fingerprint``,
``kv_format``, ``shape`` (``[L, H, n, D]``), ``start``, ``n_tokens``, ``dtype`` (dense only),
``digest`` (sha256 of the tensors), and the tensors ``token_ids`` plus ``keys`` / ``values``
(dense) or ``keys.codes``, ``keys.scale``, ``keys.zero``, ``values.codes``, ``values.scale``,
``values.zero`` (quantized).
``safetensors.torch.save`` / ``load`` turn them into one byte string and back.
"""

from __future__ import annotations

import hashlib
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

from ragcache.engine.quant import KVFormat, QuantizedTensor, expected_shapes
from ragcache.hashing import ChunkHash

log = logging.getLogger(__name__)

_FORMAT = "ragcache-chunk-kv-v2"


class ChunkKV:
    """One document chunk's KV cache, computed after the sink and stored without it.

    Args / attributes:
        key: position-independent chunk hash (model fingerprint, sink ids, token ids, format tag).
        fingerprint: model fingerprint digest the KV was computed with.
        token_ids: the chunk's own token ids, ``n`` of them (re-checked on a hit).
        keys: dense ``[num_layers, kv_heads, n, head_dim]`` post-RoPE keys at :attr:`positions`,
            or their :class:`~ragcache.engine.quant.QuantizedTensor` (KIVI per-channel groups).
        values: dense ``[num_layers, kv_heads, n, head_dim]`` values, or their
            :class:`~ragcache.engine.quant.QuantizedTensor` (per-token groups).
        start: position of the chunk's first token when it was computed (= sink length);
            token ``i`` sits at ``start + i``.

    Reading :attr:`keys` / :attr:`values` always gives dense tensors: the stored ones for a
    dense chunk, or float32 dequantized on each access for an int8 / int4 chunk (blending casts
    them to the model's compute dtype). :attr:`nbytes` counts what is stored (codes, scales and
    zero points for quantized chunks).

    Raises:
        ValueError: K/V of different or non-4-D shapes, a token count that differs from
            ``len(token_ids)``, or quantized K/V whose parameters disagree.
    """

    __slots__ = ("key", "fingerprint", "token_ids", "start", "_k", "_v", "kv_format")

    def __init__(self, key: ChunkHash, fingerprint: str, token_ids: list[int], keys: torch.Tensor | QuantizedTensor,
                 values: torch.Tensor | QuantizedTensor, start: int) -> None:
        self.key, self.fingerprint, self.token_ids, self.start = key, fingerprint, list(token_ids), int(start)
        self._k, self._v = keys, values
        kq, vq = isinstance(keys, QuantizedTensor), isinstance(values, QuantizedTensor)
        k_shape = tuple(keys.shape)
        if kq != vq or k_shape != tuple(values.shape) or len(k_shape) != 4:
            raise ValueError(f"keys {k_shape} and values {tuple(values.shape)} must both be "
                             "[num_layers, kv_heads, n_tokens, head_dim], both dense or both quantized")
        if kq:
            if (keys.bits, keys.axis, values.axis) != (values.bits, "channel", "token") or \
                    values.group_size != min(keys.group_size, k_shape[3]):
                raise ValueError("quantized keys must be per-channel and values per-token with the same bits/group size")
            self.kv_format = KVFormat(keys.bits, keys.group_size, torch.float32)
        else:
            self.kv_format = KVFormat.of("fp16", dtype=keys.dtype)
        if k_shape[2] != len(self.token_ids):
            raise ValueError(f"KV covers {k_shape[2]} tokens but token_ids has {len(self.token_ids)}")

    def __repr__(self) -> str:
        return (f"ChunkKV(key={self.key[:12]}..., n_tokens={self.n_tokens}, start={self.start}, "
                f"format={self.kv_format.tag}, nbytes={self.nbytes})")

    @property
    def keys(self) -> torch.Tensor:
        """Dense ``[num_layers, kv_heads, n, head_dim]`` keys (float32 when dequantized)."""
        return self._k.dequantize() if isinstance(self._k, QuantizedTensor) else self._k

    @property
    def values(self) -> torch.Tensor:
        """Dense ``[num_layers, kv_heads, n, head_dim]`` values (float32 when dequantized)."""
        return self._v.dequantize() if isinstance(self._v, QuantizedTensor) else self._v

    @property
    def stored_keys(self) -> torch.Tensor | QuantizedTensor:
        return self._k

    @property
    def stored_values(self) -> torch.Tensor | QuantizedTensor:
        return self._v

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(num_layers, kv_heads, n_tokens, head_dim)``."""
        return tuple(int(s) for s in self._k.shape)  # type: ignore[return-value]

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def positions(self) -> torch.Tensor:
        """int64 ``[n]``: the positions the KV was computed at."""
        return torch.arange(self.start, self.start + self.n_tokens, dtype=torch.int64)

    @property
    def dtype(self) -> torch.dtype:
        """dtype of :attr:`keys` / :attr:`values` as read (float32 for quantized chunks)."""
        return self.kv_format.dtype

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored K and V (codes, scales and zero points included)."""
        if isinstance(self._k, QuantizedTensor):
            return self._k.nbytes + self._v.nbytes  # type: ignore[union-attr]
        return self._k.numel() * self._k.element_size() + self._v.numel() * self._v.element_size()

    # -- serialisation (every store persists exactly these tensors and metadata) ----------
    def to_payload(self) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """Tensors and string metadata that fully describe this chunk (see :func:`chunk_from_payload`).

        Tensors: ``token_ids`` (int64 ``[n]``); dense: ``keys``, ``values``; quantized:
        ``keys.codes``, ``keys.scale``, ``keys.zero``, ``values.codes``, ``values.scale``,
        ``values.zero``. Metadata: ``format`` (container version), ``key``, ``fingerprint``,
        ``kv_format`` (the format tag, e.g. ``"float16"`` or ``"int4-g64"``), ``shape``
        (JSON ``[L, H, n, D]``), ``start``, ``n_tokens``, ``dtype`` for dense chunks, and
        ``digest`` (sha256 over every tensor's name, dtype, shape and bytes).
        """
        meta = {"format": _FORMAT, "key": self.key, "fingerprint": self.fingerprint, "kv_format": self.kv_format.tag,
                "shape": json.dumps(list(self.shape)), "start": str(self.start), "n_tokens": str(self.n_tokens)}
        tensors = {"token_ids": torch.tensor(self.token_ids, dtype=torch.int64)}
        for name, t in (("keys", self._k), ("values", self._v)):
            if isinstance(t, QuantizedTensor):
                tensors.update({f"{name}.codes": t.codes.contiguous(), f"{name}.scale": t.scale.contiguous(),
                                f"{name}.zero": t.zero.contiguous()})
            else:
                tensors[name] = t.contiguous()
                meta["dtype"] = str(t.dtype).replace("torch.", "")
        meta["digest"] = _digest(tensors)
        return tensors, meta


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes (detects flipped bytes in a file or value)."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{list(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def chunk_from_payload(tensors: dict[str, torch.Tensor], meta: dict[str, str], key: str) -> ChunkKV:
    """Rebuild a :class:`ChunkKV` from :meth:`ChunkKV.to_payload` output, checking every field.

    A store calls this on what it read; any error means the stored value is unusable and
    must be treated as a logged miss.

    Raises:
        ValueError: wrong container format or key, unknown format tag, or any tensor whose
            dtype / shape does not match the metadata (truncated, corrupt or foreign data).
    """
    if meta.get("format") != _FORMAT or meta.get("key") != key:
        raise ValueError(f"metadata format/key mismatch: {meta.get('format')!r}")
    if meta.get("digest") != _digest(tensors):
        raise ValueError("tensor bytes do not match the stored digest (corrupt data)")
    fmt = KVFormat.parse(meta["kv_format"])
    shape = tuple(json.loads(meta["shape"]))
    if len(shape) != 4 or int(meta["n_tokens"]) != shape[2]:
        raise ValueError(f"metadata shape {shape} does not fit n_tokens={meta.get('n_tokens')}")
    token_ids = tensors["token_ids"]
    if token_ids.dtype != torch.int64 or tuple(token_ids.shape) != (shape[2],):
        raise ValueError(f"token_ids {token_ids.dtype} {tuple(token_ids.shape)} != int64 [{shape[2]}]")
    parts = []
    for name, axis in (("keys", "channel"), ("values", "token")):
        if not fmt.quantized:
            t = tensors[name]
            if tuple(t.shape) != shape or t.dtype != fmt.dtype or meta.get("dtype") != fmt.tag:
                raise ValueError(f"{name} {t.dtype} {tuple(t.shape)} != metadata {fmt.tag} {shape}")
            parts.append(t)
            continue
        want = expected_shapes(shape, fmt.bits, fmt.group_size, axis)  # type: ignore[arg-type]
        got = {p: tensors[f"{name}.{p}"] for p in ("codes", "scale", "zero")}
        for p, t in got.items():
            dtype = torch.uint8 if p == "codes" else torch.float16
            if tuple(t.shape) != want[p] or t.dtype != dtype:
                raise ValueError(f"{name}.{p} {t.dtype} {tuple(t.shape)} != {dtype} {want[p]} for {fmt.tag}")
        g = fmt.group_size if axis == "channel" else min(fmt.group_size, shape[3])
        parts.append(QuantizedTensor(got["codes"], got["scale"], got["zero"], fmt.bits, g, axis, shape))  # type: ignore[arg-type]
    return ChunkKV(ChunkHash(key), meta["fingerprint"], token_ids.tolist(), parts[0], parts[1], int(meta["start"]))


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
