"""What the chunk cache found for one request's documents: typed hit and miss records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ragcache.engine.chunk.chunk_kv import ChunkKV
from ragcache.hashing import ChunkHash

__all__ = ["ChunkHit", "ChunkMiss", "ChunkPlan"]


class ChunkHit(NamedTuple):
    """A document found in the chunk cache: prompt positions ``start .. end - 1`` (tokens) and its KV."""

    start: int
    end: int
    kv: ChunkKV


class ChunkMiss(NamedTuple):
    """A document not found: prompt positions ``start .. end - 1``, its token ids and the key it
    was looked up under (computed in the request's context, stored afterwards under that key)."""

    start: int
    end: int
    token_ids: list[int]
    key: ChunkHash


@dataclass(slots=True)
class ChunkPlan:
    """The chunk cache's answer for the documents of one request (after the prefix hit), in prompt order.

    Built by :meth:`ragcache.engine.chunk.bound.BoundChunkCache.lookup_many` from one batched
    store read (one round trip to a shared store).

    Attributes:
        hits: :class:`ChunkHit` records of documents found in the chunk cache.
        missed: :class:`ChunkMiss` records of documents not found.
    """

    hits: list[ChunkHit] = field(default_factory=list)
    missed: list[ChunkMiss] = field(default_factory=list)

    @property
    def reusable_tokens(self) -> int:
        """Tokens the hits cover (what blending could reuse)."""
        return sum(h.end - h.start for h in self.hits)
