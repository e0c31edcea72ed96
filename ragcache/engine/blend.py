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
from ragcache.engine.attention import attend_positions, causal_attention
from ragcache.engine.chunk_cache import context_window
from ragcache.engine.hkvd import (
    RANKINGS,
    Deviation,
    RankBy,
    boundary_mask,
    budget,
    gradual_counts,
    kv_deviation,
    select_hkvd,
    tail_attention,
)
from ragcache.engine.rope import RopeSpec, rerotate_keys
from ragcache.engine.stores import ChunkKV

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
    """

    cache: Any
    last_logits: torch.Tensor
    selected: torch.Tensor
    tokens_reused: int
    prefix_tokens_reused: int = 0
    chunk_tokens_reused: int = 0
    tokens_recomputed: int = 0
    tokens_computed: int = 0


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
    if not 0.0 <= recompute_ratio <= 1.0:
        raise ValueError(f"recompute_ratio must be in [0, 1]; got {recompute_ratio}")
    if rank_by not in RANKINGS:
        raise ValueError(f"rank_by must be one of {RANKINGS}; got {rank_by!r}")
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
    if rank_by != "deviation" and doc_spans and prev_end == n:
        raise ValueError(f"rank_by={rank_by!r} ranks document tokens by the attention of the tokens after the last "
                         f"document (the question), but the last document ends the prompt ({n} tokens): put the "
                         "question after the documents or use rank_by='deviation'")


_QUERY_BLOCK = 256


def _attend(attn: Any, q: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor, q_pos: torch.Tensor | None,
            n_keys: int) -> torch.Tensor:
    """Attention of queries ``[1, H, m, D]`` over keys ``[1, Hkv, n_keys, D]`` (GQA by repeating KV heads).

    ``q_pos is None``: the queries are every position ``0..n_keys-1`` and the mask is the square
    causal one (fused kernel). Otherwise ``q_pos`` (sorted int64 ``[m]``) gives each query's
    position and the mask is exactly ``key_pos <= query_pos``, computed without a mask over all
    keys (:func:`ragcache.engine.attention.attend_positions`: per block of ``_QUERY_BLOCK``
    queries, the keys before the block unmasked, a small mask only over the block's own span).
    """
    scale = getattr(attn, "scaling", None)
    k = k_all[:, :, :n_keys]
    v = v_all[:, :, :n_keys]
    if q_pos is None:
        return causal_attention(q, k, v, scale=scale)
    return attend_positions(q, k, v, q_pos, scale=scale, block=_QUERY_BLOCK)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    if x.dtype == torch.float32:
        return x * cos + _rotate_half(x) * sin
    xf = x.float()
    return (xf * cos + _rotate_half(xf) * sin).to(x.dtype)


def _layer(layer: Any, h: torch.Tensor, pos: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
           k_all: torch.Tensor, v_all: torch.Tensor, n_keys: int, write_from: int = 0
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decoder layer for the tokens at ``pos`` (hidden ``h [1, m, hidden]``).

    ``pos is None`` means every position ``0..n_keys-1``; then only positions ``>= write_from``
    are written to the cache (the prefix KV stays the exact cached one). Otherwise the fresh
    K/V of ``pos`` are scattered into ``k_all``/``v_all``. Returns (new hidden, fresh K
    ``[1, Hkv, m, D]``, fresh V).
    """
    attn = layer.self_attn
    m = h.shape[1]
    x = layer.input_layernorm(h)
    d = cos.shape[-1]
    q = _rope(attn.q_proj(x).view(1, m, -1, d).transpose(1, 2), cos, sin)
    k = _rope(attn.k_proj(x).view(1, m, -1, d).transpose(1, 2), cos, sin)
    v = attn.v_proj(x).view(1, m, -1, d).transpose(1, 2)
    if pos is None:
        k_all[:, :, write_from:n_keys] = k[:, :, write_from:]
        v_all[:, :, write_from:n_keys] = v[:, :, write_from:]
    else:
        k_all[:, :, pos] = k
        v_all[:, :, pos] = v
    out = _attend(attn, q, k_all, v_all, pos, n_keys)
    out = attn.o_proj(out.transpose(1, 2).reshape(1, m, -1))
    h = h + out
    h = h + layer.mlp(layer.post_attention_layernorm(h))
    return h, k, v


def _tail_mass(layer: Any, h_in: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_all: torch.Tensor,
               tail_from: int, n: int) -> torch.Tensor:
    """Attention mass ``[n]`` the positions ``tail_from .. n-1`` put on each key at ``layer``.

    ``h_in`` is the layer's input hidden state for every position ``[1, n, hidden]``; ``k_all``
    its (fresh) keys. Used by ``rank_by`` in :func:`blend_prefill`.
    """
    attn = layer.self_attn
    d = cos.shape[-1]
    x = layer.input_layernorm(h_in[:, tail_from:])
    m = x.shape[1]
    q = _rope(attn.q_proj(x).view(1, m, -1, d).transpose(1, 2), cos[tail_from:], sin[tail_from:])
    pos = torch.arange(tail_from, n, device=q.device)
    return tail_attention(q, k_all[:, :, :n], pos, scale=getattr(attn, "scaling", None))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@torch.inference_mode()
def blend_prefill(model: Any, input_ids: Sequence[int], *, prefix_len: int, prefix_cache: Any,
                  doc_spans: Sequence[tuple[int, int]], chunk_kvs: Sequence[ChunkKV], recompute_ratio: float,
                  check_layer: int = 1, deviation: Deviation = "kv", gradual_layers: int = 0,
                  gradual_start: float | None = None, doc_head_tokens: int = 0, doc_tail_tokens: int = 0,
                  rank_by: RankBy = "deviation") -> BlendResult:
    """Prefill ``input_ids`` reusing a prefix cache and per-document chunk KVs (CacheBlend).

    Args:
        model: a Llama-family causal LM (``model.model.layers``, ``model.lm_head``).
        input_ids: all prompt token ids, ``n`` of them.
        prefix_len: tokens ``[0, prefix_len)`` are covered exactly by ``prefix_cache``.
        prefix_cache: a cache from the exact prefix cache (``None`` when ``prefix_len == 0``);
            it is read, not modified.
        doc_spans: ``(start, end)`` token ranges of the cached documents, all ``>= prefix_len``.
        chunk_kvs: one :class:`ChunkKV` per span (same token ids), any stored dtype.
        recompute_ratio: r in [0, 1], the fraction of document tokens recomputed (HKVD tokens).
        check_layer: layer at which deviations are measured; layers ``<= check_layer`` are
            computed for every token after the prefix (paper: layer 1). Ignored when r = 0.
        deviation: ``"kv"`` (default), ``"k"`` or ``"v"``: which fresh-vs-cached deviation
            ranks the tokens (squared L2 over heads and head dims; "kv" sums both). Default
            chosen on MuSiQue dev items 0-2 (``bench blend-variants``): at r = 0.15 KV had a
            lower teacher-forced KL than V on each item (0.71 x that of r = 0 against 0.75).
        gradual_layers: CacheBlend §4.3 gradual filtering: 0 (default) selects once at
            ``check_layer``; g > 0 keeps ``ceil(gradual_start * n_doc)`` document tokens at the
            check layer and narrows them linearly to ``ceil(r * n_doc)`` over the next g layers,
            each time by that layer's deviation of the tokens still computed.
        gradual_start: first fraction r0 of the gradual schedule (default ``min(1, 2r)``).
        doc_head_tokens: always recompute the first this-many tokens of each document (EPIC,
            arXiv 2410.15332: a chunk's first tokens are its own attention sink); they count
            inside the ``ceil(r * n_doc)`` budget. Applies when r > 0.
        doc_tail_tokens: likewise for the last tokens of each document (before the boundary).
        rank_by: ``"deviation"`` (default, CacheBlend §4.2) ranks document tokens by their KV
            deviation at ``check_layer``; ``"deviation*attention"`` multiplies it by the
            attention mass the uncached tail after the last document (the question) puts on
            each token at that layer (:func:`~ragcache.engine.hkvd.tail_attention`);
            ``"attention"`` ranks by that mass alone (both need tokens after the last document).
            Gradual filtering always narrows by deviation.

    Selection variants are in :mod:`ragcache.engine.hkvd`; the chunk's sink (BOS or the
    system prefix) is a :class:`~ragcache.engine.chunk_cache.ChunkCache` setting. With
    gradual filtering, ``selected`` / ``tokens_recomputed`` count the tokens recomputed at
    every layer (the final set); tokens dropped part-way kept their cached KV at later layers.

    Returns:
        :class:`BlendResult` with a cache covering all ``n`` positions.

    Raises:
        ValueError: prompt longer than the context window (token counts in the message),
            spans that overlap / mismatch their chunk KVs, r outside [0, 1], an unknown
            ``rank_by``, or an attention ranking with no token after the last document.
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
    dtype = model.lm_head.weight.dtype
    layers = model.model.layers
    n_layers = len(layers)
    check_layer = min(max(int(check_layer), 0), n_layers - 1)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
    head_dim = spec.head_dim

    # Fused per-layer K/V over all n positions: prefix (exact) + re-rotated chunks; the rest is
    # filled as each layer computes it.
    # Every position gets written before it is read (prefix, chunks, or computed), so empty is safe.
    k_all = [torch.empty(1, kv_heads, n, head_dim, dtype=dtype, device=device) for _ in range(n_layers)]
    v_all = [torch.empty(1, kv_heads, n, head_dim, dtype=dtype, device=device) for _ in range(n_layers)]
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

    # Positions after the prefix: computed at layers <= check_layer when r > 0.
    suffix = torch.arange(prefix_len, n, device=device)
    suffix_doc = doc_mask[prefix_len:].to(device)
    ids = torch.as_tensor(list(input_ids), dtype=torch.long, device=device)

    if recompute_ratio == 0.0:
        sel_local = (~suffix_doc).nonzero().flatten()
        if len(sel_local) == 0 or sel_local[-1] != n - 1 - prefix_len:
            sel_local = torch.cat([sel_local, torch.tensor([n - 1 - prefix_len], device=device)]).unique()
        selected = suffix[sel_local]
        h = model.model.embed_tokens(ids[selected][None])
        cos, sin = (t.to(device) for t in spec.cos_sin(selected))
        for i, layer in enumerate(layers):
            h, _, _ = _layer(layer, h, selected, cos, sin, k_all[i], v_all[i], n)
    else:
        # Layers <= check_layer: every position as a square causal prefill (the prefix's queries
        # are a few cheap extra rows; its exact cached KV is kept), the rest's KV is fresh.
        h = model.model.embed_tokens(ids[None])
        cos, sin = (t.to(device) for t in spec.cos_sin(torch.arange(n, device=device)))
        cached_k = k_all[check_layer][0, :, prefix_len:].clone() if deviation in ("k", "kv") else None
        cached_v = v_all[check_layer][0, :, prefix_len:].clone() if deviation in ("v", "kv") else None
        for i in range(check_layer + 1):
            h_in = h
            h, k_new, v_new = _layer(layers[i], h, None, cos, sin, k_all[i], v_all[i], n, write_from=prefix_len)
        dev = kv_deviation(deviation, k_new[0, :, prefix_len:], cached_k, v_new[0, :, prefix_len:], cached_v)
        if rank_by != "deviation":
            mass = _tail_mass(layers[check_layer], h_in, cos, sin, k_all[check_layer], max(e for _, e in doc_spans)
                              if doc_spans else prefix_len, n)[prefix_len:]
            dev = mass if rank_by == "attention" else dev * mass
        forced = boundary_mask(n - prefix_len, [(s - prefix_len, e - prefix_len) for s, e in doc_spans],
                               doc_head_tokens, doc_tail_tokens, device=device)
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
            h, k_new, v_new = _layer(layers[i], h, selected, cos, sin, k_all[i], v_all[i], n)
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
                       chunk_tokens_reused=chunk_reused, tokens_recomputed=recomputed, tokens_computed=computed)
