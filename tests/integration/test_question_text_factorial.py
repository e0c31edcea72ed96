"""A closing ``!`` after a digit or ``)`` is a factorial, not an exclamation: "What is 5!?" and
"What is 5?" are different questions. The embedded form used to drop it (sim 1.0, served at the
defaults and with the verifier); it is kept now, and an exclamation after a word still is not."""

import pytest

from ragcache.semantic import SemanticCache
from ragcache.semantic.text import embed_form

FACTORIALS = [
    ("What is 5!?", "What is 5?"),
    ("What is 5!", "What is 5"),
    ("Compute 7!", "Compute 7"),
    ("What is (3+2)!?", "What is (3+2)?"),
    ("How big is 20!?", "How big is 20?"),
]


@pytest.mark.parametrize("a,b", FACTORIALS)
def test_embed_form_keeps_a_factorial(a, b):
    assert embed_form(a) != embed_form(b) and embed_form(a).endswith("!")


@pytest.mark.parametrize("text,form", [
    ("How do I rotate the API keys?!", "How do I rotate the API keys"),
    ("Help me now!", "Help me now"),
    ("What is 5?", "What is 5"),
    ("What is 5.", "What is 5"),
])
def test_embed_form_still_drops_closing_punctuation_after_words(text, form):
    assert embed_form(text) == form


@pytest.mark.parametrize("guards", [True, "verifier"])
@pytest.mark.parametrize("a,b", FACTORIALS)
def test_factorial_is_never_served_the_plain_number(guards, a, b):
    for stored, asked in ((a, b), (b, a)):  # both directions, packaged embedder
        with SemanticCache(None, guards=guards) as c:
            c.store(stored, "ANSWER FOR " + stored)
            assert c.lookup(asked) is None
            assert c.lookup(stored).answer == "ANSWER FOR " + stored  # the exact repeat still hits


@pytest.mark.parametrize("a,b", FACTORIALS)
def test_symbol_guard_names_the_factorial(a, b):
    from ragcache.semantic.decision.meaning_guards import SymbolGuard, code_spans

    assert any(span.endswith("!") for span in code_spans(a)) and SymbolGuard().check(a, b)
    assert SymbolGuard().check(b, a)


@pytest.mark.parametrize("a,b", [("Does it work?!", "Does it work?"), ("Rotate the keys now!", "Rotate the keys now.")])
def test_an_exclamation_after_a_word_is_still_punctuation(a, b):
    from ragcache.semantic.decision.meaning_guards import SymbolGuard

    assert SymbolGuard().check(a, b) is None
