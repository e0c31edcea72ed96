"""``ragcache demo`` and ``ragcache ask``: RAG over real documents with every cache layer on.

The demo corpus is the Python standard library's own documentation (docstrings of a
curated module list), chunked and indexed in FAISS under ``$RAGCACHE_HOME/index/``.
A scripted session asks questions that exercise each layer: a cold question, a
paraphrased repeat (semantic cache), a negated variant (must not be served from the
semantic cache; its documents come back in another mix, served from the chunk cache),
a follow-up, and an exact repeat.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from ragcache.app.corpus import Chunk, folder_chunks, stdlib_chunks, stdlib_corpus_id
from ragcache.models import load_embedder, ragcache_home
from ragcache.pipeline import Answer, LocalBackend, RagCache
from ragcache.app.retrieval import Retriever

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Turn:
    question: str
    note: str
    follow_up_of: int | None = None  # index of the turn this one follows up


DEMO_SESSION: tuple[Turn, ...] = (
    Turn("How do I read a CSV file with a header row?", "cold: system text written to the prefix cache"),
    Turn("How do I parse a date string into a datetime object?", "new question: system text from the prefix cache"),
    Turn("What's the best way to read a CSV file that has a header row?", "paraphrase of #1: semantic cache"),
    Turn("How do I read a CSV file without a header row?", "negated variant of #1: must not be served by the semantic cache"),
    Turn("How do I sort a list of dictionaries by a key?", "new question"),
    Turn("And how do I sort it in descending order instead?", "follow-up of #5 (chat history)", follow_up_of=4),
    Turn("How do I parse a date string into a datetime object?", "exact repeat of #2: semantic cache"),
    Turn("What does the csv.DictReader class do?", "new question, overlapping CSV documents: chunk cache"),
)


DEMO_SYSTEM = """You are the documentation assistant for the Python standard library.
Rules for every answer:
1. Answer only from the documents given with the question; they are excerpts of the standard library's
   own docstrings. If they do not contain the answer, say that the documents do not cover it.
