"""Volatile-text lint coverage (issue 11, item 13): each date / time format is found with the
right kind and text, and ordinary prose (versions, prices, pages, quantities) is not flagged."""

import pytest

from ragcache.layout import PromptLayout
from ragcache.volatile import find_volatile, move_volatile


def found(text):
    return [(f.kind, f.text) for f in find_volatile(text)]


@pytest.mark.parametrize("text,want", [
    # day-first / month-first numeric dates
    ("Prices valid from 26.07.2024 on.", [("date", "26.07.2024")]),
    ("Stand: 1.8.2024", [("date", "1.8.2024")]),
    ("Stand: 26.07.24", [("date", "26.07.24")]),
    ("Report of 26-07-2024.", [("date", "26-07-2024")]),
    ("Filed 07/26/2024, amended 7/27/24.", [("date", "07/26/2024"), ("date", "7/27/24")]),
    ("Published 2024/07/26.", [("date", "2024/07/26")]),
    ("Published 2024.07.26.", [("date", "2024.07.26")]),
    ("Generated 2024-07-26T10:00:00Z.", [("datetime", "2024-07-26T10:00:00Z")]),
    # month names, with and without a year
    ("Updated Jul 26.", [("date", "Jul 26")]),
    ("Updated Jul. 26th.", [("date", "Jul. 26th")]),
    ("Valid until July 26, 2024 only.", [("date", "July 26, 2024")]),
    ("Valid until 26 July 2024.", [("date", "26 July 2024")]),
    ("Due on the 26th of July.", [("date", "26th of July")]),
    ("Closed on Dec 25 and JAN 1.", [("date", "Dec 25"), ("date", "JAN 1")]),
    ("Leap day: Feb 29.", [("date", "Feb 29")]),
    # compact timestamps
    ("snapshot 20240726100000 loaded", [("timestamp", "20240726100000")]),
    ("snapshot 20240726T100000Z loaded", [("timestamp", "20240726T100000Z")]),
    ("snapshot 202407261000 loaded", [("timestamp", "202407261000")]),
    ("Snapshot 20240727093000.", [("timestamp", "20240727093000")]),
    ("build of 20240726", [("timestamp", "20240726")]),
    # times
    ("The shop opens at 10.00.", [("time", "10.00")]),
    ("Open until 18.30 today.", [("time", "18.30"), ("relative-day", "today")]),
    ("Office hours 9.00-17.00.", [("time", "9.00"), ("time", "17.00")]),
    ("Between 9.00 and 17.00.", [("time", "9.00"), ("time", "17.00")]),
    ("Call back 9.30 pm.", [("time", "9.30 pm")]),
    ("Deploy window 22.15 UTC.", [("time", "22.15")]),
    ("Termin um 10.00 Uhr.", [("time", "10.00")]),
    ("Starts 10h30.", [("time", "10h30")]),
    ("Now 10:00:59.", [("time", "10:00:59")]),
    ("Ring me at 7am or 7 p.m.", [("time", "7am"), ("time", "7 p.m.")]),
])
def test_each_format_is_found(text, want):
    assert found(text) == want


@pytest.mark.parametrize("text", [
    "Python 3.10 is required; 3.10.12 is tested.",
    "Version 2.30 fixed it. Release 1.2.3 notes.",
    "It costs $10.00 per month, or 10.00 EUR, or €10.00.",
    "See page 10.5 for details, and section 4.12.",
    "Pi is 3.14 and e is 2.71.",
    "The host is 10.0.0.1 on port 8080.",
    "Growth was 12.50% this quarter.",
    "Use 3 to 5 items; the ratio is 16:9.",
    "Score 10.00 out of 10.00.",
    "Costs rose at 2.50 per unit.",
    "It weighs 12.30 kg.",
    "May I help you? We may 5-star it.",
    "Order 12345678 and code 20241399 are ids; 20240726250000 has hour 25.",
    "The year 2024 was busy; since 1999 we grew.",
    "There is no 25.00 hour, no 10.60, no 10:61, no 25:00, no Sep 31 and no Feb 30.",
    "Chapter 12.03.2021 is a section number.",
    "Follow rules 1.2 and 1.3 in order.",
])
def test_plain_prose_is_not_flagged(text):
    assert found(text) == []


def test_flagged_sentence_moves_out_of_the_system_text():
    stable, moved, findings = move_volatile("You are a shop assistant.\nPrices valid from 26.07.2024. Be brief.")
    assert "26.07.2024" in moved and "26.07.2024" not in stable
    assert stable == "You are a shop assistant.\nBe brief."
    assert [f.kind for f in findings] == ["date"]


@pytest.mark.parametrize("day1,day2", [("Current time 10.00 UTC.", "Current time 11.00 UTC."),
                                         ("Stand: 26.07.2024.", "Stand: 27.07.2024."),
                                         ("Updated Jul 26.", "Updated Jul 27."),
                                         ("Snapshot 20240726100000.", "Snapshot 20240727093000.")])
def test_layout_moves_each_format(day1, day2):
    a = PromptLayout.build(question="Q?", system="You are terse. " + day1, lint="move")
    b = PromptLayout.build(question="Q?", system="You are terse. " + day2, lint="move")
    assert a.system_text == b.system_text == "You are terse."
