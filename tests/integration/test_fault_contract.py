"""Fault-injection contract: a cache dependency that fails in any way costs a miss, never the answer.

Beside the answer-path contract (``ragcache.testing.answer_contract``): for each dependency (the embedder,
the SQLite + FAISS answer folder, the single-flight locks, the disk and Valkey chunk stores) and each
entry point (``RagCache.answer`` / ``aanswer``, the answer path's ``stream`` / ``astream``, ``ragcache ask``
in-process), a fault is injected:

- an exception of a type no store documents (``KeyError``, ``AttributeError``, a driver's own class);
- a hang (released by the test only after the answer came back);
- refused writes: a full disk (``SafetensorError`` from the disk chunk store), Valkey at ``maxmemory`` with
  ``noeviction`` and Valkey as a read-only replica (the real server's errors);
- an unreadable value (garbage where a chunk was);
- a burst of 30 concurrent identical misses.

The bound every case states: the answer is the model's own (equal to the backend's text, or to an exact
prefill of the engine), it comes back while a hung dependency is still hanging (the request never waits
past the deadline), a failed dependency is not called again during its back-off, nothing is stored for the
request whose lookup failed and nothing wrong is ever served, and once the fault clears (and the back-off
has passed: a fake clock moves it on) the cache hits again. Tiny doubles keep it to seconds.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from fault_doubles import (
    DOCS,
    ERRORS,
    Q,
    Q2,
    Clock,
    Fault,
    Faulty,
    FaultyEmbedder,
    Weird,
    engine_rag,
    exact_answer_of,
    own_valkey,
)

from ragcache import boundary
from ragcache.semantic import SemanticCache
from ragcache.testing import HashingEmbedder, run_in_threads
from ragcache.testing.answer_contract import ScriptedBackend

DEADLINE_S = 0.3
"""The lookup deadline of every case: a hung dependency costs at most this, then the request goes on."""


@pytest.fixture()
def clock(monkeypatch):
    return Clock.installed(monkeypatch)


# ------------------------------------------------------------------------------------------- entry points
def _sync(rag: Any, q: str) -> Any:
    return rag.answer(q, DOCS)


def _async(rag: Any, q: str) -> Any:
    return asyncio.run(rag.aanswer(q, DOCS))


def _stream(rag: Any, q: str) -> Any:
    req = rag.prepare(q, DOCS)

    def call() -> Any:
        r = rag.generate(req)
        yield r.text
        yield r

    items = list(rag.path.stream(req, call, blend_setting=rag.blend_setting))
    assert "".join(items[:-1]) == items[-1].text
    return items[-1]


def _astream(rag: Any, q: str) -> Any:
    req = rag.prepare(q, DOCS)

    async def call() -> Any:
        r = await rag.agenerate(req)
        yield r.text
        yield r

    async def run() -> list:
        return [i async for i in rag.path.astream(req, call, blend_setting=rag.blend_setting)]

    items = asyncio.run(run())
    assert "".join(items[:-1]) == items[-1].text
    return items[-1]


ENTRIES = {"sync": _sync, "async": _async, "stream": _stream, "astream": _astream}


def _rag(cache: SemanticCache, backend: ScriptedBackend, deadline_s: float = DEADLINE_S) -> Any:
    from ragcache import RagCache

    return RagCache(backend, semantic=cache, lookup_timeout_s=deadline_s)


def _cache(path: Any, dependency: str, fault: Fault) -> SemanticCache:
    """A SQLite + FAISS cache in ``path`` with ``fault`` between it and ``dependency``."""
    cache = SemanticCache(path, embedder=FaultyEmbedder(fault if dependency == "embedder" else Fault()))
    _inject(cache, dependency, fault)
    return cache


def _inject(cache: SemanticCache, dependency: str, fault: Fault) -> None:
    """Put ``fault`` between ``cache`` and its answer store or flight locks."""
    if dependency == "answer store":
        cache.answer_store = Faulty(cache.answer_store, fault, {"search", "search_many", "exact", "put_many", "touch"})
    elif dependency == "flight locks":
        cache.locks = Faulty(cache.locks, fault, {"hold", "ahold"})


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("dependency", ["embedder", "answer store", "flight locks"])
@pytest.mark.parametrize("kind", ["raise", "hang"])
def test_a_failing_dependency_costs_a_miss(tmp_path, clock, entry, dependency, kind, caplog):
    if dependency == "flight locks" and kind == "hang":
        pytest.skip("a lock waits for its own timeout by design (the flight timeout): covered by the single-flight tests")
    fault = Fault(ERRORS["Weird"])
    backend = ScriptedBackend()
    cache = _cache(tmp_path / "answers", dependency, fault)
    rag, ask = _rag(cache, backend), ENTRIES[entry]
    assert not ask(rag, Q).hit and ask(rag, Q).hit and backend.calls == 1  # healthy: as ever

    fault.mode = kind
    with caplog.at_level(logging.WARNING):
        first = ask(rag, Q2)
    assert first.text == backend.text and not first.hit and backend.calls == 2
    assert fault.returned == 0  # the answer came back while the dependency still hung
    assert any("failed during" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
    tried = fault.calls
    again = ask(rag, Q2)
    if dependency == "flight locks":  # answered without the cross-process lock, stored: a hit
        assert again.hit and again.text == backend.text and backend.calls == 2 and len(cache) == 2
    else:  # a miss; during the back-off the dependency is not called; nothing stored for the request
        assert again.text == backend.text and not again.hit and backend.calls == 3
        assert fault.calls == tried and len(cache) == 1

    fault.clear()
    clock.pass_backoff()
    assert ask(rag, Q).hit  # the stored answer is served again
    ask(rag, Q2)
    assert ask(rag, Q2).hit  # and new answers are stored again
    cache.close()


@pytest.mark.parametrize("error", sorted(ERRORS))
def test_any_exception_type_is_a_miss(tmp_path, clock, error):
    fault = Fault(ERRORS[error])
    backend = ScriptedBackend()
    cache = _cache(tmp_path / "answers", "answer store", fault)
    rag = _rag(cache, backend)
    rag.answer(Q, DOCS)
    fault.mode = "raise"
    for q in (Q, Q2):  # an exact repeat and a paraphrase: both through the failing store
        a = rag.answer(q, DOCS)
        assert a.text == backend.text and not a.hit
    assert backend.calls == 3


def test_a_callers_bad_argument_still_raises(tmp_path):
    """The boundary takes the cache's failures, not the caller's mistakes (checked before it)."""
    rag = _rag(SemanticCache(tmp_path / "answers", embedder=HashingEmbedder()), ScriptedBackend())
    with pytest.raises(ValueError, match="threshold"):
        rag.answer(Q, DOCS, threshold=2.0)


@pytest.mark.parametrize("dependency", ["embedder", "answer store", "flight locks"])
def test_a_burst_of_misses_against_a_failing_dependency(tmp_path, clock, dependency):
    """30 concurrent identical misses: every caller gets the answer; with only the lock failing, this
    process still makes one call (the in-process flight) and stores it."""
    fault = Fault(ERRORS["KeyError"])
    backend = ScriptedBackend(delay_s=0.05)
    cache = _cache(tmp_path / "answers", dependency, fault)
    rag = _rag(cache, backend)
    fault.mode = "raise"
    answers, errors = run_in_threads(lambda: rag.answer(Q, DOCS), 30)
    assert not errors and len(answers) == 30 and all(a.text == backend.text for a in answers)
    if dependency == "flight locks":
        assert backend.calls == 1 and len(cache) == 1
    else:
        assert len(cache) == 0
    fault.clear()
    clock.pass_backoff()
    rag.answer(Q, DOCS)
    assert rag.answer(Q, DOCS).hit


def test_refused_writes_keep_the_reads(tmp_path, clock):
    """An answer store that refuses every write (full disk, read-only): stored answers are still served
    (the hit's LRU touch is best effort), new answers are answered and not stored, and stored again later."""
    import sqlite3

    fault = Fault(sqlite3.OperationalError("attempt to write a readonly database"))
    backend = ScriptedBackend()
    cache = SemanticCache(tmp_path / "answers", embedder=HashingEmbedder())
    rag = _rag(cache, backend)
    rag.answer(Q, DOCS)
    cache.answer_store = Faulty(cache.answer_store, fault, {"put_many", "touch", "update_state"})
    fault.mode = "raise"
    assert rag.answer(Q, DOCS).hit  # the touch was refused, the read stands
    a = rag.answer(Q2, DOCS)
    assert a.text == backend.text and not a.hit and len(cache) == 1
    assert rag.answer(Q, DOCS).hit  # the refused store backed off the writes only as long as they fail
    fault.clear()
    clock.pass_backoff()
    rag.answer(Q2, DOCS)
    assert rag.answer(Q2, DOCS).hit


def test_ragcache_ask_answers_with_a_failing_answer_store(tmp_path, monkeypatch, clock):
    """``ragcache ask`` in-process: a store that raises an unexpected type answers (no exit 1)."""
    from contract_entries import AskEntry, notes_folder

    import ragcache.app.ask as ask_mod

    fault = Fault(ERRORS["AttributeError"])
    real = ask_mod.answer_cache

    def faulty_cache(*a: Any, **kw: Any) -> Any:
        cache = real(*a, **kw)
        _inject(cache, "answer store", fault)
        return cache

    monkeypatch.setattr(ask_mod, "answer_cache", faulty_cache)
    backend = ScriptedBackend()
    entry = AskEntry(backend, notes_folder(tmp_path, monkeypatch), monkeypatch)
    entry.ask(Q)
    assert entry.ask(Q).hit
    fault.mode = "raise"
    a = entry.ask(Q)
    assert a.text == backend.text and not a.hit and backend.calls == 2
    fault.clear()
    clock.pass_backoff()
    assert entry.ask(Q).hit


# ------------------------------------------------------------------------------------------- chunk stores
@pytest.fixture(scope="module")
def exact_answer(tiny_seed1):
    return exact_answer_of(tiny_seed1, [d * 3 for d in DOCS])


def _asker(engine: Any, rag: Any, mode: str = "sync") -> Callable[[], Any]:
    docs = [d * 3 for d in DOCS]

    def ask() -> Any:
        engine.prefix_cache.clear()  # every request reads its documents from the chunk store
        return asyncio.run(rag.aanswer(Q, docs)) if mode == "async" else rag.answer(Q, docs)
    return ask


def _check_fault(ask: Callable[[], Any], want: str, fault_on: Callable[[], None], fault_off: Callable[[], None],
                 clock: Clock, stored: Callable[[], int], asks: int = 2) -> None:
    """Under the fault (``asks`` requests): the exact answer, no chunk reused, nothing wrong stored; once it
    clears and the back-off passed: stored again, then reused."""
    fault_on()
    try:
        for _ in range(asks):
            a = ask()
            assert a.text == want and a.usage.chunk_reused == 0 and not a.approximate
    finally:
        fault_off()
    clock.pass_backoff()
    assert ask().text == want  # stores the documents' KV again (if the fault emptied the store)
    assert stored() >= 1
    b = ask()
    assert b.text == want or b.approximate  # a blend is labelled; an exact prefill is the exact answer
    assert b.usage.chunk_reused > 0


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("kind", ["raise", "hang", "full disk", "unreadable"])
def test_disk_chunk_store_faults(tiny_seed1, exact_answer, tmp_path, clock, kind, mode):
    from safetensors import SafetensorError

    from ragcache.engine.chunk.stores.disk import DiskChunkStore

    store = DiskChunkStore(tmp_path / "kv")
    engine, rag = engine_rag(tiny_seed1, store, DEADLINE_S)
    ask = _asker(engine, rag, mode)
    fault = Fault(ERRORS["AttributeError"])
    if kind in ("raise", "hang"):
        ask()  # stored while healthy
        engine.chunk_cache.store = Faulty(store, fault, {"get", "get_many", "put", "put_many"})

        def on() -> None:
            fault.mode = kind

        def off() -> None:
            fault.clear()
    elif kind == "full disk":
        import safetensors.torch

        save_file = safetensors.torch.save_file

        def full(*a: Any, **kw: Any) -> None:
            raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
                                  "message: \"No space left on device\" })")

        def on() -> None:
            safetensors.torch.save_file = full

        def off() -> None:
            safetensors.torch.save_file = save_file
    else:  # unreadable: every stored chunk file overwritten with garbage (read once, deleted, rewritten)
        ask()

        def on() -> None:
            for p in (tmp_path / "kv").glob("*.safetensors"):
                p.write_bytes(b"\x00garbage")

        def off() -> None:
            pass
    _check_fault(ask, exact_answer, on, off, clock, lambda: len(store), asks=1 if kind == "unreadable" else 2)
    assert not list((tmp_path / "kv").glob(".tmp-*"))  # no half-written files left behind


