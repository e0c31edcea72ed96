"""The semantic cache's two rooms (issue 41 item 6): ``decision/`` (the hit decision) reads ``stores/``
(where entries live) through the store protocol only, ``stores/`` imports nothing of ``decision/``, and
the protocol holds storage only: the single-flight locks and the typo correction have their own
small protocols."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ragcache.semantic.flight import LOCAL_LOCKS, FileFlightLocks, FlightLocks
from ragcache.semantic.speller import QuerySpeller
from ragcache.semantic.stores.faiss_store import FaissAnswerStore
from ragcache.semantic.stores.protocol import VectorAnswerStore
from ragcache.testing import HashingEmbedder

SEMANTIC = Path(__file__).resolve().parents[2] / "ragcache" / "semantic"
DECISION, STORES, PROTOCOL = "ragcache.semantic.decision", "ragcache.semantic.stores", "ragcache.semantic.stores.protocol"


def module_name(path: Path) -> str:
    parts = path.relative_to(SEMANTIC.parents[1]).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, package: str) -> set[str]:
    """Every module an ``import`` in ``source`` names (function-level ones too; relative imports resolved
    against ``package``), with ``from M import x`` counted as both ``M`` and ``M.x``."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


def semantic_graph() -> dict[str, set[str]]:
    """Module -> the ``ragcache.semantic`` modules it imports. An import of a package's own ancestor is
    not an edge (``ragcache/semantic/__init__.py`` re-exports everything)."""
    files = {module_name(f): f for f in SEMANTIC.rglob("*.py")}
    graph = {}
    for m, f in files.items():
        package = m if f.name == "__init__.py" else m.rsplit(".", 1)[0]
        ancestors = {".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)}
        graph[m] = {t for t in imports_of(f.read_text(encoding="utf-8"), package)
                    if t in files and t != m and t not in ancestors}
    return graph


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for t in graph.get(todo.pop(), ()):
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


def stores_into_decision(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each ``stores/`` module that reaches a ``decision/`` module, directly or through any chain."""
    out = {}
    for m in graph:
        if m.startswith(STORES):
            bad = sorted(t for t in reached(graph, m) if t.startswith(DECISION))
            if bad:
                out[m] = bad
    return out


def decision_into_stores(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each ``decision/`` module that imports a ``stores/`` module other than the protocol."""
    out = {}
    for m, targets in graph.items():
        if m.startswith(DECISION):
            bad = sorted(t for t in targets if t.startswith(STORES) and t not in (STORES, PROTOCOL))
            if bad:
                out[m] = bad
    return out


def test_the_finders_find_both_directions():
    graph = {f"{STORES}.a": {"ragcache.semantic.records"}, "ragcache.semantic.records": {f"{DECISION}.guards"},
             f"{DECISION}.guards": set(), f"{DECISION}.policy": {PROTOCOL, f"{STORES}.faiss_store"},
             PROTOCOL: set(), f"{STORES}.faiss_store": set()}
    assert stores_into_decision(graph) == {f"{STORES}.a": [f"{DECISION}.guards"]}  # through another module
    assert decision_into_stores(graph) == {f"{DECISION}.policy": [f"{STORES}.faiss_store"]}
    src = "def f():\n    from ..decision import budget\n"  # a function-level, relative import counts
    assert f"{DECISION}.budget" in imports_of(src, STORES)


def test_stores_import_nothing_of_decision():
    found = stores_into_decision(semantic_graph())
    assert not found, f"stores/ must not import decision/ (move shared value types to ragcache.semantic): {found}"


def test_decision_reads_stores_through_the_protocol_only():
    found = decision_into_stores(semantic_graph())
    assert not found, f"decision/ may import only {PROTOCOL} of stores/: {found}"


def members(protocol: type) -> set[str]:
    """The attributes and methods a protocol declares (``__len__`` the one dunder counted)."""
    names = {n for n in vars(protocol) if not n.startswith("_")} | set(vars(protocol).get("__annotations__", {}))
    return names | ({"__len__"} & set(vars(protocol)))


STORAGE = {"dim", "counters", "search", "search_many", "exact", "neighbours", "may_hold", "put_many", "remove_documents",
           "remove_namespace", "expire", "touch", "update_state", "__len__", "flush", "close"}
"""Keys, vectors, rows and partitions, and the store's lifetime: nothing else belongs in the protocol."""


def test_the_store_protocol_holds_storage_only():
    assert members(VectorAnswerStore) == STORAGE, (
        "VectorAnswerStore holds storage only; a lock, a speller or a decision gets its own protocol")
    assert members(FlightLocks) == {"hold", "ahold"}
    assert members(QuerySpeller) == {"correct"}


def test_the_member_lister_sees_a_grown_protocol():
    class Grown(VectorAnswerStore):
        def lock(self, key: str) -> None: ...

    class Annotated:
        locks: object

        def __len__(self) -> int: ...

    assert members(Grown) == {"lock"}  # a method added is listed
    assert members(Annotated) == {"locks", "__len__"}  # so are an attribute and __len__


@pytest.mark.parametrize("folder", [False, True])
def test_the_embedded_store_brings_its_locks_and_speller(tmp_path, folder):
    store = FaissAnswerStore(tmp_path if folder else None, embedder=HashingEmbedder(16))
    try:
        assert isinstance(store, VectorAnswerStore) and isinstance(store, QuerySpeller)
        assert isinstance(store.locks, FlightLocks) and not hasattr(store, "lock")
        assert (store.locks is LOCAL_LOCKS) is not folder
        if folder:
            assert isinstance(store.locks, FileFlightLocks) and store.locks.root == tmp_path / ".flight"
        assert store.correct("no-such-partition", "chnage", None) == "chnage"
    finally:
        store.close()


class _StorageOnly:
    """A store with the storage members alone (a FAISS store behind it, its locks and speller hidden)."""

    def __init__(self, inner: FaissAnswerStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        if name in ("locks", "correct"):
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __len__(self) -> int:
        return len(self._inner)


def test_a_cache_over_a_store_takes_its_helpers_when_it_has_them(tmp_path):
    from ragcache.semantic import SemanticCache, partition_key

    emb = HashingEmbedder(64)
    store = FaissAnswerStore(tmp_path, embedder=emb)
    full = SemanticCache(answer_store=store, embedder=emb)
    assert full.locks is store.locks and full.speller is store
    bare = SemanticCache(answer_store=_StorageOnly(FaissAnswerStore(None, embedder=emb)), embedder=emb, threshold=0.5)
    assert bare.locks is LOCAL_LOCKS and bare.speller is None  # this process's locks, no typo correction
    pk = partition_key(namespace="t", model="m")
    bare.store("How do I change the language of the dashboard?", "Settings > Language", partition=pk)
    assert bare.lookup("How do I change the language of the dashboard?", partition=pk).answer == "Settings > Language"
    with bare.flight_lock("ab" * 32, 1) as locked:
        assert locked
    full.close()
    bare.close()


@pytest.mark.parametrize("raw,want", [(1.0000001192092896, 1.0), (-1.0000001, -1.0), (0.5, 0.5), (1.0, 1.0)])
def test_a_stored_answers_similarity_is_a_cosine_in_range(raw, want):
    """A float32 inner product of unit vectors can exceed 1 by a rounding step; every store's rows read in
    [-1, 1] (a hit reported 1.0000001192092896 through LlamaIndex)."""
    from ragcache.semantic.budget import AnswerBudget
    from ragcache.semantic.stores.protocol import StoredAnswer

    assert StoredAnswer(1, "p", "q", "a", {}, AnswerBudget(), raw).similarity == want


def test_an_exact_repeat_reads_similarity_at_most_one():
    from ragcache.semantic import SemanticCache
    from ragcache.testing import HashingEmbedder

    cache = SemanticCache(None, embedder=HashingEmbedder())
    questions = ["How do I rotate the API keys?", "Wie setze ich mein Passwort zurück?", "商店几点开门？",
                 "When does the shop open on Sundays?"]
    for q in questions:
        cache.store(q, f"answer to {q}")
    for q in questions:
        hit = cache.lookup(q)
        assert hit is not None and -1.0 <= hit.similarity <= 1.0, (q, hit)
