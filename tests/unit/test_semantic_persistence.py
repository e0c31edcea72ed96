"""Persistence of the semantic cache: round trip, crash safety, corrupt or missing index rebuilt."""

import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ragcache.semantic import SemanticCache, partition_key
from ragcache.testing import HashingEmbedder

PK = partition_key(namespace="p", model="m", documents=[{"text": "manual v1", "id": "manual"}])
ROOT = Path(__file__).resolve().parents[2]


def _fill(c: SemanticCache, n: int) -> list[str]:
    qs = [f"How do I configure feature number {i} on host alpha{i}?" for i in range(n)]
    for i, q in enumerate(qs):
        c.store(q, f"answer {i}", partition=PK, metadata={"i": i})
    return qs


def test_round_trip(tmp_path):
    with SemanticCache(tmp_path, embedder=HashingEmbedder(), threshold=0.95) as c:
        qs = _fill(c, 30)
        c.lookup(qs[0], partition=PK)
    assert (tmp_path / "semantic.sqlite3").exists() and list((tmp_path / "index").glob("*.faiss"))
    with SemanticCache(tmp_path, embedder=HashingEmbedder(), threshold=0.95) as c2:
        assert len(c2) == 30
        for i, q in enumerate(qs):
            hit = c2.lookup(q, partition=PK)
            assert hit is not None and hit.answer == f"answer {i}" and hit.metadata == {"i": i}
        assert c2.invalidate("manual") == 30
    with SemanticCache(tmp_path, embedder=HashingEmbedder(), threshold=0.95) as c3:
        assert len(c3) == 0 and not list((tmp_path / "index").glob("*.faiss"))


def test_other_embedder_refused(tmp_path):
    SemanticCache(tmp_path, embedder=HashingEmbedder(64)).close()
    with pytest.raises(ValueError, match="same embedder"):
        SemanticCache(tmp_path, embedder=HashingEmbedder(32))


@pytest.mark.parametrize("damage", ["corrupt", "missing", "stale"])
def test_index_rebuilt_from_sqlite(tmp_path, caplog, damage):
    c = SemanticCache(tmp_path, embedder=HashingEmbedder(), threshold=0.95, autosave_every=10**9)
    qs = _fill(c, 20)
    c.flush()
    (idx,) = (tmp_path / "index").glob("*.faiss")
    if damage == "stale":  # snapshot from an earlier state: later writes only in SQLite
        qs += _fill_more(c)
        c.answer_store._db.close()  # simulate a crash: no final flush
    else:
        c.close()
        if damage == "corrupt":
            idx.write_bytes(b"not a faiss index" + idx.read_bytes()[:50])
        else:
            idx.unlink()
    with caplog.at_level(logging.INFO, logger="ragcache.semantic"):
        c2 = SemanticCache(tmp_path, embedder=HashingEmbedder(), threshold=0.95)
    if damage != "stale":
        assert any(damage in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    assert len(c2) == len(qs)
    assert all(c2.lookup(q, partition=PK) is not None for q in qs)
    c2.close()


def _fill_more(c):
    qs = [f"Where is the log file of service beta{i} kept?" for i in range(5)]
    for q in qs:
        c.store(q, "more", partition=PK)
    return qs


WRITER = textwrap.dedent(
    """
    import sys
    from ragcache.semantic import SemanticCache, partition_key
    from ragcache.testing import HashingEmbedder
    pk = partition_key(namespace="p", model="m")
    c = SemanticCache(sys.argv[1], embedder=HashingEmbedder(), autosave_every=7)
    i = 0
    while True:
        c.store(f"crash test question {i} about widget w{i}?", f"a{i}", partition=pk)
        print(i, flush=True)
        i += 1
    """
)


def test_killed_writer_loses_nothing_committed(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, env=env, text=True)
    done = []
    try:
        for line in proc.stdout:
            done.append(int(line))
            if len(done) >= 40:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # mid-write: the loop is storing the next entry
        proc.wait()
    assert len(done) >= 40, "writer failed to start"
    pk = partition_key(namespace="p", model="m")
    c = SemanticCache(tmp_path, embedder=HashingEmbedder(), threshold=0.99)
    assert len(c) >= len(done)
    for i in done:
        hit = c.lookup(f"crash test question {i} about widget w{i}?", partition=pk)
        assert hit is not None and hit.answer == f"a{i}"
    c.close()


def test_store_many_repeat_in_batch_keeps_last_and_index_in_sync(tmp_path):
    with SemanticCache(tmp_path, embedder=HashingEmbedder(), threshold=0.99) as c:
        ids = c.store_many([("Where is my order?", "a"), (" Where is  my order?", "b"), ("Why is the sky blue?", "c")],
                           partition=PK)  # the same text up to whitespace: the last one is kept
        assert len(ids) == 3 and len(c) == 2
        assert c.lookup("Where is my order?", partition=PK).answer == "b"
        assert sorted(c.answer_store._parts[PK.digest].index.ids().tolist()) == sorted([ids[1], ids[2]])



def test_first_open_reads_the_meta_whole_while_another_process_writes_it(tmp_path, monkeypatch):
    """The first open's read of the meta (schema, embedder, width) and its write are one transaction.

    Opener 1 reads the schema key (none yet) and pauses; opener 2 then opens the same new folder and
    tries to write the meta. Before, opener 2 wrote between opener 1's reads and opener 1 refused the
    folder as "built with {'schema': None, ...}"; now opener 2 waits for opener 1's transaction."""
    import threading

    from ragcache.semantic.stores.store import SQLiteStore

    real = SQLiteStore.get_meta
    first_read, second_wrote = threading.Event(), threading.Event()
    real_set = SQLiteStore.set_meta

    def get_meta(self, key):
        out = real(self, key)
        if threading.current_thread().name == "opener-1" and key == "schema":
            first_read.set()
            second_wrote.wait(1.0)  # opener 2 cannot write while this read is in its transaction
        return out

    def set_meta(self, items):
        real_set(self, items)
        if threading.current_thread().name == "opener-2":
            second_wrote.set()

    monkeypatch.setattr(SQLiteStore, "get_meta", get_meta)
    monkeypatch.setattr(SQLiteStore, "set_meta", set_meta)
    errors: list[BaseException] = []

    def open_one(wait_first: bool):
        try:
            if wait_first:
                first_read.wait(5.0)
            SemanticCache(tmp_path, embedder=HashingEmbedder(), threshold=0.95).close()
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=open_one, args=(i == 1,), name=f"opener-{i + 1}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with SemanticCache(tmp_path, embedder=HashingEmbedder(), threshold=0.95) as c:
        c.store("What is the refund window?", "30 days", partition=PK)
        assert c.lookup("What is the refund window?", partition=PK).answer == "30 days"


def test_many_openers_of_a_new_folder_all_succeed(tmp_path):
    """Switching a new file to WAL and creating the schema happen once at a time: none of several
    processes opening a new folder together fails with "database is locked" (which was also reported as
    a corrupt file). Threads stand for processes: each has its own SQLite connection and file lock."""
    import threading

    from ragcache.testing import run_in_threads

    for trial in range(8):
        folder = tmp_path / f"c{trial}"

        def open_one(folder=folder):
            with SemanticCache(folder, embedder=HashingEmbedder(), threshold=0.95) as c:
                c.store(f"question {threading.get_ident()}", "a", partition=PK)

        _, errors = run_in_threads(open_one, 4)
        assert errors == [], errors
        with SemanticCache(folder, embedder=HashingEmbedder(), threshold=0.95) as c:
            assert len(c) == 4
