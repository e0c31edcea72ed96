"""Shared pieces of the near-miss guard tests (tests/unit/test_meaning_guards.py,
test_guard_modality_roles.py, test_guard_prediction_owners.py): both directions of a pair list, the
cases of a kind table, the three caches a near miss must be refused by (``caches``, over the packaged
MiniLM ``embedder``: import both fixtures), and that refusal."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from ragcache.semantic import SemanticCache, partition_key


def both(pairs):
    """Each pair in both directions."""
    return [*pairs, *((b, a) for a, b in pairs)]


def kind_cases(kinds: dict[str, list]) -> list[tuple[str, str, str]]:
    """``(kind, stored, asked)`` for every pair of every kind in ``kinds``, both directions."""
    return [(k, a, b) for k, ps in kinds.items() for a, b in both(ps)]


@contextmanager
def guard_caches(embedder) -> Iterator[dict[str, SemanticCache]]:
    """The default cache, the guards at a low threshold (so a refusal is theirs, not the cosine's),
    ``guards="verifier"`` and ``guards="pair"`` (the pair model behind the hard vetoes)."""
    with SemanticCache(embedder=embedder) as d, SemanticCache(embedder=embedder, threshold=0.5, guards="rules") as low, \
            SemanticCache(embedder=embedder, guards="verifier") as v, SemanticCache(embedder=embedder, guards="pair") as p:
        yield {"default": d, "guards at 0.5": low, "verifier": v, "pair": p}


def assert_refused(caches: dict[str, SemanticCache], kind: str, stored: str, asked: str) -> None:
    """``asked`` misses the answer stored for ``stored`` in every cache; ``stored`` itself still hits."""
    for name, c in caches.items():
        pk = partition_key(namespace=f"{kind}-{name}-{hash((stored, asked)) & 0xffff}", model="m")
        c.store(stored, "the stored answer", partition=pk)
        assert c.lookup(asked, partition=pk) is None, (name, [(x.similarity, x.verdict) for x in
                                                              c.candidates_for(asked, partition=pk)])
        assert c.lookup(stored, partition=pk).answer == "the stored answer"


@pytest.fixture(scope="module")
def embedder():
    """The packaged MiniLM embedder (the default cache's)."""
    from ragcache.semantic.embedding import resolve_embedder

    return resolve_embedder(None)


@pytest.fixture(scope="module")
def caches(embedder):
    """:func:`guard_caches` over the packaged MiniLM, one set per test module."""
    with guard_caches(embedder) as c:
        yield c
