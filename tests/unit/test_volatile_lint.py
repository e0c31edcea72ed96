"""Volatile-text lint coverage (issue 11, item 13; issue 22, item 2): each date / time format is found
with the right kind and text, ordinary prose (versions, prices, pages, quantities) is not flagged, and
``move`` rewrites no instruction: it moves only certainly volatile text and warns what it moved."""

import json
import warnings
from pathlib import Path

import pytest

from benchmarks.lint import evaluate, load_prompts, markdown_table
from ragcache.prompt.layout import PromptLayout
from ragcache.prompt.volatile import (
    PossiblyVolatileDate,
    VolatileTextMoved,
    find_volatile,
    move_volatile,
)

ROOT = Path(__file__).resolve().parents[2]


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
    ("Open until 18.30 today.", [("time", "18.30")]),
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
    with pytest.warns(VolatileTextMoved, match="Current date: 26.07.2024"):
        stable, moved, findings = move_volatile("You are a shop assistant.\nCurrent date: 26.07.2024. Be brief.")
    assert moved == "Current date: 26.07.2024." and stable == "You are a shop assistant.\nBe brief."
    assert [(f.kind, f.certain, f.moved) for f in findings] == [("date", True, "Current date: 26.07.2024.")]


# Instructions with numbers, ordinals, counters, versions, prices, years, ports, limits, and fixed dates or
# times that belong to a rule or an example: move_volatile must return them unchanged, with no warning.
INSTRUCTIONS = [
    "You are the ops assistant. Follow step 12 of the runbook.",
    "On attempt 2, escalate. Log request 42 as the reference case.",
    "Step 1: read the ticket. Step 2: reproduce. Step 3: reply within 24 hours.",
    "Use Python 3.12 and numpy 2.1.3; never pin below version 1.26.",
    "The Pro plan costs $19.99 per month, or 199.00 EUR per year.",
    "The company was founded in 1998 and went public in 2004.",
    "Connect to port 8080 on 10.0.0.1; the admin UI listens on :9090.",
    "Answer in at most 500 tokens, with no more than 3 tool calls and 5 retries.",
    "Follow rules 4.2 and 4.3. Cite sections 12.03 and page 10.5.",
    "Prices valid from 26.07.2024. Only orders after 2024-01-01 are eligible.",
    "Prices valid until 2024-07-26 apply. Policy updated on Jul 26, created 2023-05-01.",
    "Office hours are 09:00-17:00, Monday to Friday. We are closed on Sunday.",
    "Write dates as ISO 8601, for example 2024-07-26 or 2024-07-26T10:00.",
    "HTTP 404 means not found (RFC 9110, section 15.5.5). Return error E1234.",
    "Turn 3 of the tutorial covers loops; iteration 2 adds tests.",
    "A 55 year old man, 5 + 3 + 1294.678, a 1979 interview, 15 million people as of 2021.",
]


@pytest.mark.parametrize("text", INSTRUCTIONS)
def test_move_never_rewrites_an_instruction(text):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", PossiblyVolatileDate)  # a bare date is named, not moved (test_lint_dates.py)
        stable, moved, findings = move_volatile(text)
        lay = PromptLayout.build(question="q?", system=text, lint="move")
    assert (stable, moved) == (text, "") and not any(f.certain or f.moved for f in findings)
    assert lay.system_text == text and lay.volatile is None


