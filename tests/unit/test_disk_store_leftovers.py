"""Issue 24 kind 13: temporary files of a killed DiskChunkStore.put are never entries; stale ones are
removed on open, and a byte-budget eviction never chokes on them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import test_stores as suite  # tests/ is on sys.path: make_kv builds real chunks
from ragcache.engine.chunk.stores import DiskChunkStore
from ragcache.engine.chunk.stores import disk as diskmod

make_kv, FP = suite.make_kv, suite.FP


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _fill(root, n, start=0):
    s = DiskChunkStore(root)
    kvs = [make_kv(start + i, n=16) for i in range(n)]
    for kv in kvs:
        assert s.put(kv)
    return kvs


@pytest.mark.parametrize("leftover", ["dead-writer-partial", "dead-writer-empty", "old-format-empty",
                                      "old-format-partial", "older-than-stale"])
def test_a_killed_writes_temp_file_is_not_an_entry_and_is_removed(tmp_path, leftover):
    root = tmp_path / "chunks"
    kvs = _fill(root, 3)
    real = next(root.glob("*.safetensors")).read_bytes()
    host, pid = diskmod._HOST, _dead_pid()
    name, data, age = {
        "dead-writer-partial": (f".tmp-{host}-{pid}-abc123.part", real[: len(real) // 2], 0),
        "dead-writer-empty": (f".tmp-{host}-{pid}-x9.part", b"", 0),
        "old-format-empty": (".tmp-k2j3h4.safetensors", b"", 3600),  # ragcache <= 0.2's name, left long ago
        "old-format-partial": (".tmp-q1w2e3.safetensors", real[:100], 3600),
        "older-than-stale": (f".tmp-otherhost-{os.getpid()}-z.part", real[:10], diskmod.STALE_TEMP_S + 60),
    }[leftover]
    tmp = root / name
    tmp.write_bytes(data)
    if age:
        past = time.time() - age
        os.utime(tmp, (past, past))
    budget = int(sum(p.stat().st_size for p in root.glob("*.safetensors")) * 1.4)  # room for ~4 chunks
    s = DiskChunkStore(root, max_bytes=budget)
    assert len(s) == 3 and not tmp.exists() and s.stale_temps_removed == 1
    for i in range(3, 6):  # every put evicts: none may choke on a leftover
        assert s.put(make_kv(i, n=16))
    assert s.stats.evictions >= 2 and s.nbytes <= budget
    assert len(s) == len(list(root.glob("*.safetensors")))  # the entries are the folder's files, no others
    assert s.get(kvs[0].key, fingerprint=FP) is None  # evicted, LRU first
    assert DiskChunkStore(root).nbytes == s.nbytes  # a reopen sees exactly the entries


def test_a_live_writers_fresh_temp_file_is_ignored_but_kept(tmp_path):
    root = tmp_path / "chunks"
    _fill(root, 2)
    live = root / f".tmp-{diskmod._HOST}-{os.getpid()}-live.part"  # this process: alive
    fresh_old_format = root / ".tmp-fresh.safetensors"  # unknown writer, written just now
    for f in (live, fresh_old_format):
        f.write_bytes(b"partial")
    s = DiskChunkStore(root, max_bytes=10)
    assert len(s) == 2 and live.exists() and fresh_old_format.exists() and s.stale_temps_removed == 0
    assert s.nbytes == sum(p.stat().st_size for p in root.glob("[0-9a-f]*.safetensors"))


def test_put_whose_temp_file_is_removed_under_it_returns_false(tmp_path, monkeypatch):
    import safetensors.torch

    s = DiskChunkStore(tmp_path)
    real = safetensors.torch.save_file

    def save_then_lose(tensors, path, metadata=None):
        real(tensors, path, metadata=metadata)
        os.unlink(path)  # another host's opener judged it stale

    monkeypatch.setattr(safetensors.torch, "save_file", save_then_lose)
    assert s.put(make_kv(1, n=8)) is False and len(s) == 0


WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    import safetensors.torch
    import test_stores as suite
    from ragcache.engine.chunk.stores import DiskChunkStore

    real = safetensors.torch.save_file

    def slow_save(tensors, path, metadata=None):  # a slow disk: half the file, then a long write
        real(tensors, path, metadata=metadata)
        data = open(path, "rb").read()
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
            print("writing", flush=True)
            time.sleep(60)

    s = DiskChunkStore({root!r})
    s.put(suite.make_kv(1, n=16))
    safetensors.torch.save_file = slow_save
    s.put(suite.make_kv(2, n=16))
""")


def test_writer_killed_with_sigkill_mid_put(tmp_path):
    root = tmp_path / "chunks"
    tests = os.path.dirname(__file__)
    code = WRITER.format(tests=tests, root=str(root))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "writing"
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.wait(timeout=30)
    leftovers = list(root.glob(".tmp-*"))
    assert len(leftovers) == 1 and leftovers[0].stat().st_size > 0  # the half-written file
    s = DiskChunkStore(root, max_bytes=1)  # a budget too small for anything: eviction runs on every put
    assert len(s) == 1 and s.stale_temps_removed == 1 and not list(root.glob(".tmp-*"))
    assert s.get(make_kv(1, n=16).key, fingerprint=FP) is not None
    assert s.put(make_kv(3, n=16)) is False  # over the budget alone: refused, nothing raised
    s = DiskChunkStore(root, max_bytes=10 << 20)
    assert s.put(make_kv(2, n=16)) and len(s) == 2
    assert torch.equal(s.get(make_kv(2, n=16).key, fingerprint=FP).keys, make_kv(2, n=16).keys)
