"""Per-document KV cache: compute each document's KV on its own, key it, look it up.

CacheBlend (Yao et al., EuroSys 2025, arXiv 2405.16444, §5) precomputes every retrieved
chunk's KV independently and fuses them at query time. Here each document's token ids are
run after a short fixed *sink* (default: the model's BOS token), the sink's KV is dropped,
and the rest is stored with the positions it was computed at. The key is
``hash_chunk(model fingerprint, sink ids, document ids)``: position independent, so the
same document is a hit after any system text and in any order.

Storage format (``kv_format``): ``"fp16"`` (dense, in ``dtype``), ``"int8"`` or ``"int4"``
(KIVI groups, :mod:`ragcache.engine.quant`). The format tag is part of the key, so a cache in
one format never reads a chunk stored in another; the CLI and apps that build a default
``ChunkCache`` pick it up from ``RAGCACHE_KV_FORMAT`` / ``RAGCACHE_KV_GROUP_SIZE``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from ragcache.config import env_setting
from ragcache.engine import kv as kvb
from ragcache.engine.quant import KVFormat, quantize_kv
from ragcache.engine.stores import ChunkKV, ChunkStore, DiskChunkStore, MemoryChunkStore, StoreStats
from ragcache.hashing import ChunkHash, hash_chunk

log = logging.getLogger(__name__)

__all__ = ["ChunkCache", "ChunkKV", "ChunkStore", "DiskChunkStore", "MemoryChunkStore", "context_window"]


def context_window(model: Any) -> int:
    """The model's context window in tokens (``config.max_position_embeddings``)."""
    return int(getattr(model.config, "max_position_embeddings", 0) or 0) or (1 << 62)


def _fingerprint_str(fingerprint: Any) -> str:
    return fingerprint if isinstance(fingerprint, str) else str(getattr(fingerprint, "digest", fingerprint))


