"""The KV salt has one name down to the block hash (docs/design/keys.md, glossary; issue 49 item 5): the prefix
cache's and the chunk cache's per-document methods take it as ``salt=``; their older keyword ``namespace=`` still
gives the same keys for one release, with a ``DeprecationWarning``; both at once is a ``TypeError``."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch

from ragcache.engine.chunk import ChunkCache, MemoryChunkStore
from ragcache.engine.prefix import PrefixCache

MODEL = SimpleNamespace(config=SimpleNamespace(bos_token_id=1))
FP = "f" * 64


def _kv(n: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    torch.manual_seed(n)
    return [torch.randn(1, 2, n, 4)], [torch.randn(1, 2, n, 4)]


@pytest.mark.parametrize("salt", [None, "", "a", "tenant:" + "0" * 64])
def test_the_prefix_cache_takes_the_salt_and_its_old_name_keys_the_same(salt):
    pc = PrefixCache("fp", block_size=4)
    ids = list(range(13))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name warns about nothing
        assert pc.insert(ids, *_kv(13), salt=salt) == 3
        new = pc.block_hashes(ids, salt=salt)
        assert pc.block_hashes(ids, salt) == new  # positional, as before
        m = pc.match(ids, salt=salt)
    assert m.num_tokens == 12
    pc.release(m)
    for call in (lambda: pc.block_hashes(ids, namespace=salt), lambda: pc.match(ids, namespace=salt).hashes):
        if salt is None:  # the old keyword at its default: nothing to warn about
            assert call() == new
        else:
            with pytest.warns(DeprecationWarning, match=r"PrefixCache\.\w+\(namespace=...\) is deprecated.*salt="):
                assert call() == new
    if salt is not None:
        with pytest.warns(DeprecationWarning, match=r"PrefixCache\.insert\(namespace=...\)"):
            assert pc.insert(ids, *_kv(13), namespace=salt) == 0  # the same blocks: already stored
    assert pc.match(ids, salt="other").num_tokens == 0


@pytest.mark.parametrize("method", ["block_hashes", "match", "insert"])
def test_the_prefix_cache_refuses_both_names(method):
    pc = PrefixCache("fp", block_size=4)
    args = (list(range(8)), *_kv(8)) if method == "insert" else (list(range(8)),)
    with pytest.raises(TypeError, match=f"PrefixCache.{method} got both salt= and namespace="):
        getattr(pc, method)(*args, salt="a", namespace="a")


@pytest.mark.parametrize("salt", ["a", "tenant:" + "1" * 64])
def test_the_chunk_caches_per_document_methods_take_the_salt(salt):
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    doc = [5, 6, 7]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        key = cc.key(MODEL, FP, doc, salt=salt)
        assert key == cc.bind(MODEL, FP, salt).key(doc) != cc.key(MODEL, FP, doc)
        assert cc.lookup(MODEL, FP, doc, salt=salt) is None
        kv = cc.encode(MODEL, FP, doc, torch.zeros(2, 2, 3, 4), torch.zeros(2, 2, 3, 4), salt=salt)
    assert kv.key == key
    assert cc.store.put(kv)
    with pytest.warns(DeprecationWarning, match=r"ChunkCache\.key\(namespace=...\) is deprecated"):
        assert cc.key(MODEL, FP, doc, namespace=salt) == key
    with pytest.warns(DeprecationWarning, match=r"ChunkCache\.lookup\(namespace=...\)") as warned:
        assert cc.lookup(MODEL, FP, doc, namespace=salt).key == key
    assert warned[0].filename == __file__  # the warning points at the caller's line
    for method in ("key", "lookup", "lookup_or_compute", "compute", "add"):
        with pytest.raises(TypeError, match=f"ChunkCache.{method} got both salt= and namespace="):
            getattr(cc, method)(MODEL, FP, doc, salt=salt, namespace=salt)


def test_precompute_on_a_bare_model_takes_the_salt(tiny):
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    docs = [tiny.tokenizer.encode(d, add_special_tokens=False) for d in ("Refunds take 5 days.", "Keys rotate.")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cc.precompute(tiny.model, docs, fingerprint=tiny.fingerprint, salt="s", progress=False) == 2
    assert all(cc.lookup(tiny.model, tiny.fingerprint, d, salt="s") is not None for d in docs)
    assert all(cc.lookup(tiny.model, tiny.fingerprint, d) is None for d in docs)
    with pytest.warns(DeprecationWarning, match=r"ChunkCache\.precompute\(namespace=...\).*salt="):
        assert cc.precompute(tiny.model, docs, fingerprint=tiny.fingerprint, namespace="s", progress=False) == 0
    with pytest.raises(TypeError, match="both salt= and namespace="):
        cc.precompute(tiny.model, docs, fingerprint=tiny.fingerprint, salt="s", namespace="s", progress=False)


def test_precompute_on_an_engine_takes_the_tenant_not_the_salt(tiny):
    from ragcache.engine.engine import LocalEngine

    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    eng = LocalEngine(tiny, calibration=False, chunk_cache=cc)
    with pytest.raises(TypeError, match=r"precompute\(engine, ..., salt=...\).*tenant="):
        cc.precompute(eng, [[5, 6]], salt="s", progress=False)


@pytest.mark.parametrize("bad,err", [(3, TypeError), (b"x", TypeError), (3.5, TypeError), (["a"], TypeError)])
def test_a_salt_of_another_type_is_refused(bad, err):
    """``salt=3`` and ``salt="3"`` would be two keys for one intent."""
    with pytest.raises(err, match="salt must be a"):
        PrefixCache("fp", block_size=4).block_hashes([1, 2, 3, 4], salt=bad)
