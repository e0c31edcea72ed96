"""One record, one pipeline, one document identity, one partition (issue 10; issue 11 items 4 and 5)."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from ragcache import (
    Answer,
    BackendResult,
    CacheUsage,
    ChunkCache,
    LocalBackend,
    LocalEngine,
    MemoryChunkStore,
    PromptLayout,
    RagCache,
    SemanticCache,
    as_document,
)
from ragcache.hashing import content_hash
from ragcache.testing import HashingEmbedder

DOCS = [
    {"id": "refund-policy", "text": "Refunds are issued within 30 days of purchase when the receipt is shown. " * 3},
    {"id": "shipping", "text": "Orders ship from the Leeds warehouse on weekdays before noon, by courier. " * 3},
    {"id": "warranty", "text": "Bikes carry a two-year warranty on the frame and six months on parts. " * 3},
    {"id": "returns", "text": "Return a bike in its original box; the buyer pays return shipping costs. " * 3},
]


class EchoBackend:
    """A deterministic backend for pipeline bookkeeping: answers with a counter, reports a budget hit
    when told to."""

    name = "echo"
    model_id = "echo-1"

    def __init__(self, finish: str = "stop") -> None:
        self.calls = 0
        self.finish = finish

    def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
        self.calls += 1
        n = len(layout.render().split())
        return BackendResult(f"answer #{self.calls}", "model", CacheUsage.local(prompt_tokens=n),
                             0.001, self.finish)  # type: ignore[arg-type]


def _rag(backend=None, **kw) -> RagCache:
    return RagCache(backend or EchoBackend(), semantic=SemanticCache(None, embedder=HashingEmbedder()), **kw)


# -- records ---------------------------------------------------------------------------------
def test_cache_usage_must_add_up():
    u = CacheUsage.local(prompt_tokens=100, prefix_reused=30, chunk_reused=40, recomputed=6)
    assert (u.reused, u.computed, u.recomputed, u.cache_read) == (70, 24, 6, 70)
    p = CacheUsage.provider(input_tokens=12, cache_read=900, cache_write=88)
    assert (p.prompt_tokens, p.reused, p.computed, p.cache_write) == (1000, 900, 100, 88)
    for bad in (dict(prompt_tokens=10, reused=5, computed=4), dict(prompt_tokens=-1, computed=-1),
                dict(prompt_tokens=3, reused=1, computed=1, recomputed=2)):
        with pytest.raises(ValueError):
            CacheUsage(**bad)
    with pytest.raises(ValueError, match="unknown layer"):
        BackendResult("x", "prefix+model", CacheUsage())  # type: ignore[arg-type]


# -- one document identity -------------------------------------------------------------------
@pytest.mark.parametrize("variant", [
    lambda t: t,                      # as stored
    lambda t: "  " + t + "\n",        # outer whitespace
    lambda t: t.replace(". ", ".\r\n"),  # Windows newlines
])
def test_invalidate_by_document_text_removes_the_stale_answer(variant):
    backend = EchoBackend()
    rag = _rag(backend)
    docs = [d["text"].replace(". ", ".\n") for d in DOCS[:2]]
    q = "How long do refunds take?"
    assert rag.answer(q, docs).layer == "model"
    assert rag.answer(q, docs).layer == "semantic"
    assert rag.semantic.invalidate(variant(docs[0])) == 1
    again = rag.answer(q, docs)
    assert again.layer == "model" and backend.calls == 2


def test_invalidate_by_id_and_by_content_hash():
    rag = _rag()
    q = "When do orders ship?"
    rag.answer(q, DOCS[:2])
    assert rag.semantic.invalidate("shipping") == 1
    assert rag.answer(q, DOCS[:2]).layer == "model"
    assert rag.answer(q, DOCS[:2]).layer == "semantic"
    assert rag.semantic.invalidate(content_hash(DOCS[0]["text"])) == 1
    assert rag.answer(q, DOCS[:2]).layer == "model"


def test_as_document_reads_every_shape_the_same():
    from langchain_core.documents import Document
    from llama_index.core.schema import NodeWithScore, TextNode

    text, meta = "Bikes carry a warranty.", {"source": "faq", "lang": "en"}
    shapes = [
        {"id": "w", "text": text, "metadata": meta},
        {"doc_id": "w", "page_content": text, "source": "faq", "lang": "en"},
        Document(page_content=text, metadata=meta, id="w"),
        TextNode(text=text, id_="w", metadata=meta),
        NodeWithScore(node=TextNode(text=text, id_="w", metadata=meta), score=0.3),
        as_document({"id": "w", "text": text, "metadata": meta}),
    ]
    segs = [as_document(s) for s in shapes]
    assert len({(s.id, s.text, tuple(sorted(s.metadata.items())), s.content_hash, s.render_hash) for s in segs}) == 1
    assert segs[0].content_hash == content_hash(text)
    for bad in (42, {"text": 3}, object()):  # a wrong type
        with pytest.raises(TypeError, match="document"):
            as_document(bad)
    with pytest.raises(ValueError, match="document"):  # a dict without its text: a wrong value
        as_document({"id": "x"})


def test_blocks_are_the_prompt_in_order():
    lay = PromptLayout.build(question="Q?", system="S.", documents=DOCS[:2], volatile="User: ann",
                             history=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    kinds = [(b.kind, b.role) for b in lay.blocks()]
    assert kinds == [("system", "system"), ("history", "user"), ("history", "assistant"), ("document", "user"),
                     ("document", "user"), ("volatile", "user"), ("question", "user")]
    # ids are metadata (kept, not rendered); the canonical order is by content, not by id
    from ragcache.prompt.segments import as_document, canonical_documents
    assert [b.doc_id for b in lay.blocks() if b.kind == "document"] == [
        d.id for d in canonical_documents([as_document(d) for d in DOCS[:2]])]
    final = lay.to_messages()[-1]["content"]
    assert [b["ragcache_kind"] for b in final] == ["document", "document", "volatile", "question"]


# -- one partition: volatile text, budgets, truncated answers --------------------------------
@pytest.mark.parametrize("first, second", [
    ({"volatile": "User: user-a"}, {"volatile": "User: user-b"}),
    ({"volatile": "Today is 2026-11-29."}, {"volatile": "Today is 2026-11-30."}),
    ({"system": "Answer briefly. Today is 2026-11-29."}, {"system": "Answer briefly. Today is 2026-11-30."}),
    ({"system": "Answer briefly. The time is 09:14."}, {"system": "Answer briefly. The time is 17:02."}),
])
def test_volatile_text_is_in_the_partition(first, second):
    backend = EchoBackend()
    rag = _rag(backend)  # lint="move": the date leaves the stable prefix but stays in the key
    q = "How long do refunds take?"
    a = rag.answer(q, DOCS[:1], **first)
    b = rag.answer(q, DOCS[:1], **second)
    assert (a.layer, b.layer) == ("model", "model") and a.text != b.text
    assert rag.answer(q, DOCS[:1], **first).text == a.text  # each user / day still gets its own hit
    assert rag.prepare(q, DOCS[:1], **first).partition != rag.prepare(q, DOCS[:1], **second).partition


def test_document_metadata_and_ids_are_in_the_partition():
    rag = _rag()
    q = "How long do refunds take?"
    base = rag.prepare(q, [DOCS[0]]).partition
    renamed = rag.prepare(q, [{**DOCS[0], "id": "refunds-v2"}]).partition
    tagged = rag.prepare(q, [{**DOCS[0], "metadata": {"region": "uk"}}]).partition
    reordered = rag.prepare(q, list(reversed(DOCS[:2]))).partition
    assert renamed.digest == base.digest and renamed.document_ids != base.document_ids  # an id is metadata
    assert tagged.digest != base.digest  # rendered metadata is content
    assert reordered == rag.prepare(q, DOCS[:2]).partition  # canonical order: same key


@pytest.mark.parametrize("budgets", [(8, 16), (8, 8)])
def test_truncated_answers_are_stored_by_default_and_served_to_their_budget_only(budgets):
    backend = EchoBackend(finish="length")
    rag = _rag(backend)
    q = "How long do refunds take?"
    layers = [rag.answer(q, DOCS[:1], max_new_tokens=b).layer for b in budgets]
    assert layers == (["model", "semantic"] if budgets[0] == budgets[1] else ["model", "model"])
    off = _rag(EchoBackend(finish="length"), cache_truncated=False)
    assert [off.answer(q, DOCS[2:3], max_new_tokens=8).layer for _ in range(2)] == ["model", "model"]


def test_truncated_answers_stored_on_request_never_serve_a_larger_budget():
    backend = EchoBackend(finish="length")
    rag = _rag(backend, cache_truncated=True)
    q = "How long do refunds take?"
    first = rag.answer(q, DOCS[:1], max_new_tokens=8)
    hit = rag.answer(q, DOCS[:1], max_new_tokens=8)
    assert hit.layer == "semantic" and hit.finish_reason == "length" and hit.text == first.text
    for larger in (9, 16, 128):
        assert rag.answer(q, DOCS[:1], max_new_tokens=larger).layer == "model"


def test_refresh_skips_the_lookup_and_replaces_the_answer():
    backend = EchoBackend()
    rag = _rag(backend)
    q = "When do orders ship?"
    rag.answer(q, DOCS[:2])
    fresh = rag.answer(q, DOCS[:2], use_semantic=False)
    assert fresh.layer == "model" and rag.answer(q, DOCS[:2]).text == fresh.text == "answer #2"


# -- the local engine through the pipeline ---------------------------------------------------
@pytest.fixture(scope="module")
def lm(tiny_wide3):
    return tiny_wide3


def test_precomputed_documents_are_chunk_hits_and_usage_adds_up(lm):
    cc = ChunkCache(MemoryChunkStore(), dtype=__import__("torch").float32)
    # blend even small documents, at an explicit r (without a calibration record an engine prefills exactly)
    engine = LocalEngine(lm, chunk_cache=cc, min_reuse_tokens=0, calibration=False, recompute_ratio=0.15)
    assert cc.precompute(engine, DOCS[:2], progress=False) == 2
    rag = RagCache(LocalBackend(engine), semantic=None, max_new_tokens=3)
    a = rag.answer("How long do refunds take?", DOCS)
    u = a.usage
    assert a.details["docs_hit"] == 2 and a.details["docs_missed"] == 2
    assert u.reused + u.computed + u.recomputed == u.prompt_tokens > 0
    assert u.chunk_reused > 0 and "chunk" in a.layer and a.approximate and a.recompute_ratio is not None
    assert u.cache_read == u.reused and u.cache_write == 0
    assert isinstance(a, Answer) and a.tokens_reused == u.reused


def test_async_answer_matches_sync(lm):
    engine = LocalEngine(lm)
    rag = RagCache(LocalBackend(engine), semantic=None, max_new_tokens=4)
    sync = rag.answer("When do orders ship?", DOCS[:2])
    engine2 = LocalEngine(lm)
    rag2 = RagCache(LocalBackend(engine2), semantic=None, max_new_tokens=4)
    got = asyncio.run(rag2.aanswer("When do orders ship?", DOCS[:2]))
    assert got.text == sync.text and got.usage == sync.usage


def test_astream_cancel_releases_the_engine(lm):
    engine = LocalEngine(lm)

    async def first_delta_then_leave():
        async for ev in engine.astream("Tell me a long story about caches.", max_new_tokens=200):
            if ev.text:
                return ev.text
        return ""

    async def main():
        await first_delta_then_leave()
        # the worker closes the generator at its next step, which releases the engine's lock
        return await asyncio.wait_for(asyncio.to_thread(engine.generate, "Hi", max_new_tokens=2), timeout=60)

    gen = asyncio.run(main())
    assert gen.stats.decode_tokens >= 1
    assert _joined("ragcache-engine-stream")


def _joined(name: str, timeout: float = 10.0) -> bool:
    for t in threading.enumerate():
        if t.name == name:
            t.join(timeout)
            if t.is_alive():
                return False
    return True


def test_astream_errors_reach_the_consumer(lm):
    engine = LocalEngine(lm)

    async def main():
        async for _ in engine.astream("", max_new_tokens=2):
            pass

    with pytest.raises(ValueError, match="empty"):
        asyncio.run(main())


def test_public_imports():
    import ragcache

    for name in ragcache.__all__:
        assert getattr(ragcache, name) is not None
    with pytest.raises(AttributeError):
        ragcache.NoSuchThing  # noqa: B018


def test_template_date_is_in_the_partition(lm):
    from datetime import date

    def key(**kw):
        rag = RagCache(LocalBackend(LocalEngine(lm, **kw)), semantic=SemanticCache(None, embedder=HashingEmbedder()))
        return rag.prepare("When do orders ship?", DOCS[:1]).partition.digest

    default = key()
    assert default == key()
    pinned = {key(template_date=date(2025, 1, d)) for d in (1, 2)}
    assert len(pinned | {default}) == 3
    assert key(template_date="live") == key(template_date=date.today())


@pytest.mark.parametrize("flight", [True, False])
def test_concurrent_identical_misses_make_one_backend_call(flight):
    import time
    from concurrent.futures import ThreadPoolExecutor

    class SlowBackend(EchoBackend):
        def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
            time.sleep(0.3)
            return super().generate(layout, max_new_tokens=max_new_tokens, temperature=temperature)

    backend = SlowBackend()
    rag = _rag(backend, single_flight=flight)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: rag.answer("When do orders ship?", DOCS[:2]), range(8)))
    if flight:
        assert backend.calls == 1 and len({a.text for a in answers}) == 1
        assert sum(a.layer == "semantic" for a in answers) == 7
    else:
        assert backend.calls > 1


@pytest.mark.parametrize("question, match", [(None, "must be a str, got NoneType"), (42, "must be a str, got int"),
                                             (b"bytes?", "must be a str, got bytes"), ("   ", "question is empty")])
def test_questions_that_are_not_text_are_named(question, match):
    with pytest.raises(ValueError if isinstance(question, str) else TypeError, match=match):
        _rag().answer(question, DOCS[:1])


@pytest.mark.parametrize("documents", ["Keys rotate every 90 days.", b"raw bytes", 42])
def test_documents_must_be_a_list(documents):
    with pytest.raises(TypeError, match="documents must be a list"):
        _rag().answer("How often do keys rotate?", documents)


def test_no_documents_is_none_or_empty():
    rag = _rag()
    assert rag.answer("Hello?", None).layer == "model"
    assert rag.answer("Hello?", ()).layer == "semantic"


class _AsyncSlowBackend(EchoBackend):
    """An async backend whose model call takes 0.3 s on the event loop."""

    async def agenerate(self, layout, *, max_new_tokens, temperature, tenant=None):
        import asyncio

        await asyncio.sleep(0.3)
        return super().generate(layout, max_new_tokens=max_new_tokens, temperature=temperature)


@pytest.mark.parametrize("flight", [True, False])
def test_concurrent_identical_async_misses_make_one_backend_call(flight):
    import asyncio

    backend = _AsyncSlowBackend()
    rag = _rag(backend, single_flight=flight)

    async def main():
        return await asyncio.gather(*(rag.aanswer("When do orders ship?", DOCS[:2]) for _ in range(8)))

    answers = asyncio.run(main())
    if flight:
        assert backend.calls == 1 and len({a.text for a in answers}) == 1
        assert sum(a.layer == "semantic" for a in answers) == 7
    else:
        assert backend.calls == 8


def test_sync_and_async_callers_share_one_flight():
    import asyncio
    import threading
    import time

    class Both(_AsyncSlowBackend):
        def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
            time.sleep(0.3)
            return super().generate(layout, max_new_tokens=max_new_tokens, temperature=temperature)

    backend = Both()
    rag = _rag(backend)
    sync_out = []
    t = threading.Thread(target=lambda: sync_out.append(rag.answer("When do orders ship?", DOCS[:2])))
    t.start()
    time.sleep(0.05)  # the sync caller holds the flight

    async def main():
        # the same text up to whitespace: one flight ("same words" is the same text, case and symbols count)
        return await asyncio.gather(*(rag.aanswer(" When do  orders ship? ", DOCS[:2]) for _ in range(4)))

    answers = asyncio.run(main())
    t.join()
    assert backend.calls == 1 and {a.layer for a in answers} == {"semantic"}
    assert {a.text for a in answers} == {sync_out[0].text}


def test_cancelled_async_waiter_holds_nothing(caplog):
    import asyncio
    import logging

    from ragcache.semantic.flight import _LOCAL, FLIGHTS, flight_key

    backend = _AsyncSlowBackend()
    rag = _rag(backend)
    req = rag.prepare("When do orders ship?", DOCS[:2])
    key = flight_key(req.partition, req.question)

    async def main():
        first = asyncio.create_task(rag.aanswer("When do orders ship?", DOCS[:2]))
        await asyncio.sleep(0.05)
        waiter = asyncio.create_task(rag.aanswer("When do orders ship?", DOCS[:2]))
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await first
        # nothing is left held: no open flight of the key, and this process's lock of it is free
        assert key not in FLIGHTS._flights
        with _LOCAL.hold(key, 0.0) as free:
            assert free
        again = await rag.aanswer("When do orders ship?", DOCS[:2])
        other = await rag.aanswer("Who packs the boxes?", DOCS[:2])
        return again, other

    with caplog.at_level(logging.WARNING, "ragcache.semantic.flight"):
        again, other = asyncio.run(main())
    assert again.layer == "semantic" and other.layer == "model" and backend.calls == 2
    assert not [r for r in caplog.records if r.getMessage().startswith("single flight:")]  # no caller waited out a timeout


def test_async_waiter_times_out_and_computes(caplog):
    import asyncio
    import logging

    from ragcache.semantic.flight import _LOCAL, flight_key

    rag = _rag(_AsyncSlowBackend(), flight_timeout_s=0.2)
    req = rag.prepare("When do orders ship?", DOCS[:2])

    async def main():
        with _LOCAL.hold(flight_key(req.partition, req.question), 1.0) as held:  # a holder that never answers
            assert held
            return await rag.aanswer("When do orders ship?", DOCS[:2])

    with caplog.at_level(logging.WARNING, "ragcache.semantic.flight"):
        a = asyncio.run(main())
    # answered while the lock was still held: the waiter timed out (0.2 s) and took over
    assert a.layer == "model"
    assert [r for r in caplog.records if r.getMessage().startswith("single flight: waited")]


# -- the shape of the code (issue 23 Checks): no import cycle, small modules, short functions ----------
import ast  # noqa: E402
from pathlib import Path  # noqa: E402

_ROOT = Path(__file__).resolve().parents[2]
_PACKAGES = [_ROOT / "ragcache", _ROOT / "integrations" / "langchain" / "langchain_ragcache",
             _ROOT / "integrations" / "llama_index" / "llama_index"]
MAX_FUNCTION_LINES = 80
WHY_LONG = "Why one function:"


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for f in sorted(root.rglob("*.py")):
        parts = f.relative_to(root.parent).with_suffix("").parts
        out[".".join(p for p in parts if p != "__init__") if parts[-1] == "__init__" else ".".join(parts)] = f
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports, from every ``import`` statement (function-level and
    ``TYPE_CHECKING`` ones included; relative imports resolved). An import of one's own ancestor package is
    not an edge (a package's ``__init__`` may re-export its modules)."""
    mods = _modules(root)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        package = m if f.name == "__init__.py" else m.rsplit(".", 1)[0]
        ancestors = {".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)}
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            graph[m] |= {t for t in targets if t in mods and t != m and t not in ancestors}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_cycles():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_ragcache():
    cycles = import_cycles(import_graph(_ROOT / "ragcache"))
    assert not cycles, "import cycles (layers import downwards): " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_library_imports_no_alias_module():
    """Every module of the package is real code: none is only a re-export of another module's names."""
    graph = import_graph(_ROOT / "ragcache")
    mods = _modules(_ROOT / "ragcache")
    aliases = []
    for m, f in mods.items():
        tree = ast.parse(f.read_text(encoding="utf-8"))
        body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        only_imports = body and all(isinstance(n, ast.ImportFrom | ast.Import | ast.Assign) for n in body)
        if only_imports and f.name != "__init__.py" and "Deprecated import path" in (ast.get_docstring(tree) or ""):
            aliases.append(m)
    assert not aliases, f"alias modules are removed (CHANGELOG.md), not kept: {aliases}"
    assert graph


# A module-length cap (450 lines) stood here. It was met by joining lines, which hid the code instead of
# splitting concepts, so it is replaced by what it was for: one concept per module is checked where it
# can be, as no import cycles (test_no_import_cycle_*) and no cross-module use of private names
# (test_no_cross_module_import_of_a_private_name), which is what two concepts in one module lead to.


@pytest.mark.parametrize("root", _PACKAGES, ids=lambda p: p.name)
def test_no_function_over_80_lines_without_a_reason(root):
    long = []
    for f in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES and WHY_LONG not in (ast.get_docstring(node) or ""):
                    long.append(f"{f.relative_to(_ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, (f"functions over {MAX_FUNCTION_LINES} lines: split them, or say {WHY_LONG!r} in the "
                      f"docstring: {long}")


REMOVED_ALIASES = {  # old import path -> where it lives now (CHANGELOG.md, "Removed")
    "ragcache._moved": None,
    "ragcache.anthropic": "ragcache.providers.anthropic",
    "ragcache.openai": "ragcache.providers.openai",
    "ragcache.local_servers": "ragcache.testing.local_servers",
    "ragcache.engine.prefix_cache": "ragcache.engine.prefix.cache",
    "ragcache.engine.chunk_kv": "ragcache.engine.chunk.chunk_kv",
    "ragcache.engine.redis_store": "ragcache.engine.chunk.stores.redis_store",
    "ragcache.engine.chunk_cache": "ragcache.engine.chunk.cache",
    "ragcache.engine.stores": "ragcache.engine.chunk.stores",
    "ragcache.engine.blend_engine": "ragcache.engine.blend.request",
    "ragcache.engine.blend_layers": "ragcache.engine.blend.layers",
    "ragcache.engine.blend_setting": "ragcache.engine.blend.setting",
    "ragcache.engine.hkvd": "ragcache.engine.blend.hkvd",
    "ragcache.engine.selection": "ragcache.engine.blend.selection",
    "ragcache.engine.calibration": "ragcache.engine.blend.calibration",
    "ragcache.engine.reuse": "ragcache.engine.blend.reuse",
    "ragcache.app.bench": "benchmarks",
}


def test_the_removed_alias_paths_are_gone_and_their_targets_import():
    """The files are gone from the source tree, nothing in the repository names the old paths, the new ones import.

    (Importing the old path is not the check: an editable install of another checkout can still serve it.)
    """
    import importlib
    import re

    for old, new in REMOVED_ALIASES.items():
        rel = old.replace(".", "/")
        assert not (_ROOT / f"{rel}.py").exists() and not (_ROOT / rel).exists(), f"{old} is back"
        if new:
            importlib.import_module(new)
    said = re.compile(r"\b(" + "|".join(re.escape(o) for o in REMOVED_ALIASES) + r")\b")
    users = []
    for part in ("ragcache", "integrations", "tests", "examples", "docs", "README.md"):
        root = _ROOT / part
        files = [root] if root.is_file() else [*root.rglob("*.py"), *root.rglob("*.md")] if root.exists() else []
        for f in files:
            if f.name == "test_architecture.py":
                continue
            text = f.read_text(encoding="utf-8")
            users += [f"{f.relative_to(_ROOT)}: {m.group(1)}" for m in said.finditer(text)]
    assert not users, f"these name a removed alias path; use the new one (CHANGELOG.md): {users}"
    changelog = (_ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    missing = [old for old in REMOVED_ALIASES if f"`{old}`" not in changelog]
    assert not missing, f"CHANGELOG.md does not note the removal of {missing}"
    from ragcache.testing import HashingEmbedder as H, tiny_llama as T  # today's names, from the package

    assert callable(H) and callable(T)


# -- one rule for the kinds of unmarked chat text (issue 23 item 2) ---------------------------------
KIND_CASES = {
    "question only": ("S.", [], ["How long do refunds take?"]),
    "documents then question": ("S.", [], ["Refunds take 30 days.", "Orders ship on weekdays.", "How long?"]),
    "history, then documents and question": (None, [("user", "hi"), ("assistant", "hello")],
                                             ["Refunds take 30 days.", "How long?"]),
    "a rendered document keeps its attributes": ("S.", [], ['<document id="refunds">\nRefunds take 30 days.\n</document>',
                                                     "How long?"]),
}


def _via_every_adapter(system, history, final):
    """The layout of one chat request mapped by each adapter (LangChain, LlamaIndex, the OpenAI and
    Anthropic servers, the proxy) and by PromptLayout.from_messages itself."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from langchain_ragcache._messages import to_layout as lc_layout
    from llama_index.core.llms import ChatMessage, MessageRole, TextBlock
    from llama_index.llms.ragcache import to_layout as li_layout

    from ragcache.server.anthropic import _engine_messages
    from ragcache.server.openai import engine_messages
    from ragcache.server.proxy import body_request

    plain = ([{"role": "system", "content": system}] if system else []) + [
        {"role": r, "content": t} for r, t in history] + [{"role": "user", "content": list(final)}]
    lc = ([SystemMessage(system)] if system else []) + [
        HumanMessage(t) if r == "user" else AIMessage(t) for r, t in history] + [HumanMessage(list(final))]
    role = {"system": MessageRole.SYSTEM, "user": MessageRole.USER, "assistant": MessageRole.ASSISTANT}
    li = [ChatMessage(role=role[m["role"]], blocks=[TextBlock(text=t) for t in (
        m["content"] if isinstance(m["content"], list) else [m["content"]])]) for m in plain]
    openai_body = [{"role": m["role"], "content": m["content"] if isinstance(m["content"], str)
                    else [{"type": "text", "text": t} for t in m["content"]]} for m in plain]
    anthropic_body = {"model": "m", "max_tokens": 8, "temperature": 0, **({"system": system} if system else {}),
                      "messages": [m for m in openai_body if m["role"] != "system"]}
    return {
        "from_messages": PromptLayout.from_messages(plain),
        "langchain": lc_layout(lc),
        "llamaindex": li_layout(li),
        "openai server": PromptLayout.from_messages(engine_messages(openai_body)),
        "anthropic server": PromptLayout.from_messages(_engine_messages(anthropic_body)),
        "proxy": body_request(anthropic_body).layout,
    }


@pytest.mark.parametrize("case", list(KIND_CASES))
def test_same_messages_same_kinds_through_every_adapter(case):
    layouts = _via_every_adapter(*KIND_CASES[case])
    want = [(b.kind, b.role, b.text, b.doc_id) for b in layouts["from_messages"].blocks()]
    for name, layout in layouts.items():
        assert [(b.kind, b.role, b.text, b.doc_id) for b in layout.blocks()] == want, name
    kinds = [k for k, *_ in want]
    assert kinds[-1] == "question" and kinds.count("document") == len(KIND_CASES[case][2]) - 1


def test_from_messages_rule_and_errors():
    from ragcache.prompt.layout import CACHE_POINT, Segment

    lay = PromptLayout.from_messages([{"role": "user", "content": ["d1", CACHE_POINT, "as of 09:14", "q?"]}])
    assert [b.kind for b in lay.blocks()] == ["document", "volatile", "question"]
    marked = PromptLayout.from_messages([{"role": "user", "content": [Segment("question", "q?"), "d"]}])
    assert [b.kind for b in marked.blocks()] == ["document", "question"]  # a marked question: the rest are documents
    mid = PromptLayout.from_messages([{"role": "user", "content": "a"}, {"role": "system", "content": "be brief"},
                                      {"role": "user", "content": "q?"}])
    assert mid.history[1] == {"role": "user", "content": "be brief", "type": "system"}
    for bad, match in (([], "non-empty"), ([{"role": "tool", "content": "x"}], "role"),
                       ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}], "follows"),
                       ([{"role": "user", "content": [{"type": "image", "url": "x"}]}], "image"),
                       ([{"role": "user", "content": [Segment("document", "d")]}], "no question"),
                       ([{"role": "system", "content": "s"}], "no user message")):
        with pytest.raises(ValueError, match=match):
            PromptLayout.from_messages(bad)


# -- settings at the facade; imports (issue 29 items 4 and 6) --------------------------------------------
APP_LAYER = ("ragcache/config.py", "ragcache/app/", "ragcache/pipeline.py")
"""Where the process environment may be read directly: the settings module, the CLI / app layer, and
``RagCache`` (the library's facade, which opens the default answer cache with ``Config.from_env()``)."""
ENV_READERS = {"environ", "getenv", "putenv", "unsetenv", "env_setting", "from_env", "provider_api_key",
               "setting_source", "from_env_skipping_bad"}
"""Names that read the environment: ``os.environ`` / ``os.getenv`` and ragcache.config's readers."""


def env_reads(source: str) -> list[str]:
    """``"line: name"`` of each place ``source`` reads the process environment: ``os.environ``,
    ``os.getenv`` (imported or as attributes), ``env_setting``, ``Config.from_env``,
    ``provider_api_key``. Words in strings and comments do not count."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ENV_READERS:
            out.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in ENV_READERS:
            out.append(f"{node.lineno}: {node.id}")
        elif isinstance(node, ast.ImportFrom):
            out += [f"{node.lineno}: import {a.name}" for a in node.names if a.name in ENV_READERS]
    return out


def test_the_environment_finder_finds_every_form():
    reads = ["import os\nos.environ.get('RAGCACHE_HOME')", "import os\nos.getenv('X')",
             "from os import environ\nenviron['X']", "from os import getenv as g\ng('X')",
             "from ragcache.config import env_setting\nenv_setting('home')",
             "from ragcache.config import Config\nConfig.from_env().home", "import os\nv = os.environ"]
    for src in reads:
        assert env_reads(src), src
    assert env_reads('"""Reads $RAGCACHE_HOME via os.environ (documented)."""\n# os.getenv\nx = 1') == []
    assert env_reads("from ragcache.config import Config\nConfig(home='/tmp').paths") == []


@pytest.mark.parametrize("root", _PACKAGES, ids=lambda p: p.name)
def test_no_module_below_the_facade_reads_the_environment(root):
    """The library takes arguments; ``ragcache.config`` and the app layer read ``RAGCACHE_*`` and pass
    the values down. The integrations are facades too: they may read ``Config.from_env()``, nothing else."""
    found = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(_ROOT).as_posix()
        if rel.startswith(APP_LAYER):
            continue
        reads = env_reads(f.read_text(encoding="utf-8"))
        if not rel.startswith("ragcache/"):  # an adapter: Config.from_env() only
            reads = [r for r in reads if not r.endswith(".from_env")]
        found += [f"{rel}:{r}" for r in reads]
    assert not found, ("the environment is read below the facade (take an explicit argument; read it in "
                       f"ragcache.config / the app layer and pass it down): {found}")


def private_imports(root: Path) -> list[str]:
    """``"module imports name from other"`` for each ``from X import _name`` between two modules of
    ``root``'s package or from ragcache (module-level or not; relative imports resolved)."""
    mods = _modules(root)
    out = []
    for m, f in mods.items():
        package = m if f.name == "__init__.py" else m.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            src = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                src = ".".join(up + ([node.module] if node.module else []))
            if src == m or not (src in mods or src.split(".")[0] == "ragcache"):
                continue
            out += [f"{m} imports {a.name} from {src}" for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_the_private_import_finder_finds_them(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("_x = 1\n__all__ = []\ndef public(): pass\n")
    (pkg / "b.py").write_text("from pkg.a import _x, public\nfrom pkg.a import __all__\n")
    (pkg / "sub" / "c.py").write_text("from ..a import _x as y\ndef f():\n    from ragcache.models import _local_folder\n")
    assert sorted(private_imports(pkg)) == ["pkg.b imports _x from pkg.a", "pkg.sub.c imports _local_folder from "
                                            "ragcache.models", "pkg.sub.c imports _x from pkg.a"]


@pytest.mark.parametrize("root", _PACKAGES, ids=lambda p: p.name)
def test_no_cross_module_import_of_a_private_name(root):
    found = private_imports(root)
    assert not found, f"a private name used by another module: make it public in its module (or move it): {found}"


_ENGINE_OWNER = "ragcache/engine/engine.py"
"""The one module that may read a :class:`~ragcache.engine.engine.LocalEngine`'s underscore attributes."""


def private_engine_reads(source: str) -> list[str]:
    """``"line: receiver._name"`` for each read of an underscore attribute of an engine in ``source``: an
    attribute ``_x`` (not a dunder) of a receiver whose expression ends in ``engine`` (``engine``,
    ``self.engine``, ``self._engine``, ``backend.engine``...), or ``getattr`` of such a receiver with a
    literal ``"_x"``. Words in strings and comments do not count."""
    def is_engine(node: ast.AST) -> bool:
        return ast.unparse(node).lower().endswith("engine")

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    out = []
    for node in ast.walk(ast.parse(source)):
        attribute = isinstance(node, ast.Attribute) and private(node.attr) and is_engine(node.value)
        by_name = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2 and is_engine(node.args[0]) \
            and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) \
            and private(node.args[1].value)
        if attribute or by_name:
            out.append(f"{node.lineno}: {ast.unparse(node)}")
    return out


def test_the_private_engine_read_finder_finds_every_form():
    reads = ["with engine._lock:\n    pass", "x = self.engine._eos", "r = rag.backend.engine._recompute_ratio",
             "self._engine._selection = 'x'", "getattr(engine, '_eos', None)", "f(engine._decide(plan))"]
    for src in reads:
        assert private_engine_reads(src), src
    fine = ['"""engine._lock is documented."""\n# engine._eos\nx = 1', "engine.lock", "self._engine.model",
            "engine.__class__", "getattr(engine, 'lock')", "peer._encode(text)", "self._lock"]
    for src in fine:
        assert private_engine_reads(src) == [], src


@pytest.mark.parametrize("root", _PACKAGES, ids=lambda p: p.name)
def test_no_module_reads_an_engines_private_state(root):
    """The blend, the calibration, the decode check, the app and the servers use the engine's public
    members (:class:`ragcache.engine.interface.EngineView`); only ``engine.py`` reads its underscore state."""
    found = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(_ROOT).as_posix()
        if rel != _ENGINE_OWNER:
            found += [f"{rel}:{r}" for r in private_engine_reads(f.read_text(encoding="utf-8"))]
    assert not found, ("an engine's private attribute read outside ragcache/engine/engine.py (make what is "
                       f"needed public on LocalEngine, see ragcache.engine.interface.EngineView): {found}")


def test_the_engine_view_is_public_on_the_local_engine(tiny_wide3):
    from ragcache.engine.engine import LocalEngine
    from ragcache.engine.interface import EngineView

    engine = LocalEngine(tiny_wide3, calibration=False, recompute_ratio=0.2)
    members = sorted({n for n in vars(EngineView) if not n.startswith("_")} | set(EngineView.__annotations__))
    assert "lock" in members and "eos_token_ids" in members and "configured_recompute_ratio" in members
    assert [n for n in members if not hasattr(engine, n)] == []
    with engine.lock:  # re-entrant: the engine's own calls inside a caller's hold do not deadlock
        assert engine.generate("Hi", max_new_tokens=1).stats.decode_tokens == 1
    assert engine.configured_recompute_ratio == 0.2 and engine.eos_token_ids
    engine.recompute_ratio = None
    assert engine.configured_recompute_ratio is None


@pytest.mark.parametrize("root", _PACKAGES[1:], ids=lambda p: p.name)
def test_no_import_cycle_in_the_integrations(root):
    cycles = import_cycles(import_graph(root))
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


# -- one answer path (issue 29): only answering.py and semantic/ touch a semantic cache's lookup / store / flight ---
_CACHE_METHODS = {"lookup", "alookup", "store", "astore", "store_many", "flight_lock", "aflight_lock"}
_ANSWER_PATH_OWNERS = ("ragcache/answering.py", "ragcache/semantic/")
# LangChain's framework-owned BaseCache: the framework calls lookup / alookup and update / aupdate itself
_FRAMEWORK_OWNED = {("integrations/langchain/langchain_ragcache/cache.py", "lookup"),
                    ("integrations/langchain/langchain_ragcache/cache.py", "alookup")}


def semantic_cache_calls(source: str) -> list[tuple[str, int, str]]:
    """``(function, line, call)`` for each call of a semantic cache's lookup / store / flight lock in
    ``source``: a ``flight_lock`` / ``aflight_lock`` call on anything, or one of :data:`_CACHE_METHODS`
    on a receiver whose expression names a semantic cache (``self.semantic``, ``rag.semantic``,
    ``self.semantic_cache``, ``semantic``...)."""
    tree = ast.parse(source)
    out: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else func
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) \
                    and child.func.attr in _CACHE_METHODS:
                receiver = ast.unparse(child.func.value)
                if child.func.attr.endswith("flight_lock") or "semantic" in receiver.lower():
                    out.append((func, child.lineno, f"{receiver}.{child.func.attr}"))
            visit(child, name)

    visit(tree, "<module>")
    return out


def test_the_answer_path_scan_finds_direct_cache_calls():
    src = ("def f(self, q):\n    hit = self.semantic.lookup(q)\n    with cache.flight_lock(k, 1):\n"
           "        rag.semantic_cache.astore(q, a)\n    return self.path.run(q, None, g)\n")
    assert [c[2] for c in semantic_cache_calls(src)] == ["self.semantic.lookup", "cache.flight_lock",
                                                         "rag.semantic_cache.astore"]


def test_only_the_answer_path_calls_a_semantic_cache():
    found = []
    for root in _PACKAGES:
        for f in sorted(root.rglob("*.py")):
            rel = f.relative_to(_ROOT).as_posix()
            if rel.startswith(_ANSWER_PATH_OWNERS):
                continue
            found += [f"{rel}:{line} {call} (in {func})" for func, line, call in
                      semantic_cache_calls(f.read_text(encoding="utf-8")) if (rel, func) not in _FRAMEWORK_OWNED]
    assert not found, ("lookup / store / flight lock of a semantic cache outside ragcache.answering "
                       "(answer through AnswerPath instead):\n" + "\n".join(found))
