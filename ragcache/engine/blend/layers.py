"""One Llama-family decoder layer run by hand for a subset of positions (used by blend and selection).

The layer is ``input_layernorm`` -> ``q/k/v_proj`` -> RoPE -> attention with the exact causal mask
``key_pos <= query_pos`` over a fused per-layer K/V buffer -> ``o_proj`` -> residual ->
``post_attention_layernorm`` -> MLP -> residual, which fits Llama, Mistral, Qwen2 and SmolLM.
:func:`ragcache.engine.blend.blend_prefill` drives it layer by layer (CacheBlend, Yao et al.,
EuroSys 2025, §4); :mod:`ragcache.engine.blend.selection` runs it for the question tokens only, also
returning their attention probabilities (query-aware selection).
"""

from __future__ import annotations

from typing import Any

import torch

from ragcache.engine.attention import attend_positions, causal_attention

QUERY_BLOCK = 256


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on ``[1, H, m, D]`` with ``cos``/``sin`` ``[m, D]`` (computed in float32 for other dtypes)."""
    if x.dtype == torch.float32:
        return x * cos + rotate_half(x) * sin
    xf = x.float()
    return (xf * cos + rotate_half(xf) * sin).to(x.dtype)


def attend(attn: Any, q: torch.Tensor, k_all: torch.Tensor, v_all: torch.Tensor, q_pos: torch.Tensor | None,
           n_keys: int) -> torch.Tensor:
    """Attention of queries ``[1, H, m, D]`` over keys ``[1, Hkv, n_keys, D]`` (GQA by repeating KV heads).

    ``q_pos is None``: the queries are every position ``0..n_keys-1`` and the mask is the square
    causal one (fused kernel). Otherwise ``q_pos`` (sorted int64 ``[m]``) gives each query's
    position and the mask is exactly ``key_pos <= query_pos``
    (:func:`ragcache.engine.attention.attend_positions`, blocks of :data:`QUERY_BLOCK` queries).
    """
    scale = getattr(attn, "scaling", None)
    k = k_all[:, :, :n_keys]
    v = v_all[:, :, :n_keys]
    if q_pos is None:
        return causal_attention(q, k, v, scale=scale)
    return attend_positions(q, k, v, q_pos, scale=scale, block=QUERY_BLOCK)


def qkv(layer: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Q ``[1, H, m, D]``, K and V ``[1, Hkv, m, D]`` of hidden ``h [1, m, hidden]`` (RoPE applied to Q, K)."""
    attn = layer.self_attn
    m = h.shape[1]
    x = layer.input_layernorm(h)
    d = cos.shape[-1]
    q = rope(attn.q_proj(x).view(1, m, -1, d).transpose(1, 2), cos, sin)
    k = rope(attn.k_proj(x).view(1, m, -1, d).transpose(1, 2), cos, sin)
    v = attn.v_proj(x).view(1, m, -1, d).transpose(1, 2)
    return q, k, v


def finish(layer: Any, h: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``o_proj`` of the attention output ``[1, H, m, D]``, residual, MLP, residual."""
    m = h.shape[1]
    h = h + layer.self_attn.o_proj(out.transpose(1, 2).reshape(1, m, -1))
    return h + layer.mlp(layer.post_attention_layernorm(h))


def layer_forward(layer: Any, h: torch.Tensor, pos: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
                  k_all: torch.Tensor, v_all: torch.Tensor, n_keys: int, write_from: int = 0
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decoder layer for the tokens at ``pos`` (hidden ``h [1, m, hidden]``).

    ``pos is None`` means every position ``0..n_keys-1``; then only positions ``>= write_from``
    are written to the cache (the prefix KV stays the exact cached one). Otherwise the fresh
    K/V of ``pos`` are scattered into ``k_all``/``v_all`` before attending. Returns (new hidden,
    fresh K ``[1, Hkv, m, D]``, fresh V).
    """
    q, k, v = qkv(layer, h, cos, sin)
    if pos is None:
        k_all[:, :, write_from:n_keys] = k[:, :, write_from:]
        v_all[:, :, write_from:n_keys] = v[:, :, write_from:]
    else:
        k_all[:, :, pos] = k
        v_all[:, :, pos] = v
    out = attend(layer.self_attn, q, k_all, v_all, pos, n_keys)
    return finish(layer, h, out), k, v