@pytest.fixture()
def valkey():
    yield from own_valkey()


@pytest.mark.parametrize("kind", ["noeviction", "read-only replica", "unreadable"])
def test_valkey_chunk_store_faults(tiny_seed1, exact_answer, valkey, clock, kind):
    """The real server's refusals: ``maxmemory`` reached under ``noeviction`` (OutOfMemoryError), a
    read-only replica (ReadOnlyError, the LRU touch of a read included), garbage under a chunk's key."""
    import redis

    from ragcache.engine.chunk.stores.redis_store import RedisChunkStore
    from ragcache.testing.local_servers import free_port

    admin = redis.Redis.from_url(valkey.url)
    store = RedisChunkStore(valkey.url, timeout_s=2.0)
    engine, rag = engine_rag(tiny_seed1, store)
    ask = _asker(engine, rag)

    if kind == "noeviction":
        def on() -> None:
            store.clear()  # nothing to read: every document must be written, and every write is refused
            admin.config_set("maxmemory-policy", "noeviction")
            admin.config_set("maxmemory", "1")

        def off() -> None:
            admin.config_set("maxmemory", "0")
    elif kind == "read-only replica":
        ask()  # stored on the primary

        def on() -> None:
            admin.execute_command("REPLICAOF", "127.0.0.1", str(free_port()))  # a primary that never answers
            with pytest.raises(redis.exceptions.ReadOnlyError):
                admin.set("probe", "1")

        def off() -> None:
            admin.execute_command("REPLICAOF", "NO", "ONE")
    else:
        ask()

        def on() -> None:
            for k in admin.scan_iter(match="ragcache:kv:*"):
                admin.set(k, b"\x00not safetensors")

        def off() -> None:
            pass

    if kind == "read-only replica":  # reads still work: the stored chunks are reused, nothing written
        on()
        try:
            a = ask()
            assert a.text == exact_answer and a.usage.chunk_reused > 0
        finally:
            off()
        return
    _check_fault(ask, exact_answer, on, off, clock, lambda: len(store), asks=1 if kind == "unreadable" else 2)


