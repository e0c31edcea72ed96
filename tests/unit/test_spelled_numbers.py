"""Spelled-out numbers read by text2num (issue 22 item 10): one value per run of number words, so
"twenty-one" is 21 (it was 20, and "twenty-one days" passed the number guard against "twenty days")."""

import pytest

from ragcache.semantic import GuardSet, SemanticCache, normalize_question
from ragcache.semantic.text import numbers


@pytest.mark.parametrize(("text", "want"), [
    ("twenty-one days", ["21"]), ("twenty one days", ["21"]), ("twenty days", ["20"]),
    ("three hundred thousand dollars", ["300000"]), ("a hundred and five users", ["105"]),
    ("nine hundred ninety nine", ["999"]), ("sixty-four bit", ["64"]), ("one thousand users", ["1000"]),
    ("rotate every two weeks", ["2"]), ("three to five", ["3", "5"]), ("a dozen eggs", ["12"]),
    ("a couple of days", ["2"]), ("for one month", []), ("one-on-one", []), ("someone often tent", []),
    ("the fifth step", []), ("5th step", ["5"]), ("$300,000 at 6%", ["$300000", "6%"]),
    ("version 2.4.1 of python 3", ["2.4.1", "3"]), ("Nineteen eighty-four", ["19", "4", "80"]),
    ("two million rows", ["2000000"]), ("2 million rows", ["1000000", "2"]),
])
def test_numbers(text, want):
    assert numbers(text) == want


GS = GuardSet.default()


@pytest.mark.parametrize(("a", "b"), [
    ("Can I keep backups for twenty-one days?", "Can I keep backups for twenty days?"),
    ("Is a sixty-four bit build available?", "Is a sixty bit build available?"),
    ("What does three hundred thousand dollars buy?", "What does three hundred dollars buy?"),
])
def test_number_guard_tells_compound_numbers_apart(a, b):
    for q, c in ((a, b), (b, a)):
        v = GS.check(normalize_question(q), normalize_question(c))
        assert v.reason == "number", (q, c, v)


@pytest.mark.parametrize(("a", "b"), [
    ("Can I keep backups for twenty-one days?", "Can I keep backups for 21 days?"),
    ("How many users fit in one thousand seats?", "How many users fit in 1,000 seats?"),
])
def test_number_guard_reads_digits_and_words_alike(a, b):
    assert GS.check(normalize_question(a), normalize_question(b)).reason != "number"


def test_a_cache_does_not_serve_twenty_days_for_twenty_one(tmp_path):
    with SemanticCache(tmp_path / "answers") as cache:
        cache.store("Can I keep backups for twenty days?", "Yes, twenty days is the default.")
        assert cache.lookup("Can I keep backups for twenty days?") is not None
        assert cache.lookup("Can I keep backups for twenty-one days?") is None
