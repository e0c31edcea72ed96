"""A LangChain RAG chain on ragcache: ``retriever | RagPrompt | ChatRagCache | StrOutputParser``.

Runs offline on the packaged models (SmolLM2-135M-Instruct, all-MiniLM-L6-v2):

1. ask a question (everything computed; each document's KV is stored);
2. ask it again in other words (served by the semantic cache, no model call);
3. ask it with the retriever returning the documents in another order (the prompt
   bytes are the same, so the semantic partition and the KV caches still match);
4. ask a new question over the same documents (documents' KV reused, CacheBlend);
5. optionally (``--anthropic``), the same chain with ``ChatAnthropic`` pointed at
   ragcache's local Anthropic-compatible server: prompt-cache reads and writes.

    python examples/langchain_rag.py [--max-tokens 48] [--anthropic]
"""

from __future__ import annotations

import argparse
import os
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.globals import set_llm_cache  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.runnables import RunnableLambda, RunnablePassthrough  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402
from langchain_ragcache import (  # noqa: E402
    ChatRagCache,
    RagCacheCallbackHandler,
    RagCacheEmbeddings,
    RagCacheSemanticCache,
    RagPrompt,
)

SYSTEM = ("You are the support assistant of Northwind Bikes. Answer the customer's question in one or two "
          "sentences, using only the documents.")

DOCUMENTS = [
    Document(id="refunds", metadata={"source": "policies/refunds.md"}, page_content=(
        "Refunds: once a returned bike reaches our warehouse, we inspect it within two business days and issue "
        "the refund to the original payment method. Refunds take up to 14 days to appear on a card statement. "
        "Shipping costs are not refunded unless the bike arrived damaged.")),
    Document(id="returns", metadata={"source": "policies/returns.md"}, page_content=(
        "Returns: bikes can be returned within 30 days of delivery if they have been ridden less than 50 km. "
        "Start a return from the Orders page; we email a prepaid shipping label. Custom-built bikes cannot be "
        "returned.")),
    Document(id="warranty", metadata={"source": "policies/warranty.md"}, page_content=(
        "Warranty: every Northwind frame has a lifetime warranty for the original owner. Components such as "
        "brakes, gears and wheels are covered for two years. The warranty does not cover crash damage or normal "
        "wear of tyres, chains and brake pads.")),
    Document(id="shipping", metadata={"source": "policies/shipping.md"}, page_content=(
        "Shipping: orders ship from Portland within three business days. Delivery to the continental United "
        "States takes five to seven days; Canada takes seven to ten days. Bikes ship 90 percent assembled.")),
    Document(id="assembly", metadata={"source": "guides/assembly.md"}, page_content=(
        "Assembly: attach the front wheel, the handlebar and the pedals with the included 15 mm wrench and 4 mm "
        "hex key. Assembly takes about 30 minutes. Local bike shops can assemble it for a fee.")),
    Document(id="sizing", metadata={"source": "guides/sizing.md"}, page_content=(
        "Sizing: choose a frame size from your height. Riders from 160 to 170 cm fit a small frame, 170 to 180 "
        "cm a medium frame, and 180 to 190 cm a large frame.")),
]

QUESTION = "How long does a refund take?"
REWORDED = "How long do refunds take?"
NEW_QUESTION = "Are shipping costs refunded when I return a bike?"
RETURN_QUESTION = "How many days do I have to return a bike?"


def build_chain(llm: Any, retriever: Any, *, prompt: RagPrompt | None = None, reorder: bool = False):
    """``{"question", "context": retriever} | RagPrompt | llm | StrOutputParser``."""
    context = retriever | RunnableLambda(lambda docs: list(reversed(docs))) if reorder else retriever
    prompt = prompt or RagPrompt.for_model(llm, system=SYSTEM)
    return {"question": RunnablePassthrough(), "context": context} | prompt | llm | StrOutputParser()


def make_retriever(embeddings: RagCacheEmbeddings, k: int = 3):
    return InMemoryVectorStore.from_documents(DOCUMENTS, embedding=embeddings).as_retriever(search_kwargs={"k": k})


