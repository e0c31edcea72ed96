"""HKVD selection variants of blend_prefill (ragcache.engine.blend.hkvd) on a tiny random float32 Llama."""

from __future__ import annotations

import math

import pytest
import torch

from ragcache.engine import kv as kvb
from ragcache.engine.blend.prefill import blend_prefill
from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.blend.hkvd import boundary_mask, gradual_counts, select_hkvd, tail_attention
from ragcache.engine.chunk.stores import MemoryChunkStore
from test_blend import DOCS, build, full_prefill, prefix_cache

VARIANTS = {
    "default": {},
    "check0": {"check_layer": 0},
    "check2": {"check_layer": 2},
    "dev_k": {"deviation": "k"},
    "dev_v": {"deviation": "v"},
    "dev_kv": {"deviation": "kv"},
    "gradual": {"gradual_layers": 2},
    "gradual_start": {"gradual_layers": 1, "gradual_start": 0.6},
    "heads": {"doc_head_tokens": 3},
    "tails": {"doc_tail_tokens": 2},
    "heads_tails_gradual_kv": {"doc_head_tokens": 2, "doc_tail_tokens": 1, "gradual_layers": 1, "deviation": "kv"},
    "dev_x_attention": {"rank_by": "deviation*attention"},
    "attention": {"rank_by": "attention", "check_layer": 2},
}


def run(lm, r, sink=None, **kw):
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32, sink_ids=sink)
    ids, plen, spans, doc_ids = build(lm, DOCS)
    kvs = [cc.lookup_or_compute(lm.model, lm.fingerprint.digest, d)[0] for d in doc_ids]
    res = blend_prefill(lm.model, ids, prefix_len=plen, prefix_cache=prefix_cache(lm, ids, plen), doc_spans=spans,
                        chunk_kvs=kvs, recompute_ratio=r, **kw)
    return ids, plen, spans, res


@pytest.mark.parametrize("name", list(VARIANTS))
def test_full_ratio_is_full_prefill_for_every_variant(tiny, name):
    ids, _, _, res = run(tiny, 1.0, **VARIANTS[name])
    ref_cache, ref_logits = full_prefill(tiny, ids)
    assert (res.last_logits - ref_logits).abs().max().item() < 1e-4
    rk, rv = kvb.cache_tensors(ref_cache)
    bk, bv = kvb.cache_tensors(res.cache)
    assert max((x - y).abs().max().item() for x, y in zip(rk + rv, bk + bv)) < 1e-4


def test_full_ratio_with_system_prefix_sink(tiny):
    ids, plen, _, _ = run(tiny, 0.0)
    _, _, _, res = run(tiny, 1.0, sink=ids[:plen], gradual_layers=1, doc_head_tokens=2)
    _, ref_logits = full_prefill(tiny, ids)
    assert (res.last_logits - ref_logits).abs().max().item() < 1e-4


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("r", [0.05, 0.15, 0.5])
def test_selected_set_holds_uncached_and_last_for_every_variant(tiny, name, r):
    kw = VARIANTS[name]
    ids, plen, spans, res = run(tiny, r, **kw)
    sel = set(res.selected.tolist())
    doc_pos = {p for s, e in spans for p in range(s, e)}
    assert set(range(plen, len(ids))) - doc_pos <= sel and len(ids) - 1 in sel
    assert not sel & set(range(plen))
    forced = {p for s, e in spans for p in list(range(s, s + kw.get("doc_head_tokens", 0)))
              + list(range(e - kw.get("doc_tail_tokens", 0), e))}
    assert forced <= sel
    assert len(sel & doc_pos) == max(len(forced), math.ceil(r * len(doc_pos) - 1e-9))
    assert res.tokens_recomputed == len(sel & doc_pos) and res.chunk_tokens_reused == len(doc_pos - sel)
    assert torch.isfinite(res.last_logits).all()


def test_variants_change_the_result(tiny):
    base = run(tiny, 0.15)[3]
    for name in ("check0", "dev_v", "gradual", "heads"):
        other = run(tiny, 0.15, **VARIANTS[name])[3]
        assert not torch.equal(other.selected, base.selected) or not torch.equal(other.last_logits,
                                                                                 base.last_logits), name


def test_select_hkvd_forced_counts_inside_budget():
    dev = torch.arange(20, dtype=torch.float32)
    doc = torch.zeros(20, dtype=torch.bool)
    doc[2:18] = True
    forced = torch.zeros(20, dtype=torch.bool)
    forced[2:4] = True
    sel = select_hkvd(dev, doc, 0.25, forced=forced).tolist()  # budget 4 = 2 forced + top-2 (17, 16)
    assert set(sel) == {0, 1, 18, 19, 2, 3, 16, 17}
    assert set(select_hkvd(dev, doc, 0.0, forced=forced).tolist()) == {0, 1, 18, 19, 2, 3}  # forced past budget
    assert set(select_hkvd(dev, doc, 0.9, n_select=1).tolist()) == {0, 1, 18, 19, 17}


def test_boundary_mask_and_gradual_counts():
    m = boundary_mask(12, [(0, 5), (6, 8)], head=2, tail=1)
    assert m.nonzero().flatten().tolist() == [0, 1, 4, 6, 7]
    assert gradual_counts(10, 100, 0.1, 0, None) == [10]
    assert gradual_counts(10, 100, 0.1, 2, None) == [20, 15, 10]
    assert gradual_counts(10, 100, 0.1, 1, 0.5) == [50, 10]
    with pytest.raises(ValueError, match="gradual_start"):
        gradual_counts(10, 100, 0.1, 1, 1.5)
    assert gradual_counts(10, 100, 0.1, 1, 0.05) == [10, 10]
    with pytest.raises(ValueError, match=">= 0"):
        boundary_mask(4, [(0, 2)], head=-1)


def test_bad_deviation_kind_raises(tiny):
    with pytest.raises(ValueError, match="deviation must be one of"):
        run(tiny, 0.15, deviation="q")


def test_bad_rank_by_raises(tiny):
    with pytest.raises(ValueError, match="rank_by must be one of"):
        run(tiny, 0.15, rank_by="shuffle")


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (6, 1)])
def test_tail_attention_is_the_causal_softmax_mass(heads, kv_heads):
    g = torch.Generator().manual_seed(heads * 10 + kv_heads)
    n, d = 11, 8
    q_pos = torch.tensor([7, 8, 10])
    q = torch.randn(1, heads, len(q_pos), d, generator=g)
    k = torch.randn(1, kv_heads, n, d, generator=g)
    mass = tail_attention(q, k, q_pos)
    assert mass.shape == (n,) and abs(mass.sum().item() - 1.0) < 1e-5
    assert mass[10].item() > 0 and (mass >= 0).all()
    ref = torch.zeros(n)
    kk = k.repeat_interleave(heads // kv_heads, dim=1)[0]
    for h in range(heads):
        for j, p in enumerate(q_pos.tolist()):
            w = torch.softmax(q[0, h, j] @ kk[h, : p + 1].T / math.sqrt(d), dim=-1)
            ref[: p + 1] += w / (heads * len(q_pos))
    assert torch.allclose(mass, ref, atol=1e-6)
    only_last = tail_attention(q[:, :, :1], k, q_pos[:1])  # a query never reads keys after its position
    assert only_last[8:].abs().max().item() == 0.0


def test_rank_by_changes_the_selection(tiny):
    _, _, _, base = run(tiny, 0.3)
    _, _, _, attn = run(tiny, 0.3, rank_by="attention")
    assert len(base.selected) == len(attn.selected)
    assert base.selected.tolist() != attn.selected.tolist()
