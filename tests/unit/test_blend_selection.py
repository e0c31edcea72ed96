"""Query-aware, random and oracle selection of blend_prefill (ragcache.engine.blend.selection) on a tiny
random float32 Llama: exactness at r = 1, what is always selected, true global positions in the
ranking pass, stored chunk KV left untouched, prompts without a question."""

from __future__ import annotations

import pytest
import torch
from test_blend import DOCS, build, full_prefill, prefix_cache
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from ragcache.engine import kv as kvb
from ragcache.engine.blend.prefill import blend_prefill
from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.chunk.chunk_kv import ChunkKV
from ragcache.engine.chunk.stores import MemoryChunkStore
from ragcache.engine.blend.hkvd import budget
from ragcache.engine.rope import RopeSpec, rerotate_keys
from ragcache.engine.blend.selection import chunk_order, oracle_scores

RULES = ["prophet", "infoflow", "random", "given"]


def chunks(lm, doc_ids):
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    return [cc.lookup_or_compute(lm.model, lm.fingerprint.digest, d)[0] for d in doc_ids]


def blend(lm, ids, spans, kvs, r, **kw):
    plen = spans[0][0]
    if kw.get("rank_by") == "given" and "token_scores" not in kw:
        kw["token_scores"] = torch.arange(len(ids), dtype=torch.float32).flip(0)
    return blend_prefill(lm.model, ids, prefix_len=plen, prefix_cache=prefix_cache(lm, ids, plen), doc_spans=spans,
                         chunk_kvs=kvs, recompute_ratio=r, **kw)


@pytest.mark.parametrize("rule", RULES)
def test_r1_reproduces_full_prefill(tiny, rule):
    ids, _, spans, doc_ids = build(tiny, DOCS)
    res = blend(tiny, ids, spans, chunks(tiny, doc_ids), 1.0, rank_by=rule)
    full, ref = full_prefill(tiny, ids)
    assert (res.last_logits - ref).abs().max().item() < 1e-4
    fk, fv = kvb.cache_tensors(full)
    bk, bv = kvb.cache_tensors(res.cache)
    for i in range(len(fk)):
        assert (fk[i] - bk[i]).abs().max().item() < 1e-4 and (fv[i] - bv[i]).abs().max().item() < 1e-4


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("r", [0.05, 0.15, 0.5])
def test_selected_holds_every_uncached_token_and_the_last(tiny, rule, r):
    ids, plen, spans, doc_ids = build(tiny, DOCS)
    res = blend(tiny, ids, spans, chunks(tiny, doc_ids), r, rank_by=rule)
    doc = torch.zeros(len(ids), dtype=torch.bool)
    for s, e in spans:
        doc[s:e] = True
    sel = set(res.selected.tolist())
    uncached = {i for i in range(plen, len(ids)) if not doc[i]}
    assert uncached <= sel and len(ids) - 1 in sel and min(sel) >= plen
    n_doc = int(doc.sum())
    assert res.tokens_recomputed == len(sel - uncached) == budget(r, n_doc)
    assert res.token_scores is not None and res.token_scores.shape == (len(ids),)


def _exact_chunks(lm, ids, spans, full):
    """ChunkKVs holding the full prefill's own KV, stored at local positions 0..len-1 (start 0)."""
    spec = RopeSpec.from_config(lm.model.config)
    fk, fv = kvb.cache_tensors(full)
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    out = []
    for s, e in spans:
        k = torch.stack([fk[i][0, :, s:e] for i in range(len(fk))])
        v = torch.stack([fv[i][0, :, s:e] for i in range(len(fv))])
        out.append(ChunkKV(cc.key(lm.model, lm.fingerprint.digest, ids[s:e]), lm.fingerprint.digest, ids[s:e],
                           rerotate_keys(k, -s, spec), v.clone(), 0))
    return out


