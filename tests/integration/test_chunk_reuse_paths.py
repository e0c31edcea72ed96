"""Chunk reuse on every path (issue 48): the first document is reused too."""

import pytest
import torch

from engine_doubles import blending_engine

DOCS = ["The csv module reads and writes tabular data in CSV format. " * 3,
        "The datetime module supplies classes for manipulating dates and times. " * 3,
        "The json module encodes and decodes JSON documents. " * 3,
        "The pathlib module offers classes representing filesystem paths. " * 3]


def rag(system, docs, question="Which module parses CSV files?"):
    return [{"role": "system", "content": system},
            {"role": "user", "content": [{"type": "text", "text": d, "ragcache_kind": "document"} for d in docs]
             + [{"type": "text", "text": question, "ragcache_kind": "question"}]}]


# System texts of different lengths: the block boundary falls at a different offset before or inside
# the first document's wrapper tokens (16-token blocks).
SYSTEMS = ["You answer from the documents." + " Be brief." * k for k in range(8)]


def _match_runs_into_first_doc(engine, msgs):
    prompt = engine.build_prompt(msgs)
    ids, (s, e, _) = prompt.input_ids, prompt.document_spans()[0]
    m = engine.prefix_cache.match(ids, salt=engine._prefix_salt(None, len(ids)), max_tokens=len(ids) - 1)
    try:
        return s < m.num_tokens < e
    finally:
        engine.prefix_cache.release(m)


def test_every_document_is_reused_in_another_order_including_the_first(tiny):
    straddled = 0
    for system in SYSTEMS:
        engine = blending_engine(tiny)
        cold = engine.generate(rag(system, DOCS), max_new_tokens=2)
        assert cold.stats.docs_missed == len(DOCS)  # every document, the first one too, is looked up
        other = rag(system, DOCS[::-1])
        straddled += _match_runs_into_first_doc(engine, other)
        warm = engine.generate(other, max_new_tokens=2)
        first_doc = engine.build_prompt(other).document_spans()[0][0]
        assert warm.stats.docs_hit == len(DOCS) and warm.stats.docs_missed == 0, system
        assert warm.stats.approximate and warm.stats.chunk_tokens_reused > 0
        assert warm.stats.prefix_tokens_reused <= first_doc and warm.stats.prefix_tokens_reused % 16 == 0
    assert straddled  # some system lengths do run the prefix match into the first document


@pytest.mark.parametrize("system", [SYSTEMS[i] for i in (0, 3, 5)])
def test_blending_after_a_cut_prefix_at_r1_equals_full_prefill(tiny, system):
    engine = blending_engine(tiny)
    engine.generate(rag(system, DOCS), max_new_tokens=2)
    other = rag(system, DOCS[::-1])
    ref = engine.generate(other, max_new_tokens=8, use_prefix_cache=False, use_chunk_cache=False)
    full = engine.generate(other, max_new_tokens=8, recompute_ratio=1.0)
    assert full.stats.docs_hit == len(DOCS)
    assert (full.first_logits - ref.first_logits).abs().max() < 1e-4
    assert full.token_ids == ref.token_ids


def test_the_same_documents_in_the_same_order_stay_exact_prefix_reuse(tiny):
    """Another question over the same documents in the same order: the prefix cache holds them all, exactly,
    and no document is cut out of the match to be blended (even one that shares its last block with the
    question)."""
    for system in SYSTEMS:
        engine = blending_engine(tiny)
        engine.generate(rag(system, DOCS), max_new_tokens=2)
        again = rag(system, DOCS, "What does the json module do?")
        last_doc = engine.build_prompt(again).document_spans()[-1][0]
        warm = engine.generate(again, max_new_tokens=2)
        assert warm.stats.prefix_tokens_reused > last_doc, system
        assert not warm.stats.approximate and warm.stats.docs_hit == 0


