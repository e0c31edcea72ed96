"""The one answer path: lookup -> single flight -> re-lookup -> the call -> may it be stored -> store.

Every entry point (``RagCache``, ``ragcache ask``, the LlamaIndex query engine, the LangChain
middleware and ``ChatRagCache``, the proxy) builds one :class:`~ragcache.request.CacheRequest`
(:mod:`ragcache.request`: question, layout, partition, tenant, budget, sampling, threshold, model),
maps its native response to a :class:`~ragcache.backend.BackendResult`, and answers here::

    from ragcache.answering import AnswerPath, Provenance, cacheable

    path = AnswerPath(semantic_cache, cache_truncated=False, flight_timeout_s=60.0)
    answer = path.run(request, lambda: my_call(...))
    answer = await path.arun(request, my_async_call)   # a coroutine function
    for item in path.stream(request, my_stream):
        ...   # str pieces of text, then one final Answer
    hit = path.lookup(request)   # Answer | None: no call, no flight

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

Sampled requests (:class:`Sampling`, one rule for every entry point): a request that samples (temperature
> 0, or unset where the backend's default samples) without a seed gets a fresh draw: it is neither looked
up nor stored, so "regenerate", best-of-n and repeated evaluation samples stay independent draws. A
path built with ``cache_sampled=True`` (an explicit opt-in) replays one stored sample to later requests
and labels it (``Provenance.sampled``). A request for several choices (``n > 1``) is never served one
stored sample. Seeded and temperature-0 requests are looked up and stored as usual (the temperature,
seed and ``n`` are in the partition).

A cache dependency that fails or hangs (the embedder, the answer store, its flight locks) costs a logged
miss, never the answer: every call into the cache passes its :class:`~ragcache.boundary.Boundary` (one
policy, :mod:`ragcache.boundary`). A lookup that raises anything or passes ``lookup_timeout_s`` is a miss (no
flight, nothing stored for that request), a store that raises or hangs is logged and the fresh answer
returned, a flight lock that cannot be taken is flown without, and a cache that failed is left alone for a
back-off before it is tried again. The caller's own mistakes (a threshold out of range, metadata that is not
JSON-like) are checked before the boundary and raise. Errors of the model call itself still raise.

Single flight (:data:`ragcache.semantic.flight.FLIGHTS`, one lock API for sync and async callers):
identical concurrent misses join one flight; its leader holds the store's lock (a lock file per key,
a PostgreSQL advisory lock: other processes wait too), re-reads, calls, stores. Waiters then read
the stored answer; when the leader's call raised they raise the *same* error (no queue of repeats);
when its answer may not be stored (a refusal, a tool call...) each makes its own call. A leader that
hangs past ``flight_timeout_s`` lets one waiter through (the next leader), not all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ragcache.backend import BackendResult, CacheUsage
from ragcache.boundary import Boundary, boundary_for, check_deadline
from ragcache.provenance import PROVENANCE_KEY, Answer, Provenance, SnapshotBook, hit_answer, may_serve
from ragcache.sampling import Sampling, fresh_draw

if TYPE_CHECKING:
    from ragcache.request import CacheRequest
    from ragcache.semantic.answer_cache import AnswerCache

log = logging.getLogger(__name__)

BlendName = str | Callable[[], str | None] | None
"""A request's blend setting as the answer path takes it: the setting's name, ``None`` (exact prefill),
or a zero-argument callable giving either (read only when a stored answer was made by a blend)."""


def _blend_name(blend_setting: BlendName) -> str | None:
    return blend_setting() if callable(blend_setting) else blend_setting

DEFAULT_LOOKUP_TIMEOUT_S = 10.0
"""Longest a lookup or a store may take (seconds) before the path goes on without it (a miss, or an
answer left unstored): a hanging embedder or answer store costs this much, never the answer."""

COLD_LOAD_TIMEOUT_S = 300.0
"""Deadline (seconds) of an answer cache's one-time cold load (a lazily loaded embedder: torch and the model
from disk), taken before the first lookup and outside ``lookup_timeout_s``: on a loaded machine it can take
longer than a lookup may, and cut at the lookup deadline it left the first identical requests without
their single flight, each calling the model and none stored."""

_FAILED = object()
"""What :meth:`AnswerPath._guarded` returns for a dependency that raised or passed its deadline."""


CACHE_TRUNCATED = True
"""The one rule for answers cut at their token budget (``finish_reason == "length"``), the default of
every entry point (``RagCache``, ``ragcache ask``, the demo, the LangChain cache and middleware, the
LlamaIndex query engine, the proxy): stored, with the budget in the partition and the entry, and
served only to a request with the same budget (greedy decoding gives it the same text). A small
model's answers often fill a short budget; not storing them left those entry points without a hit.
An entry point whose budget is not known stores no cut answer (it could never be served)."""


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


class AnswerPath:
    """The one answer path over an answer cache (:class:`~ragcache.semantic.answer_cache.AnswerCache`: a
    :class:`~ragcache.semantic.SemanticCache`, a :class:`~ragcache.semantic.pg_cache.PgSemanticCache`, any
    :class:`~ragcache.semantic.SemanticPolicy`), or over none (every call goes to the backend).

    Args:
        semantic: the answer cache (an :class:`~ragcache.semantic.answer_cache.AnswerCache`), or ``None``.
        cache_truncated: store answers cut at their token budget (:func:`cacheable`; default
            :data:`CACHE_TRUNCATED`).
        single_flight: concurrent identical misses make one call (see the module docstring).
        flight_timeout_s: longest wait (seconds, finite, >= 0) for a leader before one waiter takes over.
        ttl_s: time to live of stored answers (``None``: the cache's default).
        cache_sampled: replay one stored sample to later requests sampled without a seed (labelled
            ``Provenance.sampled``); default ``False``: each such request is a fresh draw (:class:`Sampling`).
        lookup_timeout_s: deadline (seconds, > 0, finite) of each lookup and store; one that hangs past it
            is a miss (or an answer left unstored), logged. ``None``: no deadline (the call runs inline).

    Raises:
        TypeError: ``semantic`` not an :class:`~ragcache.semantic.answer_cache.AnswerCache`. ValueError: a bad ``flight_timeout_s`` or
        ``lookup_timeout_s``.
    """

    def __init__(self, semantic: AnswerCache | None = None, *, cache_truncated: bool = CACHE_TRUNCATED, single_flight: bool = True,
                 flight_timeout_s: float = 60.0, ttl_s: float | None = None, cache_sampled: bool = False,
                 lookup_timeout_s: float | None = DEFAULT_LOOKUP_TIMEOUT_S) -> None:
        from ragcache.semantic.answer_cache import AnswerCache
        from ragcache.semantic.flight import check_timeout

        lookup_timeout_s = check_deadline(lookup_timeout_s)
        if semantic is not None and not isinstance(semantic, AnswerCache):
            raise TypeError(f"semantic must be an answer cache (a SemanticCache, a PgSemanticCache, any "
                            f"ragcache.semantic.answer_cache.AnswerCache) or None, got {type(semantic).__name__}")
        self.semantic: AnswerCache | None = semantic
        self.cache_truncated = bool(cache_truncated)
        self.single_flight = bool(single_flight)
        self.flight_timeout_s = check_timeout(flight_timeout_s)
        self.ttl_s = ttl_s
        self.cache_sampled = bool(cache_sampled)
        self.lookup_timeout_s = lookup_timeout_s
        self._warm = semantic is None  # True: nothing to load
        self.snapshots = SnapshotBook()
        """The snapshot each alias last answered with (:class:`ragcache.provenance.SnapshotBook`): an answer of
        an older snapshot is a miss (:meth:`stale`)."""

    # -- sampled requests ---------------------------------------------------------------------------
    def fresh_draw(self, sampling: Sampling | None) -> str | None:
        """Why a request must be answered by a fresh call, neither looked up nor stored, or ``None`` (it may
        be served a stored answer and its answer stored): :func:`ragcache.sampling.fresh_draw` with this
        path's ``cache_sampled``, the one replay rule (see the module docstring).

        Raises:
            TypeError: ``sampling`` not a :class:`Sampling` or ``None``."""
        return fresh_draw(sampling, cache_sampled=self.cache_sampled)

    def _labels_sampled(self, sampling: Sampling | None) -> bool:
        return sampling is not None and sampling.unseeded and self.cache_sampled

    # -- a failing or hanging dependency ----------------------------------------------------------
    @property
    def boundary(self) -> Boundary:
        """The answer cache's reads' :class:`~ragcache.boundary.Boundary` (one per cache object, shared by
        every path over it): lookups pass it. Its writes pass :attr:`write_boundary` and its flight locks a
        third, so a store that refuses writes still serves what it holds, and a lock that fails costs only
        the cross-process flight."""
        return boundary_for(self.semantic, "answer cache", logger=log)

    @property
    def write_boundary(self) -> Boundary:
        """The answer cache's writes' :class:`~ragcache.boundary.Boundary` (see :attr:`boundary`)."""
        return boundary_for(self.semantic, "answer cache writes", logger=log)

    def guard(self, what: str, fn: Callable[[], Any], default: Any = None, *, write: bool = False) -> Any:
        """``fn()`` (a call into the answer cache: a read, or a write with ``write=True``), or ``default`` when it
        raises, passes ``lookup_timeout_s`` or the cache is backed off after a failure (:mod:`ragcache.boundary`,
        logged naming ``what``): the path's failure rule, for an entry point whose framework owns the loop
        (LangChain's ``BaseCache``)."""
        if not self._warm:  # the cache's one-time cold load first, under its own deadline (:meth:`warm`)
            self.warm()
        b = self.write_boundary if write else self.boundary
        return b.call(what, fn, default, deadline_s=self.lookup_timeout_s)

    def _guarded(self, what: str, fn: Callable[[], Any], *, write: bool = False) -> Any:
        """``fn()``, or :data:`_FAILED` when the answer cache failed, hung or is backed off (:meth:`guard`)."""
        return self.guard(what, fn, _FAILED, write=write)

    def warm(self) -> bool:
        """Load what the answer cache loads lazily (its embedder: :meth:`AnswerCache.warm
        <ragcache.semantic.answer_cache.AnswerCache.warm>`) under
        :data:`COLD_LOAD_TIMEOUT_S`, not the lookup deadline; concurrent first requests wait for the one load,
        then look up and join one flight. Called before the first lookup or store; call it when you build a
        server to take the load off the first request. A load that fails is a logged miss (tried again after
        the back-off). Returns whether the cache is warm."""
        if not self._warm:
            deadline = None if self.lookup_timeout_s is None else max(COLD_LOAD_TIMEOUT_S, self.lookup_timeout_s)
            self._warm = bool(self.boundary.call("cold load", lambda: self.semantic.warm() or True, False,
                                                 deadline_s=deadline))
        return self._warm

    # -- the rule ---------------------------------------------------------------------------------
    def cacheable(self, result: BackendResult, *, question: str | None = None) -> bool:
        """:func:`cacheable` with this path's ``cache_truncated`` (and the request's ``question``: no echo)."""
        return cacheable(result, cache_truncated=self.cache_truncated, question=question)

    # -- lookup / store ---------------------------------------------------------------------------
    def lookup(self, request: CacheRequest, *, started: float | None = None, count: bool = True,
               blend_setting: BlendName = None) -> Answer | None:
        """The stored answer as a hit :class:`Answer`, or ``None`` (also without a cache or partition, for a
        request that must be a fresh draw (:meth:`fresh_draw`), and when the cache fails or passes
        ``lookup_timeout_s``: logged). ``count=False``: a re-read of a request already counted in the cache's
        lookups (hit rate). ``blend_setting``: the request's (module docstring); a stored blended answer at
        another setting is a miss."""
        hit = self._lookup(request, started, count, blend_setting)
        return None if hit is _FAILED else hit

    def _lookup(self, request: CacheRequest, started: float | None, count: bool, blend_setting: BlendName = None) -> Any:
        """:meth:`lookup`, with :data:`_FAILED` for a cache that failed (so the path skips its flight)."""
        partition = request.partition
        if self.semantic is None or partition is None or self.fresh_draw(request.sampling) is not None:
            return None
        t0 = time.perf_counter() if started is None else started
        _check_lookup(request)  # the caller's own mistakes raise; everything past here is the cache's
        hit = self._guarded("lookup", lambda: self.semantic.lookup_request(request, count=count))
        if hit is None or hit is _FAILED:
            return hit
        answer = hit_answer(request.question, hit, time.perf_counter() - t0)
        if answer.blend_setting is not None and not may_serve(answer.provenance, _blend_name(blend_setting)):
            return None
        if self.stale(request, answer):
            return None
        return answer

    def observe(self, request: CacheRequest, result: BackendResult) -> None:
        """Note the model a fresh ``result`` named (``details["model"]``) as the current snapshot of the
        request's model alias (:attr:`snapshots`)."""
        model = (result.details or {}).get("model")
        if request.alias is not None and isinstance(model, str):
            self.snapshots.observe(request.alias, model)

    def stale(self, request: CacheRequest, answer: Answer) -> bool:
        """Whether a stored ``answer`` was written by a snapshot its alias no longer answers with: a miss
        (logged), whose fresh answer replaces it."""
        if request.alias is None or not self.snapshots.stale(answer.provenance, request.alias):
            return False
        log.info("stored answer written by %s, but %s now answers as %s: a miss", answer.provenance.snapshot,
                 request.alias, self.snapshots.current(request.alias))
        return True

    async def alookup(self, request: CacheRequest, *, started: float | None = None, count: bool = True,
                      blend_setting: BlendName = None) -> Answer | None:
        """Async :meth:`lookup` (in a worker thread)."""
        import asyncio  # lazily: the sync hit path never needs it

        return await asyncio.to_thread(self.lookup, request, started=started, count=count, blend_setting=blend_setting)

    def _looks(self, request: CacheRequest, t0: float, looked: bool = False,
               blend_setting: BlendName = None) -> Callable[[], Any]:
        """The request's lookup as a function (an :class:`Answer`, ``None``, or :data:`_FAILED`): the first call
        counts in the cache's hit rate, the re-reads of the single flight do not (nor any call when the caller
        has ``looked`` already)."""
        first = [not looked]

        def look() -> Any:
            count, first[0] = first[0], False
            return self._lookup(request, t0, count, blend_setting)
        return look

    def _alooks(self, request: CacheRequest, t0: float, blend_setting: BlendName = None) -> Callable[[], Awaitable[Any]]:
        """Async :meth:`_looks` (the same lookup, and the same counting, in a worker thread)."""
        import asyncio  # lazily: the sync hit path never needs it

        look = self._looks(request, t0, blend_setting=blend_setting)

        async def alook() -> Any:
            return await asyncio.to_thread(look)
        return alook

    def record(self, request: CacheRequest, result: BackendResult, *, started: float | None = None,
               metadata: Mapping[str, Any] | None = None) -> Answer:
        """Store ``result`` when :meth:`cacheable` and the request is no fresh draw (:meth:`fresh_draw`), with its
        :class:`Provenance` under :data:`PROVENANCE_KEY`, its finish reason, budget and length, and return its
        :class:`Answer` (``started``: ``time.perf_counter()`` at the request's start). A store that fails or
        passes ``lookup_timeout_s`` is logged; the answer is returned."""
        question, partition, max_tokens = request.question, request.partition, request.max_tokens
        self.observe(request, result)
        cut_unknown = result.finish_reason == "length" and max_tokens is None  # never servable: not stored
        if self.semantic is not None and partition is not None and self.fresh_draw(request.sampling) is None \
                and self.cacheable(result, question=question) and not cut_unknown:
            prov = Provenance.of(result, model=request.model, sampled=self._labels_sampled(request.sampling))
            meta = _checked_metadata({**dict(metadata or {}), PROVENANCE_KEY: prov.to_json()}, self.ttl_s)
            self._guarded("store", lambda: self.semantic.store_request(
                request, result.text, finish_reason=result.finish_reason,
                output_tokens=result.usage.completion_tokens or None, metadata=meta, ttl_s=self.ttl_s,
                store_truncated=self.cache_truncated), write=True)
        total = None if started is None else time.perf_counter() - started
        return Answer.of(question, result, total_s=total, model=request.model)

    async def arecord(self, request: CacheRequest, result: BackendResult, **kwargs: Any) -> Answer:
        """Async :meth:`record` (the store in a worker thread)."""
        import asyncio  # lazily: the sync hit path never needs it

        return await asyncio.to_thread(self.record, request, result, **kwargs)

    def _locks(self) -> _GuardedLocks:
        """The answer cache's single-flight locks behind its boundary (a lock that fails is not taken)."""
        return _GuardedLocks(self.semantic, boundary_for(self.semantic, "flight locks", logger=log))

    # -- the path ---------------------------------------------------------------------------------
    def _flies(self, request: CacheRequest, lookup: bool, store: bool) -> bool:
        return self.single_flight and lookup and store and self.semantic is not None and request.partition is not None

    def run(self, request: CacheRequest, call: Callable[[], BackendResult], *, lookup: bool = True,
            store: bool = True, metadata: Mapping[str, Any] | None = None, looked: bool = False,
            blend_setting: BlendName = None) -> Answer:
        """Answer ``request``: a stored answer, else ``call()`` once among concurrent identical misses.

        Args:
            request: the :class:`~ragcache.request.CacheRequest` (``partition=None``: no cache for it; its
                ``max_tokens``: a cut answer is served only to the same budget; its ``sampling``: one that
                must be a fresh draw (:meth:`fresh_draw`) is neither looked up nor stored; its ``model``: the
                model recorded in the provenance, else ``result.details["model"]``).
            call: the model call, ``() -> BackendResult``.
            lookup: ``False`` skips the lookup (a refresh: the answer is still stored).
            store: ``False`` stores nothing (and takes no flight).
            metadata: more JSON-like metadata stored with the answer.
            looked: the caller has just looked this request up (a miss, counted in the cache's hit rate), so
                this call's lookups are re-reads and not counted again.
            blend_setting: the blend setting the request's backend answers at (module docstring;
                ``None``: exact prefill): a stored answer made by another blend is not served.

        Raises:
            whatever ``call`` raises (waiters of a failed flight raise the leader's error); a failing or
            hanging answer cache is a logged miss, never an error.
        """
        from ragcache.semantic.flight import FLIGHTS, flight_key

        t0 = time.perf_counter()
        lookup, store = self._replay(request.sampling, lookup, store)
        look = self._looks(request, t0, looked, blend_setting)

        def answer(stored: bool = store) -> Answer:
            return self.record(request if stored else _uncached(request), call(), started=t0, metadata=metadata)

        hit = look() if lookup else None
        if hit is _FAILED:  # the cache is down or hangs: a miss, no flight, nothing stored
            return answer(False)
        if hit is not None or not self._flies(request, lookup, store):
            return hit or answer()
        return FLIGHTS.fly(self._locks(), flight_key(request.partition, request.question), self.flight_timeout_s,
                           lambda: _answer_or_none(look()), answer)

    def _replay(self, sampling: Sampling | None, lookup: bool, store: bool) -> tuple[bool, bool]:
        """``(lookup, store)`` for a request: both off for a fresh draw (:meth:`fresh_draw`, logged)."""
        why = self.fresh_draw(sampling)
        if why is not None and self.semantic is not None:
            log.debug("answer cache skipped: %s", why)
            return False, False
        return lookup, store

    async def arun(self, request: CacheRequest, call: Callable[[], Awaitable[BackendResult]], *,
                   lookup: bool = True, store: bool = True, metadata: Mapping[str, Any] | None = None,
                   blend_setting: BlendName = None) -> Answer:
        """Async :meth:`run`: ``call`` is a coroutine function; waiting happens on the event loop and
        shares flights and locks with sync callers of the same question."""
        from ragcache.semantic.flight import FLIGHTS, flight_key

        t0 = time.perf_counter()
        lookup, store = self._replay(request.sampling, lookup, store)
        look = self._alooks(request, t0, blend_setting)

        async def answer(stored: bool = store) -> Answer:
            return await self.arecord(request if stored else _uncached(request), await call(), started=t0,
                                      metadata=metadata)

        hit = await look() if lookup else None
        if hit is _FAILED:  # the cache is down or hangs: a miss, no flight, nothing stored
            return await answer(False)
        if hit is not None or not self._flies(request, lookup, store):
            return hit or await answer()

        async def relook() -> Answer | None:
            return _answer_or_none(await look())
        return await FLIGHTS.afly(self._locks(), flight_key(request.partition, request.question),
                                  self.flight_timeout_s, relook, answer)

    def stream(self, request: CacheRequest, call: Callable[[], Iterable[str | BackendResult]], *,
               lookup: bool = True, store: bool = True, metadata: Mapping[str, Any] | None = None,
               blend_setting: BlendName = None) -> Iterator[str | Answer]:
        """:meth:`run` as a stream: yields ``str`` pieces of the answer, then one final :class:`Answer`.

        ``call()`` returns an iterable of ``str`` pieces ending with the :class:`BackendResult`. A hit
        yields its whole text as one piece. A stream that ends without a result (cut before its end
        event) is ``incomplete`` and not stored; one the consumer closes early stores nothing. The
        leader holds the flight while it streams; waiters get the stored answer as a hit.
        """
        from ragcache.semantic.flight import FLIGHTS, flight_key

        t0 = time.perf_counter()
        lookup, store = self._replay(request.sampling, lookup, store)
        kw = {"started": t0, "metadata": metadata}
        raw = self._looks(request, t0, blend_setting=blend_setting)

        def look() -> Answer | None:
            return _answer_or_none(raw())

        hit = raw() if lookup else None
        if hit is _FAILED or (hit is None and not self._flies(request, lookup, store)):
            stored = request if store and hit is None else _uncached(request)
            yield from self._streamed(stored, call, t0, kw)
            return
        key = None if hit is not None else flight_key(request.partition, request.question)
        while hit is None:
            seat = FLIGHTS.join(key, self.flight_timeout_s)
            outcome = seat.wait()
            if outcome == "retry":
                continue
            if outcome == "done":
                hit = look()
                if hit is None:
                    yield from self._streamed(request, call, t0, kw)
                    return
                break
            with FLIGHTS.lead(seat), self._locks().flight_lock(key, seat.lock_timeout_s):
                hit = look()  # re-read even without the cross-process lock: an earlier leader may have stored it
                if hit is None:
                    yield from self._streamed(request, call, t0, kw)
                    return
        yield hit.text
        yield hit

    async def astream(self, request: CacheRequest, call: Callable[[], AsyncIterable[str | BackendResult]], *,
                      lookup: bool = True, store: bool = True, metadata: Mapping[str, Any] | None = None,
                      blend_setting: BlendName = None) -> AsyncIterator[str | Answer]:
        """Async :meth:`stream`: ``call()`` returns an async iterable of ``str`` pieces ending with the
        :class:`BackendResult`; the flight is waited for on the event loop (shared with sync callers)."""
        from ragcache.semantic.flight import FLIGHTS, flight_key

        t0 = time.perf_counter()
        lookup, store = self._replay(request.sampling, lookup, store)
        kw = {"started": t0, "metadata": metadata}
        raw = self._alooks(request, t0, blend_setting)

        async def look() -> Answer | None:
            return _answer_or_none(await raw())

        hit = await raw() if lookup else None
        if hit is _FAILED or (hit is None and not self._flies(request, lookup, store)):
            stored = request if store and hit is None else _uncached(request)
            async for item in self._astreamed(stored, call, t0, kw):
                yield item
            return
        key = None if hit is not None else flight_key(request.partition, request.question)
        while hit is None:
            seat = FLIGHTS.join(key, self.flight_timeout_s)
            outcome = await seat.await_()
            if outcome == "retry":
                continue
            if outcome == "done":
                hit = await look()
                if hit is None:
                    async for item in self._astreamed(request, call, t0, kw):
                        yield item
                    return
                break
            with FLIGHTS.lead(seat):
                async with self._locks().aflight_lock(key, seat.lock_timeout_s):
                    hit = await look()  # re-read even without the cross-process lock (as in stream)
                    if hit is None:
                        async for item in self._astreamed(request, call, t0, kw):
                            yield item
                        return
        yield hit.text
        yield hit

    def _streamed(self, request: CacheRequest, call: Callable[[], Iterable[str | BackendResult]],
                  t0: float, kw: dict[str, Any]) -> Iterator[str | Answer]:
        acc = _Pieces(t0)
        for item in call():
            if acc.add(item):
                break
            yield item
        yield self.record(request, acc.result(), **kw)

    async def _astreamed(self, request: CacheRequest, call: Callable[[], AsyncIterable[str | BackendResult]],
                         t0: float, kw: dict[str, Any]) -> AsyncIterator[str | Answer]:
        acc = _Pieces(t0)
        async for item in call():
            if acc.add(item):
                break
            yield item
        yield await self.arecord(request, acc.result(), **kw)


class _GuardedLocks:
    """A cache's ``flight_lock`` / ``aflight_lock`` through its :class:`~ragcache.boundary.Boundary`: a lock
    that raises (a PostgreSQL server gone, a lock folder on a read-only disk) yields ``False`` (the leader
    answers without the cross-process lock; this process still makes one call) and is logged."""

    __slots__ = ("boundary", "semantic")

    def __init__(self, semantic: AnswerCache, boundary: Boundary) -> None:
        self.semantic, self.boundary = semantic, boundary

    def flight_lock(self, key: str, timeout_s: float) -> Any:
        return self.boundary.held("flight lock", lambda: self.semantic.flight_lock(key, timeout_s))

    def aflight_lock(self, key: str, timeout_s: float) -> Any:
        return self.boundary.aheld("flight lock", lambda: self.semantic.aflight_lock(key, timeout_s))


def _check_lookup(request: CacheRequest) -> None:
    """Raise for a request argument the caller got wrong (a threshold out of range), before the lookup
    enters the cache's boundary (where any error is the cache's, a miss).

    Raises:
        TypeError / ValueError: ``request.threshold`` not a cosine in [-1, 1]."""
    if request.threshold is not None:
        from ragcache.semantic.decision.checks import check_threshold

        check_threshold(request.threshold)


def _checked_metadata(metadata: dict[str, Any], ttl_s: float | None) -> dict[str, Any]:
    """``metadata`` after the store's own checks of the caller's arguments (JSON-like metadata, a TTL),
    run before the store enters the cache's boundary.

    Raises:
        TypeError / ValueError: metadata that is not JSON-like, a bad ``ttl_s``."""
    from ragcache.semantic.decision.checks import check_metadata, check_ttl

    check_ttl(ttl_s)
    check_metadata(metadata)
    return metadata


def _uncached(request: CacheRequest) -> CacheRequest:
    """The request without its partition: answered, nothing stored."""
    return replace(request, partition=None)


def _answer_or_none(hit: Any) -> Answer | None:
    """A lookup's outcome inside a flight: a failed cache (:data:`_FAILED`) reads as a miss."""
    return None if hit is _FAILED else hit


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



def __getattr__(name: str) -> Any:
    """``UNSET_TEMPERATURE``, kept for older code: ``ragcache.sampling.UNSET_TEMPERATURE`` (read from the
    provider table on first use)."""
    if name == "UNSET_TEMPERATURE":
        from ragcache import sampling

        return sampling.UNSET_TEMPERATURE
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CACHE_TRUNCATED", "COLD_LOAD_TIMEOUT_S", "DEFAULT_LOOKUP_TIMEOUT_S", "PROVENANCE_KEY", "Answer", "AnswerPath", "BlendName",
           "Provenance", "Sampling", "cacheable", "hit_answer"]
