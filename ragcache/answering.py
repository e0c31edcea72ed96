"""The one answer path: lookup -> single flight -> re-lookup -> the call -> may it be stored -> store.

Every entry point (``RagCache.answer`` / ``aanswer``, ``ragcache ask``, the LlamaIndex query
engine, the LangChain middleware and ``ChatRagCache``, the proxy) answers through
:class:`AnswerPath`; they map their native request to ``(question, partition)`` and their
native response to a :class:`~ragcache.backend.BackendResult`, and nothing else.

API (for adapters)::

    from ragcache.answering import AnswerPath, Provenance, cacheable

    path = AnswerPath(semantic_cache, cache_truncated=False, flight_timeout_s=60.0)
    answer = path.run(question, partition, lambda: my_call(...), max_tokens=256, model="claude-...")
    answer = await path.arun(question, partition, lambda: my_async_call(...), max_tokens=256)
    for piece in path.stream(question, partition, lambda: my_stream(...), max_tokens=256):
        ...   # str pieces of text, then one final Answer
    hit = path.lookup(question, partition, max_tokens=256)   # Answer | None, no call, no flight

- ``call()`` returns a :class:`~ragcache.backend.BackendResult` (native payloads an adapter must
  relay, e.g. the upstream HTTP body, go in ``result.details``); ``arun`` takes a coroutine
  function; ``stream``'s call returns an iterator of ``str`` pieces ending with the
  ``BackendResult`` (a stream that ends without one is ``incomplete`` and never stored).
- A hit is an :class:`Answer` with ``layer="semantic"``, zero :class:`~ragcache.backend.CacheUsage`,
  ``ttft_s`` = the lookup's time, and ``finish_reason`` / ``approximate`` / ``recompute_ratio``
  from the entry's :class:`Provenance` (``answer.provenance``); ``similarity`` /
  ``matched_question`` say what it matched.
- :func:`cacheable` is the one rule for "may this answer be stored": a non-empty text that
  ended with ``stop``, or ``length`` when the entry point stores cut answers within their budget
  (``cache_truncated``: the budget is in the partition and in the entry, so it is served only to
  the same budget).
- The entry's metadata holds :meth:`Provenance.to_json` under :data:`PROVENANCE_KEY`;
  :meth:`Provenance.from_metadata` also reads the flat keys stored by earlier releases (the
  pipeline's ``finish_reason`` / ``layer`` / ``approximate`` / ``recompute_ratio``, the proxy's
  ``model`` / ``stop_reason`` / ``stop_sequence``, LangChain's serialised generations).

Single flight (:class:`ragcache.semantic.flight.FlightTable`, one lock API for sync and async
callers): concurrent identical misses (same partition, same question text) in one process join one
flight; its leader holds the store's lock (a lock file per key for a folder, a PostgreSQL advisory
lock) so other processes wait too, re-reads the cache, calls, stores. The others then read the
stored answer; if the leader's call raised they raise the *same* error (no queue of repeats); if
its answer may not be stored (a refusal, a tool call...) each makes its own call. A leader that
hangs past ``flight_timeout_s`` lets one waiter through (the next leader), not all.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from ragcache.backend import (
    FINISH_REASONS,
    LAYERS,
    BackendResult,
    CacheUsage,
    FinishReason,
    Layer,
)

if TYPE_CHECKING:
    from ragcache.semantic import PartitionKey

log = logging.getLogger("ragcache.answering")

PROVENANCE_KEY = "ragcache_provenance"
"""Key of :meth:`Provenance.to_json` in a stored entry's metadata."""

