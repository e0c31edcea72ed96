"""CacheBlend blending (Yao et al., EuroSys 2025, §4) on a tiny random Llama model in float32."""

from __future__ import annotations

import math
import random

import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from ragcache.engine import kv as kvb
from ragcache.engine.blend.prefill import blend_prefill, select_hkvd
from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.chunk.stores import DiskChunkStore, MemoryChunkStore
from ragcache.testing import tiny_llama

DOCS = [
    "The cat sat on the mat and looked at the garden for a long while.",
    "Paris is the capital of France; the Seine flows through it to the sea.",
    "Rivers carry water from mountains to the ocean, shaping valleys on the way.",
    "A violin has four strings tuned in fifths.",
]


def enc(lm, text):
    return lm.tokenizer(text, add_special_tokens=False)["input_ids"]


def build(lm, docs, system="System: answer from the passages.\n", question="\nQuestion: where is Paris?\nAnswer:"):
    """ids, prefix_len, doc spans, per-doc ids; a one-token separator between documents."""
    pre = enc(lm, system)
    ids, spans, doc_ids = list(pre), [], []
    for d in docs:
        d_ids = enc(lm, d)
        spans.append((len(ids), len(ids) + len(d_ids)))
        doc_ids.append(d_ids)
        ids += d_ids + enc(lm, "\n")
    ids += enc(lm, question)
    return ids, len(pre), spans, doc_ids


def prefix_cache(lm, ids, n):
    if n == 0:
        return None
    c = kvb.new_cache(lm.model)
    kvb.forward(lm.model, ids[:n], c, start=0)
    return c


def full_prefill(lm, ids):
    c = kvb.new_cache(lm.model)
    logits = kvb.forward(lm.model, ids, c, start=0)[-1]
    return c, logits


def greedy(lm, cache, first_logits, n_prompt, steps=8):
    out = [int(first_logits.argmax())]
    for i in range(steps - 1):
        out.append(int(kvb.forward(lm.model, [out[-1]], cache, start=n_prompt + i)[-1].argmax()))
    return out


def blend(lm, cc, docs, r, **kw):
    ids, plen, spans, doc_ids = build(lm, docs, **kw)
    hits = []
    kvs = []
    for d in doc_ids:
        kv, hit = cc.lookup_or_compute(lm.model, lm.fingerprint.digest, d)
        kvs.append(kv)
        hits.append(hit)
    res = blend_prefill(lm.model, ids, prefix_len=plen, prefix_cache=prefix_cache(lm, ids, plen),
                        doc_spans=spans, chunk_kvs=kvs, recompute_ratio=r)
    return ids, plen, spans, res, hits


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_full_recompute_reproduces_full_prefill(tiny, dtype):
    cc = ChunkCache(MemoryChunkStore(), dtype=dtype)
    ids, plen, spans, res, _ = blend(tiny, cc, DOCS, 1.0)
    ref_cache, ref_logits = full_prefill(tiny, ids)
    assert (res.last_logits - ref_logits).abs().max().item() < 1e-4
    assert res.last_logits.dtype == torch.float32 and res.last_logits.shape == ref_logits.shape
    assert kvb.cache_len(res.cache) == len(ids)
    rk, rv = kvb.cache_tensors(ref_cache)
    bk, bv = kvb.cache_tensors(res.cache)
    assert max((x - y).abs().max().item() for x, y in zip(rk + rv, bk + bv)) < 1e-4
    assert greedy(tiny, res.cache, res.last_logits, len(ids)) == greedy(tiny, ref_cache, ref_logits, len(ids))
    n_doc = sum(e - s for s, e in spans)
    assert res.tokens_recomputed == n_doc and res.chunk_tokens_reused == 0 and res.tokens_reused == 0
    assert res.prefix_tokens_reused == plen