2. Name the module, class or function you rely on, with its full dotted name (for example csv.DictReader).
3. Prefer the simplest standard-library approach; do not suggest third-party packages.
4. Keep answers short: two to four sentences, then at most one short code example.
5. When a function has an important keyword argument for the task, name it and say what it does.
6. Do not invent parameters, defaults or return values that the documents do not state.
7. If the question is a follow-up, use the earlier turns of the conversation to resolve what "it" means.
8. Write plain text; use backticks only around code."""


def build_engine(model: str | None, *, chunk_cache: bool = True, recompute_ratio: float | None = None) -> Any:
    from ragcache.engine.engine import LocalEngine

    cc = None
    if chunk_cache:
        from ragcache.engine.chunk_cache import ChunkCache

        cc = ChunkCache()
    return LocalEngine.from_pretrained(model, chunk_cache=cc, recompute_ratio=recompute_ratio)


def build_retriever(chunks: Sequence[Chunk], embedder: Any, corpus_id: str) -> Retriever:
    return Retriever(chunks, embedder, index_dir=ragcache_home() / "index" / corpus_id)


@contextlib.contextmanager
def _backend(kind: str, engine: Any) -> Iterator[Any]:
    if kind == "local":
        yield LocalBackend(engine)
        return
    if kind != "anthropic-local":
        raise ValueError(f"unknown backend {kind!r}: use 'local' or 'anthropic-local'")
    try:
        import anthropic

        from ragcache.anthropic.backend import AnthropicBackend
        from ragcache.server.anthropic import running_server
    except ImportError as e:
        raise ImportError(f"the anthropic backend needs the extra: pip install 'ragcache[anthropic]' ({e})") from None
    with running_server(engine) as base_url:
        client = anthropic.Anthropic(base_url=base_url, api_key="local-test-key")
        yield AnthropicBackend(client, model="claude-sonnet-4-6", token_counter=engine.count_tokens)


def _short(text: str, n: int = 90) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[: n - 1] + "…"


def _row(i: int, a: Answer, note: str, backend: str) -> list[str]:
    if a.layer == "semantic":
        tokens = f"sim {a.similarity:.3f}"
    elif backend == "local":
        s = a.stats
        n_docs = s.get("docs_hit", 0) + s.get("docs_missed", 0)
        docs = f", docs {s.get('docs_hit', 0)}/{n_docs}" if n_docs else ""
        if s.get("approximate"):
            docs += f", approximate r={s.get('recompute_ratio')}"
        tokens = f"{a.tokens_reused}/{a.prompt_tokens}{docs}"
    else:
        s = a.stats
        tokens = f"w {s.get('cache_creation_input_tokens', 0)} r {s.get('cache_read_input_tokens', 0)} ${s.get('cost_usd', 0):.4f}"
    return [str(i), _short(a.question, 48), _short(a.text), a.layer, tokens, f"{a.ttft_s:.2f}s", note]


def run_session(rag: RagCache, retriever: Retriever, turns: Sequence[Turn], *, top_k: int, console: Console,
                backend: str = "local") -> list[Answer]:
    """Ask each turn (retrieve top-k, lay out, answer) and print one table row per turn."""
    table = Table(title="ragcache demo session", show_lines=True)
    for col in ("#", "question", "answer", "served by", "reused/prompt tokens" if backend == "local" else "cache write/read, cost", "TTFT", "what it shows"):
        table.add_column(col, overflow="fold")
    answers: list[Answer] = []
    docs_of: list[list[dict]] = []
    for i, turn in enumerate(turns, 1):
        history: list[dict] = []
        if turn.follow_up_of is not None:
            prev = answers[turn.follow_up_of]
            history = [{"role": "user", "content": prev.question}, {"role": "assistant", "content": prev.text}]
            docs = docs_of[turn.follow_up_of]
        else:
            docs = [{"id": r.chunk.id, "text": r.chunk.text} for r in retriever.search(turn.question, k=top_k)]
        docs_of.append(docs)
        with console.status(f"[{i}/{len(turns)}] {turn.question}"):
            a = rag.answer(turn.question, docs, history=history)
        answers.append(a)
        row = _row(i, a, turn.note, backend)
        table.add_row(*row)
        console.print(f"[{i}/{len(turns)}] served by [bold]{row[3]}[/bold] ({row[4]}), TTFT {row[5]}: {_short(a.text, 70)}")
    console.print(table)
    return answers


def summarize(answers: Sequence[Answer], console: Console, rag: RagCache) -> dict:
    """Print and return hit rates, prefill tokens saved and the time saved (estimated from this run)."""
    n = len(answers)
    sem = sum(a.layer == "semantic" for a in answers)
    model = [a for a in answers if a.layer != "semantic"]
    computed = sum(a.tokens_computed for a in model)
    reused = sum(a.tokens_reused for a in model)
    prompt = sum(a.prompt_tokens for a in model)
    prefix_hits = sum(a.stats.get("prefix_tokens_reused", 0) > 0 for a in model)
    docs_hit = sum(a.stats.get("docs_hit", 0) for a in model)
    docs_all = docs_hit + sum(a.stats.get("docs_missed", 0) for a in model)
    prefill_s = sum(a.stats.get("prefill_s", 0.0) for a in model)
    rate = computed / prefill_s if prefill_s > 0 else 0.0  # measured prefill throughput, tokens/s
    saved_prefill_s = reused / rate if rate > 0 else 0.0
    avg_model_total = sum(a.total_s for a in model) / len(model) if model else 0.0
    saved_semantic_s = sum(max(avg_model_total - a.total_s, 0.0) for a in answers if a.layer == "semantic")
    out = {
        "questions": n, "semantic_hits": sem, "semantic_hit_rate": sem / n if n else 0.0,
        "model_calls": len(model), "prefix_hits": prefix_hits,
        "prefix_hit_rate": prefix_hits / len(model) if model else 0.0,
        "chunk_docs_hit": docs_hit, "chunk_docs_total": docs_all,
        "chunk_hit_rate": docs_hit / docs_all if docs_all else 0.0,
        "prompt_tokens": prompt, "prefill_tokens_reused": reused, "prefill_tokens_computed": computed,
        "measured_prefill_tokens_per_s": rate, "prefill_time_saved_s": saved_prefill_s,
        "semantic_time_saved_s": saved_semantic_s,
    }
    t = Table(title="summary")
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_row("semantic cache hits", f"{sem}/{n} ({out['semantic_hit_rate']:.0%})")
    t.add_row("prefix cache hits (model calls)", f"{prefix_hits}/{len(model)} ({out['prefix_hit_rate']:.0%})")
    if docs_all:
        t.add_row("chunk cache documents hit", f"{docs_hit}/{docs_all} ({out['chunk_hit_rate']:.0%})")
    t.add_row("prefill tokens reused / in prompts", f"{reused}/{prompt} ({reused / prompt if prompt else 0:.0%})")
    t.add_row("measured prefill rate", f"{rate:.0f} tokens/s")
    t.add_row("prefill time saved (reused tokens / measured rate)", f"{saved_prefill_s:.1f} s")
    t.add_row("time saved by semantic hits (vs mean model call)", f"{saved_semantic_s:.1f} s")
    console.print(t)
    return out


def _make_rag(backend: Any, embedder_name: str | None, max_new_tokens: int,
              semantic_path: Any = None) -> RagCache:
    from ragcache.semantic import SemanticCache

    semantic = SemanticCache(semantic_path, embedder=load_embedder(embedder_name))
    return RagCache(backend, semantic=semantic, system=DEMO_SYSTEM, max_new_tokens=max_new_tokens)


def demo(*, model: str | None = None, embedder: str | None = None, backend: str = "local", top_k: int = 4,
         max_new_tokens: int = 64, chunk_cache: bool = True, recompute_ratio: float | None = None,
         console: Console | None = None) -> dict:
    """The scripted session over the standard library's documentation. Returns the summary dict."""
    console = console or Console()
    t0 = time.perf_counter()
    console.rule("ragcache demo: RAG over the Python standard library's documentation")
    if backend not in ("local", "anthropic-local"):
        raise ValueError(f"unknown backend {backend!r}: use 'local' or 'anthropic-local'")
    emb = load_embedder(embedder)
    with console.status("loading the model (first run converts the packaged GGUF once, ~40 s)"):
        engine = build_engine(model, chunk_cache=chunk_cache and backend == "local", recompute_ratio=recompute_ratio)
    chunks = stdlib_chunks()
    retriever = build_retriever(chunks, emb, f"{stdlib_corpus_id()}-{emb.fingerprint[:8]}")
    console.print(f"model {engine.fingerprint} | embedder {emb.name} | {len(chunks)} chunks "
                  f"({'index loaded from disk' if retriever.loaded_from_disk else 'index built and saved'}) | "
                  f"backend {backend} | top-k {top_k}")
    with _backend(backend, engine) as be:
        rag = _make_rag(be, embedder, max_new_tokens)
        answers = run_session(rag, retriever, DEMO_SESSION, top_k=top_k, console=console, backend=backend)
        summary = summarize(answers, console, rag)
    summary["wall_s"] = time.perf_counter() - t0
    console.print(f"demo finished in {summary['wall_s']:.0f} s")
    return summary