# Certainly volatile text: (system text, the sentence that must move).
CERTAIN = [
    ("You help users. Current date: 2026-12-01.", "Current date: 2026-12-01."),
    ("You help users. For context, today's date is Tue Dec 1, 2026.", "For context, today's date is Tue Dec 1, 2026."),
    ("You help users.\nThe time is 09:14 UTC.", "The time is 09:14 UTC."),
    ("You help users. Today is Friday, 26 July 2024.", "Today is Friday, 26 July 2024."),
    ("You help users. Request ID: req_8f3a2b1c9d0e.", "Request ID: req_8f3a2b1c9d0e."),
    ("You help users.\ntrace_id=4bf92f3577b34da6a3ce929d0e0e4736", "trace_id=4bf92f3577b34da6a3ce929d0e0e4736"),
    ("You help users. Session 123e4567-e89b-12d3-a456-426614174000 is open.",
     "Session 123e4567-e89b-12d3-a456-426614174000 is open."),
    ("You help users. Generated 2024-07-26T10:00:00Z.", "Generated 2024-07-26T10:00:00Z."),
    ("You help users. timestamp: 1764400000.", "timestamp: 1764400000."),
    ("You help users. Snapshot 20240726100000 loaded.", "Snapshot 20240726100000 loaded."),
    ("You help users. Log line at 10:00:59 copied.", "Log line at 10:00:59 copied."),
    # date formats seen in agent code that injects today's date (written here, not copied)
    ("You help users.\n* The current date is Tuesday, December 1, 2026.", "* The current date is Tuesday, December 1, 2026."),
    ("You help users. The current date is 2026-12-01 09:14:07.123456.", "The current date is 2026-12-01 09:14:07.123456."),
    ("You help users. The current time is 09:14 and the current date is 12/01/2026.",
     "The current time is 09:14 and the current date is 12/01/2026."),
    ("You help users.\nCurrent Date and Time (UTC): 2026-12-01 09:14", "Current Date and Time (UTC): 2026-12-01 09:14"),
    ("You help users. Today's date is 2026-12-01 (UTC).", "Today's date is 2026-12-01 (UTC)."),
]


@pytest.mark.parametrize("text,sentence", CERTAIN)
def test_move_takes_only_the_certain_sentence_and_says_so(text, sentence):
    with pytest.warns(VolatileTextMoved) as record:
        lay = PromptLayout.build(question="q?", system=text, lint="move")
    assert lay.system_text == "You help users." and lay.volatile == sentence
    assert len(record) == 1 and repr(sentence) in str(record[0].message)
    assert all(f.moved == sentence for f in lay.findings if f.certain) and any(f.certain for f in lay.findings)


def test_warn_mode_separates_certain_and_possible_and_raise_ignores_possible():
    text = "Office hours 09:00-17:00. Current date: 2026-12-01."
    with pytest.warns(UserWarning) as record:
        PromptLayout.build(question="q?", system=text, lint="warn")
    messages = [str(r.message) for r in record]
    assert any("date '2026-12-01'" in m and "breaks the cache prefix" in m for m in messages)
    assert any("possible time '09:00'" in m and "may change per request" in m for m in messages)
    lay = PromptLayout.build(question="q?", system="Office hours 09:00-17:00.", lint="raise")
    assert [f.certain for f in lay.findings] == [False, False]
    with pytest.raises(ValueError, match="2026-12-01"):
        PromptLayout.build(question="q?", system=text, lint="raise")


def test_metadata_drop_is_reported():
    with pytest.warns(VolatileTextMoved, match="score"):
        lay = PromptLayout.build(question="q?", documents=[{"text": "t", "metadata": {"score": 0.9}}], lint="move")
    assert lay.documents[0].metadata == {}


def test_real_agent_prompts_no_false_move_and_recorded_detection():
    """The set of real agent-framework prompts (tests/data/system_prompts): no instruction is moved,
    every labelled date is, and the counts are those recorded in bench/results/lint.json (from which
    the docs' evaluation page is generated)."""
    rows = load_prompts()
    assert len(rows) >= 50 and len({r["repo"] for r in rows}) >= 5
    assert all(r["license"] in ("MIT", "Apache-2.0", "BSD-3-Clause") and len(r["commit"]) == 40 for r in rows)
    result = evaluate(rows)
    assert result["total"]["false_moves"] == 0
    assert result["total"]["missed"] == 0 and result["total"]["moved"] == result["total"]["certain"] >= 10
    recorded = json.loads((ROOT / "bench" / "results" / "lint.json").read_text())
    assert result["total"] == recorded["total"] and result["by_repo"] == recorded["by_repo"]
    assert markdown_table(result).count("\n") == len(result["by_repo"]) + 2  # header, rule, repositories, total


