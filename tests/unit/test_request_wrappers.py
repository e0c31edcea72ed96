"""A request wrapper ("Could you tell me ...", "I'd like to know ...") is dropped for matching only
(:func:`ragcache.semantic.text.request_core`): the same question asked politely is served, a different
question inside a wrapper is still refused by the guard that names it, and exact matching is untouched."""

from __future__ import annotations

import pytest

from ragcache.semantic import SemanticCache, partition_key
from ragcache.semantic.decision.guards import GuardSet
from ragcache.semantic.text import embed_form, exact_form, request_core

CORES = [
    ("Could you tell me the largest file size I can upload, please?", "the largest file size I can upload?"),
    ("Would you be able to explain how I can unstage a file?", "how I can unstage a file?"),
    ("I'd appreciate it if you could tell me what a normal heart rate is.", "what a normal heart rate is."),
    ("I was wondering whether it's possible to pause my plan?", "whether it's possible to pause my plan?"),
    ("Could you please explain why leaves change color?", "why leaves change color?"),
    ("Do you know how to reset a router?", "how to reset a router?"),
    ("I would like to know how to delete my account.", "how to delete my account."),
    ("Please tell me when the office opens", "when the office opens"),
    ("Can someone explain to me what a mutex is?", "what a mutex is?"),
]
KEPT = ["Can I bring a laptop?", "Is it possible to pause my plan?", "Can you tell me?", "Could you help me?",
        "How do I tell my manager?", "Please advise"]


@pytest.mark.parametrize(("text", "core"), CORES)
def test_the_wrapper_is_dropped(text, core):
    assert request_core(text) == core
    assert request_core(text.upper()) == core.upper()  # any case
    assert exact_form(text) != exact_form(core)  # exact matching still sees the whole text


@pytest.mark.parametrize("text", KEPT)
def test_a_question_that_is_not_a_wrapper_is_kept(text):
    assert request_core(text) == text


SAME = [
    ("How do I reset my router?", "Do you know how to reset my router?"),
    ("How do I cancel my subscription?", "I'd like to know how to cancel my subscription."),
    ("Why is my build slow?", "Could you please explain why my build is slow?"),
    ("What is the capital of Peru?", "I was wondering what the capital of Peru is?"),
    ("How do I export a report as PDF?", "Would you be able to tell me how to export a report as PDF?"),
]
DIFFERENT = [
    ("negation", "Is the API rate limited?", "Could you tell me whether the API is not rate limited?"),
    ("bound", "How many copies does the backup keep?", "Can you tell me how many copies the backup keeps at most?"),
    ("scope", "Who is on call today?", "Could you let me know who is on call tomorrow?"),
    ("symbol", "What does %Y mean in strftime?", "Can you explain what %y means in strftime?"),
    ("number", "Can I bring a 100ml bottle?", "Could you tell me if I can bring a 200ml bottle?"),
]


@pytest.fixture(scope="module")
def cache():
    from ragcache.semantic.embedding import resolve_embedder

    with SemanticCache(embedder=resolve_embedder(None)) as c:
        yield c


@pytest.mark.parametrize(("a", "b"), [*SAME, *((b, a) for a, b in SAME)])
def test_the_same_question_asked_politely_is_served(cache, a, b):
    pk = partition_key(namespace=f"same-{hash((a, b)) & 0xffffff}", model="m")
    cache.store(a, "the stored answer", partition=pk)
    hit = cache.lookup(b, partition=pk)
    assert hit is not None and hit.answer == "the stored answer"


@pytest.mark.parametrize(("kind", "a", "b"), [*DIFFERENT, *((k, b, a) for k, a, b in DIFFERENT)])
def test_a_different_question_inside_a_wrapper_is_refused_by_its_guard(cache, kind, a, b):
    pk = partition_key(namespace=f"diff-{hash((a, b)) & 0xffffff}", model="m")
    cache.store(a, "the stored answer", partition=pk)
    assert cache.lookup(b, partition=pk) is None
    assert GuardSet.default().check(b, a).reason == kind


