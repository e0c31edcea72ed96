"""The chunk KV store contract suite, shipped for any store implementation (as ``langchain-tests`` ships its
standard suites).

Subclass :class:`ChunkStoreContract` in a test module and give it a ``make_store`` fixture that returns a
factory ``(max_bytes: int | None = None) -> ChunkStore``, opening an *empty* store each call (one store per
test; all calls within a test may share one backing location). pytest collects every ``test_*`` method::

    from ragcache.testing.chunk_stores import ChunkStoreContract

    class TestMyStore(ChunkStoreContract):
        @pytest.fixture()
        def make_store(self, tmp_path):
            return lambda max_bytes=None: MyStore(tmp_path, max_bytes=max_bytes)

Every test runs once per stored format (``fp16``, ``int8``, ``int4``; KIVI-style groups for the quantized
ones, Liu et al., ICML 2024). :func:`make_kv` and :func:`same_kv` build and compare chunks for a store's own
extra tests. Needs ``pytest`` (import this module from tests only).
"""

from __future__ import annotations

from typing import Callable

import pytest
import torch

from ragcache.engine.quant import KVFormat, quantize_kv
from ragcache.engine.chunk.admission import Sightings
from ragcache.engine.chunk.stores import ChunkKV, ChunkStore
from ragcache.hashing import hash_chunk

FP = "f" * 64
"""The model fingerprint :func:`make_kv` stamps on chunks (64 hex digits)."""
FORMATS = ("fp16", "int8", "int4")

StoreFactory = Callable[..., ChunkStore]


def make_kv(seed: int, n: int = 8, fingerprint: str = FP, dtype: torch.dtype = torch.float16,
            fmt: str = "fp16", head_dim: int = 4, group_size: int = 4) -> ChunkKV:
    """A random chunk of ``n`` tokens (2 layers, 2 KV heads, ``head_dim``) stored in ``fmt``.

    Dense in ``dtype`` for ``fp16``, quantized in groups of ``group_size`` otherwise; start position 1.
    """
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


class ChunkStoreContract:
    """What every :class:`~ragcache.engine.chunk.stores.ChunkStore` must do: put / get / contains / remove and
    their batched forms, a miss on another model's fingerprint, LRU eviction under a byte budget, no entry
    larger than the budget, one entry per key."""

    @pytest.fixture()
    def make_store(self) -> StoreFactory:
        """Override: return ``factory(max_bytes=None) -> ChunkStore`` opening an empty store."""
        raise NotImplementedError(f"{type(self).__name__} must define a make_store fixture "
                                  "(see ragcache.testing.chunk_stores)")

    @pytest.fixture(params=FORMATS)
    def fmt(self, request: pytest.FixtureRequest) -> str:
        return request.param

    def test_is_a_chunk_store(self, make_store: StoreFactory) -> None:
        assert isinstance(make_store(), ChunkStore)

    @pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16])
    def test_put_get_contains_remove(self, make_store: StoreFactory, dtype: torch.dtype, fmt: str) -> None:
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

    def test_batched(self, make_store: StoreFactory, fmt: str) -> None:
        store = make_store()
        kvs = [make_kv(i, fmt=fmt) for i in range(3)]
        assert store.put_many(kvs) == 3
        got = store.get_many([kvs[0].key, make_kv(9).key, kvs[2].key])
        assert got[0] is not None and got[2] is not None and got[1] is None
        assert got[0].token_ids == kvs[0].token_ids and got[2].token_ids == kvs[2].token_ids

    def test_fingerprint_mismatch_is_a_miss(self, make_store: StoreFactory, fmt: str) -> None:
        store = make_store()
        kv = make_kv(1, fmt=fmt)
        store.put(kv)
        assert store.get(kv.key, fingerprint="0" * 64) is None
        assert store.get(kv.key, fingerprint=FP) is not None

    def test_lru_eviction_under_byte_budget(self, make_store: StoreFactory, fmt: str) -> None:
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

    def test_entry_larger_than_budget_is_not_stored(self, make_store: StoreFactory, fmt: str) -> None:
        store = make_store(max_bytes=16)
        kv = make_kv(0, fmt=fmt)
        assert store.put(kv) is False
        assert not store.contains(kv.key) and len(store) == 0

    def test_sightings_are_counted(self, make_store: StoreFactory) -> None:
        """A store that counts sightings (``sight_many``, :mod:`ragcache.engine.chunk.admission`) counts each key
        apart, a key given twice twice, and the counts do not depend on what is stored."""
        store = make_store()
        if not isinstance(store, Sightings):
            pytest.skip(f"{type(store).__name__} keeps no sighting counts (the chunk cache counts in process)")
        a, b = make_kv(0), make_kv(1)
        assert store.sight_many([]) == []
        assert store.sight_many([a.key]) == [1]
        assert store.sight_many([a.key, b.key, b.key]) == [2, 1, 2]
        store.put(a)
        assert store.sight_many([a.key]) == [3] and len(store) == 1

    def test_overwrite_keeps_one_entry(self, make_store: StoreFactory, fmt: str) -> None:
        store = make_store()
        kv = make_kv(0, fmt=fmt)
        store.put(kv)
        size = store.nbytes
        store.put(kv)
        assert len(store) == 1 and store.nbytes == size
