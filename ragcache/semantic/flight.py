"""Single flight: concurrent identical misses (same partition, same question words) make one model call.

:func:`single_flight` looks the question up; on a miss it takes a lock keyed by (partition,
question words), looks up once more (another caller may have just stored the answer), and only
then calls ``compute()`` and stores its answer. Callers with the same question wait on the lock
and find the stored answer. The lock is the cache's store's (``cache.flight_lock``, which is
``VectorAnswerStore.lock``):

- PostgreSQL (:class:`~ragcache.semantic.pg_store.PgAnswerStore`): a session advisory lock, so the
  flight spans every process and machine on that database. It belongs to the holder's connection:
  a holder that crashes releases it at once.
- FAISS + SQLite (:class:`~ragcache.semantic.faiss_store.FaissAnswerStore`): a lock in this process
  (:data:`LOCAL_LOCKS`) and, for a folder on disk, a lock file per key (:class:`FileFlightLocks`),
  so processes sharing one folder (``ragcache ask`` runs) share the flight.

A holder that hangs blocks the others for at most ``timeout_s`` seconds; then they compute
themselves (logged). If ``compute`` raises, the lock is released and the next waiter computes.

Async callers (:func:`aflight_hold`, used by ``RagCache.aanswer``) take the *same* locks without
blocking a thread while they wait: they try the lock (``pg_try_advisory_lock``, or a non-blocking
acquire of the process lock) and sleep on the event loop between tries, so sync and async callers
of one question share one flight, and a cancelled waiter holds nothing.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragcache.semantic.checks import checked_partition
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


def check_timeout(timeout_s: Any) -> float:
    """``timeout_s`` as float seconds after checking it: a finite number >= 0 (0: never wait for
    another caller's model call, compute at once).

    Raises:
        TypeError: not a number (``None``, a str, a bool). ValueError: a negative, NaN or infinite
            number. The locks read these differently (-1 is "forever" to ``threading.Lock``, NaN never
            times out on the event loop, PostgreSQL rounds both to 1 ms), so none of them is accepted.
    """
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise TypeError(f"flight timeout must be a finite number of seconds >= 0 (0: never wait for another "
                        f"caller), got {type(timeout_s).__name__} {timeout_s!r:.40}")
    if not 0 <= timeout_s < math.inf:
        raise ValueError(f"flight timeout must be a finite number of seconds >= 0 (0: never wait for another "
                         f"caller), got {timeout_s!r}")
    return float(timeout_s)


def flight_key(partition: PartitionKey, question: str) -> str:
    """Hex sha256 of (partition digest, question words): what identical misses share."""
    q = exact_form(normalize_question(question))
    return hashlib.sha256(f"{partition.digest}\0{q}".encode()).hexdigest()


class _ProcessLocks:
    """Named locks in this process, dropped when nobody holds or waits for them. Sync callers wait
    in ``lock.acquire``; async callers poll it on the event loop (:func:`poll_lock`)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def _user(self, key: str) -> Iterator[threading.Lock]:
        """The lock named ``key``, counted as used (created / dropped with its first / last user)."""
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            yield lock
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    @contextmanager
    def hold(self, key: str, timeout_s: float) -> Iterator[bool]:
        with self._user(key) as lock:
            locked = lock.acquire(timeout=timeout_s)
            try:
                yield locked
            finally:
                if locked:
                    lock.release()

    @asynccontextmanager
    async def ahold(self, key: str, timeout_s: float) -> AsyncIterator[bool]:
        with self._user(key) as lock:
            async def try_lock() -> bool:
                return lock.acquire(blocking=False)

            locked = await poll_lock(try_lock, timeout_s)
            try:
                yield locked
            finally:
                if locked:
                    lock.release()


_LOCAL = _ProcessLocks()
LOCAL_LOCKS = _LOCAL
"""This process's named locks (the embedded store's single-flight lock)."""
POLL_S = (0.005, 0.1)
"""First and longest sleep (seconds) between an async waiter's tries; the sleep doubles each try."""


async def poll_lock(try_lock: Callable[[], Awaitable[bool]], timeout_s: float) -> bool:
    """Await ``try_lock()`` until it returns True or ``timeout_s`` seconds pass, sleeping on the event
    loop between tries (5 ms doubling to 100 ms). Returns whether the lock was taken."""
    import asyncio  # lazily: the sync hit path never needs it
    deadline = time.monotonic() + timeout_s
    pause = POLL_S[0]
    while True:
        if await try_lock():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, POLL_S[1])


