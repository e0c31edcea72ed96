"""Chunk KV stores: the shipped contract suite (:mod:`ragcache.testing.chunk_stores`) against the memory and the
disk store, then each store's own checks."""

from __future__ import annotations

import logging
from typing import Callable

import pytest
import torch

from ragcache.engine.chunk.chunk_kv import _digest
from ragcache.engine.chunk.stores import ChunkKV, DiskChunkStore, MemoryChunkStore
from ragcache.hashing import hash_chunk
from ragcache.testing.chunk_stores import FORMATS, FP, ChunkStoreContract, make_kv, same_kv

class TestMemoryStore(ChunkStoreContract):
    @pytest.fixture()
    def make_store(self) -> Callable[..., MemoryChunkStore]:
        return lambda max_bytes=None: MemoryChunkStore(max_bytes=max_bytes)


class TestDiskStore(ChunkStoreContract):
    @pytest.fixture()
    def make_store(self, tmp_path) -> Callable[..., DiskChunkStore]:
        return lambda max_bytes=None: DiskChunkStore(tmp_path / "chunks", max_bytes=max_bytes)


@pytest.fixture(params=FORMATS)
def fmt(request) -> str:
    return request.param


def test_invalid_budget():
    with pytest.raises(ValueError, match="max_bytes"):
        MemoryChunkStore(max_bytes=0)


def test_chunk_kv_shape_check():
    with pytest.raises(ValueError, match="token_ids"):
        ChunkKV(hash_chunk(FP, [], [1, 2]), FP, [1, 2], torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2), 0)


@pytest.mark.parametrize("damage", ["garbage", "truncate", "metadata"])
def test_disk_corrupt_file_is_a_logged_miss_and_rewritten(tmp_path, caplog, damage, fmt):
    store = DiskChunkStore(tmp_path)
    kv = make_kv(3, fmt=fmt)
    store.put(kv)
    path = tmp_path / f"{kv.key}.safetensors"
    if damage == "garbage":
        path.write_bytes(b"\x00not a safetensors file")
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:-20])
    else:  # a valid safetensors file whose metadata names another chunk
        other = make_kv(4, fmt=fmt)
        store.put(other)
        path.write_bytes((tmp_path / f"{other.key}.safetensors").read_bytes())
    with caplog.at_level(logging.WARNING, logger="ragcache.engine.chunk.stores"):
        assert store.get(kv.key) is None
    assert "failed its check" in caplog.text and store.stats.corrupt == 1
    assert not path.exists()
    assert store.put(kv) and same_kv(store.get(kv.key), kv)


def test_disk_persists_across_reopen_and_writes_atomically(tmp_path, fmt):
    store = DiskChunkStore(tmp_path, max_bytes=1 << 20)
    kvs = [make_kv(i, fmt=fmt) for i in range(3)]
    store.put_many(kvs)
    assert not list(tmp_path.glob(".tmp-*"))
    reopened = DiskChunkStore(tmp_path, max_bytes=1 << 20)
    assert len(reopened) == 3 and reopened.nbytes == store.nbytes
    assert same_kv(reopened.get(kvs[1].key), kvs[1])


def test_disk_rejects_non_hex_keys(tmp_path):
    store = DiskChunkStore(tmp_path)
    with pytest.raises(ValueError, match="hex"):
        store.get("../etc/passwd")


def test_quantized_chunks_are_smaller_in_memory_and_on_disk(tmp_path):
    """The byte budget counts stored bytes: an int4 chunk costs less than an fp16 one, scales included."""
    sizes = {}
    for fmt in FORMATS:
        mem, disk = MemoryChunkStore(), DiskChunkStore(tmp_path / fmt)
        kv = make_kv(0, n=64, fmt=fmt, head_dim=64, group_size=32)
        mem.put(kv)
        disk.put(kv)
        assert mem.nbytes == kv.nbytes == kv.kv_format.nbytes(*kv.shape)
        assert disk.nbytes == (tmp_path / fmt / f"{kv.key}.safetensors").stat().st_size > kv.nbytes
        sizes[fmt] = mem.nbytes
    assert sizes["fp16"] > sizes["int8"] > sizes["int4"]


