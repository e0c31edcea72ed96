"""Load and fault test of the shared stores (issue 14): 4 processes x 200 mixed operations against one
PostgreSQL and one Valkey on loopback, one worker killed mid-write, both servers restarted mid-run.

Checks: no exception other than :class:`RemoteStoreError` during the restart gap, no committed write
lost, no wrong answer (every answer and chunk carries the id of the question / document it belongs to),
no corrupt entry afterwards. Bounded: about 30-60 s on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import random
import time
import traceback
from pathlib import Path

import pytest

pytest.importorskip("psycopg", reason="pip install 'ragcache[shared]'")
pytest.importorskip("redis", reason="pip install 'ragcache[shared]'")

WORKERS, OPS, QUESTIONS, GROUPS = 4, 200, 40, 4
SCHEMA = "t_load"


def _question(i: int) -> str:
    return f"What is the current status of ticket {i}?"


def _group(i: int) -> dict:
    g = i % GROUPS
    return {"id": f"doc-{g}", "text": f"Ticket handbook, chapter {g}."}


def _chunk(i: int):
    import torch

    from ragcache.engine.chunk.stores import ChunkKV
    from ragcache.hashing import hash_chunk

    g = torch.Generator().manual_seed(i)
    ids = [i, *torch.randint(0, 1000, (15,), generator=g).tolist()]
    k = torch.randn(2, 2, 16, 8, generator=g).half()
    return ChunkKV(hash_chunk("f" * 64, [1], ids), "f" * 64, ids, k, -k, start=1)


def _retry(fn, gap: list, deadline_s: float = 45.0):
    from ragcache.remote import RemoteStoreError

    end = time.monotonic() + deadline_s
    while True:
        try:
            return fn()
        except RemoteStoreError as e:  # a server restart: a clear ragcache error, then retry
            gap.append(str(e)[:120])
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def _worker(w: int, pg_url: str, kv_url: str, log_dir: str, progress, n_ops: int) -> None:
    import torch

    from ragcache.engine.chunk.stores.redis_store import RedisChunkStore
    from ragcache.semantic import partition_key
    from ragcache.semantic.pg_cache import PgSemanticCache
    from ragcache.testing import HashingEmbedder

    out = {"worker": w, "ops": 0, "errors": [], "wrong": [], "gap": [], "hits": 0, "chunk_hits": 0}
    committed = open(Path(log_dir) / f"committed-{w}.txt", "a", buffering=1)
    try:
        # a worker that starts while the servers restart (a slow spawn under load) retries like any call
        cache = _retry(lambda: PgSemanticCache(pg_url, schema=SCHEMA, embedder=HashingEmbedder(64), threshold=0.8),
                       out["gap"])
        kv = _retry(lambda: RedisChunkStore(kv_url, prefix="load:"), out["gap"])
        durable = partition_key(model="m", namespace="durable")
        rng = random.Random(w)
        for n in range(n_ops):
            i = rng.randrange(QUESTIONS)
            pk = partition_key(model="m", documents=[_group(i)])
            r = rng.random()
            try:
                if r < 0.35:
                    _retry(lambda: cache.store(_question(i), f"answer:{i}", partition=pk), out["gap"])
                    _retry(lambda: kv.put(_chunk(i)), out["gap"])
                    key = f"{w}-{n}"
                    _retry(lambda: cache.store(f"durable record {key}", f"answer:{key}", partition=durable),
                           out["gap"])
                    committed.write(key + "\n")
                elif r < 0.85:
                    hit = _retry(lambda: cache.lookup(_question(i), partition=pk), out["gap"])
                    if hit is not None:
                        out["hits"] += 1
                        if hit.answer != f"answer:{i}":
                            out["wrong"].append((i, hit.answer))
                    c = _chunk(i)
                    got = _retry(lambda: kv.get(c.key, fingerprint="f" * 64), out["gap"])
                    if got is not None:
                        out["chunk_hits"] += 1
                        if got.token_ids != c.token_ids or not torch.equal(got.keys, c.keys):
                            out["wrong"].append((i, "chunk"))
                else:
                    _retry(lambda: cache.invalidate(f"doc-{i % GROUPS}"), out["gap"])
            except Exception:  # noqa: BLE001 - counted and reported by the parent
                out["errors"].append(traceback.format_exc()[-600:])
            out["ops"] += 1
            progress.value += 1
        cache.close()
        kv.close()
    finally:
        (Path(log_dir) / f"result-{w}.json").write_text(json.dumps(out))


def _durable_writer(pg_url: str, log_dir: str) -> None:
    """Stores as fast as it can until killed; logs each key once its store has returned (committed)."""
    from ragcache.semantic import partition_key
    from ragcache.semantic.pg_cache import PgSemanticCache
    from ragcache.testing import HashingEmbedder

    cache = PgSemanticCache(pg_url, schema=SCHEMA, embedder=HashingEmbedder(64))
    durable = partition_key(model="m", namespace="durable")
    with open(Path(log_dir) / "committed-killed.txt", "a", buffering=1) as f:
        for n in range(100_000):
            cache.store_many([(f"durable record k-{n}-{j}", f"answer:k-{n}-{j}") for j in range(5)],
                             partition=durable)
            f.write("\n".join(f"k-{n}-{j}" for j in range(5)) + "\n")


def test_four_workers_kill_and_restart(tmp_path):
    from ragcache.engine.chunk.stores.redis_store import RedisChunkStore
    from ragcache.testing.local_servers import LocalPostgres, LocalValkey, ServerUnavailable
    from ragcache.semantic import partition_key
    from ragcache.semantic.pg_cache import PgSemanticCache
    from ragcache.testing import HashingEmbedder

    try:
        pg, vk = LocalPostgres(), LocalValkey(persist=True)
    except ServerUnavailable as e:
        pytest.skip(f"cannot start local servers: {e}")
    t_start = time.perf_counter()
    try:
        PgSemanticCache(pg.url, schema=SCHEMA, embedder=HashingEmbedder(64)).close()  # migrate once
        ctx = mp.get_context("spawn")
        progress = ctx.Value("i", 0)
        workers = [ctx.Process(target=_worker, args=(w, pg.url, vk.url, str(tmp_path), progress, OPS))
                   for w in range(WORKERS)]
        killed = ctx.Process(target=_durable_writer, args=(pg.url, str(tmp_path)))
        for p in [*workers, killed]:
            p.start()
        end = time.monotonic() + 120
        while progress.value < WORKERS * OPS // 3 and time.monotonic() < end:
            time.sleep(0.05)
        killed.kill()  # mid-write: its in-flight transaction is rolled back, its committed ones stay
        killed.join()
        pg.restart("fast", pause_s=1.0)
        vk.restart(pause_s=0.5)
        for p in workers:
            p.join(180)
            assert p.exitcode == 0, f"worker exited with {p.exitcode}"
        results = [json.loads((tmp_path / f"result-{w}.json").read_text()) for w in range(WORKERS)]
        errors = [e for r in results for e in r["errors"]]
        wrong = [x for r in results for x in r["wrong"]]
        gap = [g for r in results for g in r["gap"]]
        assert not errors, errors[:3]
        assert not wrong, wrong[:5]
        assert sum(r["ops"] for r in results) == WORKERS * OPS
        assert all("PostgreSQL" in g or "Redis / Valkey" in g for g in gap), gap[:3]

        cache = PgSemanticCache(pg.url, schema=SCHEMA, embedder=HashingEmbedder(64))
        durable = partition_key(model="m", namespace="durable")
        keys = [k for f in tmp_path.glob("committed-*.txt") for k in f.read_text().split()]
        assert len([k for k in keys if k.startswith("k-")]) >= 5, "the killed writer committed nothing"
        import psycopg

        with psycopg.connect(pg.url) as c:
            rows = c.execute(f"SELECT question, answer FROM {SCHEMA}.entries").fetchall()
        by_q = {q: a for q, a in rows}
        lost = [k for k in keys if by_q.get(f"durable record {k}") != f"answer:{k}"]
        assert not lost, f"{len(lost)} committed writes lost: {lost[:5]}"
        for q, a in rows:  # no corrupt entry: every answer belongs to its question
            ident = q.removeprefix("durable record ") if q.startswith("durable") else q.split()[-1].rstrip("?")
            assert a == f"answer:{ident}", (q, a)
        store = RedisChunkStore(vk.url, prefix="load:")
        stored = [i for i in range(QUESTIONS) if store.contains(_chunk(i).key)]
        assert stored, "no chunk survived the Valkey restart (append-only file expected)"
        for i in stored:
            got = store.get(_chunk(i).key)
            assert got is not None and got.token_ids == _chunk(i).token_ids
        assert store.stats.corrupt == 0
        cache.close()
        print(f"\nload test: {WORKERS}x{OPS} ops, {len(keys)} committed durable writes checked, "
              f"{sum(r['hits'] for r in results)} answer hits, {sum(r['chunk_hits'] for r in results)} chunk hits, "
              f"{len(gap)} RemoteStoreErrors during restarts, {time.perf_counter() - t_start:.1f} s")
    finally:
        pg.close()
        vk.close()
