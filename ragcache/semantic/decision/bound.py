"""ErrorBound: a semantic cache's user-set error bound (``max_error``), the stateful half of
:mod:`ragcache.semantic.decision.vcache`.

It holds what a lookup under the bound needs between the lookup and the fresh answer:

- the *pending explorations*: a lookup that falls in the uncertain band returns a miss and records
  (partition, question) -> (entry, similarity, cached answer); when the caller stores the fresh
  answer for that question (every entry point stores after a miss), :meth:`ErrorBoundAPI.resolve`
  compares the two answers by the *equivalence* and the policy appends the observation to the
  entry's state (persisted by the store: SQLite or PostgreSQL);
- the pooled observations of this process, binned (the prior of every entry's sigmoid);
- the hit error budget (``scope="hits"``: the summed expected errors of the hits served);
- the random draws (a seeded ``random.Random``: runs are reproducible).

Equivalence (:func:`make_equivalence`): ``"exact"`` (normalised exact match of the answers),
``"embedding"`` (cosine of the two answers' embeddings, from the cache's embedder, ``>=``
:data:`EMBEDDING_EQUIVALENCE`), or a callable ``(fresh_answer, cached_answer) -> bool`` (a judge,
e.g. the user's own LangChain / LlamaIndex model).
"""

from __future__ import annotations

import random
import re
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ragcache.semantic.budget import servable
from ragcache.semantic.decision.checks import checked_partition
from ragcache.semantic.decision.guards import GuardVerdict
from ragcache.semantic.decision.vcache import (
    POOL_WEIGHT,
    Pool,
    Scope,
    add_observation,
    check_max_error,
    check_scope,
    should_explore,
)
from ragcache.semantic.keying import question_key
from ragcache.semantic.records import Candidate, SemanticHit
from ragcache.semantic.stores.protocol import Query, StoredAnswer
from ragcache.semantic.text import normalize_question

EMBEDDING_EQUIVALENCE = 0.90
"""Answer-embedding cosine at or above which ``equivalence="embedding"`` calls two answers the same."""

PENDING_TTL_S = 3600.0
"""Seconds a pending exploration waits for its fresh answer before it is dropped."""

MAX_PENDING = 10_000
"""Pending explorations kept (the oldest dropped first)."""

Equivalence = Callable[[str, str], bool]

_BINS = 400
_CENTRES = -1.0 + (np.arange(_BINS) + 0.5) * (2.0 / _BINS)

_PUNCT = re.compile(r"[^\w\s]")
_WS = re.compile(r"\s+")


def normalize_answer(text: str) -> str:
    """NFKC, lower case, punctuation dropped, whitespace collapsed (for ``equivalence="exact"``)."""
    t = unicodedata.normalize("NFKC", text).lower()
    return _WS.sub(" ", _PUNCT.sub(" ", t)).strip()


def make_equivalence(equivalence: Any, embedder: Any = None) -> Equivalence:
    """The answer equivalence named by ``equivalence``: ``"exact"``, ``"embedding"`` (needs
    ``embedder`` with ``encode(list[str]) -> [n, dim]`` unit rows) or a callable ``(a, b) -> bool``.

    Raises:
        ValueError: an unknown name or a non-callable object.
    """
    if equivalence == "exact":
        return lambda a, b: normalize_answer(a) == normalize_answer(b)
    if equivalence == "embedding":
        if embedder is None:
            raise ValueError("equivalence='embedding' needs the cache's embedder")

        def same(a: str, b: str) -> bool:
            if normalize_answer(a) == normalize_answer(b):
                return True
            v = np.asarray(embedder.encode([a, b]), dtype=np.float32)
            return float(v[0] @ v[1]) >= EMBEDDING_EQUIVALENCE

        return same
    if callable(equivalence) and not isinstance(equivalence, str):
        return lambda a, b: bool(equivalence(a, b))
    raise ValueError(f"equivalence must be 'exact' (normalised exact match), 'embedding' (answer-embedding "
                     f"cosine >= {EMBEDDING_EQUIVALENCE}) or a callable (fresh_answer, cached_answer) -> bool; "
                     f"got {equivalence!r:.80}")


@dataclass(frozen=True, slots=True)
class Exploration:
    """A lookup that explored: ``entry_id``'s answer was not served for the question at ``similarity``
    (cosine in [-1, 1]); ``cached_answer`` is compared with the fresh one when it is stored.
    ``entry_question``, ``partition`` (digest) and ``vector`` (the query's unit embedding ``[dim]``)
    re-read the entry's latest state; ``created`` is ``time.monotonic()`` seconds."""

    entry_id: int
    entry_question: str
    similarity: float
    cached_answer: str
    partition: str
    state: Mapping[str, Any] | None
    created: float
    vector: np.ndarray | None = None


