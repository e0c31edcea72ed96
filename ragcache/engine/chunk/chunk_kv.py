"""ChunkKV: one document chunk's KV (dense or quantized) and its storage payload.

The record every chunk store holds (:mod:`ragcache.engine.chunk.stores`), and the one serialised
form every store persists: :meth:`ChunkKV.to_payload` gives named tensors plus string
metadata, :func:`chunk_from_payload` rebuilds and checks them (container version, digest,
key, format tag, shapes, dtypes). Formats: :mod:`ragcache.engine.quant`.
"""

from __future__ import annotations

import hashlib
import json

import torch

from ragcache.engine.quant import KVFormat, QuantizedTensor, expected_shapes
from ragcache.hashing import ChunkHash

__all__ = ["FORMAT", "ChunkKV", "chunk_from_bytes", "chunk_from_payload", "chunk_to_bytes"]

FORMAT = "ragcache-chunk-kv-v2"
"""Container version written into every payload's ``format`` field."""
_FORMAT = FORMAT


class ChunkKV:
    """One document chunk's KV cache, computed after the sink and stored without it.

    Args / attributes:
        key: position-independent chunk hash (model fingerprint, sink ids, token ids, format tag).
        fingerprint: model fingerprint digest the KV was computed with.
        token_ids: the chunk's own token ids, ``n`` of them (re-checked on a hit).
        keys: dense ``[num_layers, kv_heads, n, head_dim]`` post-RoPE keys at :attr:`positions`,
            or their :class:`~ragcache.engine.quant.QuantizedTensor` (KIVI per-channel groups).
        values: dense ``[num_layers, kv_heads, n, head_dim]`` values, or their
            :class:`~ragcache.engine.quant.QuantizedTensor` (per-token groups).
        start: position of the chunk's first token when it was computed (= sink length);
            token ``i`` sits at ``start + i``.

    Reading :attr:`keys` / :attr:`values` always gives dense tensors: the stored ones for a
    dense chunk, or float32 dequantized on each access for an int8 / int4 chunk (blending casts
    them to the model's compute dtype). :attr:`nbytes` counts what is stored (codes, scales and
    zero points for quantized chunks).

    Raises:
        ValueError: K/V of different or non-4-D shapes, a token count that differs from
            ``len(token_ids)``, or quantized K/V whose parameters disagree.
    """

    __slots__ = ("key", "fingerprint", "token_ids", "start", "_k", "_v", "kv_format")

    def __init__(self, key: ChunkHash, fingerprint: str, token_ids: list[int], keys: torch.Tensor | QuantizedTensor,
                 values: torch.Tensor | QuantizedTensor, start: int) -> None:
        self.key, self.fingerprint, self.token_ids, self.start = key, fingerprint, list(token_ids), int(start)
        self._k, self._v = keys, values
        kq, vq = isinstance(keys, QuantizedTensor), isinstance(values, QuantizedTensor)
        k_shape = tuple(keys.shape)
        if kq != vq or k_shape != tuple(values.shape) or len(k_shape) != 4:
            raise ValueError(f"keys {k_shape} and values {tuple(values.shape)} must both be "
                             "[num_layers, kv_heads, n_tokens, head_dim], both dense or both quantized")
        if kq:
            if (keys.bits, keys.axis, values.axis) != (values.bits, "channel", "token") or \
                    values.group_size != min(keys.group_size, k_shape[3]):
                raise ValueError("quantized keys must be per-channel and values per-token with the same bits/group size")
            self.kv_format = KVFormat(keys.bits, keys.group_size, torch.float32)
        else:
            self.kv_format = KVFormat.of("fp16", dtype=keys.dtype)
        if k_shape[2] != len(self.token_ids):
            raise ValueError(f"KV covers {k_shape[2]} tokens but token_ids has {len(self.token_ids)}")

    def __repr__(self) -> str:
        return (f"ChunkKV(key={self.key[:12]}..., n_tokens={self.n_tokens}, start={self.start}, "
                f"format={self.kv_format.tag}, nbytes={self.nbytes})")

    @property
    def keys(self) -> torch.Tensor:
        """Dense ``[num_layers, kv_heads, n, head_dim]`` keys (float32 when dequantized)."""
        return self._k.dequantize() if isinstance(self._k, QuantizedTensor) else self._k

    @property
    def values(self) -> torch.Tensor:
        """Dense ``[num_layers, kv_heads, n, head_dim]`` values (float32 when dequantized)."""
        return self._v.dequantize() if isinstance(self._v, QuantizedTensor) else self._v

    @property
    def stored_keys(self) -> torch.Tensor | QuantizedTensor:
        return self._k

    @property
    def stored_values(self) -> torch.Tensor | QuantizedTensor:
        return self._v

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """``(num_layers, kv_heads, n_tokens, head_dim)``."""
        return tuple(int(s) for s in self._k.shape)  # type: ignore[return-value]

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def positions(self) -> torch.Tensor:
        """int64 ``[n]``: the positions the KV was computed at."""
        return torch.arange(self.start, self.start + self.n_tokens, dtype=torch.int64)

    @property
    def dtype(self) -> torch.dtype:
        """dtype of :attr:`keys` / :attr:`values` as read (float32 for quantized chunks)."""
        return self.kv_format.dtype

    @property
    def nbytes(self) -> int:
        """Bytes held by the stored K and V (codes, scales and zero points included)."""
        if isinstance(self._k, QuantizedTensor):
            return self._k.nbytes + self._v.nbytes  # type: ignore[union-attr]
        return self._k.numel() * self._k.element_size() + self._v.numel() * self._v.element_size()

    # -- serialisation (every store persists exactly these tensors and metadata) ----------
    def to_payload(self) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """Tensors and string metadata that fully describe this chunk (see :func:`chunk_from_payload`).

        Tensors: ``token_ids`` (int64 ``[n]``); dense: ``keys``, ``values``; quantized:
        ``keys.codes``, ``keys.scale``, ``keys.zero``, ``values.codes``, ``values.scale``,
        ``values.zero``. Metadata: ``format`` (container version), ``key``, ``fingerprint``,
        ``kv_format`` (the format tag, e.g. ``"float16"`` or ``"int4-g64"``), ``shape``
        (JSON ``[L, H, n, D]``), ``start``, ``n_tokens``, ``dtype`` for dense chunks, and
        ``digest`` (sha256 over every tensor's name, dtype, shape and bytes).
        """
        meta = {"format": _FORMAT, "key": self.key, "fingerprint": self.fingerprint, "kv_format": self.kv_format.tag,
                "shape": json.dumps(list(self.shape)), "start": str(self.start), "n_tokens": str(self.n_tokens)}
        tensors = {"token_ids": torch.tensor(self.token_ids, dtype=torch.int64)}
        for name, t in (("keys", self._k), ("values", self._v)):
            if isinstance(t, QuantizedTensor):
                tensors.update({f"{name}.codes": t.codes.contiguous(), f"{name}.scale": t.scale.contiguous(),
                                f"{name}.zero": t.zero.contiguous()})
            else:
                tensors[name] = t.contiguous()
                meta["dtype"] = str(t.dtype).replace("torch.", "")
        meta["digest"] = _digest(tensors)
        return tensors, meta


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes (detects flipped bytes in a file or value)."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{list(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def chunk_from_payload(tensors: dict[str, torch.Tensor], meta: dict[str, str], key: str) -> ChunkKV:
    """Rebuild a :class:`ChunkKV` from :meth:`ChunkKV.to_payload` output, checking every field.

    A store calls this on what it read; any error means the stored value is unusable and
    must be treated as a logged miss.

    Raises:
        ValueError: wrong container format or key, unknown format tag, or any tensor whose
            dtype / shape does not match the metadata (truncated, corrupt or foreign data).
    """
    if meta.get("format") != _FORMAT or meta.get("key") != key:
        raise ValueError(f"metadata format/key mismatch: {meta.get('format')!r}")
    if meta.get("digest") != _digest(tensors):
        raise ValueError("tensor bytes do not match the stored digest (corrupt data)")
    fmt = KVFormat.parse(meta["kv_format"])
    shape = tuple(json.loads(meta["shape"]))
    if len(shape) != 4 or int(meta["n_tokens"]) != shape[2]:
        raise ValueError(f"metadata shape {shape} does not fit n_tokens={meta.get('n_tokens')}")
    token_ids = tensors["token_ids"]
    if token_ids.dtype != torch.int64 or tuple(token_ids.shape) != (shape[2],):
        raise ValueError(f"token_ids {token_ids.dtype} {tuple(token_ids.shape)} != int64 [{shape[2]}]")
    parts = []
    for name, axis in (("keys", "channel"), ("values", "token")):
        if not fmt.quantized:
            t = tensors[name]
            if tuple(t.shape) != shape or t.dtype != fmt.dtype or meta.get("dtype") != fmt.tag:
                raise ValueError(f"{name} {t.dtype} {tuple(t.shape)} != metadata {fmt.tag} {shape}")
            parts.append(t)
            continue
        want = expected_shapes(shape, fmt.bits, fmt.group_size, axis)  # type: ignore[arg-type]
        got = {p: tensors[f"{name}.{p}"] for p in ("codes", "scale", "zero")}
        for p, t in got.items():
            dtype = torch.uint8 if p == "codes" else torch.float16
            if tuple(t.shape) != want[p] or t.dtype != dtype:
                raise ValueError(f"{name}.{p} {t.dtype} {tuple(t.shape)} != {dtype} {want[p]} for {fmt.tag}")
        g = fmt.group_size if axis == "channel" else min(fmt.group_size, shape[3])
        parts.append(QuantizedTensor(got["codes"], got["scale"], got["zero"], fmt.bits, g, axis, shape))  # type: ignore[arg-type]
    return ChunkKV(ChunkHash(key), meta["fingerprint"], token_ids.tolist(), parts[0], parts[1], int(meta["start"]))


def chunk_to_bytes(kv: ChunkKV) -> bytes:
    """One byte string (safetensors layout: header with the metadata, then the tensors) for a
    store that holds values, e.g. a remote key-value store; the inverse is :func:`chunk_from_bytes`."""
    from safetensors.torch import save

    tensors, meta = kv.to_payload()
    return save(tensors, metadata=meta)


def chunk_from_bytes(data: bytes, key: str) -> ChunkKV:
    """Rebuild a chunk from :func:`chunk_to_bytes` output, checked as in :func:`chunk_from_payload`.

    Raises:
        ValueError: truncated or corrupt bytes, or any failed check (a logged miss for the store).
    """
    from safetensors.torch import load

    try:
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        tensors = load(bytes(data))
    except Exception as e:  # noqa: BLE001 - whatever safetensors or json raise, the value is unusable
        raise ValueError(f"not a readable chunk payload ({type(e).__name__}: {e})") from None
    meta = header.get("__metadata__") or {}
    try:
        return chunk_from_payload(tensors, meta, key)
    except KeyError as e:
        raise ValueError(f"chunk payload lacks {e}") from None
