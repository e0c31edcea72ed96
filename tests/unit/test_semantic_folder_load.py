"""Load and fault test of the embedded store shared by processes (issue 24, kinds 10 and 13's kill test):
4 processes x 200 mixed operations (store, lookup, invalidate) on one answers folder, across two
tenants and four documents, while a fifth process stores until it is killed with SIGKILL mid-write.

Checks: no exception, no answer served across tenants, questions or documents (every answer names its
tenant and question), no answer of an invalidated document served after the invalidating call
returned in the same process, and, after a reopen, every committed write present and no corrupt entry.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import random
import time
import traceback
from pathlib import Path

WORKERS, OPS, QUESTIONS, GROUPS, TENANTS = 4, 200, 30, 4, 2


def _question(i: int) -> str:
    return f"What is the current status of ticket {i}?"


def _pk(tenant: str, i: int):
    from ragcache.semantic import partition_key

    g = i % GROUPS
    return partition_key(namespace=tenant, model="m", documents=[{"id": f"doc-{g}", "text": f"Handbook {g}."}])


def _worker(w: int, path: str, log_dir: str, progress) -> None:
    from ragcache.semantic import SemanticCache, partition_key
    from ragcache.testing import HashingEmbedder

    out = {"worker": w, "ops": 0, "errors": [], "wrong": [], "stale": [], "hits": 0}
    committed = open(Path(log_dir) / f"committed-{w}.txt", "a", buffering=1)
    try:
        cache = SemanticCache(path, embedder=HashingEmbedder(64), threshold=0.8, autosave_every=50)
        durable = partition_key(model="m", namespace="durable")
        rng = random.Random(w)
        for n in range(OPS):
            i, tenant = rng.randrange(QUESTIONS), f"tenant-{rng.randrange(TENANTS)}"
            r = rng.random()
            try:
                if r < 0.35:
                    cache.store(_question(i), f"answer:{tenant}:{i}", partition=_pk(tenant, i))
                    key = f"{w}-{n}"
                    cache.store(f"durable record {key}", f"answer:{key}", partition=durable)
                    committed.write(key + "\n")
                elif r < 0.85:
                    hit = cache.lookup(_question(i), partition=_pk(tenant, i))
                    if hit is not None:
                        out["hits"] += 1
                        if hit.answer != f"answer:{tenant}:{i}":
                            out["wrong"].append((tenant, i, hit.answer))
                else:  # every entry committed before `before` is built on the document: it must go
                    before = cache.store(f"marker {w}-{n}", "marker", partition=partition_key(model="m",
                                                                                              namespace="marks"))
                    cache.invalidate(f"doc-{i % GROUPS}")
                    for j in [j for j in range(QUESTIONS) if j % GROUPS == i % GROUPS][:3]:
                        hit = cache.lookup(_question(j), partition=_pk(tenant, j))
                        if hit is not None and hit.entry_id < before:
                            out["stale"].append((tenant, j, hit.entry_id, before))
            except Exception:  # noqa: BLE001 - counted and reported by the parent
                out["errors"].append(traceback.format_exc()[-800:])
            out["ops"] += 1
            progress.value += 1
        cache.close()
    finally:
        (Path(log_dir) / f"result-{w}.json").write_text(json.dumps(out))


def _durable_writer(path: str, log_dir: str) -> None:
    """Stores as fast as it can until killed; logs each key once its store has returned (committed)."""
    from ragcache.semantic import SemanticCache, partition_key
    from ragcache.testing import HashingEmbedder

    cache = SemanticCache(path, embedder=HashingEmbedder(64), autosave_every=20)
    durable = partition_key(model="m", namespace="durable")
    with open(Path(log_dir) / "committed-killed.txt", "a", buffering=1) as f:
        for n in range(100_000):
            cache.store_many([(f"durable record k-{n}-{j}", f"answer:k-{n}-{j}") for j in range(5)],
                             partition=durable)
            f.write("\n".join(f"k-{n}-{j}" for j in range(5)) + "\n")


def test_four_processes_on_one_folder_with_a_kill(tmp_path):
    from ragcache.semantic import SemanticCache, partition_key
    from ragcache.testing import HashingEmbedder

    path = str(tmp_path / "answers")
    SemanticCache(path, embedder=HashingEmbedder(64)).close()
    ctx = mp.get_context("spawn")
    progress = ctx.Value("i", 0)
    workers = [ctx.Process(target=_worker, args=(w, path, str(tmp_path), progress)) for w in range(WORKERS)]
    killed = ctx.Process(target=_durable_writer, args=(path, str(tmp_path)))
    for p in [*workers, killed]:
        p.start()
    end = time.monotonic() + 180
    log = tmp_path / "committed-killed.txt"

    def writer_committed() -> int:  # the writer may start after the workers (a slow spawn): wait for it too
        return len(log.read_text().split()) if log.exists() else 0

    while (progress.value < WORKERS * OPS // 3 or writer_committed() < 5) and time.monotonic() < end:
        time.sleep(0.05)
    killed.kill()  # SIGKILL mid-write: its open transaction is rolled back, committed ones stay
    killed.join()
    for p in workers:
        p.join(300)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"
    results = [json.loads((tmp_path / f"result-{w}.json").read_text()) for w in range(WORKERS)]
    errors = [e for r in results for e in r["errors"]]
    assert not errors, errors[:3]
    assert not [x for r in results for x in r["wrong"]]
    assert not [x for r in results for x in r["stale"]]
    assert sum(r["ops"] for r in results) == WORKERS * OPS
    assert sum(r["hits"] for r in results) > 0

    cache = SemanticCache(path, embedder=HashingEmbedder(64), threshold=1.0)
    durable = partition_key(model="m", namespace="durable")
    keys = [k for f in tmp_path.glob("committed-*.txt") for k in f.read_text().split()]
    assert len([k for k in keys if k.startswith("k-")]) >= 5, "the killed writer committed nothing"
    lost = [k for k in keys if (h := cache.lookup(f"durable record {k}", partition=durable)) is None
            or h.answer != f"answer:{k}"]
    assert not lost, f"{len(lost)} committed writes lost: {lost[:5]}"
    for tenant in (f"tenant-{t}" for t in range(TENANTS)):  # no corrupt entry: answers belong to their key
        for i in range(QUESTIONS):
            hit = cache.lookup(_question(i), partition=_pk(tenant, i))
            assert hit is None or hit.answer == f"answer:{tenant}:{i}", (tenant, i, hit)
    cache.close()
