"""Chunk KV storage formats: dense (float16 / bfloat16 / float32), int8 and int4 (KIVI grouping).

KIVI (Liu et al., "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache", ICML 2024,
arXiv 2402.02750, §3): keys have a few outlier *channels*, values do not, so

- keys are quantized **per channel**: each channel's values along the tokens are split into
  groups of ``group_size`` tokens, one scale and zero point per (layer, head, channel, group);
- values are quantized **per token**: each token's channels are split into groups of
  ``min(group_size, head_dim)`` channels, one scale and zero point per (layer, head, token, group).

Each group is quantized asymmetrically with min-max: ``zero = min``, ``scale = (max - min) /
(2**bits - 1)``, ``code = round((x - zero) / scale)``, ``x_hat = code * scale + zero``. Scales
and zero points are stored in float16, rounded outwards (zero down, scale up) before the codes
are computed, so every element lies inside its group's range and the round trip error is at
most ``scale / 2`` per element (plus float32 rounding). A partial last group (a chunk whose
token count is not a multiple of ``group_size``) gets its own scale; the codes of padding are
never stored. int4 codes are packed two per byte along ``head_dim``, the even channel in the
low nibble.

Why not optimum-quanto or HQQ for *storage* (both install here, and
:class:`transformers.QuantizedCache` uses them for the *decode* cache, see
``LocalEngine(decode_cache="quantized")``): a stored chunk needs a file layout that stays the
same across devices and library versions, and a ragged token axis. quanto's
``WeightQBitsTensor`` only has 2- and 4-bit group-wise types (its int8 is symmetric per-axis,
no groups), and its packed data is a kernel layout private to the tensor subclass (repacked
for the CUDA kernels); HQQ's ``Quantizer`` groups by reshaping the flat tensor (requires the
element count to divide by the group size, so a 37-token chunk cannot be grouped along tokens)
and stores its metadata as a Python dict. The arithmetic here is the same min-max scheme
quanto's ``MaxOptimizer`` computes (quanto aligns the grid on an integer zero point, so single
values differ by up to a step, but ``tests/unit/test_kvquant.py`` checks that the int4 error
statistics match quanto's), in ~150 lines of torch with a documented layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ragcache.limits import DECODE_BACKENDS  # the decode cache backends (re-exported)

FormatName = Literal["fp16", "int8", "int4"]
Axis = Literal["channel", "token"]

_DENSE = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
_SCALE_DTYPE = torch.float16
_SCALE_BYTES = 2


@dataclass(frozen=True, slots=True)
class KVFormat:
    """How a chunk's K and V are stored.

    Attributes:
        bits: 4 or 8 for the integer formats, 0 for dense storage.
        group_size: KIVI group size (tokens per key group, channels per value group, capped at
            ``head_dim``); 0 for dense storage.
        dtype: the dense storage dtype (dense formats only); integer formats dequantize to float32.
    """

    bits: int = 0
    group_size: int = 0
    dtype: torch.dtype = torch.float16

    @classmethod
    def of(cls, name: str, *, group_size: int = 64, dtype: torch.dtype = torch.float16) -> KVFormat:
        """The format called ``name``: ``"fp16"`` (dense in ``dtype``, float16 unless given),
        ``"int8"`` or ``"int4"`` (KIVI groups of ``group_size``).

        Raises:
            ValueError: an unknown name, a group size < 1, or an unsupported dense dtype.
        """
        if name == "fp16":
            if dtype not in _DENSE.values():
                raise ValueError(f"dense chunk KV dtype must be float16, bfloat16 or float32; got {dtype}")
            return cls(0, 0, dtype)
        if name not in ("int8", "int4"):
            raise ValueError(f"kv_format must be 'fp16', 'int8' or 'int4'; got {name!r}")
        if int(group_size) < 1:
            raise ValueError(f"group_size must be >= 1 (tokens per key group); got {group_size}")
        return cls(8 if name == "int8" else 4, int(group_size), torch.float32)

    @classmethod
    def parse(cls, tag: str) -> KVFormat:
        """Inverse of :attr:`tag` (``"float16"``, ``"int4-g64"``, ...).

        Raises:
            ValueError: an unknown tag.
        """
        if tag in _DENSE:
            return cls(0, 0, _DENSE[tag])
        kind, _, g = tag.partition("-g")
        if kind in ("int8", "int4") and g.isdigit() and int(g) >= 1:
            return cls.of(kind, group_size=int(g))
        raise ValueError(f"unknown chunk KV format tag {tag!r}")

    @property
    def quantized(self) -> bool:
        return self.bits > 0

    @property
    def name(self) -> str:
        """``"fp16"`` (any dense dtype), ``"int8"`` or ``"int4"``."""
        return f"int{self.bits}" if self.quantized else "fp16"

    @property
    def tag(self) -> str:
        """Canonical string of the format and its parameters: part of the chunk key and metadata."""
        return f"int{self.bits}-g{self.group_size}" if self.quantized else str(self.dtype).replace("torch.", "")

    def nbytes(self, num_layers: int, kv_heads: int, n_tokens: int, head_dim: int) -> int:
        """Stored bytes of one chunk's K and V (codes, scales and zero points), without token ids."""
        elems = num_layers * kv_heads * n_tokens * head_dim
        if not self.quantized:
            return 2 * elems * torch.finfo(self.dtype).bits // 8
        codes = elems * self.bits // 8
        key_groups = num_layers * kv_heads * head_dim * math.ceil(n_tokens / self.group_size)
        gv = min(self.group_size, head_dim)
        value_groups = num_layers * kv_heads * n_tokens * math.ceil(head_dim / gv)
        return 2 * codes + 2 * _SCALE_BYTES * (key_groups + value_groups)

    def bytes_per_token(self, num_layers: int, kv_heads: int, head_dim: int, n_tokens: int = 1 << 20) -> float:
        """KV bytes per token of a chunk of ``n_tokens`` (default: the long-chunk limit)."""
        return self.nbytes(num_layers, kv_heads, n_tokens, head_dim) / n_tokens


