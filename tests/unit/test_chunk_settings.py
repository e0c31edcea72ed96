"""A bound chunk view reads its settings through :class:`~ragcache.engine.chunk.bound.ChunkSettings`, every
member required: the store deadline included (issue 49 item 2), so a view's every store call carries the
chunk cache's ``store_timeout_s``, and no member is probed for."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from ragcache.boundary import Boundary
from ragcache.engine.chunk.bound import ChunkSettings
from ragcache.engine.chunk.cache import DEFAULT_STORE_TIMEOUT_S, ChunkCache

_ROOT = Path(__file__).resolve().parents[2]
MODEL = SimpleNamespace(config=SimpleNamespace(bos_token_id=1))


def test_a_chunk_cache_has_every_setting():
    cache = ChunkCache()
    missing = [name for name in ChunkSettings.__annotations__ if name not in vars(cache)]
    assert not missing, missing
    assert callable(cache.sink_for) and cache.store_timeout_s == DEFAULT_STORE_TIMEOUT_S


@pytest.mark.parametrize("timeout_s", [None, 0.5, DEFAULT_STORE_TIMEOUT_S, 30.0])
def test_every_store_call_of_a_view_carries_the_settings_deadline(monkeypatch, timeout_s):
    deadlines = []
    real = Boundary.call

    def recording(self, what, fn, default=None, *, deadline_s=None):
        deadlines.append((what, deadline_s))
        return real(self, what, fn, default, deadline_s=deadline_s)

    monkeypatch.setattr(Boundary, "call", recording)
    view = ChunkCache(store_timeout_s=timeout_s).bind(MODEL, "f" * 64, "tenant")
    assert view.lookup([5, 6, 7]) is None
    view.lookup_many([(0, 3, [5, 6, 7]), (3, 5, [8, 9])])
    assert deadlines and {d for _, d in deadlines} == {timeout_s}, deadlines


def test_the_bound_view_probes_no_setting():
    tree = ast.parse((_ROOT / "ragcache" / "engine" / "chunk" / "bound.py").read_text(encoding="utf-8"))
    probes = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
              and n.func.id in ("getattr", "hasattr")]
    assert not probes, f"ragcache/engine/chunk/bound.py probes its settings at lines {probes}: read ChunkSettings"
