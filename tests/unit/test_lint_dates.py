"""The lint and a date line with a per-request cue (issue 32, section 3): Llama 3.1's chat template
writes "Today Date: 26 Jul 2024" into the system prompt; a date after a per-request cue ("today",
"current date", "now", "as of") is volatile (moved with lint="move", raised on with lint="raise"),
a time or ISO datetime still is, and a bare date without a cue is named with its line, not moved."""

import warnings

import pytest

from ragcache.prompt.layout import PromptLayout
from ragcache.prompt.volatile import (
    PossiblyVolatileDate,
    VolatileTextMoved,
    find_volatile,
    move_volatile,
)

LLAMA_31 = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are a helpful assistant."

# (system text, the sentence or line that must move)
CUED = [
    (LLAMA_31, "Today Date: 26 Jul 2024"),
    ("You help users.\nToday Date: 01 Dec 2026", "Today Date: 01 Dec 2026"),
    ("You help users. Date today: 26.07.2024.", "Date today: 26.07.2024."),
    ("You help users.\nToday: 2026-12-01", "Today: 2026-12-01"),
    ("You help users. Today's date: December 1, 2026.", "Today's date: December 1, 2026."),
    ("You help users. Current date 2026-12-01.", "Current date 2026-12-01."),
    ("You help users. Now: 1 December 2026.", "Now: 1 December 2026."),
    ("You help users. As of 2026-12-01, the rota is fixed.", "As of 2026-12-01, the rota is fixed."),
    ("You help users. Prices as of Dec 1, 2026 apply.", "Prices as of Dec 1, 2026 apply."),
    # a time or an ISO datetime: moved with or without a cue
    ("You help users. Generated 2026-12-01T09:14:07Z.", "Generated 2026-12-01T09:14:07Z."),
    ("You help users. Log copied at 09:14:07.", "Log copied at 09:14:07."),
    ("You help users. The time now is 09:14.", "The time now is 09:14."),
]


@pytest.mark.parametrize(("text", "sentence"), CUED)
def test_a_date_after_a_per_request_cue_is_moved(text, sentence):
    with pytest.warns(VolatileTextMoved) as rec:
        stable, moved, _ = move_volatile(text)
    assert moved == sentence and sentence not in stable
    assert any(sentence in str(w.message) for w in rec)
    lay = PromptLayout.build(question="When do backups run?", system=text, lint="move")
    assert sentence not in lay.system_text and sentence in (lay.volatile or "")


@pytest.mark.parametrize(("text", "sentence"), CUED)
def test_a_date_after_a_per_request_cue_raises(text, sentence):
    with pytest.raises(ValueError, match="volatile text in stable prompt segments"):
        PromptLayout.build(question="When do backups run?", system=text, lint="raise")


# (system text, its line holding a date without a cue)
BARE = [
    ("You help users.\nReleased 2024-07-26.\nBe brief.", "Released 2024-07-26."),
    ("Policy updated on Jul 26, 2024. Be brief.", "Policy updated on Jul 26, 2024. Be brief."),
    ("Only orders after 2024-01-01 are eligible.", "Only orders after 2024-01-01 are eligible."),
    ("Knowledge cutoff: 2023-12-01\nAnswer briefly.", "Knowledge cutoff: 2023-12-01"),
    ("Prices valid from 26.07.2024.", "Prices valid from 26.07.2024."),
    ("The meeting is on 2026-12-14 at the main office.", "The meeting is on 2026-12-14 at the main office."),
]


@pytest.mark.parametrize(("text", "line"), BARE)
@pytest.mark.parametrize("lint", ["move", "raise"])
def test_a_bare_date_is_named_with_its_line_not_moved(text, line, lint):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        lay = PromptLayout.build(question="When do backups run?", system=text, lint=lint)  # raises nothing
    assert lay.system_text == text and lay.volatile is None
    kept = [w for w in rec if issubclass(w.category, PossiblyVolatileDate)]
    assert len(kept) == 1 and repr(line) in str(kept[0].message) and "per-request cue" in str(kept[0].message)
    assert not [w for w in rec if issubclass(w.category, VolatileTextMoved)]


@pytest.mark.parametrize("text", ["Write dates as ISO 8601, for example 2024-07-26.",
                                  "Use the format 2024-07-26 for dates.", "Be brief. Cite the runbook."])
def test_an_example_date_or_no_date_is_not_warned(text):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert move_volatile(text)[:2] == (text, "")


def test_a_moved_date_and_a_kept_date_in_one_prompt():
    text = "Today Date: 01 Dec 2026\nReleased 2024-07-26.\nBe brief."
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        stable, moved, _ = move_volatile(text)
    assert moved == "Today Date: 01 Dec 2026" and stable == "Released 2024-07-26.\nBe brief."
    assert {w.category for w in rec} == {VolatileTextMoved, PossiblyVolatileDate}


@pytest.mark.parametrize("text", ["Updated 2024-07-26.", "Last revised on Jul 26, 2024.", "Valid from 26.07.2024."])
def test_revision_cues_stay_possible(text):
    assert [f.certain for f in find_volatile(text)] == [False]
