"""Disk chunk KV store: one safetensors file per chunk, LRU by access time under a byte budget.

Files are written to a temporary name and moved into place with :func:`os.replace`, so a reader
never sees half a file. Only ``<64 hex digits>.safetensors`` files are entries. A writer killed
mid-``put`` leaves its temporary file (``.tmp-<host>-<pid>-<random>.part``, or
``.tmp-<random>.safetensors`` from ragcache 0.2 and earlier) behind: it is never listed, never
counted against the budget, and removed when a store opens the folder and can tell it is stale
(its writer was a process on this host that no longer runs, or it is older than
:data:`STALE_TEMP_S`). A live writer in another process keeps its file; if its file is removed
anyway (another host's opener, after :data:`STALE_TEMP_S`), that ``put`` logs and returns
``False`` instead of raising.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from ragcache.engine.chunk.stores.base import BatchedStore, ChunkKV, StoreStats, check_budget, chunk_from_payload
from ragcache.hashing import ChunkHash

__all__ = ["STALE_TEMP_S", "DiskChunkStore"]

log = logging.getLogger(__name__)

STALE_TEMP_S = 600.0
"""A temporary file older than this (seconds since its last write) is a dead writer's leftover."""
_ENTRY = re.compile(r"^[0-9a-f]{64}\.safetensors$")
_TEMP_PREFIX = ".tmp-"
_HOST = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:64] or "host"


@dataclass(slots=True)
class _DiskEntry:
    path: Path
    nbytes: int = field(default=0)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # exists (another user's) or cannot tell: keep its file
    return True


def _stale_temp(path: Path, now: float) -> bool:
    """Whether a temporary file was left by a writer that is gone (see the module docstring)."""
    try:
        age = now - path.stat().st_mtime
    except FileNotFoundError:
        return False
    if age > STALE_TEMP_S:
        return True
    parts = path.name[len(_TEMP_PREFIX):].split("-")
    if path.suffix == ".part" and len(parts) >= 3 and parts[0] == _HOST and parts[1].isdigit():
        return not _pid_alive(int(parts[1]))
    return False


class DiskChunkStore(BatchedStore):
    """One safetensors file per chunk under ``root``, LRU (by access order) under ``max_bytes``.

    Metadata is :meth:`ChunkKV.to_payload`'s (container version, key, model fingerprint, KV
    format tag, shape, start position); a file whose metadata or tensors fail
    :func:`chunk_from_payload`'s check (truncated, corrupt, another key) is a miss: it is
    logged, deleted, and rewritten by the next ``put``. Nothing is unpickled. Temporary files
    of interrupted writes are never entries (module docstring).

    Args:
        root: directory (created if missing).
        max_bytes: byte budget over file sizes; ``None`` = unbounded.

    Attributes:
        stale_temps_removed: leftover temporary files removed when this store opened ``root``.
    """

    def __init__(self, root: str | os.PathLike, max_bytes: int | None = None) -> None:
        self.root = Path(root).expanduser()
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = check_budget(max_bytes)
        self._lock = threading.Lock()
        self.stats = StoreStats()
        self.stale_temps_removed = self._remove_stale_temps()
        self._index: OrderedDict[str, _DiskEntry] = OrderedDict()
        entries = []
        for p in self.root.iterdir():
            if _ENTRY.match(p.name):
                try:
                    st = p.stat()
                except FileNotFoundError:  # evicted by another process meanwhile
                    continue
                entries.append((st.st_mtime, p, st.st_size))
        for _, p, size in sorted(entries, key=lambda e: e[0]):  # oldest first = least recently used first
            self._index[p.name[:64]] = _DiskEntry(p, size)
        self._bytes = sum(e.nbytes for e in self._index.values())

    def _remove_stale_temps(self) -> int:
        now, removed = time.time(), 0
        for p in self.root.glob(f"{_TEMP_PREFIX}*"):
            if p.is_file() and _stale_temp(p, now):
                try:
                    p.unlink()
                    removed += 1
                except FileNotFoundError:
                    pass
        if removed:
            log.warning("removed %d temporary file(s) of interrupted chunk writes from %s", removed, self.root)
        return removed

    def _path(self, key: str) -> Path:
        if len(key) != 64 or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"chunk key must be a lower-case sha256 hex digest (64 characters); got {key!r}")
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
        """Write ``kv`` atomically; ``False`` when it alone exceeds ``max_bytes`` or its temporary
        file was removed under it (see the module docstring)."""
        from safetensors.torch import save_file

        path = self._path(kv.key)
        tensors, meta = kv.to_payload()
        with self._lock:
            fd, tmp = tempfile.mkstemp(prefix=f"{_TEMP_PREFIX}{_HOST}-{os.getpid()}-", suffix=".part", dir=self.root)
            os.close(fd)
            try:
                save_file(tensors, tmp, metadata=meta)
                size = os.path.getsize(tmp)
                if self.max_bytes is not None and size > self.max_bytes:
                    log.warning("chunk %s (%d bytes) exceeds the disk budget of %d bytes; not cached",
                                kv.key[:12], size, self.max_bytes)
                    return False
                os.replace(tmp, path)
            except FileNotFoundError as e:
                log.warning("temporary file of chunk %s was removed during the write (%s); not cached", kv.key[:12], e)
                return False
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
            old = self._index.pop(kv.key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._index[kv.key] = _DiskEntry(path, size)
            self._bytes += size
            self.stats.puts += 1
            while self.max_bytes is not None and self._bytes > self.max_bytes and len(self._index) > 1:
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