class ChunkCache:
    """Chunk KV cache over a :class:`~ragcache.engine.stores.ChunkStore`.

    Args:
        store: where chunk KVs live (default: a 1 GiB :class:`MemoryChunkStore`).
        sink_ids: token ids every chunk is computed after (attention sink); ``None`` uses
            ``[model.config.bos_token_id]`` (or no sink if the model has no BOS) at first use.
        dtype: storage dtype of dense K and V (default float16; float32 for exactness tests).
        kv_format: ``"fp16"`` (dense in ``dtype``), ``"int8"`` or ``"int4"`` (keys per channel,
            values per token, KIVI); ``None`` reads ``RAGCACHE_KV_FORMAT`` (default ``"fp16"``).
        group_size: KIVI group size for int formats (tokens per key group, channels per value
            group, capped at head_dim); ``None`` reads ``RAGCACHE_KV_GROUP_SIZE`` (default 64).

    Attributes:
        hits / misses: lookups served from the store / computed.
        kv_format: the :class:`~ragcache.engine.quant.KVFormat` chunks are stored in.

    Raises:
        ValueError: an unknown ``kv_format`` or a group size < 1 (from the argument or the
            environment variable).
    """

    def __init__(self, store: ChunkStore | None = None, *, sink_ids: Sequence[int] | None = None,
                 dtype: torch.dtype = torch.float16, kv_format: str | None = None,
                 group_size: int | None = None) -> None:
        self.store: ChunkStore = store if store is not None else MemoryChunkStore()
        self._sink_ids: list[int] | None = None if sink_ids is None else [int(t) for t in sink_ids]
        self.dtype = dtype
        name = kv_format if kv_format is not None else env_setting("kv_format")
        if group_size is None:
            group_size = env_setting("kv_group_size")
        self.kv_format = KVFormat.of(name.strip().lower(), group_size=group_size, dtype=dtype)
        self.hits = 0
        self.misses = 0

    def sink_for(self, model: Any) -> list[int]:
        """The sink token ids used with ``model`` (resolved from its BOS when not configured)."""
        if self._sink_ids is None:
            bos = getattr(model.config, "bos_token_id", None)
            if isinstance(bos, list):
                bos = bos[0] if bos else None
            self._sink_ids = [] if bos is None else [int(bos)]
        return list(self._sink_ids)

    def key(self, model: Any, fingerprint: Any, doc_ids: Sequence[int]) -> ChunkHash:
        """Position-independent chunk key of ``doc_ids`` for this model, sink and storage format."""
        return hash_chunk(_fingerprint_str(fingerprint), self.sink_for(model), doc_ids, self.kv_format.tag)

    @torch.inference_mode()
    def compute(self, model: Any, fingerprint: Any, doc_ids: Sequence[int]) -> ChunkKV:
        """Prefill ``sink + doc_ids`` from position 0 and keep the document's KV.

        Returns a :class:`ChunkKV` with keys/values ``[num_layers, kv_heads, n, head_dim]`` in
        :attr:`kv_format` (dense in :attr:`dtype`, or quantized from the model's own KV),
        computed at positions ``len(sink) .. len(sink) + n - 1``.

        Raises:
            ValueError: empty document, or sink + document longer than the context window.
        """
        doc_ids = [int(t) for t in doc_ids]
        sink = self.sink_for(model)
        if not doc_ids:
            raise ValueError("cannot cache an empty document (0 tokens); drop it from the prompt")
        window = context_window(model)
        if len(sink) + len(doc_ids) > window:
            raise ValueError(
                f"document of {len(doc_ids)} tokens (+{len(sink)} sink tokens) exceeds the model's context "
                f"window of {window} tokens; split it into smaller chunks"
            )
        cache = kvb.new_cache(model)
        kvb.forward(model, sink + doc_ids, cache, start=0)
        keys, values = kvb.cache_tensors(cache)
        n0 = len(sink)
        k = torch.stack([layer[0, :, n0:, :] for layer in keys]).cpu()
        v = torch.stack([layer[0, :, n0:, :] for layer in values]).cpu()
        return self.encode(model, fingerprint, doc_ids, k, v)

    def encode(self, model: Any, fingerprint: Any, doc_ids: Sequence[int], keys: torch.Tensor,
               values: torch.Tensor) -> ChunkKV:
        """A :class:`ChunkKV` in :attr:`kv_format` from a chunk's dense KV (computed after this
        cache's sink): ``keys`` / ``values`` ``[num_layers, kv_heads, n, head_dim]``, any float dtype.
        :meth:`compute` ends here; one dense computation can be encoded in several formats."""
        doc_ids = [int(t) for t in doc_ids]
        sink = self.sink_for(model)
        if self.kv_format.quantized:
            k, v = quantize_kv(keys, values, self.kv_format)
        else:
            k, v = keys.to(self.dtype).contiguous(), values.to(self.dtype).contiguous()
        fp = _fingerprint_str(fingerprint)
        return ChunkKV(hash_chunk(fp, sink, doc_ids, self.kv_format.tag), fp, doc_ids, k, v, len(sink))

    def lookup(self, model: Any, fingerprint: Any, doc_ids: Sequence[int]) -> ChunkKV | None:
        """The cached chunk for ``doc_ids`` or ``None``; token ids are re-checked on a hit."""
        fp = _fingerprint_str(fingerprint)
        key = self.key(model, fp, doc_ids)
        kv = self.store.get(key, fingerprint=fp)
        if kv is not None and kv.kv_format != self.kv_format:
            log.warning("chunk %s... is stored as %s but this cache reads %s; miss (recomputing)",
                        key[:12], kv.kv_format.tag, self.kv_format.tag)
            self.store.remove(key)
            kv = None
        if kv is not None and (kv.token_ids != [int(t) for t in doc_ids] or kv.start != len(self.sink_for(model))):
            log.warning("chunk %s... matched the key but not the token ids/sink; recomputing", key[:12])
            self.store.remove(key)
            kv = None
        return kv

    def lookup_or_compute(self, model: Any, fingerprint: Any, doc_ids: Sequence[int]) -> tuple[ChunkKV, bool]:
        """The chunk KV of ``doc_ids`` and whether it was a hit (computed and stored on a miss).

        Args:
            model: a causal LM (Llama family) the KV belongs to.
            fingerprint: the model fingerprint digest (``str``) or a ``ModelFingerprint``.
            doc_ids: the document's own token ids, as they appear in the prompt.
        """
        kv = self.lookup(model, fingerprint, doc_ids)
        if kv is not None:
            self.hits += 1
            return kv, True
        self.misses += 1
        kv = self.compute(model, fingerprint, doc_ids)
        self.store.put(kv)
        return kv, False

    def add(self, model: Any, fingerprint: Any, doc_ids: Sequence[int]) -> bool:
        """Compute ``doc_ids``' chunk KV on its own (after the sink) and store it, unless already stored.

        Used for documents that missed the cache in a request (they were computed in that
        request's context; what is stored is the position-independent KV, as :meth:`precompute`
        stores). Returns whether a chunk was computed.
        """
        if self.lookup(model, fingerprint, doc_ids) is not None:
            return False
        self.store.put(self.compute(model, fingerprint, doc_ids))
        return True

    def precompute(self, engine_or_model: Any, documents: Sequence[Any], *,
                   tokenizer: Any = None, fingerprint: Any = None, progress: bool = True) -> int:
        """Warm the cache from a corpus ahead of queries, with exactly the chunks ``RagCache`` will ask for.

        Args:
            engine_or_model: a ``LocalEngine`` (its model, tokenizer and fingerprint are used)
                or a bare model (then give ``tokenizer`` for documents and ``fingerprint``).
            documents: the documents as you will pass them to ``RagCache.answer`` (str, dicts with
                ``text`` / ``id`` / ``metadata``, LangChain Documents, LlamaIndex nodes): each is
                rendered and tokenised as in a prompt
                (:func:`ragcache.engine.prompt.document_token_ids`), so id and metadata must match;
                or lists of token ids, used as they are.
            progress: show a tqdm progress bar.

        Returns:
            The number of chunks computed (documents already cached are skipped).

        Raises:
            ValueError: no fingerprint, or documents without a tokenizer.
        """
        from tqdm.auto import tqdm

        from ragcache.engine.prompt import document_token_ids

        is_model = isinstance(engine_or_model, torch.nn.Module)
        model = engine_or_model if is_model else engine_or_model.model
        tokenizer = tokenizer or (None if is_model else getattr(engine_or_model, "tokenizer", None))
        fingerprint = fingerprint or (None if is_model else getattr(engine_or_model, "fingerprint", None))
        if fingerprint is None:
            raise ValueError("precompute needs the model fingerprint: pass an engine or fingerprint=...")
        computed = 0
        for doc in tqdm(documents, desc="chunk KV precompute", unit="doc", disable=not progress):
            if isinstance(doc, Sequence) and not isinstance(doc, str) and all(isinstance(t, int) for t in doc):
                ids = [int(t) for t in doc]
            elif tokenizer is None:
                raise ValueError("documents need a tokenizer: pass an engine or tokenizer=...")
            else:
                ids = document_token_ids(tokenizer, doc)
            if self.lookup(model, fingerprint, ids) is None:
                self.store.put(self.compute(model, fingerprint, ids))
                computed += 1
        return computed

    def memory_stats(self, model: Any) -> dict[str, Any]:
        """KV bytes of this cache's format for ``model``, and what the store holds.

        Returns a dict: ``kv_format`` (tag), ``bytes_per_token`` (stored K+V bytes per token,
        long-chunk limit, scales and zero points included), ``fp16_bytes_per_token`` (the same
        for float16, for comparison), ``chunks``, ``stored_bytes`` (the store's byte count, the
        one its budget is checked against) and ``bytes_per_chunk`` (their mean; 0 when empty).
        """
        cfg = model.config
        layers = int(cfg.num_hidden_layers)
        heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        n, stored = len(self.store), int(self.store.nbytes)
        return {"kv_format": self.kv_format.tag,
                "bytes_per_token": self.kv_format.bytes_per_token(layers, heads, head_dim),
                "fp16_bytes_per_token": KVFormat.of("fp16").bytes_per_token(layers, heads, head_dim),
                "chunks": n, "stored_bytes": stored, "bytes_per_chunk": stored / n if n else 0.0}

    @property
    def stats(self) -> StoreStats:
        return getattr(self.store, "stats", StoreStats())
