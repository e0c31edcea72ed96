"""Causal attention for queries that come after cached keys, without a dense mask over all keys.

After a prefix hit of ``p`` tokens, the ``m = n - p`` new queries attend to ``n`` keys with the
causal mask aligned to the lower right (query ``i`` sits at position ``p + i``). PyTorch's
``is_causal=True`` is aligned to the upper left, so transformers builds a ``[m, n]`` mask, and
SDPA with an explicit mask falls off the fused causal kernel (and repeats the KV heads for
GQA). Here the keys are split instead:

* keys ``[0, p)`` are visible to every query: attention without a mask;
* keys ``[p, n)`` form a square causal block: SDPA's fused ``is_causal`` kernel;

and the two partial results are merged exactly by their log-sum-exp (the rescaling of
FlashAttention, Dao et al. 2022, §3.1; the same merge as in ring / split-KV attention):
``out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse)``, ``lse = logaddexp(lse_a, lse_b)``.

CacheBlend's selected queries (arbitrary sorted positions, :func:`attend_positions`) use the
same split per block of queries: keys before the block's first position without a mask, and
only the keys inside the block's span with a small mask (``[block, span]``; square causal, no
mask, when the block's positions are contiguous).

On CPU the partial results and their log-sum-exp come from PyTorch's fused CPU flash kernel
(``aten._scaled_dot_product_flash_attention_for_cpu``). On other devices the lower-right case
is :func:`torch.nn.attention.bias.causal_lower_right`, which the CUDA flash / memory-efficient
kernels take natively. Where no mask applies (the cached keys, a single decode query), GQA's query
heads that share a KV head are folded into its query axis instead of repeating the KV heads, so
the cached KV is read in place. Options measured on this CPU (SmolLM2-135M's attention shape: 9 query
heads, 3 KV heads, head dim 64, one thread; ``ragcache bench prefix-hits`` has the kernel table):
``causal_lower_right`` on CPU materialises the mask and was the slowest (1.1 s against 0.72 s
with a boolean mask for 3,452 queries over 3,500 keys); a float mask was no better than a boolean
one; a GEMM-based exact softmax was 2-3x slower than the fused kernel; the split was the fastest
above ~512 keys (:data:`SMALL_KEYS`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_cpu_flash = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)

SMALL_KEYS = 512
"""Up to this many keys a ``[m, n]`` boolean mask costs less than two kernel calls and the merge
(measured one layer of SmolLM2-135M, n = 300 after p = 48: 2.8 ms masked, 3.5 ms split; n = 1000
after p = 48: 52 ms masked, 31 ms split), so :func:`causal_attention` uses it there."""


def _repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def _partial(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None, *, causal: bool = False,
             mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention output ``[B, H, m, D]`` and its float32 log-sum-exp ``[B, H, m]`` over these keys only."""
    if _cpu_flash is not None and q.device.type == "cpu" and q.dtype in (torch.float32, torch.bfloat16,
                                                                         torch.float16):
        if mask is not None:  # the kernel takes an additive mask of the query's dtype
            mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~mask, float("-inf"))
        out, lse = _cpu_flash(q, k, v, 0.0, causal, attn_mask=mask, scale=scale)[:2]
        return out, lse.float()
    # Generic path (other devices / dtypes): explicit scores over this (small or unmasked) key range.
    s = (q.float() @ k.float().transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if causal:
        mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = (torch.exp(s - lse[..., None]) @ v.float()).to(q.dtype)
    return out, lse


def _grouped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None,
             partial: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Unmasked attention of GQA queries without repeating the KV heads: the ``g = H / Hkv`` query
    heads that share a KV head are folded into its query axis (``[B, Hkv, g*m, D]``), which is exact
    because no mask ties a query to its position. Returns ``[B, H, m, D]`` and, when ``partial``,
    the float32 log-sum-exp ``[B, H, m]`` (else ``None``)."""
    b, h, m, d = q.shape
    hkv = k.shape[1]
    qf = q.reshape(b, hkv, (h // hkv) * m, d)  # heads h*g .. h*g+g-1 share KV head h (repeat_interleave order)
    if partial:
        out, lse = _partial(qf, k, v, scale)
        return out.reshape(b, h, m, d), lse.reshape(b, h, m)
    return F.scaled_dot_product_attention(qf, k, v, scale=scale).reshape(b, h, m, d), None


def _merge(a: torch.Tensor, lse_a: torch.Tensor, b: torch.Tensor, lse_b: torch.Tensor) -> torch.Tensor:
    lse = torch.logaddexp(lse_a, lse_b)
    out = a.float() * torch.exp(lse_a - lse)[..., None] + b.float() * torch.exp(lse_b - lse)[..., None]
    return out.to(a.dtype)


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None) -> torch.Tensor:
    """Causal attention of the last ``m`` positions over ``n >= m`` keys (mask aligned lower right).

    Args:
        q: queries ``[B, H, m, D]``; query ``i`` is at position ``n - m + i``.
        k, v: keys / values ``[B, Hkv, n, D]`` at positions ``0 .. n-1`` (``H`` a multiple of ``Hkv``, GQA).
        scale: softmax scale (default ``D ** -0.5``).

    Returns:
        ``[B, H, m, D]``, equal to SDPA with the mask ``key_pos <= query_pos`` (to rounding).

    Raises:
        ValueError: more queries than keys, or query heads not a multiple of the KV heads.
    """
    m, n = q.shape[2], k.shape[2]
    if m > n or q.shape[1] % k.shape[1]:
        raise ValueError(f"need m <= n queries over keys and H % Hkv == 0, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    groups = q.shape[1] // k.shape[1]
    if m == 1:  # one query sees every key: no mask, so no repeated KV heads
        return _grouped(q, k, v, scale, partial=False)[0]
    if m == n:
        return F.scaled_dot_product_attention(q, _repeat_kv(k, groups), _repeat_kv(v, groups), is_causal=True,
                                              scale=scale)
    if n <= SMALL_KEYS:
        mask = torch.arange(n, device=q.device)[None, :] <= torch.arange(n - m, n, device=q.device)[:, None]
        return F.scaled_dot_product_attention(q, _repeat_kv(k, groups), _repeat_kv(v, groups), attn_mask=mask,
                                              scale=scale)
    if q.device.type != "cpu":
        from torch.nn.attention.bias import causal_lower_right

        return F.scaled_dot_product_attention(q, _repeat_kv(k, groups), _repeat_kv(v, groups),
                                              attn_mask=causal_lower_right(m, n), scale=scale)
    p = n - m
    a, lse_a = _grouped(q, k[:, :, :p], v[:, :, :p], scale)  # the cached keys: no mask, KV heads not repeated
    b, lse_b = _partial(q, _repeat_kv(k[:, :, p:], groups), _repeat_kv(v[:, :, p:], groups), scale, causal=True)
    return _merge(a, lse_a, b, lse_b)


def attend_positions(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor, *,
                     scale: float | None = None, block: int = 256) -> torch.Tensor:
    """Attention of queries at arbitrary sorted positions with the exact causal mask ``key_pos <= query_pos``.

    Queries go in blocks of ``block``; for a block spanning positions ``a .. b`` the keys
    ``[0, a)`` are read without a mask and only the keys ``[a, b]`` with a ``[block, b - a + 1]``
    mask (no mask at all, the fused causal kernel, when the block's positions are
    contiguous); the parts are merged by log-sum-exp.

    Args:
        q: ``[1, H, m, D]`` queries.
        k, v: ``[1, Hkv, >= q_pos[-1] + 1, D]`` keys / values by position.
        q_pos: sorted int64 ``[m]`` positions of the queries.
        scale: softmax scale (default ``D ** -0.5``).
        block: queries per block.

    Returns:
        ``[1, H, m, D]``.
    """
    groups = q.shape[1] // k.shape[1]
    outs = []
    for s in range(0, q.shape[2], block):
        pos = q_pos[s:s + block]
        a, b = int(pos[0]), int(pos[-1])
        qb = q[:, :, s:s + block]
        kw, vw = _repeat_kv(k[:, :, a:b + 1], groups), _repeat_kv(v[:, :, a:b + 1], groups)
        if b - a + 1 == len(pos):  # contiguous positions: a square causal block
            w, lse_w = _partial(qb, kw, vw, scale, causal=True)
        else:
            mask = (torch.arange(a, b + 1, device=q.device)[None, :] <= pos[:, None].to(q.device))
            w, lse_w = _partial(qb, kw, vw, scale, mask=mask)
        if a == 0:
            outs.append(w)
            continue
        o, lse_o = _grouped(qb, k[:, :, :a], v[:, :, :a], scale)
        outs.append(_merge(o, lse_o, w, lse_w))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
