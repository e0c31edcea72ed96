"""The transformers boundary: the one module that touches transformers' cache classes.

transformers 5.x: ``model(input_ids=..., cache=cache, position_ids=...)``;
``cache.layers[i].keys`` / ``.values`` have shape ``[batch, kv_heads, seq, head_dim]``;
K is stored after RoPE. A transformers upgrade should only touch this file.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, causal_mask_function, sdpa_mask

from ragcache.engine.attention import causal_attention

Cache = DynamicCache

FAST_ATTENTION = "ragcache_sdpa"
"""Name of the attention implementation registered with transformers: SDPA whose causal mask,
when it is the plain lower-right one (a batch without padding after cached positions), is never
built; :func:`ragcache.engine.attention.causal_attention` computes it with fused kernels.
Anything else (padding, sliding windows, packed sequences) gets transformers' own SDPA mask and
attention, unchanged.

Why a registered implementation: in transformers 5.24, ``create_causal_mask`` skips the mask only
when the queries start at position 0 or there is a single query (``_ignore_causal_mask_sdpa``);
after cached positions ``"sdpa"`` gets a ``[q, kv]`` boolean mask, repeats the KV heads (no
``enable_gqa`` with a mask) and leaves the fused ``is_causal`` kernel; ``"eager"`` adds a float
mask; the flash-attention implementations align causal masks lower right but need a GPU kernel.
No built-in CPU implementation avoids the mask, so ragcache registers this one with
``AttentionInterface`` / ``AttentionMaskInterface``."""


def _fast_mask(batch_size: int, q_length: int, kv_length: int, q_offset: Any = 0, kv_offset: int = 0,
               mask_function: Any = causal_mask_function, attention_mask: torch.Tensor | None = None,
               local_size: int | None = None, **kwargs: Any) -> torch.Tensor | None:
    plain = (mask_function is causal_mask_function and local_size is None and kv_offset == 0
             and not isinstance(q_offset, torch.Tensor) and q_offset + q_length == kv_length
             and (attention_mask is None or bool(attention_mask.all())))
    if plain:
        return None  # None means "lower-right causal, no padding" to _fast_attention
    kwargs.pop("allow_is_causal_skip", None)
    return sdpa_mask(batch_size, q_length, kv_length, q_offset, kv_offset, mask_function, attention_mask,
                     local_size, allow_is_causal_skip=False, **kwargs)


def _fast_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                    **kwargs: Any) -> tuple[torch.Tensor, None]:
    if attention_mask is not None or dropout or kwargs.get("position_bias") is not None \
            or kwargs.get("is_causal") is False or kwargs.get("sliding_window"):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    out = causal_attention(query, key, value, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(FAST_ATTENTION, _fast_attention)
AttentionMaskInterface.register(FAST_ATTENTION, _fast_mask)


def use_fast_attention(model: Any) -> bool:
    """Switch a model on transformers' ``"sdpa"`` attention to :data:`FAST_ATTENTION` (idempotent).

    Results are unchanged (exact up to float rounding); a prefill after cached positions no
    longer builds a ``[new, all]`` mask. Models on other implementations (eager, flash
    attention kernels) are left as they are. Returns whether the model now uses it.
    """
    impl = getattr(model.config, "_attn_implementation", None)
    if impl == FAST_ATTENTION:
        return True
    if impl != "sdpa" or getattr(model, "_ragcache_keep_attention", False) \
            or not hasattr(model, "set_attn_implementation"):
        return False
    try:
        model.set_attn_implementation(FAST_ATTENTION)
    except (ValueError, TypeError, AttributeError):
        return False
    return getattr(model.config, "_attn_implementation", None) == FAST_ATTENTION


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


def keep_transformers_attention(model: Any, keep: bool = True) -> None:
    """Opt a model out of :data:`FAST_ATTENTION` (``keep=True``: back to transformers' ``"sdpa"``,
    masked after a prefix hit, and :func:`use_fast_attention` leaves it there; for comparisons),
    or back in (``keep=False``)."""
    model._ragcache_keep_attention = keep
    if keep and getattr(model.config, "_attn_implementation", None) == FAST_ATTENTION:
        model.set_attn_implementation("sdpa")
    if not keep:
        use_fast_attention(model)


@torch.inference_mode()
def forward(model: Any, input_ids: Sequence[int] | torch.Tensor, cache: DynamicCache, start: int,
            logits_to_keep: int = 1) -> torch.Tensor:
    """Run ``input_ids`` at positions ``start..`` appending their KV to ``cache``.

    Returns the logits of the last ``logits_to_keep`` positions, float32 ``[logits_to_keep, vocab]``.
    """
    ids = input_ids if isinstance(input_ids, torch.Tensor) else torch.tensor([list(input_ids)], dtype=torch.long)
    if ids.dim() == 1:
        ids = ids[None]
    use_fast_attention(model)
    device = next(model.parameters()).device
    ids = ids.to(device)
    pos = torch.arange(start, start + ids.shape[1], device=device)[None]
    out = model(input_ids=ids, cache=cache, position_ids=pos, use_cache=True, logits_to_keep=logits_to_keep)
    return out.logits[0].float()
