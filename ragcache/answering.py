"""The one answer path: lookup -> single flight -> re-lookup -> the call -> may it be stored -> store.

Every entry point (``RagCache``, ``ragcache ask``, the LlamaIndex query engine, the LangChain
middleware and ``ChatRagCache``, the proxy) maps its native request to ``(question, partition)``
and its native response to a :class:`~ragcache.backend.BackendResult`, and answers here::

    from ragcache.answering import AnswerPath, Provenance, cacheable

    path = AnswerPath(semantic_cache, cache_truncated=False, flight_timeout_s=60.0)
    answer = path.run(question, partition, lambda: my_call(...), max_tokens=256, model="claude-...")
    answer = await path.arun(question, partition, my_async_call, max_tokens=256)   # a coroutine function
    for item in path.stream(question, partition, my_stream, max_tokens=256):
        ...   # str pieces of text, then one final Answer
    hit = path.lookup(question, partition, max_tokens=256)   # Answer | None: no call, no flight

- ``call()`` returns a ``BackendResult`` (a native payload to relay goes in ``result.details``);
  ``stream``'s call yields ``str`` pieces then the ``BackendResult`` (without one: ``incomplete``).
- A hit is an :class:`Answer` with ``layer="semantic"``, zero :class:`~ragcache.backend.CacheUsage`,
  ``ttft_s`` = the lookup's time, and finish reason / approximate / recompute ratio from the
  entry's :class:`Provenance` (``answer.provenance``).
- :func:`cacheable` is the one storage rule: non-empty text that ended with ``stop``, or ``length``
  under ``cache_truncated`` (the budget is in the partition and the entry: served to the same budget only).
- Entries hold :meth:`Provenance.to_json` under :data:`PROVENANCE_KEY`; :meth:`Provenance.from_metadata`
  also reads what earlier releases stored (the pipeline's and the proxy's flat keys, LangChain's generations).

Single flight (:data:`ragcache.semantic.flight.FLIGHTS`, one lock API for sync and async callers):
identical concurrent misses join one flight; its leader holds the store's lock (a lock file per key,
a PostgreSQL advisory lock: other processes wait too), re-reads, calls, stores. Waiters then read
the stored answer; when the leader's call raised they raise the *same* error (no queue of repeats);
when its answer may not be stored (a refusal, a tool call...) each makes its own call. A leader that
hangs past ``flight_timeout_s`` lets one waiter through (the next leader), not all.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ragcache.backend import FINISH_REASONS, LAYERS, BackendResult, CacheUsage, FinishReason, Layer

if TYPE_CHECKING:
    from ragcache.semantic import PartitionKey


PROVENANCE_KEY = "ragcache_provenance"
"""Key of :meth:`Provenance.to_json` in a stored entry's metadata."""