class ErrorBound:
    """The decision and bookkeeping behind ``max_error`` (see the module doc).

    Args:
        max_error: error rate in (0, 1) the cache keeps among served hits (``scope="hits"``) or per
            lookup (``scope="lookups"``, vCache's definition).
        equivalence: ``"exact"``, ``"embedding"`` or a callable ``(fresh, cached) -> bool``.
        embedder: the cache's embedder (for ``"embedding"``).
        scope: ``"hits"`` or ``"lookups"``.
        min_similarity: cosine below which a candidate is a plain miss (no exploration recorded).
        pool_weight: pseudo-observations the pooled evidence of all entries counts for in one
            entry's fit (:data:`~ragcache.semantic.decision.vcache.POOL_WEIGHT`; 0: each entry alone, as vCache).
        store_explored: store a question whose exploration found the cached answer correct as an
            entry of its own (True: its verbatim repeats then hit; False, as vCache: it adds no entry).
        seed: seed of the exploration draws.

    Raises:
        ValueError: ``max_error`` outside (0, 1), an unknown ``equivalence`` or ``scope``,
            ``min_similarity`` outside [-1, 1].
    """

    def __init__(self, max_error: float, *, equivalence: Any = "exact", embedder: Any = None,
                 scope: str = "hits", min_similarity: float = 0.5, pool_weight: float = POOL_WEIGHT,
                 store_explored: bool = True,
                 seed: int | None = 0) -> None:
        bound = check_max_error(max_error)
        if bound is None:
            raise ValueError("ErrorBound needs max_error in (0, 1)")
        if isinstance(min_similarity, bool) or not isinstance(min_similarity, (int, float)) \
                or not -1.0 <= float(min_similarity) <= 1.0:
            raise ValueError(f"min_similarity must be a cosine in [-1, 1], got {min_similarity!r}")
        self.max_error, self.scope = bound, check_scope(scope)
        self.min_similarity = float(min_similarity)
        self.store_explored = bool(store_explored)
        self.equivalence = make_equivalence(equivalence, embedder)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._pending: OrderedDict[tuple[str, str], Exploration] = OrderedDict()
        self.pool_weight = float(pool_weight)
        self._bins = np.zeros((2, _BINS))  # [wrong, correct] counts per similarity bin over [-1, 1]
        self._spent, self._var, self._hits = 0.0, 0.0, 0  # error budget: sums of 1 - a, a (1 - a) over hits

    def explore(self, state: Mapping[str, Any] | None, similarity: float) -> bool:
        """Whether a lookup at ``similarity`` against an entry with ``state`` explores (a miss); a
        served one is charged to the error budget (:func:`~ragcache.semantic.decision.vcache.explore_probability`)."""
        with self._lock:
            u = self._rng.random()
            pool, spent, hits, var = self.pool(), self._spent, self._hits, self._var
        explore, alpha = should_explore(state, similarity, self.max_error, u, pool=pool, scope=self.scope,
                                        pool_weight=self.pool_weight, spent=spent, hits=hits, var=var)
        if not explore:
            with self._lock:
                self._spent += 1.0 - alpha
                self._var += alpha * (1.0 - alpha)
                self._hits += 1
        return explore

    def served_same_words(self) -> None:
        """Account a hit on a stored question with the same words (certain: costs no error budget)."""
        with self._lock:
            self._hits += 1

    def pool(self) -> Pool | None:
        """This process's pooled observations, binned (``None`` before the first)."""
        used = self._bins.sum(axis=0) > 0
        if not used.any():
            return None
        return Pool(_CENTRES[used], self._bins[1, used].copy(), self._bins[0, used].copy())

    def add_pending(self, partition: str, question: str, exploration: Exploration) -> bool:
        """Remember ``exploration`` for (partition digest, keyed question text); False when one was
        already waiting for that question (the same request looked up twice, as single flight does)."""
        with self._lock:
            old = self._pending.get((partition, question))
            self._pending[(partition, question)] = exploration
            self._pending.move_to_end((partition, question))
            while len(self._pending) > MAX_PENDING:
                self._pending.popitem(last=False)
        return old is None or exploration.created - old.created > PENDING_TTL_S

    def pending(self, partition: str, question: str, *, pop: bool = False) -> Exploration | None:
        """The live pending exploration for (partition digest, keyed question), or ``None``."""
        with self._lock:
            e = self._pending.pop((partition, question), None) if pop else self._pending.get((partition, question))
        if e is not None and time.monotonic() - e.created > PENDING_TTL_S:
            return None
        return e

    def observe(self, state: Mapping[str, Any] | None, similarity: float, correct: bool) -> dict[str, Any]:
        """The entry's new state with the observation, which also joins the pooled observations."""
        b = min(_BINS - 1, max(0, int((float(similarity) + 1.0) / 2.0 * _BINS)))
        with self._lock:
            self._bins[1 if correct else 0, b] += 1
        return add_observation(state, similarity, correct)


