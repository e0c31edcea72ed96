"""Typed, process-independent hashes over a canonical, length-framed encoding.

Every key in ragcache is a sha256 digest of bytes produced here. Two inputs
that differ never serialise to the same bytes: token ids are fixed-width
(8-byte little-endian) integers, strings and byte fields carry a length prefix,
and every field carries a one-byte type tag. Python's ``hash()`` is never used
(it is salted per process).
"""

from __future__ import annotations

import hashlib
import json
import struct
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any, NewType

BlockHash = NewType("BlockHash", str)
"""Hex sha256 of one prefix-cache block, chained to its parent."""
ChunkHash = NewType("ChunkHash", str)
"""Hex sha256 of one document chunk's KV key (position independent)."""
ContentHash = NewType("ContentHash", str)
"""Hex sha256 of a text's UTF-8 bytes."""

_U64 = struct.Struct("<Q")


def _frame(tag: bytes, payload: bytes) -> bytes:
    return tag + _U64.pack(len(payload)) + payload


def encode_tokens(token_ids: Sequence[int]) -> bytes:
    """Encode token ids as a count followed by fixed-width 8-byte integers.

    Raises:
        ValueError: if an id is negative or does not fit in 63 bits.
    """
    out = bytearray(_U64.pack(len(token_ids)))
    for t in token_ids:
        t = int(t)
        if t < 0 or t >= 1 << 63:
            raise ValueError(f"token id {t} out of range: ids must be in [0, 2**63)")
        out += _U64.pack(t)
    return bytes(out)


def encode(value: Any) -> bytes:
    """Canonical, length-framed encoding of JSON-like values.

    Supports None, bool, int, float, str, bytes, lists/tuples and dicts (keys
    sorted). Used for extra keys and partition keys.
    """
    if value is None:
        return b"N"
    if isinstance(value, bool):
        return b"B1" if value else b"B0"
    if isinstance(value, int):
        return _frame(b"I", str(value).encode())
    if isinstance(value, float):
        return _frame(b"F", repr(value).encode())
    if isinstance(value, str):
        return _frame(b"S", value.encode("utf-8"))
    if isinstance(value, bytes | bytearray):
        return _frame(b"Y", bytes(value))
    if isinstance(value, list | tuple):
        return _frame(b"L", b"".join(encode(v) for v in value))
    if isinstance(value, dict):
        items = sorted(((str(k), v) for k, v in value.items()), key=lambda kv: kv[0])
        return _frame(b"D", b"".join(encode(k) + encode(v) for k, v in items))
    raise TypeError(f"cannot hash value of type {type(value).__name__}; use JSON-like values")


def sha256_hex(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(_frame(b"P", p))
    return h.hexdigest()


def root_hash(model_fingerprint: str, namespace: str | None = None) -> BlockHash:
    """Parent hash of the first block: model identity plus an optional namespace (cache salt)."""
    return BlockHash(sha256_hex(b"ragcache-root-v1", encode(model_fingerprint), encode(namespace)))


def hash_block(parent: BlockHash, token_ids: Sequence[int], extra: Iterable[Any] | None = None) -> BlockHash:
    """Chained block hash: sha256(parent, token ids as fixed-width ints, extra keys).

    Follows vLLM's automatic prefix caching (``kv_cache_utils.hash_block_tokens``).
    """
    return BlockHash(
        sha256_hex(b"block", parent.encode(), encode_tokens(token_ids), encode(list(extra or ())))
    )


def hash_chunk(model_fingerprint: str, sink_ids: Sequence[int], token_ids: Sequence[int],
               kv_format: str = "float16", namespace: str | None = None) -> ChunkHash:
    """Position-independent key of a document chunk's KV (CacheBlend, Yao et al. 2025, §5).

    ``kv_format`` is the storage format tag (:attr:`ragcache.engine.quant.KVFormat.tag`, e.g.
    ``"float16"``, ``"int4-g64"``): the same document stored in two formats has two keys, so a
    chunk is never read back in a format other than the one asked for. ``namespace`` is the
    engine's cache salt (as in :func:`root_hash` and vLLM's ``cache_salt``): engines with
    different namespaces never share a chunk, even in one store; ``None`` is a namespace of its
    own (it frames differently from every string, ``""`` included).
    """
    return ChunkHash(
        sha256_hex(b"chunk", encode(model_fingerprint), encode_tokens(sink_ids), encode_tokens(token_ids),
                   encode(kv_format), encode(namespace))
    )


def normalize_text(text: str) -> str:
    """NFC-normalise, turn ``\\r\\n``/``\\r`` into ``\\n`` and strip outer whitespace."""
    return unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n")).strip()


def content_hash(text: str) -> ContentHash:
    """Hex sha256 of the normalised text (:func:`normalize_text`), UTF-8: a document's identity.

    The one document hash: ``Segment.content_hash``, semantic partition keys and
    ``SemanticCache.invalidate(text)`` all use it, so the text a caller passes, with or without
    ``\r\n`` or outer whitespace, always names the same document."""
    return ContentHash(hashlib.sha256(normalize_text(text).encode("utf-8")).hexdigest())


def hash_value(value: Any) -> str:
    """sha256 of the canonical encoding of a JSON-like value (partition keys)."""
    return sha256_hex(b"value", encode(value))


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no insignificant whitespace (stable bytes for the same content)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
