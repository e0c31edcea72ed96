"""LlamaIndex RAG on ragcache: ``VectorStoreIndex`` over a folder + ``RagCacheQueryEngine``.

Runs offline on the packaged models (SmolLM2-135M-Instruct, all-MiniLM-L6-v2):

1. ask a question (everything computed; each document's KV is stored);
2. ask it again, then reworded (served by the semantic cache, no model call);
3. edit a document and refresh the index, ask again (the node's content hash changed,
   so the old answer is not served; the unchanged documents' KV is reused);
4. ask with another top-k: the retriever returns another set in another score order,
   the stable order lays them out canonically and the documents seen before come from
   the chunk KV cache;
5. optionally (``--anthropic``), the same engine with ``llama_index.llms.anthropic.Anthropic``
   pointed at ragcache's local Anthropic-compatible server (cache reads and writes).

    python examples/llamaindex_rag.py [--max-tokens 40] [--folder DIR] [--anthropic]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from llama_index.core import SimpleDirectoryReader, VectorStoreIndex
from llama_index.embeddings.ragcache import RagCacheEmbedding
from llama_index.llms.ragcache import RagCacheLLM
from llama_index.query_engine.ragcache import RagCacheQueryEngine

from ragcache.semantic import SemanticCache

SYSTEM = ("You are the support assistant of Northwind Bikes. Answer the customer's question in one or two "
          "sentences, using only the documents.")

DOCUMENTS = {
    "refunds.md": ("Refunds: once a returned bike reaches our warehouse, we inspect it within two business days and "
                   "issue the refund to the original payment method. Refunds take up to 14 days to appear on a card "
                   "statement. Shipping costs are not refunded unless the bike arrived damaged."),
    "returns.md": ("Returns: bikes can be returned within 30 days of delivery if they have been ridden less than 50 km. "
                   "Start a return from the Orders page; we email a prepaid shipping label. Custom-built bikes cannot "
                   "be returned."),
    "warranty.md": ("Warranty: every Northwind frame has a lifetime warranty for the original owner. Components such "
                    "as brakes, gears and wheels are covered for two years. The warranty does not cover crash damage."),
    "shipping.md": ("Shipping: orders ship from Portland within three business days. Delivery to the continental "
                    "United States takes five to seven days; Canada takes seven to ten days."),
    "sizing.md": ("Sizing: choose a frame size from your height. Riders from 160 to 170 cm fit a small frame, 170 to "
                  "180 cm a medium frame, and 180 to 190 cm a large frame."),
}
EDIT = ("returns.md", "within 30 days", "within 45 days")

QUESTION = "How many days do I have to return a bike?"
REWORDED = "Could you tell me how many days I have to return a bike?"


def write_documents(folder: str | Path) -> Path:
    """Write the sample documents into ``folder`` (created); returns its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in DOCUMENTS.items():
        (folder / name).write_text(text + "\n", encoding="utf-8")
    return folder


def load(folder: Path) -> list:
    return SimpleDirectoryReader(str(folder), filename_as_id=True).load_data()


def record(step: str, question: str, response: Any) -> dict[str, Any]:
    m = response.metadata
    return {"step": step, "question": question, "answer": str(response).strip(), "layer": m["layer"],
            "ttft_s": m["ttft_s"], "total_s": m["total_s"], "tokens_reused": m["tokens_reused"],
            "prompt_tokens": m["prompt_tokens"], "similarity": m["similarity"],
            "sources": [n.node.metadata.get("file_name", n.node.node_id) for n in response.source_nodes]}