def test_a_missed_document_the_prefix_runs_into_keeps_the_whole_match(tiny):
    for system in SYSTEMS:
        engine = blending_engine(tiny)
        engine.generate(rag(system, DOCS[1:]), max_new_tokens=2)  # DOCS[0] never seen
        other = rag(system, [DOCS[0]] + DOCS[1:][::-1])
        ran_in = _match_runs_into_first_doc(engine, other)
        warm = engine.generate(other, max_new_tokens=2)
        assert warm.stats.docs_hit == len(DOCS) - 1 and warm.stats.docs_missed == 1
        if ran_in:  # the match is kept whole: the first document is computed from its end, in context
            assert warm.stats.prefix_tokens_reused > engine.build_prompt(other).document_spans()[0][0]


# -- admission and the background queue (the engine's defaults) ---------------------------------------
import threading  # noqa: E402

from ragcache.engine.chunk import BoundChunkCache, ChunkCache, DiskChunkStore, MemoryChunkStore  # noqa: E402
from ragcache.engine.engine import LocalEngine  # noqa: E402

SYSTEM = SYSTEMS[2]
OTHER_DOCS = ["The heapq module implements the heap queue algorithm. " * 3,
              "The itertools module builds fast iterator tools. " * 3]


def default_engine(loaded, store=None, **kw):
    """An engine at the default admission and queue that blends any hit at r = 0.15 (float32 chunks)."""
    store = MemoryChunkStore() if store is None else store
    return LocalEngine(loaded, chunk_cache=ChunkCache(store, dtype=torch.float32), min_reuse_tokens=0,
                       calibration=False, recompute_ratio=0.15, **kw)


def test_the_defaults_compute_a_document_at_its_second_sighting(tiny):
    engine = default_engine(tiny)
    assert engine.config.chunk_admission == 2 and engine.config.chunk_queue == 64
    first = engine.generate(rag(SYSTEM, DOCS), max_new_tokens=2)
    assert first.stats.docs_missed == 4 and first.stats.chunk_store_s == 0.0
    assert engine.drain_chunk_queue(60)
    assert len(engine.chunk_cache.store) == 0  # seen once: nothing computed
    assert engine.chunk_queue_stats.first_sightings == 4 and engine.chunk_queue_stats.computed == 0
    second = engine.generate(rag(SYSTEM, DOCS[::-1]), max_new_tokens=2)
    assert second.stats.docs_missed == 4
    assert engine.drain_chunk_queue(60)
    assert len(engine.chunk_cache.store) == 4 and engine.chunk_queue_stats.computed == 4
    third = engine.generate(rag(SYSTEM, DOCS[1:] + DOCS[:1]), max_new_tokens=2)
    assert third.stats.docs_hit == 4 and third.stats.approximate


@pytest.mark.parametrize("admission", [1, 3])
def test_the_admission_count_is_a_setting(tiny, admission):
    engine = default_engine(tiny, chunk_admission=admission)
    for i in range(admission):
        assert len(engine.chunk_cache.store) == 0, i
        docs = DOCS[i % 3:3] + DOCS[:i % 3]  # another first document each time: the prefix cache holds none
        engine.generate(rag(SYSTEM, docs), max_new_tokens=1)
        assert engine.drain_chunk_queue(60)
    assert len(engine.chunk_cache.store) == 3


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_admission_and_queue_settings_name_the_fix(tiny, bad):
    with pytest.raises((ValueError, TypeError), match="chunk_admission"):
        default_engine(tiny, chunk_admission=bad)
    if bad != 0:
        with pytest.raises((ValueError, TypeError), match="chunk_queue"):
            default_engine(tiny, chunk_queue=bad)


def test_sightings_are_shared_through_a_disk_store(tiny, tmp_path):
    a = default_engine(tiny, DiskChunkStore(tmp_path / "kv"))
    b = default_engine(tiny, DiskChunkStore(tmp_path / "kv"))  # another process or replica on the same folder
    a.generate(rag(SYSTEM, DOCS[:3]), max_new_tokens=1)
    assert a.drain_chunk_queue(60) and len(a.chunk_cache.store) == 0
    b.generate(rag(SYSTEM, DOCS[2::-1]), max_new_tokens=1)  # the second sighting, on the other engine
    assert b.drain_chunk_queue(60) and len(b.chunk_cache.store) == 3
    assert a.generate(rag(SYSTEM, DOCS[1:3] + DOCS[:1]), max_new_tokens=1).stats.docs_hit == 3