@dataclass(slots=True)
class QuantizedTensor:
    """Group-wise asymmetric integer codes of a ``[L, H, T, D]`` tensor (see module doc).

    Attributes:
        codes: uint8; ``[L, H, T, D]`` for 8 bits, ``[L, H, T, D // 2]`` for 4 bits.
        scale / zero: float16; ``[L, H, D, ceil(T / g)]`` for ``axis="channel"`` (keys),
            ``[L, H, T, ceil(D / g)]`` for ``axis="token"`` (values).
        bits: 4 or 8.
        group_size: g (for ``axis="token"`` already capped at ``D``).
        axis: ``"channel"`` (groups run along tokens) or ``"token"`` (groups run along channels).
        shape: ``(L, H, T, D)`` of the dequantized tensor.
    """

    codes: torch.Tensor
    scale: torch.Tensor
    zero: torch.Tensor
    bits: int
    group_size: int
    axis: Axis
    shape: tuple[int, int, int, int]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scale, self.zero))

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The ``[L, H, T, D]`` tensor ``code * scale + zero`` (computed in float32), in ``dtype``."""
        codes = _unpack4(self.codes) if self.bits == 4 else self.codes
        x = _to_groups(codes.float(), self.axis, self.group_size)  # [..., n_groups, g]
        x = x * self.scale.float()[..., None] + self.zero.float()[..., None]
        return _from_groups(x, self.axis, self.shape).to(dtype)


def expected_shapes(shape: tuple[int, ...], bits: int, group_size: int, axis: Axis) -> dict[str, tuple[int, ...]]:
    """Shapes of ``codes`` / ``scale`` / ``zero`` for a ``[L, H, T, D]`` tensor (used to check stored files)."""
    L, H, T, D = shape
    g = _group(axis, group_size, D)
    groups = (L, H, D, math.ceil(T / g)) if axis == "channel" else (L, H, T, math.ceil(D / g))
    return {"codes": (L, H, T, D // 2 if bits == 4 else D), "scale": groups, "zero": groups}


def quantize(x: torch.Tensor, bits: int, group_size: int, axis: Axis) -> QuantizedTensor:
    """Quantize ``x`` ``[L, H, T, D]`` (any float dtype) to ``bits`` with KIVI groups along ``axis``.

    Raises:
        ValueError: wrong rank, ``bits`` not 4 or 8, odd ``head_dim`` for 4 bits, non-finite
            values, or values outside float16's range (scales are float16).
    """
    if x.dim() != 4:
        raise ValueError(f"expected a [num_layers, kv_heads, n_tokens, head_dim] tensor; got shape {tuple(x.shape)}")
    if bits not in (4, 8):
        raise ValueError(f"bits must be 4 or 8; got {bits}")
    if bits == 4 and x.shape[-1] % 2:
        raise ValueError(f"int4 packs two channels per byte: head_dim must be even, got {x.shape[-1]}")
    xf = x.detach().float()
    if not torch.isfinite(xf).all():
        raise ValueError("cannot quantize KV with NaN or infinite values")
    shape = tuple(int(s) for s in x.shape)
    g = _group(axis, group_size, shape[3])
    groups = _to_groups(xf, axis, g, pad="edge")
    lo, hi = groups.amin(-1), groups.amax(-1)
    qmax = (1 << bits) - 1
    zero = _round_fp16(lo, down=True)
    scale = _round_fp16((hi - zero.float()) / qmax, down=False)
    if not (torch.isfinite(zero).all() and torch.isfinite(scale).all()):
        raise ValueError("KV values exceed float16's range (scales are float16); store this model's chunks as fp16/fp32")
    s = scale.float()[..., None]
    inv = torch.where(s > 0, 1.0 / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(s))
    codes = torch.round((groups - zero.float()[..., None]) * inv).clamp_(0, qmax).to(torch.uint8)
    codes = _from_groups(codes, axis, shape)
    if bits == 4:
        codes = _pack4(codes)
    return QuantizedTensor(codes.contiguous(), scale.contiguous(), zero.contiguous(), bits, g, axis, shape)


def quantize_kv(keys: torch.Tensor, values: torch.Tensor, fmt: KVFormat) -> tuple[QuantizedTensor, QuantizedTensor]:
    """KIVI: keys per channel, values per token, both with ``fmt``'s bits and group size."""
    if not fmt.quantized:
        raise ValueError(f"{fmt.tag} is a dense format; nothing to quantize")
    return (quantize(keys, fmt.bits, fmt.group_size, "channel"),
            quantize(values, fmt.bits, fmt.group_size, "token"))


