"""Two graphs never share node-cache entries (issue 24, kind 7): class-based nodes, which LangGraph
keys as ``"__dynamic__"`` plus the node name, in one process and across two processes."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from typing import TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import CachePolicy
from langchain_ragcache.graph_cache import RagCacheGraphCache, graph_namespace


class State(TypedDict, total=False):
    question: str
    answer: str


class Answerer:
    """A class-based node (LangGraph's identifier for it is ``"__dynamic__"``)."""

    def __init__(self, style: str, runs: list[str]) -> None:
        self.style, self.runs = style, runs

    def __call__(self, state: State) -> State:
        self.runs.append(self.style)
        return {"answer": f"{self.style}: {state['question']}"}


class Shouter:
    def __init__(self, runs: list[str]) -> None:
        self.runs = runs

    def __call__(self, state: State) -> State:
        self.runs.append("shout")
        return {"answer": state["question"].upper()}


def _build(node) -> StateGraph:
    b = StateGraph(State)
    b.add_node("answer", node, cache_policy=CachePolicy(ttl=600))
    b.add_edge(START, "answer")
    b.add_edge("answer", END)
    return b


@pytest.mark.parametrize("pair", ["two styles", "two classes", "lambda vs class"])
def test_two_graphs_in_one_process_never_share_entries(tmp_path, pair) -> None:
    runs: list[str] = []
    a_node, b_node = {"two styles": (Answerer("polite", runs), Answerer("terse", runs)),
                      "two classes": (Answerer("polite", runs), Shouter(runs)),
                      "lambda vs class": (lambda s: {"answer": "lambda"}, Answerer("terse", runs))}[pair]
    ga, gb = _build(a_node), _build(b_node)
    assert graph_namespace(ga) != graph_namespace(gb)
    graph_a = ga.compile(cache=RagCacheGraphCache.for_graph(ga, tmp_path / "g"))
    graph_b = gb.compile(cache=RagCacheGraphCache.for_graph(gb, tmp_path / "g"))
    a1 = graph_a.invoke({"question": "refunds?"})
    b1 = graph_b.invoke({"question": "refunds?"})
    assert b1 != a1  # graph B computed its own answer
    assert graph_a.invoke({"question": "refunds?"}) == a1 and graph_b.invoke({"question": "refunds?"}) == b1
    assert len(runs) == (1 if pair == "lambda vs class" else 2)  # the repeats were served from the cache


def test_same_graph_definition_shares_entries_and_user_namespace_separates(tmp_path) -> None:
    runs: list[str] = []
    g1, g2 = _build(Answerer("polite", runs)), _build(Answerer("polite", runs))
    assert graph_namespace(g1) == graph_namespace(g2) == graph_namespace(g1.compile())
    # (the namespace covers the node's state, here the shared ``runs`` list too: build the caches first)
    caches = [RagCacheGraphCache.for_graph(g1, tmp_path / "g"), RagCacheGraphCache.for_graph(g2, tmp_path / "g"),
              RagCacheGraphCache.for_graph(g2, tmp_path / "g", namespace="tenant-b"),
              RagCacheGraphCache(tmp_path / "g", namespace="v2")]
    g1.compile(cache=caches[0]).invoke({"question": "q"})
    g2.compile(cache=caches[1]).invoke({"question": "q"})
    assert runs == ["polite"]  # the same graph: one computation
    g2.compile(cache=caches[2]).invoke({"question": "q"})
    g2.compile(cache=caches[3]).invoke({"question": "q"})
    assert runs == ["polite"] * 3  # a user namespace is a cache of its own


def test_without_a_namespace_dynamic_nodes_are_not_cached(tmp_path, caplog) -> None:
    runs: list[str] = []
    ga, gb = _build(Answerer("polite", runs)), _build(Answerer("terse", runs))
    with caplog.at_level(logging.WARNING, "langchain_ragcache.graph_cache"):
        a = ga.compile(cache=RagCacheGraphCache(tmp_path / "g")).invoke({"question": "q"})
        b = gb.compile(cache=RagCacheGraphCache(tmp_path / "g")).invoke({"question": "q"})
    assert a["answer"] == "polite: q" and b["answer"] == "terse: q"
    assert any("for_graph" in r.getMessage() for r in caplog.records)


def test_clear_drops_only_this_caches_namespace(tmp_path) -> None:
    k = (("__pregel_ns_writes", "mod.fn", "answer"), "key")
    one, two = RagCacheGraphCache(tmp_path / "g", namespace="one"), RagCacheGraphCache(tmp_path / "g", namespace="on")
    one.set({k: ("1", None)})
    two.set({k: ("2", None)})
    assert one.get([k]) == {k: "1"} and two.get([k]) == {k: "2"}
    one.clear()
    assert one.get([k]) == {} and two.get([k]) == {k: "2"}


SCRIPT = textwrap.dedent("""
    import json, sys
    from typing import TypedDict
    from langgraph.graph import StateGraph, START, END
    from langgraph.types import CachePolicy
    from langchain_ragcache.graph_cache import RagCacheGraphCache

    store, style, log = sys.argv[1], sys.argv[2], sys.argv[3]

    class State(TypedDict, total=False):
        question: str
        answer: str

    class Answerer:
        def __init__(self, style):
            self.style = style
        def __call__(self, state):
            with open(log, "a") as f:
                f.write(self.style + "\\n")
            return {"answer": self.style + ": " + state["question"]}

    b = StateGraph(State)
    b.add_node("answer", Answerer(style), cache_policy=CachePolicy(ttl=600))
    b.add_edge(START, "answer"); b.add_edge("answer", END)
    print(json.dumps(b.compile(cache=RagCacheGraphCache.for_graph(b, store)).invoke({"question": "refunds?"})))
""")


def test_two_graphs_across_two_processes(tmp_path) -> None:
    script, store, log = tmp_path / "g.py", tmp_path / "store", tmp_path / "runs.log"
    script.write_text(SCRIPT)

    def run(style: str) -> dict:
        out = subprocess.run([sys.executable, str(script), str(store), style, str(log)], capture_output=True,
                             text=True, timeout=120, env=dict(os.environ))
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert run("polite")["answer"] == "polite: refunds?"
    assert run("terse")["answer"] == "terse: refunds?"  # graph B, another process: not A's entry
    assert run("polite")["answer"] == "polite: refunds?"  # graph A again: its own entry, served
    assert log.read_text().splitlines() == ["polite", "terse"]