def test_precompute_stays_unconditional(tiny):
    engine = default_engine(tiny)
    assert engine.chunk_cache.precompute(engine, DOCS[:2], progress=False) == 2
    assert len(engine.chunk_cache.store) == 2


def test_drain_with_first_sightings_computes_what_was_seen_once(tiny):
    engine = default_engine(tiny)
    engine.generate(rag(SYSTEM, DOCS[:3]), max_new_tokens=1)
    assert engine.drain_chunk_queue(60) and len(engine.chunk_cache.store) == 0
    assert engine.drain_chunk_queue(60, first_sightings=True)
    assert len(engine.chunk_cache.store) == 3
    assert engine.generate(rag(SYSTEM, DOCS[2::-1]), max_new_tokens=1).stats.docs_hit == 3


class Gate:
    """Holds every BoundChunkCache.add_many call until :attr:`go` is set; counts the calls."""

    def __init__(self, monkeypatch):
        self.started, self.go, self.calls = threading.Event(), threading.Event(), []
        real = BoundChunkCache.add_many

        def add_many(view, docs, **kw):
            docs = list(docs)
            self.calls.append(len(docs))
            self.started.set()
            assert self.go.wait(60)
            return real(view, docs, **kw)

        monkeypatch.setattr(BoundChunkCache, "add_many", add_many)


def test_generate_returns_before_the_chunk_work_is_done(tiny, monkeypatch):
    gate = Gate(monkeypatch)
    engine = default_engine(tiny, chunk_admission=1)
    gen = engine.generate(rag(SYSTEM, DOCS), max_new_tokens=2)  # would hang here if it waited for the chunks
    assert gen.stats.docs_missed == 4 and gen.stats.chunk_store_s == 0.0
    assert gate.started.wait(60)
    assert len(engine.chunk_cache.store) == 0 and not engine.drain_chunk_queue(0)
    gate.go.set()
    assert engine.drain_chunk_queue(60)
    assert len(engine.chunk_cache.store) == 4
    assert engine.generate(rag(SYSTEM, DOCS[::-1]), max_new_tokens=2).stats.docs_hit == 4


def test_a_request_is_not_held_behind_sightings_being_counted(tiny, monkeypatch):
    go, entered = threading.Event(), threading.Event()
    real = MemoryChunkStore.sight_many

    def slow_sight(store, keys):
        entered.set()
        assert go.wait(60)
        return real(store, keys)

    monkeypatch.setattr(MemoryChunkStore, "sight_many", slow_sight)
    engine = default_engine(tiny)
    engine.generate(rag(SYSTEM, DOCS), max_new_tokens=1)
    assert entered.wait(60)  # the worker is counting, outside the engine lock
    out = engine.generate(rag(SYSTEM, OTHER_DOCS), max_new_tokens=2)  # served while the queue is busy
    assert out.stats.docs_missed == 2 and engine.chunk_queue.waiting >= 2
    go.set()
    assert engine.drain_chunk_queue(60)


