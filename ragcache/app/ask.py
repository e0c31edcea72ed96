"""``ragcache ask``: one question over a folder of your own notes, cheapest layer first.

Order of work, so a repeated question costs an embedder load and a lookup, not a model load:

1. read the folder (non-UTF-8 text decoded with detection; each skipped file named with the reason);
2. update the retrieval index: only chunks whose text is new are embedded; unused index folders
   are deleted (:func:`ragcache.app.retrieval.prune_indexes`);
3. retrieve the top-k chunks, lay out the request and look in the semantic answer cache;
4. on a miss, load the model, answer, and store the answer. The engine's chunk KV persists under
   ``$RAGCACHE_HOME/kv``: a document missed by a second run is computed before the command exits
   (the engine's chunk queue is drained after the answer is printed; a document seen once is only
   counted, :mod:`ragcache.engine.chunk.admission`), and later runs reuse it.

An answer cut at the token budget is stored too (``cache_truncated``, on by default): the budget
is part of the semantic partition, so it is served only to a request with the same budget, and
the second ask of a question is a semantic hit at the defaults.

Concurrent runs on one ``$RAGCACHE_HOME`` (several shells, a script in parallel) share the work:
the index update holds a file lock on the index folder, and a miss goes through the one answer
path (:class:`ragcache.answering.AnswerPath`), whose single flight holds the answer store's lock of
(partition, question) across processes (a lock file per key,
:class:`ragcache.semantic.flight.FileFlightLocks`, or PostgreSQL's advisory lock with
``RAGCACHE_SEMANTIC_URL``), re-reads the answer cache once it has the lock, and only then calls the
model: N identical concurrent asks make one model call and store one answer.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock
from rich.console import Console
from rich.text import Text

from ragcache.answering import CACHE_TRUNCATED
from ragcache.app.corpus import scan_folder
from ragcache.app.output import clean, err_console, say, warn
from ragcache.app.retrieval import Retrieved, Retriever, prune_indexes, query_part
from ragcache.app.runtime import (
    LazyLocalBackend,
    answer_cache,
    build_engine,
    bulk_embedder,
    provider_backend,
    query_embedder,
    setting_name,
)
from ragcache.app.runtime import LazyLocalBackend as _LazyLocal  # the class, for isinstance (tests replace the name above)
from ragcache.backend import Backend
from ragcache.config import Config
from ragcache.hashing import hash_value
from ragcache.home import writable
from ragcache.pipeline import DEFAULT_SYSTEM, Answer, RagCache
from ragcache.text_checks import checked_question

if TYPE_CHECKING:
    from ragcache.engine.engine import LocalEngine

log = logging.getLogger("ragcache.ask")


@dataclass(slots=True)
class AskResult:
    """An answer with what ``ask`` did to get it (``--json`` prints :meth:`to_dict`)."""

    answer: Answer
    sources: list[Retrieved]
    skipped: list[tuple[str, str]]
    chunks_embedded: int
    chunks_reused: int
    model_loaded: bool
    miss_reasons: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    skipped_bytes: int = 0
    ignored: dict[str, int] = field(default_factory=dict)
    linked_folders: list[str] = field(default_factory=list)
    looked_up: bool = True
    home_read_only: bool = False
    retrieved_for: str | None = None
    """The stored question whose retrieval supplied :attr:`sources` (:func:`via_stored_question`), or ``None``."""
    own_sources: list[Retrieved] = field(default_factory=list)
    """This question's own retrieval when :attr:`retrieved_for` is set (it differed)."""

    def to_dict(self) -> dict[str, Any]:
        a = self.answer
        return {
            "question": a.question, "answer": a.text, "layer": a.layer, "similarity": a.similarity,
            "matched_question": a.matched_question, "finish_reason": a.finish_reason,
            "approximate": a.approximate, "recompute_ratio": a.recompute_ratio, "blend_setting": a.blend_setting,
            "approximation": a.approximation, "ttft_s": a.ttft_s,
            "total_s": a.total_s, "usage": a.usage.to_dict(),
            "sources": [{"id": r.chunk.id, "score": r.score} for r in self.sources],
            "skipped_files": [{"file": f, "reason": r} for f, r in self.skipped], "skipped_bytes": self.skipped_bytes,
            "ignored_files": dict(self.ignored), "linked_folders": list(self.linked_folders),
            "chunks_embedded": self.chunks_embedded, "chunks_reused": self.chunks_reused,
            "model_loaded": self.model_loaded, "semantic_miss_reasons": self.miss_reasons, "timings_s": self.timings,
            "home_read_only": self.home_read_only, "retrieved_for": self.retrieved_for,
            "own_sources": [{"id": r.chunk.id, "score": r.score} for r in self.own_sources],
        }