@pytest.mark.parametrize("part", ["keys.codes", "values.scale", "keys.zero"])
def test_disk_quantized_tensor_of_wrong_shape_is_a_logged_miss(tmp_path, caplog, part):
    """A well-formed safetensors file whose quantized tensors do not fit the metadata is never read."""
    from safetensors.torch import save_file

    store = DiskChunkStore(tmp_path)
    kv = make_kv(5, fmt="int4")
    tensors, meta = kv.to_payload()
    tensors[part] = tensors[part][..., :-1].contiguous()
    meta["digest"] = _digest(tensors)  # a consistent file, written by a buggy or foreign writer
    save_file(tensors, str(tmp_path / f"{kv.key}.safetensors"), metadata=meta)
    with caplog.at_level(logging.WARNING, logger="ragcache.engine.chunk.stores"):
        assert store.get(kv.key) is None
    assert "failed its check" in caplog.text and part in caplog.text and store.stats.corrupt == 1


@pytest.mark.parametrize("fmt_name", FORMATS)
def test_disk_flipped_data_byte_is_a_logged_miss(tmp_path, caplog, fmt_name):
    """A byte flipped inside the tensor data (the header still parses) is caught by the digest."""
    store = DiskChunkStore(tmp_path)
    kv = make_kv(6, n=16, fmt=fmt_name)
    store.put(kv)
    path = tmp_path / f"{kv.key}.safetensors"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="ragcache.engine.chunk.stores"):
        assert store.get(kv.key) is None
    assert "digest" in caplog.text and store.stats.corrupt == 1 and not path.exists()


@pytest.mark.parametrize("fmt_name", FORMATS)
def test_bytes_round_trip_for_value_stores(fmt_name):
    """What a remote store keeps: one byte string per chunk; damaged bytes raise ValueError (a miss)."""
    from ragcache.engine.chunk.chunk_kv import chunk_from_bytes, chunk_to_bytes

    kv = make_kv(7, n=12, fmt=fmt_name)
    data = chunk_to_bytes(kv)
    assert same_kv(chunk_from_bytes(data, kv.key), kv)
    flipped = bytearray(data)
    flipped[-2] ^= 0x01
    for bad, why in ((data[:-7], "readable"), (bytes(flipped), "digest"), (b"", "readable")):
        with pytest.raises(ValueError, match=why):
            chunk_from_bytes(bad, kv.key)
    with pytest.raises(ValueError, match="key"):
        chunk_from_bytes(data, make_kv(8, fmt=fmt_name).key)


def test_disk_sightings_are_shared_by_stores_on_one_folder_and_capped(tmp_path):
    from ragcache.engine.chunk.stores.disk import MAX_COUNT

    a, b = DiskChunkStore(tmp_path / "kv"), DiskChunkStore(tmp_path / "kv")  # two processes on one folder
    k = make_kv(0).key
    assert a.sight_many([k]) == [1] and b.sight_many([k]) == [2] and a.sight_many([k]) == [3]
    assert len(a) == 0  # sightings are not entries
    assert b.sight_many([k] * (MAX_COUNT + 5))[-1] == MAX_COUNT
    with pytest.raises(ValueError, match="sha256"):
        a.sight_many(["../../etc/passwd"])


def test_disk_sightings_forget_the_least_recently_seen(tmp_path):
    import os

    store = DiskChunkStore(tmp_path / "kv")
    keys = [make_kv(i).key for i in range(5)]
    for i, k in enumerate(keys):
        store.sight_many([k])
        os.utime(store.root / "seen" / k, ns=(i * 10**9, i * 10**9))
    store._prune_sightings(store.root / "seen", keep=3)
    assert sorted(p.name for p in (store.root / "seen").iterdir()) == sorted(keys[2:])
    assert store.sight_many([keys[0]]) == [1]  # forgotten: counted from one again


def test_memory_sightings_are_bounded():
    from ragcache.engine.chunk.admission import SightingCounts

    counts = SightingCounts(max_entries=2)
    assert counts.sight_many(["a", "b", "a"]) == [1, 1, 2]
    counts.sight_many(["c"])  # "b" was seen least recently: forgotten
    assert len(counts) == 2 and counts.sight_many(["b", "a"]) == [1, 3]
