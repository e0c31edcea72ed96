"""Faulty dependencies, shared by the fault-injection tests (``test_fault_contract.py``, its adapters'
module and ``test_failing_dependencies.py``): a switch that makes a dependency's calls raise or hang
(:class:`Fault`), a proxy putting it before chosen methods of a store or lock (:class:`Faulty`), an embedder
behind it (:class:`FaultyEmbedder`), a clock that moves the back-off on (:class:`Clock`), a Valkey server of
the test's own that it may kill or freeze (:func:`own_valkey`), and a local engine over a chunk store with
every miss stored before the answer returns (:func:`engine_rag`, :func:`exact_answer_of`)."""

from __future__ import annotations

import os
import signal
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from ragcache import boundary
from ragcache.testing import HashingEmbedder

DOCS = ["Backups run nightly at 02:30 UTC and are kept for 30 days.",
        "Deploys go out on Tuesdays after the change review meeting."]
Q = "When do the backups run?"
Q2 = "How long are the backups kept?"  # not an exact repeat of Q: its lookup needs the embedder


class Weird(Exception):
    """An exception type no cache code knows (a third-party driver's own class)."""


ERRORS = {"KeyError": KeyError("vector"), "AttributeError": AttributeError("'NoneType' object has no attribute 'id'"),
          "Weird": Weird("driver exploded"), "ValueError": ValueError("could not convert string to float")}


class Fault:
    """A switch over a dependency's calls: ``mode`` ``"ok"``, ``"raise"`` (``error``) or ``"hang"`` (until
    :attr:`release` is set). Counts ``calls`` and the hung calls that came back (``returned``)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.mode, self.error = "ok", error or Weird("driver exploded")
        self.release = threading.Event()
        self.calls = self.returned = 0

    def run(self, fn: Callable[..., Any], *a: Any, **kw: Any) -> Any:
        if self.mode == "ok":
            return fn(*a, **kw)
        self.calls += 1
        if self.mode == "raise":
            raise self.error
        self.release.wait(30)
        self.returned += 1
        return fn(*a, **kw)

    def clear(self) -> None:
        self.mode = "ok"
        self.release.set()


class Faulty:
    """``target`` with the methods named in ``methods`` passing ``fault`` first (everything else as is)."""

    def __init__(self, target: Any, fault: Fault, methods: set[str]) -> None:
        self._target, self._fault, self._methods = target, fault, methods

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if name in self._methods and callable(value):
            return lambda *a, **kw: self._fault.run(value, *a, **kw)
        return value

    def __len__(self) -> int:
        return len(self._target)


class FaultyEmbedder(HashingEmbedder):
    """The hashing embedder with ``fault`` before every ``encode``."""

    def __init__(self, fault: Fault) -> None:
        super().__init__()
        self.fault = fault

    def encode(self, texts: list[str]) -> Any:
        return self.fault.run(super().encode, texts)


class Clock:
    """``time.monotonic`` of :mod:`ragcache.boundary`, moved on by the test (the back-off passes at once)."""

    def __init__(self) -> None:
        import time

        self._real, self.offset = time.monotonic, 0.0

    def monotonic(self) -> float:
        return self._real() + self.offset

    def pass_backoff(self) -> None:
        self.offset += boundary.RETRY_MAX_S + 1

    @classmethod
    def installed(cls, monkeypatch: pytest.MonkeyPatch) -> Clock:
        """A clock that :mod:`ragcache.boundary` reads for the rest of the test."""
        c = cls()
        monkeypatch.setattr(boundary, "time", types.SimpleNamespace(monotonic=c.monotonic))
        return c


def own_valkey() -> Iterator[Any]:
    """A Valkey server of the test's own (a fixture's body: ``yield from own_valkey()``), which the test may
    stop, start or freeze (``SIGSTOP``); thawed and closed afterwards. Skips when none can start here."""
    from ragcache.testing.local_servers import LocalValkey, ServerUnavailable

    try:
        server = LocalValkey()
    except ServerUnavailable as e:
        pytest.skip(str(e))
    yield server
    if server._proc is not None and server._proc.poll() is None:
        os.kill(server._proc.pid, signal.SIGCONT)  # a test that froze it and failed before thawing
    server.close()


def engine_rag(loaded: Any, store: Any, timeout_s: float | None = None) -> tuple[Any, Any]:
    """``(engine, rag)``: a float32 local engine over ``store`` (``timeout_s``: the chunk cache's store deadline,
    default 10 s) that stores every missed document's KV before the answer returns, and a ``RagCache`` over it
    without an answer cache (6 new tokens)."""
    import torch

    from ragcache import RagCache
    from ragcache.engine.backend import LocalBackend
    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.engine import LocalEngine

    chunks = ChunkCache(store, dtype=torch.float32, store_timeout_s=timeout_s or 10.0)
    engine = LocalEngine(loaded, chunk_cache=chunks, calibration=False, min_reuse_tokens=0, recompute_ratio=0.15,
                         chunk_admission=1, chunk_queue=0)  # every miss stored before the answer returns
    return engine, RagCache(LocalBackend(engine), semantic=None, max_new_tokens=6)


def exact_answer_of(loaded: Any, docs: list[str]) -> str:
    """The answer to :data:`Q` over ``docs`` by exact prefill (no chunk cache): what every faulty run must give."""
    from ragcache import RagCache
    from ragcache.engine.backend import LocalBackend
    from ragcache.engine.engine import LocalEngine

    rag = RagCache(LocalBackend(LocalEngine(loaded, calibration=False)), semantic=None, max_new_tokens=6)
    return rag.answer(Q, docs).text


__all__ = ["DOCS", "ERRORS", "Clock", "Fault", "Faulty", "FaultyEmbedder", "Q", "Q2", "Weird", "engine_rag",
           "exact_answer_of", "own_valkey"]
