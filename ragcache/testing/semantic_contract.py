"""The semantic-cache contract suite: every behaviour a cache must show, whichever store it runs over.

Use it as langchain-tests' standard suites are used: subclass :class:`SemanticCacheContract` in a
test module (the subclass's name starts with ``Test``) and give it an ``open_cache`` fixture that
returns a factory ``open_cache(**kwargs) -> cache``. Each call opens a *new* cache object over the
*same* store (the same folder, or the same PostgreSQL schema), as another process would; keyword
arguments are the cache's (``threshold``, ``ttl_s``, ``max_entries``, ``store_truncated``,
``guards``, ``embedder`` ...). The fixture closes what it opened and empties the store afterwards.
ragcache runs it against FAISS + SQLite and PostgreSQL + pgvector (``tests/integration/test_semantic_contract.py``).

The embedder is :class:`~ragcache.testing.HashingEmbedder` (64 buckets) unless a test passes another.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from ragcache.semantic.decision.guards import Guard, GuardSet
from ragcache.prompt.layout import PromptLayout
from ragcache.request import CacheRequest, cache_request
from ragcache.semantic.partition import PartitionKey
from ragcache.testing import HashingEmbedder

Opener = Callable[..., Any]



def partition_of(namespace: str, model: str, documents: list[Any] | tuple[Any, ...] = ()) -> PartitionKey:
    """The partition of a request for ``documents`` by tenant ``namespace`` to ``model`` (the one keyer's)."""
    layout = PromptLayout.build(question="contract question", documents=documents, lint="off")
    pk = cache_request("contract question", layout, tenant=namespace, model=model).partition
    assert pk is not None
    return pk


DOC = {"id": "refund-policy", "text": "Refunds take 5 days."}
PK = partition_of("contract", "m", [DOC])
OTHER_NS = partition_of("other-tenant", "m", [{"id": "shipping", "text": "Ships Monday."}])
PASTE = " ".join(f"2024-07-26 ERROR worker-{i} failed to connect to db-{i}.internal port 5432 timeout."
                 for i in range(8))


class _SimilarityFloor(Guard):
    """A guard that refuses every candidate, but (like the substitution guard) only below ``below``:
    it shows whether the cache passes the similarity to its guards."""

    name = "floor"
    below = 0.5

    def check(self, query: str, candidate: str) -> str | None:
        return "below the floor"


class SemanticCacheContract:
    """The contract. Subclass it as ``TestSomething`` and define the ``open_cache`` fixture."""

    # ------------------------------------------------------------------ store / lookup / replace
    def test_store_lookup_replace_and_partitions(self, open_cache: Opener) -> None:
        c = open_cache(threshold=0.9)
        i = c.store("How long do refunds take?", "5 days", partition=PK, metadata={"q": 1})
        hit = c.lookup("how long do refunds take", partition=PK)
        assert hit is not None and hit.answer == "5 days" and hit.entry_id == i and hit.metadata == {"q": 1}
        assert 0.9 <= hit.similarity <= 1.0 + 1e-6 and hit.partition == PK.digest
        assert c.lookup("How long do refunds take?", partition=OTHER_NS) is None
        assert c.lookup("How long do refunds take?", partition=partition_of("contract", "m2")) is None
        c.store("How long do refunds take?", "7 days", partition=PK)
        assert len(c) == 1 and c.lookup("How long do refunds take?", partition=PK).answer == "7 days"
        st = c.stats
        assert (st.hits, st.misses, st.stores) == (2, 2, 2)

    def test_threshold_one_is_same_words_only(self, open_cache: Opener) -> None:
        c = open_cache(threshold=0.5)
        c.store("Is the API rate limited?", "yes, 100 rpm", partition=PK)
        assert c.lookup(" Is the  API rate limited?", partition=PK, threshold=1.0) is not None  # whitespace only
        assert c.lookup("is the api rate limited", partition=PK, threshold=1.0) is None  # case and "?" count
        assert c.lookup("Is API rate limited?", partition=PK, threshold=1.0) is None

    def test_guards_run_on_candidates_with_the_similarity(self, open_cache: Opener) -> None:
        c = open_cache(threshold=0.5)
        c.store("Is the API rate limited?", "yes, 100 rpm", partition=PK)
        near = c.candidates_for("Is the API not rate limited?", partition=PK)
        assert near and near[0].similarity >= 0.5 and near[0].verdict.reason == "negation"
        assert c.lookup("Is the API not rate limited?", partition=PK) is None
        assert c.stats.rejected_lookups == 1 and c.stats.rejections == {"negation": 1}
        f = open_cache(threshold=0.0, guards=GuardSet([_SimilarityFloor()]))
        assert f.lookup("Is the API rate limited?", partition=PK) is not None  # similarity 1.0: floor skipped
        assert f.lookup("Where do I download the invoices for last year?", partition=PK) is None
        assert f.candidates_for("Where do I download the invoices for last year?", partition=PK)[0].verdict.reason \
            == "floor"

    def test_typo_correction_against_the_partition_words(self, open_cache: Opener) -> None:
        c = open_cache(threshold=0.94)
        c.store("How do I change the language of the dashboard?", "Settings > Language", partition=PK)
        hit = c.lookup("how do i chnage the langauge of the dashbaord", partition=PK)
        assert hit is not None and hit.similarity > 0.99
        assert c.lookup("how do i chnage the langauge of the dashbaord", partition=OTHER_NS) is None

    # ------------------------------------------------------------------ an exact repeat always hits
    @pytest.mark.parametrize("n_partitions", [1, 20])
    def test_exact_repeat_always_hits_in_small_partitions(self, open_cache: Opener, n_partitions: int) -> None:
        c = open_cache()
        parts = [partition_of(f"small-{j}", "m") for j in range(n_partitions)]
        for j, pk in enumerate(parts):
            c.store(f"What is the refund window for order {j}?", f"answer {j}", partition=pk)
        for j, pk in enumerate(parts):
            hit = c.lookup(f"What is the refund window for order {j}?", partition=pk)
            assert hit is not None and hit.answer == f"answer {j}", j

    # ------------------------------------------------------------------ long questions
    def test_long_questions_keep_the_paste_exact(self, open_cache: Opener) -> None:
        c = open_cache(threshold=0.0)
        a = f"{PASTE} How can I increase the connection timeout?"
        assert c.key(a, partition=PK).mode == "split"
        c.store(a, "raise timeout", partition=PK)
        assert c.lookup(f"  {a}  ", partition=PK).answer == "raise timeout"
        edited = PASTE.replace("port 5432", "port 5433", 1)
        assert c.lookup(f"{edited} How can I increase the connection timeout?", partition=PK) is None
        assert c.lookup("How can I increase the connection timeout?", partition=PK) is None
        cands = c.candidates_for(f"{PASTE} How can I not increase the connection timeout?", partition=PK)
        assert cands and cands[0].question.startswith(PASTE[:100]) and cands[0].verdict.reason == "negation"

    def test_question_without_a_sentence_break_is_exact_only(self, open_cache: Opener) -> None:
        c = open_cache(threshold=0.0)
        blob = " ".join(f"key{i}=value{i}" for i in range(60))
        assert c.key(blob + " what is wrong", partition=PK).mode == "exact"
        c.store(blob + " what is wrong", "A", partition=PK)
        assert c.lookup(blob + " what is wrong", partition=PK).answer == "A"
        assert c.lookup(blob + " what is broken", partition=PK) is None

    # ------------------------------------------------------------------ answer budget
    def test_truncated_answers_only_for_the_same_budget(self, open_cache: Opener) -> None:
        plain = open_cache()
        assert plain.store("Explain the refund process", "Refunds are", partition=PK, finish_reason="length",
                           max_tokens=4) is None
        assert len(plain) == 0
        c = open_cache(store_truncated=True)
        c.store("Explain the refund process", "Refunds are", partition=PK, finish_reason="length", max_tokens=4)
        assert c.lookup("Explain the refund process", partition=PK, max_tokens=4).answer == "Refunds are"
        for budget in (8, 2, None):
            assert c.lookup("Explain the refund process", partition=PK, max_tokens=budget) is None, budget
        assert c.candidates_for("Explain the refund process", partition=PK, max_tokens=8)[0].verdict.reason == "budget"

    def test_complete_answer_not_served_to_a_smaller_budget(self, open_cache: Opener) -> None:
        c = open_cache()
        c.store("Explain shipping", "Orders ship on Monday.", partition=PK, finish_reason="stop", output_tokens=50)
        assert c.lookup("Explain shipping", partition=PK, max_tokens=40) is None
        for budget in (50, 60, None):
            assert c.lookup("Explain shipping", partition=PK, max_tokens=budget) is not None, budget

    # ------------------------------------------------------------------ TTL, LRU
    def test_ttl(self, open_cache: Opener) -> None:
        c = open_cache(threshold=1.0)
        c.store("short lived question", "gone soon", partition=PK, ttl_s=0.3)
        c.store("long lived question", "stays", partition=PK)
        assert c.lookup("short lived question", partition=PK) is not None
        time.sleep(0.5)
        assert c.purge_expired() == 1 and c.stats.expirations >= 1
        assert c.lookup("short lived question", partition=PK) is None
        assert c.lookup("long lived question", partition=PK).answer == "stays"
        d = open_cache(threshold=1.0, ttl_s=0.3)
        d.store("default ttl question", "gone soon", partition=PK)
        time.sleep(0.5)
        assert d.lookup("default ttl question", partition=PK) is None

    def test_lru_cap(self, open_cache: Opener) -> None:
        c = open_cache(max_entries=3, threshold=1.0)
        for w in "abcde":
            c.store(f"question number {w}", f"answer {w}", partition=PK)
        assert len(c) == 3 and c.stats.evictions == 2
        assert c.lookup("question number a", partition=PK) is None
        assert c.lookup("question number e", partition=PK).answer == "answer e"

    # ------------------------------------------------------------------ invalidation, other processes
    def test_invalidate_by_id_and_content_in_every_process(self, open_cache: Opener) -> None:
        a, b = open_cache(), open_cache()
        b.store("How long do refunds take?", "5 days", partition=PK)
        b.store("Where do you ship?", "EU", partition=OTHER_NS)
        assert a.lookup("How long do refunds take?", partition=PK).answer == "5 days"  # b's write, seen by a
        assert a.invalidate("refund-policy") == 1
        assert b.lookup("How long do refunds take?", partition=PK) is None
        assert b.lookup("Where do you ship?", partition=OTHER_NS).answer == "EU"
        b.store("How long do refunds take?", "5 days", partition=PK)
        assert a.invalidate(DOC["text"]) == 1  # by content too
        assert b.lookup("How long do refunds take?", partition=PK) is None
        assert a.invalidate("no-such-document") == 0
        with pytest.raises(ValueError, match="invalidate needs"):
            a.invalidate("  ")

    def test_clear_namespace_in_every_process(self, open_cache: Opener) -> None:
        a, b = open_cache(threshold=1.0), open_cache(threshold=1.0)
        b.store("How long do refunds take?", "5 days", partition=PK)
        b.store("Where do you ship?", "EU", partition=OTHER_NS)
        assert a.clear("other-tenant") == 1
        assert b.lookup("Where do you ship?", partition=OTHER_NS) is None
        assert b.lookup("How long do refunds take?", partition=PK) is not None

    def test_reopen_keeps_entries_state_and_invalidations(self, open_cache: Opener) -> None:
        a = open_cache(threshold=1.0)
        i = a.store("How long do refunds take?", "5 days", partition=PK)
        a.store("Where do you ship?", "EU", partition=OTHER_NS)
        assert a.update_state(i, {"threshold": 0.91, "n": 3})
        a.invalidate("shipping")
        a.close()
        b = open_cache(threshold=1.0)
        assert len(b) == 1 and b.lookup("How long do refunds take?", partition=PK).answer == "5 days"
        assert b.lookup("Where do you ship?", partition=OTHER_NS) is None
        assert b.candidates_for("How long do refunds take?", partition=PK)[0].state == {"threshold": 0.91, "n": 3}

    # ------------------------------------------------------------------ per-entry decision state
    def test_per_entry_state(self, open_cache: Opener) -> None:
        a, b = open_cache(threshold=0.5), open_cache(threshold=0.5)
        i = a.store("How long do refunds take?", "5 days", partition=PK)
        j = a.store("Where do you ship?", "EU", partition=PK)
        assert all(c.state is None for c in a.candidates_for("How long do refunds take?", partition=PK))
        assert a.update_state(i, {"threshold": 0.87, "obs": [[0.9, 1], [0.8, 0]]})
        got = {c.entry_id: c.state for c in b.candidates_for("How long do refunds take?", partition=PK)}
        assert got[i] == {"threshold": 0.87, "obs": [[0.9, 1], [0.8, 0]]} and got.get(j) is None
        assert b.update_state(i, None) and a.candidates_for("How long do refunds take?", partition=PK)[0].state is None
        a.update_state(i, {"threshold": 0.9})
        a.store("How long do refunds take?", "6 days", partition=PK)  # a new answer starts with no state
        assert a.candidates_for("How long do refunds take?", partition=PK)[0].state is None
        a.invalidate("refund-policy")
        assert not a.update_state(j, {"x": 1})  # gone
        with pytest.raises(TypeError, match="JSON-like"):  # a value of a wrong type inside the state
            a.update_state(i, {"x": object()})
        with pytest.raises(ValueError, match="JSON-like"):  # a wrong value (not finite)
            a.update_state(i, {"x": float("nan")})

    # ------------------------------------------------------------------ identity
    def test_other_embedder_is_refused(self, open_cache: Opener) -> None:
        open_cache().store("How long do refunds take?", "5 days", partition=PK)
        with pytest.raises(ValueError, match="same embedder"):
            open_cache(embedder=HashingEmbedder(32))

    # ------------------------------------------------------------------ neighbours across partitions
    def test_neighbour_questions_cross_partitions_within_a_tenant(self, open_cache: Opener) -> None:
        """Stored questions near a query in any partition of its tenant, best first, each once, none
        below the floor; another tenant's are never returned; nothing is counted as a lookup."""
        c = open_cache(threshold=0.5)
        docs = [partition_of("contract", "m", [{"id": f"d{j}", "text": f"Note {j}."}]) for j in range(3)]
        for j, pk in enumerate(docs):
            c.store("How long do refunds take?", f"answer {j}", partition=pk)
        c.store("How long does shipping take?", "3 days", partition=docs[0])
        c.store("How long do refunds take?", "other tenant", partition=OTHER_NS)
        c.store("Who approves refunds?", "the manager", partition=partition_of("other-tenant", "m"))
        before = c.stats.lookups
        near = c.neighbour_questions("How long do refunds take?", namespace="contract", k=3, floor=0.0)
        assert [q for q, _ in near][:1] == ["How long do refunds take?"] and near[0][1] > 0.99
        assert len({q for q, _ in near}) == len(near) <= 3
        assert [s for _, s in near] == sorted((s for _, s in near), reverse=True)
        assert "Who approves refunds?" not in {q for q, _ in near}  # another tenant's question
        assert c.neighbour_questions("How long do refunds take?", namespace="nobody", floor=0.0) == []
        high = c.neighbour_questions("How long do refunds take?", namespace="contract", k=3, floor=0.999)
        assert [q for q, _ in high] == ["How long do refunds take?"]
        assert c.neighbour_questions(f"{PASTE} How long do refunds take?", namespace="contract", floor=0.0) == []
        with pytest.raises(ValueError, match="k must be"):
            c.neighbour_questions("How long do refunds take?", namespace="contract", k=0)
        assert c.stats.lookups == before

    # ------------------------------------------------------------------ the answer path's interface
    def test_is_an_answer_cache_of_requests(self, open_cache: Opener) -> None:
        """The :class:`~ragcache.semantic.answer_cache.AnswerCache` methods read the request's question,
        partition, threshold and budget; a request without a partition is neither looked up nor stored."""
        from ragcache.semantic.answer_cache import AnswerCache

        c = open_cache(threshold=0.9)
        assert isinstance(c, AnswerCache)
        ask = CacheRequest("How long do refunds take?", None, PK, max_tokens=16)
        assert c.store_request(CacheRequest(ask.question, None, None), "no", finish_reason="stop") is None
        assert c.store_request(ask, "5 days", finish_reason="length", output_tokens=16) is None  # cut, not kept
        i = c.store_request(ask, "5 days", finish_reason="length", output_tokens=16, metadata={"q": 1},
                            store_truncated=True)
        hit = c.lookup_request(CacheRequest("how long do refunds take", None, PK, max_tokens=16))
        assert hit is not None and (hit.entry_id, hit.answer, hit.metadata) == (i, "5 days", {"q": 1})
        assert hit.budget.max_tokens == 16 and hit.budget.finish_reason == "length"
        assert c.lookup_request(CacheRequest(ask.question, None, PK, max_tokens=32)) is None  # another budget
        assert c.lookup_request(CacheRequest(ask.question, None, OTHER_NS, max_tokens=16)) is None
        assert c.lookup_request(CacheRequest("how long do refunds take", None, PK, max_tokens=16,
                                             threshold=1.0)) is None  # the request's threshold: exact words
        assert c.lookup_request(CacheRequest(ask.question, None, None, max_tokens=16)) is None
        before = c.stats.lookups
        assert c.lookup_request(ask, count=False) is not None and c.stats.lookups == before

    # ------------------------------------------------------------------ single flight
    def test_single_flight_threads(self, open_cache: Opener) -> None:
        import threading

        from ragcache.answering import AnswerPath
        from ragcache.backend import BackendResult, CacheUsage

        path = AnswerPath(open_cache())
        calls: list[int] = []

        def compute() -> BackendResult:
            calls.append(1)
            time.sleep(0.3)
            return BackendResult("the answer", "provider", CacheUsage())

        out: list[Any] = [None] * 6

        def worker(k: int) -> None:
            out[k] = path.run(CacheRequest("What is single flight?", None, PK), compute)

        ts = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert len(calls) == 1 and all(r.text == "the answer" for r in out)

    def test_single_flight_locks_are_the_stores(self, open_cache: Opener) -> None:
        """A cache holds its store's single-flight locks when the store brings them
        (:class:`~ragcache.semantic.flight.HoldsFlightLocks`), else this process's; either way a lock held
        through one cache is held for another cache opened over the same store."""
        from ragcache.semantic.flight import LOCAL_LOCKS, FlightLocks, HoldsFlightLocks

        a, b = open_cache(), open_cache()
        store = a.answer_store
        if isinstance(store, HoldsFlightLocks):
            assert isinstance(store.locks, FlightLocks) and a.locks is store.locks
        else:
            assert a.locks is LOCAL_LOCKS
        key = "5f" * 32
        with a.locks.hold(key, 1.0) as held:
            assert held
            with b.locks.hold(key, 0.05) as again:
                assert not again
        with b.locks.hold(key, 1.0) as free:
            assert free
