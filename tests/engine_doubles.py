"""Engine test doubles shared by the OpenAI-compatible server, backend and framework tests."""

from __future__ import annotations

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
