"""Chunk KV computed in one padded batch across documents equals each document computed on its own (float32,
tiny random Llama), and the chunk queue drains admitted documents in such batches, never mixing chunk contexts."""

import random
import threading
import time

import pytest
import torch

from ragcache.engine import kv
from ragcache.engine.blend.setting import context_view
from ragcache.engine.chunk import ChunkCache, MemoryChunkStore
from ragcache.engine.chunk.queue import ChunkQueue


def _view(tiny, sink=None):
    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32, sink_ids=sink)
    return cc.bind(tiny.model, tiny.fingerprint.digest, "ns")


def _docs(lengths, seed):
    rng = random.Random(seed)
    return [[rng.randrange(10, 40_000) for _ in range(n)] for n in lengths]


def _assert_same(batched, alone):
    assert len(batched) == len(alone)
    for b, a in zip(batched, alone):
        assert b.key == a.key and b.token_ids == a.token_ids and b.start == a.start
        assert b.keys.shape == a.keys.shape and b.values.shape == a.values.shape
        torch.testing.assert_close(b.keys, a.keys, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(b.values, a.values, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("sink_len", [None, 0, 20, 300])  # BOS, no sink, a stable prefix, one past SMALL_KEYS
@pytest.mark.parametrize("lengths", [(5, 5), (1, 30, 7), (130, 3, 64, 257)])
def test_compute_many_equals_each_document_alone(tiny, sink_len, lengths):
    sink = None if sink_len is None else _docs([sink_len], 99)[0]
    view = _view(tiny, sink)
    docs = _docs(lengths, len(lengths) + (sink_len or 0))
    _assert_same(view.compute_many(docs), [view.compute(d) for d in docs])


def test_compute_many_in_pieces_and_from_a_cached_sink_equals_each_alone(tiny):
    """Pieces (``step``, as the queue runs it) and a sink read from a cache (``sink_kv``, as the engine serves a
    stable prefix from its prefix cache) give the same chunks; every piece goes through ``step``."""
    sink = _docs([40], 7)[0]
    view = _view(tiny, sink)
    docs = _docs((200, 90, 150), 8)

    def sink_kv(v, positions):
        cache = kv.new_cache(tiny.model)
        kv.forward(tiny.model, v.sink[:32], cache, 0)  # 32 of the 40 sink tokens cached
        return cache, 32

    pieces = []

    def step(run):
        pieces.append(1)
        return run()

    _assert_same(view.compute_many(docs, step=step, sink_kv=sink_kv), [view.compute(d) for d in docs])
    assert len(pieces) == 1 + -(-200 // (128 // 3))  # the sink's last 8 tokens once, then the batch's columns


def test_add_many_batches_and_stores_what_compute_would(tiny, monkeypatch):
    view = _view(tiny)
    docs = _docs((12, 40, 3, 40, 25), 3)
    sizes = []
    real = type(view).compute_many

    def spy(self, ds, **kw):
        sizes.append(sorted(len(d) for d in ds))
        return real(self, ds, **kw)

    monkeypatch.setattr(type(view), "compute_many", spy)
    assert view.add_many(docs, batch_docs=2) == 5
    assert sizes == [[3, 12], [25, 40], [40]]  # shortest first: little padding
    got = view.store.get_many([view.key(d) for d in docs], fingerprint=view.fingerprint)
    _assert_same(got, [view.compute(d) for d in docs])


def test_the_queue_drains_in_batches_of_one_chunk_context(tiny, monkeypatch):
    """Admitted documents of two chunk contexts (two stable prefixes over one store) are computed in batches of
    at most ``batch_docs`` documents of one context each, and each stored chunk is the document's own."""
    base = _view(tiny)
    ids_a = _docs([30], 1)[0] + [0] * 10
    ids_b = _docs([30], 2)[0] + [0] * 10
    view_a, view_b = (context_view(base, ids, [(30, 40)], "prefix") for ids in (ids_a, ids_b))
    view_a2 = context_view(base, ids_a, [(30, 40)], "prefix")  # another request, the same context
    assert view_a.same_context(view_a2) and not view_a.same_context(view_b) and not view_a.same_context(base)
    batches = []
    real = type(base).compute_many

    def spy(self, ds, **kw):
        batches.append((tuple(self.sink), len(ds)))
        return real(self, ds, **kw)

    monkeypatch.setattr(type(base), "compute_many", spy)
    q = ChunkQueue(threading.RLock(), admission=1, batch_docs=3)
    docs = _docs((9, 14, 21, 5, 17, 11), 5)
    with q.request():  # a request in flight: the worker sights (admits) them all but computes none yet
        q.submit(view_a, docs[:2])
        q.submit(view_b, docs[2:4])
        q.submit(view_a2, docs[4:])
        deadline = time.monotonic() + 60
        while q.stats.admitted < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert q.stats.admitted == 6 and q.stats.computed == 0
    assert q.drain(60)
    assert q.stats.computed == 6 and q.stats.failed == 0
    sa, sb = tuple(view_a.sink), tuple(view_b.sink)
    assert batches == [(sa, 3), (sb, 2), (sa, 1)]  # oldest first, its context's next two; never mixed
    for view, ds in ((view_a, docs[:2] + docs[4:]), (view_b, docs[2:4])):
        got = base.store.get_many([view.key(d) for d in ds], fingerprint=view.fingerprint)
        _assert_same(got, [view.compute(d) for d in ds])


def test_chunk_batch_is_checked(tiny):
    from ragcache.engine.engine_config import EngineConfig

    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="chunk_batch must be an integer >= 1"):
            ChunkQueue(threading.RLock(), batch_docs=bad)
        with pytest.raises(ValueError, match="chunk_batch must be an integer >= 1"):
            EngineConfig(chunk_batch=bad)
    assert EngineConfig().chunk_batch == 1 and ChunkQueue(threading.RLock()).batch_docs == 1


def test_an_engine_with_chunk_batch_stores_the_chunks_it_would_store_one_at_a_time(tiny):
    """``LocalEngine(chunk_batch=3)``: a request's missed documents, admitted at their first sighting, are computed
    in the background in batches, and each stored chunk equals the one computed alone (prefix-conditioned or not)."""
    from ragcache.engine.engine import LocalEngine
    from ragcache.prompt.layout import PromptLayout

    docs = [{"id": f"d{i}", "text": " ".join(f"word{i}x{j}" for j in range(8 + 9 * i))} for i in range(4)]
    layout = PromptLayout.build(question="Which words?", system="You answer from the documents.", documents=docs,
                                lint="off")
    results = {}
    for batch in (1, 3):
        store = MemoryChunkStore()
        eng = LocalEngine(tiny, chunk_cache=ChunkCache(store, dtype=torch.float32), chunk_admission=1,
                          chunk_batch=batch, calibration=False, recompute_ratio=0.15, min_reuse_tokens=0)
        eng.generate(layout, max_new_tokens=2)
        assert eng.drain_chunk_queue(60) and eng.chunk_queue_stats.computed == 4
        p = eng.build_prompt(layout)
        view = eng.chunks_for(None)
        from ragcache.engine.blend.request import chunk_view

        view = chunk_view(eng, p.input_ids, [(s, e) for s, e, _ in p.document_spans()], eng.recompute_ratio)
        ids = [list(piece.ids) for _, _, piece in p.document_spans()]
        results[batch] = store.get_many([view.key(d) for d in ids], fingerprint=view.fingerprint)
        assert all(c is not None for c in results[batch])
        _assert_same(results[batch], [view.compute(d) for d in ids])
    _assert_same(results[3], results[1])