def test_the_embedded_form_drops_the_wrapper():
    assert embed_form("Could you tell me what's the refund policy?") == "what is the refund policy"


@pytest.mark.parametrize(("text", "core"), [
    ("Could you tell me, please, how to rotate the API keys?", "how to rotate the API keys?"),
    ("Do you happen to know how to rotate the API keys?", "how to rotate the API keys?"),
    ("Can you show us, please, where the logs are?", "where the logs are?"),
])
def test_more_wrapper_forms(text, core):
    assert request_core(text) == core


@pytest.mark.parametrize(("text", "core"), [
    ("Hi team, what's the policy on remote work?", "what's the policy on remote work?"),
    ("Good morning! How do I reset my password?", "How do I reset my password?"),
    ("Dear support, I would like to know how to delete my account.", "how to delete my account."),
    ("Excuse me, could you explain what an expense ratio is?", "what an expense ratio is?"),
    ("Hey there, where are the logs?", "where are the logs?"),
    ("Hello, can you tell me when the office opens? Thanks!", "when the office opens?"),
    ("How do I rotate the API keys? Thank you in advance.", "How do I rotate the API keys?"),
    ("Where is my order? Many thanks", "Where is my order?"),
])
def test_a_greeting_and_thanks_are_dropped(text, core):
    assert request_core(text) == core
    assert exact_form(text) != exact_form(core)


@pytest.mark.parametrize("text", [
    "Hello, world in Rust?", "How do I say thank you in French?", "How do I write a thank you note?",
    "Hi", "Thanks", "Is there a hello world template?", "Who wrote 'Hey Jude'?", "Hi-fi or lo-fi speakers?",
])
def test_words_that_are_not_a_greeting_are_kept(text):
    assert request_core(text) == text


GREETED_SAME = [
    ("How do I reset my password?", "Hi team, how do I reset my password?"),
    ("Where can I download my invoices?", "Good morning! Where can I download my invoices?"),
    ("How do I pause my membership?", "Dear support, how do I pause my membership? Thanks!"),
    ("What is the refund window?", "Hello, what is the refund window? Thank you in advance."),
    ("How do I export a report?", "Excuse me, how do I export a report?"),
]
GREETED_DIFFERENT = [
    ("negation", "Is the API rate limited?", "Hi team, is the API not rate limited?"),
    ("bound", "How many copies does the backup keep?", "Good morning! How many copies does the backup keep at most?"),
    ("scope", "Who is on call today?", "Hello, who is on call tomorrow? Thanks!"),
    ("number", "Can I bring a 100ml bottle?", "Dear support, can I bring a 200ml bottle?"),
    ("entity", "How do I export from Gmail?", "Hi there, how do I export from Outlook?"),
]


@pytest.mark.parametrize(("a", "b"), [*GREETED_SAME, *((b, a) for a, b in GREETED_SAME)])
def test_the_same_question_with_a_greeting_is_served(cache, a, b):
    pk = partition_key(namespace=f"greet-{hash((a, b)) & 0xffffff}", model="m")
    cache.store(a, "the stored answer", partition=pk)
    hit = cache.lookup(b, partition=pk)
    assert hit is not None and hit.answer == "the stored answer"


@pytest.mark.parametrize(("kind", "a", "b"), [*GREETED_DIFFERENT, *((k, b, a) for k, a, b in GREETED_DIFFERENT)])
def test_a_different_question_after_a_greeting_is_refused_by_its_guard(cache, kind, a, b):
    pk = partition_key(namespace=f"greetd-{hash((a, b)) & 0xffffff}", model="m")
    cache.store(a, "the stored answer", partition=pk)
    assert cache.lookup(b, partition=pk) is None
    assert GuardSet.default().check(b, a).reason == kind