def error_bound(max_error: Any, equivalence: Any = "exact", scope: Any = "hits",
                embedder: Any = None) -> ErrorBound | None:
    """The :class:`ErrorBound` a cache's ``max_error`` / ``equivalence`` / ``error_scope`` arguments
    name, or ``None`` for ``max_error=None`` (the arguments are checked either way).

    Raises:
        ValueError: ``max_error`` outside (0, 1), an unknown ``equivalence`` or ``scope``.
    """
    if check_max_error(max_error) is None:
        make_equivalence(equivalence, embedder)
        check_scope(scope)
        return None
    return ErrorBound(max_error, equivalence=equivalence, embedder=embedder, scope=scope)


def decide_bounded(bound: ErrorBound, decider: Any, q: str, rows: list[StoredAnswer], judge_all: bool,
                   max_tokens: int | None, vector: np.ndarray | None = None
                   ) -> tuple[SemanticHit | None, list[Candidate], Exploration | None]:
    """The decision under ``max_error`` over the store's nearest ``rows`` (best first).

    A stored question with the same words is served. Otherwise the first candidate whose budget
    fits, whose similarity is ``>= bound.min_similarity`` and that ``decider`` (the guards) accepts
    decides alone: served, or explored (no hit; the returned :class:`Exploration` names it) by its
    entry's learned threshold. A guard's rejection is a miss and is never explored.
    """
    cands: list[Candidate] = []
    hit: SemanticHit | None = None
    explored: Exploration | None = None
    decided = False
    for r in rows:
        sim = float(r.similarity)
        why = servable(r.budget, max_tokens)
        same_words = r.question == q
        if why is not None:
            verdict = GuardVerdict("budget", why)
        elif same_words:
            verdict = GuardVerdict()
        elif judge_all or (not decided and sim >= bound.min_similarity):
            verdict = decider.check(q, r.question, sim)
        else:
            verdict = GuardVerdict()
        cands.append(Candidate(r.id, r.question, sim, verdict, r.state))
        if decided or why is not None or not verdict.ok or not (same_words or sim >= bound.min_similarity):
            continue
        decided = True
        if same_words:
            bound.served_same_words()
        if same_words or not bound.explore(r.state, sim):
            hit = SemanticHit(r.answer, sim, r.question, r.id, r.metadata, r.partition, r.budget)
        else:
            explored = Exploration(r.id, r.question, sim, r.answer, r.partition, r.state, time.monotonic(), vector)
    return hit, cands, explored


class ErrorBoundAPI:
    """The ``max_error`` half of :class:`~ragcache.semantic.decision.policy.SemanticPolicy` (mixed in): pending
    explorations, outcomes, resolution at store time. Uses the policy's ``error_bound``,
    ``answer_store``, ``embedder`` and locks."""

    error_bound: ErrorBound | None
    answer_store: Any
    embedder: Any
    _stats: Any
    _stats_lock: Any
    _outcome_lock: Any

    def pending_exploration(self, question: str, *, partition: Any = None) -> Exploration | None:
        """The exploration a lookup of ``question`` left waiting for its fresh answer, or ``None``
        (also without ``max_error``)."""
        if self.error_bound is None:
            return None
        key = question_key(normalize_question(question), checked_partition(partition), self.embedder)
        return self.error_bound.pending(key.partition.digest, key.text)

    def record_outcome(self, exploration: Exploration, correct: bool) -> bool:
        """Append ``(exploration.similarity, correct)`` to the explored entry's state (re-read from the
        store first, so concurrent observations are kept; persisted in SQLite / PostgreSQL), for
        callers who compare answers themselves. Returns False when the entry no longer exists.

        Raises:
            ValueError: the cache has no ``max_error``.
        """
        if self.error_bound is None:
            raise ValueError("record_outcome needs a cache built with max_error=... (e.g. 0.02)")
        vec = exploration.vector if exploration.vector is not None else np.zeros(self.embedder.dim, np.float32)
        with self._stats_lock:
            self._stats.record_outcome(bool(correct))
        with self._outcome_lock:
            rows = self.answer_store.exact(Query(exploration.partition, vec, exploration.entry_question))
            latest = next((r for r in rows if r.id == exploration.entry_id), None)
            if latest is None:
                return False
            state = self.error_bound.observe(latest.state, exploration.similarity, bool(correct))
            return self.answer_store.update_state(exploration.entry_id, state)

    def resolve(self, question: str, answer: str, *, partition: Any = None) -> bool | None:
        """Compare the fresh ``answer`` for ``question`` with the answer its pending exploration did
        not serve (the cache's ``equivalence``) and record the outcome; ``None`` when nothing was
        pending. :meth:`SemanticCache.store <ragcache.semantic.cache.SemanticCache.store>` does this; call it when you answer a question without storing it."""
        got = self._resolve(question, answer, checked_partition(partition))
        return None if got is None else got[0]

    def _resolve(self, question: str, answer: str, pk: Any) -> tuple[bool, Exploration] | None:
        if self.error_bound is None:
            return None
        key = question_key(normalize_question(question), pk, self.embedder)
        exp = self.error_bound.pending(key.partition.digest, key.text, pop=True)
        if exp is None:
            return None
        correct = self.error_bound.equivalence(answer, exp.cached_answer)
        self.record_outcome(exp, correct)
        return correct, exp
