"""LangChain's ``ChatOpenAI`` against ``ragcache serve``: the local OpenAI-compatible endpoint,
answered by the local engine with its real prefix and chunk KV caches.

Runs offline and in-process (the server listens on a free loopback port, ``running_server``);
against a running ``ragcache serve`` the same ChatOpenAI lines work with
``base_url="http://127.0.0.1:8788/v1"``:

1. a question over four documents (everything computed; each document's KV is stored);
2. another question over the same documents (the system turn and the documents come from the
   exact prefix cache: ``cache_read`` is most of the prompt);
3. a question with the retriever returning the documents in another order (the prefix ends at
   the first document; the documents are chunk-cache hits, reused only when the engine blends: with a
   calibration record for the model or ``RAGCACHE_RECOMPUTE_RATIO``, labelled approximate; at the
   defaults prefill stays exact);
4. the same, streamed (``stream_usage=True``: the usage arrives in the last chunk).

    python examples/openai_serve.py [--max-tokens 48] [--tiny]

``--tiny`` uses a tiny random model (seconds; answers are noise) instead of the packaged
SmolLM2-135M-Instruct.
"""

from __future__ import annotations

import argparse
import functools
import operator
import os
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from langchain_core.messages import HumanMessage, SystemMessage  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

from ragcache import ChunkCache, LocalEngine  # noqa: E402
from ragcache.server.app import running_server  # noqa: E402
from ragcache.server.openai import default_model_id  # noqa: E402

SYSTEM = ("You are the support assistant of Northwind Bikes. Answer the customer's question in one or two "
          "sentences, using only the documents.")

DOCUMENTS = [
    ("Refunds: once a returned bike reaches our warehouse, we inspect it within two business days and issue the "
    "refund to the original payment method. Refunds take up to 14 days to appear on a card statement."),
    ("Returns: bikes can be returned within 30 days of delivery if they have been ridden less than 50 km. Start a "
    "return from the Orders page; we email a prepaid shipping label."),
    ("Warranty: every Northwind frame has a lifetime warranty for the original owner. Components such as brakes, "
    "gears and wheels are covered for two years."),
    ("Shipping: orders ship from Portland within three business days. Delivery to the continental United States "
    "takes five to seven days; bikes ship 90 percent assembled."),
]


def messages(question: str, documents: list[str]) -> list[Any]:
    """System turn, then one user turn: each document its own text part, the question last (how
    the endpoint tells documents, cached per document, from the question)."""
    parts = [{"type": "text", "text": d} for d in documents] + [{"type": "text", "text": question}]
    return [SystemMessage(SYSTEM), HumanMessage(content=parts)]


def build_engine(tiny: bool) -> LocalEngine:
    if tiny:
        import torch

        from ragcache import MemoryChunkStore
        from ragcache.testing import tiny_llama

        return LocalEngine(tiny_llama(seed=0), chunk_cache=ChunkCache(MemoryChunkStore(), dtype=torch.float32),
                           min_reuse_tokens=0, calibration=False)
    return LocalEngine.from_pretrained(chunk_cache=ChunkCache())


def row(step: str, msg: Any) -> dict[str, Any]:
    usage = msg.usage_metadata or {}
    prompt = usage.get("input_tokens", 0)
    read = usage.get("input_token_details", {}).get("cache_read", 0)
    headers = msg.response_metadata.get("headers") or {}
    return {"step": step, "answer": msg.content, "prompt_tokens": prompt, "cache_read": read,
            "read_share": read / prompt if prompt else 0.0, "layer": headers.get("x-ragcache-layer", "")}


def run(*, max_tokens: int = 48, tiny: bool = False, quiet: bool = False) -> list[dict[str, Any]]:
    """Run the four steps; returns one row per step (answer, prompt tokens, cache_read, layer)."""
    torch_threads = os.environ.get("OMP_NUM_THREADS")
    if torch_threads:
        import torch

        torch.set_num_threads(int(torch_threads))
    engine = build_engine(tiny)
    rows = []
    with running_server(engine) as url:
        model = default_model_id(engine)  # the id the engine is served under (GET /v1/models lists it)
        llm = ChatOpenAI(base_url=f"{url}/v1", api_key="local", model=model, max_tokens=max_tokens, temperature=0,
                         stream_usage=True, include_response_headers=True)
        rows.append(row("1 first question", llm.invoke(messages("How long do refunds take?", DOCUMENTS))))
        rows.append(row("2 same documents", llm.invoke(messages("Can I return a bike I rode?", DOCUMENTS))))
        reordered = DOCUMENTS[::-1]
        rows.append(row("3 documents reordered", llm.invoke(messages("How long do refunds take?", reordered))))
        streamed = functools.reduce(operator.add, llm.stream(messages("What does the warranty cover?", reordered)))
        rows.append(row("4 streamed", streamed))
    if not quiet:
        for r in rows:
            print(f"{r['step']:<22} prompt {r['prompt_tokens']:>4} tokens, cache read {r['cache_read']:>4} "
                  f"({r['read_share']:.0%}) {r['layer'] or '(streamed)':<13} {r['answer']!r}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--tiny", action="store_true", help="a tiny random model instead of SmolLM2-135M-Instruct")
    args = ap.parse_args()
    run(max_tokens=args.max_tokens, tiny=args.tiny)


if __name__ == "__main__":
    main()
