"""The answer cache is one typed interface (:class:`ragcache.semantic.answer_cache.AnswerCache`, issue 49 item 1).

Every implementation has the protocol's methods with the protocol's parameters; the answer path takes any of
them (a double written against the protocol included), refuses anything else at construction, and reads its
cache through those methods alone: no signature reading, ``getattr`` or ``hasattr`` probes.
"""

from __future__ import annotations

import ast
import inspect
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from ragcache.answering import AnswerPath
from ragcache.backend import BackendResult, CacheUsage
from ragcache.request import CacheRequest
from ragcache.semantic import SemanticCache, SemanticPolicy, partition_key
from ragcache.semantic.answer_cache import AnswerCache
from ragcache.semantic.pg_cache import PgSemanticCache
from ragcache.semantic.records import SemanticHit
from ragcache.testing import HashingEmbedder

_ROOT = Path(__file__).resolve().parents[2]
PK = partition_key(namespace="n", model="m")
Q = "How long are backups kept?"
METHODS = sorted(n for n, v in vars(AnswerCache).items() if inspect.isfunction(v) and not n.startswith("_"))


class CountingCache:
    """A test double written against :class:`AnswerCache`: delegates to a real cache and records the
    ``count`` of each lookup and each stored request."""

    def __init__(self, inner: SemanticPolicy) -> None:
        self.inner, self.lookups, self.stored = inner, [], []

    def lookup_request(self, request: CacheRequest, *, count: bool = True) -> SemanticHit | None:
        self.lookups.append(count)
        return self.inner.lookup_request(request, count=count)

    def store_request(self, request: CacheRequest, answer: str, *, finish_reason: str | None = None,
                      output_tokens: int | None = None, metadata: Any = None, ttl_s: float | None = None,
                      store_truncated: bool | None = None) -> int | None:
        self.stored.append(request)
        return self.inner.store_request(request, answer, finish_reason=finish_reason, output_tokens=output_tokens,
                                        metadata=metadata, ttl_s=ttl_s, store_truncated=store_truncated)

    def warm(self) -> None:
        self.inner.warm()

    def flight_lock(self, key: str, timeout_s: float) -> AbstractContextManager[bool]:
        return self.inner.flight_lock(key, timeout_s)

    def aflight_lock(self, key: str, timeout_s: float) -> AbstractAsyncContextManager[bool]:
        return self.inner.aflight_lock(key, timeout_s)


IMPLEMENTATIONS = [SemanticPolicy, SemanticCache, PgSemanticCache, CountingCache]


def _shape(fn: Any) -> list[tuple[str, Any, Any]]:
    """(name, kind, default) of each parameter: what a caller of the protocol relies on."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_the_protocol_has_the_methods_the_path_calls():
    assert METHODS == ["aflight_lock", "flight_lock", "lookup_request", "store_request", "warm"]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("method", METHODS)
def test_each_implementation_has_the_protocols_signature(impl, method):
    assert _shape(getattr(impl, method)) == _shape(getattr(AnswerCache, method)), (impl.__name__, method)


def test_the_shape_check_sees_a_differing_signature():
    class Renamed(CountingCache):
        def lookup_request(self, req: CacheRequest, *, count: bool = True) -> SemanticHit | None:  # type: ignore[override]
            return None

    class NoDefault(CountingCache):
        def lookup_request(self, request: CacheRequest, *, count: bool) -> SemanticHit | None:  # type: ignore[override]
            return None

    for impl in (Renamed, NoDefault):
        assert _shape(impl.lookup_request) != _shape(AnswerCache.lookup_request)


def test_an_open_cache_is_an_answer_cache(tmp_path):
    with SemanticCache(tmp_path, embedder=HashingEmbedder()) as c:
        assert isinstance(c, AnswerCache) and isinstance(CountingCache(c), AnswerCache)


class OldStyle:
    """An object with the pre-protocol ``lookup`` / ``store`` only."""

    def lookup(self, question: str, *, partition: Any, threshold: Any = None, max_tokens: Any = None) -> None:
        return None

    def store(self, *a: Any, **k: Any) -> None:
        return None


@pytest.mark.parametrize("bad", [OldStyle(), object(), "a cache"], ids=["old-style", "object", "str"])
def test_the_path_refuses_what_is_not_an_answer_cache(bad):
    with pytest.raises(TypeError, match="AnswerCache"):
        AnswerPath(bad)


def result() -> BackendResult:
    return BackendResult("30 days", "model", CacheUsage.local(prompt_tokens=5), finish_reason="stop")


@pytest.mark.parametrize("max_tokens", [None, 16])
def test_a_double_is_served_through_the_protocol(tmp_path, max_tokens):
    """The path reads and writes its cache through the protocol alone; a flight's re-reads pass ``count=False``."""
    with SemanticCache(tmp_path, embedder=HashingEmbedder()) as c:
        cache = CountingCache(c)
        path = AnswerPath(cache)
        req = CacheRequest(Q, None, PK, max_tokens=max_tokens)
        assert not path.run(req, result).hit
        assert cache.lookups == [True, False] and cache.stored == [req]  # the first counted, the flight's re-read not
        assert path.run(req, result).hit and cache.lookups == [True, False, True]
        hit = c.lookup(Q, partition=PK, max_tokens=max_tokens)
        assert hit is not None and hit.budget.max_tokens == max_tokens  # the request's budget was stored
        assert (c.stats.lookups, c.stats.hits) == (3, 2)  # the double's two counted + this one


def test_a_request_without_a_partition_is_neither_looked_up_nor_stored(tmp_path):
    with SemanticCache(tmp_path, embedder=HashingEmbedder()) as c:
        req = CacheRequest(Q, None, None)
        assert c.store_request(req, "30 days", finish_reason="stop") is None and len(c) == 0
        c.store(Q, "30 days", partition=PK)
        assert c.lookup_request(req) is None and c.lookup_request(CacheRequest(Q, None, PK)) is not None


def probes(source: str) -> list[str]:
    """``"line: what"`` for each probe of a collaborator in ``source``: a call of ``getattr`` / ``hasattr``,
    and an import of ``inspect``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            out.append(f"{node.lineno}: {node.func.id}")
        elif isinstance(node, ast.Import) and any(a.name == "inspect" for a in node.names):
            out.append(f"{node.lineno}: import inspect")
        elif isinstance(node, ast.ImportFrom) and node.module == "inspect":
            out.append(f"{node.lineno}: from inspect")
    return sorted(out, key=lambda x: int(x.split(':')[0]))


def test_the_probe_scan_finds_every_form():
    src = ('"""getattr(x, "warm") in a docstring."""\nimport inspect\nfrom inspect import signature\n'
           "a = getattr(c, 'warm', None)\nb = hasattr(c, 'flight_lock')\n# getattr(c, 'x') in a comment\n")
    assert probes(src) == ["2: import inspect", "3: from inspect", "4: getattr", "5: hasattr"]


def test_the_answer_path_probes_no_collaborator():
    found = probes((_ROOT / "ragcache" / "answering.py").read_text(encoding="utf-8"))
    assert not found, f"ragcache/answering.py probes its cache instead of calling the AnswerCache protocol: {found}"


def test_the_request_record_has_what_an_answer_cache_reads():
    """:class:`AnswerRequest` (the four fields a cache reads) is met by the answer path's record itself."""
    from dataclasses import fields

    from ragcache.semantic.answer_cache import AnswerRequest

    read = {n for n, v in vars(AnswerRequest).items() if isinstance(v, property)}
    assert read == {"question", "partition", "threshold", "max_tokens"}
    assert read <= {f.name for f in fields(CacheRequest)}