def index_dir_for(cfg: Config, root: Path, embedder: Any) -> Path:
    """The index folder of a docs folder: one per (resolved folder, embedder), updated in place."""
    return cfg.index_dir / f"docs-{hash_value(str(root.resolve()))[:16]}-{embedder.fingerprint[:8]}"


def explain_miss(semantic: Any, question: str, partition: Any, threshold: float | None,
                 max_tokens: int | None = None) -> list[str]:
    """Why a lookup missed, one line per nearest stored question: its similarity against the
    threshold and the guards' verdict (:meth:`ragcache.semantic.SemanticCache.candidates_for`), judged
    for the request's answer budget ``max_tokens`` (tokens; ``None``: not known) as the lookup was."""
    t = semantic.threshold if threshold is None else threshold
    cands = semantic.candidates_for(question, partition=partition, threshold=threshold, max_tokens=max_tokens)
    if not cands:
        return ["no stored answer for this request's partition: an answer is served only for the same retrieved "
                "documents, system text, model and generation parameters (a rewording that retrieves other "
                "documents is a new entry)"]
    out = []
    for c in cands:
        v = c.verdict
        if c.similarity < t:
            why = f"similarity {c.similarity:.3f} < threshold {t:.2f}"
        elif not v.ok:
            why = f"similarity {c.similarity:.3f} >= {t:.2f} but the {v.reason} guard rejected it" + \
                  (f" ({v.detail})" if v.detail else "")
        else:
            why = f"similarity {c.similarity:.3f} >= {t:.2f}, guards passed"
        out.append(f"{shown_question(c.question)}: {why}")
    return out


STORED_NEIGHBOURS = 3
"""Stored questions (nearest first, in any partition of the tenant) whose retrieval a missed ``ask`` tries."""


@dataclass(frozen=True, slots=True)
class Via:
    """A hit reached through a stored question's retrieval (:func:`via_stored_question`)."""

    answer: Answer
    sources: list[Retrieved]
    stored_question: str
    own: list[Retrieved]


def via_stored_question(rag: RagCache, semantic: Any, retriever: Retriever, question: str, own: list[Retrieved], *,
                        top_k: int, threshold: float | None) -> Via | None:
    """A hit for a rewording whose own retrieval moved: the documents a stored question retrieves now.

    The partition stays the exact retrieved set (documents by content, system text, model, budget): a
    rewording that retrieves another fourth note is another partition, and its lookup misses although
    a stored answer's question means the same. Here, after that miss, each of the
    :data:`STORED_NEIGHBOURS` stored questions nearest ``question`` (:meth:`SemanticPolicy.neighbour_questions
    <ragcache.semantic.decision.policy.SemanticPolicy.neighbour_questions>`, at or above the cache's
    threshold) is retrieved with again over the current notes, and ``question`` is looked up in the
    partition those documents make, where the one hit decision runs (pair model and guards). So a served
    answer's documents are the current notes byte for byte, exactly those it was answered from, and its
    question passed the same decision as any hit; the only new assumption is that the stored question's
    retrieval serves this question as well as its own, which the decision's "same meaning" implies.

    Refused without a lookup: a stored question that retrieves the same set as ``question`` (already
    looked up) or no document in common with it (the two retrievals land in different notes: another
    topic, whatever the similarity). These lookups are not counted in the cache's hit rate (the
    question's own lookup was: a hit reached here counts as that miss).

    Returns:
        the hit, the documents it was answered from, the stored question and ``question``'s own
        retrieval; ``None`` when no stored question's documents give a hit.
    """
    mine = {r.chunk.id for r in own}
    for stored, _ in semantic.neighbour_questions(question, namespace=rag.namespace, k=STORED_NEIGHBOURS,
                                                   floor=threshold):
        found = retriever.search(stored, k=top_k)
        ids = {r.chunk.id for r in found}
        if ids == mine or not ids & mine:
            continue
        req = rag.prepare(question, [{"id": r.chunk.id, "text": r.chunk.text} for r in found], threshold=threshold)
        a = rag.path.lookup(req, count=False, blend_setting=rag.blend_setting)  # the ask's own lookup was counted
        if a is not None:
            log.info("served through the retrieval of stored question %r (%d of %d documents differ)",
                     stored, len(ids - mine), len(ids))
            return Via(a, found, stored, list(own))
    return None


