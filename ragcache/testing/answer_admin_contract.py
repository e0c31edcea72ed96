"""The answer stores' admin contract suite: what ``ragcache cache`` calls on an answer store's admin view
(:class:`ragcache.semantic.stores.admin.AnswerAdmin`: list, read, statistics, removal, eviction, clearing),
checked against a store filled by its own semantic cache and read back without an embedder.

Use it as :mod:`ragcache.testing.semantic_contract` is used: subclass :class:`AnswerAdminContract` in a test
module (the subclass's name starts with ``Test``) and give it an ``opened`` fixture that yields
``(open_cache, admin)``: a factory ``open_cache() -> cache`` of caches over one store (each call a new cache
object, as another process would open; built with :data:`EMB` and ``threshold=0.9``), and that store's admin
view (opened as ``ragcache cache`` opens it: its row's ``admin`` class called with the URL). The fixture closes
what it opened. ragcache runs it against the embedded folder (:class:`~ragcache.semantic.stores.folder_admin.FolderAnswers`)
and PostgreSQL (:class:`~ragcache.semantic.stores.pg_admin.PgAnswers`) in
``tests/integration/test_answer_admin_contract.py``.

What the suite reads besides the rows: ``AnswerRow.budget`` (``max_tokens``, ``finish_reason``: the answer
budget the cache stored; a store keeps it inside the entry's metadata under
:data:`ragcache.semantic.budget.META_KEY`, and :func:`~ragcache.semantic.budget.merge_metadata` /
``split_metadata`` put it in and take it out), and ``stats()``'s ``lookups`` / ``lookup_hits`` /
``lookup_misses``: every process's lookups added up, so a store totals the counts a cache sends it on
``flush`` (the cache in :func:`fill` flushes before the admin view reads them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from ragcache.semantic.stores.admin import AnswerAdmin
from ragcache.testing import HashingEmbedder
from ragcache.testing.semantic_contract import partition_of

EMB = HashingEmbedder()
"""The embedder the ``opened`` fixture's caches are built with (any embedder works; this one loads nothing)."""
A = partition_of("acme", "m")
B = partition_of("beta", "m")
QUESTIONS = [("How long are backups kept?", "30 days", A), ("When do deploys go out?", "Tuesdays", A),
             ("Who signs expense reports?", "the team lead", B)]

Opened = tuple[Callable[[], Any], AnswerAdmin]


def fill(open_cache: Callable[[], Any]) -> list[int]:
    """Store :data:`QUESTIONS` through one cache (distinct access times), look up one hit and one miss, flush.
    Returns the entry ids, in :data:`QUESTIONS` order."""
    c = open_cache()
    ids = []
    for q, a, pk in QUESTIONS:
        ids.append(c.store(q, a, partition=pk, metadata={"source": q[:8]}, finish_reason="stop", max_tokens=32))
        time.sleep(0.01)  # distinct access times: the listing's order is defined
    assert c.lookup(QUESTIONS[0][0], partition=A) is not None and c.lookup("Nothing like it?", partition=A) is None
    c.flush()
    return ids


class AnswerAdminContract:
    """The contract. Subclass it as ``TestSomething`` and define the ``opened`` fixture."""

    def test_a_store_not_created_yet_is_empty(self, opened: Opened) -> None:
        _, admin = opened
        assert isinstance(admin, AnswerAdmin) and not admin.exists
        assert admin.list() == [] and admin.get(1) is None and admin.remove([1, 2]) == 0
        s = admin.stats()
        assert (s["entries"], s["lookups"], s["hit_rate"], s["namespaces"]) == (0, 0, None, {})
        assert s["store"] == admin.kind and s["where"] == admin.where

    def test_list_get_and_stats(self, opened: Opened) -> None:
        open_cache, admin = opened
        ids = fill(open_cache)
        assert admin.exists
        rows = admin.list()
        assert {r.id for r in rows} == set(ids) and len(rows) == 3
        assert [r.accessed for r in rows] == sorted((r.accessed for r in rows), reverse=True)  # most recent first
        assert [r.question for r in admin.list(namespace="beta")] == [QUESTIONS[2][0]]
        assert len(admin.list(limit=2)) == 2
        row = admin.get(ids[1])
        assert (row.question, row.answer, row.namespace, row.partition) == (QUESTIONS[1][0], "Tuesdays", "acme",
                                                                            A.digest)
        assert row.to_dict()["metadata"] == {"source": QUESTIONS[1][0][:8]} and row.budget["max_tokens"] == 32
        assert row.budget["finish_reason"] == "stop" and admin.get(10**6) is None and admin.get(1 << 70) is None
        s = admin.stats()
        assert (s["entries"], s["partitions"], s["namespaces"]) == (3, 2, {"acme": 2, "beta": 1})
        assert (s["lookups"], s["lookup_hits"], s["lookup_misses"], s["hit_rate"]) == (2, 1, 1, 0.5)
        assert s["hits"] >= 1 and s["bytes"] > 0 and s["oldest"] <= s["newest"]

    @pytest.mark.parametrize("keep", [0, 1, 2, 5])
    def test_evict_keeps_the_most_recently_used(self, opened: Opened, keep: int) -> None:
        open_cache, admin = opened
        fill(open_cache)
        newest = [r.id for r in admin.list()][:keep]
        assert admin.evict(keep=keep) == 3 - min(keep, 3)
        assert [r.id for r in admin.list()] == newest

    def test_evict_needs_a_valid_criterion(self, opened: Opened) -> None:
        open_cache, admin = opened
        fill(open_cache)
        for kw in ({}, {"keep": -1}, {"older_than_s": -1.0}, {"older_than_s": float("nan")}):
            with pytest.raises(ValueError, match="--older-than|--keep"):
                admin.evict(**kw)
        assert admin.evict(older_than_s=3600.0) == 0 and len(admin.list()) == 3

    def test_remove_and_clear_are_seen_by_a_cache_opened_afterwards(self, opened: Opened) -> None:
        open_cache, admin = opened
        ids = fill(open_cache)
        assert admin.remove([ids[0], 10**6]) == 1 and admin.get(ids[0]) is None
        assert open_cache().lookup(QUESTIONS[0][0], partition=A) is None
        assert open_cache().lookup(QUESTIONS[1][0], partition=A) is not None
        assert admin.clear() > 0 and admin.list() == []
        assert admin.stats()["lookups"] == 0


__all__ = ["EMB", "QUESTIONS", "AnswerAdminContract", "fill"]