@pytest.mark.parametrize("day1,day2", [("Current time 10.00 UTC.", "Current time 11.00 UTC."),
                                         ("Date: 26.07.2024.", "Date: 27.07.2024."),
                                         ("Today is Jul 26.", "Today is Jul 27."),
                                         ("Snapshot 20240726100000.", "Snapshot 20240727093000.")])
def test_layout_moves_each_format(day1, day2):
    a = PromptLayout.build(question="Q?", system="You are terse. " + day1, lint="move")
    b = PromptLayout.build(question="Q?", system="You are terse. " + day2, lint="move")
    assert a.system_text == b.system_text == "You are terse."


@pytest.mark.parametrize("system,code,severity", [
    ("You are the ops assistant. Follow step 12 of the runbook.", 0, None),
    ("Office hours 09:00-17:00. Prices valid from 26.07.2024.", 0, "review"),
    ("You are the ops assistant. Current date: 2026-12-01.", 1, "error"),
    ("You are the ops assistant. request_id: 8f3a2b1c", 1, "error"),
])
def test_lint_command_grades_certain_as_error_and_possible_as_review(tmp_path, system, code, severity):
    from typer.testing import CliRunner

    from ragcache.app.cli import app

    req = tmp_path / "req.json"
    req.write_text(json.dumps({"system": system, "messages": [{"role": "user", "content": "q?"}]}))
    result = CliRunner().invoke(app, ["lint", str(req)], env={"COLUMNS": "200"})
    assert result.exit_code == code, result.output
    if severity is None:
        assert "no volatile text found" in result.output
    else:
        assert severity in result.output and ("possible" in result.output) == (severity == "review")


@pytest.mark.parametrize("content, where", [(b"# Refunds\n\nRefunds take 5 days.\n", ""),
                                             (b'{"messages": [1,]}', " (Expecting value at line 1 column 17)"),
                                             (b"\xff\xfe\x00binary", "")])
def test_lint_of_a_file_that_is_not_json_says_what_it_reads(tmp_path, content, where):
    """A trial ran `ragcache lint notes/refunds.md` and got "cannot read ...: Expecting value: line 1 column 1"."""
    from typer.testing import CliRunner

    from ragcache.app.cli import app

    f = tmp_path / "refunds.md"
    f.write_bytes(content)
    r = CliRunner().invoke(app, ["lint", str(f)], env={"COLUMNS": "400"})
    out = " ".join(r.stderr.split())
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert out.startswith(f"error: {f} is not JSON{where}: ragcache lint reads a JSON request"), out
    assert "messages.create keyword arguments" in out and "messages list" in out and "char 0" not in out, out


def test_rules_prompt_with_step_numbers_keeps_its_system_breakpoint():
    """Issue 22's Anthropic case: a long rules prompt with "step {i}" lines was cut down to almost nothing
    by lint='move', so it fell below the cacheable minimum (0 cache reads, 0 writes). Now it is kept whole
    and the system block gets its breakpoint."""
    from ragcache.providers.anthropic.breakpoints import layout_request

    rules = "You are the ops assistant.\n" + "\n".join(
        f"Step {i}: check the service log for error {400 + i} and retry at most {i % 3 + 1} times." for i in range(1, 80))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lay = PromptLayout.build(question="Why did the deploy fail?", system=rules, lint="move",
                                 documents=[{"id": "log", "text": "deploy log line. " * 200}])
    assert lay.system_text == rules and lay.volatile is None
    req = layout_request(lay, model="claude-sonnet-4-5", max_tokens=16, token_counter=len)
    assert "system" in {p.role for p in req.placed}
