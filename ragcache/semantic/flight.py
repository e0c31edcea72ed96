"""Single flight: concurrent identical misses (same partition, same question words) make one model call.

:func:`single_flight` looks the question up; on a miss it takes a lock keyed by (partition,
question words), looks up once more (another caller may have just stored the answer), and only
then calls ``compute()`` and stores its answer. Callers with the same question wait on the lock
and find the stored answer. The lock comes from the cache:

- :class:`~ragcache.semantic.pg_cache.PgSemanticCache`: a PostgreSQL session advisory lock, so the
  flight spans every process and machine on that database. It belongs to the holder's connection:
  a holder that crashes releases it at once.
- any other cache (the embedded :class:`~ragcache.semantic.SemanticCache`): a lock in this process.

A holder that hangs blocks the others for at most ``timeout_s`` seconds; then they compute
themselves (logged). If ``compute`` raises, the lock is released and the next waiter computes.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ragcache.semantic.cache import checked_partition
from ragcache.semantic.partition import PartitionKey
from ragcache.semantic.records import SemanticHit
from ragcache.semantic.text import exact_form, normalize_question

logger = logging.getLogger("ragcache.semantic.flight")



@dataclass(frozen=True, slots=True)
class FlightResult:
    """Outcome of :func:`single_flight`.

    Attributes:
        answer: the answer text (served or computed).
        hit: the cache hit that served it, or ``None`` when this caller ran ``compute``.
        computed: ``compute`` ran in this call.
        waited_s: seconds spent waiting for another caller's ``compute``.
    """

    answer: str
    hit: SemanticHit | None
    computed: bool
    waited_s: float = 0.0


def flight_key(partition: PartitionKey, question: str) -> str:
    """Hex sha256 of (partition digest, question words): what identical misses share."""
    q = exact_form(normalize_question(question))
    return hashlib.sha256(f"{partition.digest}\0{q}".encode()).hexdigest()


class _ProcessLocks:
    """Named locks in this process, dropped when nobody holds or waits for them."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, key: str, timeout_s: float) -> Iterator[bool]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        locked = lock.acquire(timeout=timeout_s)
        try:
            yield locked
        finally:
            if locked:
                lock.release()
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)


_LOCAL = _ProcessLocks()


@contextmanager
def flight_hold(cache: Any, partition: PartitionKey, question: str, timeout_s: float = 60.0) -> Iterator[bool]:
    """Hold the single-flight lock of (partition, question words) for ``cache``: a PostgreSQL advisory
    lock when the cache has ``flight_lock`` (every process on that database), else a lock in this
    process. Yields whether the lock was taken (``False`` after waiting ``timeout_s`` seconds for a
    holder that did not finish: the caller then computes anyway). Used by :func:`single_flight` and by
    ``RagCache.answer``."""
    hold = getattr(cache, "flight_lock", None) or _LOCAL.hold
    with hold(flight_key(partition, question), timeout_s) as locked:
        yield locked


def single_flight(cache: Any, question: str, compute: Callable[[], str], *, partition: PartitionKey | None = None,
                  threshold: float | None = None, timeout_s: float = 60.0,
                  metadata: Mapping[str, Any] | None = None, ttl_s: float | None = None) -> FlightResult:
    """Serve ``question`` from ``cache`` or run ``compute()`` once among concurrent identical misses.

    Args:
        cache: a semantic cache (``lookup`` / ``store``); if it has ``flight_lock(key, timeout_s)``
            (PostgreSQL) the flight spans processes, else it spans this process's threads.
        compute: the model call, ``() -> answer text``.
        timeout_s: longest wait for another caller's ``compute`` before computing here.

    Raises:
        whatever ``cache.lookup`` / ``cache.store`` / ``compute`` raise (e.g. RemoteStoreError).
    """
    pk = checked_partition(partition)
    hit = cache.lookup(question, partition=pk, threshold=threshold)
    if hit is not None:
        return FlightResult(hit.answer, hit, False)
    t0 = time.perf_counter()
    with flight_hold(cache, pk, question, timeout_s) as locked:
        waited = time.perf_counter() - t0
        if locked:
            hit = cache.lookup(question, partition=pk, threshold=threshold)
            if hit is not None:
                return FlightResult(hit.answer, hit, False, waited)
        else:
            logger.warning("single flight: waited %.1f s for another caller of %r; computing here",
                           timeout_s, question[:60])
        answer = compute()
        cache.store(question, answer, partition=pk, metadata=metadata, ttl_s=ttl_s)
        return FlightResult(answer, None, True, waited)
