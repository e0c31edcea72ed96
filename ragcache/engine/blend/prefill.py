"""CacheBlend: fuse independently cached document KVs with selective recomputation.

Algorithm (Yao et al., "CacheBlend: Fast Large Language Model Serving for RAG with Cached
Knowledge Fusion", EuroSys 2025, arXiv 2405.16444, §4):

1. The prompt is ``[prefix: exact prefix cache] + [documents: chunk cache, any order, with
   uncached tokens between / after them] + [question and template tail: uncached]``.
2. Each document's cached K is re-rotated from the positions it was computed at to its new
   ones (:mod:`ragcache.engine.rope`, float32). V is used as is.
3. Layers ``0 .. check_layer`` (default 0 and 1) run over every token after the prefix; at
   ``check_layer`` the per-token deviation between the fresh and the cached K and V (or
   either alone) picks the HKVD ("high KV deviation") tokens: the top ``ceil(r * n_doc_tokens)``
   document tokens. Every token without cached KV and the last token are always selected.
4. Later layers compute Q/K/V and the MLP only for the selected tokens, scatter their fresh
   K/V into the fused per-layer cache, and attend with the exact causal mask
   ``key_pos <= query_pos`` (GQA by repeating KV heads).
5. Final norm and LM head on the last token give the first-token logits; decode continues
   from the fused cache.

Query-aware selection (ProphetKV, arXiv 2602.02579; InfoFlow KV, arXiv 2603.05353), random
and oracle-score selection replace step 3: a stage-1 pass of the question over the reused KV
ranks the document tokens before layer 0, then step 4 runs from layer 0 for the chosen tokens
(``rank_by``, the name of a rule in :data:`ragcache.engine.blend.rules.SELECTION_RULES`).

``recompute_ratio = 1`` reproduces a full prefill; ``recompute_ratio = 0`` is full KV reuse
(no layer recomputes document tokens; only uncached tokens are computed).

The decoder layers are run here by hand (``embed_tokens``, per layer ``input_layernorm``,
``q/k/v_proj``, RoPE, SDPA, ``o_proj``, residual, ``post_attention_layernorm``, MLP,
residual), which fits Llama-family models (Llama, Mistral, Qwen2, SmolLM). Models with
extra per-head norms or sliding windows raise :class:`NotImplementedError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ragcache.engine import kv as kvb
from ragcache.engine.blend.hkvd import (
    Deviation,
    boundary_mask,
    budget,
    gradual_counts,
    kv_deviation,
    select_hkvd,
    tail_attention,
)
from ragcache.engine.blend.layers import layer_forward, qkv
from ragcache.engine.blend.rules import (
    SELECTION_RULES,
    BeforeLayersRule,
    RankInputs,
    selection_rule,
)
from ragcache.engine.blend.selection import plan_recompute
from ragcache.engine.chunk.cache import context_window
from ragcache.engine.chunk.stores import ChunkKV
from ragcache.engine.rope import RopeSpec, rerotate_keys
from ragcache.limits import check_recompute_ratio

__all__ = ["BlendResult", "Deviation", "blend_prefill", "select_hkvd"]


@dataclass(slots=True)
class BlendResult:
    """Outcome of :func:`blend_prefill`.

    Attributes:
        cache: KV cache covering every input id (decode continues from it).
        last_logits: float32 ``[vocab]`` logits of the last prompt position.
        selected: int64 positions computed at every layer (HKVD tokens + uncached tokens +
            the last token), sorted.
        tokens_reused: document tokens whose chunk KV was kept (not recomputed) at the layers
            after ``check_layer``; the prefix is counted apart in ``prefix_tokens_reused``.
        prefix_tokens_reused: tokens served by the exact prefix cache (= ``prefix_len``).
        chunk_tokens_reused: same as ``tokens_reused``.
        tokens_recomputed: document tokens selected for recomputation (HKVD tokens).
        tokens_computed: tokens without any cached KV (always computed).
        token_scores: float32 ``[n]`` scores the rules ranking before layer 0 chose by
            (``None`` for the check-layer rules and r = 0), e.g. for
            :func:`ragcache.engine.blend.selection.chunk_order`.
        exact: every document token was recomputed at every layer (r = 1, or a per-request budget
            past its ``max_share`` ceiling): the cache equals a full prefill's, up to float noise.
    """

    cache: Any
    last_logits: torch.Tensor
    selected: torch.Tensor
    tokens_reused: int
    prefix_tokens_reused: int = 0
    chunk_tokens_reused: int = 0
    tokens_recomputed: int = 0
    tokens_computed: int = 0
    token_scores: torch.Tensor | None = None
    exact: bool = False


def _check_architecture(model: Any) -> None:
    layer = model.model.layers[0]
    attn = layer.self_attn
    for name in ("q_norm", "k_norm"):
        if getattr(attn, name, None) is not None:
            raise NotImplementedError(f"attention with {name} ({type(attn).__name__}) is not supported by blend_prefill")
    window = getattr(model.config, "sliding_window", None)
    if window and getattr(model.config, "use_sliding_window", True) and int(window) < context_window(model):
        raise NotImplementedError("sliding-window attention is not supported by blend_prefill")


def _validate(input_ids: Sequence[int], prefix_len: int, prefix_cache: Any, doc_spans: Sequence[tuple[int, int]],
              chunk_kvs: Sequence[ChunkKV], recompute_ratio: float, window: int, rank_by: str = "deviation") -> None:
    n = len(input_ids)
    if n == 0:
        raise ValueError("blend_prefill needs at least one input token")
    if n > window:
        raise ValueError(f"prompt of {n} tokens exceeds the model's context window of {window} tokens; "
                         "retrieve fewer or shorter documents")
    check_recompute_ratio(recompute_ratio)
    rule = selection_rule(rank_by)
    if not 0 <= prefix_len < n:
        raise ValueError(f"prefix_len={prefix_len} must leave at least the last of {n} tokens to compute")
    if (prefix_len > 0) != (prefix_cache is not None) or kvb.cache_len(prefix_cache) != prefix_len:
        raise ValueError(f"prefix_cache covers {kvb.cache_len(prefix_cache)} tokens but prefix_len={prefix_len}")
    if len(doc_spans) != len(chunk_kvs):
        raise ValueError(f"got {len(doc_spans)} doc spans but {len(chunk_kvs)} chunk KVs")
    prev_end = prefix_len
    for (s, e), ckv in sorted(zip(doc_spans, chunk_kvs), key=lambda x: x[0][0]):
        if s < prev_end or e > n or e <= s:
            raise ValueError(f"doc span ({s}, {e}) overlaps the prefix or another span, or is empty/out of range "
                             f"(prefix_len={prefix_len}, {n} tokens)")
        if ckv.n_tokens != e - s or list(input_ids[s:e]) != ckv.token_ids:
            raise ValueError(f"chunk KV of {ckv.n_tokens} tokens does not match the ids of span ({s}, {e})")
        prev_end = e
    if rule.reads_question and doc_spans and prev_end == n:
        raise ValueError(f"rank_by={rank_by!r} ranks document tokens by the attention of the tokens after the last "
                         f"document (the question), but the last document ends the prompt ({n} tokens): put the "
                         "question after the documents or use rank_by='deviation'")


def _tail_mass(layer: Any, h_in: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_all: torch.Tensor,
               tail_from: int, n: int) -> torch.Tensor:
    """Attention mass ``[n]`` the positions ``tail_from .. n-1`` put on each key at ``layer`` (check-layer rules)."""
    q, _, _ = qkv(layer, h_in[:, tail_from:], cos[tail_from:], sin[tail_from:])
    pos = torch.arange(tail_from, n, device=q.device)
    return tail_attention(q, k_all[:, :, :n], pos, scale=getattr(layer.self_attn, "scaling", None))


def _fused_buffers(model: Any, spec: RopeSpec, n: int, prefix_len: int, prefix_cache: Any,
                   doc_spans: Sequence[tuple[int, int]], chunk_kvs: Sequence[ChunkKV]
                   ) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """Per-layer K/V buffers ``[1, Hkv, n, D]``: the exact prefix, each chunk re-rotated to its span; doc mask ``[n]``.

    The buffers are new tensors: nothing written into them reaches the stored chunk KV.
    Positions outside the prefix and the spans are left empty; every one is written before it is read.
    """
    device, dtype = model.lm_head.weight.device, model.lm_head.weight.dtype
    n_layers = len(model.model.layers)
    kv_heads = int(getattr(model.config, "num_key_value_heads", None) or model.config.num_attention_heads)
    k_all = [torch.empty(1, kv_heads, n, spec.head_dim, dtype=dtype, device=device) for _ in range(n_layers)]
    v_all = [torch.empty(1, kv_heads, n, spec.head_dim, dtype=dtype, device=device) for _ in range(n_layers)]
    if prefix_len:
        pk, pv = kvb.cache_tensors(prefix_cache)
        for i in range(n_layers):
            k_all[i][:, :, :prefix_len] = pk[i][:, :, :prefix_len]
            v_all[i][:, :, :prefix_len] = pv[i][:, :, :prefix_len]
    doc_mask = torch.zeros(n, dtype=torch.bool)
    for (s, e), ckv in zip(doc_spans, chunk_kvs):
        ks = rerotate_keys(ckv.keys.to(device), s - ckv.start, spec, out_dtype=dtype)  # [L, Hkv, len, D]
        vs = ckv.values.to(device=device, dtype=dtype)
        for i in range(n_layers):
            k_all[i][0, :, s:e] = ks[i]
            v_all[i][0, :, s:e] = vs[i]
        doc_mask[s:e] = True
    return k_all, v_all, doc_mask


def _run_selected(model: Any, ids: torch.Tensor, selected: torch.Tensor, spec: RopeSpec, k_all: list, v_all: list,
                  n: int) -> torch.Tensor:
    """Every layer for the positions ``selected`` only (their fresh K/V scattered in); last hidden ``[1, m, d]``."""
    h = model.model.embed_tokens(ids[selected][None])
    cos, sin = (t.to(ids.device) for t in spec.cos_sin(selected))
    for i, layer in enumerate(model.model.layers):
        h, _, _ = layer_forward(layer, h, selected, cos, sin, k_all[i], v_all[i], n)
    return h


@torch.inference_mode()
def blend_prefill(model: Any, input_ids: Sequence[int], *, prefix_len: int, prefix_cache: Any,
                  doc_spans: Sequence[tuple[int, int]], chunk_kvs: Sequence[ChunkKV], recompute_ratio: float,
                  check_layer: int = 1, deviation: Deviation = "kv", gradual_layers: int = 0,
                  gradual_start: float | None = None, doc_head_tokens: int = 0, doc_tail_tokens: int = 0,
                  rank_by: str = "deviation", seed: int = 0, token_scores: torch.Tensor | None = None,
                  query_layers: Sequence[int] | None = None, doc_top: int = 0, mass_bound: float | None = None,
                  max_share: float | None = None) -> BlendResult:
    """Prefill ``input_ids`` reusing a prefix cache and per-document chunk KVs (CacheBlend).

    Args:
        model: a Llama-family causal LM (``model.model.layers``, ``model.lm_head``).
        input_ids: all prompt token ids, ``n`` of them.
        prefix_len: tokens ``[0, prefix_len)`` are covered exactly by ``prefix_cache``.
        prefix_cache: a cache from the exact prefix cache (``None`` when ``prefix_len == 0``);
            it is read, not modified.
        doc_spans: ``(start, end)`` token ranges of the cached documents, all ``>= prefix_len``.
        chunk_kvs: one :class:`ChunkKV` per span (same token ids), any stored dtype; never modified.
        recompute_ratio: r in [0, 1], the fraction of document tokens recomputed.
        check_layer: layer at which deviations are measured; layers ``<= check_layer`` are
            computed for every token after the prefix (paper: layer 1). Deviation rules only.
        deviation: ``"kv"`` (default), ``"k"`` or ``"v"``: which fresh-vs-cached deviation
            ranks the tokens (squared L2 over heads and head dims; "kv" sums both).
        gradual_layers: CacheBlend §4.3 gradual filtering: 0 (default) selects once at
            ``check_layer``; g > 0 keeps ``ceil(gradual_start * n_doc)`` document tokens at the
            check layer and narrows them linearly to ``ceil(r * n_doc)`` over the next g layers.
        gradual_start: first fraction r0 of the gradual schedule (default ``min(1, 2r)``).
        doc_head_tokens / doc_tail_tokens: always recompute the first / last this-many tokens of
            each document (EPIC, arXiv 2410.15332); they count inside the budget (r > 0).
        rank_by: the name of the KV selection rule (:data:`ragcache.engine.blend.rules.SELECTION_RULES`):
            ``"deviation"`` (default, CacheBlend §4.2: KV deviation at ``check_layer``) and the other
            check-layer rules rank at ``check_layer``; the before-layers rules (``"infoflow"``,
            ``"prophet"``: the question's attention (norm) over the reused tokens at their global positions,
            fused over ``query_layers``, from a stage-1 pass counted in this call's time; ``"random"``,
            seeded by ``seed``; ``"given"``, ``token_scores``) rank before layer 0, then the chosen tokens
            are recomputed at every layer (no check layer; :mod:`ragcache.engine.blend.rules`).
        seed: the random rule's seed.
        token_scores: float ``[n]`` scores for ``rank_by="given"`` (higher: recomputed first).
        query_layers: layers fused by the query rules (negative indices count from the end; default all);
            the ranking pass stops after the last of them (a cheaper ranking pass with early layers).
        doc_top / mass_bound / max_share: rules ranking before layer 0 only
            (:func:`ragcache.engine.blend.selection.plan_recompute`): recompute whole the ``doc_top``
            documents the ranking puts most score on; recompute tokens until the score mass left on
            reused tokens is <= ``mass_bound`` (a per-request budget, ``recompute_ratio`` its
            floor); past ``max_share`` of the document tokens recompute all of them (exact prefill,
            ``BlendResult.exact``).

    With gradual filtering, ``selected`` / ``tokens_recomputed`` count the tokens recomputed at
    every layer (the final set).

    Returns:
        :class:`BlendResult` with a cache covering all ``n`` positions (``token_scores`` set by
        the rules that rank before layer 0).

    Raises:
        ValueError: prompt longer than the context window (token counts in the message),
            spans that overlap / mismatch their chunk KVs, r outside [0, 1], an unknown
            ``rank_by``, a question-aware ranking with no token after the last document (the
            message names ``rank_by='deviation'``, which needs none), or ``"given"`` without scores.
        NotImplementedError: unsupported RoPE variant or attention architecture.

    Why one function: the per-layer loop carries the selected positions, the fused cache and the
    attention inputs from layer to layer (CacheBlend section 4); split up, every step would pass all of
    them back and forth.
    """
    cfg = model.config
    spec = RopeSpec.from_config(cfg)
    _check_architecture(model)
    n = len(input_ids)
    _validate(input_ids, prefix_len, prefix_cache, doc_spans, chunk_kvs, recompute_ratio, context_window(model),
              rank_by)
    device = model.lm_head.weight.device
    layers = model.model.layers
    n_layers = len(layers)
    check_layer = min(max(int(check_layer), 0), n_layers - 1)
    k_all, v_all, doc_mask = _fused_buffers(model, spec, n, prefix_len, prefix_cache, doc_spans, chunk_kvs)

    suffix = torch.arange(prefix_len, n, device=device)  # positions after the prefix
    suffix_doc = doc_mask[prefix_len:].to(device)
    ids = torch.as_tensor(list(input_ids), dtype=torch.long, device=device)
    forced = boundary_mask(n - prefix_len, [(s - prefix_len, e - prefix_len) for s, e in doc_spans],
                           doc_head_tokens, doc_tail_tokens, device=device)
    tail_from = max(e for _, e in doc_spans) if doc_spans else prefix_len
    scores = None

    exact = False
    rule = selection_rule(rank_by)
    planned = bool(doc_top) or mass_bound is not None or max_share is not None
    if planned and not isinstance(rule, BeforeLayersRule):
        raise ValueError(f"doc_top / mass_bound / max_share need a rule that ranks before layer 0 "
                         f"{[k for k, c in SELECTION_RULES.items() if issubclass(c, BeforeLayersRule)]}; "
                         f"got rank_by={rank_by!r}")
    if (recompute_ratio == 0.0 and not planned) or isinstance(rule, BeforeLayersRule):
        if recompute_ratio == 0.0 and not planned:
            sel_local = select_hkvd(torch.zeros(n - prefix_len, device=device), suffix_doc, 0.0)
        else:
            scores = rule.score(RankInputs(model, ids, doc_mask.to(device), tail_from, seed, token_scores,
                                           query_layers, spec, k_all, v_all, suffix[~suffix_doc]))
            if planned:
                local_spans = [(s - prefix_len, e - prefix_len) for s, e in doc_spans]
                sel_local, exact = plan_recompute(scores[prefix_len:], suffix_doc, local_spans, recompute_ratio,
                                                  forced=forced, doc_top=doc_top, mass_bound=mass_bound,
                                                  max_share=max_share)
            else:
                sel_local = select_hkvd(scores[prefix_len:], suffix_doc, recompute_ratio, forced=forced)
        selected = suffix[sel_local]
        h = _run_selected(model, ids, selected, spec, k_all, v_all, n)
    else:
        # Layers <= check_layer: every position as a square causal prefill (the prefix's queries
        # are a few cheap extra rows; its exact cached KV is kept), the rest's KV is fresh.
        h = model.model.embed_tokens(ids[None])
        cos, sin = (t.to(device) for t in spec.cos_sin(torch.arange(n, device=device)))
        cached_k = k_all[check_layer][0, :, prefix_len:].clone() if deviation in ("k", "kv") else None
        cached_v = v_all[check_layer][0, :, prefix_len:].clone() if deviation in ("v", "kv") else None
        for i in range(check_layer + 1):
            h_in = h
            h, k_new, v_new = layer_forward(layers[i], h, None, cos, sin, k_all[i], v_all[i], n, write_from=prefix_len)
        dev = kv_deviation(deviation, k_new[0, :, prefix_len:], cached_k, v_new[0, :, prefix_len:], cached_v)
        dev = rule.score(dev, lambda: _tail_mass(layers[check_layer], h_in, cos, sin, k_all[check_layer],
                                                  tail_from, n)[prefix_len:])
        n_doc_suffix = int(suffix_doc.sum())
        counts = gradual_counts(budget(recompute_ratio, n_doc_suffix), n_doc_suffix, recompute_ratio,
                                min(gradual_layers, n_layers - 1 - check_layer), gradual_start)
        sel_local = select_hkvd(dev, suffix_doc, recompute_ratio, forced=forced, n_select=counts[0])
        h = h[:, suffix[sel_local]]
        cos, sin = cos[suffix[sel_local]], sin[suffix[sel_local]]
        for i in range(check_layer + 1, n_layers):
            step = i - check_layer  # gradual filtering after this layer while step < len(counts)
            selected = suffix[sel_local]
            if step < len(counts):
                ck = k_all[i][0, :, selected].clone() if deviation in ("k", "kv") else None
                cv = v_all[i][0, :, selected].clone() if deviation in ("v", "kv") else None
            h, k_new, v_new = layer_forward(layers[i], h, selected, cos, sin, k_all[i], v_all[i], n)
            if step < len(counts):
                d = kv_deviation(deviation, k_new[0], ck, v_new[0], cv)
                keep = select_hkvd(d, suffix_doc[sel_local], recompute_ratio, forced=forced[sel_local],
                                   n_select=counts[step])
                sel_local, h, cos, sin = sel_local[keep], h[:, keep], cos[keep], sin[keep]
        selected = suffix[sel_local]

    h_last = model.model.norm(h[:, -1:])
    logits = model.lm_head(h_last)[0, -1].float()
    cache = kvb.cache_from_tensors(model, k_all, v_all)
    n_doc = int(doc_mask.sum())
    recomputed = int(suffix_doc[sel_local].sum())
    computed = len(selected) - recomputed
    chunk_reused = n_doc - recomputed
    return BlendResult(cache=cache, last_logits=logits, selected=selected.cpu(),
                       tokens_reused=chunk_reused, prefix_tokens_reused=prefix_len,
                       chunk_tokens_reused=chunk_reused, tokens_recomputed=recomputed, tokens_computed=computed,
                       token_scores=None if scores is None else scores.cpu(),
                       exact=exact or recomputed == n_doc)
