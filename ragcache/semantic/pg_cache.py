"""PgSemanticCache: the semantic cache in PostgreSQL + pgvector, shared by every process that opens it.

The same policy as :class:`~ragcache.semantic.cache.SemanticCache` (it is
:class:`~ragcache.semantic.decision.policy.SemanticPolicy`: long-question keying, typo correction, answer
budget, guards with the similarity, statistics, single flight) over a
:class:`~ragcache.semantic.stores.pg_store.PgAnswerStore`: no entry is held in the process, so another
process's store or ``invalidate`` is seen on the next lookup, and single flight spans every
process on the database (its :meth:`flight_lock` is a session advisory lock per (partition, question)).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ragcache.semantic.budget import AnswerBudget
from ragcache.semantic.decision.bound import error_bound
from ragcache.semantic.decision.coverage import GUARD_LANGUAGES, CoverageGate
from ragcache.semantic.decision.checks import check_count, checked_partition
from ragcache.semantic.embedding import resolve_embedder
from ragcache.semantic.decision.guards import GuardSet
from ragcache.semantic.keying import question_key
from ragcache.semantic.partition import PartitionKey
from ragcache.semantic.stores.pg_store import PgAnswerStore
from ragcache.semantic.decision.policy import SemanticPolicy, make_decider
from ragcache.semantic.stores.protocol import NewEntry
from ragcache.semantic.text import normalize_question


class PgSemanticCache(SemanticPolicy):
    """Semantic response cache in PostgreSQL + pgvector.

    Args:
        url: ``postgresql://user[:password]@host:port/database``; the role needs ``CREATE`` on the
            database (or the ``vector`` extension and the schema created beforehand).
        schema: PostgreSQL schema holding ragcache's tables (one per embedder / deployment).
        embedder, threshold, ttl_s, guards, verifier, candidates, typo_correction, store_truncated,
        max_error, equivalence, error_scope, home, languages: as for :class:`~ragcache.semantic.cache.SemanticCache`
            (the per-entry state of ``max_error`` lives in the entries' ``state`` column).
        max_entries: LRU capacity over the whole schema, enforced after each store.
        ef_search: HNSW search beam (``hnsw.ef_search``); ``hnsw_m`` / ``ef_construction`` build it.
        pool_size: connections this process opens at most (a caller beyond them waits; plus one for the
            single-flight locks): what any burst takes of the server's ``max_connections``.

    Raises:
        ValueError: bad arguments (a language other than English with the packaged English embedder
            among them), or the schema holds a cache built with another embedder.
        RemoteStoreError: the server cannot be reached.
        ImportError: ``psycopg`` / ``pgvector`` missing (``pip install 'ragcache[shared]'``).
    """

    def __init__(self, url: str, *, schema: str = "ragcache", embedder: Any = None,
                 threshold: float | None = None, max_entries: int = 1_000_000, ttl_s: float | None = None,
                 guards: bool | str | GuardSet = True, verifier: Callable[[str, str], bool | float] | None = None,
                 candidates: int = 4, ef_search: int = 40, hnsw_m: int = 16, ef_construction: int = 64,
                 pool_size: int = 4, typo_correction: bool = True, store_truncated: bool = False,
                 max_error: float | None = None, equivalence: Any = "exact",
                 error_scope: str = "hits", home: Any = None,
                 languages: Sequence[str] | str = GUARD_LANGUAGES) -> None:
        self.max_entries = check_count("max_entries", max_entries)
        candidates = check_count("candidates", candidates)
        ef_search = check_count("ef_search", ef_search)
        emb = resolve_embedder(embedder)
        bound = error_bound(max_error, equivalence, error_scope, emb)  # checked before the store opens
        CoverageGate(emb, languages)  # checked before the store opens too
        decider = make_decider(guards, verifier, emb, home=home)
        self.url, self.schema = url, schema
        store = PgAnswerStore(url, embedder=emb, schema=schema, max_entries=self.max_entries, ef_search=ef_search,
                              hnsw_m=hnsw_m, ef_construction=ef_construction, pool_size=pool_size)
        super().__init__(store, embedder=emb, threshold=threshold, ttl_s=ttl_s, decider=decider,
                         candidates=candidates, typo_correction=typo_correction, store_truncated=store_truncated,
                         error_bound=bound, languages=languages, locks=store.locks, speller=store)
        self.ef_search = ef_search

    def search(self, vec: np.ndarray, partition: PartitionKey | None = None, k: int | None = None) -> list[tuple]:
        """Raw nearest-neighbour query: ``[(id, question, answer, metadata, similarity)]`` best first.

        ``vec`` is a unit float32 ``[dim]`` embedding; expired rows are skipped. (Benchmarks time this.)
        """
        return self.answer_store.nearest(vec, checked_partition(partition).digest, k or self.candidates)

    def bulk_load(self, items: Sequence[tuple[str, str]], *, vectors: np.ndarray,
                  partition: PartitionKey | None = None, metadata: Mapping[str, Any] | None = None,
                  maintenance_work_mem: str = "512MB") -> int:
        """Warm-up: load many entries with ``COPY`` and build the HNSW index once, afterwards.

        pgvector builds an HNSW index much faster than it inserts into one row by row (measured
        here: ~6 ms per row inserted into a 384-d index on a loaded 2-core CPU). The index is
        dropped and rebuilt inside one transaction, which locks the table: run this before
        serving, not beside live traffic. Questions already stored are replaced. ``vectors``:
        float32 ``[n, dim]`` embeddings of the questions' embedded form (questions longer than
        the embedder's window are re-embedded, as :meth:`store_many` does). Returns the rows loaded.

        Raises:
            ValueError: ``vectors`` of the wrong shape, metadata not JSON-like.
        """
        pk = checked_partition(partition)
        keys = [question_key(normalize_question(q), pk, self.embedder) for q, _ in items]
        vecs = self._vectors(keys, vectors)
        meta = dict(metadata or {})
        entries = [NewEntry(k.partition, k.text, a, meta, AnswerBudget(), v)
                   for k, (_, a), v in zip(keys, items, vecs, strict=True)]
        n = self.answer_store.bulk_load(entries, maintenance_work_mem)
        with self._stats_lock:
            self._stats.stores += n
        return n
