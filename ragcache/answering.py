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
- A stored answer made by a blend (CacheBlend chunk KV, :attr:`Provenance.blend_setting`) is served
  only to a request whose backend blends at that same setting (:func:`ragcache.provenance.may_serve`):
  every call takes the request's ``blend_setting`` (its name; ``None``, the default: exact prefill; or a
  zero-argument callable, read only when a stored answer was blended, so a hit needs no model load).
  Anything else is a miss, and the request's own answer then replaces the entry with the same words.
- :func:`cacheable` is the one storage rule: non-empty text that ended with ``stop``, or ``length``
  under ``cache_truncated`` (the budget is in the partition and the entry: served to the same budget only),
  and never a mere echo of the question.
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

import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ragcache.backend import BackendResult, CacheUsage
from ragcache.provenance import PROVENANCE_KEY, Answer, Provenance, hit_answer, may_serve

if TYPE_CHECKING:
    from ragcache.semantic import PartitionKey

BlendName = str | Callable[[], str | None] | None
"""A request's blend setting as the answer path takes it: the setting's name, ``None`` (exact prefill),
or a zero-argument callable giving either (read only when a stored answer was made by a blend)."""


def _blend_name(blend_setting: BlendName) -> str | None:
    return blend_setting() if callable(blend_setting) else blend_setting


def cacheable(result: BackendResult, *, cache_truncated: bool = False, question: str | None = None) -> bool:
    """Whether an answer may be stored: non-empty text that ended normally (``stop``), or was cut at
    its token budget (``length``) when ``cache_truncated`` (the entry point's budget rule: the budget
    is in the partition and the entry, so it is served only to a request with the same budget).
    Never an answer that ended any other way (content filter, tool call, pause, refusal, context
    window, a cut stream, an error), nor one that only repeats ``question`` (a small model's echo is
    no answer, and stored it would be served to every repeat). The one rule of every entry point."""
    if not isinstance(result, BackendResult):
        raise TypeError(f"cacheable needs a BackendResult, got {type(result).__name__}")
    if question is not None and _plain(result.text) == _plain(question):
        return False
    return bool(result.text.strip()) and (result.finish_reason == "stop" or
                                          (result.finish_reason == "length" and bool(cache_truncated)))


