"""Issue 24, kinds 9-11: exact repeats always hit in PostgreSQL, invalidation reaches every live
process on one answers folder, and a FAISS snapshot is trusted only as far as it matches SQLite."""

from __future__ import annotations

import logging
import multiprocessing as mp
import shutil

import numpy as np
import pytest

from pg_doubles import pg_caches, schema_for
from ragcache.semantic import SemanticCache, partition_key
from ragcache.testing import HashingEmbedder

EMB = HashingEmbedder(64)
PK = partition_key(namespace="iso", model="m", documents=[{"id": "manual", "text": "manual v1"}])


# ------------------------------------------------------------------ kind 9: PostgreSQL, small partitions
@pytest.fixture()
def pg_cache(pg_server, request):
    pytest.importorskip("psycopg")
    with pg_caches(pg_server.url, schema_for("k9_", request.node.name, 40), embedder=EMB) as factory:
        yield factory


@pytest.mark.parametrize("crowd, settings", [(0, "set"), (3000, "set"), (3000, "lost")])
def test_pg_exact_repeats_hit_in_one_entry_partitions_before_analyze(pg_cache, crowd, settings, monkeypatch):
    """100 two-entry partitions (the same question in each) beside a crowded one, no ANALYZE: every exact repeat hits, even when the
    search settings never reach the server and the planner walks the HNSW index without iterative scans
    (the filtered scan then comes back empty for most small partitions)."""
    cache = pg_cache(candidates=4)
    if settings == "lost":  # and a planner that walks the HNSW index whatever the partition's size
        monkeypatch.setattr(type(cache.answer_store), "_settings", lambda self, conn: conn.execute(
            "SELECT set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true), "
            "set_config('enable_bitmapscan', 'off', true)"))
    rng = np.random.default_rng(1)
    if crowd:
        base = EMB.encode(["What is the refund window for order?"])[0]
        noise = base + 0.05 * rng.standard_normal((crowd, 64)).astype(np.float32)
        cache.store_many([(f"crowd question {i}", f"a{i}") for i in range(crowd)],
                         partition=partition_key(namespace="crowd", model="m"), vectors=noise)
    parts = [partition_key(namespace=f"tiny-{j}", model="m") for j in range(100)]
    for j, pk in enumerate(parts):  # 100 tenants ask the same question, plus one of their own
        cache.store_many([("What is the refund window?", f"answer {j}"),
                          (f"What is the refund window for order {j}?", f"order answer {j}")], partition=pk)
    for q, prefix in (("What is the refund window?", "answer"), ("What is the refund window for order {j}?",
                                                                   "order answer")):
        served = [cache.lookup(q.format(j=j), partition=pk) for j, pk in enumerate(parts)]
        assert [h.answer if h else None for h in served] == [f"{prefix} {j}" for j in range(100)]
    # near (not exact) repeats in a two-entry partition come back too (the exact scan when HNSW is short)
    two = partition_key(namespace="two", model="m")
    cache.store("How do I reset my password?", "reset", partition=two)
    cache.store("How do I delete my account?", "delete", partition=two)
    got = cache.candidates_for("how do I reset my password please", partition=two, threshold=0.0)
    assert sorted(c.question for c in got) == ["How do I delete my account?", "How do I reset my password?"]


def test_pg_search_settings_are_transaction_local(pg_cache):
    cache = pg_cache()
    cache.store("How do I reset my password?", "reset")
    assert cache.lookup("How do I reset my password?") is not None
    with cache.answer_store.pool.connection() as conn:  # a pooled connection that just ran searches
        assert conn.execute("SHOW hnsw.iterative_scan").fetchone()[0] == "off"
        assert conn.execute("SHOW plan_cache_mode").fetchone()[0] == "auto"


# ------------------------------------------------------------------ kind 10: other live processes
def _worker(path: str, inbox, outbox) -> None:
    """A second process with the same answers folder open; runs commands until told to stop."""
    cache = SemanticCache(path, embedder=EMB, threshold=1.0)
    while True:
        cmd, *args = inbox.get()
        if cmd == "stop":
            cache.close()
            outbox.put("stopped")
            return
        if cmd == "store":
            q, a, ns, doc = args
            pk = partition_key(namespace=ns, model="m", documents=[{"id": doc, "text": f"text of {doc}"}])
            outbox.put(cache.store(q, a, partition=pk))
        elif cmd == "lookup":
            q, ns, doc = args
            pk = partition_key(namespace=ns, model="m", documents=[{"id": doc, "text": f"text of {doc}"}])
            hit = cache.lookup(q, partition=pk)
            outbox.put(None if hit is None else hit.answer)
        elif cmd == "prune":
            with cache.answer_store._db.transaction():
                cache.answer_store._db.prune_changes(keep=0)
            outbox.put("pruned")


