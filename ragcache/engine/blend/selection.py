"""Query-aware, random and oracle selection of the document tokens a blended prefill recomputes.

CacheBlend (:mod:`ragcache.engine.blend.hkvd`) ranks reused document tokens by how far their cached
KV deviates from fresh KV at one early layer. The rules here rank them instead by what the
request's question reads from them, measured in a cheap first pass (*dual stage*):

1. **Stage 1, rank.** The uncached tokens (separators, the question and the template tail)
   run through every layer over the reused chunk KV, whose keys were re-rotated to the
   request's true global positions (:func:`ragcache.engine.rope.rerotate_keys`), exactly as
   full KV reuse (r = 0) would run them. At each layer the attention probabilities of the
   *tail* queries (every token after the last document) over the document keys are formed
   explicitly, averaged over heads and tail queries, and normalised to sum to 1 over the
   document tokens, so that every layer carries equal weight whatever mass it puts on the
   attention sink or on the question itself; the per-layer distributions are averaged over
   the fused layers (default: all).
2. **Stage 2, recompute.** The top ``ceil(r * n_doc)`` document tokens by that score, every
   uncached token and the last token are recomputed at every layer (the others keep their
   chunk KV). Stage 1's cost is part of the blend's time (TTFT).

Rules (classes in :mod:`ragcache.engine.blend.rules`, by name in its ``SELECTION_RULES`` table):

- ``"prophet"``: the score is the attention probability itself, after ProphetKV (Wang et al.,
  "ProphetKV: User-Query-Driven Selective Recomputation for Efficient KV Cache Reuse in RAG",
  ICML 2026, arXiv 2602.02579: user-query-driven token priority, dual-stage recomputation
  fusing layer-wise attention metrics).
- ``"infoflow"``: the attention *norm* ``alpha_qj * ||v_j||`` (the size of what token j adds to
  the query's attention output, per head) after InfoFlow KV (Teng et al., "InfoFlow KV:
  Information-Flow-Aware KV Recomputation for Long Context", ICML 2026, arXiv 2603.05353:
  query attention-norm signal under inference-consistent global RoPE positions), and
  :func:`chunk_order`, its information-flow chunk reordering (opt in, only where document
  order is free).
- ``"random"``: uniform random document tokens (seeded), the baseline any rule must beat.
- ``"given"``: caller-supplied scores, e.g. :func:`oracle_scores` (benchmarks only).

Source note: only the abstracts and project pages of both papers could be read while this was
written (their method sections were not reachable), so the layer set, the per-layer
normalisation and the mean fusion above are this module's reading of "fuse layer-wise
attention metrics" / "attention-norm signal", chosen on development items
(``ragcache bench blend-variants``), not a transcription of the papers' equations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ragcache.engine.blend.layers import attend, finish, qkv
from ragcache.engine.rope import RopeSpec, rerotate_keys

DEFAULT_SELECTION = "infoflow"
"""The rule an engine blends with when neither its config nor a calibration record names one
(chosen on development items 0-1 by ``ragcache bench blend-variants``, the only ones that study reached;
see the README's CacheBlend section). It is the rule a caller's ``recompute_ratio`` blends with: the
embedded model's calibration record licenses no r, so by default nothing is blended."""


def _tail_probs(q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, scale: float | None) -> torch.Tensor:
    """Softmax attention ``[H, m, n_keys]`` (float32) of queries ``[1, H, m, D]`` at ``q_pos`` over ``k``."""
    h, hkv, n_keys = q.shape[1], k.shape[1], k.shape[2]
    kk = k[0].float().repeat_interleave(h // hkv, dim=0)  # [H, n, D]
    scores = torch.matmul(q[0].float(), kk.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    mask = torch.arange(n_keys, device=q.device)[None, :] > q_pos.to(q.device)[:, None]
    return scores.masked_fill(mask[None], float("-inf")).softmax(dim=-1)


def layer_score(weights: torch.Tensor, doc_mask: torch.Tensor) -> torch.Tensor:
    """One layer's score ``[n_keys]``: a rule's per-key ``weights`` (e.g. the tail queries' mean attention
    probability, :class:`ragcache.engine.blend.rules.ProphetRule`) kept at the document keys (``doc_mask``,
    bool ``[n_keys]``; others 0) and normalised to sum 1 over them, so every layer carries equal weight."""
    s = weights * doc_mask.to(weights.device)
    total = s.sum()
    return s / total if total > 0 else s


def query_scores(model: Any, ids: torch.Tensor, pos: torch.Tensor, tail_from: int, cos: torch.Tensor,
                 sin: torch.Tensor, k_all: Sequence[torch.Tensor], v_all: Sequence[torch.Tensor],
                 doc_mask: torch.Tensor, layer_weights: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 layers: Sequence[int] | None = None) -> torch.Tensor:
    """Stage 1 of the dual-stage pipeline: fused query-attention score of every position, float32 ``[n]``.

    Runs the uncached tokens at ``pos`` (sorted int64 ``[m]``, including the tail
    ``pos >= tail_from`` and the last token) through every decoder layer over the fused buffers
    ``k_all`` / ``v_all`` (``[1, Hkv, n, D]`` per layer, document keys already at their global
    positions); writes only the K/V of ``pos`` (never document positions), which stage 2
    overwrites. ``cos`` / ``sin``: ``[m, D]`` of ``pos``. ``layer_weights(probs [H, m_tail, n], v [Hkv, n, D])``:
    a rule's per-key weights at one layer (:class:`ragcache.engine.blend.rules.BeforeLayersRule`), normalised
    by :func:`layer_score`. ``layers``: the layers fused (default all).
    The pass stops after the last fused layer, so fusing layers ``0..l`` costs about ``(l + 1) / L``
    of the full ranking pass (the cheaper ranking pass of ragcache issue 31; stage 2 rewrites every
    layer's K/V of ``pos`` before reading them).

    Raises:
        ValueError: no tail query (``pos`` has no position ``>= tail_from``).
    """
    n = doc_mask.shape[0]
    tail = (pos >= tail_from).nonzero().flatten()
    if len(tail) == 0:
        raise ValueError("query-aware selection needs tokens after the last document (the question)")
    blocks = model.model.layers
    use = set(range(len(blocks)) if layers is None else (int(i) % len(blocks) for i in layers))
    last = max(use)
    total = torch.zeros(n, dtype=torch.float32, device=ids.device)
    h = model.model.embed_tokens(ids[pos][None])
    for i, layer in enumerate(blocks):
        q, k, v = qkv(layer, h, cos, sin)
        k_all[i][:, :, pos] = k
        v_all[i][:, :, pos] = v
        if i in use:
            probs = _tail_probs(q[:, :, tail], k_all[i][:, :, :n], pos[tail], getattr(layer.self_attn, "scaling", None))
            total += layer_score(layer_weights(probs, v_all[i][0, :, :n]), doc_mask)
        if i >= last:  # layers past the last fused one cannot change the score (a cheaper ranking pass)
            break
        if i + 1 < len(blocks):  # the last layer's output is not needed
            h = finish(layer, h, attend(layer.self_attn, q, k_all[i], v_all[i], pos, n))
    return total / max(len(use), 1)


def plan_recompute(scores: torch.Tensor, doc_mask: torch.Tensor, spans: Sequence[tuple[int, int]],
                   recompute_ratio: float, *, forced: torch.Tensor | None = None, doc_top: int = 0,
                   mass_bound: float | None = None, max_share: float | None = None) -> tuple[torch.Tensor, bool]:
    """Which positions stage 2 recomputes: whole documents, a per-request budget and token selection.

    Three ways of spending the recompute budget on the stage-1 ranking ``scores`` (this module's
    rules; higher first), applied in this order:

    1. **Document granularity** (``doc_top`` = d > 0): the d documents the question reads most
       (largest sum of their tokens' scores) are recomputed whole, the answer-bearing passage
       exact, as in CacheBlend's observation that cross-attention is concentrated on few chunks
       (Yao et al., EuroSys 2025, §3) and the chunk-level reuse decisions of Cache-Craft (Agarwal
       et al., SIGMOD 2025, arXiv 2502.15734, §4: chunks whose reuse would hurt are recomputed);
       token selection then fills the rest of the budget.
    2. **Per-request budget** (``mass_bound`` = eps): rather than one ratio for every request,
       tokens are added in score order until the score mass left on reused tokens (the scores
       are normalised to sum 1 over the document tokens) is at most eps, so a request whose
       question reads few tokens recomputes few (after the adaptive, attention-mass-driven
       budgets of ProphetKV, arXiv 2602.02579, and InfoFlow KV, arXiv 2603.05353; the bound is
       calibrated, not a fixed r). ``recompute_ratio`` is then the floor of the budget.
    3. **Ceiling** (``max_share`` = c): a request that would recompute more than ``ceil(c * n_doc)``
       document tokens recomputes all of them, i.e. it is prefilled exactly (``exact`` is True).

    Args:
        scores: float ``[n]`` stage-1 scores (only document positions matter).
        doc_mask: bool ``[n]``, True at reused document tokens.
        spans: ``(start, end)`` document spans in the same (local) positions.
        recompute_ratio: r in [0, 1]; ``ceil(r * n_doc)`` document tokens at least.
        forced: optional bool ``[n]`` document positions always recomputed (inside the budget).
        doc_top: whole documents recomputed (0: none).
        mass_bound: eps in [0, 1) or ``None`` (budget = r only).
        max_share: c in [0, 1] or ``None`` (no ceiling).

    Returns:
        (sorted int64 positions: every non-document position, the last one and the chosen document
        tokens; ``exact``: whether every document token was chosen by the ceiling).

    Raises:
        ValueError: ``doc_top < 0``, ``mass_bound`` outside [0, 1) or ``max_share`` outside [0, 1].
    """
    import math

    if doc_top < 0:
        raise ValueError(f"doc_top must be >= 0 (whole documents recomputed); got {doc_top}")
    if mass_bound is not None and not 0.0 <= mass_bound < 1.0:
        raise ValueError(f"mass_bound must be in [0, 1) (score mass left on reused tokens); got {mass_bound}")
    if max_share is not None and not 0.0 <= max_share <= 1.0:
        raise ValueError(f"max_share must be in [0, 1] (the ceiling of the recomputed share); got {max_share}")
    n = doc_mask.shape[0]
    doc_mask = doc_mask.to(scores.device)
    n_doc = int(doc_mask.sum())
    s = scores.float().clamp_min(0) * doc_mask
    total = float(s.sum())
    s = s / total if total > 0 else doc_mask.float() / max(n_doc, 1)
    chosen = torch.zeros(n, dtype=torch.bool, device=scores.device)
    if forced is not None:
        chosen |= forced.to(scores.device) & doc_mask
    if doc_top and spans:
        weights = torch.tensor([float(s[a:b].sum()) for a, b in spans])
        for j in torch.argsort(weights, descending=True, stable=True)[:doc_top].tolist():
            a, b = spans[j]
            chosen[a:b] |= doc_mask[a:b]
    k = max(math.ceil(recompute_ratio * n_doc - 1e-9), int(chosen.sum()))
    cand = (doc_mask & ~chosen).nonzero().flatten()
    order = cand[torch.argsort(s[cand], descending=True, stable=True)]
    if mass_bound is not None:
        left = 1.0 - float(s[chosen].sum()) - torch.cumsum(s[order], 0)  # mass left after taking j+1 tokens
        need = 0 if 1.0 - float(s[chosen].sum()) <= mass_bound else int((left > mass_bound).sum()) + 1
        k = max(k, int(chosen.sum()) + min(need, len(order)))
    exact = max_share is not None and n_doc > 0 and k > math.ceil(max_share * n_doc - 1e-9)
    if exact:
        chosen |= doc_mask
    else:
        chosen[order[:max(0, k - int(chosen.sum()))]] = True
    keep = ~doc_mask | chosen
    keep[n - 1] = True
    return keep.nonzero().flatten(), bool(exact)


def resolve_selection(configured: str | None, calibration: Any = None) -> str:
    """An engine's rule: ``configured``, else the calibration record's ``rank_by``, else :data:`DEFAULT_SELECTION`."""
    if configured is not None:
        return configured
    if calibration is not None:
        return calibration.rank_by
    return DEFAULT_SELECTION


def random_scores(n: int, seed: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Uniform random scores ``[n]`` from a generator seeded with ``seed`` (the same seed, the same set)."""
    g = torch.Generator().manual_seed(int(seed))
    return torch.rand(n, generator=g).to(device)


@torch.inference_mode()
def oracle_scores(model: Any, full_cache: Any, doc_spans: Sequence[tuple[int, int]], chunk_kvs: Sequence[Any],
                  n: int) -> torch.Tensor:
    """Per-position distance between reused and full-prefill KV, summed over all layers, float32 ``[n]``.

    For each document token: ``sum_layers ||K_full - K_chunk||^2 + ||V_full - V_chunk||^2``
    (squared L2 over heads and head dims), with the chunk's keys re-rotated to the token's
    global position; 0 elsewhere. Recomputing the top tokens by this score is the oracle of
    ``bench blend-variants`` (it needs the full prefill, so it is no serving rule).

    Args:
        full_cache: the cache of a full prefill of the same ``n`` prompt ids.
        doc_spans / chunk_kvs: as in :func:`ragcache.engine.blend.blend_prefill`.
    """
    from ragcache.engine import kv as kvb

    spec = RopeSpec.from_config(model.config)
    fk, fv = kvb.cache_tensors(full_cache)
    out = torch.zeros(n, dtype=torch.float32)
    for (s, e), ckv in zip(doc_spans, chunk_kvs):
        ks = rerotate_keys(ckv.keys.float(), s - ckv.start, spec, out_dtype=torch.float32)  # [L, Hkv, len, D]
        vs = ckv.values.float()
        for i in range(len(fk)):
            out[s:e] += (fk[i][0, :, s:e].float().cpu() - ks[i].cpu()).pow(2).sum(dim=(0, 2))
            out[s:e] += (fv[i][0, :, s:e].float().cpu() - vs[i].cpu()).pow(2).sum(dim=(0, 2))
    return out


def chunk_order(scores: torch.Tensor, doc_spans: Sequence[tuple[int, int]]) -> list[int]:
    """InfoFlow-style chunk reordering: document indices sorted so the most-read document comes last.

    A document's weight is the sum of its tokens' stage-1 ``scores`` (``[n]``, e.g.
    ``BlendResult.token_scores`` of a ``rank_by="infoflow"`` blend); the order puts documents
    by ascending weight, so the one the question reads most sits next to the question (InfoFlow
    KV, arXiv 2603.05353: reorder chunks by information flow before recomputing). Ties keep the
    given order. Opt in only where document order is free: the canonical order keeps prompts
    byte-stable, a reordered prompt is a different prompt (and a different full prefill).
    """
    weights = [float(scores[s:e].sum()) for s, e in doc_spans]
    return sorted(range(len(doc_spans)), key=lambda i: (weights[i], i))


__all__ = ["DEFAULT_SELECTION", "chunk_order", "layer_score", "oracle_scores",
           "plan_recompute", "query_scores",
           "random_scores", "resolve_selection"]