def run_local(max_tokens: int = 48, *, quiet: bool = False, model: str | None = None) -> list[dict[str, Any]]:
    """Steps 1-4 on the embedded model (or ``model``). Returns one record per answer (layer, times, tokens, answer)."""
    embeddings = RagCacheEmbeddings()
    # cache_truncated: the demo's short budgets cut answers; the budget is in the partition, so a cut
    # answer is only ever served at the same budget (leave it off in production). path=None: in memory, so
    # the walk-through starts empty on every run (the default persists answers under $RAGCACHE_HOME)
    set_llm_cache(RagCacheSemanticCache(path=None, embedder=embeddings, cache_truncated=True))
    retriever = make_retriever(embeddings)
    llm = ChatRagCache(max_tokens=max_tokens, **({"model": model} if model else {}))
    llm.get_engine()  # load the model before timing anything
    embeddings.embed_query("warm up")
    steps = [
        ("ask", QUESTION, False),
        ("ask again, reworded", REWORDED, False),
        ("ask, documents reordered", QUESTION, True),
        ("new question, same documents", NEW_QUESTION, False),
    ]
    handler = RagCacheCallbackHandler()
    rows = []
    for label, question, reorder in steps:
        answer = build_chain(llm, retriever, reorder=reorder).invoke(question, config={"callbacks": [handler]})
        rec = handler.last
        rows.append({"step": label, "question": question, "answer": answer.strip(), **rec.to_dict()})
    baseline = rows[0]["wall_s"]
    for r in rows:
        r["saved_s"] = baseline - r["wall_s"]
    if not quiet:
        print_rows(rows, title="LangChain chain on ChatRagCache (SmolLM2-135M-Instruct, CPU)")
    return rows


def run_anthropic(max_tokens: int = 32, *, quiet: bool = False, min_tokens: int = 128,
                  model: str | None = None) -> list[dict[str, Any]]:
    """Step 5: the same chain with ChatAnthropic against ragcache's local Anthropic-compatible server.

    The local server applies Anthropic's prompt-caching rules; ``min_tokens`` lowers the
    minimum cacheable prefix (1,024 tokens for Sonnet) so that this small document set
    is cacheable, on both the prompt side and the server side.
    """
    from langchain_anthropic import ChatAnthropic
    from langchain_ragcache.chat_models import shared_engine

    from ragcache.server.app import running_server

    embeddings = RagCacheEmbeddings()
    set_llm_cache(RagCacheSemanticCache(path=None, embedder=embeddings, cache_truncated=True))  # starts empty
    retriever = make_retriever(embeddings)
    engine = shared_engine(model) if model else shared_engine()
    embeddings.embed_query("warm up")
    handler = RagCacheCallbackHandler()
    rows = []
    with running_server(engine, min_tokens=min_tokens) as url:
        llm = ChatAnthropic(model="claude-sonnet-4-6", base_url=url, api_key="local", max_tokens=max_tokens,
                            temperature=0.0, max_retries=0)
        prompt = RagPrompt.for_model(llm, system=SYSTEM, min_tokens=min_tokens, token_counter=engine.count_tokens)
        for label, question in (("anthropic: ask", RETURN_QUESTION),
                                ("anthropic: other question, same documents", NEW_QUESTION),
                                ("anthropic: first question reworded", "How many days do I have to return my bike?")):
            answer = build_chain(llm, retriever, prompt=prompt).invoke(question, config={"callbacks": [handler]})
            rec = handler.last
            rows.append({"step": label, "question": question, "answer": answer.strip(), **rec.to_dict()})
    if not quiet:
        print_rows(rows, title="Same chain on ChatAnthropic -> ragcache's local Anthropic server")
    return rows


def print_rows(rows: list[dict[str, Any]], *, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("step", "layer", "wall s", "saved s", "TTFT s", "prompt tok", "cache read", "cache write",
                "recomputed", "answer"):
        table.add_column(col)

    def f(v: Any, fmt: str = "{:.2f}") -> str:
        return "-" if v is None else fmt.format(v)

    for r in rows:
        table.add_row(r["step"], r["layer"], f(r["wall_s"]), f(r.get("saved_s")), f(r["ttft_s"], "{:.3f}"),
                      f(r["input_tokens"], "{}"), f(r["cache_read"], "{}"), f(r["cache_creation"], "{}"),
                      f(r["tokens_recomputed"], "{}"), r["answer"][:80])
    Console(width=200).print(table)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--anthropic", action="store_true", help="also run the ChatAnthropic variant (local server)")
    args = ap.parse_args(argv)
    run_local(args.max_tokens)
    if args.anthropic:
        run_anthropic(args.max_tokens)


if __name__ == "__main__":
    main()
