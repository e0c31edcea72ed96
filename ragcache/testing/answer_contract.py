"""The answer-path contract: what every entry point must do with a question (needs ``pytest``).

Every entry point (``RagCache``, ``ragcache ask``, ``ChatRagCache``, the LlamaIndex query engine, the
LangChain middleware, the proxy) answers through :class:`ragcache.answering.AnswerPath`; this
suite checks that each one, seen from outside, behaves as that path says:

- a miss calls the backend once and stores the answer; the same question again is a hit with
  ``layer="semantic"``, zero usage and the stored finish reason;
- an answer that did not finish (a content filter, a cut stream) is never stored, and an answer
  cut at the token budget is stored only where the entry point's documented budget rule says so
  (:attr:`EntryPoint.stores_length`);
- 8 concurrent identical misses make one backend call;
- an answer stored through one entry point is served through another with equal
  :class:`~ragcache.answering.Answer` fields (layer, approximate, recompute ratio, blend setting,
  finish reason);
- an answer made by a blend is served only to a backend at the same blend setting: an exact backend
  and one at another setting miss and call (:func:`ragcache.provenance.may_serve`), and the exact answer
  they store then serves everyone.
- :class:`DefaultsContract`: at the entry point's defaults, an answer cut at the budget is a hit
  the second time and after a restart.

Use it by subclassing :class:`AnswerPathContract` and providing two fixtures, ``make_entry`` and
``make_other``: each a factory ``backend -> EntryPoint`` over the *same* answer store for the test
(parametrize them over your entry points; ``make_other`` is the entry point that reads what
``make_entry`` stored)::

    ENTRIES = {"ragcache": RagCacheEntry, "ask": AskEntry}

    @pytest.fixture(params=sorted(ENTRIES))
    def make_entry(request): return ENTRIES[request.param]

    @pytest.fixture(params=sorted(ENTRIES))
    def make_other(request): return ENTRIES[request.param]

    class TestAnswerPath(AnswerPathContract):
        pass

Entry points answer one fixed request shape: a question over the documents the test module
chose (the same documents, system text, model and budget everywhere, so every entry point keys
the same partition), with :class:`ScriptedBackend` as the model.

The tenant is part of the contract too (:class:`TenantKVContract`): two tenants sending the same
system text and documents through an entry point, to one local engine, reuse none of each other's
prefix or chunk KV unless the engine opts in (``share_kv_across_namespaces=True``). A subclass provides
``make_tenant_entry``: a factory ``(engine, tenant) -> EntryPoint`` whose model is that
:class:`~ragcache.engine.engine.LocalEngine` and whose requests are ``tenant``'s, asking over
:data:`TENANT_SYSTEM` and :data:`TENANT_DOCS`.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import pytest

from ragcache.answering import Answer
from ragcache.backend import BackendResult, CacheUsage
from ragcache.testing import run_in_threads


class ScriptedBackend:
    """A :class:`~ragcache.backend.Backend` that answers ``text`` with ``finish`` after ``delay_s``
    seconds and counts its calls and their tenants (thread-safe). ``approximate`` / ``recompute_ratio`` / ``blend_setting``
    are reported as a blended local prefill would (so provenance equality across entry points is
    checked); ``blend_setting`` is also the setting the backend declares (``None``: exact prefill)."""

    name = "scripted"
    model_id = "scripted-1"

    def __init__(self, text: str = "Backups run nightly at 02:30 UTC.", finish: str = "stop", delay_s: float = 0.0,
                 approximate: bool = True, recompute_ratio: float | None = 0.15,
                 blend_setting: str | None = "scripted r=0.15") -> None:
        self.text, self.finish, self.delay_s = text, finish, delay_s
        self.approximate, self.recompute_ratio = approximate, recompute_ratio
        self._blend = blend_setting
        self._lock = threading.Lock()
        self.calls = 0
        self.tenants: list[str | None] = []  # the tenant of each call (the Backend contract's ``tenant``)

    @property
    def blend_setting(self) -> str | None:
        """The blend setting it answers at (``None`` when it reports exact answers)."""
        return self._blend if self.approximate else None

    def generate(self, layout: Any, *, max_new_tokens: int, temperature: float,
                 tenant: str | None = None) -> BackendResult:
        with self._lock:
            self.calls += 1
            self.tenants.append(tenant)
        time.sleep(self.delay_s)
        n = len(layout.render().split())
        return BackendResult(self.text, "prefix+chunk", CacheUsage.local(prompt_tokens=n, prefix_reused=min(n, 4),
                                                                         completion_tokens=7),
                             0.001, self.finish, self.approximate, self.recompute_ratio,  # type: ignore[arg-type]
                             blend_setting=self.blend_setting)

    async def agenerate(self, layout: Any, *, max_new_tokens: int, temperature: float,
                        tenant: str | None = None) -> BackendResult:
        return await asyncio.to_thread(self.generate, layout, max_new_tokens=max_new_tokens, temperature=temperature,
                                       tenant=tenant)


class EntryPoint(Protocol):
    """One entry point under test.

    Attributes:
        name: shown in test ids and messages.
        stores_length: the entry point's documented budget rule stores answers cut at the token
            budget (``ragcache ask``: yes; ``RagCache``: only with ``cache_truncated=True``).
    """

    name: str
    stores_length: bool

    def ask(self, question: str) -> Answer:
        """Answer ``question`` through the entry point (the fixed documents, the scripted backend)."""


Factory = Callable[[ScriptedBackend], EntryPoint]

QUESTION = "When do the backups run?"
FIELDS = ("layer", "approximate", "recompute_ratio", "blend_setting", "finish_reason", "text")


def _fields(a: Answer) -> tuple:
    return tuple(getattr(a, f) for f in FIELDS)


class AnswerPathContract:
    """The checks; see the module docstring for the fixtures a subclass provides."""

    def test_miss_then_store_then_hit(self, make_entry: Factory) -> None:
        backend = ScriptedBackend()
        entry = make_entry(backend)
        first = entry.ask(QUESTION)
        assert first.layer != "semantic" and first.text == backend.text and backend.calls == 1, entry.name
        assert first.finish_reason == "stop" and first.usage.prompt_tokens > 0
        hit = entry.ask(QUESTION)
        assert hit.layer == "semantic" and backend.calls == 1, f"{entry.name}: the repeat called the backend"
        assert hit.text == first.text and hit.usage == CacheUsage(), f"{entry.name}: a hit replays usage"
        assert (hit.finish_reason, hit.approximate, hit.recompute_ratio) == ("stop", True, 0.15)
        assert hit.blend_setting == backend.blend_setting and hit.approximation, f"{entry.name}: the hit lost its label"

    @pytest.mark.parametrize("finish", ["content_filter", "incomplete", "refusal", "length"])
    def test_an_unfinished_answer_is_not_stored(self, make_entry: Factory, finish: str) -> None:
        backend = ScriptedBackend(finish=finish)
        entry = make_entry(backend)
        first = entry.ask(QUESTION)
        assert first.finish_reason == finish and first.layer != "semantic", entry.name
        second = entry.ask(QUESTION)
        if finish == "length" and entry.stores_length:  # the documented budget rule: served to the same budget
            assert second.layer == "semantic" and second.finish_reason == "length" and backend.calls == 1
        else:
            assert second.layer != "semantic" and backend.calls == 2, f"{entry.name} stored a {finish} answer"

    def test_eight_concurrent_identical_misses_make_one_call(self, make_entry: Factory) -> None:
        backend = ScriptedBackend(delay_s=0.5)
        entry = make_entry(backend)
        out, errors = run_in_threads(lambda: entry.ask(QUESTION), 8)
        assert not errors, errors
        assert backend.calls == 1, f"{entry.name}: {backend.calls} backend calls for 8 identical misses"
        assert sorted(a.layer == "semantic" for a in out) == [False] + [True] * 7
        assert all(a.text == backend.text for a in out)

    def test_an_answer_stored_through_one_entry_point_is_served_through_another(
            self, make_entry: Factory, make_other: Factory) -> None:
        backend = ScriptedBackend()
        writer, reader = make_entry(backend), make_other(backend)
        first = writer.ask(QUESTION)
        hit = reader.ask(QUESTION)
        assert hit.layer == "semantic" and backend.calls == 1, f"{writer.name} -> {reader.name}: not served"
        again = writer.ask(QUESTION)
        assert _fields(hit) == _fields(again), f"{writer.name} -> {reader.name}: {_fields(hit)} != {_fields(again)}"
        assert (hit.approximate, hit.recompute_ratio, hit.finish_reason, hit.text) == \
            (first.approximate, first.recompute_ratio, first.finish_reason, first.text)

    def test_a_blended_answer_is_served_only_at_its_blend_setting(self, make_entry: Factory,
                                                                  make_other: Factory) -> None:
        # each entry point is built right before it asks: an entry may swap the process's model for its backend
        blended = ScriptedBackend(text="Blended: backups run at 02:30.")
        first = make_entry(blended).ask(QUESTION)
        assert first.approximate and first.blend_setting == "scripted r=0.15"
        other = ScriptedBackend(text="Blended at r=0.3: backups run at 02:30.", recompute_ratio=0.3,
                                blend_setting="scripted r=0.3")
        a = make_other(other).ask(QUESTION)
        assert a.layer != "semantic" and other.calls == 1, "a blended answer was served at another setting"
        exact = ScriptedBackend(text="Exact: backups run nightly at 02:30 UTC.", approximate=False,
                                recompute_ratio=None)
        b = make_other(exact).ask(QUESTION)
        assert b.layer != "semantic" and exact.calls == 1, "a blended answer was served to an exact request"
        assert not b.approximate and b.blend_setting is None and b.approximation is None
        again = make_entry(blended).ask(QUESTION)  # the exact answer replaced the entry: it serves everyone
        assert again.layer == "semantic" and again.text == exact.text and not again.approximate
        assert blended.calls == 1


TENANT_SYSTEM = ("You are the support assistant of the Northwind Traders warehouse. Answer from the passages "
                 "only, cite the passage number, and say so when the passages do not hold the answer. ") * 2
"""The system text of the tenant case: several 16-token blocks, so a prefix hit is visible."""
TENANT_DOCS = ("The canary deployment lasts fifteen minutes before traffic shifts to the new version entirely.",
               "Rollbacks are triggered automatically when the error rate exceeds two percent for five minutes.")
TENANT_QUESTIONS = ("How long does the canary last?", "When do rollbacks happen?", "How many replicas are kept?")

TenantFactory = Callable[[Any, str], EntryPoint]


def tenant_engine(*, share: bool = False) -> Any:
    """A tiny random :class:`~ragcache.engine.engine.LocalEngine` (float32, :func:`ragcache.testing.tiny_llama`)
    with a prefix cache and a memory chunk cache that blends on any chunk hit (r = 0.15, no calibration), so
    the KV caches alone decide what is reused. ``share``: ``share_kv_across_namespaces``."""
    import torch

    from ragcache.engine.chunk import ChunkCache, MemoryChunkStore
    from ragcache.engine.engine import LocalEngine

    cc = ChunkCache(MemoryChunkStore(), dtype=torch.float32)
    return LocalEngine(_tiny(), chunk_cache=cc, min_reuse_tokens=0, calibration=False, recompute_ratio=0.15,
                       share_kv_across_namespaces=share)


@functools.cache
def _tiny() -> Any:
    from ragcache.testing import tiny_llama

    return tiny_llama(seed=0)


def _kv(engine: Any) -> tuple[int, int]:
    """The engine's prefix-cache hits and reused tokens so far."""
    st = engine.prefix_cache.stats
    return st.hits, st.tokens_reused


