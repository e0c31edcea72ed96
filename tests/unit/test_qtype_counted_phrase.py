"""Issue 50, item 6: "how many" reads the counted noun of its phrase, not the first two words after "many".

"How many unused days of leave" and "How many unused leave days" count the same thing (days, the
codebase's counted-time-unit class ``how_long``, as "how many vacation days" and "how many days of
vacation" already were); a plural noun counted before any time unit ("how many students miss days")
is a count (``how_many``); "how many days does it take" stays a duration. Every pair is checked both ways
by the type guard, and every real count / duration difference is still refused."""

from __future__ import annotations

import pytest

from ragcache.semantic.decision.qtype import QuestionTypeGuard, question_type

KINDS = [
    # the counted noun after modifiers, and the same noun before "of ..."
    ("How many unused days of leave can I carry over?", "how_long"),
    ("How many unused leave days can I carry over?", "how_long"),
    ("How many remaining days of vacation do I have?", "how_long"),
    ("How many remaining vacation days do I have?", "how_long"),
    ("How many paid sick leave days do contractors get?", "how_long"),
    ("How many paid days of sick leave do contractors get?", "how_long"),
    ("How many working days does delivery take?", "how_long"),
    ("how many days does it take", "how_long"),
    ("How many hours does the flight last?", "how_long"),
    ("How many more weeks until the release?", "how_long"),
    # a plural noun (or a people word) counted first: a count, whatever time unit follows
    ("How many students miss days of school?", "how_many"),
    ("How many people visit each day?", "how_many"),
    ("How many staff work weekend days?", "how_many"),
    ("How many employees take unused leave days?", "how_many"),
    ("How many orders ship per day?", "how_many"),
    ("How many user sessions last several hours?", "how_many"),
    ("How many 3 day passes are left?", "how_many"),
    ("How many open tickets are there?", "how_many"),
    # times: a frequency
    ("How many times a day should I water it?", "how_often"),
    ("How many more times a week?", "how_often"),
]


@pytest.mark.parametrize(("text", "kind"), KINDS)
def test_how_many_reads_the_counted_noun(text, kind):
    assert question_type(text) == kind


PAIRS = [  # (a, b, compatible), both ways
    ("How many unused days of leave can I carry over?", "How many unused leave days can I carry over?", True),
    ("How many remaining days of vacation do I have?", "How many remaining vacation days do I have?", True),
    ("How many paid days of sick leave do contractors get?", "How many paid sick leave days do contractors get?", True),
    ("How many working days does delivery take?", "How long does delivery take?", True),
    ("how many days does it take to ship?", "How long does it take to ship?", True),
    # a real count / duration difference stays refused
    ("How many students miss days of school?", "How long do students miss school?", False),
    ("How many employees take unused leave days?", "How many unused leave days do employees take?", False),
    ("How many orders ship per day?", "How many days does an order take to ship?", False),
    ("How many people visit each day?", "How many days do people visit?", False),
    ("How many staff work weekend days?", "How many weekend days do staff work?", False),
    ("How many times a day should I water it?", "How many days should I water it?", False),
]


@pytest.mark.parametrize(("a", "b", "ok"), PAIRS)
def test_the_type_guard_both_ways(a, b, ok):
    for x, y in ((a, b), (b, a)):
        assert (QuestionTypeGuard().check(x, y) is None) is ok, (x, y, question_type(x), question_type(y))
