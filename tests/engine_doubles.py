"""Engine test doubles and builders shared by the server, backend, framework and KV tests."""

from __future__ import annotations

import torch

from ragcache.engine.chunk import ChunkCache, MemoryChunkStore
from ragcache.engine.engine import LocalEngine


class RecordingEngine(LocalEngine):
    """A LocalEngine that keeps each request's Generation: the engine's own accounting."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.generations = []

    def stream(self, *a, **kw):
        for ev in super().stream(*a, **kw):
            if ev.generation is not None:
                self.generations.append(ev.generation)
            yield ev


def chunk_engine(loaded, store=None, *, cls=LocalEngine, **kw):
    """A ``cls`` on ``loaded`` with a float32 :class:`ChunkCache` over ``store`` (default: a new
    :class:`MemoryChunkStore`) that reuses chunk KV on any hit (``min_reuse_tokens=0``); ``kw`` go to the engine.

    Every missed document is stored by the time ``generate`` returns (``chunk_admission=1, chunk_queue=0``:
    what the reuse tests build on) unless ``kw`` says otherwise; the defaults (second-sighting admission,
    background queue) are tested in ``tests/integration/test_chunk_reuse_paths.py``."""
    store = MemoryChunkStore() if store is None else store
    kw = {"chunk_admission": 1, "chunk_queue": 0, **kw}
    return cls(loaded, chunk_cache=ChunkCache(store, dtype=torch.float32), min_reuse_tokens=0, **kw)


def blending_engine(loaded, store=None, *, cls=LocalEngine, **kw):
    """A :func:`chunk_engine` that blends every hit at r = 0.15 without a calibration record (without a
    record or a given ratio an engine prefills exactly)."""
    return chunk_engine(loaded, store, cls=cls, calibration=False, recompute_ratio=0.15, **kw)


class PromptRecordingEngine(LocalEngine):
    """A LocalEngine that keeps the token ids of every prompt it prefills: what the forward pass saw."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.prefilled = []

    def prefill(self, prompt, **kw):
        self.prefilled.append(list(prompt.input_ids))
        return super().prefill(prompt, **kw)


class RequestRecordingEngine(LocalEngine):
    """A LocalEngine that keeps what each ``stream`` call was handed."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.handed = []

    def stream(self, prompt, **options):
        self.handed.append((prompt, options))
        return super().stream(prompt, **options)
