"""Text that keys a question, at its edges: a zero-width joiner that glues an emoji and a zero-width
character inside a quoted string are content (a stray one inside a word is still dropped); a number
in scientific notation is one number ("1e3" is not "1"); and the low-threshold message shows the
threshold as given (never rounded by ``:g``)."""

from __future__ import annotations

import warnings

import pytest

from ragcache.limits import THRESHOLD_FLOOR, low_threshold_message
from ragcache.semantic import SemanticCache, partition_key
from ragcache.semantic.decision.guards import NumberGuard
from ragcache.semantic.text import exact_form, fold_text, normalize_question, numbers
from ragcache.testing import HashingEmbedder

PK = partition_key(namespace="edge", model="m")

ZWJ, ZWSP = "\u200d", "\u200b"
RAINBOW_FLAG = "\U0001f3f3\ufe0f" + ZWJ + "\U0001f308"  # one emoji
FLAG_AND_RAINBOW = "\U0001f3f3\ufe0f\U0001f308"  # a white flag, then a rainbow
FAMILY = "\U0001f468" + ZWJ + "\U0001f469" + ZWJ + "\U0001f467"  # one emoji
THREE_PEOPLE = "\U0001f468\U0001f469\U0001f467"
CODER = "\U0001f469\U0001f3fd" + ZWJ + "\U0001f4bb"  # woman, skin tone, joiner, laptop: one emoji

DIFFERENT = [
    (f"What does the emoji {RAINBOW_FLAG} mean?", f"What does the emoji {FLAG_AND_RAINBOW} mean?"),
    (f"What does {FAMILY} mean?", f"What does {THREE_PEOPLE} mean?"),
    (f"What does {CODER} mean?", "What does \U0001f469\U0001f3fd\U0001f4bb mean?"),
    (f'How many characters are in "a{ZWSP}b"?', 'How many characters are in "ab"?'),
    (f"How many characters are in 'a{ZWSP}b'?", "How many characters are in 'ab'?"),
    (f"Is `x{ZWJ}y` a valid identifier?", "Is `xy` a valid identifier?"),
    (f"How many characters are in \u201ca{ZWSP}b\u201d?", "How many characters are in \u201cab\u201d?"),
]


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_an_emoji_joiner_and_a_quoted_zero_width_character_are_content(a, b):
    assert normalize_question(a) != normalize_question(b)
    assert exact_form(a) != exact_form(b)
    with SemanticCache(None, embedder=HashingEmbedder()) as c:
        c.store(a, "the answer to the first", partition=PK)
        assert c.lookup(b, partition=PK) is None
        hit = c.lookup(a, partition=PK)  # the same question is still a hit
        assert hit is not None and hit.answer == "the answer to the first"


@pytest.mark.parametrize("text", [RAINBOW_FLAG, FAMILY, CODER, "\u2764\ufe0f" + ZWJ + "\U0001f525"])
def test_an_emoji_sequence_keeps_its_joiners(text):
    assert fold_text(text) == text


@pytest.mark.parametrize(("pasted", "clean"), [
    ("How long do re\u200dfunds take?", "How long do refunds take?"),  # a joiner between letters
    ("What\u200d is \U0001f308?", "What is \U0001f308?"),  # a letter, then an emoji: not a sequence
    ("What is \U0001f308\u200d?", "What is \U0001f308?"),  # nothing after it to join
    ("What's Bob\u200b's refund?", "What's Bob's refund?"),  # apostrophes quote nothing
    ('He said "hi" and left\u200b.', 'He said "hi" and left.'),  # outside the quotes
])
def test_a_stray_invisible_character_is_still_dropped(pasted, clean):
    assert normalize_question(pasted) == normalize_question(clean)
    assert exact_form(pasted) == exact_form(clean)


@pytest.mark.parametrize(("a", "b"), [
    ("What is 1e3?", "What is 1e6?"),
    ("What is 2.5e-3?", "What is 2.5e-4?"),
    ("Is 10e9 bigger than a billion?", "Is 10e6 bigger than a billion?"),
    ("Convert 1.5E-4 to a percentage", "Convert 1.5E-5 to a percentage"),
    ("Is 2e+10 a float literal?", "Is 2e+11 a float literal?"),
])
def test_scientific_notation_is_one_number(a, b):
    assert numbers(a) != numbers(b)
    assert NumberGuard().check(a, b) is not None
    with SemanticCache(None, embedder=HashingEmbedder()) as c:
        c.store(a, "the answer to the first", partition=PK)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # thresholds below the floor warn; the guard refuses at every one
            for threshold in (-1.0, 0.0, THRESHOLD_FLOOR, 0.9):
                assert c.lookup(b, partition=PK, threshold=threshold) is None, threshold


@pytest.mark.parametrize(("text", "expected"), [
    ("What is 1e3?", ["1e3"]),
    ("1.5E-4 and 2e+10", ["1.5e-4", "2e10"]),
    ("Is 1e-03 the same as 1e-3?", ["1e-3", "1e-3"]),
    ("How do I cook 3 eggs?", ["3"]),
    ("Is 3e the answer?", ["3"]),
    ("Sell 5e-commerce kits", ["5"]),
    ("What is $1,000?", ["$1000"]),
])
def test_what_reads_as_a_number(text, expected):
    assert numbers(text) == sorted(expected)


@pytest.mark.parametrize(("a", "b"), [
    ("How do I cook 3 eggs?", "How do I cook 3 eggs?"),
    ("What is 1e3?", "What is 1E3?"),
    ("Is 2e+10 a float literal?", "Is 2e10 a float literal?"),
])
def test_the_same_number_written_alike_passes(a, b):
    assert NumberGuard().check(a, b) is None


@pytest.mark.parametrize(("t", "shown"), [
    (0.49999999999, "threshold 0.49999999999 is below"),
    (-0.0, "threshold -0.0 is below"),
    (-1.0, "threshold -1 is below"),
    (0.3, "threshold 0.3 is below"),
    (0.1 + 0.2, "threshold 0.30000000000000004 is below"),
])
def test_the_low_threshold_message_shows_the_threshold_as_given(t, shown):
    msg = low_threshold_message(t)
    assert msg is not None and msg.startswith(shown) and f"the floor {THRESHOLD_FLOOR:g}" in msg, msg
    assert low_threshold_message(THRESHOLD_FLOOR) is None
