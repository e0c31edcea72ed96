"""Short forms of technical words are the words they stand for ("int" / "integer", "repo" / "repository",
"env" / "environment": :data:`ragcache.semantic.decision.order_guards.SYNONYMS`), for the substitution
guard and for the direction guard alike, so a question swapped through a short form is still refused."""

from __future__ import annotations

import pytest

from ragcache.semantic.decision.guards import DIFFERENT_QUESTION, GuardSet
from ragcache.semantic.decision.order_guards import SubstitutionGuard
from ragcache.semantic.text import normalize_question

SAME = [
    ("How do I convert a string to an integer in Python?", "How do I convert a str to an int in Python?"),
    ("How do I clone a repo from GitHub?", "How do I clone a repository from GitHub?"),
    ("How do I set an env variable in Docker?", "How do I set an environment variable in Docker?"),
    ("How do I back up the db every night?", "How do I back up the database every night?"),
    ("Where is the config file of the app?", "Where is the configuration file of the application?"),
    ("How do I list the files in a dir?", "How do I list the files in a directory?"),
    ("Where do I find the app info page?", "Where do I find the application information page?"),
    ("How do I change the language of the app?", "How can I change the app language?"),  # a compound rewrite
    ("How do I change the language of the app?", "How can I change the application language?"),
]
DIFFERENT = [
    ("direction", "How do I convert an int to a str?", "How do I convert a string to an integer?"),
    ("direction", "How do I migrate the db to the app server?", "How do I migrate the application server to the database?"),
    ("substitution", "How do I convert a string to an integer?", "How do I convert a string to a float?"),
    ("substitution", "How do I delete a repo?", "How do I delete a directory?"),
    ("substitution", "Where is the config file of the app?", "Where is the log file of the application?"),
    ("negation", "Is the db backed up?", "Is the database not backed up?"),
]


def _check(a, b):
    return GuardSet.default().check(normalize_question(a), normalize_question(b))


@pytest.mark.parametrize(("a", "b"), [*SAME, *((b, a) for a, b in SAME)])
def test_a_short_form_is_the_same_word(a, b):
    assert _check(a, b).ok, _check(a, b).reason


@pytest.mark.parametrize(("kind", "a", "b"), [*DIFFERENT, *((k, b, a) for k, a, b in DIFFERENT)])
def test_a_different_question_through_a_short_form_is_refused(kind, a, b):
    v = _check(a, b)
    assert v.reason == kind and kind in DIFFERENT_QUESTION + ("substitution",)


def test_without_the_table_a_short_form_is_a_replacement():
    a, b = (normalize_question(x) for x in SAME[3])
    assert SubstitutionGuard(synonyms={}).check(a, b) is not None
    assert SubstitutionGuard().check(a, b) is None
