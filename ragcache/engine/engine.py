"""LocalEngine: prefill, decoding (:mod:`ragcache.engine.decode`), streaming and timings on a Hugging Face causal LM.

A request's prefill takes, in order:

1. the longest exact prefix from the :class:`~ragcache.engine.prefix.PrefixCache`
   (whole blocks, always leaving at least the last prompt token to compute);
2. if a chunk cache is attached, one batched lookup of the documents after that prefix
   (:meth:`~ragcache.engine.chunk.BoundChunkCache.lookup_many`; a prefix that runs into a document,
   as the system text's last block runs into the first document's wrapper, is cut back to that
   document's start when it hits, :meth:`LocalEngine._chunk_plan`). Documents that
   miss are computed in the request's own context at every layer, like any uncached token,
   never on their own. When the hits are worth it (:class:`~ragcache.engine.blend.reuse.ReusePolicy`,
   and a per-model calibration allows blending), the hit documents' KV is fused CacheBlend-style
   (:func:`ragcache.engine.blend.blend_prefill`) and the answer is marked approximate;
3. otherwise (no hit, too few reusable tokens, r = 1, blending disabled) everything after the
   prefix is computed exactly: a request with no chunk hit is exactly a full prefill.

Decode then continues from the request's own cache. Exactly computed KV (prompt and
answer, for multi-turn reuse) is inserted back into the prefix cache, and missed documents are
handed to the chunk queue (:mod:`ragcache.engine.chunk.queue`): their chunk KV is computed on its own,
in the background while no request is in flight, once a document has been missed ``chunk_admission``
times (:mod:`ragcache.engine.chunk.admission`). No request waits for it.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from ragcache.engine import kv
from ragcache.engine.blend.request import blend_request, chunk_view
from ragcache.engine.chunk import BoundChunkCache, ChunkCache, ChunkPlan
from ragcache.engine.chunk.queue import ChunkQueue, ChunkQueueStats
from ragcache.engine.decode import DecodeResult, check_sampling, check_stops, decode, eos_ids
from ragcache.engine.decode_cache import DecodeCacheSpec, check_decode, load_decode_check
from ragcache.engine.engine_config import EngineConfig
from ragcache.engine.prefix import PrefixCache
from ragcache.engine.prompt import Prompt, build_prompt, raw_prompt
from ragcache.engine.records import ContextWindowError, Generation, PrefillResult, RequestStats, StreamEvent
from ragcache.engine.request import EngineRequest, engine_request, renamed_tenant
from ragcache.engine.text_ids import text_ids
from ragcache.engine.blend.reuse import PrefillRate
from ragcache.engine.keys import EngineKeys
from ragcache.engine.windowed import kv_reuse_blocker, rope_switch
from ragcache.prompt.layout import PromptLayout
from ragcache.limits import check_recompute_ratio, context_window_of
from ragcache.models import LoadedModel, load_model, unwrap_adapters

PromptSource = PromptLayout | Prompt | str | Sequence[Mapping[str, Any]] | Sequence[int]
"""What :meth:`LocalEngine.build_prompt` renders: a layout, a built prompt, one user turn, chat
messages (:meth:`~ragcache.prompt.layout.PromptLayout.from_messages`) or token ids."""

log = logging.getLogger(__name__)


class LocalEngine(EngineKeys):
    """Local transformers backend with an exact prefix KV cache and an optional CacheBlend chunk cache.

    Args:
        loaded: model, tokenizer and fingerprint (:func:`ragcache.models.load_model`).
        config: the engine's settings (:class:`~ragcache.engine.engine_config.EngineConfig`: prefix-cache
            budget and block size, recompute ratio r, namespace, reuse policy, calibration, template
            date, decode cache); default: all defaults.
        chunk_cache: a :class:`ragcache.engine.chunk.ChunkCache` to reuse document KV at
            any position; ``None`` disables CacheBlend.
        **settings: any :class:`EngineConfig` field as a keyword argument, applied over ``config``
            (``LocalEngine(lm, recompute_ratio=0.3)`` is ``LocalEngine(lm, EngineConfig(recompute_ratio=0.3))``).
            In short: ``recompute_ratio`` (None: the model's recorded calibration; see
            :meth:`recompute_ratio`); ``namespace`` (cache salt, in every prefix and chunk KV
            key and in the semantic partition (:attr:`answer_identity`): KV and answers never cross
            namespaces; a model whose weights were changed in memory after loading keeps its
            fingerprint and needs a new namespace); ``share_kv_across_namespaces`` (default False:
            a request's ``tenant`` salts its KV too, :func:`ragcache.engine.keys.kv_salt`;
            True lets tenants reuse each other's KV, and so learn from timing what others sent); ``reuse_policy`` / ``min_reuse_tokens`` (default:
            blend when it saves >= 0.1 s at the measured prefill rate); ``calibration``;
            ``template_date`` (default :data:`~ragcache.engine.prompt.DEFAULT_TEMPLATE_DATE`, pinned, so
            prefixes repeat across days); ``decode_cache`` (``"dynamic"`` exact, or ``"quantized"``:
            the prefilled KV is handed over to a ``QuantizedCache`` before the first decode step,
            :mod:`ragcache.engine.decode_cache`; quantized answers are labelled approximate, their
            format is part of :attr:`answer_identity`, and a model whose recorded
            :meth:`check_decode` fails the bound decodes exactly); ``decode_backend`` /
            ``decode_nbits`` / ``residual_length`` / ``decode_sink_tokens`` (the ``QuantizedCache``
            backend, bits, and the recent and first (attention sink) tokens kept in full precision);
            ``chunk_admission`` (default 2: a missed document's chunk KV is computed at its second
            miss) and ``chunk_queue`` (default 64 documents waiting in the background queue; 0: computed
            after each answer on the caller's thread), :meth:`queue_chunks`; ``chunk_batch`` (default 1: admitted
            documents computed one per forward pass; more: in one padded batch).

    Raises:
        ValueError: a setting out of range (see :class:`EngineConfig`); TypeError: an unknown setting.
    """

    def __init__(self, loaded: LoadedModel, config: EngineConfig | None = None, *,
                 chunk_cache: ChunkCache | None = None, **settings: Any) -> None:
        from ragcache.engine.blend.calibration import Calibration, model_calibration

        if not isinstance(loaded, LoadedModel):
            raise TypeError(f"LocalEngine takes a LoadedModel, got {type(loaded).__name__}: to load a model by name "
                             "or folder use LocalEngine.from_pretrained('HuggingFaceTB/SmolLM2-135M-Instruct' | path)")
        cfg = self.config = EngineConfig.of(config, **settings)
        self.decode = DecodeCacheSpec(cfg.decode_cache, cfg.decode_backend, cfg.decode_nbits, cfg.residual_length,
                                      cfg.decode_sink_tokens)
        self._loaded_fingerprint = loaded.fingerprint.with_adapters_of(loaded.model)  # a PEFT wrap after load_model
        self.model = unwrap_adapters(loaded.model)
        self.tokenizer = loaded.tokenizer
        kv.use_fast_attention(self.model)
        self.prefix_cache = PrefixCache(self.fingerprint.digest, block_size=cfg.block_size,
                                        max_bytes=cfg.prefix_cache_bytes)
        self.chunk_cache: ChunkCache | None = chunk_cache
        self._recompute_ratio = cfg.recompute_ratio
        self.namespace = cfg.namespace
        self.reuse_policy = cfg.reuse
        self.prefill_rate = PrefillRate()
        if isinstance(cfg.calibration, Calibration) or cfg.calibration is None:
            self.calibration = cfg.calibration
        else:
            self.calibration = model_calibration(self.fingerprint, cfg.home) if cfg.calibration else None
        self.decode_check = load_decode_check(self.fingerprint.digest, self.decode.tag, cfg.home) \
            if cfg.calibration is True and self.decode.quantized else None
        self._lock = threading.RLock()
        self.chunk_queue = ChunkQueue(self._lock, max_docs=cfg.chunk_queue, admission=cfg.chunk_admission,
                                      sink_kv=self._cached_sink, batch_docs=cfg.chunk_batch)
        self._eos = frozenset(eos_ids(self.model, self.tokenizer))
        self.template_date = cfg.template_date
        # Why prefix / chunk KV reuse is off for this model (sliding-window or other attention the
        # caches do not support), or None; when set, every request is a full prefill.
        self.kv_reuse_blocker = kv_reuse_blocker(self.model)
        if self.kv_reuse_blocker:
            log.warning("prefix and chunk KV reuse switched off for %s: %s, which the KV caches do not support; "
                        "every request is computed in full", self.fingerprint, self.kv_reuse_blocker)
        # A RoPE that switches tables at a prompt length (LongRoPE): prefix KV keyed by the regime, no chunk reuse.
        self.rope_switch = None if self.kv_reuse_blocker else rope_switch(self.model)
        if self.rope_switch is not None:
            log.warning("chunk KV reuse switched off for %s: %s; prefix KV is reused only between prompts on the "
                        "same side of it", self.fingerprint, self.rope_switch.describe())

    @property
    def decode_cache(self) -> str:
        """``"quantized"`` or ``"dynamic"`` (so configured, or the quantized format failed :meth:`check_decode`)."""
        return self._decode_spec().kind

    def _decode_spec(self) -> DecodeCacheSpec:
        check = self.decode_check
        failed = check is not None and check.decode == self.decode.tag and not check.allowed
        return DecodeCacheSpec() if failed else self.decode

    def check_decode(self, prompts: Sequence[Any], **kwargs: Any) -> Any:
        """:func:`ragcache.engine.decode_cache.check_decode` (same keyword arguments) for this model; the
        :class:`~ragcache.engine.decode_cache.DecodeCheck` is recorded, returned and obeyed from now on."""
        self.decode_check = check_decode(self, prompts, **kwargs)
        return self.decode_check

    @property
    def recompute_ratio(self) -> float | None:
        """The r used when a request gives none: the constructor's, else the calibrated one, else ``None``
        (exact prefill: without a record no blending unless the caller sets an r or runs ``ragcache calibrate``)."""
        from ragcache.engine.blend.request import default_ratio

        return default_ratio(self)

    def blend_setting_name(self, recompute_ratio: float | None = None, use_chunk_cache: bool | None = None) -> str | None:
        """The name of the blend setting a request with these options blends its chunk hits at (``None``:
        exact prefill): :func:`ragcache.engine.blend.request.blend_name`. A blended answer is labelled
        with it and, stored, is served only to requests at the same setting."""
        from ragcache.engine.blend.request import blend_name

        return blend_name(self, recompute_ratio, use_chunk_cache)

    @property
    def configured_recompute_ratio(self) -> float | None:
        """The r this engine was given (constructor, ``RAGCACHE_RECOMPUTE_RATIO`` or the :attr:`recompute_ratio`
        setter), or ``None`` when it takes its r from a blend setting or calibration record. A caller's r
        wins over a record's: the blend's setting rule reads this (:func:`ragcache.engine.blend.request.setting_for`)."""
        return self._recompute_ratio

    @property
    def lock(self) -> threading.RLock:
        """The engine's re-entrant lock: held by every forward pass over the model and every cache write
        (:meth:`prefill`, :meth:`stream`, :meth:`store_chunks`, the chunk queue's worker per document); a caller running its own passes on :attr:`model` (a
        calibration, a decode check) holds it for their duration."""
        return self._lock

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """The token ids that end an answer: the generation config's, the model config's and the tokenizer's EOS
        (:func:`ragcache.engine.decode.eos_ids`, read once at construction)."""
        return self._eos

    @property
    def rank_by(self) -> str:
        """The name of the KV selection rule a caller's r blends with (:mod:`ragcache.engine.blend.rules`): the
        config's ``rank_by``, else the calibration record's, else ``DEFAULT_SELECTION``."""
        from ragcache.engine.blend.request import selection_rule

        return selection_rule(self)

    @property
    def selection(self) -> str:
        """Deprecated name of :attr:`rank_by` (warns)."""
        warnings.warn("LocalEngine.selection is deprecated: read LocalEngine.rank_by", DeprecationWarning, stacklevel=2)
        return self.rank_by

    @recompute_ratio.setter
    def recompute_ratio(self, r: float | None) -> None:
        self._recompute_ratio = check_recompute_ratio(r)

    @classmethod
    def from_pretrained(cls, name_or_path: str | None = None, *, dtype: Any = None, chunk_cache: Any = None,
                        **kwargs: Any) -> LocalEngine:
        """Load a model (the embedded SmolLM2-135M-Instruct by default) and wrap it."""
        return cls(load_model(name_or_path, dtype=dtype, home=kwargs.get("home")), chunk_cache=chunk_cache, **kwargs)

    # -- prompt --------------------------------------------------------------
    @property
    def context_window(self) -> int:
        """Maximum positions the model supports (tokens; :func:`ragcache.limits.context_window_of`)."""
        return context_window_of(self.model.config)

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes as content (:func:`ragcache.engine.text_ids.text_ids`: control-token
        strings counted as the text they are, as the prompt encodes them)."""
        return len(text_ids(self.tokenizer, text))

    def build_prompt(self, source: PromptSource) -> Prompt:
        """:func:`ragcache.engine.prompt.build_prompt` with this engine's tokenizer and template date.

        Raises:
            ValueError: for empty or malformed input.
        """
        return build_prompt(self.tokenizer, source, template_date=self.template_date)

    def raw(self, text: str) -> Prompt:
        """A prompt of plain text without the chat template."""
        return raw_prompt(self.tokenizer, text)

    # -- prefill -------------------------------------------------------------
    def prefill(self, prompt: Prompt, *, use_prefix_cache: bool = True, use_chunk_cache: bool | None = None,
                recompute_ratio: float | None = None, max_new_tokens: int = 0,
                store_missed_chunks: bool = True, tenant: str | None = None,
                prefix_limit: int | None = None, namespace: str | None = None) -> PrefillResult:
        """Compute the KV cache of ``prompt`` and the logits of its last token, reusing cached KV.

        Args:
            store_missed_chunks: hand the documents that missed the chunk cache to the chunk queue
                (:meth:`queue_chunks`) before returning (``False``: the caller does it later with
                ``result.missed_docs``, as :meth:`stream` does after decode).
            tenant: the request's tenant, hashed into its KV keys (:meth:`kv_salt`).
            prefix_limit: reuse at most this many prompt tokens from the prefix cache (``None``: no limit).
            namespace: the old name of ``tenant`` (deprecated).

        Raises:
            ValueError: for an empty prompt.
            ContextWindowError: when ``len(prompt) + max_new_tokens`` exceeds the context window.
        """
        tenant = renamed_tenant(tenant, namespace, "LocalEngine.prefill")
        with self._lock:  # a chunk computed by the queue's worker waits, and so does this for it (one document)
            return self._prefill(prompt, use_prefix_cache, use_chunk_cache, recompute_ratio, max_new_tokens,
                                 store_missed_chunks, tenant, prefix_limit)

    def _prefill(self, prompt: Prompt, use_prefix_cache: bool, use_chunk_cache: bool | None,
                 recompute_ratio: float | None, max_new_tokens: int, store_missed_chunks: bool,
                 tenant: str | None, prefix_limit: int | None) -> PrefillResult:
        if self.kv_reuse_blocker or self.rope_switch:  # windowed attention: no reuse; a RoPE switch: no chunk reuse
            use_prefix_cache, use_chunk_cache = use_prefix_cache and not self.kv_reuse_blocker, False  # (warned once)
        ids = prompt.input_ids
        n = len(ids)
        self._check_size(n, max_new_tokens)
        r = self.recompute_ratio if recompute_ratio is None else recompute_ratio
        check_recompute_ratio(r)
        use_chunks = (self.chunk_cache is not None) if use_chunk_cache is None else use_chunk_cache
        if use_chunks and self.chunk_cache is None:
            raise ValueError("use_chunk_cache=True needs an engine built with chunk_cache=ChunkCache(...)")
        stats = RequestStats(prompt_tokens=n)
        t0 = time.perf_counter()
        salt, fp = self._prefix_salt(tenant, n), self.fingerprint.digest
        limit = n - 1 if prefix_limit is None else max(0, min(n - 1, prefix_limit))
        match = self.prefix_cache.match(ids, salt=salt, max_tokens=limit, fingerprint=fp) if use_prefix_cache else None
        missed: list[list[int]] = []
        try:
            p = match.num_tokens if match else 0
            doc_spans = prompt.document_spans()
            view = chunk_view(self, ids, [(s, e) for s, e, _ in doc_spans], r, tenant) if use_chunks else None
            blend = False
            if use_chunks:  # the setting's chunk context: BOS sink or the request's stable prefix
                cut, plan = self._chunk_plan(p, doc_spans, view)
                if plan.hits or plan.missed:
                    stats.docs_hit, stats.docs_missed = len(plan.hits), len(plan.missed)
                    missed = [m.token_ids for m in plan.missed]
                    blend = self._decide(plan, r, stats)
                if blend and cut < p:  # the match ran into a hit document: reuse the prefix up to it only
                    self.prefix_cache.truncate(match, cut)
                    p = cut
            pieces = self.prefix_cache.pieces(match) if match else None
            cache = self._start_cache(pieces, n + min(max_new_tokens, self.PREALLOCATE_DECODE))
            blended = False
            if blend:
                try:
                    logits, exact_upto, cache = self._blend(ids, p, cache, plan, r, stats)
                    blended = True
                except NotImplementedError as e:
                    log.warning("CacheBlend unavailable for this model (%s); falling back to full prefill", e)
                    stats.reuse_decision = f"CacheBlend unavailable ({e}): exact prefill"
                    cache = self._start_cache(pieces, n + min(max_new_tokens, self.PREALLOCATE_DECODE))
            if not blended:
                t1 = time.perf_counter()
                logits = self._forward_suffix(ids, p, cache)
                self.prefill_rate.update(n - p, time.perf_counter() - t1)
                stats.prefill_tokens_computed = n - p
                exact_upto = n
            stats.prefix_tokens_reused = p
            stats.prefill_tokens_reused = p + stats.chunk_tokens_reused
        finally:
            if match is not None:
                self.prefix_cache.release(match)
        if use_prefix_cache:
            keys, values = kv.cache_tensors(cache)
            self.prefix_cache.insert(ids, keys, values, salt=salt, upto=exact_upto, fingerprint=fp,
                                     known=match.hashes if match is not None else ())
        stats.prefill_s = time.perf_counter() - t0
        if store_missed_chunks:
            stats.chunk_store_s, missed = self.queue_chunks(missed, view), []
        return PrefillResult(cache, logits, stats, exact_upto, missed, view)

    def _chunk_plan(self, p: int, doc_spans: Sequence[tuple[int, int, Any]],
                    view: BoundChunkCache) -> tuple[int, ChunkPlan]:
        """The chunk plan of the documents after a ``p``-token prefix match, and the prefix to reuse when
        the request blends.

        A prefix match (whole blocks) may end inside a document: every document opens with the same
        wrapper tokens (``<document>\\n``), so the system text's last block runs into the first document
        whichever it is. That document could not be blended (it starts before the prefix) and, missed,
        would never be stored. So it is looked up with the documents after it: on a hit the prefix to
        reuse is cut back to the last block boundary at or before its start (the few system tokens in
        that block are computed again, exactly; :meth:`prefill` cuts the match only when it blends); on
        a miss the whole match is kept and the document is computed in the request's context from ``p``
        (and its chunk KV queued as any miss's). Only a match that entered the document by less than a
        block is cut: one that holds more of it had the same document there before (the same documents
        in the same order, another question), and exact reuse beats blending. A match that ends between
        documents is kept.

        Returns:
            ``(prefix tokens to reuse when blending, plan)``; the plan's hits all start at or after it.
        """
        bs = self.prefix_cache.block_size
        # the match entered the document by less than a block: only its shared wrapper head matched. A match that
        # holds more of it held the same document there before: exact reuse of it beats blending it.
        straddle = next((s for s, e, _ in doc_spans if s < p < e and p - s < bs), None)
        cut = p if straddle is None else straddle // bs * bs
        plan = view.lookup_many([(s, e, piece.ids) for s, e, piece in doc_spans if s >= cut])
        if straddle is not None and not any(h.start == straddle for h in plan.hits):
            cut = p  # the straddled document missed: nothing to blend before p
        return cut, plan

    def _check_size(self, n: int, max_new_tokens: int) -> None:
        if n == 0:
            raise ValueError("prompt has no tokens: give a non-empty question")
        if n + max_new_tokens > self.context_window:
            raise ContextWindowError(
                f"prompt is {n} tokens and max_new_tokens is {max_new_tokens}, but the model's context window is "
                f"{self.context_window} tokens: use fewer or shorter documents (lower top-k), a shorter question or "
                f"history, or a smaller max_new_tokens"
            )

    def queue_chunks(self, docs: Sequence[Sequence[int]], view: BoundChunkCache | None = None, *,
                     tenant: str | None = None, namespace: str | None = None) -> float:
        """Hand documents (token ids) that missed the chunk cache to the chunk queue (:attr:`chunk_queue`,
        :mod:`ragcache.engine.chunk.queue`): a sighting of each is counted, and those seen
        ``chunk_admission`` times (:mod:`ragcache.engine.chunk.admission`) are computed and stored in the
        background while no request is in flight (:meth:`drain_chunk_queue` waits for it). ``view``: as
        :meth:`store_chunks` (``tenant``, and its deprecated old name ``namespace``, too). Returns the seconds
        spent on the caller's thread (0 with a queue; with ``chunk_queue=0`` the sighting and the computation
        happen here)."""
        tenant = renamed_tenant(tenant, namespace, "LocalEngine.queue_chunks")
        if self.chunk_cache is None or not docs:
            return 0.0
        return self.chunk_queue.submit(view or self.chunks_for(tenant), docs)

    def _cached_sink(self, view: BoundChunkCache, capacity: int) -> tuple[Any, int] | None:
        """A chunk context's leading whole blocks from the prefix cache, copied into a cache of ``capacity``
        positions, and their number of tokens; ``None`` when the prefix cache holds none (the chunk queue
        then computes the context too). A prefix-conditioned chunk is computed after the request's stable
        prefix, which that request put in the prefix cache: reading it back spares a forward pass over the
        system text for every document (:data:`~ragcache.engine.chunk.bound.SinkKV`)."""
        if len(view.sink) < self.prefix_cache.block_size or self.kv_reuse_blocker or self.rope_switch is not None:
            return None
        match = self.prefix_cache.match(view.sink, salt=view.salt, fingerprint=view.fingerprint)
        try:
            pieces = self.prefix_cache.pieces(match)
            return None if pieces is None else (self._start_cache(pieces, capacity), match.num_tokens)
        finally:
            self.prefix_cache.release(match)

    def drain_chunk_queue(self, timeout: float | None = None, *, first_sightings: bool = False) -> bool:
        """Wait until the chunk queue has computed every admitted document (:meth:`ChunkQueue.drain
        <ragcache.engine.chunk.queue.ChunkQueue.drain>`); ``True`` when drained, ``False`` when ``timeout``
        seconds passed first. ``first_sightings``: also compute the documents seen fewer than
        ``chunk_admission`` times (call it when the engine is idle and its documents will be asked again:
        the demo does at its end). Never call it from inside a request or while holding :attr:`lock`."""
        return self.chunk_queue.drain(timeout, first_sightings=first_sightings)

    @property
    def chunk_queue_stats(self) -> ChunkQueueStats:
        """Documents the chunk queue was handed, dropped, counted as first sightings, admitted and computed."""
        return self.chunk_queue.stats

    def store_chunks(self, docs: Sequence[Sequence[int]], view: BoundChunkCache | None = None, *,
                     tenant: str | None = None, namespace: str | None = None) -> float:
        """Compute and store the chunk KV of documents (token ids) that missed the chunk cache, now and
        unconditionally (no admission rule, no queue; requests use :meth:`queue_chunks`).

        A missed document is computed in its request's context at every layer (exact), but
        what is stored for next time is its KV computed on its own after the chunk cache's sink
        (:meth:`BoundChunkCache.compute <ragcache.engine.chunk.BoundChunkCache.compute>`), not the KV taken from the request: taken from the request
        it would carry the first request's preceding documents in every layer's V and K, so a
        chunk's content would depend on which request happened to store it first, and the
        blend fidelity measured by :meth:`calibrate` (on independently computed chunks, as
        CacheBlend stores them, §5) would not hold for it. The price is one extra forward pass
        over the document with short attention, paid in the background by the chunk queue (``chunk_store_s``
        in the stats is the part paid on the request's thread: 0 with a queue; measured by
        ``ragcache bench prefix``).

        ``view``: the chunk cache view of the request's setting (:attr:`PrefillResult.chunk_view`, already
        under the request's KV salt); default the BOS-sink one under the KV salt of ``tenant`` (``namespace``:
        its deprecated old name). Returns: seconds spent (0 when there is no chunk cache or nothing to store).
        """
        tenant = renamed_tenant(tenant, namespace, "LocalEngine.store_chunks")
        if self.chunk_cache is None or not docs:
            return 0.0
        t = time.perf_counter()
        with self._lock:
            (view or self.chunks_for(tenant)).add_many(docs)
        return time.perf_counter() - t

    def _prefix_salt(self, tenant: str | None, length: int) -> str | None:
        """The prefix cache's salt of a ``length``-token prompt: :meth:`kv_salt`, with the RoPE regime when the
        model's RoPE switches tables at a length (:func:`~ragcache.engine.windowed.rope_switch`)."""
        salt = self.kv_salt(tenant)
        if self.rope_switch is None:
            return salt
        from ragcache.hashing import canonical_json

        return canonical_json([salt, self.rope_switch.regime(length)])

    PREFILL_CHUNK = 512
    PREALLOCATE_DECODE = 1024
    """After a prefix hit the request's KV buffers (:class:`~ragcache.engine.kv.PreallocatedLayer`) hold the
    prompt and up to this many answer tokens before they grow."""

    def _start_cache(self, pieces: Any, capacity: int) -> Any:
        """The request's cache: empty, or a prefix hit's blocks (:meth:`PrefixCache.pieces`) copied once into
        buffers of ``capacity`` positions that the suffix and decode then fill in place."""
        return kv.cache_from_blocks(self.model, *pieces, capacity=capacity) if pieces else kv.new_cache(self.model)

    def _forward_suffix(self, ids: list[int], p: int, cache: Any) -> torch.Tensor:
        """Prefill ``ids[p:]`` after ``p`` cached positions; logits of the last token, float32 ``[vocab]``.

        With nothing cached, one forward uses the causal fast path. After a prefix hit the
        attention is :func:`ragcache.engine.attention.causal_attention` (no mask: prefix part +
        square causal part merged by log-sum-exp), and the suffix goes in chunks of
        :attr:`PREFILL_CHUNK` tokens to bound activation memory. Measured (``ragcache bench
        prefix-hits``, SmolLM2-135M, one thread, CPU time): 3,500-token prompt, cold 15.8 s; after
        hits of 864 / 1,744 / 2,624 tokens 13.6 / 9.9 / 5.2 s (transformers' masked path 14.7 /
        10.6 / 5.7 s); one layer's attention after a 48-token hit 203 ms against 409 ms masked.
        """
        if p == 0 or self.rope_switch is not None:  # a RoPE switch: the last position picks the table
            return kv.forward(self.model, ids[p:], cache, p)[-1]
        pos = p
        while True:
            end = min(pos + self.PREFILL_CHUNK, len(ids))
            logits = kv.forward(self.model, ids[pos:end], cache, pos)[-1]
            if end == len(ids):
                return logits
            pos = end

    def _decide(self, plan: ChunkPlan, r: float | None, stats: RequestStats) -> bool:
        cal = self.calibration  # r is None unless the caller set one or a record licenses one: a caller's r wins
        if plan.reusable_tokens and r is None and cal is not None and not cal.blend_allowed:
            stats.reuse_decision = (f"{cal.verdict()}: exact prefill (pass recompute_ratio= to blend anyway, "
                                    "labelled approximate)")
            return False
        if plan.reusable_tokens and r is None:
            stats.reuse_decision = ("no calibration record for this model and no recompute_ratio given: exact prefill "
                                    "(run `ragcache calibrate` or pass recompute_ratio= to blend)")
            return False
        d = self.reuse_policy.decide(plan.reusable_tokens, rate=self.prefill_rate.value, recompute_ratio=r,  # live rate
                                     n_layers=int(self.model.config.num_hidden_layers))
        stats.reuse_decision = d.reason
        return d.blend

    def _blend(self, ids: list[int], p: int, cache: Any, plan: ChunkPlan, r: float, stats: RequestStats):
        # Only hit documents are blended; missed ones are computed in this request's context (exact).
        return blend_request(self, ids, p, cache, plan, r, stats)

    RETIRED_CALIBRATE_OPTIONS = ("ratios", "min_agreement", "confidence", "max_ratio", "rank_by")

    def calibrate(self, prompts: Sequence[Any], *, golds: Sequence[Sequence[str]] | None = None,
                  settings: Sequence[Any] | None = None, rule: Any = None, answer_tokens: int = 32,
                  yardstick_every: int = 0, save: bool = True, home: Any = None,
                  progress: Callable[[str], None] | None = None, note: str = "", **retired: Any) -> Any:
        """Measure blend settings on ``prompts`` under the license rule, record the verdict for this model
        and use it from now on.

        Runs :func:`ragcache.engine.blend.setting.calibrate_settings` with a
        :class:`~ragcache.engine.blend.setting.SettingsPlan` of ``settings`` and ``rule`` (what
        ``ragcache calibrate`` runs), and sets :attr:`calibration`; the record carries the rule's name
        and thresholds, so only this rule's verdict ever licenses a blend.

        Args:
            prompts: RAG prompts with documents (messages lists with ``ragcache_kind`` document blocks,
                PromptLayouts or :class:`Prompt`); development data, never the data a result is reported on.
            golds: each prompt's gold answers (the rule scores free-running answers by F1); required.
            settings: the candidate :class:`~ragcache.engine.blend.setting.BlendSetting` s (default
                :func:`~ragcache.engine.blend.setting.candidate_settings`: infoflow selection at r = 0.15,
                0.20, 0.30 over prefix-conditioned chunks); their number is the rule's Bonferroni ``k``.
            rule: the :class:`~ragcache.engine.blend.license.LicenseRule` (default: its defaults).
            answer_tokens: the full-prefill greedy answer forced through each blend (tokens, stops at EOS).
            yardstick_every: run the bfloat16-vs-float32 full-prefill yardstick on every n-th prompt (0:
                never; it holds a bfloat16 copy of the model while it runs).
            save: write the record under ``home`` (default: this engine's home).
            progress: called with one line per prompt and setting.
            note: how the prompts were made, kept in the record.

        Returns:
            The :class:`~ragcache.engine.blend.calibration.Calibration` (``blend_allowed`` only when a
            setting is licensed; :meth:`~ragcache.engine.blend.calibration.Calibration.verdict` says why).

        Raises:
            TypeError: an option of the retired pooled-agreement rule (``ratios``, ``min_agreement``,
                ``confidence``, ``max_ratio``, ``rank_by``), or any other unknown keyword.
            ValueError: no prompts or settings, no ``golds`` (or not one list per prompt), a prompt
                without documents, a bad setting or threshold.
        """
        from ragcache.engine.blend.license import LicenseRule
        from ragcache.engine.blend.setting import SettingsPlan, calibrate_settings, candidate_settings

        if retired:
            old = [k for k in retired if k in self.RETIRED_CALIBRATE_OPTIONS]
            if old:
                raise TypeError(f"calibrate(): {', '.join(old)} belonged to the retired pooled-agreement rule "
                                "(ragcache issue 40): pass settings=candidate_settings(ratios, rank_by=...) and "
                                "rule=LicenseRule(...) (ragcache.engine.blend.setting / .license)")
            raise TypeError(f"calibrate() got unexpected keyword arguments {sorted(retired)}")
        if rule is None:
            rule = LicenseRule()
        if not isinstance(rule, LicenseRule):
            raise TypeError(f"rule must be a LicenseRule (ragcache.engine.blend.license); got {type(rule).__name__}")
        if isinstance(answer_tokens, bool) or not isinstance(answer_tokens, int) or answer_tokens < 1:
            raise ValueError(f"answer_tokens must be an integer >= 1; got {answer_tokens!r}")
        if isinstance(yardstick_every, bool) or not isinstance(yardstick_every, int) or yardstick_every < 0:
            raise ValueError(f"yardstick_every must be an integer >= 0; got {yardstick_every!r}")
        plan = SettingsPlan(settings=list(candidate_settings() if settings is None else settings), rule=rule,
                            answer_tokens=answer_tokens, yardstick_every=yardstick_every, note=note)
        self.calibration = calibrate_settings(self, prompts, plan, save=save,
                                              home=self.config.home if home is None else home,
                                              progress=progress, golds=golds)
        return self.calibration

    # -- decode --------------------------------------------------------------
    def generate(self, prompt: EngineRequest | PromptSource, **options: Any) -> Generation:
        """Generate an answer to one request. Greedy by default.

        Args:
            prompt: an :class:`~ragcache.engine.request.EngineRequest`, or what it holds as its prompt (a
                :class:`Prompt`, PromptLayout, messages list, string or token ids) with its other fields as
                keyword arguments (``options``):
            max_new_tokens: decode budget (tokens), default 128.
            temperature: 0 for greedy; > 0 samples.
            top_p: nucleus sampling mass (with temperature > 0).
            stop: stop strings; generation ends before the first one.
            seed: RNG seed for sampling.
            use_prefix_cache / use_chunk_cache / recompute_ratio / prefix_limit: cache controls.
            tenant: the request's tenant, salting its KV keys (see :meth:`prefill`; ``namespace``: its
                deprecated old name).

        Raises:
            ValueError / ContextWindowError: for bad input (see :meth:`prefill`).
            TypeError: an unknown keyword argument, or keyword arguments with an ``EngineRequest``.
        """
        request = engine_request(prompt, options, "LocalEngine.generate")
        gen = None
        for ev in self.stream(request):
            gen = ev.generation or gen
        assert gen is not None
        return gen

    def stream(self, prompt: EngineRequest | PromptSource, **options: Any) -> Iterator[StreamEvent]:
        """Stream text deltas of one request (an :class:`~ragcache.engine.request.EngineRequest`, or a
        prompt with keyword arguments, as :meth:`generate`); the last event carries the full
        :class:`Generation`. The deltas join to the generation's text (text that may begin a stop string is
        held back until the next token decides). ``stop``: a str or a list of str.

        Raises:
            ValueError: ``max_new_tokens`` not an integer >= 1, bad temperature / top_p / stop, or
                bad input (see :meth:`prefill`), when the stream is read.
            TypeError: as :meth:`generate`, when called.
        """
        return self._stream(engine_request(prompt, options, "LocalEngine.stream"))

    def _stream(self, request: EngineRequest) -> Iterator[StreamEvent]:
        """:meth:`stream` of a request record (a generator: nothing runs until the first event is read)."""
        max_new_tokens = check_sampling(request.max_new_tokens, request.temperature, request.top_p)
        tenant = request.tenant
        stops = check_stops(request.stop)
        prompt = self.build_prompt(request.prompt)
        use_prefix_cache = request.use_prefix_cache and not self.kv_reuse_blocker
        gen_rng = torch.Generator().manual_seed(request.seed) if request.seed is not None else None
        with self.chunk_queue.request(), self._lock:  # marked first: the chunk queue's worker yields to it
            t0 = time.perf_counter()
            pre = self.prefill(prompt, use_prefix_cache=use_prefix_cache, use_chunk_cache=request.use_chunk_cache,
                               recompute_ratio=request.recompute_ratio, max_new_tokens=max_new_tokens,
                               store_missed_chunks=False, tenant=tenant, prefix_limit=request.prefix_limit)
            stats, cache = pre.stats, pre.cache
            spec = self._decode_spec()
            cache = spec.hand_over(self.model, cache)
            stats.decode_cache = spec.tag
            stats.approximate = stats.approximate or spec.approximate
            ids = prompt.input_ids
            first_logits = pre.last_logits.detach().clone()
            res = DecodeResult()
            for ev in decode(self.model, self.tokenizer, cache, pre.last_logits, len(ids),
                             max_new_tokens=max_new_tokens, temperature=request.temperature, top_p=request.top_p,
                             stops=stops, eos=self._eos, rng=gen_rng, result=res):
                ev.stats = stats  # prefill facts are final: a server's headers can go out with the first event
                yield ev
            out = res.tokens
            t_first = res.t_first if res.t_first is not None else res.t_end
            stats.ttft_s = t_first - t0  # prefill + choosing the first token
            stats.decode_tokens = len(out)
            stats.decode_s = res.t_end - t_first
            stats.decode_tokens_per_s = (len(out) - 1) / stats.decode_s if stats.decode_s > 0 and len(out) > 1 else 0.0
            stats.finish_reason = res.finish_reason
            seq = ids + out[:-1]
            if use_prefix_cache and pre.exact_upto == len(ids) and len(out) > 1 and not spec.quantized \
                    and self._prefix_salt(tenant, len(seq)) == self._prefix_salt(tenant, len(ids)):
                # Multi-turn reuse: the answer's KV (all but the last token, whose KV is never computed);
                # not an answer whose decode crossed a RoPE switch (its KV mixes two tables).
                keys, values = kv.cache_tensors(cache)
                self.prefix_cache.insert(seq, keys, values, salt=self._prefix_salt(tenant, len(seq)),
                                         upto=len(seq), fingerprint=self.fingerprint.digest)
            stats.chunk_store_s = self.queue_chunks(pre.missed_docs, pre.chunk_view, tenant=tenant)
        yield StreamEvent("", None, Generation(res.text, out, stats, first_logits), stats)

    def astream(self, prompt: EngineRequest | PromptSource, **options: Any) -> AsyncIterator[StreamEvent]:
        """Async :meth:`stream` (same arguments): the blocking forward passes run in a worker thread
        (:func:`ragcache.aio.iterate_in_thread`, the one sync-to-async bridge); leaving the loop early
        stops generation within one decode step and releases the engine."""
        from ragcache.aio import iterate_in_thread

        request = engine_request(prompt, options, "LocalEngine.astream")
        return iterate_in_thread(lambda: self.stream(request), name="ragcache-engine-stream")