class TenantKVContract:
    """Two tenants through an entry point share no KV unless the engine opts in (see the module docstring
    for the ``make_tenant_entry`` fixture)."""

    def test_two_tenants_share_no_kv(self, make_tenant_entry: TenantFactory) -> None:
        engine = tenant_engine()
        acme, globex = make_tenant_entry(engine, "acme"), make_tenant_entry(engine, "globex")
        acme.ask(TENANT_QUESTIONS[0])
        own = acme.ask(TENANT_QUESTIONS[1])
        assert own.layer != "semantic" and own.usage.reused > 0, f"{acme.name}: a tenant reused none of its own KV"
        before = _kv(engine)
        other = globex.ask(TENANT_QUESTIONS[2])
        assert other.layer != "semantic", other
        assert (other.usage.reused, other.usage.prefix_reused, other.usage.chunk_reused) == (0, 0, 0), \
            f"{globex.name}: a second tenant reused the first one's KV: {other.usage}"
        assert _kv(engine) == before, f"{globex.name}: the prefix cache counted a hit across tenants"
        again = globex.ask(TENANT_QUESTIONS[0])  # the second tenant reuses its own KV
        assert again.usage.reused > 0, f"{globex.name}: the tenant's own KV was not reused"

    def test_tenants_share_kv_when_the_engine_opts_in(self, make_tenant_entry: TenantFactory) -> None:
        engine = tenant_engine(share=True)
        acme, globex = make_tenant_entry(engine, "acme"), make_tenant_entry(engine, "globex")
        acme.ask(TENANT_QUESTIONS[0])
        before = _kv(engine)
        other = globex.ask(TENANT_QUESTIONS[2])
        assert other.layer != "semantic" and other.usage.reused > 0, f"{globex.name}: no reuse with the opt-in"
        assert _kv(engine)[0] > before[0]


