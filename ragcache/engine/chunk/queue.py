"""The chunk KV queue: missed documents' chunk KV is computed in the background, never on a request's path.

A request hands the documents that missed the chunk cache to :meth:`ChunkQueue.submit` and returns; it
waits for nothing. A worker thread, started when there is work and gone when there is none:

1. counts one *sighting* of each submitted document in the chunk store
   (:meth:`BoundChunkCache.admit <ragcache.engine.chunk.bound.BoundChunkCache.admit>`,
   :mod:`ragcache.engine.chunk.admission`; no model work, no engine lock), and keeps the documents
   that reached the admission count; the rest are remembered as *first sightings* (bounded);
2. computes the admitted documents, up to ``batch_docs`` of the same chunk context at a time in one padded
   batch (:meth:`BoundChunkCache.compute_many <ragcache.engine.chunk.bound.BoundChunkCache.compute_many>`), in
   pieces of about :data:`~ragcache.engine.chunk.bound.PIECE_TOKENS` tokens, each piece under the engine lock and
   started only while no request is in flight (:meth:`request` marks one): a request that arrives
   while a chunk is being computed waits for one piece at most, then runs before the rest. The store
   is read and written outside the engine lock.

Under pressure work is dropped, never queued without bound: a submit beyond ``max_docs`` documents
waiting drops them (counted in :attr:`ChunkQueueStats.dropped`), and the oldest first sightings are
forgotten beyond the same bound. :meth:`drain` waits until the queue is empty (tests, the demo,
benchmarks); ``first_sightings=True`` also computes the documents seen once, for a caller that knows
the engine is idle now (the demo, at its end: its next run asks the same questions).

``max_docs=0`` computes on the caller's thread instead (:meth:`submit` returns after storing, under
the caller's lock): the behaviour before the queue, for scripts that need a chunk stored when
``generate`` returns.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ragcache.counters import Counters
from ragcache.engine.chunk.admission import DEFAULT_ADMISSION, check_admission
from ragcache.limits import DEFAULT_CHUNK_BATCH, DEFAULT_QUEUE_DOCS, check_chunk_batch, check_queue_docs

if TYPE_CHECKING:
    from ragcache.engine.chunk.bound import BoundChunkCache

__all__ = ["DEFAULT_CHUNK_BATCH", "DEFAULT_QUEUE_DOCS", "ChunkQueue", "ChunkQueueStats", "check_queue_docs"]

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 10.0
"""Seconds a process waits at exit for the chunk piece being computed (one piece: ~0.6 s on one CPU thread)."""

_OPEN_QUEUES: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_open_queues() -> None:
    for q in list(_OPEN_QUEUES):
        q.close()


@dataclass(slots=True)
class ChunkQueueStats(Counters):
    """Counters of a :class:`ChunkQueue` (documents): ``submitted`` by requests, ``dropped`` (queue full),
    ``first_sightings`` (counted, below the admission count), ``admitted``, ``computed`` (chunks computed
    and stored; an admitted document another process stored meanwhile is not computed), ``failed``;
    ``hit_rate`` = computed / submitted."""

    RATE = ("computed", "submitted")

    submitted: int = 0
    dropped: int = 0
    first_sightings: int = 0
    admitted: int = 0
    computed: int = 0
    failed: int = 0


class ChunkQueue:
    """Background computation of missed documents' chunk KV for one engine (see the module docstring).

    Args:
        lock: the engine's lock, held while one document's chunk KV is computed and stored.
        max_docs: documents waiting at most (:data:`DEFAULT_QUEUE_DOCS`); 0: compute in :meth:`submit`.
        admission: sightings of a document at which its chunk KV is computed (1: every miss).
        sink_kv: where a chunk context's KV may already be (:data:`~ragcache.engine.chunk.bound.SinkKV`: the
            engine's prefix cache), passed to :meth:`BoundChunkCache.add_many
            <ragcache.engine.chunk.bound.BoundChunkCache.add_many>`.
        batch_docs: admitted documents of the same chunk context computed in one padded forward pass per piece
            (:meth:`BoundChunkCache.compute_many <ragcache.engine.chunk.bound.BoundChunkCache.compute_many>`);
            1 (default, :data:`~ragcache.limits.DEFAULT_CHUNK_BATCH`): one document at a time.

    Raises:
        ValueError: ``max_docs`` < 0, ``admission`` < 1 or ``batch_docs`` < 1.
    """

    def __init__(self, lock: Any, *, max_docs: int = DEFAULT_QUEUE_DOCS, admission: int = DEFAULT_ADMISSION,
                 sink_kv: Any = None, batch_docs: int = DEFAULT_CHUNK_BATCH) -> None:
        self._lock = lock
        self._sink_kv = sink_kv
        self.batch_docs = check_chunk_batch(batch_docs)
        self.max_docs = check_queue_docs(max_docs)
        self.admission = check_admission(admission)
        self._cond = threading.Condition()  # guards every field below
        self._pending: deque[tuple[BoundChunkCache, list[list[int]]]] = deque()  # submitted, not yet sighted
        self._ready: deque[tuple[BoundChunkCache, list[int]]] = deque()  # admitted, to compute
        self._seen: OrderedDict[str, tuple[BoundChunkCache, list[int]]] = OrderedDict()  # first sightings, oldest first
        self._waiting = 0  # documents in _pending and _ready
        self._active = 0  # requests in flight (:meth:`request`)
        self._busy = False  # the worker is sighting or computing outside the condition
        self._worker: threading.Thread | None = None
        self._closed = False
        self.stats = ChunkQueueStats()
        _OPEN_QUEUES.add(self)

    # -- requests ------------------------------------------------------------
    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Mark a request in flight: no chunk is started until every marked request has ended."""
        with self._cond:
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    @property
    def active_requests(self) -> int:
        """Requests in flight now (:meth:`request`)."""
        return self._active

    @property
    def waiting(self) -> int:
        """Documents submitted and not yet sighted, plus admitted ones not yet computed."""
        return self._waiting

    # -- work ----------------------------------------------------------------
    def submit(self, view: BoundChunkCache | None, docs: Sequence[Sequence[int]]) -> float:
        """Hand over the token ids of documents that missed ``view`` (a
        :class:`~ragcache.engine.chunk.BoundChunkCache`). Returns the seconds spent on the caller's thread:
        0 with a queue; with ``max_docs=0``, the sighting and the computation, done here (hold the engine
        lock)."""
        docs = [[int(t) for t in d] for d in docs if d]
        if view is None or not docs:
            return 0.0
        if self.max_docs == 0:
            t = time.perf_counter()
            self.stats.submitted += len(docs)
            self._compute(view, self._sight(view, docs))
            return time.perf_counter() - t
        with self._cond:
            room = max(0, self.max_docs - self._waiting)
            take, drop = docs[:room], len(docs) - min(room, len(docs))
            self.stats.submitted += len(docs)
            self.stats.dropped += drop
            if drop:
                log.info("chunk queue full (%d documents waiting): %d missed document(s) not counted or computed",
                         self._waiting, drop)
            if take:
                self._pending.append((view, take))
                self._waiting += len(take)
                self._start()
        return 0.0

    def drain(self, timeout: float | None = None, *, first_sightings: bool = False) -> bool:
        """Wait until no document is waiting and none is being computed; ``True`` when drained, ``False``
        when ``timeout`` (seconds) passed first. ``first_sightings``: also compute every document seen fewer
        times than the admission count (the engine is idle: its CPU costs no request). Never call it while
        holding the engine lock (the worker needs it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if first_sightings:
            with self._cond:
                seen, self._seen = list(self._seen.values()), OrderedDict()
            if self.max_docs == 0:
                with self._lock:
                    self._compute_many(seen)
            else:
                with self._cond:
                    self._ready.extend(seen)
                    self._waiting += len(seen)
                    self.stats.admitted += len(seen)
                    if seen:
                        self._start()
        with self._cond:
            while self._waiting or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float | None = CLOSE_WAIT_S) -> None:
        """Drop the waiting work and let the worker finish the piece it is computing (at most ``timeout``
        seconds): chunks are best effort. Called for every queue at process exit, so no chunk is cut by the
        interpreter's shutdown in the middle of a forward pass (which aborts the process)."""
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._ready.clear()
            self._waiting = 0
            worker = self._worker
            self._cond.notify_all()
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)

    def _start(self) -> None:
        """Start the worker if it is not running (under the condition)."""
        if self._worker is None and not self._closed:
            self._worker = threading.Thread(target=self._run, name="ragcache-chunk-queue", daemon=True)
            self._worker.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    self._worker = None
                    self._cond.notify_all()
                    return
                if self._pending:
                    view, docs = self._pending.popleft()
                    self._waiting -= len(docs)
                    job = None
                elif self._ready:
                    while self._active and not self._closed:  # requests first
                        self._cond.wait()
                    if self._closed:
                        continue
                    view, job = self._take_batch()
                else:
                    self._worker = None
                    self._cond.notify_all()
                    return
                self._busy = True
            try:
                if job is None:
                    admitted = self._sight(view, docs)
                    with self._cond:
                        room = max(0, self.max_docs - self._waiting)
                        self.stats.dropped += max(0, len(admitted) - room)
                        self._ready.extend((view, d) for d in admitted[:room])
                        self._waiting += min(room, len(admitted))
                else:
                    self._compute(view, job, step=self._step)
            except Exception as e:  # noqa: BLE001 - a failing chunk costs the chunk, never the engine
                self.stats.failed += 1 if job is None else len(job)
                log.warning("chunk KV computation failed (%s: %s); the document stays a miss", type(e).__name__, e)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _take_batch(self) -> tuple[BoundChunkCache, list[list[int]]]:
        """The oldest admitted document and up to ``batch_docs - 1`` more computed the same way (same chunk
        context, :meth:`BoundChunkCache.same_context <ragcache.engine.chunk.bound.BoundChunkCache.same_context>`),
        taken off the ready queue (under the condition)."""
        view, doc = self._ready.popleft()
        docs, rest = [doc], deque()
        while self._ready and len(docs) < self.batch_docs:
            item = self._ready.popleft()
            if view is item[0] or view.same_context(item[0]):
                docs.append(item[1])
            else:
                rest.append(item)
        self._ready.extendleft(reversed(rest))
        self._waiting -= len(docs)
        return view, docs

    def _sight(self, view: BoundChunkCache, docs: list[list[int]]) -> list[list[int]]:
        """Count the sightings of ``docs``; remember the first sightings, return the admitted."""
        admitted, first = view.admit(docs, self.admission)
        with self._cond:
            self.stats.admitted += len(admitted)
            self.stats.first_sightings += len(first)
            for d in first:
                key = view.key(d)
                self._seen.pop(key, None)
                self._seen[key] = (view, d)
            while len(self._seen) > max(self.max_docs, 1) * 4:
                self._seen.popitem(last=False)
        return admitted

    def _step(self, run_piece: Any) -> Any:
        """One piece of a chunk's prefill: once no request is in flight, under the engine lock."""
        with self._cond:
            while self._active and not self._closed:  # requests first
                self._cond.wait()
            if self._closed:
                raise RuntimeError("the chunk queue was closed (process exit): the chunk is dropped")
        with self._lock:
            return run_piece()

    def _compute(self, view: BoundChunkCache, docs: list[list[int]], step: Any = None) -> None:
        """Compute and store ``docs``' chunk KV (``step``: per piece, :meth:`_step`; ``None``: the caller holds
        the engine lock)."""
        if docs:
            n = view.add_many(docs, step=step, sink_kv=self._sink_kv, batch_docs=self.batch_docs)
            with self._cond:
                self.stats.computed += n

    def _compute_many(self, items: list[tuple[BoundChunkCache, list[int]]]) -> None:
        groups: list[tuple[BoundChunkCache, list[list[int]]]] = []
        for view, doc in items:
            g = next((g for g in groups if g[0] is view or g[0].same_context(view)), None)
            if g is None:
                groups.append((view, [doc]))
            else:
                g[1].append(doc)
        for view, docs in groups:
            self._compute(view, docs)