def full_reuse_reference(lm, ids, plen, spans, sink):
    """Independent full-KV-reuse computation with transformers' own forward and RoPE:
    prefix from a prefill, each document's KV computed after the sink and rotated with the
    model's rotary embedding, every other token prefilled in order."""
    model = lm.model
    cache = prefix_cache(lm, ids, plen)
    pos = plen
    logits = None
    for s, e in spans + [(len(ids), len(ids))]:
        if s > pos:
            logits = kvb.forward(model, ids[pos:s], cache, start=pos)[-1]
        if e > s:
            c = kvb.new_cache(model)
            kvb.forward(model, sink + ids[s:e], c, start=0)
            delta = torch.full((1, e - s), s - len(sink))
            x = torch.zeros(1, e - s, model.config.head_dim)
            cos, sin = model.model.rotary_emb(x, delta)
            for i, layer in enumerate(c.layers):
                k = layer.keys[:, :, len(sink):]
                _, k_rot = apply_rotary_pos_emb(k, k, cos, sin)
                cache.update(k_rot, layer.values[:, :, len(sink):], i)
        pos = max(pos, e)
    return cache, logits


def test_zero_ratio_equals_independent_full_reuse(tiny):
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    ids, plen, spans, res, _ = blend(tiny, cc, DOCS, 0.0)
    ref_cache, ref_logits = full_reuse_reference(tiny, ids, plen, spans, cc.sink_for(tiny.model))
    assert (res.last_logits - ref_logits).abs().max().item() < 1e-4
    rk, rv = kvb.cache_tensors(ref_cache)
    bk, bv = kvb.cache_tensors(res.cache)
    assert max((x - y).abs().max().item() for x, y in zip(rk + rv, bk + bv)) < 1e-4
    _, full_logits = full_prefill(tiny, ids)
    assert (res.last_logits - full_logits).abs().max().item() > 1e-3  # reuse is not a full prefill
    n_doc = sum(e - s for s, e in spans)
    assert res.tokens_recomputed == 0 and res.chunk_tokens_reused == n_doc
    assert res.tokens_computed == len(ids) - plen - n_doc


@pytest.mark.parametrize("r", [0.0, 0.05, 0.15, 0.3, 0.5, 1.0])
def test_selected_set_properties(tiny, r):
    cc = ChunkCache(MemoryChunkStore())
    ids, plen, spans, res, _ = blend(tiny, cc, DOCS, r)
    sel = set(res.selected.tolist())
    doc_pos = {p for s, e in spans for p in range(s, e)}
    uncached = set(range(plen, len(ids))) - doc_pos
    assert uncached <= sel and len(ids) - 1 in sel
    assert not sel & set(range(plen))  # prefix KV is exact and never recomputed
    assert len(sel & doc_pos) == math.ceil(r * len(doc_pos) - 1e-9)
    assert len(sel) == len(uncached) + math.ceil(r * len(doc_pos) - 1e-9)
    assert res.tokens_reused == res.chunk_tokens_reused == len(doc_pos) - len(sel & doc_pos)
    assert res.selected.tolist() == sorted(sel)


def test_select_hkvd_picks_top_deviation():
    torch.manual_seed(0)
    n = 50
    doc = torch.zeros(n, dtype=torch.bool)
    doc[5:20] = True
    doc[25:49] = True
    dev = torch.rand(n)
    sel = select_hkvd(dev, doc, 0.2).tolist()
    k = math.ceil(0.2 * 39)
    top = set(torch.where(doc)[0][torch.topk(dev[doc], k).indices].tolist())
    assert top <= set(sel) and set(torch.where(~doc)[0].tolist()) <= set(sel)
    assert len(sel) == k + int((~doc).sum())
    doc[49] = True  # last token cached: still selected, on top of the r share
    assert 49 in select_hkvd(dev, doc, 0.0).tolist()


def test_reordered_and_fully_cached_prompts_hit(tiny):
    cc = ChunkCache(MemoryChunkStore())
    blend(tiny, cc, DOCS, 0.15)
    shuffled = DOCS[:]
    random.Random(1).shuffle(shuffled)
    # another order after a system text of another length: every document is a hit
    _, _, spans, res, hits = blend(tiny, cc, shuffled, 0.15, system="You are a careful assistant. Be brief.\n")
    assert all(hits) and cc.misses == len(DOCS) and cc.hits == len(DOCS)
    n_doc = sum(e - s for s, e in spans)
    assert res.tokens_recomputed == math.ceil(0.15 * n_doc - 1e-9)
    assert res.chunk_tokens_reused == n_doc - res.tokens_recomputed
    assert torch.isfinite(res.last_logits).all()
    # the exact same prompt twice: same result
    _, _, _, again, hits2 = blend(tiny, cc, shuffled, 0.15, system="You are a careful assistant. Be brief.\n")
    assert all(hits2) and torch.equal(again.last_logits, res.last_logits)


