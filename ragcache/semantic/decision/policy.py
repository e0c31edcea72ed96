"""SemanticPolicy: the semantic cache's whole decision, written once over a vector-answer store.

A lookup normalises the question (the last user turn alone), keys it
(:mod:`ragcache.semantic.keying`: a question longer than the embedder's window is matched exactly
up to its last sentence, which alone is embedded, or matched exactly as a whole), corrects typos
against the partition's stored words (:mod:`ragcache.semantic.speller`), embeds it, asks the store
for the ``candidates`` nearest stored questions (:class:`~ragcache.semantic.stores.protocol.VectorAnswerStore`;
an entry with the same words is always among them), drops candidates whose answer budget does not
fit the request (:func:`~ragcache.semantic.budget.servable`), and serves the first whose cosine
similarity is ``>= threshold`` and that the decider accepts, behind the coverage gate
(:class:`~ragcache.semantic.decision.coverage.CoverageGate`: a question in a script or language the
cache does not read, or with word pieces its embedder cannot represent, is served only as an exact
repeat). The decider is
``decider.check(query_text, candidate_text, similarity) -> GuardVerdict`` (today the guards,
:class:`~ragcache.semantic.decision.guards.GuardSet`; a learned verifier plugs in at the same seam).
``threshold=1.0`` means exact: only a stored question with the same text is served (after Unicode and
whitespace normalisation alone, :func:`~ragcache.semantic.text.exact_form`: case and symbols count).

The same code runs for every store: :class:`~ragcache.semantic.cache.SemanticCache` (FAISS +
SQLite, embedded) and :class:`~ragcache.semantic.pg_cache.PgSemanticCache` (PostgreSQL + pgvector,
shared). Of ``stores/`` it knows the protocol alone (:mod:`ragcache.semantic.stores.protocol`); the
store's single-flight locks (:class:`~ragcache.semantic.flight.FlightLocks`) and typo corrector
(:class:`~ragcache.semantic.speller.QuerySpeller`) come as arguments. Statistics are counted here;
single flight (:class:`ragcache.answering.AnswerPath`) takes the locks (:meth:`flight_lock` /
:meth:`aflight_lock`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ragcache.semantic.budget import AnswerBudget, merge_metadata, servable
from ragcache.semantic.decision.bound import (
    ErrorBound,
    ErrorBoundAPI,
    Exploration,
    decide_bounded,
)
from ragcache.semantic.decision.checks import (
    DEFAULT_PARTITION,
    DEFAULT_THRESHOLD,
    check_metadata,
    check_threshold,
    check_ttl,
    checked_partition,
    warn_low_threshold,
)
from ragcache.semantic.decision.coverage import (
    GUARD_LANGUAGES,
    CoverageGate,
    GatedDecider,
)
from ragcache.semantic.decision.guards import GuardSet, GuardVerdict
from ragcache.semantic.decision.vcache import add_observation
from ragcache.semantic.embedding import QuestionEmbedder
from ragcache.semantic.flight import LOCAL_LOCKS, FlightLocks
from ragcache.semantic.keying import QuestionKey, question_key
from ragcache.semantic.partition import PartitionKey
from ragcache.semantic.records import Candidate, SemanticHit
from ragcache.semantic.speller import QuerySpeller
from ragcache.semantic.stats import SemanticStats
from ragcache.semantic.stores.protocol import (
    NewEntry,
    Query,
    StoredAnswer,
    VectorAnswerStore,
)
from ragcache.semantic.text import embed_form, normalize_question

if TYPE_CHECKING:
    from ragcache.semantic.answer_cache import AnswerRequest

logger = logging.getLogger("ragcache.semantic")


class Decider(Protocol):
    """What decides a hit among candidates at or above the threshold (the guards, the pair model, the learned
    verifier: what :func:`make_decider` returns)."""

    @property
    def floor(self) -> float | None:
        """The cosine gate below which the decider scores no candidate, the cache's threshold when none is
        given (the pair model's and the learned verifier's); ``None``: none of its own (the guards), the cache
        then uses :data:`DEFAULT_THRESHOLD`."""
        ...

    def check(self, query: str, candidate: str, similarity: float | None = None) -> GuardVerdict: ...


def make_decider(guards: bool | str | GuardSet, verifier: Callable[[str, str], bool | float] | None,
                 embedder: QuestionEmbedder | None = None, *, home: Any = None) -> Decider:
    """What a cache decides hits with.

    - ``True`` (the default): for the packaged all-MiniLM-L6-v2 embedder (the pair model's base), the pair model
      behind the hard vetoes (:class:`~ragcache.semantic.decision.pair_decider.PairDecider`, as ``"pair"``); for
      any other embedder the default :class:`GuardSet` (every guard a veto, at the 0.94 gate, as ``"rules"``). A
      ``ragcache calibrate semantic`` record for ``embedder`` (the learned verifier at the user's own threshold)
      takes precedence. With ``verifier`` given, the guards with ``verifier`` as their last guard.
    - ``"rules"``: the default :class:`GuardSet` alone (the default before the pair model), whatever calibration
      record there is.
    - ``"pair"``: the pair model behind the hard vetoes, for the packaged all-MiniLM-L6-v2 embedder only
      (``ragcache bench pair-model`` measures it; the semantic-cache guide has the figures).
    - ``"verifier"``: the logistic verifier over pair features
      (:func:`ragcache.semantic.decision.verifier.default_verifier`) for the embedder its head was fitted for.
    - ``False``: none (plain cosine); a :class:`GuardSet`: that set, with ``verifier`` appended as its last guard.

    ``home``: the ragcache home the calibration record is read from.

    Raises:
        ValueError: ``"verifier"`` or ``"pair"`` with an embedder its model was not trained for, ``verifier=``
            with either, or an unknown string.
    """
    if isinstance(guards, str):
        if guards == "rules":
            return GuardSet.default(verifier)
        if guards == "pair":
            if verifier is not None:
                raise ValueError("guards='pair' decides alone: pass verifier= with guards=True (it runs last)")
            if embedder is None or not pair_model_fits(embedder):
                raise ValueError("guards='pair' needs the packaged all-MiniLM-L6-v2 embedder (the pair model's base); "
                                 "with another embedder use guards=True, or retrain it with "
                                 "python -m ragcache.app.train_pair_model")
            from ragcache.semantic.decision.pair_decider import PairDecider

            return PairDecider()
        if guards != "verifier":
            raise ValueError(f"guards must be True, False, 'rules', 'pair', 'verifier' or a GuardSet; got {guards!r}")
        from ragcache.semantic.decision.verifier import default_verifier

        learned = default_verifier(embedder, home=home) if embedder is not None else None
        if learned is None:
            raise ValueError("guards='verifier' needs the packaged all-MiniLM-L6-v2 embedder (the head was fitted on "
                             "its vectors); with another embedder use guards=True, or refit the head with "
                             "python -m ragcache.app.fit_verifier")
        if verifier is not None:
            raise ValueError("guards='verifier' decides alone: pass verifier= with guards=True (it runs last)")
        return learned
    if guards is True and verifier is None and embedder is not None:
        from ragcache.semantic.decision.verifier import calibrated_verifier

        calibrated = calibrated_verifier(embedder, home=home)  # the user's own `ragcache calibrate semantic` record
        if calibrated is not None:
            return calibrated
    if guards is True and verifier is None and embedder is not None and pair_model_fits(embedder):
        from ragcache.semantic.decision.pair_decider import PairDecider

        return PairDecider()
    if isinstance(guards, GuardSet):
        return guards if verifier is None else GuardSet([*guards.guards, *GuardSet.default(verifier).guards[-1:]])
    return GuardSet.default(verifier) if guards else GuardSet([])


def pair_model_fits(embedder: QuestionEmbedder) -> bool:
    """Whether the shipped pair model decides for ``embedder``: the packaged all-MiniLM-L6-v2 (by name), whose
    weights are the model's base and whose cosines its floor was chosen on."""
    from ragcache.semantic.decision.pair_model import EMBEDDER_NAME

    return embedder.name.lower().endswith(EMBEDDER_NAME.lower())


def reembedder(embedder: QuestionEmbedder) -> Callable[[list[str]], tuple[np.ndarray, np.ndarray]]:
    """``questions -> (vectors [n, dim], keep [n])`` for re-embedding a store with ``embedder``: a
    stored question that this embedder embeds whole is re-embedded; one it would split or match
    exactly (longer than its window) cannot be re-keyed without the caller's partition and is not kept."""

    def run(questions: list[str]) -> tuple[np.ndarray, np.ndarray]:
        keys = [question_key(q, DEFAULT_PARTITION, embedder) for q in questions]
        keep = np.array([k.mode == "embed" for k in keys], dtype=bool)
        out = np.zeros((len(questions), embedder.dim), np.float32)
        texts = [embed_form(k.text) for k in keys if k.mode == "embed"]
        if texts:
            out[keep] = np.concatenate([embedder.encode(texts[j:j + 256]) for j in range(0, len(texts), 256)])
        return out, keep

    return run


class SemanticPolicy(ErrorBoundAPI):
    """Semantic response cache keyed by (exact partition, question embedding), over ``answer_store``.

    Args:
        answer_store: where entries live (:class:`~ragcache.semantic.stores.protocol.VectorAnswerStore`).
        locks: the single-flight locks (:class:`~ragcache.semantic.flight.FlightLocks`, usually the store's
            ``locks``); default: this process's (:data:`~ragcache.semantic.flight.LOCAL_LOCKS`).
        speller: what corrects a query's typos against its partition's stored words
            (:class:`~ragcache.semantic.speller.QuerySpeller`, usually the store); ``None``: no correction.
        embedder: the resolved :class:`QuestionEmbedder` (the store holds its vectors).
        threshold: default cosine threshold; a hit needs ``similarity >= threshold``; 1.0 = exact only;
            ``None``: the decider's own gate (its ``floor``), else :data:`DEFAULT_THRESHOLD`. One below
            :data:`~ragcache.limits.THRESHOLD_FLOOR` (0.5) is used but warned about
            (:class:`~ragcache.semantic.decision.checks.LowThresholdWarning`), here and in :meth:`lookup`.
        ttl_s: default time to live of an entry in seconds (``None``: no expiry).
        decider: ``check(query, candidate, similarity) -> GuardVerdict`` (a :class:`GuardSet`, or the
            learned :class:`~ragcache.semantic.decision.verifier.LearnedVerifier`).
        candidates: nearest stored questions checked per lookup (best first).
        typo_correction: correct out-of-vocabulary query words against the partition's words.
        store_truncated: store answers cut at their token budget (served then only to the same budget).
        error_bound: an :class:`~ragcache.semantic.decision.bound.ErrorBound` (``max_error``): per-entry
            thresholds learned online (vCache) replace ``threshold``; ``None``: the threshold decides.
        languages: the languages matched by similarity (ISO 639-1 codes; default ``("en",)``, what
            the guards read), or ``"any"``; a question in any other is served only as an exact repeat
            (:class:`~ragcache.semantic.decision.coverage.CoverageGate`, which runs before ``decider``).

    Raises:
        ValueError: a bad threshold or TTL, an unknown language code, or a language other than
            English declared for an English-only embedder.
    """

    def __init__(self, answer_store: VectorAnswerStore, *, embedder: QuestionEmbedder, threshold: float | None,
                 ttl_s: float | None, decider: Decider, candidates: int, typo_correction: bool = True,
                 store_truncated: bool = False, error_bound: ErrorBound | None = None,
                 languages: Sequence[str] | str = GUARD_LANGUAGES, locks: FlightLocks = LOCAL_LOCKS,
                 speller: QuerySpeller | None = None) -> None:
        self.answer_store, self.locks, self.speller = answer_store, locks, speller
        self.embedder = embedder
        if threshold is None:
            threshold = DEFAULT_THRESHOLD if decider.floor is None else decider.floor
        self.threshold, self.ttl_s = check_threshold(threshold), check_ttl(ttl_s)
        warn_low_threshold(self.threshold)
        self.guards = decider
        self.coverage = CoverageGate(embedder, languages)
        self._decision = GatedDecider(self.coverage, decider)  # the one hit decision: coverage, then the decider
        self.candidates, self.typo_correction = candidates, typo_correction
        self.store_truncated = bool(store_truncated)
        self.error_bound = error_bound
        self._stats = SemanticStats()
        self._stats_lock = threading.Lock()
        self._outcome_lock = threading.Lock()
        self._vec_memo: OrderedDict[str, np.ndarray] = OrderedDict()

    # ================================================================= lookup
    def lookup(self, question: str, *, partition: PartitionKey | None = None,
               threshold: float | None = None, max_tokens: int | None = None,
               explore: bool = True, count: bool = True) -> SemanticHit | None:
        """Return the cached answer for ``question`` in ``partition``, or ``None``.

        ``count=False`` leaves the lookup out of :attr:`stats` and the folder's totals: a re-read of a
        request already counted (the answer path's single flight re-reads a miss before calling).

        ``threshold=None`` uses the cache default; any given value (1.0 included) is used as is.
        ``max_tokens`` is the request's new-token budget: a truncated answer is served only to the
        same budget, a complete one of known length only to a budget that holds it (``None``:
        unknown budget, so no truncated answer is served).

        With ``max_error`` (an :attr:`error_bound`), the best candidate the guards accept is served
        or explored by its entry's learned threshold (:mod:`ragcache.semantic.decision.vcache`); a given
        ``threshold`` then overrides it (the static rule for that call). An exploration returns
        ``None`` and, with ``explore=True``, is remembered: the next :meth:`store` of this question
        compares its answer with the entry's and updates the entry's state (:meth:`record_outcome`
        does it for callers who compare themselves; :meth:`pending_exploration` shows it).

        Raises:
            ValueError: empty question, threshold outside [-1, 1], or a negative ``max_tokens``.
            RemoteStoreError: a shared store is unreachable.
        """
        t0 = time.perf_counter()
        t = self.threshold if threshold is None else check_threshold(threshold)
        if threshold is not None:
            warn_low_threshold(t)
        bounded = self.error_bound is not None and threshold is None
        hit, cands, embed_s, explored = self._lookup(question, checked_partition(partition), t,
                                                     max_tokens=max_tokens, bounded=bounded)
        new = explored is not None and explore and self.error_bound.add_pending(*explored)
        lo = self.error_bound.min_similarity if bounded else t
        rejected = [c.verdict.reason for c in cands if c.similarity >= lo and not c.verdict.ok]
        if not count:
            return hit
        with self._stats_lock:
            self._stats.record_lookup(time.perf_counter() - t0, embed_s, rejected, hit is not None,
                                      explored=new)
            if hit is None:
                self.answer_store.counters.lookup_misses += 1
            else:
                self.answer_store.counters.lookup_hits += 1
        return hit

    def lookup_request(self, request: AnswerRequest, *, count: bool = True) -> SemanticHit | None:
        """:meth:`lookup` of a :class:`~ragcache.request.CacheRequest` (its question, partition, threshold and
        budget), the :class:`~ragcache.semantic.answer_cache.AnswerCache` lookup; ``None`` for a request
        without a partition (it has no answer cache). Raises what :meth:`lookup` raises."""
        if request.partition is None:
            return None
        return self.lookup(request.question, partition=request.partition, threshold=request.threshold,
                           max_tokens=request.max_tokens, count=count)

    async def alookup(self, question: str, *, partition: PartitionKey | None = None,
                      threshold: float | None = None, max_tokens: int | None = None,
                      explore: bool = True, count: bool = True) -> SemanticHit | None:
        """Async :meth:`lookup` (same code in a worker thread, same threshold, budget and exploration)."""
        import asyncio  # lazily: the sync hit path never needs it
        return await asyncio.to_thread(self.lookup, question, partition=partition, threshold=threshold,
                                       max_tokens=max_tokens, explore=explore, count=count)

    def candidates_for(self, question: str, *, partition: PartitionKey | None = None,
                       threshold: float | None = None, max_tokens: int | None = None) -> list[Candidate]:
        """The nearest stored questions with similarity, verdict and state (no stats, no LRU touch)."""
        t = self.threshold if threshold is None else check_threshold(threshold)
        return self._lookup(question, checked_partition(partition), t, touch=False, judge_all=True,
                            max_tokens=max_tokens)[1]

    def neighbour_questions(self, question: str, *, namespace: str, k: int = 3,
                            floor: float | None = None) -> list[tuple[str, float]]:
        """Stored questions of ``namespace`` near ``question`` in any partition: ``(question, cosine)``,
        best first, at most ``k``, none below ``floor`` (default: the cache's ``threshold``).

        Questions only: a stored question found here is a way to *retrieve* again (``ragcache ask``
        retrieves with it and looks the request up in the partition it reaches, where the hit decision
        runs as for any lookup); nothing is served from this call. A question embedded only in part
        (a paste, a long question) has no neighbours here (``[]``).

        Raises:
            ValueError: empty question, ``k`` < 1, a bad ``floor``.
            RemoteStoreError: a shared store is unreachable.
        """
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an integer >= 1 (stored questions to return), got {k!r}")
        lo = self.threshold if floor is None else check_threshold(floor)
        key = question_key(normalize_question(question), DEFAULT_PARTITION, self.embedder)
        if key.mode != "embed":
            return []
        vec = self._embed_many([embed_form(key.embed_text)])[0]
        return [(q, s) for q, s in self.answer_store.neighbours(vec, k, namespace=namespace) if s >= lo]

    def key(self, question: str, *, partition: PartitionKey | None = None) -> QuestionKey:
        """How ``question`` is keyed for this cache's embedder (embedded whole, split, or exact only)."""
        return question_key(normalize_question(question), checked_partition(partition), self.embedder)

    def _lookup(self, question: str, pk: PartitionKey, t: float, touch: bool = True,
                judge_all: bool = False, max_tokens: int | None = None, bounded: bool = False
                ) -> tuple[SemanticHit | None, list[Candidate], float, tuple[str, str, Exploration] | None]:
        servable(AnswerBudget(), max_tokens)  # validates max_tokens
        key = question_key(normalize_question(question), pk, self.embedder)
        digest, asked = key.partition.digest, key.text  # ``asked``: before typo correction (as stored)
        if not self.answer_store.may_hold(digest):
            return None, [], 0.0, None
        if key.exact_only:
            t, bounded = 1.0, False
        elif self.typo_correction and self.speller is not None:
            key = key.with_tail(self.speller.correct(digest, key.embed_text, self.embedder.known_words))
        e0 = time.perf_counter()
        vec = self._embed_many([embed_form(key.embed_text)])[0]
        embed_s = time.perf_counter() - e0
        query = Query(digest, vec, key.text)
        rows = self.answer_store.exact(query) if t >= 1.0 else self.answer_store.search(query, self.candidates)
        explored = None
        if bounded:
            hit, cands, exp = decide_bounded(self.error_bound, self._decision, key.text, rows, judge_all, max_tokens,
                                             vec)
            explored = None if exp is None else (digest, asked, exp)
        else:
            hit, cands = self._decide(key.text, rows, t, judge_all, max_tokens)
        if hit is not None and touch:
            try:  # the LRU touch is a write: best effort, the hit never depends on it
                self.answer_store.touch([hit.entry_id])
            except Exception as e:  # noqa: BLE001 - a read-only or full store still serves its answers
                logger.warning("answer store refused the LRU touch of entry %s (%s: %s); served anyway",
                               hit.entry_id, type(e).__name__, e)
        return hit, cands, embed_s, explored

    def _decide(self, q: str, rows: list[StoredAnswer], t: float, judge_all: bool,
                max_tokens: int | None) -> tuple[SemanticHit | None, list[Candidate]]:
        """The first candidate at or above ``t`` whose budget fits and that the decider accepts."""
        cands: list[Candidate] = []
        hit: SemanticHit | None = None
        for r in rows:
            sim = float(r.similarity)
            why = servable(r.budget, max_tokens)
            if why is not None:
                verdict = GuardVerdict("budget", why)
            elif judge_all or (t < 1.0 and sim >= t):
                verdict = self._decision.check(q, r.question, sim)
            else:
                verdict = GuardVerdict()
            cands.append(Candidate(r.id, r.question, sim, verdict, r.state))
            if hit is None and (t >= 1.0 or sim >= t) and verdict.ok:
                hit = SemanticHit(r.answer, sim, r.question, r.id, r.metadata, r.partition, r.budget)
        return hit, cands

    def _embed_many(self, texts: list[str]) -> np.ndarray:
        """Unit embeddings ``[n, dim]``; single queries are memoised (the last 256)."""
        if not texts:
            return np.zeros((0, self.embedder.dim), np.float32)
        if len(texts) == 1:
            with self._stats_lock:
                v = self._vec_memo.get(texts[0])
            if v is not None:
                return v[None, :]
        out = self.embedder.encode(texts)
        if len(texts) <= 4:
            with self._stats_lock:
                for t, v in zip(texts, out):
                    self._vec_memo[t] = v
                    self._vec_memo.move_to_end(t)
                while len(self._vec_memo) > 256:
                    self._vec_memo.popitem(last=False)
        return out

    # ================================================================= writes
    def store(self, question: str, answer: str, *, partition: PartitionKey | None = None,
              metadata: Mapping[str, Any] | None = None, ttl_s: float | None = None,
              finish_reason: str | None = None, max_tokens: int | None = None,
              output_tokens: int | None = None, store_truncated: bool | None = None) -> int | None:
        """Store ``answer`` for ``question`` in ``partition``; returns the entry id.

        A stored question with the same words in the same partition is replaced. ``finish_reason``,
        ``max_tokens`` (the budget it was generated under) and ``output_tokens`` describe how the
        answer ended: a truncated answer (``"length"`` / ``"max_tokens"``) is not stored unless the
        cache has ``store_truncated=True`` (or this call passes ``store_truncated=True``: an entry
        point's own budget rule), and then ``None`` is returned.

        Raises:
            ValueError: empty question, non-str answer, ``ttl_s <= 0``, metadata not JSON-like,
                negative token counts; nothing is stored or removed then.
            RemoteStoreError: a shared store is unreachable (nothing of this call was committed).
        """
        ids = self._store([(question, answer)], partition=partition, metadata=metadata, ttl_s=ttl_s,
                          finish_reason=finish_reason, max_tokens=max_tokens, output_tokens=output_tokens,
                          single=True, store_truncated=store_truncated)
        return ids[0] if ids else None

    def store_request(self, request: AnswerRequest, answer: str, *, finish_reason: str | None = None,
                      output_tokens: int | None = None, metadata: Mapping[str, Any] | None = None,
                      ttl_s: float | None = None, store_truncated: bool | None = None) -> int | None:
        """:meth:`store` of ``answer`` for a :class:`~ragcache.request.CacheRequest` (its question and
        partition, its ``max_tokens`` as the budget the answer was generated under), the
        :class:`~ragcache.semantic.answer_cache.AnswerCache` store; ``None`` (nothing stored) for a request
        without a partition. Raises what :meth:`store` raises."""
        if request.partition is None:
            return None
        return self.store(request.question, answer, partition=request.partition, metadata=metadata, ttl_s=ttl_s,
                          finish_reason=finish_reason, max_tokens=request.max_tokens, output_tokens=output_tokens,
                          store_truncated=store_truncated)

    async def astore(self, question: str, answer: str, *, partition: PartitionKey | None = None,
                     metadata: Mapping[str, Any] | None = None, ttl_s: float | None = None,
                     finish_reason: str | None = None, max_tokens: int | None = None,
                     output_tokens: int | None = None, store_truncated: bool | None = None) -> int | None:
        """Async :meth:`store`."""
        import asyncio  # lazily: the sync hit path never needs it
        return await asyncio.to_thread(self.store, question, answer, partition=partition, metadata=metadata,
                                       ttl_s=ttl_s, finish_reason=finish_reason, max_tokens=max_tokens,
                                       output_tokens=output_tokens, store_truncated=store_truncated)

    def store_many(self, items: Sequence[tuple[str, str]], *, partition: PartitionKey | None = None,
                   metadata: Mapping[str, Any] | None = None, ttl_s: float | None = None,
                   vectors: np.ndarray | None = None, finish_reason: str | None = None,
                   max_tokens: int | None = None, output_tokens: int | None = None) -> list[int]:
        """Store many (question, answer) pairs in one transaction and one embedding batch.

        ``vectors`` (float32 ``[n, dim]``) skips embedding: precomputed embeddings of the questions'
        :func:`~ragcache.semantic.text.embed_form` from this cache's embedder (bulk warm-up). Rows are
        re-normalised; rows of questions longer than the embedder's window are recomputed (only their
        last sentence is embedded). The budget arguments apply to every item (see :meth:`store`);
        returns ``[]`` when truncated answers are not stored.
        """
        return self._store(items, partition=partition, metadata=metadata, ttl_s=ttl_s, vectors=vectors,
                           finish_reason=finish_reason, max_tokens=max_tokens, output_tokens=output_tokens)

    def _store(self, items: Sequence[tuple[str, str]], *, partition: PartitionKey | None,
               metadata: Mapping[str, Any] | None, ttl_s: float | None, vectors: np.ndarray | None = None,
               finish_reason: str | None, max_tokens: int | None, output_tokens: int | None,
               single: bool = False, store_truncated: bool | None = None) -> list[int]:
        pk = checked_partition(partition)
        ttl = self.ttl_s if ttl_s is None else check_ttl(ttl_s)
        budget = AnswerBudget(finish_reason, max_tokens, output_tokens)
        keys = [question_key(normalize_question(q), pk, self.embedder) for q, _ in items]
        for _, a in items:
            if not isinstance(a, str):
                raise TypeError(f"answer must be a str, got {type(a).__name__}")
        meta = check_metadata(metadata)  # before anything is written: the store below must not fail half-way
        merge_metadata(meta, budget)  # refuses the reserved key
        if budget.truncated and not (self.store_truncated if store_truncated is None else store_truncated):
            logger.debug("semantic cache: not storing %d truncated answer(s) (finish_reason=%r)", len(items),
                         finish_reason)
            return []
        states: list[dict | None] = [None] * len(items)
        if self.error_bound is not None:  # pending explorations of these questions learn their outcome
            resolved = [self._resolve(q, a, pk) for q, a in items]
            if single and resolved[0] is not None and resolved[0][0] and not self.error_bound.store_explored:
                return [resolved[0][1].entry_id]  # vCache: a correct exploration adds no entry
            states = [None if r is None else add_observation(None, r[1].similarity, r[0]) for r in resolved]
        vecs = self._vectors(keys, vectors)
        entries = [NewEntry(k.partition, k.text, a, meta, budget, v, ttl, st)  # the observation is symmetric
                   for k, (_, a), v, st in zip(keys, items, vecs, states, strict=True)]
        res = self.answer_store.put_many(entries)
        with self._stats_lock:
            self._stats.stores += len(res.ids)
        return res.ids

    def _vectors(self, keys: list[QuestionKey], vectors: np.ndarray | None) -> np.ndarray:
        if vectors is None:
            return self._embed_many([embed_form(k.embed_text) for k in keys])
        vecs = np.asarray(vectors, dtype=np.float32)
        if vecs.shape != (len(keys), self.embedder.dim):
            raise ValueError(f"vectors must be [{len(keys)}, {self.embedder.dim}], got {vecs.shape}")
        vecs = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
        long = [j for j, k in enumerate(keys) if k.mode != "embed"]
        if long:
            vecs[long] = self._embed_many([embed_form(keys[j].embed_text) for j in long])
        return vecs

    def update_state(self, entry_id: int, state: Mapping[str, Any] | None) -> bool:
        """Replace entry ``entry_id``'s decision state (a JSON object, e.g. a per-entry threshold and
        its evidence, as vCache keeps; ``None`` clears it). Every process sees it with the entry's
        candidates (:attr:`Candidate.state`). Returns False when the entry no longer exists.

        Raises:
            ValueError: ``state`` is not a JSON-like dict or None.
        """
        return self.answer_store.update_state(int(entry_id), None if state is None else check_metadata(state))

    def invalidate(self, document: str) -> int:
        """Drop every answer built from ``document`` (a document id, a content hash, or the text), in
        every process that shares the store. Returns the number of entries removed."""
        from ragcache.hashing import content_hash

        if not isinstance(document, str):
            raise TypeError(f"invalidate needs a document id, content hash or text (a non-empty str); got "
                            f"{type(document).__name__}")
        if not document.strip():
            raise ValueError(f"invalidate needs a document id, content hash or text (a non-empty str); got {document!r:.80}")
        n = self.answer_store.remove_documents({document, content_hash(document)})
        with self._stats_lock:
            self._stats.invalidations += n
        return n

    def clear(self, namespace: str | None = None) -> int:
        """Drop every entry (``namespace=None``) or every entry of one namespace. Returns the count removed.

        Raises:
            TypeError: ``namespace`` is neither a str nor None (nothing is removed).
        """
        if namespace is not None and not isinstance(namespace, str):
            raise TypeError(f"namespace must be a str (one namespace) or None (every entry), got "
                            f"{type(namespace).__name__} {namespace!r:.40}")
        n = self.answer_store.remove_namespace(namespace)
        with self._stats_lock:
            self._stats.invalidations += n
        return n

    def purge_expired(self) -> int:
        """Remove entries past their TTL now (lookups skip them anyway). Returns the count removed."""
        return self.answer_store.expire()

    # ================================================================= single flight
    def warm(self) -> None:
        """Load what the first lookup would load (a lazily loaded embedder), so that load is not paid inside a
        lookup's deadline. Idempotent; the answer path calls it once before its first lookup or store.

        Raises:
            whatever the embedder's load raises (a model that cannot be loaded offline).

        The pair model (the default decision) is not loaded here: an exact repeat never needs it, and its load
        (about 0.7 s at one thread) is paid by the first lookup that does, well inside the lookup deadline."""
        self.embedder.warm()

    @contextmanager
    def flight_lock(self, key: str, timeout_s: float) -> Iterator[bool]:
        """The single-flight lock named by hex ``key`` (this policy's ``locks``; yields False after ``timeout_s``)."""
        with self.locks.hold(key, timeout_s) as locked:
            yield locked

    @asynccontextmanager
    async def aflight_lock(self, key: str, timeout_s: float) -> AsyncIterator[bool]:
        """Async :meth:`flight_lock`, waited for on the event loop."""
        async with self.locks.ahold(key, timeout_s) as locked:
            yield locked

    # ================================================================= housekeeping
    @property
    def stats(self) -> SemanticStats:
        """A snapshot of the counters (see :class:`SemanticStats`)."""
        with self._stats_lock:
            out = self._stats.copy()
        out.evictions += self.answer_store.counters.evictions
        out.expirations += self.answer_store.counters.expirations
        return out

    def __len__(self) -> int:
        return len(self.answer_store)

    def flush(self) -> None:
        """Write what the store keeps lazily (index snapshots, access times)."""
        self.answer_store.flush()

    def close(self) -> None:
        """Flush and close the store. The cache must not be used afterwards."""
        self.answer_store.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
