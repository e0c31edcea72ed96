"""SemanticCache: the embedded semantic cache, :class:`SemanticPolicy` over FAISS + SQLite.

The decision (keying, typo correction, budget, guards, statistics, single flight) is
:class:`~ragcache.semantic.decision.policy.SemanticPolicy`'s; the entries live in a
:class:`~ragcache.semantic.stores.faiss_store.FaissAnswerStore` (FAISS indexes in memory over one SQLite
file), or in any :class:`~ragcache.semantic.stores.protocol.VectorAnswerStore` given as ``answer_store=``.
:meth:`SemanticCache.from_url` opens the cache a URL names (:mod:`ragcache.semantic.urls`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ragcache.semantic.decision.bound import error_bound
from ragcache.semantic.decision.coverage import GUARD_LANGUAGES, CoverageGate
from ragcache.semantic.decision.checks import (DEFAULT_PARTITION, DEFAULT_THRESHOLD, check_count, check_flag, check_path,
                                      checked_partition)
from ragcache.semantic.embedding import resolve_embedder
from ragcache.semantic.flight import store_locks
from ragcache.semantic.stores.faiss_store import DEFAULT_MAX_ENTRY_BYTES, FaissAnswerStore
from ragcache.semantic.decision.guards import GuardSet
from ragcache.semantic.decision.policy import SemanticPolicy, make_decider, reembedder
from ragcache.semantic.stores.protocol import VectorAnswerStore
from ragcache.semantic.records import Candidate, SemanticHit
from ragcache.semantic.speller import QuerySpeller

__all__ = ["DEFAULT_PARTITION", "DEFAULT_THRESHOLD", "Candidate", "SemanticCache", "SemanticHit",
           "checked_partition"]

class SemanticCache(SemanticPolicy):
    """Semantic response cache keyed by (exact partition, question embedding), embedded by default.

    Args:
        path: directory for ``semantic.sqlite3`` and ``index/``; ``None`` keeps everything in memory.
            Several processes may open one directory: each sees the others' stores and
            invalidations at its next call.
        embedder: ``None`` (packaged all-MiniLM-L6-v2), a sentence-transformers name/path, an object
            with ``encode(list[str])``, or a callable ``list[str] -> array [n, dim]``.
        threshold: cosine gate; a hit needs ``similarity >= threshold`` and the decider's yes; 1.0 = exact
            only; ``None``: the decider's own gate (the learned verifier's or the pair model's ``floor``; 0.94
            for the guards).
        max_entries: LRU capacity over all partitions.
        max_entry_bytes: largest answer + metadata (bytes) one entry holds (default 8 MiB); a larger answer
            is refused with a ``ValueError`` naming the limit (through ``RagCache``: logged, answered unstored).
            ``None``: no limit.
        max_bytes: byte budget over all stored answers + metadata, least recently used evicted past it
            (``None``: none). The open store holds vectors, ids, questions and partitions in memory; answers
            are read from SQLite on a hit.
        ttl_s: default time to live of an entry in seconds (``None``: no expiry).
        guards: ``True`` (the default :class:`GuardSet`, or a ``ragcache calibrate semantic`` record's verifier),
            ``"rules"`` (the default :class:`GuardSet` whatever record there is), ``"pair"`` (the pair model behind
            the hard vetoes, :class:`~ragcache.semantic.decision.pair_decider.PairDecider`, opt in: more hits, more
            wrong ones; see the semantic-cache guide), ``"verifier"`` (the learned verifier, opt in: more hits, more
            wrong ones; see the README), ``False`` (plain cosine), or a ``GuardSet``.
        verifier: optional ``(query, candidate) -> bool | float`` added as the last guard.
        candidates: nearest stored questions checked per lookup (best first).
        hnsw_threshold: partition size above which its index becomes HNSW.
        autosave_every: writes between FAISS snapshots (persistent caches only).
        typo_correction: correct out-of-vocabulary query words against the partition's words.
        store_truncated: store answers whose ``finish_reason`` says they were cut at the token budget
            (``"length"``, ``"max_tokens"``); they are then served only to requests with the same
            ``max_tokens``. Default False: such answers are not stored.
        search_threads: FAISS OpenMP threads (process-wide setting). One is fastest for single-query
            lookups: on a loaded 2-core CPU two threads made a 10k flat search 10x slower (p50 13 ms vs
            1.3 ms) from spin-waiting. ``None`` leaves FAISS's setting alone.
        reembed: when ``path`` was built with another embedder, re-embed its stored questions with this
            one (a warning says how many; questions longer than this embedder's window are dropped)
            instead of refusing the folder.
        answer_store: another :class:`VectorAnswerStore` to run over (``path`` and the FAISS
            arguments are then unused); its vectors must come from ``embedder``. Its ``locks``
            (:class:`~ragcache.semantic.flight.FlightLocks`), when it has them
            (:class:`~ragcache.semantic.flight.HoldsFlightLocks`), hold single flight (else this
            process's locks); typo correction runs when it is a
            :class:`~ragcache.semantic.speller.QuerySpeller`.
        max_error: a bound in (0, 1) on the error rate among served hits (``0.02``: at most 2%
            wrong), kept by per-entry thresholds learned online as in vCache (arXiv 2502.03771;
            :mod:`ragcache.semantic.decision.vcache`); ``threshold`` then no longer decides. A lookup whose
            best guard-accepted candidate is uncertain returns a miss (an *exploration*, counted in
            ``stats.explorations``) and, when the fresh answer for that question is stored, the two
            answers are compared and the entry's state updated (persisted). ``None``: the threshold.
        equivalence: how an exploration's fresh answer is compared with the cached one: ``"exact"``
            (normalised exact match), ``"embedding"`` (answer-embedding cosine >= 0.90) or a
            callable ``(fresh_answer, cached_answer) -> bool`` (e.g. your own LLM as a judge).
        error_scope: ``"hits"`` (``max_error`` bounds wrong hits / hits) or ``"lookups"`` (wrong hits
            / lookups, vCache's definition and exploration probability).
        home: the ragcache home whose ``ragcache calibrate semantic`` record for ``embedder`` sets the
            verifier's threshold (a :class:`~ragcache.home.Home` or folder; ``None``: ``~/.cache/ragcache``).
        languages: the languages matched by similarity, as ISO 639-1 codes (default ``("en",)``: what the
            guards read), or ``"any"``. A question with words in another script or language, or with
            word pieces the embedder maps to its unknown token, is served only as an exact repeat
            (:mod:`ragcache.semantic.decision.coverage`; the refusal's reason is ``"coverage"``).
            Declare another language only with a multilingual ``embedder``.

    Raises:
        ValueError: bad arguments, a language other than English with the packaged English embedder,
            or ``path`` holds a cache built with another embedder (and ``reembed`` is False).
    """

    def __init__(self, path: str | Path | None = None, *, embedder: Any = None,
                 threshold: float | None = None, max_entries: int = 100_000, ttl_s: float | None = None,
                 guards: bool | str | GuardSet = True, verifier: Callable[[str, str], bool | float] | None = None,
                 candidates: int = 4, hnsw_threshold: int = 20_000, autosave_every: int = 1000,
                 typo_correction: bool = True, store_truncated: bool = False,
                 search_threads: int | None = 1, reembed: bool = False,
                 answer_store: VectorAnswerStore | None = None,
                 max_error: float | None = None, equivalence: Any = "exact",
                 error_scope: str = "hits", home: Any = None,
                 languages: Sequence[str] | str = GUARD_LANGUAGES,
                 max_entry_bytes: int | None = DEFAULT_MAX_ENTRY_BYTES, max_bytes: int | None = None) -> None:
        check_path("path", path)
        self.max_entries = check_count("max_entries", max_entries)
        candidates = check_count("candidates", candidates)
        hnsw_threshold = check_count("hnsw_threshold", hnsw_threshold)
        autosave_every = check_count("autosave_every", autosave_every)
        if search_threads is not None:
            search_threads = check_count("search_threads", search_threads)
        typo_correction = check_flag("typo_correction", typo_correction)
        store_truncated = check_flag("store_truncated", store_truncated)
        reembed = check_flag("reembed", reembed)
        if not isinstance(guards, (bool, str, GuardSet)):
            raise TypeError(f"guards must be True, False, 'rules', 'pair', 'verifier' or a GuardSet; got "
                            f"{type(guards).__name__} {guards!r:.40}")
        emb = resolve_embedder(embedder)
        bound = error_bound(max_error, equivalence, error_scope, emb)  # checked before the store opens
        CoverageGate(emb, languages)  # checked before the store opens too
        decider = make_decider(guards, verifier, emb, home=home)
        self.path = None if path is None else Path(path).expanduser()
        self.hnsw_threshold, self.autosave_every = hnsw_threshold, autosave_every
        if answer_store is None:
            answer_store = FaissAnswerStore(self.path, embedder=emb, max_entries=self.max_entries,
                                            hnsw_threshold=hnsw_threshold, autosave_every=autosave_every,
                                            search_threads=search_threads,
                                            reembed=reembedder(emb) if reembed else None,
                                            max_entry_bytes=max_entry_bytes, max_bytes=max_bytes)
        super().__init__(answer_store, embedder=emb, threshold=threshold, ttl_s=ttl_s, decider=decider,
                         candidates=candidates, typo_correction=typo_correction, store_truncated=store_truncated,
                         error_bound=bound, languages=languages, locks=store_locks(answer_store),
                         speller=answer_store if isinstance(answer_store, QuerySpeller) else None)

    @classmethod
    def from_url(cls, url: str | None = None, **kwargs: Any) -> SemanticPolicy:
        """Open the cache a URL names: ``postgresql://...`` -> :class:`~ragcache.semantic.pg_cache.PgSemanticCache`
        (shared by every process that opens it), a directory path or ``file://`` -> this class on disk,
        ``None`` -> an in-memory cache. ``kwargs`` go to the constructor.

        Raises:
            ValueError: an unknown URL scheme.
        """
        from ragcache.semantic.urls import open_semantic_cache

        return open_semantic_cache(url, file_cache=cls, **kwargs)
