"""A chunk cache bound to one model, one fingerprint and one KV salt: keys, batched lookups, computation.

Every chunk key is ``hash_chunk(fingerprint, sink ids, document ids, format tag, salt)``
(:func:`ragcache.hashing.hash_chunk`): the salt is the request's KV salt
(:func:`ragcache.engine.keys.kv_salt` of the engine's namespace and the request's tenant), so two
engines with different namespaces, or two tenants, never read each other's chunks from a shared disk or
Redis store, and an engine whose weights changed in memory stops reusing old KV once it is given a new
namespace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import torch

from ragcache.boundary import Boundary, boundary_for
from ragcache.engine import kv as kvb
from ragcache.engine.chunk.admission import Sightings
from ragcache.engine.chunk.chunk_kv import ChunkKV
from ragcache.engine.chunk.plan import ChunkHit, ChunkMiss, ChunkPlan
from ragcache.engine.chunk.stores import ChunkStore
from ragcache.engine.quant import KVFormat, quantize_kv
from ragcache.hashing import ChunkHash, hash_chunk
from ragcache.limits import context_window_of

__all__ = ["PIECE_TOKENS", "BoundChunkCache", "ChunkSettings", "DocSpan", "SinkKV", "Step", "context_window"]

log = logging.getLogger(__name__)

PIECE_TOKENS = 128
"""Tokens per forward pass when a chunk is computed in pieces (:meth:`BoundChunkCache.compute` with ``step``): a
request waits for at most one piece of a background chunk (SmolLM2-135M, one CPU thread: ~0.6 s)."""

Step = Callable[[Callable[[], Any]], Any]
"""Runs one piece of a chunk's prefill: ``step(run_piece)`` calls ``run_piece()`` (e.g. under a lock)."""

SinkKV = Callable[[Any, int], "tuple[Any, int] | None"]
"""``sink_kv(view, positions)``: a cache holding the exact KV of the first ``n`` sink tokens of ``view`` (room for
``positions``) and ``n``, or ``None`` (:meth:`BoundChunkCache.compute`)."""

DocSpan = tuple[int, int, Sequence[int]]
"""``(start, end, token ids)`` of one document in a prompt (positions in tokens, ``end`` exclusive)."""


class ChunkSettings(Protocol):
    """What a bound view reads from its :class:`~ragcache.engine.chunk.cache.ChunkCache`: every member is
    required (``store_timeout_s``: the deadline in seconds of each read or write of ``store``, ``None`` for
    none; :data:`~ragcache.engine.chunk.cache.DEFAULT_STORE_TIMEOUT_S` by default)."""

    store: ChunkStore
    dtype: torch.dtype
    kv_format: KVFormat
    hits: int
    misses: int
    store_timeout_s: float | None
    sightings: Sightings

    def sink_for(self, model: Any) -> list[int]: ...


def context_window(model: Any) -> int:
    """The model's context window in tokens (:func:`ragcache.limits.context_window_of` of its config)."""
    return context_window_of(model.config)


