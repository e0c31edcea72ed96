"""Blend settings of issue 31 on a tiny random float32 Llama: whole documents (``doc_top``), a
per-request budget (``mass_bound``) with an exact-prefill ceiling (``max_share``), a cheaper ranking
pass (``query_layers``) and chunk KV computed under the stable prefix (``chunk_context="prefix"``)."""

from __future__ import annotations

import pytest
import torch
from test_blend import DOCS, build, full_prefill, prefix_cache

from ragcache.engine import kv as kvb
from ragcache.engine.blend.prefill import blend_prefill
from ragcache.engine.blend.setting import (
    BlendSetting,
    choose_setting,
    compute_after,
    context_view,
    licensed_setting,
)
from ragcache.engine.blend.calibration import Calibration
from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.chunk.stores import MemoryChunkStore
from ragcache.engine.blend.selection import plan_recompute


def bound(lm):
    return ChunkCache(MemoryChunkStore(), dtype=torch.float32).bind(lm.model, lm.fingerprint.digest, None)


def prefix_chunks(lm, ids, spans, view=None):
    view = view or context_view(bound(lm), ids, spans, "prefix")
    return [compute_after(view, None, ids[s:e]) for s, e in spans]


def sink_chunks(lm, ids, spans):
    b = bound(lm)
    return [b.compute(ids[s:e]) for s, e in spans]


def blend(lm, ids, spans, kvs, r, **kw):
    p = spans[0][0]
    return blend_prefill(lm.model, ids, prefix_len=p, prefix_cache=prefix_cache(lm, ids, p), doc_spans=spans,
                         chunk_kvs=kvs, recompute_ratio=r, **kw)


def same_as_full(lm, ids, res, tol=1e-4):
    full, ref = full_prefill(lm, ids)
    assert (res.last_logits - ref).abs().max().item() < tol
    fk, fv = kvb.cache_tensors(full)
    bk, bv = kvb.cache_tensors(res.cache)
    for i in range(len(fk)):
        assert (fk[i] - bk[i]).abs().max().item() < tol and (fv[i] - bv[i]).abs().max().item() < tol


FULL_BUDGET = [
    ("doc_top=all", 0.0, {"doc_top": len(DOCS)}),
    ("mass_bound=0", 1.0, {"mass_bound": 0.0}),
    ("ceiling 0", 0.05, {"max_share": 0.0}),
    ("rank layers 0-0", 1.0, {"query_layers": (0,)}),
    ("rank layers 0-1 + doc_top", 1.0, {"query_layers": (0, 1), "doc_top": 1}),
]


@pytest.mark.parametrize("context", ["sink", "prefix"])
@pytest.mark.parametrize("name,r,opts", FULL_BUDGET, ids=[x[0] for x in FULL_BUDGET])
@pytest.mark.parametrize("rule", ["infoflow", "prophet"])
def test_each_option_at_full_budget_reproduces_full_prefill(tiny, context, name, r, opts, rule):
    ids, _, spans, _ = build(tiny, DOCS)
    kvs = prefix_chunks(tiny, ids, spans) if context == "prefix" else sink_chunks(tiny, ids, spans)
    res = blend(tiny, ids, spans, kvs, r, rank_by=rule, **opts)
    assert res.exact and res.tokens_recomputed == sum(e - s for s, e in spans)
    same_as_full(tiny, ids, res)


def test_below_full_budget_is_approximate_and_not_exact(tiny):
    ids, _, spans, _ = build(tiny, DOCS)
    res = blend(tiny, ids, spans, prefix_chunks(tiny, ids, spans), 0.1, rank_by="infoflow", doc_top=1)
    _full, ref = full_prefill(tiny, ids)
    assert not res.exact and (res.last_logits - ref).abs().max().item() > 1e-5


def test_prefix_conditioned_first_document_is_exact_at_its_true_global_positions(tiny):
    """The first document follows the stable prefix directly, so its prefix-conditioned chunk KV is the
    full prefill's own KV there: with only that document reused (r = 0) the blend equals full prefill.
    The same document computed after the BOS sink (other context) does not."""
    ids, _, spans, _ = build(tiny, DOCS)
    first = spans[:1]
    res = blend(tiny, ids, first, prefix_chunks(tiny, ids, first), 0.0)
    assert res.tokens_recomputed == 0 and res.chunk_tokens_reused == first[0][1] - first[0][0]
    same_as_full(tiny, ids, res)
    # the stored keys were computed at positions len(prefix)..: start == prefix length
    assert prefix_chunks(tiny, ids, first)[0].start == first[0][0]
    other = blend(tiny, ids, first, sink_chunks(tiny, ids, first), 0.0)
    _, ref = full_prefill(tiny, ids)
    assert (other.last_logits - ref).abs().max().item() > 1e-4
    # a later document's chunk is computed right after the stable prefix (start = prefix length), and
    # the blend re-rotates it to its true global start
    pk = prefix_chunks(tiny, ids, spans)
    assert all(k.start == spans[0][0] for k in pk) and spans[-1][0] > pk[-1].start