# -- helpers -------------------------------------------------------------------------------
def _group(axis: Axis, group_size: int, head_dim: int) -> int:
    return int(group_size) if axis == "channel" else min(int(group_size), head_dim)


def _round_fp16(x: torch.Tensor, *, down: bool) -> torch.Tensor:
    """float32 -> float16, rounded towards -inf (``down``) or +inf."""
    h = x.to(_SCALE_DTYPE)
    bad = h.float() > x if down else h.float() < x
    target = torch.full_like(h, -math.inf if down else math.inf)
    return torch.where(bad, torch.nextafter(h, target), h)


def _to_groups(x: torch.Tensor, axis: Axis, g: int, pad: str = "zero") -> torch.Tensor:
    """``[L, H, T, D]`` -> ``[L, H, D, ceil(T/g), g]`` (channel) or ``[L, H, T, ceil(D/g), g]`` (token).

    The grouped axis is padded to a multiple of ``g`` by repeating its last element (``edge``,
    so min/max are unchanged) or with zeros (for codes, whose padding is dropped again).
    """
    if axis == "channel":
        x = x.transpose(2, 3)
    n = x.shape[-1]
    extra = -n % g
    if extra:
        fill = x[..., -1:].expand(*x.shape[:-1], extra) if pad == "edge" else x.new_zeros(*x.shape[:-1], extra)
        x = torch.cat([x, fill], dim=-1)
    return x.reshape(*x.shape[:-1], -1, g)


def _from_groups(x: torch.Tensor, axis: Axis, shape: tuple[int, ...]) -> torch.Tensor:
    x = x.reshape(*x.shape[:-2], -1)
    n = shape[2] if axis == "channel" else shape[3]
    x = x[..., :n]
    return x.transpose(2, 3).contiguous() if axis == "channel" else x.contiguous()


def _pack4(codes: torch.Tensor) -> torch.Tensor:
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def _unpack4(packed: torch.Tensor) -> torch.Tensor:
    return torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


# -- decode cache --------------------------------------------------------------------------


