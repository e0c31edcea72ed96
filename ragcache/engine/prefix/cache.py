"""Exact prefix KV cache: chained block hashes, reference counts, LRU eviction under a byte budget.

The scheme follows vLLM's automatic prefix caching (``vllm/v1/core/kv_cache_utils.py``,
``block_pool.py``): a prompt is cut into full blocks of ``block_size`` tokens; block *i*'s
hash is ``sha256(hash of block i-1, its token ids, extra keys)`` and block 0's parent is a
root hash of the model fingerprint plus the request's KV salt (``salt=``,
:func:`ragcache.engine.keys.kv_salt`). A lookup walks the chain
from the root and stops at the first miss; stored token ids are re-checked on every hit.

Stored KV is immutable: blocks are cloned out of the request's cache on insert, and a
request gets a fresh concatenation of the shared blocks (never a deep copy of a whole
cache object), so decode appends never touch a stored block. Blocks are token-major
(``[block_size, kv_heads, head_dim]`` per layer), so the blocks of a hit are copied back to back
into the request's cache in one pass (:func:`ragcache.engine.kv.cache_from_blocks`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ragcache.counters import Counters
from ragcache.engine.request import renamed_salt
from ragcache.hashing import BlockHash, hash_block, root_hash


def _block(t: torch.Tensor, start: int, end: int) -> torch.Tensor:
    """A stored block: positions ``start:end`` of ``t`` ``[1, kv_heads, seq, head_dim]``, copied token-major."""
    return t[0, :, start:end].detach().transpose(0, 1).clone(memory_format=torch.contiguous_format)


@dataclass(slots=True, eq=False)
class KVBlock:
    """One full block of KV.

    Attributes:
        block_hash: chained hash of this block.
        token_ids: the ``block_size`` token ids it holds (re-checked on hit).
        keys / values: per layer ``[block_size, kv_heads, head_dim]`` (token-major), K after RoPE at
            the block's absolute positions.
        nbytes: bytes held by ``keys`` and ``values``.
        ref_count: requests currently using the block; a pinned block (> 0) is never evicted.
    """

    block_hash: BlockHash
    token_ids: tuple[int, ...]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    nbytes: int
    ref_count: int = 0


@dataclass(slots=True)
class PrefixMatch:
    """Blocks matched for one request, pinned until :meth:`PrefixCache.release`; ``hashes``: the chain
    computed for the lookup (the request's leading blocks, matched or not), for :meth:`PrefixCache.insert`."""

    blocks: list[KVBlock] = field(default_factory=list)
    block_size: int = 16
    released: bool = False
    hashes: list[BlockHash] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return len(self.blocks) * self.block_size


@dataclass(slots=True)
class PrefixCacheStats(Counters):
    """Counters of a prefix cache (lookups, hits, tokens, blocks); ``hit_rate`` = hits / lookups."""

    SHOWN = (("hit_rate", "hits"),)

    lookups: int = 0
    hits: int = 0
    tokens_looked_up: int = 0
    tokens_reused: int = 0
    blocks_inserted: int = 0
    evictions: int = 0


class PrefixCache:
    """Block pool for exact prefix reuse.

    Args:
        fingerprint: model fingerprint digest; part of the root hash, so KV never crosses models.
        block_size: tokens per block (16 by default, as in vLLM).
        max_bytes: byte budget for stored KV; unpinned blocks are evicted least-recently-used
            above it. A request may temporarily exceed it while its blocks are pinned.

    Raises:
        ValueError: for a non-positive ``block_size`` or a negative ``max_bytes``.
    """

    def __init__(self, fingerprint: str, *, block_size: int = 16, max_bytes: int = 512 << 20) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be a positive number of tokens, got {block_size}")
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.fingerprint = fingerprint
        self.block_size = block_size
        self.max_bytes = max_bytes
        self._blocks: OrderedDict[BlockHash, KVBlock] = OrderedDict()  # LRU order: oldest first
        self._bytes = 0
        self._lock = threading.RLock()
        self.stats = PrefixCacheStats()

    # -- hashing -------------------------------------------------------------
    def block_hashes(self, token_ids: Sequence[int], salt: str | None = None,
                     max_blocks: int | None = None, *, fingerprint: str | None = None,
                     known: Sequence[BlockHash] = (), namespace: str | None = None) -> list[BlockHash]:
        """Chained hashes of the full blocks of ``token_ids`` (at most ``max_blocks``); the root is
        :func:`~ragcache.hashing.root_hash` of ``fingerprint`` (default: this cache's) and ``salt``
        (the request's KV salt, :func:`ragcache.engine.keys.kv_salt`; ``namespace=``: its deprecated name).
        ``known``: the first hashes of this same chain (same ids, salt and fingerprint, e.g.
        :attr:`PrefixMatch.hashes`), taken as they are.

        Raises:
            TypeError: both ``salt`` and ``namespace``.
        """
        salt = renamed_salt(salt, namespace, "PrefixCache.block_hashes")
        n = len(token_ids) // self.block_size
        if max_blocks is not None:
            n = min(n, max_blocks)
        out: list[BlockHash] = list(known[:n])
        parent = out[-1] if out else root_hash(self.fingerprint if fingerprint is None else fingerprint, salt)
        for i in range(len(out), n):
            parent = hash_block(parent, token_ids[i * self.block_size:(i + 1) * self.block_size])
            out.append(parent)
        return out

    # -- lookup --------------------------------------------------------------
    def match(self, token_ids: Sequence[int], *, salt: str | None = None,
              max_tokens: int | None = None, fingerprint: str | None = None,
              namespace: str | None = None) -> PrefixMatch:
        """Longest cached prefix of ``token_ids`` in whole blocks, pinned.

        Args:
            max_tokens: reuse at most this many tokens; the engine passes ``len(prompt) - 1`` so the
                last prompt token is always computed and the first new token comes from fresh logits.
            salt / fingerprint: the root of the hash chain (see :meth:`block_hashes`).
            namespace: the deprecated name of ``salt`` (warns ``DeprecationWarning``).

        Raises:
            TypeError: both ``salt`` and ``namespace``.
        """
        salt = renamed_salt(salt, namespace, "PrefixCache.match")
        limit = len(token_ids) if max_tokens is None else min(max_tokens, len(token_ids))
        hashes = self.block_hashes(token_ids, salt, max_blocks=max(limit, 0) // self.block_size,
                                   fingerprint=fingerprint)
        with self._lock:
            self.stats.lookups += 1
            self.stats.tokens_looked_up += len(token_ids)
            blocks: list[KVBlock] = []
            for i, h in enumerate(hashes):
                blk = self._blocks.get(h)
                expect = tuple(int(t) for t in token_ids[i * self.block_size:(i + 1) * self.block_size])
                if blk is None or blk.token_ids != expect:
                    break
                blocks.append(blk)
            for blk in blocks:
                blk.ref_count += 1
            for blk in reversed(blocks):  # leaves older than their parents: evicted first
                self._blocks.move_to_end(blk.block_hash)
            if blocks:
                self.stats.hits += 1
                self.stats.tokens_reused += len(blocks) * self.block_size
            return PrefixMatch(blocks, self.block_size, hashes=hashes)

    def release(self, match: PrefixMatch) -> None:
        """Unpin a match's blocks (idempotent)."""
        with self._lock:
            if match.released:
                return
            for blk in match.blocks:
                blk.ref_count -= 1
            match.released = True
            self._evict()

    def truncate(self, match: PrefixMatch, max_tokens: int) -> None:
        """Keep the first ``max_tokens // block_size`` blocks of ``match`` and unpin the rest (a request that
        reuses less than it matched: the engine cuts a match back to a document's start)."""
        keep = max(0, max_tokens) // self.block_size
        with self._lock:
            if match.released or keep >= len(match.blocks):
                return
            for blk in match.blocks[keep:]:
                blk.ref_count -= 1
            self.stats.tokens_reused -= (len(match.blocks) - keep) * self.block_size
            self.stats.hits -= keep == 0
            del match.blocks[keep:]

    @staticmethod
    def assemble(match: PrefixMatch) -> tuple[list[torch.Tensor], list[torch.Tensor]] | None:
        """Concatenate the matched blocks per layer into ``[1, kv_heads, num_tokens, head_dim]``.

        Returns ``None`` for an empty match. The result is new (token-major storage seen as
        ``[1, kv_heads, n, head_dim]``); stored blocks are untouched.
        """
        pieces = PrefixCache.pieces(match)
        if pieces is None:
            return None
        keys = [torch.cat(ks, dim=0).transpose(0, 1)[None] for ks in pieces[0]]
        values = [torch.cat(vs, dim=0).transpose(0, 1)[None] for vs in pieces[1]]
        return keys, values

    @staticmethod
    def pieces(match: PrefixMatch) -> tuple[list[list[torch.Tensor]], list[list[torch.Tensor]]] | None:
        """The matched blocks per layer, in order, as stored: token-major ``[block_size, kv_heads, head_dim]``
        (for :func:`ragcache.engine.kv.cache_from_blocks`, which copies them once into the request's cache).

        Returns ``None`` for an empty match. The tensors are the stored ones: read them, never write them.
        """
        if not match.blocks:
            return None
        n_layers = len(match.blocks[0].keys)
        return ([[b.keys[layer] for b in match.blocks] for layer in range(n_layers)],
                [[b.values[layer] for b in match.blocks] for layer in range(n_layers)])

    # -- insert --------------------------------------------------------------
    def insert(self, token_ids: Sequence[int], keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor],
               *, salt: str | None = None, upto: int | None = None, fingerprint: str | None = None,
               known: Sequence[BlockHash] = (), namespace: str | None = None) -> int:
        """Store the full blocks of ``token_ids[:upto]`` that are not cached yet.

        Args:
            token_ids: ids whose KV is given, starting at position 0.
            keys / values: per layer ``[1, kv_heads, >= upto, head_dim]`` exact KV of those ids.
            upto: number of leading tokens whose KV is exact (default all).
            salt / fingerprint: the root of the hash chain (see :meth:`block_hashes`).
            known: the chain's first hashes already computed for these ids (:attr:`PrefixMatch.hashes` of the
                same request), not hashed again.
            namespace: the deprecated name of ``salt`` (warns ``DeprecationWarning``).

        Returns:
            The number of blocks added.

        Raises:
            TypeError: both ``salt`` and ``namespace``.
        """
        salt = renamed_salt(salt, namespace, "PrefixCache.insert")
        upto = len(token_ids) if upto is None else min(upto, len(token_ids))
        if keys and keys[0].shape[-2] < upto:
            raise ValueError(f"KV covers {keys[0].shape[-2]} tokens, fewer than the {upto} to insert")
        hashes = self.block_hashes(token_ids[:upto], salt, fingerprint=fingerprint, known=known)
        added = 0
        bs = self.block_size
        with self._lock:
            for i, h in enumerate(hashes):
                if h in self._blocks:
                    continue
                ks = [_block(k, i * bs, (i + 1) * bs) for k in keys]
                vs = [_block(v, i * bs, (i + 1) * bs) for v in values]
                nbytes = sum(t.numel() * t.element_size() for t in ks + vs)
                self._blocks[h] = KVBlock(h, tuple(int(t) for t in token_ids[i * bs:(i + 1) * bs]), ks, vs, nbytes)
                self._bytes += nbytes
                added += 1
            for h in reversed(hashes):
                if h in self._blocks:
                    self._blocks.move_to_end(h)
            self.stats.blocks_inserted += added
            self._evict()
        return added

    # -- eviction / accounting ----------------------------------------------
    def _evict(self) -> None:
        if self._bytes <= self.max_bytes:
            return
        for h in list(self._blocks):
            if self._bytes <= self.max_bytes:
                break
            blk = self._blocks[h]
            if blk.ref_count > 0:
                continue
            del self._blocks[h]
            self._bytes -= blk.nbytes
            self.stats.evictions += 1

    @property
    def nbytes(self) -> int:
        """Bytes of KV currently stored."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_hash: object) -> bool:
        return block_hash in self._blocks

    def clear(self) -> None:
        """Drop every unpinned block."""
        with self._lock:
            for h in list(self._blocks):
                if self._blocks[h].ref_count == 0:
                    self._bytes -= self._blocks.pop(h).nbytes
