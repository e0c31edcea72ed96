"""A question pasted with a character that prints as nothing (zero-width space, soft hyphen, joiner,
direction mark, byte-order mark) is the same question: the same normal and exact forms, and an exact
repeat is a hit through the guards (a new-user trial found one refused as a ``symbol`` difference)."""

from __future__ import annotations

import pytest

from ragcache.semantic import SemanticCache
from ragcache.semantic.text import exact_form, normalize_question
from ragcache.testing import HashingEmbedder

Q = "How long do refunds take for bikes?"
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e", "\u200f"]


@pytest.mark.parametrize("ch", INVISIBLE)
@pytest.mark.parametrize("where", [4, 9, len(Q) - 1, 0])
def test_invisible_characters_are_dropped(ch, where):
    pasted = Q[:where] + ch + Q[where:]
    assert normalize_question(pasted) == normalize_question(Q)
    assert exact_form(pasted) == exact_form(Q)


@pytest.mark.parametrize("ch", INVISIBLE)
def test_a_pasted_repeat_is_a_hit(ch):
    with SemanticCache(None, embedder=HashingEmbedder()) as c:
        c.store(Q, "Within 14 days.")
        hit = c.lookup(Q.replace("refunds", "re" + ch + "funds"))
        assert hit is not None and hit.answer == "Within 14 days."


def test_a_question_of_invisible_characters_only_is_refused():
    with pytest.raises(ValueError, match="empty"):
        normalize_question("\u200b\u200b \ufeff")