def quantized_decode_cache(model: object, cache: object, *, backend: str = "quanto", nbits: int = 4,
                           residual_length: int = 128, q_group_size: int | None = None,
                           sink_tokens: int = 0) -> object:
    """Hand a prefilled KV cache over to a transformers ``QuantizedCache`` for decoding.

    How: a ``QuantizedCache`` layer quantizes whatever its *first* ``update`` receives and keeps
    later tokens in a full-precision residual until ``residual_length`` of them have accumulated,
    then re-quantizes (KIVI's residual, Liu et al. 2024, §3.3). So each layer's prefilled K/V
    (from the exact prefix cache, a CacheBlend fusion, or a plain prefill, all of which produce
    a ``DynamicCache``) is passed once to that layer's ``update``: the whole prompt is quantized
    and the dynamic cache can be dropped. The last prompt token's logits were already computed
    from the exact cache, so the first generated token is the same as with ``DynamicCache``.

    Args:
        model: the causal LM (its config sizes the cache).
        cache: a ``DynamicCache`` with ``[1, kv_heads, n, head_dim]`` K/V per layer.
        backend: ``"quanto"`` (optimum-quanto, nbits 2 or 4), ``"hqq"`` (nbits 1-4 or 8) or
            ``"fp8"`` (per-tensor float8, ignores nbits / group size / residual length).
        sink_tokens: the first positions kept in full precision (attention sinks, Xiao et al.,
            ICLR 2024, §3); only the rest is quantized.
        nbits / residual_length / q_group_size: transformers' ``QuantizedCache`` options; the
            group size defaults to ``head_dim`` (with the backends' default axis 0, one scale per
            token and head; quanto needs the group size to divide ``kv_heads * n * head_dim``,
            which ``head_dim`` always does).

    Returns:
        A ``transformers.QuantizedCache`` covering the same ``n`` positions.

    Raises:
        ValueError: an unknown backend or bits the backend does not support.
        ImportError: the backend's package is missing (``pip install optimum-quanto`` / ``hqq``).
    """
    from transformers import QuantizedCache

    from ragcache.engine import kv as kvb

    if backend not in DECODE_BACKENDS:
        raise ValueError(f"decode cache backend must be one of {DECODE_BACKENDS}; got {backend!r}")
    cfg = model.config  # type: ignore[attr-defined]
    if q_group_size is None:
        q_group_size = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    opts = {} if backend == "fp8" else {"nbits": int(nbits), "residual_length": int(residual_length),
                                        "q_group_size": int(q_group_size)}
    qc = QuantizedCache(backend=backend, config=cfg, **opts)
    keys, values = kvb.cache_tensors(cache)  # type: ignore[arg-type]
    if len(keys) != len(qc.layers):
        raise ValueError(f"prefilled cache has {len(keys)} layers but the model has {len(qc.layers)}")
    for layer, k, v in zip(qc.layers, keys, values):
        if sink_tokens > 0:
            _keep_sink(layer, min(int(sink_tokens), k.shape[-2] - 1))
        layer.update(k, v)
    return qc


def _keep_sink(layer: Any, n: int) -> None:
    """Make ``layer`` (a ``QuantizedLayer``) keep the first ``n`` positions of its first update in full
    precision and put them back in front of every K/V it returns (only the rest is quantized)."""
    if n <= 0:
        return
    quantized_update = layer.update
    layer._sink_kv = None

    def update(key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if layer._sink_kv is None:
            layer._sink_kv = (key_states[..., :n, :].clone(), value_states[..., :n, :].clone())
            k, v = quantized_update(key_states[..., n:, :], value_states[..., n:, :], *args, **kwargs)
            layer.cumulative_length += n
        else:
            k, v = quantized_update(key_states, value_states, *args, **kwargs)
        sk, sv = layer._sink_kv
        return torch.cat([sk.to(k.dtype), k], dim=-2), torch.cat([sv.to(v.dtype), v], dim=-2)

    layer.update = update


def decode_cache_nbytes(cache: object) -> int:
    """Bytes a decode cache holds now: dense K/V for a ``DynamicCache``; quantized data (codes,
    scales, zero points, any packing) plus the full-precision residual for a ``QuantizedCache``."""
    total = 0
    for layer in cache.layers:  # type: ignore[attr-defined]
        parts = [layer.keys, layer.values, *(getattr(layer, "_sink_kv", None) or ())]
        for q in (getattr(layer, "_quantized_keys", None), getattr(layer, "_quantized_values", None)):
            if q is not None:
                parts.extend(_tensor_leaves(q))
        total += sum(t.numel() * t.element_size() for t in parts if isinstance(t, torch.Tensor))
    return total


def _tensor_leaves(x: object) -> list[torch.Tensor]:
    """Plain tensors inside a quantized state (quanto tensor subclasses, HQQ (tensor, meta), fp8 tuples)."""
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in _tensor_leaves(item)]
    if isinstance(x, dict):
        return [t for item in x.values() for t in _tensor_leaves(item)]
    if isinstance(x, torch.Tensor):
        flatten = getattr(x, "__tensor_flatten__", None)
        if flatten is not None and type(x) is not torch.Tensor:
            names, _ = flatten()
            return [t for n in names for t in _tensor_leaves(getattr(x, n))]
        return [x]
    return []