def test_one_new_document_among_cached(tiny):
    cc = ChunkCache(MemoryChunkStore())
    cc.precompute(tiny.model, [enc(tiny, d) for d in DOCS[:3]], fingerprint=tiny.fingerprint, progress=False)
    docs = [DOCS[0], DOCS[3], DOCS[1]]
    ids, plen, spans, doc_ids = build(tiny, docs)
    looked = [cc.lookup(tiny.model, tiny.fingerprint.digest, d) for d in doc_ids]
    assert [x is not None for x in looked] == [True, False, True]
    # the new document is passed as uncached tokens: computed in full, in context
    cached = [(sp, kv) for sp, kv in zip(spans, looked) if kv is not None]
    res = blend_prefill(tiny.model, ids, prefix_len=plen, prefix_cache=prefix_cache(tiny, ids, plen),
                        doc_spans=[sp for sp, _ in cached], chunk_kvs=[kv for _, kv in cached], recompute_ratio=0.15)
    s, e = spans[1]
    assert set(range(s, e)) <= set(res.selected.tolist())
    n_cached = sum(e - s for (s, e), _ in cached)
    assert res.tokens_recomputed == math.ceil(0.15 * n_cached - 1e-9)
    assert res.chunk_tokens_reused == n_cached - res.tokens_recomputed


def test_single_document_and_no_prefix(tiny):
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    ids, plen, spans, doc_ids = build(tiny, DOCS[1:2], system="")
    assert plen == 0
    kv, hit = cc.lookup_or_compute(tiny.model, tiny.fingerprint.digest, doc_ids[0])
    assert not hit
    res = blend_prefill(tiny.model, ids, prefix_len=0, prefix_cache=None, doc_spans=spans, chunk_kvs=[kv],
                        recompute_ratio=1.0)
    _, ref = full_prefill(tiny, ids)
    assert (res.last_logits - ref).abs().max().item() < 1e-4
    assert cc.lookup_or_compute(tiny.model, tiny.fingerprint.digest, doc_ids[0])[1]


@pytest.mark.parametrize("deviation", ["k", "kv"])
def test_key_deviation_options(tiny, deviation):
    cc = ChunkCache(MemoryChunkStore())
    ids, plen, spans, doc_ids = build(tiny, DOCS)
    kvs = [cc.lookup_or_compute(tiny.model, tiny.fingerprint, d)[0] for d in doc_ids]
    res = blend_prefill(tiny.model, ids, prefix_len=plen, prefix_cache=prefix_cache(tiny, ids, plen), doc_spans=spans,
                        chunk_kvs=kvs, recompute_ratio=0.3, deviation=deviation)
    assert res.tokens_recomputed == math.ceil(0.3 * sum(e - s for s, e in spans) - 1e-9)


def test_disk_store_blend_matches_memory(tiny, tmp_path):
    mem = ChunkCache(MemoryChunkStore())
    disk = ChunkCache(DiskChunkStore(tmp_path))
    _, _, _, a, _ = blend(tiny, mem, DOCS, 0.15)
    blend(tiny, disk, DOCS, 0.15)
    reopened = ChunkCache(DiskChunkStore(tmp_path))
    _, _, _, b, hits = blend(tiny, reopened, DOCS, 0.15)
    assert all(hits) and torch.equal(a.last_logits, b.last_logits)


def test_over_context_window_is_a_clear_error():
    small = tiny_llama(0, max_position_embeddings=48)
    cc = ChunkCache(MemoryChunkStore())
    long_doc = small.tokenizer(" ".join(DOCS * 3), add_special_tokens=False)["input_ids"]
    assert len(long_doc) > 48
    with pytest.raises(ValueError, match=rf"{len(long_doc)} tokens.*context window of 48 tokens"):
        cc.lookup_or_compute(small.model, small.fingerprint.digest, long_doc)
    ids, _, spans, doc_ids = build(small, DOCS[:3])
    assert len(ids) > 48 and all(len(d) < 47 for d in doc_ids)
    kvs = [cc.lookup_or_compute(small.model, small.fingerprint.digest, d)[0] for d in doc_ids]
    with pytest.raises(ValueError, match=rf"prompt of {len(ids)} tokens exceeds .* 48 tokens"):
        blend_prefill(small.model, ids, prefix_len=0, prefix_cache=None, doc_spans=spans, chunk_kvs=kvs,
                      recompute_ratio=0.15)


