"""The one boundary between a request and a cache dependency: a failing dependency costs a miss.

Every call from the request path into something a cache depends on (the embedder and answer store
behind a semantic cache, a chunk KV store, the single-flight locks, the remote servers behind them)
passes :meth:`Boundary.call` (or :meth:`Boundary.held` for a lock), which applies one policy:

- **any exception, of any type, is a logged miss**: the call returns the caller's ``default`` and
  the request is answered without the cache (a full disk's ``SafetensorError``, Valkey's
  ``OutOfMemoryError`` under ``noeviction``, a read-only replica's ``ReadOnlyError``, a driver bug's
  ``AttributeError`` alike). Only ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``,
  a cancelled task) passes through. Arguments the caller got wrong are checked *before* the call
  (the answer path checks thresholds and metadata first), so they still raise;
- **a refusal of one call is not a failure**: :class:`Refused` (an entry over a store's size limit) is
  logged and returns ``default`` without a back-off;
- **a hang is cut at the deadline** (``deadline_s``): the call runs in a daemon thread and the
  request goes on without it once the deadline passes; the hung call finishes (or not) on its own;
- **a failing dependency is backed off**: after a failure it is not called for :data:`RETRY_S`
  seconds, doubling with each consecutive failure up to :data:`RETRY_MAX_S`; meanwhile every call
  returns ``default`` at once (a hanging store costs its deadline once per back-off, not on every
  request); the first call after the back-off tries it again, and a success ends the back-off;
- **writes are best effort**: a write goes through the same boundary, so a refused write costs the
  stored entry, never the answer; a store's own lookups never depend on a write (the stores keep
  their read-side bookkeeping, such as an LRU touch, out of the read's result).

One :class:`Boundary` per dependency object (:func:`boundary_for`), so every entry point over one
store shares its back-off. The deadline is the caller's (``lookup_timeout_s`` of an answer path).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, contextmanager
from typing import Any, TypeVar

__all__ = ["RETRY_MAX_S", "RETRY_S", "Boundary", "Refused", "boundary_for", "check_deadline"]

log = logging.getLogger("ragcache.boundary")
T = TypeVar("T")
D = TypeVar("D")

RETRY_S = 1.0
"""Seconds a dependency is left alone after its first failure (then doubled per consecutive failure)."""

RETRY_MAX_S = 30.0
"""Longest back-off (seconds) of a dependency that keeps failing."""


class Refused(ValueError):
    """A dependency that works refused this one call for a reason of the call's own (an answer over the
    store's per-entry size limit): the boundary logs it and returns the default, without a back-off."""


def check_deadline(deadline_s: Any, name: str = "lookup_timeout_s") -> float | None:
    """``deadline_s`` as float seconds (> 0, finite), or ``None`` (no deadline: calls run inline).

    Raises:
        ValueError: a bool, a non-number, zero, negative, NaN or infinite value (named by ``name``).
    """
    if deadline_s is None:
        return None
    if isinstance(deadline_s, bool) or not isinstance(deadline_s, int | float) or not 0 < deadline_s < math.inf:
        raise ValueError(f"{name} must be a number of seconds > 0 (or None: no deadline), got {deadline_s!r}")
    return float(deadline_s)


