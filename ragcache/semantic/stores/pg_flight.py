"""PostgreSQL advisory locks for single flight (:class:`~ragcache.semantic.flight.FlightLocks`), the
locks of :class:`~ragcache.semantic.stores.pg_store.PgAnswerStore`: a session lock per (partition,
question words) key, held on a pooled connection, so the flight spans every process and machine on
the database and a crashed holder releases it with its connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any


def _lock_id(key: str) -> int:
    """The signed 64-bit advisory-lock id of a hex flight key (its first 8 bytes)."""
    return int.from_bytes(bytes.fromhex(key)[:8], "big", signed=True)


class PgFlightLocks:
    """``hold`` / ``ahold`` over a store's connection pool (:class:`~ragcache.semantic.stores.pg_schema.PgPool`)."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    @contextmanager
    def hold(self, key: str, timeout_s: float) -> Iterator[bool]:
        """Hold the PostgreSQL session advisory lock named by hex ``key``; yields ``False`` after ``timeout_s``.

        The lock lives on a connection held for the duration: if this process dies, the server
        drops the connection and the lock with it.
        """
        import psycopg

        lock_id = _lock_id(key)
        with self._pool.connection() as conn:
            locked = True
            try:
                conn.execute(f"SET lock_timeout = {max(1, int(timeout_s * 1000))}")
                conn.execute("SELECT pg_advisory_lock(%s)", (lock_id,))
            except psycopg.errors.LockNotAvailable:
                locked = False
            finally:
                conn.execute("SET lock_timeout = 0")
            try:
                yield locked
            finally:
                if locked and not conn.broken:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (lock_id,))

    @asynccontextmanager
    async def ahold(self, key: str, timeout_s: float) -> AsyncIterator[bool]:
        """Async :meth:`hold`: ``pg_try_advisory_lock`` tried from worker threads with event-loop
        sleeps between tries (:func:`ragcache.semantic.flight.poll_lock`), so no thread blocks while
        waiting. The connection goes back to the pool only after every try has finished and
        ``pg_advisory_unlock_all()`` ran: a waiter cancelled mid-try leaves no lock behind."""
        from ragcache.semantic.flight import enter_in_thread, poll_lock

        lock_id = _lock_id(key)
        lend = self._pool.connection()
        conn = await enter_in_thread(lend)
        tries: list[asyncio.Future] = []

        def query() -> bool:
            return bool(conn.execute("SELECT pg_try_advisory_lock(%s)", (lock_id,)).fetchone()[0])

        async def try_lock() -> bool:
            tries.append(asyncio.ensure_future(asyncio.to_thread(query)))
            return await asyncio.shield(tries[-1])

        try:
            yield await poll_lock(try_lock, timeout_s)
        finally:
            await asyncio.shield(self._arelease(conn, lend, tries))

    @staticmethod
    async def _arelease(conn: Any, lend: Any, tries: list[asyncio.Future]) -> None:
        await asyncio.gather(*tries, return_exceptions=True)

        def release() -> None:
            try:
                if not conn.broken:
                    conn.execute("SELECT pg_advisory_unlock_all()")
            finally:
                lend.__exit__(None, None, None)

        await asyncio.to_thread(release)