def test_redis_errors_name_the_fix(valkey):
    import redis

    from ragcache.engine.chunk.stores.redis_store import RedisChunkStore
    from ragcache.remote import RemoteStoreError

    admin = redis.Redis.from_url(valkey.url)
    store = RedisChunkStore(valkey.url)
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", "1")
    try:
        with pytest.raises(RemoteStoreError, match="maxmemory-policy allkeys-lru"):
            store._call("put", lambda: store._r.set("ragcache:x", "1"))
    finally:
        admin.config_set("maxmemory", "0")


def test_boundary_policy_unit():
    """One policy: any exception is the default, logged and backed off; success ends the back-off."""
    b = boundary.Boundary("thing")
    calls = []

    def boom() -> None:
        calls.append(1)
        raise Weird("x")

    assert b.call("read", boom, "miss") == "miss" and b.down()
    assert b.call("read", boom, "miss") == "miss" and len(calls) == 1  # backed off: not called
    b.down_until = 0.0
    assert b.call("read", lambda: 7, None, deadline_s=1.0) == 7 and not b.down() and b.failures == 0
    with pytest.raises(KeyboardInterrupt):
        b.call("read", lambda: (_ for _ in ()).throw(KeyboardInterrupt()), None, deadline_s=1.0)


# ------------------------------------------------------------------------------------------- a cold load
@pytest.mark.parametrize("entry", ["sync", "async"])
def test_a_slow_cold_load_is_not_a_hang(tmp_path, entry):
    """The embedder loads lazily and its load takes longer than the lookup deadline (torch on a loaded
    machine): 8 concurrent first identical requests wait for the one load (its own deadline), join one
    flight, make one model call and store the answer; the repeat is a hit."""
    import time

    from ragcache.semantic.embedding import LazyQuestionEmbedder, resolve_embedder

    real = resolve_embedder(HashingEmbedder())
    loads = []

    def slow_load() -> Any:
        loads.append(1)
        time.sleep(DEADLINE_S * 3)  # longer than a lookup may take
        return real

    lazy = LazyQuestionEmbedder(slow_load, name=real.name, fingerprint=real.fingerprint, dim=real.dim)
    backend = ScriptedBackend(delay_s=0.05)
    cache = SemanticCache(tmp_path / "answers", embedder=lazy)
    rag, ask = _rag(cache, backend), ENTRIES[entry]
    answers, errors = run_in_threads(lambda: ask(rag, Q), 8)
    assert not errors and all(a.text == backend.text for a in answers)
    assert backend.calls == 1 and len(cache) == 1 and len(loads) == 1
    assert ask(rag, Q).hit and ask(rag, Q2).text == backend.text


