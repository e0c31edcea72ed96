"""``ragcache demo`` and ``ragcache ask``: RAG over real documents with every cache layer on.

The demo corpus is the Python standard library's own documentation (docstrings of a
curated module list), chunked and indexed in FAISS under ``$RAGCACHE_HOME/index/``.
A scripted session asks questions that exercise each layer: a cold question, a
paraphrased repeat (semantic cache), a negated variant (must not be served from the
semantic cache; its documents come back in another mix, served from the chunk cache),
a follow-up, and an exact repeat.

When blending is on (a calibration record licenses a setting, or ``RAGCACHE_RECOMPUTE_RATIO``), every
document found in the chunk cache is reused: the demo's engine blends whenever a document hits
(``min_reuse_tokens=0`` unless ``RAGCACHE_MIN_REUSE_TOKENS`` says otherwise). The engine's default
cost rule blends only when the predicted saving reaches 0.1 s at the *measured* prefill rate, so on a
fast machine a request with a few hundred reusable tokens was prefilled exactly: documents found,
none reused, for a reason the demo's table could not show.

Chunk KV admission (:mod:`ragcache.engine.chunk.admission`): at the defaults a document's chunk KV is
computed at its second miss, in the background. The demo is a session made to be run again, and its
engine is idle once the last answer is shown, so it ends by draining the chunk queue with the documents
seen once too (:meth:`LocalEngine.drain_chunk_queue(first_sightings=True)
<ragcache.engine.engine.LocalEngine.drain_chunk_queue>`): CPU no request waits for, and the second run
finds every document of the session in the chunk cache and reuses each one. A server gets the same
only for documents asked twice; it never pays for a document seen once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ragcache.app.corpus import Chunk, stdlib_chunks, stdlib_corpus_id
from ragcache.app.output import clean, say
from ragcache.app.retrieval import Retriever, prune_indexes
from ragcache.app.runtime import (
    PROVIDERS,
    answer_cache,
    build_engine,
    bulk_embedder,
    provider_backend,
    query_embedder,
)
from ragcache.config import Config
from ragcache.engine.backend import LocalBackend
from ragcache.pipeline import Answer, RagCache

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
    Turn("What does the csv.DictReader class do?", "new question, overlapping CSV documents: chunk cache hits"),
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


DEMO_DRAIN_S = 600.0
"""Seconds the demo waits at most, at its end, for the chunk KV of the session's documents."""


def build_retriever(chunks: Sequence[Chunk], cfg: Config, embedder: Any, corpus_id: str) -> Retriever:
    """The demo corpus's index under ``cfg.index_dir`` (older versions of it are pruned)."""
    d = cfg.index_dir / corpus_id
    r = Retriever(chunks, embedder, index_dir=d, source="stdlib", bulk_embedder=bulk_embedder(cfg))
    prune_indexes(cfg.index_dir, d)
    return r


DEMO_BACKENDS = ("local", "anthropic-local", *PROVIDERS)
"""What ``ragcache demo --backend`` takes: the local engine, the anthropic SDK against ragcache's own server on
it, or a provider's API (:func:`ragcache.app.runtime.provider_backend`, as ``ragcache ask --backend``)."""


def _check_backend(kind: str) -> None:
    if kind not in DEMO_BACKENDS:
        raise ValueError(f"--backend must be one of {', '.join(DEMO_BACKENDS)}, got {kind!r}")


@contextlib.contextmanager
def _backend(kind: str, engine: Any, provider: Any = None) -> Iterator[Any]:
    """The session's backend: ``provider`` when given (a provider's API, no engine), else the ``engine``
    directly (``local``) or through ragcache's Anthropic-compatible server and the anthropic SDK."""
    if provider is not None:
        yield provider
        return
    if kind == "local":
        yield LocalBackend(engine)
        return
    _check_backend(kind)
    try:
        import anthropic

        from ragcache.providers.anthropic.backend import AnthropicBackend
        from ragcache.server.app import running_server
    except ImportError as e:
        raise ImportError(f"the anthropic backend needs the extra: pip install 'ragcache[anthropic]' ({e})") from None
    with running_server(engine) as base_url:
        client = anthropic.Anthropic(base_url=base_url, api_key="local-test-key")
        yield AnthropicBackend(client, model="claude-sonnet-4-6", token_counter=engine.count_tokens)


def _short(text: str, n: int = 90) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[: n - 1] + "…"


