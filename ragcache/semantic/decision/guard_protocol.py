"""The guard interface: what every guard of a :class:`~ragcache.semantic.decision.guards.GuardSet` declares.

A guard is one check between a query and a cached candidate question (:class:`Guard`). Besides its
``name`` and ``check`` it declares two members a guard set reads, with the defaults a guard that has
neither gets from the class: ``below`` (the similarity from which it is skipped) and ``reads_similarity``
(whether its ``check`` takes the pair's similarity). ragcache's guards subclass :class:`Guard`; a guard of
one's own may too, or give ``name`` and ``check`` alone: a guard set gives it the defaults once, when it is
built (:func:`declared_guard`). Here, below every guard module, so each imports it without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Guard(Protocol):
    """One check between a query and a cached candidate question.

    ``check`` returns ``None`` when the candidate may be served for the query, or a short human-readable
    detail naming the difference. Subclass it to take the defaults of the two optional members.

    Attributes:
        name: the reason its rejections are counted under (``stats.rejections``).
        below: the cosine similarity at or above which the guard is skipped (the substitution guard's
            ``below=t``); ``None`` (the default): it runs at every similarity.
        reads_similarity: ``check`` takes the pair's similarity as a third argument
            (``check(query, candidate, similarity)``; the question-type guard); default False.
    """

    __slots__ = ()

    name: str
    below: float | None = None
    reads_similarity: bool = False

    def check(self, query: str, candidate: str) -> str | None: ...


@runtime_checkable
class _Checks(Protocol):
    name: str

    def check(self, query: str, candidate: str) -> str | None: ...


@runtime_checkable
class _SkippedAbove(Protocol):
    below: float | None


@runtime_checkable
class _ReadsSimilarity(Protocol):
    reads_similarity: bool


@dataclass(frozen=True, slots=True)
class _Defaulted(Guard):
    """A guard given with ``name`` and ``check`` (and perhaps one of the optional members): the declared
    members around it, read once when its guard set was built."""

    guard: Any
    name: str
    below: float | None = None
    reads_similarity: bool = False

    def check(self, query: str, candidate: str, similarity: float | None = None) -> str | None:
        return self.guard.check(query, candidate, similarity) if self.reads_similarity \
            else self.guard.check(query, candidate)


def declared_guard(guard: Any) -> Guard:
    """``guard`` as a :class:`Guard`: itself when it declares every member (ragcache's guards, a subclass of
    :class:`Guard`), else a wrapper with the defaults of the members it lacks (a guard of one's own with
    ``name`` and ``check`` alone). The one conversion of a guard a user gives, done when a guard set is built.

    Raises:
        TypeError: ``guard`` is a class (not an instance), or has no non-empty str ``name`` and
            ``check(query, candidate)`` (a subclass of :class:`Guard` that forgot its ``name`` included).
    """
    if isinstance(guard, type):
        raise TypeError(f"{guard.__name__} is a guard class, not a guard: pass an instance, {guard.__name__}()")
    name = guard.name if isinstance(guard, _Checks) else None
    if not isinstance(name, str) or not name or not callable(guard.check):
        raise TypeError(f"a guard needs a name (a non-empty str: its rejections are counted under it) and "
                        f"check(query, candidate) -> str | None; got {type(guard).__name__} (subclass "
                        "ragcache.semantic.Guard and set name = '...')")
    if isinstance(guard, Guard):
        return guard
    return _Defaulted(guard, guard.name, guard.below if isinstance(guard, _SkippedAbove) else None,
                      bool(guard.reads_similarity) if isinstance(guard, _ReadsSimilarity) else False)


__all__ = ["Guard", "declared_guard"]
