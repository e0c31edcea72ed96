"""PgSemanticCache against a real PostgreSQL 18 + pgvector started by the session fixture."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import numpy as np
import pytest

pytest.importorskip("psycopg", reason="pip install 'ragcache[shared]'")
pytest.importorskip("pgvector", reason="pip install 'ragcache[shared]'")

from ragcache.remote import RemoteStoreError  # noqa: E402
from ragcache.semantic import SemanticCache, partition_key  # noqa: E402
from ragcache.semantic.pg_cache import PgSemanticCache  # noqa: E402
from ragcache.answering import AnswerPath  # noqa: E402
from ragcache.backend import BackendResult, CacheUsage  # noqa: E402
from ragcache.testing import HashingEmbedder  # noqa: E402
from ragcache.request import CacheRequest

EMB = HashingEmbedder(64)
FPK = partition_key(model="flight")


def _call(text: str, delay: float = 0.0, calls: list | None = None):
    """A model call for the answer path: ``() -> BackendResult`` after ``delay`` seconds."""
    def call() -> BackendResult:
        if calls is not None:
            calls.append(1)
        time.sleep(delay)
        return BackendResult(text, "provider", CacheUsage.provider(input_tokens=5, completion_tokens=2))
    return call


@pytest.fixture()
def schema(request) -> str:
    return "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:50]


@pytest.fixture()
def open_cache(pg_server, schema):
    opened: list[PgSemanticCache] = []

    def factory(**kw) -> PgSemanticCache:
        kw.setdefault("embedder", EMB)
        kw.setdefault("schema", schema)
        c = PgSemanticCache(pg_server.url, **kw)
        opened.append(c)
        return c

    yield factory
    if opened:
        opened[0].clear()
    for c in opened:
        c.close()


def test_from_url_store_lookup_replace(pg_server, schema):
    cache = SemanticCache.from_url(pg_server.url, embedder=EMB, schema=schema)
    assert isinstance(cache, PgSemanticCache)
    pk = partition_key(model="m", documents=[{"id": "refund-policy", "text": "Refunds take 5 days."}])
    i = cache.store("How long do refunds take?", "5 days", partition=pk, metadata={"q": 1})
    hit = cache.lookup("how long do refunds take", partition=pk)
    assert hit is not None and hit.answer == "5 days" and hit.entry_id == i and hit.metadata == {"q": 1}
    assert 0.7 <= hit.similarity <= 1.0 + 1e-6
    assert cache.lookup("How long do refunds take?", partition=partition_key(model="other")) is None
    cache.store("How long do refunds take?", "7 days", partition=pk)
    assert len(cache) == 1 and cache.lookup("How long do refunds take?", partition=pk).answer == "7 days"
    assert cache.stats.hits == 2 and cache.stats.misses == 1
    cache.clear()
    cache.close()


def test_threshold_and_guards_run_on_candidates(open_cache):
    cache = open_cache(threshold=0.5)
    cache.store("Is the API rate limited?", "yes, 100 rpm")
    near = cache.candidates_for("Is the API not rate limited?")
    assert near and near[0].similarity >= 0.5 and near[0].verdict.reason == "negation"
    assert cache.lookup("Is the API not rate limited?") is None
    assert cache.stats.rejected_lookups == 1 and cache.stats.rejections == {"negation": 1}
    assert cache.lookup("is the api rate limited") is not None
    assert cache.lookup(" Is the  API rate limited?", threshold=1.0) is not None  # whitespace alone differs
    assert cache.lookup("Is the API rate limited", threshold=1.0) is None  # exact: the same text only
    assert cache.lookup("Is API rate limited?", threshold=1.0) is None  # other words: exact mode misses


def test_per_partition_search_finds_rows_behind_other_partitions(open_cache):
    """HNSW + iterative scan: a small partition is found even when 2,000 closer rows live elsewhere."""
    cache = open_cache(threshold=0.9, candidates=2)
    rng = np.random.default_rng(0)
    base = EMB.encode(["What is the refund window?"])[0]
    noise = base + 0.05 * rng.standard_normal((2000, 64)).astype(np.float32)
    other = partition_key(model="m", namespace="crowd")
    cache.store_many([(f"crowd question {i}", f"a{i}") for i in range(2000)], partition=other, vectors=noise)
    mine = partition_key(model="m", namespace="mine")
    cache.store("What is the refund window?", "30 days", partition=mine)
    hit = cache.lookup("What is the refund window?", partition=mine)
    assert hit is not None and hit.answer == "30 days"


def test_ttl_and_max_entries_in_sql(open_cache):
    cache = open_cache(max_entries=3)
    for i in range(5):
        cache.store(f"question number {'abcde'[i]}", f"answer {i}")
    assert len(cache) == 3 and cache.stats.evictions == 2
    assert cache.lookup("question number a", threshold=1.0) is None
    assert cache.lookup("question number e", threshold=1.0).answer == "answer 4"
    cache.store("short lived question", "gone soon", ttl_s=0.2)
    time.sleep(0.4)
    assert cache.lookup("short lived question", threshold=1.0) is None
    assert cache.purge_expired() == 1


def test_other_process_sees_writes_and_invalidations(pg_server, open_cache):
    """Issue 14's scenario: B stores, A invalidates, B stops serving the stale answer at once."""
    a, b = open_cache(), open_cache()
    pk = partition_key(model="m", documents=[{"id": "refund-policy", "text": "Refunds take 5 days."}])
    b.store("How long do refunds take?", "5 days", partition=pk)
    assert a.lookup("How long do refunds take?", partition=pk).answer == "5 days"
    assert a.invalidate("refund-policy") == 1
    assert b.lookup("How long do refunds take?", partition=pk) is None
    b.store("How long do refunds take?", "5 days", partition=pk)
    assert a.invalidate("Refunds take 5 days.") == 1  # by content too
    assert b.lookup("How long do refunds take?", partition=pk) is None


