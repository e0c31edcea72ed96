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
from transformers.cache_utils import DynamicLayer
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


def new_cache(model: Any, capacity: int = 0) -> DynamicCache:
    """An empty dynamic cache for ``model``; ``capacity`` > 0: of :class:`PreallocatedLayer` s holding that many
    positions (of the first update's batch) before they grow (a model whose cache is not all full-attention
    ``DynamicLayer`` gets transformers' own layers)."""
    cache = DynamicCache(config=model.config)
    if capacity > 0 and all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [PreallocatedLayer(capacity) for _ in cache.layers]
    return cache


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


class PreallocatedLayer(DynamicLayer):
    """A full-attention cache layer whose K/V are written in place into buffers allocated once.

    transformers' ``DynamicLayer`` appends by ``torch.cat``, which copies the whole cache at every
    forward (the prefill after a prefix hit, then every decode step). Here the positions live at the
    front of token-major buffers ``[batch, capacity, kv_heads, head_dim]`` (the layout the projections
    produce, so the buffer holds a prefix cache's blocks back to back and new K/V are written as they
    come) and an update copies only its new positions; ``keys`` / ``values`` are views
    ``[batch, kv_heads, seq, head_dim]`` of the filled part (same values as ``DynamicLayer``'s, other
    strides). A full buffer is replaced by one half as large again. Whatever sets ``keys`` / ``values``
    from outside (crop, reorder, offload) is honoured: the next update copies them into a new buffer,
    so a view handed out earlier is never written.
    """

    def __init__(self, capacity: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.capacity = int(capacity)
        self._kbuf: torch.Tensor | None = None
        self._vbuf: torch.Tensor | None = None
        self._exposed: tuple[torch.Tensor | None, torch.Tensor | None] = (None, None)

    def fill(self, key_pieces: Sequence[torch.Tensor], value_pieces: Sequence[torch.Tensor], batch: int = 1) -> None:
        """Start the layer with the concatenation of token-major pieces ``[len, kv_heads, head_dim]``
        (one row, copied into each of ``batch`` rows), written once into the buffer; the pieces are only read."""
        n = sum(int(t.shape[0]) for t in key_pieces)
        k0, v0 = key_pieces[0], value_pieces[0]
        self.device, self.is_initialized = k0.device, True
        cap = max(n, self.capacity)
        self._kbuf, self._vbuf = self._alloc(k0, batch, cap), self._alloc(v0, batch, cap)
        torch.cat(list(key_pieces), dim=0, out=self._kbuf[0, :n])
        torch.cat(list(value_pieces), dim=0, out=self._vbuf[0, :n])
        if batch > 1:
            self._kbuf[1:, :n].copy_(self._kbuf[:1, :n])
            self._vbuf[1:, :n].copy_(self._vbuf[:1, :n])
        self._expose(n)

    @staticmethod
    def _alloc(like: torch.Tensor, batch: int, capacity: int) -> torch.Tensor:
        with torch.inference_mode(False):  # a plain tensor: writable in and out of inference mode
            return torch.empty(batch, capacity, *like.shape[-2:], dtype=like.dtype, device=like.device)

    def _expose(self, n: int) -> None:
        self.keys = self._kbuf[:, :n].transpose(1, 2)
        self.values = self._vbuf[:, :n].transpose(1, 2)
        self._exposed = (self.keys, self.values)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        ours = self._kbuf is not None and self._exposed[0] is self.keys and self._exposed[1] is self.values
        n = self.get_seq_length()
        m = int(key_states.shape[-2])
        if not ours or n + m > self._kbuf.shape[1] or self._kbuf.shape[0] != key_states.shape[0]:
            cap = max(n + m, self.capacity, (self._kbuf.shape[1] * 3 // 2) if ours else 0)
            kbuf = self._alloc(key_states.transpose(1, 2), key_states.shape[0], cap)
            vbuf = self._alloc(value_states.transpose(1, 2), value_states.shape[0], cap)
            if n:
                kbuf[:, :n].copy_(self.keys.transpose(1, 2))
                vbuf[:, :n].copy_(self.values.transpose(1, 2))
            self._kbuf, self._vbuf = kbuf, vbuf
        self._kbuf[:, n:n + m].copy_(key_states.transpose(1, 2))
        self._vbuf[:, n:n + m].copy_(value_states.transpose(1, 2))
        self._expose(n + m)
        return self.keys, self.values


def cache_from_blocks(model: Any, key_blocks: Sequence[Sequence[torch.Tensor]],
                      value_blocks: Sequence[Sequence[torch.Tensor]], *, capacity: int = 0,
                      batch: int = 1) -> DynamicCache:
    """A cache over per-layer K/V given as token-major pieces ``[len, kv_heads, head_dim]`` (a prefix
    cache's blocks, in order), each layer a :class:`PreallocatedLayer` of at least ``capacity``
    positions: the pieces are copied once, back to back (into each of ``batch`` rows), and later
    forwards write in place.

    Equal in values to :func:`cache_from_tensors` of the concatenated pieces; the pieces are never
    written. Models whose cache is not all full-attention ``DynamicLayer`` (sliding windows...) get
    exactly that (transformers' own layers).
    """
    if len(key_blocks) != len(value_blocks):
        raise ValueError(f"got {len(key_blocks)} key layers and {len(value_blocks)} value layers")
    cache = DynamicCache(config=model.config)
    if len(cache.layers) != len(key_blocks):
        raise ValueError(f"model has {len(cache.layers)} layers, got KV for {len(key_blocks)}")
    if any(type(layer) is not DynamicLayer for layer in cache.layers):
        return cache_from_tensors(model, [torch.cat(list(ks), 0).transpose(0, 1)[None].expand(batch, -1, -1, -1)
                                          for ks in key_blocks],
                                  [torch.cat(list(vs), 0).transpose(0, 1)[None].expand(batch, -1, -1, -1)
                                   for vs in value_blocks])
    cache.layers = [PreallocatedLayer(capacity) for _ in key_blocks]
    for layer, ks, vs in zip(cache.layers, key_blocks, value_blocks):
        layer.fill(ks, vs, batch)
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


def rope_inv_freq(config: Any, seq_len: int) -> torch.Tensor | None:
    """The RoPE inverse frequencies (float32 ``[rotary_dim // 2]``) the installed transformers computes for a
    forward whose positions end at ``seq_len`` (tokens), for the config's ``rope_type``; ``None`` for a config
    whose RoPE it does not compute from the config alone (no ``rope_parameters``, per-layer types)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, dict) or "rope_type" not in params:
        return None
    init = ROPE_INIT_FUNCTIONS.get(str(params["rope_type"]))
    if init is None:
        return None
    try:
        inv_freq, _ = init(config, torch.device("cpu"), seq_len=seq_len)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return inv_freq.to(torch.float32)


@torch.inference_mode()
def forward(model: Any, input_ids: Sequence[int] | torch.Tensor, cache: DynamicCache, start: int,
            logits_to_keep: int = 1) -> torch.Tensor:
    """Run ``input_ids`` (``[n]``, or ``[batch, n]`` rows at the same positions) at positions ``start..``
    appending their KV to ``cache`` (of the same batch).

    Returns the first row's logits of the last ``logits_to_keep`` positions, float32 ``[logits_to_keep, vocab]``.
    """
    ids = input_ids if isinstance(input_ids, torch.Tensor) else torch.tensor([list(input_ids)], dtype=torch.long)
    if ids.dim() == 1:
        ids = ids[None]
    use_fast_attention(model)
    device = next(model.parameters()).device
    ids = ids.to(device)
    pos = torch.arange(start, start + ids.shape[1], device=device)[None].expand(ids.shape[0], -1)
    out = model(input_ids=ids, cache=cache, position_ids=pos, use_cache=True, logits_to_keep=logits_to_keep)
    return out.logits[0].float()
