"""RedisChunkStore: chunk KV in Redis (>= 7) or Valkey, shared by every process and machine that points at it.

Each chunk is one string value: safetensors bytes (never pickle) holding the tensors of a
:class:`~ragcache.engine.chunk.chunk_kv.ChunkKV` and, in the safetensors metadata, a format tag, the chunk
key, the model fingerprint and every other field of the record (storage format, start position,
...), so whatever the record carries round-trips. The key is ``<prefix>kv:<chunk hash>``; the
chunk hash already covers the model fingerprint and sink (``ragcache.hashing.hash_chunk``), and
the fingerprint is checked again on read. A value that fails its check (truncated, not
safetensors, another key, another format) is logged, deleted and reported as a miss; a value for
another model is a logged miss.

Eviction: the server's ``maxmemory`` with ``maxmemory-policy allkeys-lru`` (or ``volatile-lru``
with ``ttl_s``) is the eviction policy for a shared deployment. ``max_bytes`` adds a client-side
LRU budget kept in a sorted set (``<prefix>lru``, score = last access) and a size hash
(``<prefix>size``), enforced atomically by a Lua script on every put. ``len`` and ``nbytes``
read that index; values the server evicted or expired leave it when a read misses them.

One request's documents cost one round trip: :meth:`get_many` is a single pipeline (MGET plus the
LRU touch). Any error of the server (unreachable, out of memory under ``noeviction``, a read-only
replica) raises :class:`~ragcache.remote.RemoteStoreError` naming the fix; the client reconnects on
the next call. A read never depends on a write: the LRU touch and the removal of stale index entries
that a read does are best effort, so a read-only replica serves reads.

Sightings (:mod:`ragcache.engine.chunk.admission`): ``<prefix>seen:<chunk hash>`` counts with ``INCR``,
each living :data:`~ragcache.engine.chunk.admission.SIGHTING_TTL_S` after its last sighting; one round
trip per batch.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ragcache.engine.chunk.admission import SIGHTING_TTL_S
from ragcache.engine.chunk.chunk_kv import ChunkKV, chunk_from_bytes, chunk_to_bytes
from ragcache.engine.chunk.stores.base import ChunkEntry, StoreStats
from ragcache.hashing import ChunkHash
from ragcache.remote import RemoteStoreError, redact

__all__ = ["RedisChunkStore", "decode_chunk", "encode_chunk"]

log = logging.getLogger(__name__)


# KEYS: value, lru zset, size hash, bytes counter. ARGV: chunk hash, payload, ttl ms (0 = none), now, max_bytes (0 = none)
_PUT = """
local old = redis.call('HGET', KEYS[3], ARGV[1])
if tonumber(ARGV[3]) > 0 then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) else redis.call('SET', KEYS[1], ARGV[2]) end
local size = string.len(ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], size)
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
local total = redis.call('INCRBY', KEYS[4], size - (tonumber(old) or 0))
local evicted = 0
local budget = tonumber(ARGV[5])
if budget > 0 then
  while total > budget do
    local victim = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
    if not victim or victim == ARGV[1] then break end
    local vsize = tonumber(redis.call('HGET', KEYS[3], victim)) or 0
    redis.call('ZREM', KEYS[2], victim)
    redis.call('HDEL', KEYS[3], victim)
    redis.call('DEL', ARGV[6] .. victim)
    total = redis.call('DECRBY', KEYS[4], vsize)
    evicted = evicted + 1
  end
