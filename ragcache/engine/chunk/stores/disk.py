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

Several processes may share one folder (``ragcache serve`` workers, a CLI run beside a server).
The folder is the store: its entries, their sizes and their order live in the file system, not
in a process. Every write and eviction runs under one file lock (``.lock`` in the folder,
:mod:`filelock`), and the byte budget is checked against every entry in the folder, evicting the
least recently used (oldest modification time: a read touches its file) whoever wrote it, so
the budget holds for the folder, not per process. Reads take no lock (an entry is replaced
atomically); a chunk another process evicts between the lookup and the read is a miss.

Sightings (:mod:`ragcache.engine.chunk.admission`): ``seen/<key>`` holds one byte per sighting of a
missed document, appended with ``O_APPEND`` (atomic across processes, no lock); its size is the
count, capped at :data:`MAX_COUNT`. Nothing in it is read but its size. Above
:data:`~ragcache.engine.chunk.admission.MAX_SIGHTINGS` files the least recently seen are removed.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock

from ragcache.engine.chunk.admission import MAX_SIGHTINGS
from ragcache.engine.chunk.stores.base import BatchedStore, ChunkKV, StoreStats, check_budget, chunk_from_payload
from ragcache.hashing import ChunkHash

__all__ = ["MAX_COUNT", "STALE_TEMP_S", "DiskChunkStore"]

log = logging.getLogger(__name__)