class Boundary:
    """The failure policy of one cache dependency (see the module docstring).

    Args:
        name: what the dependency is, for the log (``"answer cache"``, ``"chunk store"``).
        logger: where failures are logged (warnings; calls skipped during a back-off at debug level).

    Attributes:
        failures: consecutive failures (0 after a success).
        down_until: ``time.monotonic()`` until which the dependency is not called.
    """

    def __init__(self, name: str, *, logger: logging.Logger | None = None) -> None:
        self.name = name
        self.log = logger or log
        self.failures = 0
        self.down_until = 0.0
        self._lock = threading.Lock()

    # -- state ------------------------------------------------------------------------------------
    def down(self) -> bool:
        """Whether the dependency failed recently and is being left alone (its back-off)."""
        return time.monotonic() < self.down_until

    def failed(self, what: str, error: BaseException | None, deadline_s: float | None = None) -> None:
        """Record a failure of ``what`` (``error``; ``None``: it passed ``deadline_s``) and back off."""
        with self._lock:
            self.failures += 1
            wait = min(RETRY_MAX_S, RETRY_S * 2 ** min(self.failures - 1, 16))
            self.down_until = time.monotonic() + wait
        why = f"no reply within {deadline_s:.3g} s" if error is None else f"{type(error).__name__}: {error}"
        self.log.warning("%s failed during %s (%s); answered without it, tried again in %.3g s",
                         self.name, what, why, wait)

    def succeeded(self) -> None:
        """Record a call that worked: the back-off ends."""
        if self.failures:
            with self._lock:
                self.failures, self.down_until = 0, 0.0

    def reset(self) -> None:
        """Forget past failures (a caller that knows the dependency is back, e.g. a test)."""
        self.succeeded()

    # -- calls ------------------------------------------------------------------------------------
    def call(self, what: str, fn: Callable[[], T], default: D = None, *,  # type: ignore[assignment]
             deadline_s: float | None = None) -> T | D:
        """``fn()``, or ``default`` when the dependency is backed off, ``fn`` raises any ``Exception``,
        or it passes ``deadline_s`` seconds (``None``: no deadline, run inline). Failures are logged
        and start the back-off; a hung call is left to finish in its daemon thread."""
        if self.down():
            self.log.debug("%s %s skipped: backed off after a failure", self.name, what)
            return default
        if deadline_s is None:
            try:
                out = fn()
            except Refused as e:
                self.log.warning("%s refused %s (%s)", self.name, what, e)
                return default
            except Exception as e:  # noqa: BLE001 - any failure of a cache dependency is a miss
                self.failed(what, e)
                return default
            self.succeeded()
            return out
        box: list[tuple[bool, Any]] = []

        def target() -> None:
            try:
                box.append((True, fn()))
            except BaseException as e:  # noqa: BLE001 - handed to the caller below
                box.append((False, e))

        worker = threading.Thread(target=target, name=f"ragcache-{self.name}-{what}".replace(" ", "-"), daemon=True)
        worker.start()
        worker.join(deadline_s)
        if not box:
            self.failed(what, None, deadline_s)
            return default
        ok, value = box[0]
        if ok:
            self.succeeded()
            return value
        if not isinstance(value, Exception):
            raise value
        if isinstance(value, Refused):
            self.log.warning("%s refused %s (%s)", self.name, what, value)
        else:
            self.failed(what, value)
        return default

    async def acall(self, what: str, fn: Callable[[], T], default: D = None, *,  # type: ignore[assignment]
                    deadline_s: float | None = None) -> T | D:
        """Async :meth:`call`: ``fn`` (a sync call) runs in a worker thread, awaited on the event loop."""
        import asyncio  # lazily: the sync hit path never needs it

        return await asyncio.to_thread(self.call, what, fn, default, deadline_s=deadline_s)

    @contextmanager
    def held(self, what: str, make: Callable[[], AbstractContextManager[bool]]) -> Iterator[bool]:
        """Enter the lock ``make()`` returns and yield what it yields (whether it was taken); yields
        ``False`` when the dependency is backed off or taking the lock raised (a flight without the
        cross-process lock: this process still flies once). Errors of the body (the model call)
        pass through; a failing release is logged."""
        if self.down():
            yield False
            return
        try:
            cm = make()
            locked = bool(cm.__enter__())
        except Exception as e:  # noqa: BLE001 - a lock that cannot be taken costs the cross-process flight
            self.failed(what, e)
            yield False
            return
        self.succeeded()
        exc: BaseException | None = None
        try:
            yield locked
        except BaseException as e:
            exc = e
            raise
        finally:
            try:
                cm.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
            except Exception as e:  # noqa: BLE001 - the body's own error (re-raised by the exit) or a failed release
                if e is not exc:
                    self.failed(f"{what} release", e)

    @asynccontextmanager
    async def aheld(self, what: str, make: Callable[[], AbstractAsyncContextManager[bool]]) -> AsyncIterator[bool]:
        """Async :meth:`held` over an async lock (waited for on the event loop)."""
        if self.down():
            yield False
            return
        try:
            cm = make()
            locked = bool(await cm.__aenter__())
        except Exception as e:  # noqa: BLE001 - as in held()
            self.failed(what, e)
            yield False
            return
        self.succeeded()
        exc: BaseException | None = None
        try:
            yield locked
        except BaseException as e:
            exc = e
            raise
        finally:
            try:
                await cm.__aexit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
            except Exception as e:  # noqa: BLE001 - as in held()
                if e is not exc:
                    self.failed(f"{what} release", e)


_BOUNDARIES: weakref.WeakKeyDictionary[Any, dict[str, Boundary]] = weakref.WeakKeyDictionary()
_BY_ID: dict[int, dict[str, Boundary]] = {}
_GUARD = threading.Lock()


def boundary_for(dependency: Any, name: str, *, logger: logging.Logger | None = None) -> Boundary:
    """The :class:`Boundary` named ``name`` of ``dependency`` (one per object and name, shared by every
    caller in this process, created on first use with ``logger``). An object may have several: an answer
    cache's lookups and stores pass ``"answer cache"``, its single-flight locks ``"flight locks"``, so a
    lock that fails does not take the stored answers away."""
    with _GUARD:
        try:
            named = _BOUNDARIES.get(dependency)
            if named is None:
                named = _BOUNDARIES[dependency] = {}
        except TypeError:  # not weakly referable or not hashable (rare): kept by id for the process
            named = _BY_ID.setdefault(id(dependency), {})
        b = named.get(name)
        if b is None:
            b = named[name] = Boundary(name, logger=logger)
        return b