@torch.inference_mode()
def _reference_prophet(lm, ids, spans):
    """The question's layer-normalised attention over the document tokens, from transformers' own full forward."""
    model = lm.model
    n = len(ids)
    t = torch.tensor([ids])
    out = model(t, output_hidden_states=True, use_cache=True)
    keys, _ = kvb.cache_tensors(out.past_key_values)
    tail = torch.arange(max(e for _, e in spans), n)
    doc = torch.zeros(n, dtype=torch.bool)
    for s, e in spans:
        doc[s:e] = True
    total = torch.zeros(n)
    for i, layer in enumerate(model.model.layers):
        x = layer.input_layernorm(out.hidden_states[i][:, tail])
        a = layer.self_attn
        d = a.head_dim
        q = a.q_proj(x).view(1, len(tail), -1, d).transpose(1, 2)
        cos, sin = model.model.rotary_emb(x, tail[None])
        q, _ = apply_rotary_pos_emb(q, q, cos, sin)
        k = keys[i].repeat_interleave(q.shape[1] // keys[i].shape[1], dim=1)
        sc = (q @ k.transpose(-1, -2)) * a.scaling
        sc = sc.masked_fill(torch.arange(n)[None, :] > tail[:, None], float("-inf"))
        s = sc.softmax(-1).mean(dim=(0, 1, 2)) * doc
        total += s / s.sum()
    return total / len(model.model.layers)


def test_ranking_uses_true_global_positions(tiny):
    """Chunks holding the full prefill's KV at local positions: re-rotated to their global positions, the
    ranking pass sees exactly the full prefill, so its scores equal the question's attention there
    (computed with transformers' own RoPE). Chunk-local positions (keys or queries) would not."""
    ids, _, spans, _ = build(tiny, DOCS)
    full, ref_logits = full_prefill(tiny, ids)
    kvs = _exact_chunks(tiny, ids, spans, full)
    res0 = blend(tiny, ids, spans, kvs, 0.0)
    assert (res0.last_logits - ref_logits).abs().max().item() < 1e-4  # the chunks are exact at global positions
    res = blend(tiny, ids, spans, kvs, 0.2, rank_by="prophet")
    ref = _reference_prophet(tiny, ids, spans)
    assert torch.allclose(res.token_scores, ref, atol=1e-5)
    assert spans[0][0] > 0 and (ref[spans[0][0]:] > 0).any()
    # the oracle sees no deviation in exact chunks, and a positive one in chunks computed on their own
    assert oracle_scores(tiny.model, full, spans, kvs, len(ids)).abs().max().item() < 1e-6
    _, _, _, doc_ids = build(tiny, DOCS)
    own = oracle_scores(tiny.model, full, spans, chunks(tiny, doc_ids), len(ids))
    assert (own[spans[1][0]:spans[1][1]] > 0).all() and own[:spans[0][0]].abs().max() == 0


@pytest.mark.parametrize("rule", ["prophet", "infoflow"])
def test_ranking_pass_never_writes_into_stored_chunk_kv(tiny, rule):
    ids, _, spans, doc_ids = build(tiny, DOCS)
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    kvs = [cc.lookup_or_compute(tiny.model, tiny.fingerprint.digest, d)[0] for d in doc_ids]
    before = [(kv.keys.clone(), kv.values.clone()) for kv in kvs]
    for r in (0.15, 1.0):
        blend(tiny, ids, spans, kvs, r, rank_by=rule)
    again = [cc.lookup_or_compute(tiny.model, tiny.fingerprint.digest, d) for d in doc_ids]
    for (k, v), kv, (kv2, hit) in zip(before, kvs, again):
        assert hit and torch.equal(k, kv.keys) and torch.equal(v, kv.values)
        assert torch.equal(k, kv2.keys) and torch.equal(v, kv2.values)


@pytest.mark.parametrize("rule", ["prophet", "infoflow"])
def test_question_free_prompt_is_a_clear_error(tiny, rule):
    ids, _, spans, doc_ids = build(tiny, DOCS)
    cut = ids[:spans[-1][1]]
    kvs = chunks(tiny, doc_ids)
    with pytest.raises(ValueError, match="last document ends the prompt.*rank_by='deviation'"):
        blend(tiny, cut, spans, kvs, 0.15, rank_by=rule)
    for other in ("random", "deviation"):  # the question-free rules still run
        assert torch.isfinite(blend(tiny, cut, spans, kvs, 0.15, rank_by=other).last_logits).all()


def test_random_is_seeded_and_given_needs_scores(tiny):
    ids, _, spans, doc_ids = build(tiny, DOCS)
    kvs = chunks(tiny, doc_ids)
    a, b, c = (blend(tiny, ids, spans, kvs, 0.2, rank_by="random", seed=s).selected for s in (1, 1, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    with pytest.raises(ValueError, match="token_scores of shape"):
        blend(tiny, ids, spans, kvs, 0.2, rank_by="given", token_scores=torch.zeros(3))
    first = spans[0]
    scores = torch.zeros(len(ids))
    scores[first[0]:first[1]] = 1.0  # recompute the first document first
    res = blend(tiny, ids, spans, kvs, 0.05, rank_by="given", token_scores=scores)
    doc_selected = {i for i in res.selected.tolist() if any(s <= i < e for s, e in spans)}
    assert doc_selected and doc_selected <= set(range(*first))


def test_chunk_order_puts_the_most_read_document_last():
    spans = [(0, 3), (4, 6), (7, 10)]
    scores = torch.tensor([0.1, 0.1, 0.1, 0.0, 0.5, 0.4, 0.0, 0.0, 0.05, 0.0])
    assert chunk_order(scores, spans) == [2, 0, 1]
    assert chunk_order(torch.zeros(10), spans) == [0, 1, 2]