STALE_TEMP_S = 600.0
"""A temporary file older than this (seconds since its last write) is a dead writer's leftover."""
MAX_COUNT = 255
"""Sightings a ``seen/`` file counts up to (bytes); more add nothing an admission rule needs."""
_PRUNE_EVERY = 1024
_ENTRY = re.compile(r"^[0-9a-f]{64}\.safetensors$")
_TEMP_PREFIX = ".tmp-"
_HOST = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:64] or "host"


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
    """One safetensors file per chunk under ``root``, LRU under ``max_bytes`` for the whole folder.

    Metadata is :meth:`ChunkKV.to_payload`'s (container version, key, model fingerprint, KV
    format tag, shape, start position); a file whose metadata or tensors fail
    :func:`chunk_from_payload`'s check (truncated, corrupt, another key) is a miss: it is
    logged, deleted, and rewritten by the next ``put``. Nothing is unpickled. Temporary files
    of interrupted writes are never entries, and processes sharing the folder share its budget
    (module docstring).

    Args:
        root: directory (created if missing).
        max_bytes: byte budget over the sizes of every entry in the folder; ``None`` = unbounded.

    Attributes:
        stale_temps_removed: leftover temporary files removed when this store opened ``root``.

    Raises:
        ValueError: ``max_bytes`` is not positive.
    """

    LOCK_NAME = ".lock"

    def __init__(self, root: str | os.PathLike, max_bytes: int | None = None) -> None:
        self.root = Path(root).expanduser()
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = check_budget(max_bytes)
        self._lock = threading.Lock()
        self._folder_lock = FileLock(str(self.root / self.LOCK_NAME))
        self.stats = StoreStats()
        self._sighted = 0  # sightings since the last prune of seen/
        with self._folder_lock:
            self.stale_temps_removed = self._remove_stale_temps()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> DiskChunkStore:
        """The store a ``disk`` URL of :data:`ragcache.store_kinds.CHUNK_STORES` names: a folder path or
        ``file://DIR``; ``kwargs`` go to the constructor."""
        return cls(url.split("://", 1)[1] if "://" in url else url, **kwargs)

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

    def _entries(self) -> list[tuple[int, str, int]]:
        """``(mtime_ns, key, bytes)`` of every entry in the folder, least recently used first."""
        out = []
        for p in self.root.iterdir():
            if _ENTRY.match(p.name):
                try:
                    st = p.stat()
                except FileNotFoundError:  # removed by another process meanwhile
                    continue
                out.append((st.st_mtime_ns, p.name[:64], st.st_size))
        return sorted(out)

    def _path(self, key: str) -> Path:
        if len(key) != 64 or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"chunk key must be a lower-case sha256 hex digest (64 characters); got {key!r}")
        return self.root / f"{key}.safetensors"

    def get(self, key: ChunkHash, *, fingerprint: str | None = None) -> ChunkKV | None:
        from safetensors import safe_open

        path = self._path(key)
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                tensors = {name: f.get_tensor(name) for name in f.keys()}
            kv = chunk_from_payload(tensors, meta, key)
        except Exception as e:  # noqa: BLE001 - any unreadable file is a miss, then rewritten
            with self._lock:
                self.stats.misses += 1
                if not path.is_file():  # never stored, or evicted (by any process) since: a plain miss
                    return None
                self.stats.corrupt += 1
            log.warning("chunk file %s failed its check (%s); treating as a miss and deleting it", path, e)
            try:  # best effort: the miss does not depend on it (a read-only folder keeps the file)
                with self._folder_lock:
                    path.unlink(missing_ok=True)
            except OSError as gone:
                log.debug("could not delete %s (%s)", path, gone)
            return None
        if fingerprint is not None and kv.fingerprint != fingerprint:
            log.warning("chunk file %s belongs to model %s..., not %s...; miss",
                        path, kv.fingerprint[:12], fingerprint[:12])
            with self._lock:
                self.stats.misses += 1
            return None
        with self._lock:
            self.stats.hits += 1
        try:
            os.utime(path)  # the folder's LRU order, for every process and across restarts
        except OSError:  # evicted by another process since the read: the KV read is still whole
            pass
        return kv

    def put(self, kv: ChunkKV) -> bool:
        """Write ``kv`` atomically and evict the folder's least recently used entries above
        ``max_bytes``; ``False`` when it alone exceeds ``max_bytes`` or its temporary file was removed
        under it (see the module docstring)."""
        from safetensors.torch import save_file

        path = self._path(kv.key)
        tensors, meta = kv.to_payload()
        fd, tmp = tempfile.mkstemp(prefix=f"{_TEMP_PREFIX}{_HOST}-{os.getpid()}-", suffix=".part", dir=self.root)
        os.close(fd)
        try:
            save_file(tensors, tmp, metadata=meta)  # written outside the lock; moved into place under it
            size = os.path.getsize(tmp)
            if self.max_bytes is not None and size > self.max_bytes:
                log.warning("chunk %s (%d bytes) exceeds the disk budget of %d bytes; not cached",
                            kv.key[:12], size, self.max_bytes)
                return False
            with self._lock, self._folder_lock:
                os.replace(tmp, path)
                self.stats.puts += 1
                self._evict(keep=kv.key)
        except FileNotFoundError as e:
            log.warning("temporary file of chunk %s was removed during the write (%s); not cached", kv.key[:12], e)
            return False
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return True

    def _evict(self, keep: str) -> None:
        """Remove the folder's least recently used entries (any process's) until it fits ``max_bytes``,
        never ``keep``; called under the folder lock."""
        if self.max_bytes is None:
            return
        entries = self._entries()
        total = sum(size for _, _, size in entries)
        for _, key, size in entries:
            if total <= self.max_bytes:
                break
            if key == keep:
                continue
            self._path(key).unlink(missing_ok=True)
            total -= size
            self.stats.evictions += 1

    def contains(self, key: ChunkHash) -> bool:
        return self._path(key).is_file()

    def sight_many(self, keys: Sequence[ChunkHash]) -> list[int]:
        """Count one sighting of each key in ``seen/`` (module docstring), shared by every process using the
        folder; returns each key's count after it (at most :data:`MAX_COUNT`)."""
        seen = self.root / "seen"
        seen.mkdir(exist_ok=True)
        out = []
        for key in keys:
            path = seen / self._path(key).stem  # the key, checked
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if os.fstat(fd).st_size < MAX_COUNT:
                    os.write(fd, b".")
                out.append(min(os.fstat(fd).st_size, MAX_COUNT))
            finally:
                os.close(fd)
        with self._lock:
            self._sighted += len(keys)
            prune, self._sighted = self._sighted >= _PRUNE_EVERY, self._sighted % _PRUNE_EVERY
        if prune:
            self._prune_sightings(seen)
        return out

    def _prune_sightings(self, seen: Path, keep: int = MAX_SIGHTINGS) -> None:
        """Remove the least recently seen ``seen/`` files above ``keep`` (any process's)."""
        with self._folder_lock:
            files = []
            for p in seen.iterdir():
                try:
                    files.append((p.stat().st_mtime_ns, p))
                except FileNotFoundError:
                    continue
            if len(files) > keep:
                for _, p in sorted(files)[:len(files) - keep]:
                    p.unlink(missing_ok=True)

    def remove(self, key: ChunkHash) -> bool:
        path = self._path(key)
        with self._lock, self._folder_lock:
            existed = path.is_file()
            path.unlink(missing_ok=True)
            return existed

    def close(self) -> None:
        """Nothing to flush (every put is already on disk)."""

    def __len__(self) -> int:
        """Entries in the folder (every process's)."""
        return len(self._entries())

    @property
    def nbytes(self) -> int:
        """Bytes of every entry in the folder (what the budget is checked against)."""
        return sum(size for _, _, size in self._entries())
