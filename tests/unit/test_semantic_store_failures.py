"""A store that fails (bad metadata or ttl, or SQLite refusing the write half-way through a batch)
leaves the semantic cache exactly as it was, in memory and on disk: nothing already cached is lost
(ragcache.semantic.cache.SemanticCache.store_many writes SQLite first, memory after the commit)."""

from __future__ import annotations

import math
import sqlite3

import pytest

from ragcache import SemanticCache
from ragcache.semantic.partition import partition_key
from ragcache.testing import HashingEmbedder

PK = partition_key(namespace="t", model="m", documents=[{"id": "doc", "text": "Canaries last 15 minutes."}])
OLD = {"What is a canary?": "old canary", "How long are backups kept?": "old backups"}


@pytest.fixture()
def cache(tmp_path):
    c = SemanticCache(tmp_path / "answers", embedder=HashingEmbedder())
    for q, a in OLD.items():
        c.store(q, a, partition=PK, metadata={"source": "first"})
    yield c
    c.close()


def served(c):
    return {q: (h.answer if (h := c.lookup(q, partition=PK, threshold=1.0)) else None) for q in OLD}


def reopened(c):
    c.close()
    again = SemanticCache(c.path, embedder=HashingEmbedder())
    try:
        return served(again), len(again)
    finally:
        again.close()


@pytest.mark.parametrize("metadata", [{"x": object()}, {"x": {1, 2}}, {"x": b"bytes"}, [("x", 1)], "meta", 5])
def test_bad_metadata_is_named_and_the_old_answer_stays(cache, metadata):
    with pytest.raises(TypeError, match="metadata must be"):
        cache.store("What is a canary?", "new canary", partition=PK, metadata=metadata)
    assert served(cache) == OLD and len(cache) == 2
    assert reopened(cache) == (OLD, 2)


@pytest.mark.parametrize("ttl", ["5", math.nan, -1, 0, True])
def test_bad_ttl_is_named_and_nothing_changes(cache, ttl):
    with pytest.raises(TypeError if isinstance(ttl, str | bool) else ValueError, match="ttl_s must be > 0 seconds"):
        cache.store("What is a canary?", "new canary", partition=PK, ttl_s=ttl)
    assert served(cache) == OLD and len(cache) == 2


def test_sqlite_failing_half_way_through_a_batch_changes_nothing(cache, monkeypatch):
    real_insert, calls = cache.answer_store._db.insert, []

    def insert(*args, **kw):
        calls.append(args[1])
        if len(calls) == 2:
            raise sqlite3.OperationalError("disk I/O error")
        return real_insert(*args, **kw)

    monkeypatch.setattr(cache.answer_store._db, "insert", insert)
    batch = [("What is a canary?", "new canary"), ("How long are backups kept?", "new backups"),
             ("Who reviews changes?", "new review")]
    with pytest.raises(sqlite3.OperationalError):
        cache.store_many(batch, partition=PK)
    assert served(cache) == OLD and len(cache) == 2
    assert cache.lookup("Who reviews changes?", partition=PK, threshold=1.0) is None
    monkeypatch.undo()
    assert reopened(cache) == (OLD, 2)


def test_replacing_and_batch_twins_still_work(cache):
    ids = cache.store_many([("What is a canary?", "v1"), ("What is  a canary? ", "v2"), ("Who reviews changes?", "r")],
                           partition=PK)
    assert len(ids) == 3 and len(cache) == 3
    assert served(cache)["What is a canary?"] == "v2"
    hit = cache.lookup("Who reviews changes?", partition=PK, threshold=0.5)
    assert hit is not None and hit.answer == "r"
    assert reopened(cache)[1] == 3


@pytest.mark.parametrize("kw, match", [
    (dict(max_entries=math.nan), "max_entries must be an integer"), (dict(max_entries=2.5), "max_entries must be an integer"),
    (dict(max_entries="10"), "max_entries must be an integer"), (dict(max_entries=0), "max_entries must be >= 1"),
    (dict(candidates=1.5), "candidates must be an integer"), (dict(candidates=None), "candidates must be an integer"),
    (dict(ttl_s="60"), "ttl_s must be > 0 seconds or None"), (dict(ttl_s=math.nan), "ttl_s must be > 0 seconds"),
])
def test_bad_cache_settings_are_named(kw, match):
    wrong_value = "max_entries" in kw and kw["max_entries"] == 0 or "ttl_s" in kw and isinstance(kw["ttl_s"], float)
    with pytest.raises(ValueError if wrong_value else TypeError, match=match):
        SemanticCache(None, embedder=HashingEmbedder(), **kw)


def test_the_entry_cap_holds():
    import numpy as np

    c = SemanticCache(None, embedder=HashingEmbedder(), max_entries=np.int64(2))
    for q in ("What is a canary?", "How long are backups kept?", "Who reviews changes?"):
        c.store(q, "a", partition=PK)
    assert len(c) == 2 and c.stats.evictions == 1
