"""Typo correction of a query against the words already stored in its partition.

MiniLM scores "how do i chnage the langauge of the dashbaord" only 0.5-0.7
against the correctly spelt question, because WordPiece splits misspelt words
into unrelated pieces. Before embedding a query, each word that is neither a
word of the embedder's vocabulary nor a word of the partition is replaced by
the partition word one edit away (insert, delete, substitute, swap), found with
SymSpell's deletion index (Garbe 2012). Digits are never touched, so the number
guard still sees exactly what the user typed, and the guards run afterwards.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Protocol, runtime_checkable

from ragcache.semantic.text import deletes1, typo_variant

_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")


@runtime_checkable
class QuerySpeller(Protocol):
    """What corrects a query's typos against one partition's stored words: a store that keeps them
    (:class:`~ragcache.semantic.stores.faiss_store.FaissAnswerStore`, one :class:`PartitionSpeller` per
    partition in memory; :class:`~ragcache.semantic.stores.pg_store.PgAnswerStore`, read from the
    database)."""

    def correct(self, partition: str, text: str, known: frozenset[str] | None) -> str:
        """``text`` with out-of-vocabulary words corrected against the words stored in ``partition``
        (a digest); ``known``: the embedder's vocabulary (:meth:`PartitionSpeller.correct`)."""
        ...


class PartitionSpeller:
    """Vocabulary of one partition's stored questions with a one-edit deletion index."""

    __slots__ = ("_counts", "_deletes")

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._deletes: dict[str, set[str]] = {}

    @staticmethod
    def _words(text: str) -> list[str]:
        return [w.lower() for w in _WORD.findall(text) if len(w) >= 4 and "'" not in w]

    def add(self, text: str) -> None:
        for w in self._words(text):
            if self._counts[w] == 0:
                for d in deletes1(w):
                    self._deletes.setdefault(d, set()).add(w)
            self._counts[w] += 1

    def remove(self, text: str) -> None:
        for w in self._words(text):
            if self._counts.get(w, 0) > 0:
                self._counts[w] -= 1

    def correct(self, text: str, known: frozenset[str] | None) -> str:
        """Return ``text`` with out-of-vocabulary words replaced by their one-edit partition neighbour.

        A word is left alone when it is in ``known`` (the embedder's vocabulary), already
        in the partition, shorter than 4 letters, or has zero or several equally frequent
        neighbours.
        """
        if not self._counts:
            return text

        def fix(m: re.Match[str]) -> str:
            raw = m.group(0)
            w = raw.lower()
            if len(w) < 4 or "'" in w or self._counts.get(w, 0) > 0 or (known is not None and w in known):
                return raw
            cands: set[str] = set()
            for d in deletes1(w):
                cands |= self._deletes.get(d, set())
            scored = sorted(((self._counts[c], c) for c in cands if self._counts.get(c, 0) > 0 and typo_variant(w, c)),
                            reverse=True)
            if not scored or (len(scored) > 1 and scored[0][0] == scored[1][0]):
                return raw
            best = scored[0][1]
            return best.capitalize() if raw[:1].isupper() else best

        return _WORD.sub(fix, text)
