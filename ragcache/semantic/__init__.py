"""Semantic response cache: answers a question already answered in other words, never a different one.

One policy (:class:`SemanticPolicy`) over a :class:`VectorAnswerStore`: FAISS + SQLite
(:class:`SemanticCache`, embedded) or PostgreSQL + pgvector (``pg_cache.PgSemanticCache``, shared).
Embeds the question alone; everything else (namespace, model and generation
parameters, system text, tools, history, documents' content hashes) is an exact
:class:`PartitionKey`. FAISS finds the nearest stored questions; a hit needs
cosine ``>= threshold`` and every guard (numbers, negation, question type,
antonyms, scope, entities, direction, substitution, optional verifier) to pass.
A question longer than the embedder's window is matched exactly up to its last
sentence (:mod:`ragcache.semantic.keying`); an answer cut at its token budget is
not stored by default and never served to another budget (:mod:`ragcache.semantic.budget`).

    from ragcache.semantic import SemanticCache, partition_key

    cache = SemanticCache("~/.cache/ragcache/semantic")
    pk = partition_key(namespace="acme", model=fingerprint, params={"temperature": 0.0, "max_tokens": 128},
                       system=system_text, documents=[doc_text_1, doc_text_2])
    hit = cache.lookup("How do I reset my password?", partition=pk)
    if hit is None:
        cache.store("How do I reset my password?", answer, partition=pk)
"""

from ragcache.semantic.budget import AnswerBudget
from ragcache.semantic.cache import (
    DEFAULT_THRESHOLD,
    Candidate,
    SemanticCache,
    SemanticHit,
)
from ragcache.semantic.embedding import QuestionEmbedder, resolve_embedder
from ragcache.semantic.flight import FlightLocks
from ragcache.semantic.decision.guards import (
    ANTONYM_PAIRS,
    GUARD_REASONS,
    GUARDS,
    SCOPE_GROUPS,
    AntonymGuard,
    DirectionGuard,
    EntityGuard,
    Guard,
    GuardKind,
    GuardSet,
    GuardVerdict,
    NegationGuard,
    NumberGuard,
    ScopeGuard,
    SubstitutionGuard,
    VerifierGuard,
)
from ragcache.semantic.stores.faiss_store import FaissAnswerStore
from ragcache.semantic.keying import QuestionKey, question_key
from ragcache.semantic.decision.lexicon import Lexicon, LexiconUnavailable, lexicon
from ragcache.semantic.partition import PartitionKey, partition_key
from ragcache.semantic.decision.policy import SemanticPolicy
from ragcache.semantic.stores.protocol import NewEntry, PutResult, Query, StoredAnswer, VectorAnswerStore
from ragcache.semantic.decision.qtype import QuestionTypeGuard, question_type
from ragcache.semantic.speller import QuerySpeller
from ragcache.semantic.stats import SemanticStats
from ragcache.semantic.text import normalize_question
from ragcache.semantic.decision.checks import THRESHOLD_FLOOR, LowThresholdWarning

__all__ = [
    "ANTONYM_PAIRS",
    "DEFAULT_THRESHOLD",
    "GUARDS",
    "GUARD_REASONS",
    "SCOPE_GROUPS",
    "THRESHOLD_FLOOR",
    "AnswerBudget",
    "AntonymGuard",
    "Candidate",
    "DirectionGuard",
    "EntityGuard",
    "FaissAnswerStore",
    "FlightLocks",
    "Guard",
    "GuardKind",
    "GuardSet",
    "GuardVerdict",
    "Lexicon",
    "LowThresholdWarning",
    "LexiconUnavailable",
    "NegationGuard",
    "NewEntry",
    "NumberGuard",
    "PartitionKey",
    "PutResult",
    "Query",
    "QuerySpeller",
    "QuestionEmbedder",
    "QuestionKey",
    "QuestionTypeGuard",
    "ScopeGuard",
    "SemanticCache",
    "SemanticHit",
    "SemanticPolicy",
    "SemanticStats",
    "StoredAnswer",
    "SubstitutionGuard",
    "VectorAnswerStore",
    "VerifierGuard",
    "lexicon",
    "normalize_question",
    "partition_key",
    "question_key",
    "question_type",
    "resolve_embedder",
]