end
return evicted
"""

# KEYS: value, lru zset, size hash, bytes counter. ARGV: chunk hash
_DROP = """
local existed = redis.call('DEL', KEYS[1])
local size = tonumber(redis.call('HGET', KEYS[3], ARGV[1]))
if size then
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('DECRBY', KEYS[4], size)
end
return existed
"""


def encode_chunk(kv: ChunkKV) -> bytes:
    """A chunk as one safetensors byte string (:func:`ragcache.engine.chunk.chunk_kv.chunk_to_bytes`: the
    tensors, quantized codes / scales / zero points included, and every field in the metadata)."""
    return chunk_to_bytes(kv)


def decode_chunk(data: bytes, key: str) -> ChunkKV:
    """Inverse of :func:`encode_chunk`. Raises ``ValueError`` for anything but a readable chunk of ``key``."""
    return chunk_from_bytes(bytes(data), key)


class RedisChunkStore:
    """Chunk KV store on a Redis / Valkey server (see the module docstring for layout and eviction).

    Args:
        url: ``redis://[:password@]host:port/db``, ``rediss://...`` (TLS) or ``unix:///path.sock``;
            or an existing ``redis.Redis`` client.
        prefix: key prefix (one per deployment / tenant); keys are ``<prefix>kv:<hash>``.
        ttl_s: time to live of each chunk in seconds (``None``: until evicted).
        max_bytes: client-side LRU budget over the stored values in bytes (``None``: the server's
            ``maxmemory-policy`` alone evicts).
        timeout_s: socket connect / read timeout in seconds.

    Raises:
        ImportError: the ``redis`` package is missing (``pip install 'ragcache[shared]'``).
        ValueError: ``max_bytes`` or ``ttl_s`` not positive.
    """

    def __init__(self, url: Any, *, prefix: str = "ragcache:", ttl_s: float | None = None,
                 max_bytes: int | None = None, timeout_s: float = 5.0) -> None:
        try:
            import redis
        except ImportError as e:
            raise ImportError("RedisChunkStore needs the redis client: pip install 'ragcache[shared]'") from e
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive or None (server-side eviction only); got {max_bytes}")
        if ttl_s is not None and not ttl_s > 0:  # NaN refused too
            raise ValueError(f"ttl_s must be > 0 seconds or None; got {ttl_s}")
        if isinstance(url, str):
            self.url = url
            self._r = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        else:
            self.url, self._r = "redis client", url
        self.prefix, self.ttl_s, self.max_bytes = prefix, ttl_s, max_bytes
        self._lru, self._size, self._bytes = f"{prefix}lru", f"{prefix}size", f"{prefix}bytes"
        self._put = self._r.register_script(_PUT)
        self._drop_script = self._r.register_script(_DROP)
        self.stats = StoreStats()

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> RedisChunkStore:
        """The store a ``redis`` URL of :data:`ragcache.store_kinds.CHUNK_STORES` names (``redis://``,
        ``rediss://``, ``unix://``; ``valkey://`` / ``valkeys://`` are read as their Redis names, which the
        client speaks to Valkey); ``kwargs`` go to the constructor.

        Raises:
            ImportError / ValueError: as the constructor."""
        scheme, rest = url.split("://", 1)
        if scheme.lower().startswith("valkey"):
            url = "redis" + scheme[len("valkey"):].lower() + "://" + rest
        return cls(url, **kwargs)

    def _k(self, key: str) -> str:
        return f"{self.prefix}kv:{key}"

    def _call(self, what: str, fn: Any) -> Any:
        """``fn()``, with every error of the server or its client as a :class:`RemoteStoreError` naming the
        server and the fix (unreachable, out of memory under ``noeviction``, a read-only replica, ...)."""
        import redis

        try:
            return fn()
        except redis.RedisError as e:
            raise RemoteStoreError(f"Redis / Valkey at {redact(self.url)} failed during {what}: "
                                   f"{_advice(e)}") from e

    # ------------------------------------------------------------------ reads
    def get(self, key: ChunkHash, *, fingerprint: str | None = None) -> ChunkKV | None:
        """The chunk under ``key``, or ``None`` (absent, corrupt, or computed by another model)."""
        return self.get_many([key], fingerprint=fingerprint)[0]

    def get_many(self, keys: Sequence[ChunkHash], *, fingerprint: str | None = None) -> list[ChunkKV | None]:
        """All of ``keys`` in one round trip (MGET and the LRU touch in one pipeline)."""
        if not keys:
            return []

        def fetch() -> list:
            pipe = self._r.pipeline(transaction=False)
            pipe.mget([self._k(k) for k in keys])
            pipe.zadd(self._lru, {k: time.time() for k in keys}, xx=True)
            values, touched = pipe.execute(raise_on_error=False)
            if isinstance(values, Exception):
                raise values
            if isinstance(touched, Exception):  # a read-only replica, a full server: the read stands
                log.debug("LRU touch in %s refused (%s); the values read are served", redact(self.url), touched)
            return values

        raw = self._call("get", fetch)
        out: list[ChunkKV | None] = []
        gone: list[str] = []
        for key, data in zip(keys, raw, strict=True):
            kv = None
            if data is None:
                gone.append(key)
            else:
                try:
                    kv = decode_chunk(data, key)
                except Exception as e:  # noqa: BLE001 - any undecodable value is a miss, then rewritten
                    log.warning("chunk %s in %s failed its check (%s); treating as a miss and deleting it",
                                key[:12], redact(self.url), e)
                    self.stats.corrupt += 1
                    gone.append(key)
                if kv is not None and fingerprint is not None and kv.fingerprint != fingerprint:
                    log.warning("chunk %s belongs to model %s..., not %s...; miss", key[:12],
                                kv.fingerprint[:12], fingerprint[:12])
                    kv = None
            self.stats.hits += kv is not None
            self.stats.misses += kv is None
            out.append(kv)
        if gone:  # drop corrupt values, and index entries whose value the server evicted or expired
            try:  # best effort: the read does not depend on it (a read-only replica refuses it)
                self._call("get", lambda: self._drop_many(gone))
            except RemoteStoreError as e:
                log.debug("could not drop %d stale chunk(s): %s", len(gone), e)
        return out

    def _drop_many(self, keys: list[str]) -> list:
        pipe = self._r.pipeline(transaction=False)
        for key in keys:
            self._drop_script(keys=[self._k(key), self._lru, self._size, self._bytes], args=[key], client=pipe)
        return pipe.execute()

    def contains(self, key: ChunkHash) -> bool:
        return bool(self._call("contains", lambda: self._r.exists(self._k(key))))

    def sight_many(self, keys: Sequence[ChunkHash]) -> list[int]:
        """Count one sighting of each key (shared by every client of the server); each key's count after it.
        One round trip (``INCR`` and ``EXPIRE`` in a pipeline)."""
        if not keys:
            return []

        def run() -> list:
            pipe = self._r.pipeline(transaction=False)
            for k in keys:
                pipe.incr(f"{self.prefix}seen:{k}")
                pipe.expire(f"{self.prefix}seen:{k}", SIGHTING_TTL_S)
            return pipe.execute()

        return [int(n) for n in self._call("sight", run)[0::2]]

    # ------------------------------------------------------------------ writes
    def put(self, kv: ChunkKV) -> bool:
        """Store ``kv`` (replacing any value under its key); ``False`` if it exceeds ``max_bytes`` alone."""
        return self.put_many([kv]) == 1

    def put_many(self, kvs: Iterable[ChunkKV]) -> int:
        """Store several chunks in one pipeline; returns how many were stored."""
        payloads = [(kv, encode_chunk(kv)) for kv in kvs]
        ok = []
        for kv, data in payloads:
            if self.max_bytes is not None and len(data) > self.max_bytes:
                log.warning("chunk %s (%d bytes) exceeds the store budget of %d bytes; not cached",
                            kv.key[:12], len(data), self.max_bytes)
            else:
                ok.append((kv, data))
        if not ok:
            return 0
        ttl_ms = 0 if self.ttl_s is None else max(1, int(self.ttl_s * 1000))

        def write() -> list:
            pipe = self._r.pipeline(transaction=False)
            for kv, data in ok:
                self._put(keys=[self._k(kv.key), self._lru, self._size, self._bytes],
                          args=[kv.key, data, ttl_ms, time.time(), self.max_bytes or 0, f"{self.prefix}kv:"],
                          client=pipe)
            return pipe.execute()

        evicted = self._call("put", write)
        self.stats.puts += len(ok)
        self.stats.evictions += sum(int(e) for e in evicted)
        return len(ok)

    def remove(self, key: ChunkHash) -> bool:
        """Drop ``key``; ``True`` if it was there."""
        return bool(self._call("remove", lambda: self._drop_many([key]))[0])

    def clear(self) -> int:
        """Delete every chunk and sighting count under this prefix (SCAN + DEL; other prefixes untouched).
        Returns the number of chunks deleted."""
        def run() -> int:
            n = 0
            for batch in _batches(self._r.scan_iter(match=f"{self.prefix}kv:*", count=500), 500):
                n += self._r.delete(*batch)
            for batch in _batches(self._r.scan_iter(match=f"{self.prefix}seen:*", count=500), 500):
                self._r.delete(*batch)
            self._r.delete(self._lru, self._size, self._bytes)
            return n
        return self._call("clear", run)

    # ------------------------------------------------------------------ admin
    @property
    def where(self) -> str:
        """The store, as ``ragcache cache stats`` names it: the URL (password hidden) and the key prefix."""
        return f"{redact(self.url)} (prefix {self.prefix})"

    def entries(self) -> list[ChunkEntry]:
        """Every chunk this store's LRU index knows of, least recently used first, each with its safetensors
        metadata read by ``GETRANGE`` (no tensor is fetched): three pipelined round trips. A value the server
        evicted or expired meanwhile, or one that is not safetensors, comes with its ``error``.

        Raises:
            RemoteStoreError: the server cannot be reached."""
        def text(k: Any) -> str:
            return k.decode() if isinstance(k, bytes) else str(k)

        def read() -> tuple[list, dict, dict]:
            r = self._r
            keys = [(text(k), float(t)) for k, t in r.zrange(self._lru, 0, -1, withscores=True)]
            sizes = {text(k): int(v) for k, v in r.hgetall(self._size).items()}
            pipe = r.pipeline(transaction=False)
            for k, _ in keys:
                pipe.getrange(self._k(k), 0, 7)
            lengths = {k: struct.unpack("<Q", h)[0] if len(h) == 8 else 0 for (k, _), h in zip(keys, pipe.execute())}
            wanted = [k for k, n in lengths.items() if 0 < n <= MAX_HEADER_BYTES]
            pipe = r.pipeline(transaction=False)
            for k in wanted:
                pipe.getrange(self._k(k), 0, 7 + lengths[k])
            return keys, sizes, dict(zip(wanted, pipe.execute()))

        keys, sizes, heads = self._call("a read of its chunk list", read)
        out = []
        for k, used in keys:
            try:
                if k not in heads:
                    raise ValueError("no readable value (evicted or expired by the server)")
                out.append(ChunkEntry(k, sizes.get(k, 0), used, _header_metadata(heads[k])))
            except ValueError as e:
                out.append(ChunkEntry(k, sizes.get(k, 0), used, None, str(e)))
        return out

    # ------------------------------------------------------------------ size
    def __len__(self) -> int:
        return int(self._call("len", lambda: self._r.zcard(self._lru)))

    @property
    def nbytes(self) -> int:
        """Bytes of the stored values this store's index knows of (safetensors payloads)."""
        return int(self._call("nbytes", lambda: self._r.get(self._bytes)) or 0)

    def close(self) -> None:
        self._r.close()

    def __enter__(self) -> RedisChunkStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