def run_local(folder: str | Path | None = None, max_tokens: int = 40, *, quiet: bool = False) -> list[dict[str, Any]]:
    """Steps 1-4 on the embedded model. Returns one record per answer. ``folder``: where the documents are
    written (``None``: a temporary folder, deleted on return)."""
    if folder is None:
        with tempfile.TemporaryDirectory(prefix="ragcache-llamaindex-") as tmp:
            return run_local(tmp, max_tokens, quiet=quiet)
    folder = write_documents(folder)
    embed = RagCacheEmbedding()
    index = VectorStoreIndex.from_documents(load(folder), embed_model=embed)
    llm = RagCacheLLM(max_new_tokens=max_tokens)
    semantic = SemanticCache(embedder=embed.embedder)  # shares the loaded MiniLM with the index
    llm.complete("Hello.", max_tokens=1)  # warm up (first forward pass) before timing anything
    # cache_truncated: a short budget cuts answers; keep them (served only to this same budget)
    engine = RagCacheQueryEngine.from_index(index, similarity_top_k=2, llm=llm, semantic_cache=semantic,
                                            system_prompt=SYSTEM, cache_truncated=True)
    rows = [record("ask", QUESTION, engine.query(QUESTION)),
            record("ask again", QUESTION, engine.query(QUESTION)),
            record("ask reworded", REWORDED, engine.query(REWORDED))]
    name, old, new = EDIT
    path = folder / name
    path.write_text(path.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")
    index.refresh_ref_docs(load(folder))
    rows.append(record("after editing returns.md", QUESTION, engine.query(QUESTION)))
    wider = RagCacheQueryEngine.from_index(index, similarity_top_k=3, llm=llm, semantic_cache=semantic,
                                           system_prompt=SYSTEM, cache_truncated=True)
    rows.append(record("another top-k (3)", QUESTION, wider.query(QUESTION)))
    base = rows[0]["ttft_s"]
    for r in rows:
        r["ttft_saved_s"] = base - r["ttft_s"]
    if not quiet:
        print_rows(rows, title="RagCacheQueryEngine on RagCacheLLM (SmolLM2-135M-Instruct, CPU)")
    return rows


def run_anthropic(folder: str | Path | None = None, max_tokens: int = 16, *, min_tokens: int = 128,
                  quiet: bool = False) -> list[dict[str, Any]]:
    """Step 5: ``llama_index.llms.anthropic.Anthropic`` against ragcache's local Anthropic server.

    The server applies Anthropic's prompt-caching rules; ``min_tokens`` lowers the minimum
    cacheable prefix (2,048 tokens for Sonnet 4.6) so this small document set is cacheable,
    on both the placement side and the server side.
    """
    from llama_index.llms.anthropic import Anthropic

    from ragcache.engine.engine import LocalEngine
    from ragcache.server.app import running_server

    if folder is None:  # a temporary folder, deleted on return
        with tempfile.TemporaryDirectory(prefix="ragcache-llamaindex-") as tmp:
            return run_anthropic(tmp, max_tokens, min_tokens=min_tokens, quiet=quiet)
    folder = write_documents(folder)
    index = VectorStoreIndex.from_documents(load(folder), embed_model=RagCacheEmbedding())
    local = LocalEngine.from_pretrained()
    rows = []
    with running_server(local, min_tokens=min_tokens) as url:
        claude = Anthropic(model="claude-sonnet-4-6", base_url=url, api_key="local", max_tokens=max_tokens,
                           temperature=0.0, max_retries=0)
        engine = RagCacheQueryEngine.from_index(index, similarity_top_k=len(DOCUMENTS), llm=claude,
                                                semantic_cache=False, system_prompt=SYSTEM,
                                                anthropic_min_tokens=min_tokens, token_counter=local.count_tokens)
        for step, q in (("anthropic: ask", QUESTION), ("anthropic: other question", "How long does shipping take?")):
            r = engine.query(q)
            rows.append({**record(step, q, r), "cache_read": r.metadata["cache_read_tokens"],
                         "cache_write": r.metadata["cache_write_tokens"], "markers": r.metadata["cache_markers"]})
    if not quiet:
        print_rows(rows, title="RagCacheQueryEngine on Anthropic -> ragcache's local Anthropic server")
    return rows


def print_rows(rows: list[dict[str, Any]], *, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("step", "layer", "TTFT s", "TTFT saved s", "reused tok", "prompt tok", "similarity", "answer"):
        table.add_column(col)

    def f(v: Any, fmt: str = "{:.2f}") -> str:
        return "-" if v is None else fmt.format(v)

    for r in rows:
        table.add_row(r["step"], r["layer"], f(r["ttft_s"], "{:.3f}"), f(r.get("ttft_saved_s"), "{:.3f}"),
                      f(r["tokens_reused"], "{}"), f(r["prompt_tokens"], "{}"), f(r["similarity"], "{:.3f}"),
                      r["answer"][:70])
    Console(width=200).print(table)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=40)
    ap.add_argument("--folder", default=None, help="where to write the sample documents (default: a temp dir)")
    ap.add_argument("--anthropic", action="store_true", help="also run the Anthropic variant (local server)")
    args = ap.parse_args(argv)
    run_local(args.folder, args.max_tokens)
    if args.anthropic:
        run_anthropic(args.folder, min(args.max_tokens, 16))


if __name__ == "__main__":
    main()