def _read_folder(docs: str | Path, console: Console, quiet: bool,
                 max_file_bytes: int | None = None) -> tuple[Any, list[tuple[str, str]]]:
    """The scanned ``--docs`` folder and its skipped files ``(path, reason)``, reported on stderr
    unless ``quiet`` (stdout carries only the answer).

    Raises:
        ValueError: no readable non-empty text file in the folder.
    """
    folder = scan_folder(docs, max_file_bytes=max_file_bytes)
    skipped = [(s.rel, s.reason) for s in folder.skipped]
    if not quiet:
        for rel, reason in skipped:
            warn(console, f"skipped {rel}: {reason}")
        if skipped:
            say(err_console(), ("note: ", "dim"), f"skipped {len(skipped)} file(s), {folder.skipped_bytes:,} bytes; "
                                                  f"answering from {len(folder.files)} file(s)")
        if folder.ignored_note:
            say(err_console(), ("note: ", "dim"), folder.ignored_note)
        for f in folder.files:
            if f.encoding != "utf-8":
                say(err_console(), ("note: ", "dim"), f"{f.rel} decoded as {f.encoding}")
    folder.require_files()
    return folder, skipped


def _index(cfg: Config, folder: Any, emb: Any, embedder: str | None, console: Console,
           quiet: bool) -> tuple[bool, Retriever, list[Path]]:
    """``(read_only, retriever, removed index folders)`` of the scanned ``folder``: built or updated under a file
    lock in a writable home; in a read-only one (:func:`ragcache.home.writable`) read from there or built in
    memory, with a warning that nothing is stored."""
    removed: list[Path] = []
    idx = index_dir_for(cfg, folder.root, emb)
    read_only = not writable(cfg.index_dir.parent)
    if read_only:  # serve what the home holds; build nothing there, store nothing
        note = (f"{cfg.index_dir.parent} is read-only: answering from what it holds, storing no index, answer or "
                "chunk KV (point RAGCACHE_HOME at a writable folder to store them)")
        log.info("%s", note)
        if not quiet:
            warn(console, note)
        retriever = Retriever(folder.chunks(), emb, idx, source=str(folder.root.resolve()),
                              bulk_embedder=bulk_embedder(cfg, embedder), progress=not quiet, save=False)
    else:
        with FileLock(str(cfg.index_dir.with_name(cfg.index_dir.name + ".lock"))):  # one process builds; the others then read what it wrote
            retriever = Retriever(folder.chunks(), emb, idx, source=str(folder.root.resolve()),
                                  bulk_embedder=bulk_embedder(cfg, embedder), progress=not quiet)
            removed = prune_indexes(cfg.index_dir, idx)
    return read_only, retriever, removed


def _backend(cfg: Config, backend: str, model: str | None) -> Backend:
    """The backend that answers a miss: the local engine, loaded on first use, or a provider's API."""
    if backend != "local":
        return provider_backend(backend, model)
    return LazyLocalBackend(lambda: build_engine(cfg, model), model if model is not None else cfg.model,
                            predict=cfg.decode_cache == "dynamic", home=cfg.paths,
                            setting=setting_name(cfg, "model", model), recompute_ratio=cfg.recompute_ratio)


