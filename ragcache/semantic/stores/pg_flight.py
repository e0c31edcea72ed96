"""PostgreSQL advisory locks for single flight (:class:`~ragcache.semantic.flight.FlightLocks`), the
locks of :class:`~ragcache.semantic.stores.pg_store.PgAnswerStore`: a session lock per (partition,
question words) key, so the flight spans every process and machine on the database and a crashed
holder releases it with its connection.

Resources stay bounded whatever the concurrency: every lock of a process lives on **one** connection of
its own (outside the store's pool), used for a moment per try; nobody holds a pooled connection across
a model call, and waiters do not hold one while they wait: they try ``pg_try_advisory_lock`` and sleep
between tries (5 ms doubling to 100 ms, :data:`~ragcache.semantic.flight.POLL_S`). Threads of one
process first take this process's lock of the key (:data:`~ragcache.semantic.flight.LOCAL_LOCKS`), so
the session's lock (re-entrant within a session) is held by one caller at a time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from ragcache.remote import RemoteStoreError, redact

logger = logging.getLogger("ragcache.semantic.pg")


def _lock_id(key: str) -> int:
    """The signed 64-bit advisory-lock id of a hex flight key (its first 8 bytes)."""
    return int.from_bytes(bytes.fromhex(key)[:8], "big", signed=True)


class PgFlightLocks:
    """``hold`` / ``ahold`` on one connection of this process (made by the store's
    :class:`~ragcache.semantic.stores.pg_schema.PgPool`, not lent from it; see the module docstring)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._conn: Any = None
        self._guard = threading.Lock()  # one statement at a time on the lock connection

    def _query(self, sql: str, lock_id: int) -> bool:
        """``sql`` (one advisory-lock function of ``lock_id``) on the lock connection, connecting when needed.

        Raises:
            RemoteStoreError: the server cannot be reached or the connection broke (locks on it are gone)."""
        import psycopg

        with self._guard:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = self._pool.connect()
            try:
                return bool(self._conn.execute(sql, (lock_id,)).fetchone()[0])
            except psycopg.OperationalError as e:
                self._conn.close()
                self._conn = None
                raise RemoteStoreError(f"lost the single-flight lock connection to PostgreSQL at "
                                       f"{redact(self._pool.url)} ({str(e).strip()}); the next call reconnects") from e

    def _try(self, lock_id: int) -> bool:
        return self._query("SELECT pg_try_advisory_lock(%s)", lock_id)

    def _unlock(self, lock_id: int) -> None:
        try:
            self._query("SELECT pg_advisory_unlock(%s)", lock_id)
        except RemoteStoreError as e:  # the connection is gone, and its locks with it
            logger.debug("advisory unlock skipped: %s", e)

    @contextmanager
    def hold(self, key: str, timeout_s: float) -> Iterator[bool]:
        """Hold the PostgreSQL session advisory lock named by hex ``key``; yields ``False`` after ``timeout_s``.

        Raises:
            RemoteStoreError: the server cannot be reached (the answer path takes it as a flight without
            the cross-process lock)."""
        from ragcache.semantic.flight import LOCAL_LOCKS, POLL_S

        lock_id = _lock_id(key)
        start = time.monotonic()
        with LOCAL_LOCKS.hold(key, timeout_s) as local:
            if not local:
                yield False
                return
            deadline, pause, locked = start + timeout_s, POLL_S[0], False
            while not (locked := self._try(lock_id)):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(pause, left))
                pause = min(pause * 2, POLL_S[1])
            try:
                yield locked
            finally:
                if locked:
                    self._unlock(lock_id)

    @asynccontextmanager
    async def ahold(self, key: str, timeout_s: float) -> AsyncIterator[bool]:
        """Async :meth:`hold`: the same tries from worker threads with event-loop sleeps between them
        (:func:`ragcache.semantic.flight.poll_lock`), so no thread blocks while waiting. A waiter cancelled
        mid-try leaves no lock behind (a try that succeeded after the cancellation is undone)."""
        import asyncio

        from ragcache.semantic.flight import LOCAL_LOCKS, poll_lock

        lock_id = _lock_id(key)
        start = time.monotonic()
        async with LOCAL_LOCKS.ahold(key, timeout_s) as local:
            if not local:
                yield False
                return
            tries: list[asyncio.Future] = []

            async def try_lock() -> bool:
                tries.append(asyncio.ensure_future(asyncio.to_thread(self._try, lock_id)))
                return await asyncio.shield(tries[-1])

            try:
                locked = await poll_lock(try_lock, max(0.0, timeout_s - (time.monotonic() - start)))
                yield locked
            finally:
                await asyncio.shield(self._arelease(lock_id, tries))

    async def _arelease(self, lock_id: int, tries: list[Any]) -> None:
        import asyncio

        done = await asyncio.gather(*tries, return_exceptions=True)
        # the lock taken (``locked``), or a cancelled waiter's last try that succeeded after all: undone
        for _ in range(sum(1 for r in done if r is True)):
            await asyncio.to_thread(self._unlock, lock_id)

    def close(self) -> None:
        """Close the lock connection (every lock on it is released)."""
        with self._guard:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