def ask(question: str, docs: str, *, model: str | None = None, embedder: str | None = None, top_k: int = 4,
        max_new_tokens: int = 128, console: Console | None = None) -> Answer:
    """Answer one question over a folder of .txt/.md files.

    Raises:
        ValueError: empty question, unreadable or empty ``docs`` folder.
    """
    console = console or Console()
    if not question or not question.strip():
        raise ValueError("question is empty: ask something, e.g. ragcache ask --docs notes/ \"How do I ...?\"")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    chunks = folder_chunks(docs)
    emb = load_embedder(embedder)
    from ragcache.hashing import hash_value

    corpus_id = "docs-" + hash_value([c.content_hash for c in chunks])[:16]
    retriever = build_retriever(chunks, emb, f"{corpus_id}-{emb.fingerprint[:8]}")
    engine = build_engine(model)
    # answers persist under $RAGCACHE_HOME/answers: asking again (in other words) is served without the model
    rag = _make_rag(LocalBackend(engine), embedder, max_new_tokens, ragcache_home() / "answers")
    hits = retriever.search(question, k=top_k)
    try:
        a = rag.answer(question, [{"id": r.chunk.id, "text": r.chunk.text} for r in hits])
    finally:
        rag.semantic.close()
    console.print(a.text)
    console.print(f"[dim]sources: {', '.join(f'{r.chunk.id} ({r.score:.2f})' for r in hits)} | served by {a.layer} | "
                  f"TTFT {a.ttft_s:.2f} s | tokens reused {a.tokens_reused}/{a.prompt_tokens}[/dim]")
    return a