def ask(question: str, docs: str | Path, *, cfg: Config, model: str | None = None, embedder: str | None = None,
        top_k: int | None = None, max_new_tokens: int | None = None, system: str | None = None,
        threshold: float | None = None, lookup: bool = True, store: bool = True, cache_truncated: bool = CACHE_TRUNCATED,
        console: Console | None = None, quiet: bool = False, flight_timeout_s: float = 600.0,
        backend: str = "local", llm: Backend | None = None, stored_retrieval: bool = True) -> AskResult:
    """Answer ``question`` over the ``.txt`` / ``.md`` files under ``docs``.

    Args:
        lookup: look in the semantic answer cache first (``--no-cache`` / ``--refresh`` turn it off).
        store: store a fresh answer (``--no-cache`` turns it off; ``--refresh`` replaces the old one).
        cache_truncated: store an answer cut at the token budget (served only to the same budget).
        flight_timeout_s: longest wait (seconds) for another process answering the same question;
            then this one answers too.
        threshold: cosine threshold for this lookup (default ``cfg.threshold``).
        quiet: print nothing (``--json``).
        backend: ``"local"`` (the engine over ``model``), or ``"anthropic"`` / ``"openai"``: that provider's
            API with ``model`` as its model id (:func:`ragcache.app.runtime.provider_backend`).
        llm: a :class:`~ragcache.backend.Backend` that answers a miss in place of ``backend`` / ``model``
            (your own, or a fixed answer in a benchmark).
        stored_retrieval: after a miss in this question's own partition, look it up in the partitions the
            nearest stored questions retrieve now (:func:`via_stored_question`); ``False``: own partition only.

    Raises:
        ValueError: empty question, missing folder, a folder without readable text.
    """
    t0 = time.perf_counter()
    console = console or Console()
    checked_question(question, hint='ask something, e.g. ragcache ask --docs notes/ "How do I ...?"')
    top_k = cfg.top_k if top_k is None else top_k
    if top_k < 1:
        raise ValueError(f"--top-k must be >= 1, got {top_k}")
    folder, skipped = _read_folder(docs, console, quiet, cfg.max_file_bytes)
    timings: dict[str, float] = {"read_s": time.perf_counter() - t0}
    emb = query_embedder(cfg, embedder)
    timings["embedder_s"] = time.perf_counter() - t0 - timings["read_s"]
    read_only, retriever, removed = _index(cfg, folder, emb, embedder, console, quiet)
    store = store and not read_only
    if retriever.embedded:
        log.info("embedded %d new chunks, reused %d", retriever.embedded, retriever.reused)
    for d in removed:
        log.info("removed unused index folder %s", d)
    hits = retriever.search(question, k=top_k)
    _say_cut(query_part(question, emb), console, quiet)
    documents = [{"id": r.chunk.id, "text": r.chunk.text} for r in hits]
    llm = _backend(cfg, backend, model) if llm is None else llm
    semantic = answer_cache(cfg, emb)
    rag = RagCache(llm, semantic=semantic, system=DEFAULT_SYSTEM if system is None else system,
                   max_new_tokens=cfg.max_new_tokens if max_new_tokens is None else max_new_tokens,
                   cache_truncated=cache_truncated, flight_timeout_s=flight_timeout_s)
    try:
        req = rag.prepare(question, documents, threshold=threshold)
        a, via, reasons = _look_up(rag, retriever, req, hits, top_k=top_k, stored_retrieval=stored_retrieval,
                                   timings=timings) if lookup else (None, None, [])
        if via is not None:
            hits = via.sources
        if a is None:  # the answer path: single flight across processes, re-read, call, store if finished
            a = rag.path.run(req, lambda: _generate(rag, req, None if quiet else console, question), lookup=lookup,
                             store=store, looked=lookup, blend_setting=rag.blend_setting)
    finally:
        rag.path.guard("close", rag.semantic.close)  # a failing cache does not cost the answer printed
    timings["command_s"] = time.perf_counter() - t0  # whole command; the answer's total_s is its own
    loaded = isinstance(llm, _LazyLocal) and llm.loaded  # a provider or your own backend: no model loaded here
    out = AskResult(a, hits, skipped, retriever.embedded, retriever.reused, loaded, reasons, timings)
    out.skipped_bytes = folder.skipped_bytes
    out.ignored = dict(folder.ignored)
    out.linked_folders = list(folder.linked_folders)
    out.looked_up = lookup
    out.home_read_only = read_only
    if via is not None:
        out.retrieved_for, out.own_sources = via.stored_question, via.own
    if not quiet:
        print_answer(console, out)
    engine = _local_engine(llm) if loaded else None  # loaded already: this loads nothing
    if engine is not None:  # the chunk queue's work (sightings, admitted chunks) before exiting
        engine.drain_chunk_queue(EXIT_DRAIN_S)
    return out


