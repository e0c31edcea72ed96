"""Single flight: concurrent identical misses (same partition, same question text) make one model call.

The answer path (:class:`ragcache.answering.AnswerPath`) is the only user. Two levels, one API for
sync and async callers:

- In this process, :data:`FLIGHTS` (:class:`FlightTable`) seats callers of one key on one
  :class:`Seat`: the first is the leader, the others wait (``Seat.wait`` blocks a thread,
  ``Seat.await_`` sleeps on the event loop). When the leader's call raises, every waiter raises the
  *same* error (the leader's); when it returns, they read its stored answer; when the leader was
  cancelled they start a new flight. A leader that hangs past the flight timeout lets **one**
  waiter through (it becomes the next leader; the others wait for it), not all.
- Across processes, the leader holds the cache's lock of the key (``cache.flight_lock`` /
  ``aflight_lock``, which hold the store's :class:`FlightLocks`):

  - PostgreSQL (:class:`~ragcache.semantic.stores.pg_store.PgAnswerStore`): a session advisory lock, so the
    flight spans every process and machine on that database; a holder that crashes releases it.
  - FAISS + SQLite (:class:`~ragcache.semantic.stores.faiss_store.FaissAnswerStore`): a lock in this process
    (:data:`LOCAL_LOCKS`) and, for a folder on disk, a lock file per key (:class:`FileFlightLocks`),
    so processes sharing one folder (``ragcache ask`` runs) share the flight.

  A leader in another process that fails cannot hand its error over: the next process's leader
  re-reads the cache and calls once (one retry per process, never one per caller).
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from ragcache.semantic.partition import PartitionKey
from ragcache.semantic.text import exact_form, normalize_question

logger = logging.getLogger("ragcache.semantic.flight")
T = TypeVar("T")


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


@runtime_checkable
class FlightLocks(Protocol):
    """Named single-flight locks: what a cache holds while its leader calls the model.

    A store brings its own (the ``locks`` attribute of
    :class:`~ragcache.semantic.stores.faiss_store.FaissAnswerStore` and
    :class:`~ragcache.semantic.stores.pg_store.PgAnswerStore`): :data:`LOCAL_LOCKS` (this process),
    :class:`FileFlightLocks` (every process on this machine that opens one folder) or
    :class:`~ragcache.semantic.stores.pg_flight.PgFlightLocks` (every process on one database).
    """

    def hold(self, key: str, timeout_s: float) -> AbstractContextManager[bool]:
        """The lock named by hex ``key``; yields whether it was taken within ``timeout_s`` seconds."""
        ...

    def ahold(self, key: str, timeout_s: float) -> AbstractAsyncContextManager[bool]:
        """Async :meth:`hold`, waited for on the event loop (the same lock as sync callers')."""
        ...


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


@runtime_checkable
class HoldsFlightLocks(Protocol):
    """A store that brings its own single-flight locks (``locks``), shared with whatever else opens it:
    both of ragcache's answer stores do (:class:`~ragcache.semantic.stores.faiss_store.FaissAnswerStore`:
    :data:`LOCAL_LOCKS` in memory, :class:`FileFlightLocks` for a folder;
    :class:`~ragcache.semantic.stores.pg_store.PgAnswerStore`: advisory locks). A store without them is
    still a store (the locks are not storage): a cache over it holds :data:`LOCAL_LOCKS`."""

    locks: FlightLocks


def store_locks(store: object) -> FlightLocks:
    """The single-flight locks a cache over ``store`` holds: the store's own when it brings them
    (:class:`HoldsFlightLocks`), else this process's (:data:`LOCAL_LOCKS`)."""
    return store.locks if isinstance(store, HoldsFlightLocks) else LOCAL_LOCKS
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
    ``hold(key, timeout_s)`` / ``ahold`` yield whether both were taken within ``timeout_s`` seconds
    (:class:`FlightLocks`). The embedded store
    (:class:`~ragcache.semantic.stores.faiss_store.FaissAnswerStore`) uses it for a folder on disk.
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


class _Flight:
    """One flight of a key in this process: set ``done`` when its leader leaves, with its error."""

    __slots__ = ("done", "error", "successor")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.successor: _Flight | None = None


class Seat:
    """A caller's place in a flight (:meth:`FlightTable.join`).

    Attributes:
        leader: this caller makes the call.
        lock_timeout_s: how long the leader waits for the store's cross-process lock: the flight
            timeout, or 0 for a caller that took over from a hung leader (that leader still holds
            this process's lock of the key).
    """

    __slots__ = ("_table", "flight", "key", "leader", "lock_timeout_s", "timeout_s")

    def __init__(self, table: FlightTable, key: str, flight: _Flight, leader: bool, timeout_s: float) -> None:
        self._table, self.key, self.flight, self.leader = table, key, flight, leader
        self.timeout_s = self.lock_timeout_s = timeout_s

    def _finished(self) -> str:
        err = self.flight.error
        if err is None:
            return "done"
        if isinstance(err, Exception):
            raise err  # the leader's own error: the waiters do not repeat a failing call
        return "retry"  # the leader was cancelled (or its stream closed): a new flight

    def _next(self) -> str | None:
        """After a wait that timed out: become the next leader (the first to time out) or follow it."""
        nxt, lead = self._table._take_over(self.key, self.flight)
        self.flight = nxt
        if lead:
            self.leader, self.lock_timeout_s = True, 0.0
            logger.warning("single flight: the leader of %s did not finish in %.1f s; one caller answers now",
                           self.key[:12], self.timeout_s)
            return "lead"
        return None

    def wait(self) -> str:
        """``"lead"`` (make the call), ``"done"`` (the leader finished: read the cache) or ``"retry"``
        (join a new flight). Blocks at most the flight timeout per leader.

        Raises:
            the leader's error (the same exception object) when its call raised.
        """
        while not self.leader:
            if self.flight.done.wait(self.timeout_s):
                return self._finished()
            if self._next() is not None:
                break
        return "lead"

    async def await_(self) -> str:
        """Async :meth:`wait`, sleeping on the event loop between checks (:func:`poll_lock`)."""
        while not self.leader:
            async def finished(done: threading.Event = self.flight.done) -> bool:
                return done.is_set()

            if await poll_lock(finished, self.timeout_s):
                return self._finished()
            if self._next() is not None:
                break
        return "lead"


class FlightTable:
    """This process's flights by key (see the module docstring). ``join`` seats a caller; the
    leader runs its call inside ``lead(seat)``, which hands its outcome to the waiters."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._flights: dict[str, _Flight] = {}

    def join(self, key: str, timeout_s: float) -> Seat:
        """A seat on the key's current flight, as its leader when there is none.

        Raises:
            ValueError: ``timeout_s`` not a finite number >= 0 (:func:`check_timeout`)."""
        timeout_s = check_timeout(timeout_s)
        with self._guard:
            flight = self._flights.get(key)
            if flight is None:
                flight = self._flights[key] = _Flight()
                return Seat(self, key, flight, True, timeout_s)
        return Seat(self, key, flight, False, timeout_s)

    def _take_over(self, key: str, hung: _Flight) -> tuple[_Flight, bool]:
        with self._guard:
            if hung.successor is not None:
                return hung.successor, False
            hung.successor = nxt = _Flight()
            if self._flights.get(key) is hung:
                self._flights[key] = nxt
            return nxt, True

    @contextmanager
    def lead(self, seat: Seat) -> Iterator[None]:
        """Run the leader's call; on exit the waiters get its outcome (its error, if it raised)."""
        if not seat.leader:
            raise RuntimeError("only a flight's leader leads it")
        flight = seat.flight
        try:
            yield
        except BaseException as e:
            flight.error = e
            raise
        finally:
            with self._guard:
                if self._flights.get(seat.key) is flight:
                    del self._flights[seat.key]
            flight.done.set()

    def __len__(self) -> int:
        with self._guard:
            return len(self._flights)

    def fly(self, cache: Any, key: str, timeout_s: float, look: Callable[[], T | None], call: Callable[[], T]) -> T:
        """The flight protocol for one miss: join the key's flight; a waiter returns ``look()`` once the
        leader is done (or ``call()`` when the leader's answer was not stored); the leader holds
        ``cache.flight_lock`` (across processes), re-reads with ``look()`` and else runs ``call()``.

        Raises:
            the leader's error in every waiter; whatever ``look`` / ``call`` raise."""
        while True:
            seat = self.join(key, timeout_s)
            outcome = seat.wait()
            if outcome == "retry":  # the leader was cancelled or its stream closed: a new flight
                continue
            if outcome == "done":
                return look() or call()
            with self.lead(seat), cache.flight_lock(key, seat.lock_timeout_s) as locked:
                if not locked:
                    _slow(key, timeout_s)
                return look() or call()  # re-read even without the lock: an earlier leader may have stored it

    async def afly(self, cache: Any, key: str, timeout_s: float, look: Callable[[], Awaitable[T | None]],
                   call: Callable[[], Awaitable[T]]) -> T:
        """Async :meth:`fly` (waits on the event loop; ``cache.aflight_lock``), sharing flights with sync callers."""
        while True:
            seat = self.join(key, timeout_s)
            outcome = await seat.await_()
            if outcome == "retry":
                continue
            if outcome == "done":
                return await look() or await call()
            with self.lead(seat):
                async with cache.aflight_lock(key, seat.lock_timeout_s) as locked:
                    if not locked:
                        _slow(key, timeout_s)
                    return await look() or await call()  # re-read even without the lock (as in fly)


def _slow(key: str, timeout_s: float) -> None:
    logger.warning("single flight: waited up to %.1f s for the cross-process lock of %s (another process "
                   "answering the same question, or a lock that failed); answering here", timeout_s, key[:12])


FLIGHTS = FlightTable()
"""This process's flights (used by :class:`ragcache.answering.AnswerPath`)."""
