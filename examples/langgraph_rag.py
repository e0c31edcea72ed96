"""A LangGraph RAG graph whose retrieval and answer nodes are cached in ragcache's SQLite node cache.

``retrieve`` (keyword search over a few policy documents) and ``answer`` (``RagPrompt |
ChatRagCache``) are added with a ``CachePolicy``; the graph is compiled with
``RagCacheGraphCache(path)``, so a second run, in this process or another one opening the same
directory, returns the stored node outputs without running the nodes until their TTL passes.

    python examples/langgraph_rag.py [--store /tmp/ragcache-graph] [--model ragcache/tiny-random-llama]
"""

from __future__ import annotations

import argparse
import os
from typing import Any, TypedDict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from langchain_core.documents import Document  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import CachePolicy  # noqa: E402

from langchain_ragcache import ChatRagCache, RagPrompt  # noqa: E402
from langchain_ragcache.graph_cache import RagCacheGraphCache  # noqa: E402

DOCUMENTS = [
    Document(id="refunds", page_content="Refunds take up to 14 days to appear on a card statement."),
    Document(id="returns", page_content="Bikes can be returned within 30 days of delivery."),
    Document(id="shipping", page_content="Delivery to Canada takes seven to ten days."),
]


class State(TypedDict, total=False):
    question: str
    documents: list[dict]
    answer: str


def build_graph(store: str, *, model: str | None = None, max_tokens: int = 24, ttl_s: int = 600,
                runs: list[str] | None = None) -> Any:
    """The compiled graph; ``runs`` (if given) records each node execution."""
    llm = ChatRagCache(max_tokens=max_tokens, **({"model": model} if model else {}))
    chain = RagPrompt(system="Answer from the documents in one sentence.") | llm

    def retrieve(state: State) -> State:
        if runs is not None:
            runs.append("retrieve")
        words = set(state["question"].lower().strip("?").split())
        ranked = sorted(DOCUMENTS, key=lambda d: -len(words & set(d.page_content.lower().split())))[:2]
        return {"documents": [{"id": d.id, "text": d.page_content} for d in ranked]}

    def answer(state: State) -> State:
        if runs is not None:
            runs.append("answer")
        msg = chain.invoke({"question": state["question"], "context": state["documents"]})
        return {"answer": msg.text}

    builder = StateGraph(State)
    builder.add_node("retrieve", retrieve, cache_policy=CachePolicy(ttl=ttl_s))
    builder.add_node("answer", answer, cache_policy=CachePolicy(ttl=ttl_s))
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "answer")
    builder.add_edge("answer", END)
    return builder.compile(cache=RagCacheGraphCache.for_graph(builder, store))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="/tmp/ragcache-graph")
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    runs: list[str] = []
    graph = build_graph(args.store, model=args.model, runs=runs)
    for q in ("How long do refunds take?", "How long do refunds take?"):
        before = len(runs)
        out = graph.invoke({"question": q})
        print(f"{q!r}: nodes run {runs[before:] or 'none (cached)'} -> {out['answer']!r}")


if __name__ == "__main__":
    main()
