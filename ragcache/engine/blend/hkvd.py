"""Which document tokens CacheBlend recomputes: HKVD selection and its variants.

CacheBlend (Yao et al., EuroSys 2025, arXiv 2405.16444) recomputes the document tokens whose
cached KV deviates most from the KV they would have in the request's context ("high KV
deviation", HKVD, §4.2), measured at an early *check layer*; §4.3's *gradual filtering*
starts from a larger set at the check layer and narrows it over the next layers, using each
layer's deviation of the tokens still computed. EPIC (Hu et al., arXiv 2410.15332) instead
always recomputes the first tokens of each chunk, which act as attention sinks when the chunk
is computed on its own.

Positions here are *local*: 0 is the first token after the exact prefix. The budget of a
ratio r over ``n_doc`` cached document tokens is ``ceil(r * n_doc)`` document tokens; forced
tokens (chunk heads / tails) count inside it, deviation ranking fills the rest. Tokens
without cached KV and the last prompt token are always selected and never counted. The rules that rank
the tokens, by name, are :data:`ragcache.engine.blend.rules.SELECTION_RULES`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch

Deviation = Literal["v", "k", "kv"]
DEVIATIONS: tuple[str, ...] = ("v", "k", "kv")


def budget(recompute_ratio: float, n_doc: int) -> int:
    """Document tokens recomputed at ratio r: ``ceil(r * n_doc)`` (float noise ignored), in [0, n_doc]."""
    return min(n_doc, max(0, math.ceil(recompute_ratio * n_doc - 1e-9)))


def select_hkvd(deviation: torch.Tensor, doc_mask: torch.Tensor, recompute_ratio: float, *,
                forced: torch.Tensor | None = None, n_select: int | None = None) -> torch.Tensor:
    """Pick the positions to recompute.

    Args:
        deviation: float ``[n]`` per-position KV deviation (only document positions matter).
        doc_mask: bool ``[n]``, True where the KV came from the chunk cache (candidates).
        recompute_ratio: fraction r of the document tokens to recompute (ignored when
            ``n_select`` is given).
        forced: optional bool ``[n]``: document positions always recomputed (EPIC chunk heads,
            boundary tokens); they count inside the budget, and are all kept even past it.
        n_select: explicit number of document positions to keep (gradual filtering).

    Returns:
        Sorted int64 positions: every non-document position, the last position, the forced
        document positions and the top-deviation document positions up to the budget
        (``ceil(r * n_doc)`` or ``n_select``).
    """
    n = doc_mask.shape[0]
    doc_pos = doc_mask.nonzero().flatten()
    k = budget(recompute_ratio, len(doc_pos)) if n_select is None else min(len(doc_pos), max(0, int(n_select)))
    keep = ~doc_mask
    keep[n - 1] = True
    if forced is not None:
        forced = forced.to(doc_mask.device) & doc_mask
        keep |= forced
        k -= int(forced.sum())
        cand = (doc_mask & ~forced).nonzero().flatten()
    else:
        cand = doc_pos
    k = min(k, len(cand))
    if k > 0:
        top = torch.topk(deviation[cand].float(), k).indices
        keep[cand[top]] = True
    return keep.nonzero().flatten()


def boundary_mask(n: int, spans: Sequence[tuple[int, int]], head: int = 0, tail: int = 0,
                  device: torch.device | str | None = None) -> torch.Tensor:
    """Bool ``[n]``: the first ``head`` and last ``tail`` positions of each local span ``(s, e)``."""
    if head < 0 or tail < 0:
        raise ValueError(f"doc_head_tokens / doc_tail_tokens must be >= 0; got {head}, {tail}")
    mask = torch.zeros(n, dtype=torch.bool, device=device)
    for s, e in spans:
        if head:
            mask[s:min(e, s + head)] = True
        if tail:
            mask[max(s, e - tail):e] = True
    return mask


def kv_deviation(kind: str, k_new: torch.Tensor | None, k_cached: torch.Tensor | None, v_new: torch.Tensor | None,
                 v_cached: torch.Tensor | None) -> torch.Tensor:
    """Per-token squared L2 deviation over heads and head dims, float32 ``[m]``.

    K/V tensors are ``[Hkv, m, D]``; ``kind`` "v", "k" or "kv" (sum of both) says which are used.
    """
    if kind not in DEVIATIONS:
        raise ValueError(f"deviation must be one of {DEVIATIONS}; got {kind!r}")
    parts = []
    if kind in ("v", "kv"):
        parts.append((v_new.float() - v_cached.float()).pow(2).sum(dim=(0, 2)))
    if kind in ("k", "kv"):
        parts.append((k_new.float() - k_cached.float()).pow(2).sum(dim=(0, 2)))
    return parts[0] if len(parts) == 1 else parts[0] + parts[1]


def tail_attention(q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Attention mass each key receives from the given queries, float32 ``[n_keys]``.

    The queries are the request's uncached tail (question and template tail) at the check
    layer, with their exact causal mask (``key_pos <= query_pos``); the softmax weights are
    averaged over query heads and queries, so the result sums to 1. Ranking document tokens
    by their deviation times this mass recomputes the tokens whose stale KV the question
    actually reads (after the attention-based reuse metrics of Cache-Craft, Agarwal et al.,
    Proc. ACM Manag. Data 2025 / SIGMOD, arXiv 2502.15734, in a simpler per-request form).

    Args:
        q: ``[1, H, m, D]`` queries (RoPE applied) at positions ``q_pos`` (int64 ``[m]``).
        k: ``[1, Hkv, n_keys, D]`` keys by position; ``H`` a multiple of ``Hkv``.
        scale: softmax scale (default ``D ** -0.5``).
    """
    h, hkv, n_keys = q.shape[1], k.shape[1], k.shape[2]
    kk = k.float().repeat_interleave(h // hkv, dim=1)
    scores = torch.matmul(q.float(), kk.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    mask = torch.arange(n_keys, device=q.device)[None, :] > q_pos.to(q.device)[:, None]  # [m, n_keys]
    probs = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
    return probs.mean(dim=(0, 1, 2))


def gradual_counts(k_final: int, n_doc: int, recompute_ratio: float, gradual_layers: int,
                   gradual_start: float | None) -> list[int]:
    """Document-token counts kept at the check layer and after each of ``gradual_layers`` filter layers.

    CacheBlend §4.3: start from ``ceil(r0 * n_doc)`` tokens (``r0 = gradual_start``, default
    ``min(1, 2 r)``; never below r) at the check layer and shrink linearly to ``k_final`` over the next
    ``gradual_layers`` layers. Returns ``gradual_layers + 1`` non-increasing counts ending at
    ``k_final`` (just ``[k_final]`` when ``gradual_layers == 0``).
    """
    if gradual_layers < 0:
        raise ValueError(f"gradual_layers must be >= 0; got {gradual_layers}")
    if gradual_layers == 0:
        return [k_final]
    if gradual_start is not None and not 0.0 <= gradual_start <= 1.0:
        raise ValueError(f"gradual_start must be in [0, 1]; got {gradual_start}")
    r0 = min(1.0, 2.0 * recompute_ratio) if gradual_start is None else max(float(gradual_start), recompute_ratio)
    k0 = max(k_final, budget(r0, n_doc))
    return [round(k0 + (k_final - k0) * j / gradual_layers) for j in range(gradual_layers + 1)]


def __getattr__(name: str) -> object:
    if name == "RANKINGS":  # the rule names moved to one table: ragcache.engine.blend.rules.SELECTION_RULES
        from ragcache.engine.blend.rules import SELECTION_RULES

        return tuple(SELECTION_RULES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