@pytest.mark.parametrize("other_system", ["System: answer briefly.\n", "System: answer from the passages!\n",
                                          "Sys: answer from the passages.\n"])
def test_prefix_conditioned_chunk_is_never_used_under_another_prefix(tiny, other_system):
    ids, _, spans, doc_ids = build(tiny, DOCS)
    ids2, _, spans2, doc_ids2 = build(tiny, DOCS, system=other_system)
    assert doc_ids == doc_ids2 and ids[:spans[0][0]] != ids2[:spans2[0][0]]
    b = bound(tiny)
    view = context_view(b, ids, spans, "prefix")
    view.store.put_many([compute_after(view, None, d) for d in doc_ids])
    assert all(view.lookup(d) is not None for d in doc_ids)  # same prefix: hits
    other = context_view(b, ids2, spans2, "prefix")
    assert all(other.lookup(d) is None for d in doc_ids)  # another prefix: misses
    assert all(b.lookup(d) is None for d in doc_ids)  # nor served as a BOS-sink chunk
    plan = other.lookup_many([(s, e, d) for (s, e), d in zip(spans2, doc_ids2)])
    assert not plan.hits and len(plan.missed) == len(doc_ids)


def test_prompt_without_prefix_falls_back_to_the_sink_chunk(tiny):
    ids, _, spans, _ = build(tiny, DOCS)
    cut = ids[spans[0][0]:]
    shifted = [(s - spans[0][0], e - spans[0][0]) for s, e in spans]
    b = bound(tiny)
    assert context_view(b, cut, shifted, "prefix") is b
    with pytest.raises(ValueError, match="chunk_context"):
        context_view(b, ids, spans, "system")


@pytest.mark.parametrize("opts", [{"doc_top": 1}, {"mass_bound": 0.3}, {"mass_bound": 0.5, "max_share": 0.9},
                                  {"query_layers": (0,)}])
def test_blend_never_writes_stored_chunk_kv(tiny, opts):
    ids, _, spans, doc_ids = build(tiny, DOCS)
    view = context_view(bound(tiny), ids, spans, "prefix")
    view.store.put_many([compute_after(view, None, d) for d in doc_ids])
    kvs = [view.lookup(d) for d in doc_ids]
    before = [(k.keys.clone(), k.values.clone()) for k in kvs]
    for r in (0.1, 1.0):
        blend(tiny, ids, spans, kvs, r, rank_by="infoflow", **opts)
    for (k, v), kv, d in zip(before, kvs, doc_ids):
        again = view.lookup(d)
        assert torch.equal(k, kv.keys) and torch.equal(v, kv.values)
        assert torch.equal(k, again.keys) and torch.equal(v, again.values)


def test_per_request_budget_grows_as_the_bound_tightens_and_falls_back_past_its_ceiling(tiny):
    ids, _, spans, _ = build(tiny, DOCS)
    kvs = prefix_chunks(tiny, ids, spans)
    n_doc = sum(e - s for s, e in spans)
    counts = [blend(tiny, ids, spans, kvs, 0.0, rank_by="infoflow", mass_bound=b).tokens_recomputed
              for b in (0.9, 0.5, 0.2, 0.05)]
    assert counts == sorted(counts) and counts[0] < counts[-1] <= n_doc
    # a ceiling below what the bound needs: the whole request is prefilled exactly
    need = counts[2] / n_doc
    res = blend(tiny, ids, spans, kvs, 0.0, rank_by="infoflow", mass_bound=0.2, max_share=need * 0.5)
    assert res.exact and res.tokens_recomputed == n_doc
    same_as_full(tiny, ids, res)
    # a ceiling above it: blended, not exact
    res = blend(tiny, ids, spans, kvs, 0.0, rank_by="infoflow", mass_bound=0.2, max_share=min(1.0, need + 0.1))
    assert not res.exact and res.tokens_recomputed == counts[2]