_LEGACY_LAYERS = {"upstream": "provider"}  # the proxy labelled forwarded answers so before 0.3
_LEGACY_GENERATIONS = "langchain_generations"  # RagCacheSemanticCache's serialised generations


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a stored answer came from: the one record every entry point writes and reads.

    Attributes:
        layer: the :data:`~ragcache.backend.Layer` that computed it (never ``semantic``, how it is served).
        finish_reason: why it ended (:data:`~ragcache.backend.FinishReason`).
        approximate / recompute_ratio: computed from blended chunk KV (CacheBlend) at this ratio.
        model: the model that wrote it (``backend:model id``), when known.
        stop_reason / stop_sequence: the provider's native end reason (Anthropic ``stop_reason``,
            OpenAI ``finish_reason``) and matched stop sequence, for replaying the native response.

    Raises:
        ValueError: a layer not in :data:`~ragcache.backend.Layer` or ``semantic``, an unknown finish
            reason, a ratio outside [0, 1]. TypeError: a non-str model / stop reason / sequence.
    """

    layer: Layer
    finish_reason: FinishReason = "stop"
    approximate: bool = False
    recompute_ratio: float | None = None
    model: str | None = None
    stop_reason: str | None = None
    stop_sequence: str | None = None

    VERSION: ClassVar[int] = 1

    def __post_init__(self) -> None:
        if self.layer not in LAYERS or self.layer == "semantic":
            raise ValueError(f"provenance layer must be the layer that computed the answer, one of "
                             f"{', '.join(x for x in LAYERS if x != 'semantic')}; got {self.layer!r}")
        if self.finish_reason not in FINISH_REASONS:
            raise ValueError(f"unknown finish_reason {self.finish_reason!r}; one of {', '.join(FINISH_REASONS)}")
        if self.recompute_ratio is not None and not _ratio(self.recompute_ratio):
            raise ValueError(f"recompute_ratio must be a number in [0, 1] or None, got {self.recompute_ratio!r}")
        for name in ("model", "stop_reason", "stop_sequence"):
            if not isinstance(getattr(self, name), str | None):
                raise TypeError(f"provenance {name} must be a str or None, got {type(getattr(self, name)).__name__}")

    @classmethod
    def of(cls, result: BackendResult, *, model: str | None = None) -> Provenance:
        """The provenance of a fresh backend result (``model``: else ``result.details["model"]``;
        the native stop reason from ``details["stop_reason"]`` / ``details["finish_reason"]``)."""
        d = result.details or {}
        facts = (model if model is not None else d.get("model"), d.get("stop_reason", d.get("finish_reason")),
                 d.get("stop_sequence"))
        return cls(result.layer, result.finish_reason, bool(result.approximate), result.recompute_ratio,
                   *(v if isinstance(v, str) else None for v in facts))

    def to_json(self) -> dict[str, Any]:
        """A JSON object with a version field ``v`` (what is stored under :data:`PROVENANCE_KEY`)."""
        return {"v": self.VERSION, "layer": self.layer, "finish_reason": self.finish_reason,
                "approximate": self.approximate, "recompute_ratio": self.recompute_ratio, "model": self.model,
                "stop_reason": self.stop_reason, "stop_sequence": self.stop_sequence}

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any] | None) -> Provenance:
        """Read an entry's metadata: :data:`PROVENANCE_KEY` (version 1), else the flat keys stored by
        earlier releases (the pipeline, the proxy, LangChain's generations). A value that cannot be
        read falls back to its default rather than failing the hit: an unknown layer is
        ``provider``, an unknown finish reason ``stop`` (only finished answers were stored).
        A newer version (``v``) is read by the same fields (versions only add fields)."""
        meta = dict(metadata or {})
        rec = meta.get(PROVENANCE_KEY)
        if isinstance(rec, Mapping):
            return cls._lenient(rec)
        flat = {k: meta[k] for k in ("layer", "finish_reason", "approximate", "recompute_ratio", "model",
                                      "stop_reason", "stop_sequence") if k in meta}
        gens = meta.get(_LEGACY_GENERATIONS)
        if isinstance(gens, str):
            flat = {**_from_generations(gens), **flat}
        return cls._lenient(flat)

    @classmethod
    def _lenient(cls, rec: Mapping[str, Any]) -> Provenance:
        layer = rec.get("layer")
        layer = _LEGACY_LAYERS.get(layer, layer)
        if layer not in LAYERS or layer == "semantic":
            layer = "provider"
        finish = rec.get("finish_reason")
        finish = finish if finish in FINISH_REASONS else "stop"
        ratio = rec.get("recompute_ratio")
        text = [v if isinstance(v := rec.get(k), str) else None for k in ("model", "stop_reason", "stop_sequence")]
        return cls(layer, finish, bool(rec.get("approximate", False)), float(ratio) if _ratio(ratio) else None, *text)


def _ratio(r: Any) -> bool:
    return isinstance(r, int | float) and not isinstance(r, bool) and 0.0 <= r <= 1.0


def _from_generations(raw: str) -> dict[str, Any]:
    """The provenance facts inside LangChain generations serialised by ``RagCacheSemanticCache``
    (JSON from ``langchain_core.load.dumps``; read as plain JSON, never loaded as objects)."""
    try:
        gens = json.loads(raw)
        msg = gens[0]["kwargs"]["message"]["kwargs"]
        meta = msg.get("response_metadata") or {}
    except (ValueError, KeyError, IndexError, TypeError):
        return {}
    own = meta.get("ragcache") if isinstance(meta.get("ragcache"), Mapping) else {}
    out = {k: own[k] for k in ("layer", "approximate", "recompute_ratio") if k in own}
    return {**out, "model": meta.get("model_name") or meta.get("model"),
            **{k: meta[k] for k in ("stop_reason", "stop_sequence") if k in meta}}


@dataclass(frozen=True, slots=True)
class Answer:
    """One answered question and what each layer did.

    Attributes:
        question / text: the question and the answer.
        layer: ``semantic`` for a semantic-cache hit, else the backend's layer (:data:`ragcache.backend.Layer`).
        usage: token accounting (:class:`~ragcache.backend.CacheUsage`; all zero on a semantic hit).
        ttft_s: seconds to the first token (a semantic hit: the lookup time).
        total_s: wall time of the request, seconds.
        similarity / matched_question: cosine similarity and stored question of a semantic hit.
        finish_reason: why the answer ended (:data:`~ragcache.backend.FinishReason`); on a hit, the
            stored answer's.
        approximate / recompute_ratio: the prefill blended cached document KV (CacheBlend) at
            this recompute ratio, so the answer may differ from a full prefill's.
        details: the backend's extras (engine timings, provider breakpoints); display only.
        provenance: where the answer came from (:class:`Provenance`: on a hit, the stored record).
    """

    question: str
    text: str
    layer: Layer
    usage: CacheUsage = field(default_factory=CacheUsage)
    ttft_s: float = 0.0
    total_s: float = 0.0
    similarity: float | None = None
    matched_question: str | None = None
    finish_reason: FinishReason = "stop"
    approximate: bool = False
    recompute_ratio: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    provenance: Provenance | None = None

    @property
    def hit(self) -> bool:
        """Served by the semantic cache (no model call)."""
        return self.layer == "semantic"

    @property
    def prompt_tokens(self) -> int:
        return self.usage.prompt_tokens

    @property
    def tokens_reused(self) -> int:
        return self.usage.reused

    @property
    def tokens_computed(self) -> int:
        return self.usage.computed

    @property
    def tokens_recomputed(self) -> int:
        return self.usage.recomputed

    def to_dict(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        out["usage"] = self.usage.to_dict()
        out["details"] = dict(self.details)
        out["provenance"] = None if self.provenance is None else self.provenance.to_json()
        return out

    @classmethod
    def of(cls, question: str, result: BackendResult, *, total_s: float | None = None,
           model: str | None = None) -> Answer:
        """The :class:`Answer` of a fresh backend result (``total_s``: else ``result.ttft_s``)."""
        return cls(question, result.text, result.layer, result.usage, result.ttft_s,
                   result.ttft_s if total_s is None else total_s, finish_reason=result.finish_reason,
                   approximate=result.approximate, recompute_ratio=result.recompute_ratio, details=result.details,
                   provenance=Provenance.of(result, model=model))


def cacheable(result: BackendResult, *, cache_truncated: bool = False) -> bool:
    """Whether an answer may be stored: non-empty text that ended normally (``stop``), or was cut at
    its token budget (``length``) when ``cache_truncated`` (the entry point's budget rule: the budget
    is in the partition and the entry, so it is served only to a request with the same budget).
    Never an answer that ended any other way (content filter, tool call, pause, refusal, context
    window, a cut stream, an error). The one rule of every entry point."""
    if not isinstance(result, BackendResult):
        raise TypeError(f"cacheable needs a BackendResult, got {type(result).__name__}")
    return bool(result.text.strip()) and (result.finish_reason == "stop" or
                                          (result.finish_reason == "length" and bool(cache_truncated)))


def hit_answer(question: str, hit: Any, elapsed_s: float) -> Answer:
    """A semantic hit as an :class:`Answer`: layer ``semantic``, zero usage, TTFT = ``elapsed_s``
    (the lookup), the stored answer's provenance."""
    prov = Provenance.from_metadata(hit.metadata)
    return Answer(question, hit.answer, "semantic", CacheUsage(), elapsed_s, elapsed_s, float(hit.similarity),
                  hit.question, prov.finish_reason, prov.approximate, prov.recompute_ratio,
                  {"entry_id": hit.entry_id}, prov)


class AnswerPath:
    """The one answer path over a semantic cache (:class:`~ragcache.semantic.SemanticCache`,
    :class:`~ragcache.semantic.PgSemanticCache`, any object with their ``lookup`` / ``store`` /
    ``flight_lock`` / ``aflight_lock``), or over none (every call goes to the backend).

    Args:
        semantic: the answer cache, or ``None``.
        cache_truncated: store answers cut at their token budget (:func:`cacheable`).
        single_flight: concurrent identical misses make one call (see the module docstring).
        flight_timeout_s: longest wait (seconds, finite, >= 0) for a leader before one waiter takes over.
        ttl_s: time to live of stored answers (``None``: the cache's default).

    Raises:
        TypeError: ``semantic`` without ``lookup`` / ``store``. ValueError: a bad ``flight_timeout_s``.
    """

    def __init__(self, semantic: Any = None, *, cache_truncated: bool = False, single_flight: bool = True,
                 flight_timeout_s: float = 60.0, ttl_s: float | None = None) -> None:
        from ragcache.semantic.flight import check_timeout

        if semantic is not None and not all(callable(getattr(semantic, m, None)) for m in ("lookup", "store")):
            raise TypeError(f"semantic must be a SemanticCache (or PgSemanticCache) or None, got {type(semantic).__name__}")
        self.semantic = semantic
        self.cache_truncated = bool(cache_truncated)
        self.single_flight = bool(single_flight)
        self.flight_timeout_s = check_timeout(flight_timeout_s)
        self.ttl_s = ttl_s

    # -- the rule ---------------------------------------------------------------------------------
    def cacheable(self, result: BackendResult) -> bool:
        """:func:`cacheable` with this path's ``cache_truncated``."""
        return cacheable(result, cache_truncated=self.cache_truncated)

    # -- lookup / store ---------------------------------------------------------------------------
    def lookup(self, question: str, partition: PartitionKey | None, *, max_tokens: int | None = None,
               threshold: float | None = None, started: float | None = None) -> Answer | None:
        """The stored answer as a hit :class:`Answer`, or ``None`` (also without a cache)."""
        if self.semantic is None or partition is None:
            return None
        t0 = time.perf_counter() if started is None else started
        hit = self.semantic.lookup(question, partition=partition, threshold=threshold, max_tokens=max_tokens)
        return None if hit is None else hit_answer(question, hit, time.perf_counter() - t0)

    async def alookup(self, question: str, partition: PartitionKey | None, *, max_tokens: int | None = None,
                      threshold: float | None = None, started: float | None = None) -> Answer | None:
        """Async :meth:`lookup` (in a worker thread)."""
        import asyncio  # lazily: the sync hit path never needs it

        return await asyncio.to_thread(self.lookup, question, partition, max_tokens=max_tokens,
                                       threshold=threshold, started=started)

    def record(self, question: str, partition: PartitionKey | None, result: BackendResult, *,
               max_tokens: int | None = None, model: str | None = None, started: float | None = None,
               metadata: Mapping[str, Any] | None = None) -> Answer:
        """Store ``result`` when :meth:`cacheable` (with its :class:`Provenance` under
        :data:`PROVENANCE_KEY`, its finish reason, budget and length) and return its :class:`Answer`."""
        if self.semantic is not None and partition is not None and self.cacheable(result):
            meta = {**dict(metadata or {}), PROVENANCE_KEY: Provenance.of(result, model=model).to_json()}
            self.semantic.store(question, result.text, partition=partition, metadata=meta, ttl_s=self.ttl_s,
                                finish_reason=result.finish_reason, max_tokens=max_tokens,
                                output_tokens=result.usage.completion_tokens or None,
                                store_truncated=self.cache_truncated)
        total = None if started is None else time.perf_counter() - started
        return Answer.of(question, result, total_s=total, model=model)

    async def arecord(self, question: str, partition: PartitionKey | None, result: BackendResult,
                      **kwargs: Any) -> Answer:
        """Async :meth:`record` (the store in a worker thread)."""
        import asyncio  # lazily: the sync hit path never needs it

        return await asyncio.to_thread(self.record, question, partition, result, **kwargs)

    # -- the path ---------------------------------------------------------------------------------
    def _flies(self, partition: Any, lookup: bool, store: bool) -> bool:
        return (self.single_flight and lookup and store and self.semantic is not None and partition is not None
                and callable(getattr(self.semantic, "flight_lock", None)))

    def run(self, question: str, partition: PartitionKey | None, call: Callable[[], BackendResult], *,
            max_tokens: int | None = None, threshold: float | None = None, lookup: bool = True,
            store: bool = True, model: str | None = None, metadata: Mapping[str, Any] | None = None) -> Answer:
        """Answer ``question``: a stored answer, else ``call()`` once among concurrent identical misses.

        Args:
            partition: the semantic partition (``None``: no cache for this request).
            call: the model call, ``() -> BackendResult``.
            max_tokens: the request's new-token budget (a cut answer is served only to the same budget).
            lookup: ``False`` skips the lookup (a refresh: the answer is still stored).
            store: ``False`` stores nothing (and takes no flight).
            model: the model id recorded in the provenance (else ``result.details["model"]``).
            metadata: more JSON-like metadata stored with the answer.

        Raises:
            whatever ``call`` raises (waiters of a failed flight raise the leader's error), and the
            cache's errors (e.g. ``RemoteStoreError``).
        """
        from ragcache.semantic.flight import FLIGHTS, flight_key

        t0 = time.perf_counter()

        def look() -> Answer | None:
            return self.lookup(question, partition, max_tokens=max_tokens, threshold=threshold, started=t0)

        def answer() -> Answer:
            return self.record(question, partition if store else None, call(), max_tokens=max_tokens, model=model,
                               started=t0, metadata=metadata)

        hit = look() if lookup else None
        if hit is not None or not self._flies(partition, lookup, store):
            return hit or answer()
        return FLIGHTS.fly(self.semantic, flight_key(partition, question), self.flight_timeout_s, look, answer)

    async def arun(self, question: str, partition: PartitionKey | None,
                   call: Callable[[], Awaitable[BackendResult]], *, max_tokens: int | None = None,
                   threshold: float | None = None, lookup: bool = True, store: bool = True,
                   model: str | None = None, metadata: Mapping[str, Any] | None = None) -> Answer:
        """Async :meth:`run`: ``call`` is a coroutine function; waiting happens on the event loop and
        shares flights and locks with sync callers of the same question."""
        from ragcache.semantic.flight import FLIGHTS, flight_key

        t0 = time.perf_counter()

        async def look() -> Answer | None:
            return await self.alookup(question, partition, max_tokens=max_tokens, threshold=threshold, started=t0)

        async def answer() -> Answer:
            return await self.arecord(question, partition if store else None, await call(), max_tokens=max_tokens,
                                      model=model, started=t0, metadata=metadata)

        hit = await look() if lookup else None
        if hit is not None or not self._flies(partition, lookup, store):
            return hit or await answer()
        return await FLIGHTS.afly(self.semantic, flight_key(partition, question), self.flight_timeout_s, look, answer)

    def stream(self, question: str, partition: PartitionKey | None,
               call: Callable[[], Iterable[str | BackendResult]], *, max_tokens: int | None = None,
               threshold: float | None = None, lookup: bool = True, store: bool = True,
               model: str | None = None, metadata: Mapping[str, Any] | None = None) -> Iterator[str | Answer]:
        """:meth:`run` as a stream: yields ``str`` pieces of the answer, then one final :class:`Answer`.

        ``call()`` returns an iterable of ``str`` pieces ending with the :class:`BackendResult`. A hit
        yields its whole text as one piece. A stream that ends without a result (cut before its end
        event) is ``incomplete`` and not stored; one the consumer closes early stores nothing. The
        leader holds the flight while it streams; waiters get the stored answer as a hit.
        """
        from ragcache.semantic.flight import FLIGHTS, flight_key

        t0 = time.perf_counter()
        kw = {"max_tokens": max_tokens, "model": model, "started": t0, "metadata": metadata}

        def look() -> Answer | None:
            return self.lookup(question, partition, max_tokens=max_tokens, threshold=threshold, started=t0)

        hit = look() if lookup else None
        if hit is None and not self._flies(partition, lookup, store):
            yield from self._streamed(question, partition if store else None, call, t0, kw)
            return
        key = None if hit is not None else flight_key(partition, question)
        while hit is None:
            seat = FLIGHTS.join(key, self.flight_timeout_s)
            outcome = seat.wait()
            if outcome == "retry":
                continue
            if outcome == "done":
                hit = look()
                if hit is None:
                    yield from self._streamed(question, partition, call, t0, kw)
                    return
                break
            with FLIGHTS.lead(seat), self.semantic.flight_lock(key, seat.lock_timeout_s) as locked:
                hit = look() if locked else None
                if hit is None:
                    yield from self._streamed(question, partition, call, t0, kw)
                    return
        yield hit.text
        yield hit

    def _streamed(self, question: str, partition: Any, call: Callable[[], Iterable[str | BackendResult]],
                  t0: float, kw: dict[str, Any]) -> Iterator[str | Answer]:
        parts: list[str] = []
        result: BackendResult | None = None
        first: float | None = None
        for item in call():
            if isinstance(item, BackendResult):
                result = item
                break
            if not isinstance(item, str):
                raise TypeError(f"a stream call yields str pieces and a final BackendResult, got {type(item).__name__}")
            if item and first is None:
                first = time.perf_counter() - t0
            parts.append(item)
            yield item
        if result is None:  # the stream ended before its end event: never stored
            result = BackendResult("".join(parts), "provider", CacheUsage(),
                                   first if first is not None else time.perf_counter() - t0, "incomplete")
        yield self.record(question, partition, result, **kw)


__all__ = ["PROVENANCE_KEY", "Answer", "AnswerPath", "Provenance", "cacheable", "hit_answer"]
