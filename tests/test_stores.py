"""Contract suite for chunk KV stores: the same tests run against the memory and the disk store."""

from __future__ import annotations

import logging

import pytest
import torch

from ragcache.engine.quant import KVFormat, quantize_kv
from ragcache.engine.chunk.chunk_kv import _digest
from ragcache.engine.chunk.stores import ChunkKV, ChunkStore, DiskChunkStore, MemoryChunkStore
from ragcache.hashing import hash_chunk

FP = "f" * 64
FORMATS = ["fp16", "int8", "int4"]


def make_kv(seed: int, n: int = 8, fingerprint: str = FP, dtype: torch.dtype = torch.float16,
            fmt: str = "fp16", head_dim: int = 4, group_size: int = 4) -> ChunkKV:
    """A random chunk stored in ``fmt`` (dense in ``dtype`` for fp16, KIVI groups otherwise)."""
    g = torch.Generator().manual_seed(seed)
    ids = [int(x) for x in torch.randint(0, 1000, (n,), generator=g)]
    k = torch.randn(2, 2, n, head_dim, generator=g).to(dtype)
    v = torch.randn(2, 2, n, head_dim, generator=g).to(dtype)
    f = KVFormat.of(fmt, group_size=group_size, dtype=dtype)
    if f.quantized:
        k, v = quantize_kv(k, v, f)
    return ChunkKV(hash_chunk(fingerprint, [1], ids, f.tag), fingerprint, ids, k, v, start=1)


def same_kv(a: ChunkKV, b: ChunkKV) -> bool:
    """Same format, ids, start and bit-identical stored K/V (codes, scales, zero points)."""
    if a.kv_format != b.kv_format or a.token_ids != b.token_ids or a.start != b.start:
        return False
    ta, tb = a.to_payload()[0], b.to_payload()[0]
    return ta.keys() == tb.keys() and all(torch.equal(ta[n], tb[n]) for n in ta)


@pytest.fixture(params=FORMATS)
def fmt(request) -> str:
    return request.param


@pytest.fixture(params=["memory", "disk"])
def make_store(request, tmp_path):
    def factory(max_bytes: int | None = None) -> ChunkStore:
        if request.param == "memory":
            return MemoryChunkStore(max_bytes=max_bytes)
        return DiskChunkStore(tmp_path / "chunks", max_bytes=max_bytes)

    factory.kind = request.param
    return factory


def test_is_a_chunk_store(make_store):
    assert isinstance(make_store(), ChunkStore)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16])
def test_put_get_contains_remove(make_store, dtype, fmt):
    store = make_store()
    kv = make_kv(0, dtype=dtype, fmt=fmt)
    assert not store.contains(kv.key) and store.get(kv.key) is None
    assert store.put(kv)
    assert store.contains(kv.key) and len(store) == 1 and store.nbytes > 0
    got = store.get(kv.key, fingerprint=FP)
    assert got is not None
    assert got.token_ids == kv.token_ids and got.start == kv.start and got.fingerprint == FP
    assert got.kv_format == kv.kv_format and same_kv(got, kv) and got.nbytes == kv.nbytes
    assert got.keys.dtype == (dtype if fmt == "fp16" else torch.float32)
    assert torch.equal(got.keys, kv.keys) and torch.equal(got.values, kv.values)
    assert store.remove(kv.key) and not store.remove(kv.key)
    assert not store.contains(kv.key) and store.get(kv.key) is None and len(store) == 0
    assert store.stats.hits == 1 and store.stats.misses == 2


def test_batched(make_store, fmt):
    store = make_store()
    kvs = [make_kv(i, fmt=fmt) for i in range(3)]
    assert store.put_many(kvs) == 3
    got = store.get_many([kvs[0].key, make_kv(9).key, kvs[2].key])
    assert got[0].token_ids == kvs[0].token_ids and got[1] is None and got[2].token_ids == kvs[2].token_ids


def test_fingerprint_mismatch_is_a_miss(make_store, fmt):
    store = make_store()
    kv = make_kv(1, fmt=fmt)
    store.put(kv)
    assert store.get(kv.key, fingerprint="0" * 64) is None
    assert store.get(kv.key, fingerprint=FP) is not None


def test_lru_eviction_under_byte_budget(make_store, fmt):
    probe = make_store()
    probe.put(make_kv(0, fmt=fmt))
    one = probe.nbytes
    probe.remove(make_kv(0, fmt=fmt).key)
    store = make_store(max_bytes=int(one * 2.5))
    a, b, c = make_kv(0, fmt=fmt), make_kv(1, fmt=fmt), make_kv(2, fmt=fmt)
    store.put(a)
    store.put(b)
    assert store.get(a.key) is not None  # a is now the most recently used
    store.put(c)  # over budget: b (least recently used) goes
    assert store.contains(a.key) and store.contains(c.key) and not store.contains(b.key)
    assert store.nbytes <= int(one * 2.5) and store.stats.evictions == 1


def test_entry_larger_than_budget_is_not_stored(make_store, fmt):
    store = make_store(max_bytes=16)
    kv = make_kv(0, fmt=fmt)
    assert store.put(kv) is False
    assert not store.contains(kv.key) and len(store) == 0


def test_overwrite_keeps_one_entry(make_store, fmt):
    store = make_store()
    kv = make_kv(0, fmt=fmt)
    store.put(kv)
    size = store.nbytes
    store.put(kv)
    assert len(store) == 1 and store.nbytes == size


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