def _pk(ns: str, doc: str):
    return partition_key(namespace=ns, model="m", documents=[{"id": doc, "text": f"text of {doc}"}])


@pytest.mark.parametrize("how", ["document id", "content", "namespace", "replaced answer", "pruned log"])
def test_invalidation_reaches_a_live_process_and_survives_reopen(tmp_path, how):
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    path = str(tmp_path / "answers")
    a = SemanticCache(path, embedder=EMB, threshold=1.0)  # open before B writes anything
    b = ctx.Process(target=_worker, args=(path, inbox, outbox))
    b.start()

    def ask(*cmd):
        inbox.put(cmd)
        return outbox.get(timeout=60)

    try:
        for i in range(3):
            ask("store", f"How do I reset router {i}?", f"old {i}", "tenant-a", "router-manual")
        ask("store", "Where is the office?", "Leeds", "tenant-b", "office")
        assert a.lookup("How do I reset router 1?", partition=_pk("tenant-a", "router-manual")) .answer == "old 1"
        if how == "pruned log":
            ask("prune")
            ask("store", "How do I reset router 9?", "old 9", "tenant-a", "router-manual")
            assert a.lookup("How do I reset router 9?", partition=_pk("tenant-a", "router-manual")).answer == "old 9"
        if how == "replaced answer":
            a.store("How do I reset router 1?", "new 1", partition=_pk("tenant-a", "router-manual"))
            assert ask("lookup", "How do I reset router 1?", "tenant-a", "router-manual") == "new 1"
            return
        n = {"document id": lambda: a.invalidate("router-manual"),
             "content": lambda: a.invalidate("text of router-manual"),
             "namespace": lambda: a.clear("tenant-a")}.get(how, lambda: a.invalidate("router-manual"))()
        assert n == (4 if how == "pruned log" else 3)
        for i in range(3):  # B stops serving at its next lookup
            assert ask("lookup", f"How do I reset router {i}?", "tenant-a", "router-manual") is None
        assert ask("lookup", "Where is the office?", "tenant-b", "office") == "Leeds"
    finally:
        ask("stop")
        b.join(30)
        a.close()
    again = SemanticCache(path, embedder=EMB, threshold=1.0)
    assert again.lookup("How do I reset router 0?", partition=_pk("tenant-a", "router-manual")) is None
    assert again.lookup("Where is the office?", partition=_pk("tenant-b", "office")).answer == "Leeds"
    again.close()


# ------------------------------------------------------------------ kind 11: snapshots that do not belong
def _filled(path, questions, answer_prefix):
    c = SemanticCache(path, embedder=EMB, threshold=0.0, guards=False)
    for i, q in enumerate(questions):
        c.store(q, f"{answer_prefix} {i}", partition=PK)
    c.close()


QS_X = [f"How do I configure feature {w} on host alpha?" for w in ("red", "green", "blue", "cyan", "teal")]
QS_Y = [f"Where is the invoice {w} for customer beta?" for w in ("one", "two", "three", "four", "five")]


@pytest.mark.parametrize("damage", ["copied from another folder", "older database with reused ids",
                                    "one vector changed"])
def test_snapshot_not_matching_sqlite_is_rebuilt(tmp_path, caplog, damage):
    x, y = tmp_path / "x", tmp_path / "y"
    _filled(x, QS_X, "x")
    (snap,) = (x / "index").glob("*.faiss")
    if damage == "copied from another folder":
        _filled(y, QS_Y, "y")
        shutil.copy((y / "index" / snap.name), snap)
    elif damage == "older database with reused ids":
        _filled(y, QS_Y, "y")
        shutil.rmtree(x)
        shutil.copytree(y, x)
        (x / "semantic.sqlite3").unlink()
        for f in x.glob("semantic.sqlite3-*"):
            f.unlink()
        _filled(x, QS_X, "x")  # a new database: ids 1..5 again, the snapshot left from y
        shutil.copy(y / "index" / snap.name, snap)
    else:
        from ragcache.semantic.stores.index import PartitionIndex

        idx = PartitionIndex.from_bytes(snap.read_bytes(), EMB.dim)
        ids, vecs = idx.vectors()
        vecs[2] = EMB.encode(["something else entirely"])[0]
        bad = PartitionIndex(EMB.dim)
        bad.add(ids, vecs)
        snap.write_bytes(bad.to_bytes())
    with caplog.at_level(logging.WARNING, logger="ragcache.semantic"):
        c = SemanticCache(x, embedder=EMB, threshold=0.0, guards=False)
    assert any("does not match SQLite" in r.getMessage() for r in caplog.records)
    for i, q in enumerate(QS_X):  # every entry found, each with its own answer, at similarity 1
        hit = c.lookup(q, partition=PK)
        assert hit is not None and hit.answer == f"x {i}" and hit.similarity > 0.999, (q, hit)
    c.close()


