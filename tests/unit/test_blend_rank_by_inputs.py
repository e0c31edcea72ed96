"""rank_by of blend_prefill (ragcache.engine.blend.prefill) on prompts it cannot rank: bad values and a prompt
that ends inside its last document get a ValueError naming the fix, not a reshape error."""

from __future__ import annotations

import pytest
import torch
from test_blend import DOCS, build, full_prefill, prefix_cache

from ragcache.engine.blend.prefill import blend_prefill
from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.chunk.stores import MemoryChunkStore


def blend(lm, ids, spans, doc_ids, r, **kw):
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    kvs = [cc.lookup_or_compute(lm.model, lm.fingerprint.digest, d)[0] for d in doc_ids]
    plen = spans[0][0] if spans else len(ids) - 1
    return blend_prefill(lm.model, ids, prefix_len=plen, prefix_cache=prefix_cache(lm, ids, plen),
                         doc_spans=spans, chunk_kvs=kvs, recompute_ratio=r, **kw)


@pytest.mark.parametrize("rank_by", ["Attention", "", None, ["attention"], 3, "deviation "])
def test_unknown_rankings_are_named(tiny, rank_by):
    ids, _, spans, doc_ids = build(tiny, DOCS)
    with pytest.raises(ValueError, match="rank_by must be one of"):
        blend(tiny, ids, spans, doc_ids, 0.15, rank_by=rank_by)


@pytest.mark.parametrize("rank_by", ["attention", "deviation*attention"])
@pytest.mark.parametrize("r", [0.0, 0.15, 1.0])
def test_attention_ranking_of_a_prompt_ending_in_a_document_names_the_fix(tiny, rank_by, r):
    ids, _, spans, doc_ids = build(tiny, DOCS)
    cut = ids[:spans[-1][1]]  # nothing after the last document: no question to rank by
    with pytest.raises(ValueError, match="last document ends the prompt.*rank_by='deviation'"):
        blend(tiny, cut, spans, doc_ids, r, rank_by=rank_by)
    res = blend(tiny, cut, spans, doc_ids, r)  # the default ranking needs no question
    assert torch.isfinite(res.last_logits).all()
    if r == 1.0:
        _, ref = full_prefill(tiny, cut)
        assert (res.last_logits - ref).abs().max().item() < 1e-4


@pytest.mark.parametrize("rank_by", ["attention", "deviation*attention"])
def test_attention_ranking_with_a_question_after_the_documents_still_works(tiny, rank_by):
    ids, _, spans, doc_ids = build(tiny, DOCS)
    res = blend(tiny, ids, spans, doc_ids, 0.15, rank_by=rank_by)
    assert torch.isfinite(res.last_logits).all() and res.tokens_recomputed > 0