def test_a_request_arriving_while_a_chunk_is_computed_is_served_before_the_rest_of_it(tiny, monkeypatch):
    from ragcache.engine.chunk.bound import PIECE_TOKENS
    from ragcache.engine.chunk.queue import ChunkQueue

    started, go, pieces = threading.Event(), threading.Event(), []
    real = ChunkQueue._step

    def step(queue, run_piece):
        pieces.append(1)
        started.set()
        assert go.wait(60)
        return real(queue, run_piece)

    monkeypatch.setattr(ChunkQueue, "_step", step)
    long_doc = "The csv module reads and writes tabular data in CSV format. " * 30
    engine = default_engine(tiny, chunk_admission=1)
    assert len(engine.tokenizer.encode(long_doc)) > 2 * PIECE_TOKENS  # computed in several pieces
    engine.generate(rag(SYSTEM, [long_doc] + DOCS[1:]), max_new_tokens=1)  # 4 documents queued
    assert started.wait(60)  # the worker is about to run the first piece of the first document
    seen_at_start = []

    def second():
        for _ in engine.stream(rag(SYSTEM, OTHER_DOCS), max_new_tokens=2):
            if not seen_at_start:  # holding the engine lock: no piece is being computed now
                seen_at_start.append((len(pieces), len(engine.chunk_cache.store)))

    t = threading.Thread(target=second)
    t.start()
    while engine.chunk_queue.active_requests == 0 and t.is_alive():  # it is marked, waiting for its turn
        t.join(0.01)
    go.set()
    t.join(120)
    assert not t.is_alive()
    assert seen_at_start == [(1, 0)]  # served before the piece that was waiting ran: no chunk finished
    assert engine.drain_chunk_queue(120)
    assert len(engine.chunk_cache.store) == 6 and len(pieces) > 6  # its own 2 missed documents too, after it


def test_a_full_queue_drops_documents(tiny, monkeypatch):
    gate = Gate(monkeypatch)
    engine = default_engine(tiny, chunk_admission=1, chunk_queue=2)
    engine.generate(rag(SYSTEM, DOCS), max_new_tokens=1)
    assert engine.chunk_queue_stats.submitted == 4 and engine.chunk_queue_stats.dropped == 2
    gate.go.set()
    assert engine.drain_chunk_queue(60)
    assert len(engine.chunk_cache.store) == 2


@pytest.mark.parametrize("system", [SYSTEMS[0], SYSTEMS[7], "You answer questions about the library. " * 6,
                                    "You answer questions about the library. " * 9])
def test_a_prefix_conditioned_chunk_reads_its_context_from_the_prefix_cache(tiny, monkeypatch, system):
    """The queue computes a prefix-conditioned chunk after the request's stable prefix taken from the prefix
    cache (only the document and the prefix's last partial block are prefilled), and stores the same KV as a
    chunk computed from position 0."""
    from ragcache.engine import kv as kvb
    from ragcache.engine.blend.setting import BlendSetting
    from ragcache.engine.chunk import bound

    setting = BlendSetting(recompute_ratio=0.2, chunk_context="prefix", doc_top=1)
    engine = default_engine(tiny, chunk_admission=1, blend_setting=setting)
    starts, real = [], kvb.forward

    caller = threading.current_thread()

    def forward(model, ids, cache, start, *a, **kw):
        if threading.current_thread() is not caller:  # the queue's worker, not the request's own prefill
            starts.append((start, len(ids)))
        return real(model, ids, cache, start, *a, **kw)

    monkeypatch.setattr(bound.kvb, "forward", forward)  # before the request: the queue may start at once
    engine.generate(rag(system, DOCS[:2]), max_new_tokens=1)
    prefix = engine.build_prompt(rag(system, DOCS[:2])).document_spans()[0][0]  # the stable prefix's length
    assert engine.drain_chunk_queue(60) and len(engine.chunk_cache.store) == 2
    first = [start for start, _ in starts if start <= prefix]  # each chunk's first piece
    assert len(first) == 2 and all(s == prefix // 16 * 16 for s in first), (first, prefix)  # 0: no whole block
    monkeypatch.setattr(bound.kvb, "forward", real)
    from ragcache.engine.blend.request import chunk_view

    prompt = engine.build_prompt(rag(system, DOCS[:2]))
    v = chunk_view(engine, prompt.input_ids, [(s, e) for s, e, _ in prompt.document_spans()], 0.2)
    for _, _, piece in prompt.document_spans():
        stored, fresh = v.lookup(piece.ids), v.compute(piece.ids)
        assert stored is not None and stored.start == prefix
        assert torch.allclose(stored.keys.float(), fresh.keys.float(), atol=1e-4)
        assert torch.allclose(stored.values.float(), fresh.values.float(), atol=1e-4)