def test_snapshot_behind_sqlite_is_synced_without_rebuild(tmp_path, caplog):
    c = SemanticCache(tmp_path, embedder=EMB, threshold=0.99, autosave_every=10**9)
    for i, q in enumerate(QS_X[:3]):
        c.store(q, f"x {i}", partition=PK)
    c.flush()
    for i, q in enumerate(QS_X[3:], 3):
        c.store(q, f"x {i}", partition=PK)
    c.invalidate("nothing")
    c.answer_store._db.close()  # crash: the snapshot holds 3 of 5
    with caplog.at_level(logging.INFO, logger="ragcache.semantic"):
        c2 = SemanticCache(tmp_path, embedder=EMB, threshold=0.99)
    assert not any("does not match" in r.getMessage() for r in caplog.records)
    assert all(c2.lookup(q, partition=PK).answer == f"x {i}" for i, q in enumerate(QS_X))
    c2.close()


# ------------------------------------------------------------------ per-entry state: migration of existing caches
def test_sqlite_cache_from_before_the_state_column_is_migrated(tmp_path):
    import sqlite3

    with SemanticCache(tmp_path, embedder=EMB, threshold=1.0) as c:
        ids = [c.store(q, f"x {i}", partition=PK) for i, q in enumerate(QS_X)]
    db = sqlite3.connect(tmp_path / "semantic.sqlite3")
    db.execute("ALTER TABLE entries DROP COLUMN state")  # the schema of the last release
    db.execute("DROP TABLE changes")
    db.commit()
    db.close()
    with SemanticCache(tmp_path, embedder=EMB, threshold=1.0) as c:
        assert all(c.lookup(q, partition=PK).answer == f"x {i}" for i, q in enumerate(QS_X))
        assert c.candidates_for(QS_X[0], partition=PK)[0].state is None
        assert c.update_state(ids[0], {"threshold": 0.9})
    with SemanticCache(tmp_path, embedder=EMB, threshold=1.0) as c:
        assert c.candidates_for(QS_X[0], partition=PK)[0].state == {"threshold": 0.9}


def test_pg_schema_from_before_the_state_column_is_migrated(pg_cache, pg_server):
    import psycopg

    c = pg_cache(threshold=1.0)
    i = c.store(QS_X[0], "x 0", partition=PK)
    schema = c.schema
    with psycopg.connect(pg_server.url, autocommit=True) as conn:  # back to schema version 1
        conn.execute(f"ALTER TABLE {schema}.entries DROP COLUMN state")
        conn.execute(f"DELETE FROM {schema}.schema_version WHERE version >= 2")
    c2 = pg_cache(threshold=1.0)
    assert c2.lookup(QS_X[0], partition=PK).answer == "x 0"
    assert c2.update_state(i, {"threshold": 0.9})
    assert pg_cache(threshold=1.0).candidates_for(QS_X[0], partition=PK)[0].state == {"threshold": 0.9}
    with psycopg.connect(pg_server.url) as conn:
        assert conn.execute(f"SELECT max(version) FROM {schema}.schema_version").fetchone()[0] == 6  # + the NFC rehash (5) and the lookups table (6)


# ------------------------------------------------------------------ vectors of another embedder
@pytest.mark.parametrize("new_dim", [64, 32])
def test_other_embedder_re_embeds_the_stored_questions_when_asked(tmp_path, caplog, new_dim):
    class Salted(HashingEmbedder):  # same width, other vectors: another identity
        def __init__(self, dim):
            super().__init__(dim)
            self.name = f"salted-{dim}"
            self.fingerprint = "salted" + self.fingerprint

        def encode(self, texts):
            return super().encode([f"salt {t}" for t in texts])

    long_q = "x" * 300 + ". How do I reset my password?"  # keyed 'split' by both embedders
    with SemanticCache(tmp_path, embedder=EMB, threshold=0.99) as c:
        for i, q in enumerate(QS_X):
            c.store(q, f"x {i}", partition=PK)
        c.store(long_q, "long", partition=PK)
    new = Salted(new_dim)
    with pytest.raises(ValueError, match="same embedder.*reembed=True"):
        SemanticCache(tmp_path, embedder=new)
    with caplog.at_level(logging.WARNING, logger="ragcache.semantic"):
        c = SemanticCache(tmp_path, embedder=new, threshold=0.99, reembed=True)
    assert any("re-embedded 5" in r.getMessage() and "dropped 1" in r.getMessage() for r in caplog.records)
    for i, q in enumerate(QS_X):
        hit = c.lookup(q, partition=PK)
        assert hit is not None and hit.answer == f"x {i}" and hit.similarity > 0.999
    assert c.lookup(long_q, partition=PK) is None and len(c) == 5
    c.close()
    with SemanticCache(tmp_path, embedder=new, threshold=0.99) as again:  # the folder now belongs to `new`
        assert again.lookup(QS_X[0], partition=PK).answer == "x 0"