_LEGACY_LAYERS = {"upstream": "provider"}  # the proxy labelled forwarded answers so before 0.3
_LEGACY_GENERATIONS = "langchain_generations"  # RagCacheSemanticCache's serialised generations


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a stored answer came from: the one record every entry point writes and reads.

    Attributes:
        layer: the :data:`~ragcache.backend.Layer` that computed it (never ``semantic``: that is how
            it is served later).
        finish_reason: why it ended (:data:`~ragcache.backend.FinishReason`).
        approximate / recompute_ratio: computed from blended chunk KV (CacheBlend) at this ratio.
        model: the model that wrote it (provider model id or engine fingerprint), when known.
        stop_reason / stop_sequence: the provider's native end reason and matched stop sequence
            (Anthropic ``stop_reason`` / ``stop_sequence``, OpenAI ``finish_reason``), for replaying
            the native response.

    Raises:
        ValueError: a layer that is not a :data:`~ragcache.backend.Layer` (or is ``semantic``), an
            unknown finish reason, a ratio outside [0, 1].
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
        r = self.recompute_ratio
        if r is not None and (isinstance(r, bool) or not isinstance(r, int | float) or not 0.0 <= r <= 1.0):
            raise ValueError(f"recompute_ratio must be a number in [0, 1] or None, got {r!r}")
        for name in ("model", "stop_reason", "stop_sequence"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, str):
                raise TypeError(f"provenance {name} must be a str or None, got {type(v).__name__}")

    @classmethod
    def of(cls, result: BackendResult, *, model: str | None = None) -> Provenance:
        """The provenance of a fresh backend result (``model``: else ``result.details["model"]``;
        the native stop reason from ``details["stop_reason"]`` / ``details["finish_reason"]``)."""
        d = result.details or {}
        native = d.get("stop_reason", d.get("finish_reason"))
        seq = d.get("stop_sequence")
        m = model if model is not None else d.get("model")
        return cls(result.layer, result.finish_reason, bool(result.approximate), result.recompute_ratio,
                   m if isinstance(m, str) else None, native if isinstance(native, str) else None,
                   seq if isinstance(seq, str) else None)

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

        Raises:
            ValueError: a version newer than this release reads (written by a newer ragcache).
        """
        meta = dict(metadata or {})
        rec = meta.get(PROVENANCE_KEY)
        if isinstance(rec, Mapping):
            v = rec.get("v")
            if not isinstance(v, int) or v > cls.VERSION:
                raise ValueError(f"answer provenance version {v!r} is newer than this ragcache reads "
                                 f"({cls.VERSION}): upgrade ragcache")
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
        ok_ratio = isinstance(ratio, int | float) and not isinstance(ratio, bool) and 0.0 <= ratio <= 1.0

        def text(k: str) -> str | None:
            v = rec.get(k)
            return v if isinstance(v, str) else None

        return cls(layer, finish, bool(rec.get("approximate", False)), float(ratio) if ok_ratio else None,
                   text("model"), text("stop_reason"), text("stop_sequence"))


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
    out: dict[str, Any] = {k: own[k] for k in ("layer", "approximate", "recompute_ratio") if k in own}
    for k in ("stop_reason", "stop_sequence"):
        if isinstance(meta.get(k), str):
            out[k] = meta[k]
    name = meta.get("model_name") or meta.get("model")
    if isinstance(name, str):
        out["model"] = name
    return out


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
    if not result.text.strip():
        return False
    return result.finish_reason == "stop" or (result.finish_reason == "length" and bool(cache_truncated))


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
        flight_timeout_s: longest wait (seconds, finite, >= 0) for a flight's leader before one waiter
            takes over.
        ttl_s: time to live of stored answers (``None``: the cache's default).

    Raises:
        ValueError: ``semantic`` without ``lookup`` / ``store``; a bad ``flight_timeout_s``.
    """

    def __init__(self, semantic: Any = None, *, cache_truncated: bool = False, single_flight: bool = True,
                 flight_timeout_s: float = 60.0, ttl_s: float | None = None) -> None:
        from ragcache.semantic.flight import check_timeout

        if semantic is not None and not all(callable(getattr(semantic, m, None)) for m in ("lookup", "store")):
            raise ValueError(f"semantic must be a SemanticCache (or PgSemanticCache) or None, got "
                             f"{type(semantic).__name__}")
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

    def _store_args(self, question: str, partition: Any, result: BackendResult, max_tokens: int | None,
                    model: str | None, metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if self.semantic is None or partition is None or not self.cacheable(result):
            return None
        meta = {**dict(metadata or {}), PROVENANCE_KEY: Provenance.of(result, model=model).to_json()}
        out = result.usage.completion_tokens or None
        return {"question": question, "answer": result.text, "partition": partition, "metadata": meta,
                "ttl_s": self.ttl_s, "finish_reason": result.finish_reason, "max_tokens": max_tokens,
                "output_tokens": out, "store_truncated": self.cache_truncated}

    def record(self, question: str, partition: PartitionKey | None, result: BackendResult, *,
               max_tokens: int | None = None, model: str | None = None, started: float | None = None,
               metadata: Mapping[str, Any] | None = None) -> Answer:
        """Store ``result`` when :meth:`cacheable` (with its :class:`Provenance`) and return its Answer."""
        args = self._store_args(question, partition, result, max_tokens, model, metadata)
        if args is not None:
            self.semantic.store(args.pop("question"), args.pop("answer"), **args)
        total = None if started is None else time.perf_counter() - started
        return Answer.of(question, result, total_s=total, model=model)

    async def arecord(self, question: str, partition: PartitionKey | None, result: BackendResult, *,
                      max_tokens: int | None = None, model: str | None = None, started: float | None = None,
                      metadata: Mapping[str, Any] | None = None) -> Answer:
        """Async :meth:`record`."""
        args = self._store_args(question, partition, result, max_tokens, model, metadata)
        if args is not None:
            await self.semantic.astore(args.pop("question"), args.pop("answer"), **args)
        total = None if started is None else time.perf_counter() - started
        return Answer.of(question, result, total_s=total, model=model)

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
        kw = {"max_tokens": max_tokens, "model": model, "started": t0, "metadata": metadata}
        if lookup:
            hit = self.lookup(question, partition, max_tokens=max_tokens, threshold=threshold, started=t0)
            if hit is not None:
                return hit
        if not self._flies(partition, lookup, store):
            return self.record(question, partition if store else None, call(), **kw)
        key = flight_key(partition, question)
        while True:
            seat = FLIGHTS.join(key, self.flight_timeout_s)
            outcome = seat.wait()  # "lead", "done", or "retry"; raises the leader's error
            if outcome == "retry":
                continue  # the leader was cancelled or abandoned: a new flight
            if outcome == "done":
                hit = self.lookup(question, partition, max_tokens=max_tokens, threshold=threshold, started=t0)
                if hit is not None:
                    return hit
                # the leader's answer may not be stored (a refusal, a tool call...): each caller its own
                return self.record(question, partition, call(), **kw)
            # the store's lock spans processes (a lock file per key, a PostgreSQL advisory lock)
            with FLIGHTS.lead(seat), self.semantic.flight_lock(key, seat.lock_timeout_s) as locked:
                if locked:  # another process may have answered while this one waited
                    hit = self.lookup(question, partition, max_tokens=max_tokens, threshold=threshold, started=t0)
                    if hit is not None:
                        return hit
                else:
                    log.warning("single flight: waited %.1f s for another process answering %r; "
                                "answering here", self.flight_timeout_s, question[:60])
                return self.record(question, partition, call(), **kw)

    async def arun(self, question: str, partition: PartitionKey | None,
                   call: Callable[[], Awaitable[BackendResult]], *, max_tokens: int | None = None,
                   threshold: float | None = None, lookup: bool = True, store: bool = True,
                   model: str | None = None, metadata: Mapping[str, Any] | None = None) -> Answer:
        """Async :meth:`run`: ``call`` is a coroutine function; waiting happens on the event loop and
        shares flights and locks with sync callers of the same question."""
        from ragcache.semantic.flight import FLIGHTS, flight_key

        t0 = time.perf_counter()
        kw = {"max_tokens": max_tokens, "model": model, "started": t0, "metadata": metadata}
        if lookup:
            hit = await self.alookup(question, partition, max_tokens=max_tokens, threshold=threshold, started=t0)
            if hit is not None:
                return hit
        if not self._flies(partition, lookup, store):
            return await self.arecord(question, partition if store else None, await call(), **kw)
        key = flight_key(partition, question)
        while True:
            seat = FLIGHTS.join(key, self.flight_timeout_s)
            outcome = await seat.await_()
            if outcome == "retry":
                continue
            if outcome == "done":
                hit = await self.alookup(question, partition, max_tokens=max_tokens, threshold=threshold,
                                         started=t0)
                if hit is not None:
                    return hit
                return await self.arecord(question, partition, await call(), **kw)
            with FLIGHTS.lead(seat):
                async with self.semantic.aflight_lock(key, seat.lock_timeout_s) as locked:
                    if locked:
                        hit = await self.alookup(question, partition, max_tokens=max_tokens, threshold=threshold,
                                                 started=t0)
                        if hit is not None:
                            return hit
                    else:
                        log.warning("single flight: waited %.1f s for another process answering %r; "
                                    "answering here", self.flight_timeout_s, question[:60])
                    return await self.arecord(question, partition, await call(), **kw)

    def stream(self, question: str, partition: PartitionKey | None,
               call: Callable[[], Iterable[str | BackendResult]], *, max_tokens: int | None = None,
               threshold: float | None = None, lookup: bool = True, store: bool = True,
               model: str | None = None, metadata: Mapping[str, Any] | None = None) -> Iterator[str | Answer]:
        """:meth:`run` as a stream: yields ``str`` pieces of the answer, then one final :class:`Answer`.

        ``call()`` returns an iterable of ``str`` pieces ending with the :class:`BackendResult`. A hit
        yields its whole text as one piece. A stream that ends without a result (cut before its end
        event) or that the consumer closes early is ``incomplete``: its text is not stored. The
        leader holds the flight while it streams; waiters get the stored answer as a hit.
        """
        from ragcache.semantic.flight import FLIGHTS, flight_key

        t0 = time.perf_counter()
        if lookup:
            hit = self.lookup(question, partition, max_tokens=max_tokens, threshold=threshold, started=t0)
            if hit is not None:
                yield hit.text
                yield hit
                return
        kw = {"max_tokens": max_tokens, "model": model, "started": t0, "metadata": metadata}
        if not self._flies(partition, lookup, store):
            yield from self._streamed(question, partition if store else None, call, t0, kw)
            return
        key = flight_key(partition, question)
        while True:
            seat = FLIGHTS.join(key, self.flight_timeout_s)
            outcome = seat.wait()
            if outcome == "retry":
                continue
            if outcome == "done":
                hit = self.lookup(question, partition, max_tokens=max_tokens, threshold=threshold, started=t0)
                if hit is not None:
                    yield hit.text
                    yield hit
                    return
                yield from self._streamed(question, partition, call, t0, kw)
                return
            with FLIGHTS.lead(seat), self.semantic.flight_lock(key, seat.lock_timeout_s) as locked:
                if locked:
                    hit = self.lookup(question, partition, max_tokens=max_tokens, threshold=threshold, started=t0)
                    if hit is not None:
                        yield hit.text
                        yield hit
                        return
                yield from self._streamed(question, partition, call, t0, kw)
                return

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
