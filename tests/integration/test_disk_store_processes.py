"""A disk chunk store shared by several processes (issue 32 section 2): the byte budget holds for the
folder, not per process (three processes once ended with 123 chunks against a budget of 6), and a
chunk another process evicts between lookup and read is a miss, never a FileNotFoundError. Real
processes (multiprocessing, spawn)."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from ragcache.engine.chunk.stores import DiskChunkStore
from ragcache.testing.chunk_stores import FP, make_kv

N = 16  # tokens per chunk: every chunk file has the same size


def _chunk_bytes(tmp_path) -> int:
    s = DiskChunkStore(tmp_path / "one")
    s.put(make_kv(0, n=N))
    return s.nbytes


def writer(root: str, budget: int, seeds: list[int]) -> int:
    store = DiskChunkStore(root, max_bytes=budget)
    return sum(store.put(make_kv(s, n=N)) for s in seeds)


def reader(root: str, seeds: list[int], rounds: int) -> tuple[int, int]:
    store, hits, misses = DiskChunkStore(root), 0, 0
    for _ in range(rounds):
        for s in seeds:
            want = make_kv(s, n=N)
            got = store.get(want.key, fingerprint=FP)
            if got is None:
                misses += 1
            else:
                assert got.token_ids == want.token_ids  # a hit is the whole, right chunk
                hits += 1
    assert store.stats.corrupt == 0  # an evicted file is a miss, not a corrupt one
    return hits, misses


def _pool(n):
    return mp.get_context("spawn").Pool(n)


@pytest.mark.parametrize("procs,per_proc,budget_chunks", [(3, 20, 6), (2, 12, 1)])
def test_the_byte_budget_holds_for_the_folder(tmp_path, procs, per_proc, budget_chunks):
    one = _chunk_bytes(tmp_path)
    budget = one * budget_chunks + one // 2
    root = str(tmp_path / "shared")
    jobs = [(root, budget, list(range(1 + p * per_proc, 1 + (p + 1) * per_proc))) for p in range(procs)]
    with _pool(procs) as pool:
        written = pool.starmap(writer, jobs)
    assert written == [per_proc] * procs
    store = DiskChunkStore(root, max_bytes=budget)
    assert store.nbytes <= budget and len(store) == budget_chunks  # the folder, whoever wrote
    # the survivors are the most recently written: every process's last chunk is among them
    last = {make_kv(seeds[-1], n=N).key for _, _, seeds in jobs}
    assert len(last & {p.name[:64] for p in (tmp_path / "shared").glob("*.safetensors")}) >= min(1, budget_chunks)


@pytest.mark.parametrize("budget_chunks,readers", [(3, 2)])
def test_a_chunk_evicted_by_another_process_is_a_miss(tmp_path, budget_chunks, readers):
    one = _chunk_bytes(tmp_path)
    budget = one * budget_chunks + one // 2
    root = str(tmp_path / "shared")
    seeds = list(range(1, 13))
    writer(root, budget, seeds[:budget_chunks])
    with _pool(readers + 1) as pool:
        w = pool.apply_async(writer, (root, budget, seeds * 3))  # keeps evicting what the readers look up
        rs = [pool.apply_async(reader, (root, seeds, 6)) for _ in range(readers)]
        got = [r.get(timeout=600) for r in rs]
        w.get(timeout=600)
    assert all(h + m == len(seeds) * 6 for h, m in got)
    assert sum(m for _, m in got) > 0  # most of the 12 chunks are not stored at any time
    assert DiskChunkStore(root).nbytes <= budget


def test_eviction_by_another_handle_in_between_is_a_plain_miss(tmp_path):
    """The race in one process, deterministically: a second store on the folder evicts the chunk
    after the first looked it up (``contains``) and before it reads it."""
    one = _chunk_bytes(tmp_path)
    a = DiskChunkStore(tmp_path / "shared", max_bytes=one * 2 + one // 2)
    b = DiskChunkStore(tmp_path / "shared", max_bytes=one * 2 + one // 2)
    kvs = [make_kv(i, n=N) for i in range(1, 5)]
    a.put(kvs[0])
    assert a.contains(kvs[0].key)
    b.put(kvs[1])
    b.put(kvs[2])  # the folder's budget: evicts kvs[0], which a wrote
    assert a.get(kvs[0].key, fingerprint=FP) is None and a.stats.corrupt == 0
    assert a.get_many([k.key for k in kvs[:3]], fingerprint=FP)[1:] != [None, None]
    assert len(a) == len(b) == 2 and a.nbytes == b.nbytes <= a.max_bytes
    assert b.remove(kvs[1].key) and not a.contains(kvs[1].key)