def _local_engine(backend: Backend) -> LocalEngine | None:
    """The :class:`~ragcache.engine.engine.LocalEngine` answering for ``backend``: a
    :class:`~ragcache.engine.backend.LocalBackend`'s, or a :class:`~ragcache.app.runtime.LazyLocalBackend`'s
    (loaded by this call when it was not); ``None`` for a provider or any other backend."""
    from ragcache.engine.backend import LocalBackend  # no torch: the engine's module is imported below, once loaded

    if not isinstance(backend, (LocalBackend, _LazyLocal)):
        return None
    engine = backend.engine
    from ragcache.engine.engine import LocalEngine

    return engine if isinstance(engine, LocalEngine) else None


def _say_cut(part: Any, console: Console, quiet: bool) -> None:
    """Warn (and log) when the embedder reads only part of the question (:func:`query_part`): the notes
    are then retrieved by the part that asks."""
    if not part.cut:
        return
    long = (f"the question is {part.tokens:,} word pieces and the embedder reads {part.window}: the notes are "
            f"retrieved by the part that asks ({clean(part.text[:120], newlines=False)!r}); the answer cache "
            "matches the text before the ask exactly")
    log.info("%s", long)
    if not quiet:
        warn(console, long)


def _look_up(rag: RagCache, retriever: Retriever, req: Any, own: list[Retrieved], *, top_k: int,
             stored_retrieval: bool, timings: dict[str, float]) -> tuple[Answer | None, Via | None, list[str]]:
    """``(answer, via, miss reasons)`` of the answer cache for ``req``: its own partition, then (with
    ``stored_retrieval``) the stored questions' retrieval (:func:`via_stored_question`, timed as
    ``stored_retrieval_s``), then, on a miss, why (:func:`explain_miss`). A failing cache: a miss without
    reasons."""
    question, threshold = req.question, req.threshold
    a = rag.lookup(req)
    via: Via | None = None
    if a is None and stored_retrieval:  # a rewording whose retrieval moved: a stored question's documents
        t1 = time.perf_counter()
        via = rag.path.guard("stored-question retrieval", lambda: via_stored_question(
            rag, rag.semantic, retriever, question, own, top_k=top_k, threshold=threshold), None)
        timings["stored_retrieval_s"] = time.perf_counter() - t1
        if via is not None:
            return via.answer, via, []
    reasons: list[str] = []
    if a is None:
        reasons = rag.path.guard("miss explanation", lambda: explain_miss(  # a failing cache: no reasons
            rag.semantic, question, req.partition, threshold, req.max_tokens), [])
        for r in reasons:
            log.info("semantic miss: %s", r)
    return a, via, reasons


COMFORTABLE_QUESTION_TOKENS = 1024
"""Question length (model tokens) past which ``ask`` warns before the model answers: a question is never
cached KV, so the model computes every one of its tokens on each miss before the first answer token."""