def test_plan_recompute_documents_mass_and_ceiling():
    doc = torch.tensor([False, True, True, True, False, True, True, False, True, True, True, True])
    spans = [(1, 4), (5, 7), (8, 12)]
    scores = torch.tensor([9.0, 0.1, 0.1, 0.1, 9.0, 0.05, 0.05, 0.0, 0.3, 0.1, 0.05, 0.05])
    keep, exact = plan_recompute(scores, doc, spans, 0.0, doc_top=1)
    assert set(keep.tolist()) == {0, 4, 7, 8, 9, 10, 11} and not exact  # the heaviest document whole, + last
    keep, _ = plan_recompute(scores, doc, spans, 0.0, mass_bound=0.7)  # token 8 holds 0.3 / 0.9 of the mass
    assert set(keep.tolist()) - {0, 4, 7, 11} == {8}
    keep, _ = plan_recompute(scores, doc, spans, 0.0, mass_bound=0.6)  # then the first of the 0.1 ties
    assert set(keep.tolist()) - {0, 4, 7, 11} == {1, 8}
    keep, exact = plan_recompute(scores, doc, spans, 0.0, mass_bound=0.01, max_share=0.5)
    assert exact and set(keep.tolist()) == set(range(12))
    keep, exact = plan_recompute(scores, doc, spans, 0.0, mass_bound=0.99, max_share=0.5)  # all mass left > 0.99
    assert not exact and set(keep.tolist()) == {0, 4, 7, 8, 11}
    keep, exact = plan_recompute(scores * 0, doc, spans, 0.0, mass_bound=0.99, max_share=0.5)  # no signal: uniform
    assert not exact and set(keep.tolist()) == {0, 4, 7, 1, 11}
    for bad, match in (({"doc_top": -1}, "doc_top"), ({"mass_bound": 1.0}, "mass_bound"),
                       ({"max_share": 1.5}, "max_share")):
        with pytest.raises(ValueError, match=match):
            plan_recompute(scores, doc, spans, 0.1, **bad)


def test_options_need_a_rule_that_ranks_before_layer_0(tiny):
    ids, _, spans, _ = build(tiny, DOCS)
    kvs = sink_chunks(tiny, ids, spans)
    for opts in ({"doc_top": 1}, {"mass_bound": 0.2}, {"max_share": 0.5}):
        with pytest.raises(ValueError, match="rank_by='deviation'"):
            blend(tiny, ids, spans, kvs, 0.15, rank_by="deviation", **opts)


def test_blend_setting_round_trip_validation_and_record():
    s = BlendSetting(recompute_ratio=0.1, chunk_context="prefix", doc_top=1, mass_bound=0.15, max_share=0.45,
                     query_layers=[0, 1, 2])
    assert s.name == "infoflow r=0.1 doc_top=1 mass<=0.15 ceiling=0.45 rank layers 0-2 prefix-conditioned"
    assert BlendSetting.from_dict(s.to_dict()) == s
    assert s.blend_kwargs()["query_layers"] == (0, 1, 2)
    for bad in ({"recompute_ratio": 1.5}, {"rank_by": "given"}, {"chunk_context": "tools"}, {"doc_top": -1},
                {"doc_top": True}, {"mass_bound": 1.0}, {"max_share": -0.1}):
        with pytest.raises(ValueError):
            BlendSetting(**bad)
    with pytest.raises(TypeError):
        BlendSetting.from_dict([("recompute_ratio", 0.1)])
    cal = Calibration(fingerprint="f", model="m", recompute_ratio=0.1, blend_allowed=True, rule={"name": "decisive-flips-v1"}, min_agreement=0.95,
                      max_ratio=0.3, setting=s.to_dict())
    assert licensed_setting(Calibration.from_dict(cal.to_dict())) == s
    old = Calibration(fingerprint="f", model="m", recompute_ratio=0.3, blend_allowed=True, rule={"name": "decisive-flips-v1"}, min_agreement=0.95,
                      max_ratio=0.5, rank_by="infoflow")
    assert licensed_setting(old) == BlendSetting(recompute_ratio=0.3, rank_by="infoflow")
    off = Calibration(fingerprint="f", model="m", recompute_ratio=None, blend_allowed=False, min_agreement=0.95,
                      max_ratio=0.3)
    assert licensed_setting(off) is None


def test_choose_setting_needs_both_the_bound_and_the_share_cap():
    rows = [{"name": "a", "agreement_lower_bound": 0.96, "mean_share": 0.35, "median_cpu_speedup": 2.0},
            {"name": "b", "agreement_lower_bound": 0.949, "mean_share": 0.10, "median_cpu_speedup": 4.0},
            {"name": "c", "agreement_lower_bound": 0.95, "mean_share": 0.30, "median_cpu_speedup": 2.5},
            {"name": "d", "agreement_lower_bound": 0.97, "mean_share": 0.20, "median_cpu_speedup": 2.2}]
    assert choose_setting(rows, 0.95, 0.30)["name"] == "d"
    assert choose_setting(rows[:3], 0.95, 0.30)["name"] == "c"
    assert choose_setting(rows[:2], 0.95, 0.30) is None