class BoundChunkCache:
    """The chunk cache of one engine: :class:`~ragcache.engine.chunk.cache.ChunkCache` settings and
    store, bound to ``model``, ``fingerprint`` and ``salt``. Made by
    :meth:`ChunkCache.bind <ragcache.engine.chunk.cache.ChunkCache.bind>`; hit and miss counters are
    the parent cache's.

    Attributes:
        cache: the parent :class:`~ragcache.engine.chunk.cache.ChunkCache`.
        model / fingerprint / salt: what every key of this view carries (``salt``: the KV salt,
            :func:`ragcache.engine.keys.kv_salt`; ``None``: none).
        sink: the sink token ids chunks are computed after.
    """

    def __init__(self, cache: ChunkSettings, model: Any, fingerprint: str, salt: str | None) -> None:
        self.cache, self.model, self.fingerprint, self.salt = cache, model, fingerprint, salt
        self.sink = cache.sink_for(model)

    @property
    def store(self) -> ChunkStore:
        return self.cache.store

    def key(self, doc_ids: Sequence[int]) -> ChunkHash:
        """Position-independent chunk key of ``doc_ids`` (model, sink, format, salt)."""
        return hash_chunk(self.fingerprint, self.sink, doc_ids, self.cache.kv_format.tag, self.salt)

    def _checked(self, key: ChunkHash, kv: ChunkKV | None, doc_ids: list[int]) -> ChunkKV | None:
        """``kv`` if it is this cache's format, token ids and sink; else ``None`` (and it is removed)."""
        if kv is None:
            return None
        fmt = self.cache.kv_format
        if kv.kv_format != fmt:
            log.warning("chunk %s... is stored as %s but this cache reads %s; miss (recomputing)",
                        key[:12], kv.kv_format.tag, fmt.tag)
        elif kv.token_ids != doc_ids or kv.start != len(self.sink):
            log.warning("chunk %s... matched the key but not the token ids/sink; recomputing", key[:12])
        else:
            return kv
        self._call("remove", lambda: self.store.remove(key))  # best effort: the answer never waits on it
        return None

    @property
    def boundary(self) -> Boundary:
        """The store's :class:`~ragcache.boundary.Boundary` (one per store object): every read and write of
        this view passes it, so a store that fails in any way (down, hanging past ``store_timeout_s``, full,
        read only, out of memory) is a logged miss, backed off, and tried again later."""
        return boundary_for(self.store, "chunk store", logger=log)

    def _call(self, what: str, fn: Any, default: Any = None) -> Any:
        return self.boundary.call(what, fn, default, deadline_s=self.cache.store_timeout_s)

    def lookup(self, doc_ids: Sequence[int]) -> ChunkKV | None:
        """The cached chunk for ``doc_ids`` or ``None``; token ids are re-checked on a hit (not counted)."""
        ids = [int(t) for t in doc_ids]
        key = self.key(ids)
        return self._checked(key, self._call("lookup", lambda: self.store.get(key, fingerprint=self.fingerprint)), ids)

    def lookup_many(self, docs: Sequence[DocSpan]) -> ChunkPlan:
        """Look every document of one request up with one batched read (``store.get_many``: one round
        trip to a Redis / Valkey store), and count the hits and misses.

        Args:
            docs: ``(start, end, token ids)`` per document, in prompt order.

        Returns:
            A :class:`~ragcache.engine.chunk.plan.ChunkPlan` (nothing is computed here).
        """
        ids = [[int(t) for t in d] for _, _, d in docs]
        keys = [self.key(d) for d in ids]
        found = self._get_many(keys, "lookup")
        plan = ChunkPlan()
        for (s, e, _), d, key, kv in zip(docs, ids, keys, found, strict=True):
            kv = self._checked(key, kv, d)
            if kv is not None:
                plan.hits.append(ChunkHit(s, e, kv))
            else:
                plan.missed.append(ChunkMiss(s, e, d, key))
        self.cache.hits += len(plan.hits)
        self.cache.misses += len(plan.missed)
        return plan

    @torch.inference_mode()
    def compute(self, doc_ids: Sequence[int], *, step: Step | None = None, sink_kv: SinkKV | None = None) -> ChunkKV:
        """Prefill ``sink + doc_ids`` from position 0 and keep the document's KV.

        ``step``: run the prefill in pieces of :data:`PIECE_TOKENS` tokens, each as ``step(run_piece)``
        (the chunk queue takes the engine lock per piece and yields to waiting requests between them);
        ``None``: one forward pass. ``sink_kv``: ``sink_kv(self, positions)`` gives a cache already holding
        the exact KV of the sink's first ``n`` tokens (room for ``positions``) and ``n``, or ``None``; the
        prefill then starts at ``n`` (the engine serves a prefix-conditioned chunk's context, the request's
        stable prefix, from its prefix cache). Same KV either way, up to float rounding.

        Returns a :class:`ChunkKV` with keys/values ``[num_layers, kv_heads, n, head_dim]`` in the
        cache's format (dense in its dtype, or quantized from the model's own KV), computed at
        positions ``len(sink) .. len(sink) + n - 1``.

        Raises:
            ValueError: empty document, or sink + document longer than the context window.
        """
        doc_ids = [int(t) for t in doc_ids]
        if not doc_ids:
            raise ValueError("cannot cache an empty document (0 tokens); drop it from the prompt")
        window = context_window(self.model)
        if len(self.sink) + len(doc_ids) > window:
            raise ValueError(
                f"document of {len(doc_ids)} tokens (+{len(self.sink)} sink tokens) exceeds the model's context "
                f"window of {window} tokens; split it into smaller chunks"
            )
        ids = self.sink + doc_ids
        got = sink_kv(self, len(ids)) if sink_kv is not None else None
        cache, start = got if got is not None else (kvb.new_cache(self.model), 0)
        if not 0 <= start <= len(self.sink):
            raise RuntimeError(f"sink_kv gave {start} cached positions for a sink of {len(self.sink)} tokens")
        if step is None:
            kvb.forward(self.model, ids[start:], cache, start=start)
        else:
            for pos in range(start, len(ids), PIECE_TOKENS):
                step(lambda pos=pos: kvb.forward(self.model, ids[pos:pos + PIECE_TOKENS], cache, start=pos))
        keys, values = kvb.cache_tensors(cache)
        n0 = len(self.sink)
        k = torch.stack([layer[0, :, n0:, :] for layer in keys]).cpu()
        v = torch.stack([layer[0, :, n0:, :] for layer in values]).cpu()
        return self.encode(doc_ids, k, v)

    @torch.inference_mode()
    def compute_many(self, docs: Sequence[Sequence[int]], *, step: Step | None = None,
                     sink_kv: SinkKV | None = None) -> list[ChunkKV]:
        """:meth:`compute` for several documents in one padded batch: the sink is computed (or read through
        ``sink_kv``) once, then every document after it in one forward pass per piece, ``[B, L]`` tokens
        (``B`` documents, ``L`` the longest), right-padded.

        Exact: a document's tokens sit at the same positions as in :meth:`compute` and attend causally to the
        sink and their own earlier tokens only; padding comes after a document's last token, so no real
        token sees it (same KV as :meth:`compute`, up to float rounding). The padding's KV is computed and
        thrown away: batch documents of similar lengths (:meth:`add_many` sorts them).

        ``step``: as :meth:`compute`, a piece being ``max(1, PIECE_TOKENS // B)`` columns of the batch (about
        :data:`PIECE_TOKENS` tokens, so a request waits for no longer than behind one document's piece).

        Returns one :class:`ChunkKV` per document, in order.

        Raises:
            ValueError: an empty document, or sink + a document longer than the context window.
        """
        docs = [[int(t) for t in d] for d in docs]
        if len(docs) <= 1:
            return [self.compute(d, step=step, sink_kv=sink_kv) for d in docs]
        window = context_window(self.model)
        for d in docs:
            if not d:
                raise ValueError("cannot cache an empty document (0 tokens); drop it from the prompt")
            if len(self.sink) + len(d) > window:
                raise ValueError(f"document of {len(d)} tokens (+{len(self.sink)} sink tokens) exceeds the model's "
                                 f"context window of {window} tokens; split it into smaller chunks")
        n0, width, b = len(self.sink), max(len(d) for d in docs), len(docs)
        run = step if step is not None else (lambda piece: piece())
        got = sink_kv(self, n0) if sink_kv is not None and n0 else None
        cache, start = got if got is not None else (kvb.new_cache(self.model, n0), 0)
        if not 0 <= start <= n0:
            raise RuntimeError(f"sink_kv gave {start} cached positions for a sink of {n0} tokens")
        piece = PIECE_TOKENS if step is not None else max(1, n0)
        for pos in range(start, n0, piece):  # the rest of the sink, once, at batch 1
            run(lambda pos=pos: kvb.forward(self.model, self.sink[pos:min(pos + piece, n0)], cache, start=pos))
        if n0:  # one row per document, each starting with the sink's KV, room for the batch written in place
            keys, values = kvb.cache_tensors(cache)
            cache = kvb.cache_from_blocks(self.model, [[k[0, :, :n0].transpose(0, 1)] for k in keys],
                                          [[v[0, :, :n0].transpose(0, 1)] for v in values], capacity=n0 + width,
                                          batch=b)
        else:
            cache = kvb.new_cache(self.model, width)
        pad = docs[0][0]  # any id: a padded position comes after every real token of its row
        ids = torch.tensor([d + [pad] * (width - len(d)) for d in docs], dtype=torch.long)
        cols = max(1, PIECE_TOKENS // b) if step is not None else width
        for pos in range(0, width, cols):
            run(lambda pos=pos: kvb.forward(self.model, ids[:, pos:pos + cols], cache, start=n0 + pos))
        keys, values = kvb.cache_tensors(cache)
        out = []
        for i, d in enumerate(docs):
            k = torch.stack([layer[i, :, n0:n0 + len(d), :] for layer in keys]).cpu()
            v = torch.stack([layer[i, :, n0:n0 + len(d), :] for layer in values]).cpu()
            out.append(self.encode(d, k, v))
        return out

    def same_context(self, other: Any) -> bool:
        """Whether ``other`` is a view computing chunks the same way (same cache, model, fingerprint, salt
        and sink): its documents can be computed in one batch with this view's (:meth:`compute_many`)."""
        return isinstance(other, BoundChunkCache) and other.cache is self.cache and other.model is self.model \
            and other.fingerprint == self.fingerprint and other.salt == self.salt and other.sink == self.sink

    def encode(self, doc_ids: Sequence[int], keys: torch.Tensor, values: torch.Tensor) -> ChunkKV:
        """A :class:`ChunkKV` in the cache's format from a chunk's dense KV computed after this sink:
        ``keys`` / ``values`` ``[num_layers, kv_heads, n, head_dim]``, any float dtype."""
        doc_ids = [int(t) for t in doc_ids]
        fmt = self.cache.kv_format
        if fmt.quantized:
            k, v = quantize_kv(keys, values, fmt)
        else:
            k, v = keys.to(self.cache.dtype).contiguous(), values.to(self.cache.dtype).contiguous()
        return ChunkKV(self.key(doc_ids), self.fingerprint, doc_ids, k, v, len(self.sink))

    def add_many(self, docs: Iterable[Sequence[int]], *, step: Step | None = None,
                 sink_kv: SinkKV | None = None, batch_docs: int = 1) -> int:
        """Compute and store the chunks of ``docs`` (token ids) that the store does not hold yet.

        One batched read checks them all (another process may have stored some meanwhile), then
        each missing document is computed on its own after the sink (``step``, ``sink_kv``: as :meth:`compute`;
        ``batch_docs`` > 1: up to that many in one padded batch, shortest first, :meth:`compute_many`) and
        all are written with one ``put_many``. Returns how many chunks were computed.

        Why on its own: a document that missed was computed in its request's context at every
        layer (exact), but the KV stored for next time is computed after the sink only
        (:meth:`compute`), not taken from the request: taken from the request it would carry the
        first request's preceding documents in every layer's V and K, so a chunk's content would
        depend on which request happened to store it first, and the blend fidelity measured by
        ``LocalEngine.calibrate`` (on independently computed chunks, as CacheBlend stores them,
        §5) would not hold for it. The price is one extra forward pass over the document with
        short attention, paid in the background by the engine's chunk queue, and only for documents
        expected to be read again (:mod:`ragcache.engine.chunk.queue`, :mod:`ragcache.engine.chunk.admission`).
        """
        ids = list(dict.fromkeys(tuple(int(t) for t in d) for d in docs))  # each document once
        keys = [self.key(d) for d in ids]
        if not keys or self.boundary.down():
            return 0
        found = self._call("store", lambda: list(self.store.get_many(keys, fingerprint=self.fingerprint)))
        if found is None:  # the read failed (logged, backed off): nothing is written
            return 0
        todo = [list(d) for d, k, kv in zip(ids, keys, found, strict=True) if self._checked(k, kv, list(d)) is None]
        if todo:
            todo.sort(key=len)  # batches of similar lengths: little padding
            chunks = [c for i in range(0, len(todo), batch_docs)
                      for c in self.compute_many(todo[i:i + batch_docs], step=step, sink_kv=sink_kv)]
            if self._call("store", lambda: self.store.put_many(chunks)) is None:  # a refused write costs the chunks
                return 0
        return len(todo)

    def admit(self, docs: Iterable[Sequence[int]], after: int) -> tuple[list[list[int]], list[list[int]]]:
        """Count one sighting of each missed document (once per document) and split them by the admission
        rule (:mod:`ragcache.engine.chunk.admission`): ``(admitted, first)``, the documents seen at least
        ``after`` times and the others. The counts are the store's (``sight_many``: shared by every process
        using it), or the parent cache's in-process ones for a store without it. ``after <= 1``: every
        document is admitted, nothing is counted. A failing or backed-off store admits nothing (its boundary,
        :mod:`ragcache.boundary`)."""
        ids = [list(d) for d in dict.fromkeys(tuple(int(t) for t in d) for d in docs)]
        if after <= 1 or not ids:
            return ids, []
        counter = self.store if isinstance(self.store, Sightings) else self.cache.sightings
        counts = self._call("sighting", lambda: counter.sight_many([self.key(d) for d in ids]))
        if counts is None:
            return [], []
        return ([d for d, n in zip(ids, counts, strict=True) if n >= after],
                [d for d, n in zip(ids, counts, strict=True) if n < after])

    def _get_many(self, keys: list[ChunkHash], what: str) -> list[ChunkKV | None]:
        """``store.get_many(keys)`` through the store's boundary; all ``None`` (misses) when the store is
        backed off, fails in any way or passes its deadline (logged)."""
        if not keys:
            return []
        found = self._call(what, lambda: list(self.store.get_many(keys, fingerprint=self.fingerprint)))
        return [None] * len(keys) if found is None else found

    def lookup_or_compute(self, doc_ids: Sequence[int]) -> tuple[ChunkKV, bool]:
        """The chunk KV of ``doc_ids`` and whether it was a hit (computed and stored on a miss; counted)."""
        kv = self.lookup(doc_ids)
        if kv is not None:
            self.cache.hits += 1
            return kv, True
        self.cache.misses += 1
        kv = self.compute(doc_ids)
        self._call("put", lambda: self.store.put(kv))  # best effort
        return kv, False
