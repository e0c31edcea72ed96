"""Guards loosened kind by kind (issue 32, section 4): two names of one country, and a measured
difference read as the quantity it asks for. Each is checked against the near misses of its kind."""

from __future__ import annotations

import pytest

from ragcache.semantic.decision.guards import EntityGuard, GuardSet
from ragcache.semantic.decision.qtype import QuestionTypeGuard, question_type
from ragcache.semantic.text import normalize_question

SAME_COUNTRY = [
    ("Do I need a visa to visit Japan as a US citizen?", "Are American passport holders required to get a visa for Japan?"),
    ("What taxes do I pay in the United States?", "What taxes do I pay in the USA?"),
    ("What is the VAT rate in the UK?", "What is the VAT rate in Britain?"),
    ("Can British citizens vote in local elections?", "Can UK citizens vote in local elections?"),
    ("How do I move money from the US to the UK?", "How do I move money from America to Britain?"),
]
OTHER_COUNTRY = [
    ("Do I need a visa to visit Japan as a US citizen?", "Do I need a visa to visit Japan as a UK citizen?"),
    ("Do I need a visa to visit Japan as a British citizen?", "Do I need a visa to visit Japan as a Canadian citizen?"),
    ("What taxes do I pay in the USA?", "What taxes do I pay in Canada?"),
    ("Is the app available in French?", "Is the app available in France?"),  # a language is not a country
    ("Can Americans work in Britain?", "Can Britons work in America?"),  # swapped through the aliases
    ("How do I move money from the US to the UK?", "How do I move money from Britain to America?"),
]


def _both(pairs):
    return [*pairs, *((b, a) for a, b in pairs)]


def _verdict(a, b):
    """The default guards on two questions as the cache compares them (normalised)."""
    return GuardSet.default().check(normalize_question(a), normalize_question(b))


@pytest.mark.parametrize(("a", "b"), _both(SAME_COUNTRY))
def test_two_names_of_one_country_are_one_name(a, b):
    assert EntityGuard().check(normalize_question(a), normalize_question(b)) is None


@pytest.mark.parametrize(("a", "b"), _both(OTHER_COUNTRY))
def test_another_country_or_order_is_still_refused(a, b):
    assert _verdict(a, b).reason == "entity"


QUESTION_TYPES = [
    # a measured difference asks for its quantity
    ("What is the time difference between London and New York?", "how_long"),
    ("What's the time offset between UTC and Tokyo?", "how_long"),
    ("What is the age gap between the twins and their sister?", "how_old"),
    ("What is the price difference between the two plans?", "how_much"),
    ("What is the difference between a 401k and an IRA?", "what"),  # not a measure
    ("What is the difference in time zones?", "what"),
    # counted time units and "how much" + comparative (from the trial of the defaults)
    ("How many days of vacation do employees get?", "how_long"),
    ("How many vacation days do employees get?", "how_long"),
    ("How many sick days are left?", "how_long"),
    ("How many people visit each day?", "how_many"),
    ("How many employees per day?", "how_many"),
    ("How much older is Tom than Anna?", "how_old"),
    ("How much taller is the new tower?", "how_tall"),
    ("How much does it cost?", "how_much"),
]


@pytest.mark.parametrize(("text", "kind"), QUESTION_TYPES)
def test_question_types(text, kind):
    assert question_type(text) == kind


TYPE_PAIRS = [  # (a, b, compatible), checked both ways
    # a measured difference
    ("What is the time difference between London and New York?", "How many hours ahead of New York is London?", True),
    ("What is the age gap between the twins?", "How old are the twins?", True),
    ("What is the time difference between London and New York?", "When does London open?", False),
    ("What is the time difference between London and New York?", "Where is London?", False),
    ("What is the age gap between the twins?", "Who are the twins?", False),
    # an allowed amount
    ("What is the leave entitlement for new fathers?", "How many days of paternity leave do new fathers get?", True),
    ("What is my monthly data allowance?", "How much data do I get per month?", True),
    ("What is the annual holiday entitlement?", "How long is the annual holiday?", True),
    ("What is the holiday entitlement?", "What is the holiday policy?", True),  # was compatible, stays so
    ("What is the leave entitlement?", "Who approves leave?", False),
    ("What is the leave entitlement?", "When does leave reset?", False),
    ("What is the data allowance?", "Why is my data slow?", False),
    ("How many days of leave do I get?", "What is the leave policy?", False),  # "what" alone is not an amount
]


@pytest.mark.parametrize(("a", "b", "ok"), TYPE_PAIRS)
def test_the_type_guard_both_ways(a, b, ok):
    for x, y in ((a, b), (b, a)):
        assert (QuestionTypeGuard().check(x, y) is None) is ok


# --------------------------------------------------------------------------- from the trial of the defaults

RESTRICTIVE = [  # "only" restricts: a different yes / no (bound guard, kind "restrictive")
    ("Does the plan include dental?", "Does the plan include only dental?"),
    ("Can I call customer support on weekends?", "Can I call customer support only on weekends?"),
    ("Is the app also available on Android?", "Is the app only available on Android?"),
    ("Is Python the only language I need?", "Is Python the language I need?"),
    ("Are refunds paid to the original card?", "Are refunds paid solely to the original card?"),
]


@pytest.mark.parametrize(("a", "b"), _both(RESTRICTIVE))
def test_a_restriction_added_or_removed_is_refused(a, b):
    assert _verdict(a, b).reason == "bound"


@pytest.mark.parametrize(("a", "b"), [("Is the app available on Android?", "Is the app also available on Android?"),
                                      ("Which plans include dental only?", "Which plans include only dental?")])
def test_an_additive_or_moved_only_passes(a, b):
    assert _verdict(a, b).ok


def test_the_stats_repr_is_one_line():
    from ragcache.semantic.stats import SemanticStats

    s = SemanticStats()
    s.recent_lookup_s.extend([0.01] * 4096)
    assert "recent_lookup_s" not in repr(s) and len(repr(s)) < 600


SYMMETRIC = [  # two alternatives, or two sides of a symmetric frame, in the other order: the same question
    ("What is the difference between a list and a tuple?", "What is the difference between a tuple and a list?"),
    ("Should I buy a house or rent?", "Should I rent or buy a house?"),
    ("Is Python or Java better for beginners?", "Is Java or Python better for beginners?"),
    ("Compare React and Vue", "Compare Vue and React"),
    ("Which is faster, Redis vs Memcached?", "Which is faster, Memcached vs Redis?"),
]
ORDERED = [  # a direction or a sequence: still refused
    ("How do I merge main into my branch?", "How do I merge my branch into main?"),
    ("How do I get from Boston to Denver?", "How do I get from Denver to Boston?"),
    ("Can I put diesel in a petrol engine?", "Can I put petrol in a diesel engine?"),
    ("How do I convert Celsius to Fahrenheit?", "How do I convert Fahrenheit to Celsius?"),
    ("Do I add milk and then tea?", "Do I add tea and then milk?"),
    ("Is it legal to drink and drive?", "Is it legal to drive and drink?"),
]


@pytest.mark.parametrize(("a", "b"), _both(SYMMETRIC))
def test_alternatives_in_another_order_pass(a, b):
    assert _verdict(a, b).ok


@pytest.mark.parametrize(("a", "b"), _both(ORDERED))
def test_a_direction_or_sequence_swapped_is_refused(a, b):
    assert _verdict(a, b).reason == "direction"