def test_bad_arguments(tiny):
    cc = ChunkCache(MemoryChunkStore())
    ids, plen, spans, doc_ids = build(tiny, DOCS[:2])
    kvs = [cc.lookup_or_compute(tiny.model, tiny.fingerprint.digest, d)[0] for d in doc_ids]
    pc = prefix_cache(tiny, ids, plen)
    kw = {"prefix_len": plen, "prefix_cache": pc, "doc_spans": spans, "chunk_kvs": kvs, "recompute_ratio": 0.15}
    with pytest.raises(ValueError, match="does not match"):
        blend_prefill(tiny.model, ids, **{**kw, "chunk_kvs": kvs[::-1]})
    with pytest.raises(ValueError, match="recompute_ratio"):
        blend_prefill(tiny.model, ids, **{**kw, "recompute_ratio": 1.5})
    with pytest.raises(ValueError, match="prefix_cache covers"):
        blend_prefill(tiny.model, ids, **{**kw, "prefix_len": plen - 1})
    with pytest.raises(ValueError, match="overlaps"):
        blend_prefill(tiny.model, ids, **{**kw, "doc_spans": [(plen - 1, spans[0][1]), spans[1]]})
    with pytest.raises(ValueError, match="empty document"):
        cc.lookup_or_compute(tiny.model, tiny.fingerprint.digest, [])


def test_unsupported_rope_variant_raises():
    scaled = tiny_llama(0, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
    cc = ChunkCache(MemoryChunkStore())
    ids, _, spans, doc_ids = build(scaled, DOCS[:1])
    kvs = [cc.lookup_or_compute(scaled.model, scaled.fingerprint.digest, d)[0] for d in doc_ids]
    with pytest.raises(NotImplementedError, match="linear"):
        blend_prefill(scaled.model, ids, prefix_len=0, prefix_cache=None, doc_spans=spans, chunk_kvs=kvs,
                      recompute_ratio=0.15)


def test_precompute_counts_and_keys(tiny):
    cc = ChunkCache(MemoryChunkStore(), sink_ids=[tiny.tokenizer.bos_token_id or 1])
    assert cc.precompute(tiny.model, DOCS, tokenizer=tiny.tokenizer, fingerprint=tiny.fingerprint, progress=False) == 4
    assert cc.precompute(tiny.model, DOCS, tokenizer=tiny.tokenizer, fingerprint=tiny.fingerprint, progress=False) == 0
    assert len(cc.store) == 4
    ids = enc(tiny, DOCS[0])
    assert cc.key(tiny.model, tiny.fingerprint.digest, ids) != ChunkCache(sink_ids=[7]).key(tiny.model, tiny.fingerprint.digest, ids)
    with pytest.raises(ValueError, match="tokenizer"):
        ChunkCache().precompute(tiny.model, DOCS, fingerprint=tiny.fingerprint, progress=False)


def test_query_blocks_do_not_change_the_result(tiny, monkeypatch):
    import ragcache.engine.blend.layers as blend_mod

    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    _, _, _, one_block, _ = blend(tiny, cc, DOCS, 0.3)
    monkeypatch.setattr(blend_mod, "QUERY_BLOCK", 3)
    ids, _, _, blocks, _ = blend(tiny, cc, DOCS, 0.3)
    assert len(blocks.selected) > 3 * 4
    assert torch.equal(one_block.selected, blocks.selected)
    assert (one_block.last_logits - blocks.last_logits).abs().max().item() < 1e-5
    _, full = full_prefill(tiny, ids)
    _, _, _, exact, _ = blend(tiny, cc, DOCS, 1.0)
    assert (exact.last_logits - full).abs().max().item() < 1e-4
