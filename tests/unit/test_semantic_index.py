"""PartitionIndex (FAISS IndexIDMap2 flat -> HNSW), the typo speller and the hashing test embedder."""

import numpy as np
import pytest

from ragcache.semantic.speller import PartitionSpeller
from ragcache.semantic.stores.index import PartitionIndex
from ragcache.testing import HashingEmbedder


def _unit(n, d, seed=0):
    v = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_flat_search_remove_and_roundtrip():
    idx = PartitionIndex(16, hnsw_threshold=1000)
    v = _unit(50, 16)
    idx.add(np.arange(100, 150), v)
    sims, ids = idx.search(v[7], 3)
    assert ids[0] == 107 and sims[0] == pytest.approx(1.0, abs=1e-5) and np.all(np.diff(sims) <= 0)
    idx.remove([107, 999])
    assert len(idx) == 49 and 107 not in idx.search(v[7], 5)[1]
    back = PartitionIndex.from_bytes(idx.to_bytes(), 16)
    assert back.kind == "flat" and sorted(back.ids()) == sorted(idx.ids())
    with pytest.raises(ValueError, match="corrupt"):
        PartitionIndex.from_bytes(b"garbage", 16)
    with pytest.raises(ValueError, match="expected"):
        idx.add(np.arange(2), _unit(2, 8))


def test_switches_to_hnsw_and_tombstones_removed_ids():
    idx = PartitionIndex(16, hnsw_threshold=200)
    v = _unit(300, 16, seed=1)
    idx.add(np.arange(150), v[:150])
    assert idx.kind == "flat"
    idx.add(np.arange(150, 300), v[150:])
    assert idx.kind == "hnsw" and len(idx) == 300
    assert all(idx.search(v[i], 1)[1][0] == i for i in range(0, 300, 17))
    idx.remove([0, 17, 34])
    assert len(idx) == 297 and 17 not in idx.search(v[17], 4)[1]
    idx.remove(range(40, 120))  # past a quarter of the graph: rebuilt without tombstones
    assert len(idx) == 217 and idx.kind == "hnsw" and len(idx._tombstones) == 0
    back = PartitionIndex.from_bytes(idx.to_bytes(), 16, hnsw_threshold=200)
    assert back.kind == "hnsw" and back.search(v[200], 1)[1][0] == 200


def test_speller_corrects_only_unknown_words_one_edit_away():
    sp = PartitionSpeller()
    sp.add("How do I change the language of the dashboard?")
    known = frozenset({"how", "do", "change", "the", "language", "of", "rest", "chance"})
    assert sp.correct("how do i chnage the langauge of the dashbaord", known) == "how do i change the language of the dashboard"
    assert sp.correct("how do I chance it", known) == "how do I chance it"  # a known word is left alone
    sp.remove("How do I change the language of the dashboard?")
    assert sp.correct("dashbaord", None) == "dashbaord"


def test_hashing_embedder_is_deterministic_and_unit():
    e = HashingEmbedder(32)
    a, b = e.encode(["hello world", "hello world"]), HashingEmbedder(32).encode(["hello world"])
    assert np.allclose(a[0], a[1]) and np.allclose(a[0], b[0])
    assert np.allclose(np.linalg.norm(e.encode(["x", "longer text"]), axis=1), 1.0)