def _plain(text: str) -> str:
    """Letters and digits only, case-folded: "Hi, is X on? Thanks!" and "hi is x on thanks" are one text."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _parameters(fn: Any) -> Any:
    """The names ``fn`` takes (empty when its signature cannot be read)."""
    import inspect

    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


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
        # re-reads of a counted miss are not counted again (a custom cache without ``count=`` counts them)
        self._recount = semantic is not None and "count" in _parameters(semantic.lookup)
        self.cache_truncated = bool(cache_truncated)
        self.single_flight = bool(single_flight)
        self.flight_timeout_s = check_timeout(flight_timeout_s)
        self.ttl_s = ttl_s

    # -- the rule ---------------------------------------------------------------------------------
    def cacheable(self, result: BackendResult, *, question: str | None = None) -> bool:
        """:func:`cacheable` with this path's ``cache_truncated`` (and the request's ``question``: no echo)."""
        return cacheable(result, cache_truncated=self.cache_truncated, question=question)

    # -- lookup / store ---------------------------------------------------------------------------
    def lookup(self, question: str, partition: PartitionKey | None, *, max_tokens: int | None = None,
               threshold: float | None = None, started: float | None = None, count: bool = True,
               blend_setting: BlendName = None) -> Answer | None:
        """The stored answer as a hit :class:`Answer`, or ``None`` (also without a cache). ``count=False``: a
        re-read of a request already counted in the cache's lookups (hit rate). ``blend_setting``: the
        request's (module docstring); a stored blended answer at another setting is a miss."""
        if self.semantic is None or partition is None:
            return None
        t0 = time.perf_counter() if started is None else started
        kw = {} if count or not self._recount else {"count": False}
        hit = self.semantic.lookup(question, partition=partition, threshold=threshold, max_tokens=max_tokens, **kw)
        if hit is None:
            return None
        answer = hit_answer(question, hit, time.perf_counter() - t0)
        if answer.blend_setting is not None and not may_serve(answer.provenance, _blend_name(blend_setting)):
            return None
        return answer

    async def alookup(self, question: str, partition: PartitionKey | None, *, max_tokens: int | None = None,
                      threshold: float | None = None, started: float | None = None, count: bool = True,
                      blend_setting: BlendName = None) -> Answer | None:
        """Async :meth:`lookup` (in a worker thread)."""
        import asyncio  # lazily: the sync hit path never needs it

        return await asyncio.to_thread(self.lookup, question, partition, max_tokens=max_tokens,
                                       threshold=threshold, started=started, count=count, blend_setting=blend_setting)

    def _looks(self, question: str, partition: Any, max_tokens: int | None, threshold: float | None, t0: float,
               looked: bool = False, blend_setting: BlendName = None) -> Callable[[], Answer | None]:
        """The request's lookup as a function: the first call counts in the cache's hit rate, the re-reads
        of the single flight do not (nor any call when the caller has ``looked`` already)."""
        first = [not looked]

        def look() -> Answer | None:
            count, first[0] = first[0], False
            return self.lookup(question, partition, max_tokens=max_tokens, threshold=threshold, started=t0,
                               count=count, blend_setting=blend_setting)
        return look

    def _alooks(self, question: str, partition: Any, max_tokens: int | None, threshold: float | None,
                t0: float, blend_setting: BlendName = None) -> Callable[[], Awaitable[Answer | None]]:
        """Async :meth:`_looks` (the same lookup, and the same counting, in a worker thread)."""
        import asyncio  # lazily: the sync hit path never needs it

        look = self._looks(question, partition, max_tokens, threshold, t0, blend_setting=blend_setting)

        async def alook() -> Answer | None:
            return await asyncio.to_thread(look)
        return alook

    def record(self, question: str, partition: PartitionKey | None, result: BackendResult, *,
               max_tokens: int | None = None, model: str | None = None, started: float | None = None,
               metadata: Mapping[str, Any] | None = None) -> Answer:
        """Store ``result`` when :meth:`cacheable` (with its :class:`Provenance` under
        :data:`PROVENANCE_KEY`, its finish reason, budget and length) and return its :class:`Answer`."""
        if self.semantic is not None and partition is not None and self.cacheable(result, question=question):
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
            store: bool = True, model: str | None = None, metadata: Mapping[str, Any] | None = None,
            looked: bool = False, blend_setting: BlendName = None) -> Answer:
        """Answer ``question``: a stored answer, else ``call()`` once among concurrent identical misses.

        Args:
            partition: the semantic partition (``None``: no cache for this request).
            call: the model call, ``() -> BackendResult``.
            max_tokens: the request's new-token budget (a cut answer is served only to the same budget).
            lookup: ``False`` skips the lookup (a refresh: the answer is still stored).
            store: ``False`` stores nothing (and takes no flight).
            model: the model id recorded in the provenance (else ``result.details["model"]``).
            metadata: more JSON-like metadata stored with the answer.
            looked: the caller has just looked this request up (a miss, counted in the cache's hit rate), so
                this call's lookups are re-reads and not counted again.
            blend_setting: the blend setting the request's backend answers at (module docstring;
                ``None``: exact prefill): a stored answer made by another blend is not served.

        Raises:
            whatever ``call`` raises (waiters of a failed flight raise the leader's error), and the
            cache's errors (e.g. ``RemoteStoreError``).
        """
        from ragcache.semantic.flight import FLIGHTS, flight_key

        t0 = time.perf_counter()
        look = self._looks(question, partition, max_tokens, threshold, t0, looked, blend_setting)

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
                   model: str | None = None, metadata: Mapping[str, Any] | None = None,
                   blend_setting: BlendName = None) -> Answer:
        """Async :meth:`run`: ``call`` is a coroutine function; waiting happens on the event loop and
        shares flights and locks with sync callers of the same question."""
        from ragcache.semantic.flight import FLIGHTS, flight_key

        t0 = time.perf_counter()
        look = self._alooks(question, partition, max_tokens, threshold, t0, blend_setting)

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
               model: str | None = None, metadata: Mapping[str, Any] | None = None,
               blend_setting: BlendName = None) -> Iterator[str | Answer]:
        """:meth:`run` as a stream: yields ``str`` pieces of the answer, then one final :class:`Answer`.

        ``call()`` returns an iterable of ``str`` pieces ending with the :class:`BackendResult`. A hit
        yields its whole text as one piece. A stream that ends without a result (cut before its end
        event) is ``incomplete`` and not stored; one the consumer closes early stores nothing. The
        leader holds the flight while it streams; waiters get the stored answer as a hit.
        """
        from ragcache.semantic.flight import FLIGHTS, flight_key

        t0 = time.perf_counter()
        kw = {"max_tokens": max_tokens, "model": model, "started": t0, "metadata": metadata}
        look = self._looks(question, partition, max_tokens, threshold, t0, blend_setting=blend_setting)

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

    async def astream(self, question: str, partition: PartitionKey | None,
                      call: Callable[[], AsyncIterable[str | BackendResult]], *, max_tokens: int | None = None,
                      threshold: float | None = None, lookup: bool = True, store: bool = True,
                      model: str | None = None, metadata: Mapping[str, Any] | None = None,
                      blend_setting: BlendName = None) -> AsyncIterator[str | Answer]:
        """Async :meth:`stream`: ``call()`` returns an async iterable of ``str`` pieces ending with the
        :class:`BackendResult`; the flight is waited for on the event loop (shared with sync callers)."""
        from ragcache.semantic.flight import FLIGHTS, flight_key

        t0 = time.perf_counter()
        kw = {"max_tokens": max_tokens, "model": model, "started": t0, "metadata": metadata}
        look = self._alooks(question, partition, max_tokens, threshold, t0, blend_setting)

        hit = await look() if lookup else None
        if hit is None and not self._flies(partition, lookup, store):
            async for item in self._astreamed(question, partition if store else None, call, t0, kw):
                yield item
            return
        key = None if hit is not None else flight_key(partition, question)
        while hit is None:
            seat = FLIGHTS.join(key, self.flight_timeout_s)
            outcome = await seat.await_()
            if outcome == "retry":
                continue
            if outcome == "done":
                hit = await look()
                if hit is None:
                    async for item in self._astreamed(question, partition, call, t0, kw):
                        yield item
                    return
                break
            with FLIGHTS.lead(seat):
                async with self.semantic.aflight_lock(key, seat.lock_timeout_s) as locked:
                    hit = await look() if locked else None
                    if hit is None:
                        async for item in self._astreamed(question, partition, call, t0, kw):
                            yield item
                        return
        yield hit.text
        yield hit

    def _streamed(self, question: str, partition: Any, call: Callable[[], Iterable[str | BackendResult]],
                  t0: float, kw: dict[str, Any]) -> Iterator[str | Answer]:
        acc = _Pieces(t0)
        for item in call():
            if acc.add(item):
                break
            yield item
        yield self.record(question, partition, acc.result(), **kw)

    async def _astreamed(self, question: str, partition: Any, call: Callable[[], AsyncIterable[str | BackendResult]],
                         t0: float, kw: dict[str, Any]) -> AsyncIterator[str | Answer]:
        acc = _Pieces(t0)
        async for item in call():
            if acc.add(item):
                break
            yield item
        yield await self.arecord(question, partition, acc.result(), **kw)


class _Pieces:
    """A streamed answer being read: its pieces, TTFT, and the final result (``incomplete`` without one)."""

    def __init__(self, t0: float) -> None:
        self.t0, self.parts, self.first, self.final = t0, [], None, None

    def add(self, item: str | BackendResult) -> bool:
        """Take one item; True for the final :class:`BackendResult`.

        Raises:
            TypeError: an item that is neither a str nor a BackendResult."""
        if isinstance(item, BackendResult):
            self.final = item
            return True
        if not isinstance(item, str):
            raise TypeError(f"a stream call yields str pieces and a final BackendResult, got {type(item).__name__}")
        if item and self.first is None:
            self.first = time.perf_counter() - self.t0
        self.parts.append(item)
        return False

    def result(self) -> BackendResult:
        if self.final is not None:
            return self.final
        ttft = self.first if self.first is not None else time.perf_counter() - self.t0
        return BackendResult("".join(self.parts), "provider", CacheUsage(), ttft, "incomplete")  # never stored


__all__ = ["PROVENANCE_KEY", "Answer", "AnswerPath", "BlendName", "Provenance", "cacheable", "hit_answer"]