# ------------------------------------------------------------------------------------------- PostgreSQL
@pytest.fixture(scope="module")
def small_pg():
    """A PostgreSQL server of its own allowing only 12 connections (a burst would once take them all)."""
    from ragcache.testing.local_servers import LocalPostgres, ServerUnavailable

    try:
        server = LocalPostgres(settings={"max_connections": "12"})
    except ServerUnavailable as e:
        pytest.skip(str(e))
    yield server
    server.close()


def _client_connections(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        return int(c.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")
                   .fetchone()[0]) - 1  # less this one


@pytest.mark.parametrize("entry", ["sync", "async"])
def test_a_burst_of_misses_against_postgres_is_bounded(small_pg, entry, request):
    """30 concurrent identical misses: one model call, the answer stored, and never more than the pool
    (4) plus the lock connection open, so another application on the database still gets in (12 allowed)."""
    import psycopg

    from ragcache.semantic.pg_cache import PgSemanticCache

    schema = f"burst_{entry}"
    cache = PgSemanticCache(small_pg.url, schema=schema, embedder=HashingEmbedder(), pool_size=4)
    backend = ScriptedBackend(delay_s=0.2)
    rag, ask = _rag(cache, backend, 10.0), ENTRIES[entry]  # the default deadline: 30 lookups share 4 connections
    peak, stop = [0], threading.Event()

    def watch() -> None:
        with psycopg.connect(small_pg.url, autocommit=True) as c:  # "another application"
            while not stop.is_set():
                n = c.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'") \
                    .fetchone()[0] - 1
                peak[0] = max(peak[0], int(n))
                stop.wait(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        answers, errors = run_in_threads(lambda: ask(rag, Q), 30)
    finally:
        stop.set()
        watcher.join()
    assert not errors and all(a.text == backend.text for a in answers)
    assert backend.calls == 1 and len(cache) == 1
    assert peak[0] <= 4 + 1  # the pool and the flight-lock connection
    assert ask(rag, Q).hit
    cache.close()
    assert _client_connections(small_pg.url) == 0


def test_postgres_gone_costs_a_miss(small_pg, clock):
    """The server stops mid-run: answered without it (no RemoteStoreError for the caller), backed off,
    and served again once it is back."""
    from ragcache.semantic.pg_cache import PgSemanticCache

    cache = PgSemanticCache(small_pg.url, schema="gone", embedder=HashingEmbedder())
    backend = ScriptedBackend()
    rag = _rag(cache, backend)
    rag.answer(Q, DOCS)
    small_pg.stop()
    try:
        for q in (Q, Q2):
            a = rag.answer(q, DOCS)
            assert a.text == backend.text and not a.hit
    finally:
        small_pg.start()
    clock.pass_backoff()
    assert rag.answer(Q, DOCS).hit
    cache.close()