MAX_HEADER_BYTES = 100 << 20
"""Largest safetensors header :meth:`RedisChunkStore.entries` reads (a larger one is not a chunk)."""


def _header_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of safetensors bytes (the header alone suffices).

    Raises:
        ValueError: not a safetensors header."""
    if len(data) < 8:
        raise ValueError("not a safetensors value")
    (n,) = struct.unpack("<Q", data[:8])
    if len(data) < 8 + n:
        raise ValueError("a truncated safetensors header")
    try:
        return dict(json.loads(data[8:8 + n]).get("__metadata__") or {})
    except (ValueError, AttributeError) as e:
        raise ValueError(f"an unreadable safetensors header ({e})") from None


def _advice(e: Exception) -> str:
    """What a Redis / Valkey error means for this store and what to do about it."""
    import redis

    text = f"{type(e).__name__}: {e}"
    if isinstance(e, redis.ConnectionError | redis.TimeoutError):
        return f"unreachable ({text}); check that the server is running; the next call reconnects"
    if isinstance(e, redis.exceptions.ReadOnlyError):
        return (f"the server is a read-only replica ({text}); point the store at the primary (RAGCACHE_KV_URL) "
                "or read from the replica without writing")
    if isinstance(e, redis.exceptions.OutOfMemoryError):
        return (f"the server is at its maxmemory and refuses writes ({text}); set maxmemory-policy allkeys-lru "
                "(or volatile-lru with ttl_s) so it evicts, raise maxmemory, or give the store a max_bytes budget")
    return text


def _batches(it: Iterable, n: int) -> Iterable[list]:
    batch: list = []
    for x in it:
        batch.append(x)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch
