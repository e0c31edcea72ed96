"""Single flight over the embedded cache (threads of one process); the PostgreSQL flight is in test_pg_store."""

from __future__ import annotations

import threading
import time

from ragcache.semantic import SemanticCache, partition_key
from ragcache.semantic.flight import flight_key, single_flight
from ragcache.testing import HashingEmbedder


def test_threads_share_one_compute_and_failures_pass_the_turn():
    cache = SemanticCache(embedder=HashingEmbedder(64))
    pk = partition_key(model="m")
    calls: list[int] = []
    attempts: list[int] = []

    def compute() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            time.sleep(0.1)
            raise RuntimeError("model call failed")
        calls.append(1)
        time.sleep(0.2)
        return "answer"

    out, errors = [], []

    def worker() -> None:
        try:
            out.append(single_flight(cache, "What is a flight?", compute, partition=pk))
        except RuntimeError as e:
            errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(errors) == 1 and len(calls) == 1 and len(out) == 7
    assert all(r.answer == "answer" for r in out) and sum(r.computed for r in out) == 1
    hit = single_flight(cache, "what is a flight", compute, partition=pk)
    assert hit.hit is not None and not hit.computed and len(attempts) == 2


def test_hung_holder_times_out():
    cache = SemanticCache(embedder=HashingEmbedder(64))
    release = threading.Event()
    t = threading.Thread(target=lambda: single_flight(cache, "slow one?", lambda: (release.wait(10), "late")[1]))
    t.start()
    time.sleep(0.1)
    t0 = time.perf_counter()
    r = single_flight(cache, "slow one?", lambda: "mine", timeout_s=0.3)
    assert r.computed and r.answer == "mine" and 0.25 < time.perf_counter() - t0 < 5
    release.set()
    t.join()


def test_flight_key_is_the_same_text_and_partition():
    a, b = partition_key(model="a"), partition_key(model="b")
    assert flight_key(a, "What is X?") == flight_key(a, "  What is\tX? ")  # whitespace alone
    for other in ("what is x", "What is x?", "What is X", "What is -X?"):  # case and symbols count
        assert flight_key(a, "What is X?") != flight_key(a, other)
    assert flight_key(a, "What is X?") != flight_key(b, "What is X?")