def test_embedder_mismatch_names_the_fix(open_cache):
    open_cache()
    with pytest.raises(ValueError, match="same embedder"):
        open_cache(embedder=HashingEmbedder(32))


def test_schema_is_versioned(pg_server, open_cache, schema):
    import psycopg

    open_cache()
    with psycopg.connect(pg_server.url) as c:
        assert c.execute(f"SELECT max(version) FROM {schema}.schema_version").fetchone()[0] == 6
        idx = {r[0] for r in c.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = %s", (schema,))}
    assert any("hnsw" in d for d in idx) and any("gin" in d for d in idx)
    open_cache()  # a second open migrates nothing and agrees on the embedder


def test_single_flight_threads(open_cache):
    open_cache()
    calls: list = []
    compute = _call("the answer", 0.3, calls)

    out = [None] * 8
    def worker(k: int) -> None:
        out[k] = AnswerPath(open_cache()).run(CacheRequest("What is single flight?", None, FPK), compute)
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(calls) == 1
    assert all(r.text == "the answer" for r in out) and sum(r.layer == "provider" for r in out) == 1


def _flight_worker(url: str, schema: str, barrier, q) -> None:
    cache = PgSemanticCache(url, schema=schema, embedder=EMB)
    barrier.wait()
    r = AnswerPath(cache).run(CacheRequest("same question everywhere", None, FPK), _call("once", 0.3))
    q.put((r.text, r.layer == "provider"))
    cache.close()


def _crash_holder(url: str, schema: str, started) -> None:
    cache = PgSemanticCache(url, schema=schema, embedder=EMB)

    def compute() -> BackendResult:
        started.set()
        time.sleep(60)
        return _call("never")()

    AnswerPath(cache).run(CacheRequest("crashy question", None, FPK), compute)


def test_single_flight_processes_and_crashed_holder(pg_server, open_cache, schema):
    from contextlib import contextmanager

    open_cache()
    ctx = mp.get_context("spawn")
    barrier, q = ctx.Barrier(4), ctx.Queue()
    ps = [ctx.Process(target=_flight_worker, args=(pg_server.url, schema, barrier, q)) for _ in range(4)]
    for p in ps:
        p.start()
    res = [q.get(timeout=60) for _ in ps]
    for p in ps:
        p.join(30)
    assert sorted(res) == [("once", False)] * 3 + [("once", True)]

    started = ctx.Event()
    holder = ctx.Process(target=_crash_holder, args=(pg_server.url, schema, started))
    holder.start()
    assert started.wait(60)
    holder.kill()
    holder.join()
    cache = open_cache()
    taken = []  # what the store's advisory lock yielded: False only after the whole timeout
    real_lock = cache.flight_lock

    @contextmanager
    def recording_lock(key, timeout_s):
        with real_lock(key, timeout_s) as locked:
            taken.append(locked)
            yield locked

    cache.flight_lock = recording_lock
    r = AnswerPath(cache, flight_timeout_s=30).run(CacheRequest("crashy question", None, FPK), _call("recovered"))
    # the server dropped the dead holder's lock with its connection: taken, not waited out
    assert r.layer == "provider" and r.text == "recovered" and taken == [True]


def test_unreachable_server_is_a_clear_error():
    with pytest.raises(RemoteStoreError, match="unreachable"):
        PgSemanticCache("postgresql://postgres@127.0.0.1:1/postgres", embedder=EMB)


def test_bad_schema_name(pg_server):
    with pytest.raises(ValueError, match="identifier"):
        PgSemanticCache(pg_server.url, schema="drop table; --", embedder=EMB)


def test_bulk_load_builds_the_index_once(open_cache, pg_server, schema):
    import psycopg

    cache = open_cache(threshold=0.95)
    pk = partition_key(model="m")
    qs = [f"bulk question {w} {w * 7}" for w in ("alpha", "beta", "gamma", "delta")]
    cache.store(qs[0], "old")
    assert cache.bulk_load([(q, f"ans {q}") for q in qs] + [(qs[1], "dup")], vectors=EMB.encode(qs + [qs[1]])) == 4
    assert len(cache) == 4 and cache.lookup(qs[0]).answer == f"ans {qs[0]}" and cache.lookup(qs[2], partition=pk) is None
    with psycopg.connect(pg_server.url) as c:
        assert c.execute("SELECT count(*) FROM pg_indexes WHERE schemaname = %s AND indexname = 'entries_embedding'",
                         (schema,)).fetchone()[0] == 1


def test_async_flight_shares_the_advisory_lock_and_cancelled_waiters_leave_none(pg_server, open_cache):
    import asyncio

    import psycopg

    from ragcache.semantic import partition_key
    from ragcache.semantic.flight import flight_key

    def aflight_hold(cache, pk, question, timeout_s):
        return cache.aflight_lock(flight_key(pk, question), timeout_s)

    cache = open_cache()
    pk = partition_key(model="m")
    calls = []

    async def caller() -> str:
        async with aflight_hold(cache, pk, "What is an async flight?", 10) as locked:
            assert locked
            hit = await asyncio.to_thread(cache.lookup, "What is an async flight?", partition=pk)
            if hit is not None:
                return hit.answer
            calls.append(1)
            await asyncio.sleep(0.3)
            await asyncio.to_thread(cache.store, "What is an async flight?", "once", partition=pk)
            return "once"

    async def main():
        out = await asyncio.gather(*(caller() for _ in range(6)))
        async with aflight_hold(cache, pk, "held question?", 10):  # held: a waiter is cancelled mid-wait
            waiter = asyncio.create_task(caller_for("held question?"))
            await asyncio.sleep(0.2)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        return out

    async def caller_for(q: str) -> None:
        async with aflight_hold(cache, pk, q, 10):
            pass

    assert asyncio.run(main()) == ["once"] * 6 and len(calls) == 1
    with psycopg.connect(pg_server.url) as c:  # nothing left behind on pooled connections
        assert c.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()[0] == 0
    with cache.flight_lock("ab" * 32, 1) as locked:  # the sync flight still works on the same pool
        assert locked
