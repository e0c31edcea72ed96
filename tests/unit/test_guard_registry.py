"""The one table of guards (:data:`ragcache.semantic.decision.guards.GUARDS`): the default set, its
validation, the reasons and the verifier's hard vetoes all read it."""

from __future__ import annotations

import pytest

from ragcache.semantic.decision import guards as G
from ragcache.semantic.decision.guards import (
    DIFFERENT_QUESTION,
    GUARD_REASONS,
    GUARDS,
    GuardKind,
    GuardSet,
)


def test_every_row_names_its_class_and_says_what_it_rejects():
    names = [k.name for k in GUARDS]
    assert len(names) == len(set(names)) and GUARDS[-1].name == "verifier"
    for k in GUARDS:
        g = k.guard(lambda q, c: True) if k.name == "verifier" else k.guard()
        assert g.name == k.name and k.rejects.strip(), k  # the reason counted is the row's name
    assert GUARD_REASONS == tuple(names)
    assert DIFFERENT_QUESTION == tuple(k.name for k in GUARDS if k.different_question)
    assert "substitution" not in DIFFERENT_QUESTION and "number" in DIFFERENT_QUESTION


def test_the_default_set_is_the_table_in_order():
    assert GuardSet.default().names == [k.name for k in GUARDS if k.name != "verifier"]
    assert GuardSet.default(lambda q, c: False).names == list(GUARD_REASONS)
    assert GuardSet.default(lambda q, c: False, disable=["verifier", "number"]).names == \
        [k.name for k in GUARDS if k.name not in ("verifier", "number")]


def test_an_unknown_guard_name_gets_an_error_listing_the_table():
    with pytest.raises(ValueError) as e:
        GuardSet.default(disable=["numbers"])
    assert "['numbers']" in str(e.value) and all(repr(k.name) in str(e.value) for k in GUARDS)


def test_a_new_row_is_a_new_guard(monkeypatch):
    class Shout:
        name = "shout"

        def check(self, query: str, candidate: str) -> str | None:
            return None if query.isupper() == candidate.isupper() else "one side shouts"

    row = GuardKind("shout", Shout, "one question is in capitals, the other not")
    monkeypatch.setattr(G, "GUARDS", (row, *GUARDS))
    assert GuardSet.default().check("HOW DO I PAY?", "how do i pay?").reason == "shout"
    assert "shout" not in GuardSet.default(disable=["shout"]).names
