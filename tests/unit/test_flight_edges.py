"""Single flight under failure (ragcache.answering.AnswerPath through RagCache.answer / aanswer): the
waiters of a leader whose backend raises get its error (one call, not a queue of repeats); a
leader that is cancelled hands the flight on and the next waiter computes; timeouts that the locks
would read differently are refused by name."""

from __future__ import annotations

import asyncio
import math
import threading
import time

import pytest
from pipeline_doubles import DOCS, EchoBackend, echo_rag

from ragcache.answering import AnswerPath
from ragcache.semantic.flight import _LOCAL, FLIGHTS, check_timeout

Q = "When do orders ship?"


class FailsOnce(EchoBackend):
    """Sync and async paths: the first call raises after ``delay`` seconds, later calls answer."""

    def __init__(self, delay: float = 0.2) -> None:
        super().__init__()
        self.delay, self.failed = delay, False

    def _maybe_fail(self) -> None:
        if not self.failed:
            self.failed = True
            self.calls += 1
            raise RuntimeError("backend down")

    def generate(self, layout, **kw):
        time.sleep(self.delay)
        self._maybe_fail()
        return super().generate(layout, **kw)

    async def agenerate(self, layout, **kw):
        await asyncio.sleep(self.delay)
        self._maybe_fail()
        return super().generate(layout, **kw)


def _layers(results):
    return sorted(r.layer if hasattr(r, "layer") else type(r).__name__ for r in results)


def test_async_holder_that_raises_gives_its_error_to_every_waiter():
    backend = FailsOnce()
    rag = echo_rag(backend)

    async def main():
        return await asyncio.gather(*(rag.aanswer(Q, DOCS[:2]) for _ in range(4)), return_exceptions=True)

    got = asyncio.run(main())
    assert _layers(got) == ["RuntimeError"] * 4 and len({id(e) for e in got}) == 1
    assert backend.calls == 1 and not _LOCAL._locks and len(FLIGHTS) == 0
    assert rag.answer(Q, DOCS[:2]).layer == "model" and backend.calls == 2  # the next flight calls again


def test_sync_holder_that_raises_gives_its_error_to_sync_and_async_waiters():
    backend = FailsOnce(delay=0.3)
    rag = echo_rag(backend)
    out: list = []

    def ask():
        try:
            out.append(rag.answer(Q, DOCS[:2]))
        except RuntimeError as e:
            out.append(e)

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.05)

    async def main():
        return await asyncio.gather(*(rag.aanswer(Q, DOCS[:2]) for _ in range(3)), return_exceptions=True)

    got = asyncio.run(main())
    for t in threads:
        t.join()
    assert _layers(out + got) == ["RuntimeError"] * 6
    assert backend.calls == 1 and not _LOCAL._locks and len(FLIGHTS) == 0


def test_cancelled_or_timed_out_holder_hands_the_flight_on():
    backend = FailsOnce()
    backend.failed = True  # never fails: 0.2 s per call

    async def main():
        rag = echo_rag(backend)
        first = asyncio.create_task(rag.aanswer(Q, DOCS[:2]))
        await asyncio.sleep(0.05)
        waiter = asyncio.create_task(rag.aanswer(Q, DOCS[:2]))
        await asyncio.sleep(0.05)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        a = await asyncio.wait_for(waiter, 5)
        with pytest.raises(asyncio.TimeoutError):  # a caller's own deadline around the holder
            await asyncio.wait_for(rag.aanswer("Who packs the boxes?", DOCS[:2]), 0.05)
        b = await asyncio.wait_for(rag.aanswer("Who packs the boxes?", DOCS[:2]), 5)
        return a, b

    a, b = asyncio.run(main())
    assert a.layer == "model" and b.layer == "model" and backend.calls == 2 and not _LOCAL._locks


BAD_TIMEOUTS = [-1, -0.5, math.nan, math.inf, None, "5", True]


@pytest.mark.parametrize("bad", BAD_TIMEOUTS)
def test_bad_flight_timeouts_are_refused_by_name(bad):
    exc = ValueError if isinstance(bad, float | int) and not isinstance(bad, bool) else TypeError
    with pytest.raises(exc, match="flight timeout must be a finite number of seconds >= 0"):
        echo_rag(flight_timeout_s=bad)
    rag = echo_rag()
    with pytest.raises(exc, match="flight timeout"):
        AnswerPath(rag.semantic, flight_timeout_s=bad)
    with pytest.raises(exc, match="flight timeout"):
        FLIGHTS.join("ab" * 32, bad)
    assert len(rag.semantic) == 0 and not _LOCAL._locks and len(FLIGHTS) == 0


@pytest.mark.parametrize("ok", [0, 0.0, 2, 0.25])
def test_zero_and_positive_timeouts_work_on_both_paths(ok):
    assert check_timeout(ok) == float(ok)
    rag = echo_rag(flight_timeout_s=ok)
    assert rag.answer(Q, DOCS[:2]).layer == "model"
    assert asyncio.run(rag.aanswer(Q, DOCS[:2])).layer == "semantic"