def long_question_note(engine: LocalEngine, question: str) -> str | None:
    """A warning for a question over :data:`COMFORTABLE_QUESTION_TOKENS` tokens of ``engine``'s tokenizer
    (or over half its context window, :attr:`~ragcache.engine.engine.LocalEngine.context_window`), with its
    token count; ``None`` below."""
    n = engine.count_tokens(question)
    window = engine.context_window  # tokens; UNKNOWN_CONTEXT_WINDOW (huge) when the config states none
    limit = min(COMFORTABLE_QUESTION_TOKENS, window // 2)
    if n <= limit:
        return None
    of = f" of its {window:,}-token context" if window < 1 << 40 else ""
    return (f"the question is {n:,} tokens for the model (more than {limit:,}{of}): it computes every one before "
            "the first answer token, so this answer is slow; put a long text in a note under --docs and ask about it")


def _generate(rag: RagCache, req: Any, console: Console | None, question: str = "") -> Any:
    """The model's answer; a question too long for the local model to answer quickly is warned about
    first (:func:`long_question_note`, logged; on stderr unless ``console`` is ``None``)."""
    local = rag.backend.name == "local"

    def run() -> Any:
        engine = _local_engine(rag.backend) if local else None  # loaded here to answer anyway
        if engine is not None:
            note = long_question_note(engine, question)
            if note:
                log.info("%s", note)
                if console is not None:
                    warn(console, note)
        return rag.generate(req)

    if console is None:
        return run()
    with console.status("loading the model and answering" if local else f"asking {rag.backend.name}"):
        return run()


EXIT_DRAIN_S = 300.0
"""Seconds ``ask`` waits at most, after the answer, for the chunk queue (the KV of documents missed twice)."""

CUT_HINT = "cut at the token budget (raise --max-new-tokens for a longer answer)"
"""What a cut answer's footer says, served by the model or by the cache."""

SHOWN_QUESTION_CHARS = 120
"""How much of a stored question a footer or a miss reason quotes (a pasted log can be 20,000 characters)."""


def shown_question(question: str | None) -> str:
    """``question`` quoted on one line (``repr``), cut to :data:`SHOWN_QUESTION_CHARS` characters with
    its length when longer: the head and the tail, where a long question asks."""
    q = clean(question or "", newlines=False)
    if len(q) <= SHOWN_QUESTION_CHARS:
        return repr(q)
    half = SHOWN_QUESTION_CHARS // 2
    return f"{q[:half]!r} ... {q[-half:]!r} ({len(q):,} characters)"


def miss_line(r: AskResult) -> str | None:
    """Why the answer did not come from the answer cache, on one line (``None`` for a hit): the lookup
    was turned off, or the nearest stored question's reason (:func:`explain_miss`), with how many more
    reasons ``--json`` / ``-v`` list."""
    if r.answer.layer == "semantic":
        return None
    if not r.looked_up:
        return "not looked up in the answer cache (--no-cache or --refresh)"
    if not r.miss_reasons:
        return "the answer cache held no answer for this request"
    more = len(r.miss_reasons) - 1
    return r.miss_reasons[0] + (f" (+{more} more: --json or -v)" if more else "")


def print_answer(console: Console, r: AskResult) -> None:
    """The answer as literal text, then one dim line of where it came from (an approximate answer says
    so, with its blend setting: :attr:`ragcache.provenance.Answer.approximation`) and, when the answer
    cache did not serve it, one dim line of why (:func:`miss_line`)."""
    a = r.answer
    console.print(Text(clean(a.text)), highlight=False, soft_wrap=True)
    cut = a.finish_reason == "length"
    if a.layer == "semantic":
        how = f"served by semantic cache (similarity {a.similarity:.3f} to {shown_question(a.matched_question)})"
        if cut:
            how += f" | {CUT_HINT}"
    else:
        how = f"served by {a.layer} | TTFT {a.ttft_s:.2f} s | tokens reused {a.tokens_reused}/{a.prompt_tokens}"
        if cut:
            how += f" | {CUT_HINT}"
    if a.approximation:
        how += f" | {a.approximation}"
    if r.retrieved_for is not None:
        differ = len({x.chunk.id for x in r.sources} - {x.chunk.id for x in r.own_sources})
        how += (f" | documents as retrieved for the stored question ({differ} of {len(r.sources)} differ from this "
                "question's own retrieval)")
    srcs = ", ".join(f"{s.chunk.id} ({s.score:.2f})" for s in r.sources)
    say(console, (f"sources: {srcs} | {how} | {r.timings.get('command_s', 0.0):.2f} s", "dim"))
    why = miss_line(r)
    if why is not None:
        say(console, (f"cache miss: {why}", "dim"))


__all__ = ["AskResult", "Via", "ask", "via_stored_question", "explain_miss", "index_dir_for", "miss_line", "print_answer"]
