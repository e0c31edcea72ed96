"""Single flight through RagCache.answer / aanswer: identical concurrent misses (threads, tasks, or both) make one
backend call; a cancelled async waiter holds nothing, and one that waits past the flight timeout computes."""

from __future__ import annotations

import pytest
from pipeline_doubles import DOCS, EchoBackend, echo_rag


@pytest.mark.parametrize("flight", [True, False])
def test_concurrent_identical_misses_make_one_backend_call(flight):
    import time
    from concurrent.futures import ThreadPoolExecutor

    class SlowBackend(EchoBackend):
        def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
            time.sleep(0.3)
            return super().generate(layout, max_new_tokens=max_new_tokens, temperature=temperature)

    backend = SlowBackend()
    rag = echo_rag(backend, single_flight=flight)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: rag.answer("When do orders ship?", DOCS[:2]), range(8)))
    if flight:
        assert backend.calls == 1 and len({a.text for a in answers}) == 1
        assert sum(a.layer == "semantic" for a in answers) == 7
    else:
        assert backend.calls > 1


class _AsyncSlowBackend(EchoBackend):
    """An async backend whose model call takes 0.3 s on the event loop."""

    async def agenerate(self, layout, *, max_new_tokens, temperature, tenant=None):
        import asyncio

        await asyncio.sleep(0.3)
        return super().generate(layout, max_new_tokens=max_new_tokens, temperature=temperature)


@pytest.mark.parametrize("flight", [True, False])
def test_concurrent_identical_async_misses_make_one_backend_call(flight):
    import asyncio

    backend = _AsyncSlowBackend()
    rag = echo_rag(backend, single_flight=flight)

    async def main():
        return await asyncio.gather(*(rag.aanswer("When do orders ship?", DOCS[:2]) for _ in range(8)))

    answers = asyncio.run(main())
    if flight:
        assert backend.calls == 1 and len({a.text for a in answers}) == 1
        assert sum(a.layer == "semantic" for a in answers) == 7
    else:
        assert backend.calls == 8


def test_sync_and_async_callers_share_one_flight():
    import asyncio
    import threading
    import time

    class Both(_AsyncSlowBackend):
        def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
            time.sleep(0.3)
            return super().generate(layout, max_new_tokens=max_new_tokens, temperature=temperature)

    backend = Both()
    rag = echo_rag(backend)
    sync_out = []
    t = threading.Thread(target=lambda: sync_out.append(rag.answer("When do orders ship?", DOCS[:2])))
    t.start()
    time.sleep(0.05)  # the sync caller holds the flight

    async def main():
        # the same text up to whitespace: one flight ("same words" is the same text, case and symbols count)
        return await asyncio.gather(*(rag.aanswer(" When do  orders ship? ", DOCS[:2]) for _ in range(4)))

    answers = asyncio.run(main())
    t.join()
    assert backend.calls == 1 and {a.layer for a in answers} == {"semantic"}
    assert {a.text for a in answers} == {sync_out[0].text}


def test_cancelled_async_waiter_holds_nothing(caplog):
    import asyncio
    import logging

    from ragcache.semantic.flight import _LOCAL, FLIGHTS, flight_key

    backend = _AsyncSlowBackend()
    rag = echo_rag(backend)
    req = rag.prepare("When do orders ship?", DOCS[:2])
    key = flight_key(req.partition, req.question)

    async def main():
        first = asyncio.create_task(rag.aanswer("When do orders ship?", DOCS[:2]))
        await asyncio.sleep(0.05)
        waiter = asyncio.create_task(rag.aanswer("When do orders ship?", DOCS[:2]))
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await first
        # nothing is left held: no open flight of the key, and this process's lock of it is free
        assert key not in FLIGHTS._flights
        with _LOCAL.hold(key, 0.0) as free:
            assert free
        again = await rag.aanswer("When do orders ship?", DOCS[:2])
        other = await rag.aanswer("Who packs the boxes?", DOCS[:2])
        return again, other

    with caplog.at_level(logging.WARNING, "ragcache.semantic.flight"):
        again, other = asyncio.run(main())
    assert again.layer == "semantic" and other.layer == "model" and backend.calls == 2
    assert not [r for r in caplog.records if r.getMessage().startswith("single flight:")]  # no caller waited out a timeout


def test_async_waiter_times_out_and_computes(caplog):
    import asyncio
    import logging

    from ragcache.semantic.flight import _LOCAL, flight_key

    rag = echo_rag(_AsyncSlowBackend(), flight_timeout_s=0.2)
    req = rag.prepare("When do orders ship?", DOCS[:2])

    async def main():
        with _LOCAL.hold(flight_key(req.partition, req.question), 1.0) as held:  # a holder that never answers
            assert held
            return await rag.aanswer("When do orders ship?", DOCS[:2])

    with caplog.at_level(logging.WARNING, "ragcache.semantic.flight"):
        a = asyncio.run(main())
    # answered while the lock was still held: the waiter timed out (0.2 s) and took over
    assert a.layer == "model"
    assert [r for r in caplog.records if r.getMessage().startswith("single flight: waited")]