class DefaultsContract:
    """At an entry point's defaults, the embedded model's way of answering gets hits: an answer cut at
    the token budget (a small model often fills it) is stored under the one rule
    (:data:`ragcache.answering.CACHE_TRUNCATED`), so the second identical question is a semantic hit,
    and so is the first question after a restart (documents' ids, random in a vector store, are
    metadata: the partition and the order come from their content).

    A subclass provides ``make_entry`` (``backend -> EntryPoint`` at the entry point's defaults, over
    the persistent default answer store) and ``restart`` (a callable that does what a process restart
    does to that store)."""

    def test_a_cut_answer_is_a_hit_again_and_after_a_restart(self, make_entry: Factory, restart: Any) -> None:
        backend = ScriptedBackend(finish="length", approximate=False, recompute_ratio=None)  # exact, as at the defaults
        entry = make_entry(backend)
        first = entry.ask(QUESTION)
        assert first.layer != "semantic" and first.finish_reason == "length" and backend.calls == 1, entry.name
        hit = entry.ask(QUESTION)
        assert hit.layer == "semantic" and backend.calls == 1, f"{entry.name}: a cut answer was not served again"
        assert hit.text == first.text and hit.finish_reason == "length"
        restart()
        again = make_entry(backend).ask(QUESTION)
        assert again.layer == "semantic" and backend.calls == 1, f"{entry.name}: no hit after a restart"
        assert again.text == first.text


__all__ = ["AnswerPathContract", "DefaultsContract", "EntryPoint", "QUESTION", "ScriptedBackend", "TENANT_DOCS",
           "TENANT_QUESTIONS", "TENANT_SYSTEM", "TenantKVContract", "tenant_engine"]
