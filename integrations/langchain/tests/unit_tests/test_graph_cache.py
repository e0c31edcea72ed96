"""RagCacheGraphCache: LangGraph's node-cache contract (TTL, namespaces, clear) in SQLite, and a
cached node that is not re-run within its TTL across two processes sharing the store (issue 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from langchain_ragcache.graph_cache import RagCacheGraphCache


class Clock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["memory", "disk"])
def cache(request, tmp_path):
    clock = Clock()
    c = RagCacheGraphCache(None if request.param == "memory" else tmp_path / "graph", clock=clock)
    c.test_clock = clock  # type: ignore[attr-defined]
    return c


def test_get_set_ttl(cache) -> None:
    a, b, c = (("node", "retrieve"), "k1"), (("node", "retrieve"), "k2"), (("node", "answer"), "k1")
    cache.set({a: ({"docs": ["d1", "d2"], "n": 3}, 60), b: ("two", None), c: ([1.5, None, True], 10)})
    assert cache.get([a, b, c, (("node", "retrieve"), "missing")]) == {
        a: {"docs": ["d1", "d2"], "n": 3}, b: "two", c: [1.5, None, True]}
    cache.test_clock.t += 10  # c's TTL has passed (expiry is exclusive), a's has not
    assert cache.get([a, b, c]) == {a: {"docs": ["d1", "d2"], "n": 3}, b: "two"}
    cache.test_clock.t += 50
    assert cache.get([a, b, c]) == {b: "two"}
    cache.set({a: ("again", 5)})  # re-set after expiry
    assert cache.get([a]) == {a: "again"}
    assert cache.get([]) == {}
    with pytest.raises(ValueError, match="ttl"):
        cache.set({a: ("x", 0)})


def test_namespaces_are_exact_and_clear(cache) -> None:
    k1, k2, k3 = (("a", "b"), "k"), (("a/b",), "k"), (("c",), "k")
    cache.set({k1: (1, None), k2: (2, None), k3: (3, None)})
    assert cache.get([k1, k2, k3]) == {k1: 1, k2: 2, k3: 3}
    cache.clear([("a", "b")])
    assert cache.get([k1, k2, k3]) == {k2: 2, k3: 3}
    cache.clear()
    assert cache.get([k1, k2, k3]) == {} and len(cache) == 0


async def test_async_methods(cache) -> None:
    k = (("n",), "key")
    await cache.aset({k: ("v", None)})
    assert await cache.aget([k]) == {k: "v"}
    await cache.aclear([("n",)])
    assert await cache.aget([k]) == {}


def test_persists_across_instances(tmp_path) -> None:
    k = (("retrieve",), "q1")
    RagCacheGraphCache(tmp_path / "g").set({k: (["doc"], 300)})
    assert RagCacheGraphCache(tmp_path / "g").get([k]) == {k: ["doc"]}
    assert RagCacheGraphCache(tmp_path / "g.sqlite3").get([k]) == {}  # another file, another cache
    bad = tmp_path / "not-a-db.db"
    bad.write_text("hello, this is not sqlite" * 100)
    with pytest.raises(ValueError, match="SQLite"):
        RagCacheGraphCache(bad)


GRAPH = textwrap.dedent("""
    import json, sys
    from typing import TypedDict
    from langgraph.graph import StateGraph, START, END
    from langgraph.types import CachePolicy
    from langchain_ragcache.graph_cache import RagCacheGraphCache

    store, log, ttl, question = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]

    class State(TypedDict, total=False):
        question: str
        docs: list
        answer: str

    def retrieve(state):
        with open(log, "a") as f:
            f.write("retrieve " + state["question"] + "\\n")
        return {"docs": ["doc about " + state["question"]]}

    def answer(state):
        with open(log, "a") as f:
            f.write("answer " + state["question"] + "\\n")
        return {"answer": "answer from " + state["docs"][0]}

    b = StateGraph(State)
    b.add_node("retrieve", retrieve, cache_policy=CachePolicy(ttl=ttl))
    b.add_node("answer", answer, cache_policy=CachePolicy(ttl=ttl))
    b.add_edge(START, "retrieve"); b.add_edge("retrieve", "answer"); b.add_edge("answer", END)
    graph = b.compile(cache=RagCacheGraphCache(store))
    print(json.dumps(graph.invoke({"question": question})))
""")


def _run(script: Path, store: Path, log: Path, ttl: float, question: str) -> dict:
    out = subprocess.run([sys.executable, str(script), str(store), str(log), str(ttl), question],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_cached_nodes_are_not_rerun_across_processes_within_ttl(tmp_path) -> None:
    script, store, log = tmp_path / "graph.py", tmp_path / "store", tmp_path / "runs.log"
    script.write_text(GRAPH)
    first = _run(script, store, log, 600, "refunds")
    assert _lines(log) == ["retrieve refunds", "answer refunds"]
    second = _run(script, store, log, 600, "refunds")  # another process, same store: both nodes cached
    assert second == first and _lines(log) == ["retrieve refunds", "answer refunds"]
    other = _run(script, store, log, 600, "shipping")  # another input: its own entries
    assert other["answer"] == "answer from doc about shipping" and len(_lines(log)) == 4


def test_nodes_rerun_after_the_ttl_across_processes(tmp_path) -> None:
    script, store, log = tmp_path / "graph.py", tmp_path / "store", tmp_path / "runs.log"
    script.write_text(GRAPH)
    first = _run(script, store, log, 1, "warranty")
    time.sleep(1.2)  # (process start-up adds more) the entries written by the first process expire
    again = _run(script, store, log, 1, "warranty")
    assert again == first and _lines(log) == ["retrieve warranty", "answer warranty"] * 2


def test_langgraph_rag_example(tmp_path) -> None:
    import importlib.util

    from langchain_ragcache.chat_models import TINY_RANDOM_MODEL

    path = Path(__file__).resolve().parents[4] / "examples" / "langgraph_rag.py"
    spec = importlib.util.spec_from_file_location("langgraph_rag", path)
    ex = importlib.util.module_from_spec(spec)
    sys.modules["langgraph_rag"] = ex  # LangGraph resolves the state's annotations in the module
    spec.loader.exec_module(ex)
    runs: list[str] = []
    first = ex.build_graph(str(tmp_path / "g"), model=TINY_RANDOM_MODEL, max_tokens=3, runs=runs).invoke(
        {"question": "How long do refunds take?"})
    assert runs == ["retrieve", "answer"] and [d["id"] for d in first["documents"]][0] == "refunds"
    runs.clear()
    second = ex.build_graph(str(tmp_path / "g"), model=TINY_RANDOM_MODEL, max_tokens=3, runs=runs).invoke(
        {"question": "How long do refunds take?"})
    assert runs == [] and second == first  # a new graph on the same store: both nodes served from it
    ex.build_graph(str(tmp_path / "g"), model=TINY_RANDOM_MODEL, max_tokens=3, runs=runs).invoke(
        {"question": "How long does shipping to Canada take?"})
    assert runs == ["retrieve", "answer"]