class FileFlightLocks:
    """Single-flight locks that span every process on this machine: one lock file per key under
    ``directory`` (``filelock``: ``fcntl.flock`` / ``msvcrt.locking``, released by the OS when the
    holder exits or crashes), taken after this process's own lock of the same key (threads).
    ``hold(key, timeout_s)`` / ``ahold`` yield whether both were taken within ``timeout_s`` seconds,
    the shape of :meth:`~ragcache.semantic.protocol.VectorAnswerStore.lock`. The embedded store
    (:class:`~ragcache.semantic.faiss_store.FaissAnswerStore`) uses it for a folder on disk.
    """

    def __init__(self, directory: str | Path) -> None:
        self.root = Path(directory)

    def _file(self, key: str) -> Any:
        from filelock import FileLock

        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.root / f"{key[:40]}.lock"))

    @contextmanager
    def hold(self, key: str, timeout_s: float) -> Iterator[bool]:
        from filelock import Timeout

        start = time.monotonic()
        with LOCAL_LOCKS.hold(key, timeout_s) as local:
            if not local:
                yield False
                return
            lock = self._file(key)
            try:
                lock.acquire(timeout=max(0.0, timeout_s - (time.monotonic() - start)))
            except Timeout:
                yield False
                return
            try:
                yield True
            finally:
                lock.release()

    @asynccontextmanager
    async def ahold(self, key: str, timeout_s: float) -> AsyncIterator[bool]:
        from filelock import Timeout

        start = time.monotonic()
        async with LOCAL_LOCKS.ahold(key, timeout_s) as local:
            if not local:
                yield False
                return
            lock = self._file(key)

            async def try_lock() -> bool:
                try:
                    lock.acquire(timeout=0)
                except Timeout:
                    return False
                return True

            locked = await poll_lock(try_lock, max(0.0, timeout_s - (time.monotonic() - start)))
            try:
                yield locked
            finally:
                if locked:
                    lock.release()


@contextmanager
def flight_hold(cache: Any, partition: PartitionKey, question: str, timeout_s: float = 60.0) -> Iterator[bool]:
    """Hold the single-flight lock of (partition, question words) for ``cache`` (its store's lock,
    ``cache.flight_lock``: a PostgreSQL advisory lock for every process on that database, a lock in
    this process for the embedded store). Yields whether the lock was taken (``False`` after waiting ``timeout_s`` seconds for a
    holder that did not finish: the caller then computes anyway). Used by :func:`single_flight` and by
    ``RagCache.answer``.

    Raises:
        ValueError: ``timeout_s`` not a finite number >= 0 (:func:`check_timeout`)."""
    timeout_s = check_timeout(timeout_s)
    with cache.flight_lock(flight_key(partition, question), timeout_s) as locked:
        yield locked


@asynccontextmanager
async def aflight_hold(cache: Any, partition: PartitionKey, question: str, timeout_s: float = 60.0
                       ) -> AsyncIterator[bool]:
    """Async :func:`flight_hold`: the same lock (``cache.aflight_lock``, shared with sync callers),
    waited for on the event loop. Yields whether the lock was taken (``False`` after ``timeout_s``
    seconds).

    Raises:
        ValueError: ``timeout_s`` not a finite number >= 0 (:func:`check_timeout`)."""
    timeout_s = check_timeout(timeout_s)
    async with cache.aflight_lock(flight_key(partition, question), timeout_s) as locked:
        yield locked


async def enter_in_thread(cm: Any) -> Any:
    """``cm.__enter__()`` run in a worker thread; returns its value. If the awaiting task is
    cancelled meanwhile, the context is left (``__exit__`` in a thread) as soon as the enter
    finishes, so a lock or connection taken after the cancellation is never kept."""
    import asyncio  # lazily: the sync hit path never needs it
    enter = asyncio.ensure_future(asyncio.to_thread(cm.__enter__))
    try:
        return await asyncio.shield(enter)
    except asyncio.CancelledError:
        enter.add_done_callback(lambda f: f.cancelled() or f.exception() is not None
                                or threading.Thread(target=cm.__exit__, args=(None, None, None)).start())
        raise


def single_flight(cache: Any, question: str, compute: Callable[[], str], *, partition: PartitionKey | None = None,
                  threshold: float | None = None, timeout_s: float = 60.0,
                  metadata: Mapping[str, Any] | None = None, ttl_s: float | None = None) -> FlightResult:
    """Serve ``question`` from ``cache`` or run ``compute()`` once among concurrent identical misses.

    Args:
        cache: a semantic cache (``lookup`` / ``store`` / ``flight_lock``): over PostgreSQL the flight
            spans processes, over the embedded store this process's threads.
        compute: the model call, ``() -> answer text``.
        timeout_s: longest wait for another caller's ``compute`` before computing here.

    Raises:
        ValueError: ``timeout_s`` not a finite number >= 0, before any lookup.
        whatever ``cache.lookup`` / ``cache.store`` / ``compute`` raise (e.g. RemoteStoreError).
    """
    pk = checked_partition(partition)
    check_timeout(timeout_s)
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
