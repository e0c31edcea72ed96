"""Single flight over the embedded cache (threads of one process) through the one answer path
(:class:`ragcache.answering.AnswerPath`); the PostgreSQL flight is in test_pg_store.

Issue 32, "single flight when the call fails": waiters get the leader's error (not a queue of
repeats), and a leader hanging past the flight timeout lets one waiter through, not all."""

from __future__ import annotations

import threading
import time

import pytest

from ragcache.answering import AnswerPath
from ragcache.backend import BackendResult, CacheUsage
from ragcache.semantic import SemanticCache, partition_key
from ragcache.semantic.flight import FLIGHTS, flight_key
from ragcache.testing import HashingEmbedder, run_in_threads
from ragcache.request import CacheRequest

PK = partition_key(model="m")


def _path(**kw) -> AnswerPath:
    return AnswerPath(SemanticCache(embedder=HashingEmbedder(64)), **kw)


def _result(text: str, finish: str = "stop") -> BackendResult:
    return BackendResult(text, "provider", CacheUsage.provider(input_tokens=10, completion_tokens=3), 0.01,
                         finish)  # type: ignore[arg-type]


@pytest.mark.parametrize("error", [RuntimeError("model call failed"), TimeoutError("upstream timed out"),
                                   ValueError("bad request")])
def test_waiters_get_the_leaders_error_not_a_queue_of_repeats(error):
    path = _path()
    attempts: list[int] = []

    def call() -> BackendResult:
        attempts.append(1)
        time.sleep(0.3)
        raise error

    out, errors = run_in_threads(lambda: path.run(CacheRequest("What is a flight?", None, PK), call), 6)
    assert attempts == [1] and out == [] and len(errors) == 6
    assert all(e is error for e in errors)  # the leader's own error object, once
    assert len(FLIGHTS) == 0
    # the flight is over: the next caller calls again (and succeeds), then it is a hit
    a = path.run(CacheRequest("What is a flight?", None, PK), lambda: _result("answer"))
    assert a.layer == "provider" and a.text == "answer" and len(attempts) == 1
    hit = path.run(CacheRequest("What is a flight?", None, PK), lambda: _result("never"))
    assert hit.layer == "semantic" and hit.text == "answer"


def test_threads_share_one_call_and_get_a_zero_usage_hit():
    path = _path()
    calls: list[int] = []

    def call() -> BackendResult:
        calls.append(1)
        time.sleep(0.3)
        return _result("answer")

    out, errors = run_in_threads(lambda: path.run(CacheRequest("What is a flight?", None, PK, max_tokens=64), call), 8)
    assert not errors and len(calls) == 1 and all(a.text == "answer" for a in out)
    assert sorted(a.layer for a in out) == ["provider"] + ["semantic"] * 7
    for a in out:
        if a.layer == "semantic":
            assert a.usage == CacheUsage() and a.ttft_s > 0 and a.finish_reason == "stop"


@pytest.mark.parametrize("waiters", [3, 6])
def test_a_hung_leader_lets_one_waiter_through_not_all(waiters):
    path = _path(flight_timeout_s=0.3)
    release = threading.Event()
    calls: list[str] = []

    def hung() -> BackendResult:
        calls.append("hung")
        release.wait(20)
        return _result("late")

    leader = threading.Thread(target=lambda: path.run(CacheRequest("slow one?", None, PK), hung))
    leader.start()
    time.sleep(0.1)

    def call() -> BackendResult:
        calls.append("waiter")
        time.sleep(0.2)
        return _result("mine")

    out, errors = run_in_threads(lambda: path.run(CacheRequest("slow one?", None, PK), call), waiters)
    assert not errors and calls.count("waiter") == 1 and len(out) == waiters
    assert sorted(a.layer for a in out) == ["provider"] + ["semantic"] * (waiters - 1)
    assert all(a.text == "mine" for a in out)
    release.set()
    leader.join()
    assert len(FLIGHTS) == 0


@pytest.mark.parametrize("finish", ["content_filter", "tool_calls", "refusal", "incomplete"])
def test_an_answer_that_may_not_be_stored_is_not_served_to_the_waiters(finish):
    path = _path()
    calls: list[int] = []

    def call() -> BackendResult:
        calls.append(1)
        time.sleep(0.2)
        return _result(f"cut {len(calls)}", finish)

    out, errors = run_in_threads(lambda: path.run(CacheRequest("What is a flight?", None, PK), call), 4)
    assert not errors and len(calls) == 4 and all(a.finish_reason == finish and a.layer == "provider" for a in out)
    assert len(path.semantic) == 0


def test_a_closed_stream_hands_the_flight_on():
    path = _path()

    def pieces():
        yield "par"
        time.sleep(0.3)
        yield "tial"
        yield _result("partial")

    it = path.stream(CacheRequest("Stream me?", None, PK), pieces)
    assert next(it) == "par"
    got: list = []
    req = CacheRequest("Stream me?", None, PK)
    t = threading.Thread(target=lambda: got.append(path.run(req, lambda: _result("whole"))))
    t.start()
    time.sleep(0.1)
    it.close()  # the consumer stops reading: nothing stored, the waiter starts a new flight
    t.join()
    assert got[0].layer == "provider" and got[0].text == "whole" and len(FLIGHTS) == 0


def test_flight_key_is_the_same_text_and_partition():
    a, b = partition_key(model="a"), partition_key(model="b")
    assert flight_key(a, "What is X?") == flight_key(a, "  What is\tX? ")  # whitespace alone
    for other in ("what is x", "What is x?", "What is X", "What is -X?"):  # case and symbols count
        assert flight_key(a, "What is X?") != flight_key(a, other)
    assert flight_key(a, "What is X?") != flight_key(b, "What is X?")


def test_async_streams_share_one_call_and_a_cut_stream_is_not_stored():
    import asyncio

    path = _path()
    calls: list[int] = []

    def pieces(cut: bool):
        async def gen():
            calls.append(1)
            for w in ("Orders ", "ship ", "Monday."):
                await asyncio.sleep(0.05)
                yield w
            if not cut:
                yield _result("Orders ship Monday.")
        return gen

    async def consume(q: str, cut: bool) -> tuple[str, object]:
        text, final = "", None
        async for item in path.astream(CacheRequest(q, None, PK), pieces(cut)):
            if isinstance(item, str):
                text += item
            else:
                final = item
        return text, final

    async def main():
        whole = await asyncio.gather(*(consume("When do orders ship?", False) for _ in range(5)))
        cut = [await consume("When is the cut?", True) for _ in range(2)]
        return whole, cut

    whole, cut = asyncio.run(main())
    assert len([1 for _ in whole]) == 5 and all(t == "Orders ship Monday." for t, _ in whole)
    assert sorted(a.layer for _, a in whole) == ["provider"] + ["semantic"] * 4
    assert all(a.finish_reason == "incomplete" and a.layer == "provider" for _, a in cut)
    assert len(calls) == 3 and len(path.semantic) == 1 and len(FLIGHTS) == 0


def test_sync_stream_of_identical_misses_makes_one_call():
    path = _path()
    calls: list[int] = []

    def pieces():
        calls.append(1)
        yield "Refunds "
        time.sleep(0.2)
        yield "take 14 days."
        yield _result("Refunds take 14 days.")

    req = CacheRequest("How long do refunds take?", None, PK)
    out, errors = run_in_threads(lambda: list(path.stream(req, pieces)), 4)
    assert not errors and len(calls) == 1
    assert all("".join(x for x in items if isinstance(x, str)) == "Refunds take 14 days." for items in out)
    assert sorted(items[-1].layer for items in out) == ["provider"] + ["semantic"] * 3