def _row(i: int, a: Answer, note: str, backend: str) -> list[str]:
    """Cells of one table row (plain strings: the caller wraps them in Text, never markup)."""
    if a.layer == "semantic":
        tokens = f"sim {a.similarity:.3f}"
    elif backend == "local":
        d = a.details
        hit, total = d.get("docs_hit", 0), d.get("docs_hit", 0) + d.get("docs_missed", 0)
        if a.approximate:  # chunk KV reused at reordered positions: say so, with the setting
            r = f" r={a.recompute_ratio:.2f}" if a.recompute_ratio is not None else ""
            setting = f" {a.blend_setting}" if a.blend_setting else r
            docs = f", docs {hit}/{total} reused (blended{setting}, approximate)"
        elif hit:  # found in the chunk cache but prefilled exactly (no licensed blend): not reuse
            docs = f", docs {hit}/{total} cached, prefilled exactly"
        else:
            docs = ""
        tokens = f"{a.tokens_reused}/{a.prompt_tokens}{docs}"
    else:
        u = a.usage
        tokens = f"w {u.cache_write} r {u.cache_read} ${u.cost_usd or 0:.4f}"
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
        with console.status(Text(f"[{i}/{len(turns)}] {turn.question}")):
            a = rag.answer(turn.question, docs, history=history)
        answers.append(a)
        row = _row(i, a, turn.note, backend)
        table.add_row(*[Text(clean(c)) for c in row])
        say(console, f"[{i}/{len(turns)}] served by ", (row[3], "bold"), f" ({row[4]}), TTFT {row[5]}: {_short(a.text, 70)}")
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
    prefix_hits = sum(a.usage.prefix_reused > 0 for a in model)
    docs_hit = sum(a.details.get("docs_hit", 0) for a in model)
    docs_reused = sum(a.details.get("docs_hit", 0) for a in model if a.usage.chunk_reused > 0)
    docs_all = docs_hit + sum(a.details.get("docs_missed", 0) for a in model)
    prefill_s = sum(a.details.get("prefill_s", 0.0) for a in model)
    rate = computed / prefill_s if prefill_s > 0 else 0.0  # measured prefill throughput, tokens/s
    saved_prefill_s = reused / rate if rate > 0 else 0.0
    avg_model_total = sum(a.total_s for a in model) / len(model) if model else 0.0
    saved_semantic_s = sum(max(avg_model_total - a.total_s, 0.0) for a in answers if a.layer == "semantic")
    out = {
        "questions": n, "semantic_hits": sem, "semantic_hit_rate": sem / n if n else 0.0,
        "model_calls": len(model), "prefix_hits": prefix_hits,
        "prefix_hit_rate": prefix_hits / len(model) if model else 0.0,
        "chunk_docs_hit": docs_hit, "chunk_docs_reused": docs_reused, "chunk_docs_total": docs_all,
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
        t.add_row("chunk cache documents reused (blended)", f"{docs_reused}/{docs_hit}")
    t.add_row("prefill tokens reused / in prompts", f"{reused}/{prompt} ({reused / prompt if prompt else 0:.0%})")
    t.add_row("measured prefill rate", f"{rate:.0f} tokens/s")
    t.add_row("prefill time saved (reused tokens / measured rate)", f"{saved_prefill_s:.1f} s")
    t.add_row("time saved by semantic hits (vs mean model call)", f"{saved_semantic_s:.1f} s")
    console.print(t)
    return out


GUIDE = "docs/guides/local-engine.md"
"""Where the demo sends a newcomer to read about chunk reuse (the local-engine guide)."""


def _reuse_mode(engine: Any) -> str:
    """The demo's ``chunk KV:`` line: one plain sentence on what the engine does with documents found in
    the chunk cache, why that is safe, and where to read more (the full calibration verdict is logged
    at INFO, ``ragcache --verbose demo``: :func:`_reuse_detail`)."""
    setting = engine.blend_setting_name()
    if engine.chunk_cache is None or engine.kv_reuse_blocker:
        why = "the chunk cache is off" if engine.chunk_cache is None else f"this model has {engine.kv_reuse_blocker}"
        return f"every document is computed in each answer's own context, exactly, because {why}; more in {GUIDE}."
    if setting is None:
        return ("documents are kept in the chunk cache but each answer computes them again, exactly, because no "
                "calibration has shown that reusing them keeps this model's answers (RAGCACHE_RECOMPUTE_RATIO=0.15 "
                f"turns reuse on, every such answer labelled approximate); more in {GUIDE}.")
    cal = engine.calibration
    licensed = engine.configured_recompute_ratio is None and engine.config.blend_setting is None and cal is not None \
        and cal.blend_allowed
    why = ("this model's calibration found it rarely changes a confidently chosen word" if licensed
           else "you asked for it with a recompute ratio")
    return (f"documents found in the chunk cache are reused at their new positions (CacheBlend, setting {setting}) "
            f"and each such answer is labelled approximate, because it may differ slightly from computing everything "
            f"again ({why}); more in {GUIDE}.")


def _reuse_detail(engine: Any) -> str:
    """The whole story behind :func:`_reuse_mode` for ``--verbose``: the calibration record's verdict
    (or that there is none) and the setting in force."""
    cal = engine.calibration
    verdict = cal.verdict() if cal is not None else "no calibration record for this model (`ragcache calibrate`)"
    return f"calibration: {verdict}; blend setting in force: {engine.blend_setting_name() or 'none (exact prefill)'}"


def demo(*, cfg: Config, backend: str = "local", model: str | None = None, max_new_tokens: int = 64,
         chunk_cache: bool = True, console: Console | None = None) -> dict:
    """The scripted session over the standard library's documentation (model, embedder, top-k,
    recompute ratio and paths from ``cfg``). Answers are kept in memory: every run shows every
    layer. Returns the summary dict.

    Args:
        backend: one of :data:`DEMO_BACKENDS`. ``"anthropic"`` / ``"openai"``: that provider's API answers
            each miss (:func:`ragcache.app.runtime.provider_backend`, the same as ``ragcache ask --backend``:
            key and URL from the usual variables) and no local model is loaded.
        model: the provider's model id (``--model``) for a provider backend; the local backends take
            theirs from ``cfg.model``.

    Raises:
        ValueError: an unknown backend; a provider backend without ``model`` or its API key.
        ImportError: a provider's SDK is not installed (names the extra).
    """
    console = console or Console()
    t0 = time.perf_counter()
    console.rule("ragcache demo: RAG over the Python standard library's documentation")
    _check_backend(backend)
    provider = provider_backend(backend, model) if backend in PROVIDERS else None  # checked before anything loads
    emb = query_embedder(cfg)
    engine: Any = None
    if provider is None:
        if cfg.min_reuse_tokens is None:  # blend whenever a document hits (module docstring)
            cfg = dataclasses.replace(cfg, min_reuse_tokens=0)
        with console.status("loading the model (first run converts the packaged GGUF once, ~40 s)"):
            engine = build_engine(cfg, chunk_cache=chunk_cache and backend == "local")
    chunks = stdlib_chunks()
    retriever = build_retriever(chunks, cfg, emb, f"{stdlib_corpus_id()}-{emb.fingerprint[:8]}")
    say(console, f"model {engine.fingerprint if engine is not None else model} | embedder {emb.name} | "
                 f"{len(chunks)} chunks "
                 f"({'index loaded from disk' if retriever.loaded_from_disk else 'index built and saved'}) | "
                 f"backend {backend} | top-k {cfg.top_k}")
    if backend == "local":
        say(console, ("chunk KV: " + _reuse_mode(engine), "dim"))
        log.info("chunk KV: %s", _reuse_detail(engine))
    with _backend(backend, engine, provider) as be:
        # A cut answer is kept (the default rule): it is served only to a request with this same budget
        # (it is in the partition), never to a larger one.
        rag = RagCache(be, semantic=answer_cache(cfg, emb, path=None), system=DEMO_SYSTEM,
                       max_new_tokens=max_new_tokens)
        answers = run_session(rag, retriever, DEMO_SESSION, top_k=cfg.top_k, console=console, backend=backend)
        summary = summarize(answers, console, rag)
    if backend == "local" and engine.chunk_cache is not None:  # idle now: the next run reuses every document
        with console.status("storing the chunk KV of this session's documents for the next run"):
            summary["chunk_queue_drained"] = engine.drain_chunk_queue(DEMO_DRAIN_S, first_sightings=True)
        summary["chunk_queue"] = engine.chunk_queue_stats.to_dict()
    summary["wall_s"] = time.perf_counter() - t0
    say(console, f"demo finished in {summary['wall_s']:.0f} s")
    return summary
