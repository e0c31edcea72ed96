"""Rotary position embedding (RoPE) for re-positioning cached keys.

A chunk's KV is computed once at the positions it had after the sink and reused at
whatever position the document lands in a later prompt. RoPE rotates each query / key
pair of dimensions by ``position * inv_freq``, and rotations compose, so a key cached at
position ``p`` becomes the key at ``q`` by one more rotation by ``q - p``
(CacheBlend, Yao et al., EuroSys 2025, arXiv 2405.16444, §4.2 / appendix; RoFormer, Su et
al. 2021, §3.4). V carries no position and is reused as is.

Supported variants: the default RoPE and Llama-3 frequency scaling (``rope_type`` of
``"default"`` and ``"llama3"``). Any other variant (linear, dynamic NTK, YaRN, LongRoPE,
partial rotary) raises :class:`NotImplementedError` naming it; the engine then falls back
to a full prefill.

All rotations run in float32 whatever the cache dtype, and cast back at the end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

SUPPORTED_ROPE_TYPES = ("default", "llama3")


def _rope_parameters(config: Any) -> dict[str, Any]:
    params = getattr(config, "rope_parameters", None)
    if params is None:  # transformers < 5 configs
        params = dict(getattr(config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    if isinstance(params, dict) and "rope_type" not in params and "type" in params:
        params = {**params, "rope_type": params["type"]}
    if not isinstance(params, dict) or "rope_theta" not in params:
        # Per-layer-type dicts (e.g. {"full_attention": {...}, "sliding_attention": {...}}) and the like.
        raise NotImplementedError(f"RoPE parameters {params!r} (per-layer or unknown layout) are not supported")
    return dict(params)


@dataclass(frozen=True, slots=True)
class RopeSpec:
    """The inverse frequencies of a model's RoPE.

    Attributes:
        rope_type: ``"default"`` or ``"llama3"``.
        inv_freq: float32 ``[head_dim // 2]`` inverse frequencies (radians per position).
        head_dim: per-head width the rotation applies to.
    """

    rope_type: str
    inv_freq: torch.Tensor
    head_dim: int

    @classmethod
    def from_config(cls, config: Any) -> RopeSpec:
        """Read ``config.rope_parameters`` (or the legacy ``rope_scaling`` / ``rope_theta``).

        Raises:
            NotImplementedError: the model uses a RoPE variant other than default / llama3, or
                a partial rotary factor; the message names the variant.
        """
        params = _rope_parameters(config)
        rope_type = str(params.get("rope_type", "default"))
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise NotImplementedError(
                f"RoPE variant {rope_type!r} is not supported for cached-KV re-rotation "
                f"(supported: {', '.join(SUPPORTED_ROPE_TYPES)}); use a full prefill for this model"
            )
        partial = float(params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0) or 1.0))
        if partial != 1.0:
            raise NotImplementedError(f"RoPE variant 'partial_rotary_factor={partial}' is not supported")
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        base = float(params["rope_theta"])
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim))
        if rope_type == "llama3":
            inv_freq = _llama3_scale(inv_freq, params)
        return cls(rope_type, inv_freq, int(head_dim))

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of ``positions * inv_freq``, float32 ``[len(positions), head_dim]``.

        ``positions`` may be negative (a rotation backwards).
        """
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq.to(positions.device)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def _llama3_scale(inv_freq: torch.Tensor, params: dict[str, Any]) -> torch.Tensor:
    """Llama-3.1 frequency scaling (Meta's ``apply_scaling``): low frequencies divided by
    ``factor``, high ones kept, a smooth interpolation in between."""
    try:
        factor = float(params["factor"])
        low = float(params["low_freq_factor"])
        high = float(params["high_freq_factor"])
        old_len = float(params["original_max_position_embeddings"])
    except KeyError as e:
        raise NotImplementedError(f"llama3 RoPE parameters lack {e.args[0]!r}") from None
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last dimension (the Llama / NeoX pairing)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x [..., seq, head_dim]`` by per-position ``cos``/``sin [seq, head_dim]``.

    Computed in float32; returns ``x``'s dtype.
    """
    xf = x.to(torch.float32)
    return (xf * cos + rotate_half(xf) * sin).to(x.dtype)


def rerotate_keys(keys: torch.Tensor, delta: int | torch.Tensor, spec: RopeSpec,
                  out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Move post-RoPE keys from their cached positions to new ones.

    Args:
        keys: ``[..., seq, head_dim]`` keys after RoPE (any leading dims: layers, heads).
        delta: new position minus cached position, one int for the whole chunk or an int
            tensor ``[seq]``.
        spec: the model's :class:`RopeSpec`.
        out_dtype: dtype of the result (default ``keys.dtype``).

    Returns:
        Keys at the new positions, ``out_dtype``, same shape. The rotation runs in float32.
    """
    seq = keys.shape[-2]
    if isinstance(delta, int):
        delta_t = torch.full((seq,), delta, dtype=torch.int64, device=keys.device)
    else:
        delta_t = delta.to(device=keys.device, dtype=torch.int64)
        if delta_t.shape != (seq,):
            raise ValueError(f"delta has shape {tuple(delta_t.shape)}; expected ({seq},) or an int")
    out_dtype = out_dtype or keys.dtype
    if isinstance(delta, int) and delta == 0:
        return keys.to(out_dtype)
    cos, sin = spec.cos_sin(delta_t)
    kf = keys.to(torch.float32)
    return (kf * cos + rotate_half(kf) * sin).to(out_dtype)
