"""The transformers boundary: the one module that touches transformers' cache classes.

transformers 5.x: ``model(input_ids=..., cache=cache, position_ids=...)``;
``cache.layers[i].keys`` / ``.values`` have shape ``[batch, kv_heads, seq, head_dim]``;
K is stored after RoPE. A transformers upgrade should only touch this file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache

Cache = DynamicCache


def new_cache(model: Any) -> DynamicCache:
    """An empty dynamic cache for ``model``."""
    return DynamicCache(config=model.config)


def cache_from_tensors(model: Any, keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor], *,
                       copy: bool = True) -> DynamicCache:
    """Build a cache from per-layer K/V, each ``[1, kv_heads, seq, head_dim]``.

    With ``copy=True`` the cache gets its own storage, so later appends by decode never
    write into the given tensors. ``copy=False`` adopts the tensors as they are (for
    tensors the caller just built, e.g. blocks concatenated by the prefix cache): decode
    appends by concatenation, which allocates, so the given tensors are still never written.
    """
    if len(keys) != len(values):
        raise ValueError(f"got {len(keys)} key layers and {len(values)} value layers")
    if copy:
        return DynamicCache(ddp_cache_data=list(zip(keys, values)), config=model.config)
    cache = DynamicCache(config=model.config)
    if len(cache.layers) != len(keys):
        raise ValueError(f"model has {len(cache.layers)} layers, got KV for {len(keys)}")
    for layer, k, v in zip(cache.layers, keys, values):
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k, v
    return cache


def cache_tensors(cache: DynamicCache) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per-layer K and V tensors ``[batch, kv_heads, seq, head_dim]`` (views, not copies)."""
    return [layer.keys for layer in cache.layers], [layer.values for layer in cache.layers]


def cache_len(cache: DynamicCache | None) -> int:
    """Number of cached positions (0 for ``None`` or an empty cache)."""
    return 0 if cache is None else int(cache.get_seq_length())


@torch.inference_mode()
def forward(model: Any, input_ids: Sequence[int] | torch.Tensor, cache: DynamicCache, start: int,
            logits_to_keep: int = 1) -> torch.Tensor:
    """Run ``input_ids`` at positions ``start..`` appending their KV to ``cache``.

    Returns the logits of the last ``logits_to_keep`` positions, float32 ``[logits_to_keep, vocab]``.
    """
    ids = input_ids if isinstance(input_ids, torch.Tensor) else torch.tensor([list(input_ids)], dtype=torch.long)
    if ids.dim() == 1:
        ids = ids[None]
    device = next(model.parameters()).device
    ids = ids.to(device)
    pos = torch.arange(start, start + ids.shape[1], device=device)[None]
    out = model(input_ids=ids, cache=cache, position_ids=pos, use_cache=True, logits_to_keep=logits_to_keep)
    return out.logits[0].float()
