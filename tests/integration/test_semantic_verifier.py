"""The learned hit decision: guard fixes by kind, the verifier's decisions on labelled pairs of
every guard kind, the fault test (swapped numbers through the default cache), the head file."""

import json
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from ragcache.semantic.decision.guards import GuardSet, NumberGuard
from ragcache.semantic.decision.order_guards import SubstitutionGuard
from ragcache.semantic.decision.qtype import QuestionFocusGuard, question_focus
from ragcache.semantic.decision.verifier import VerifierHead, fit_logistic, load_head

# ------------------------------------------------------------------ guard fixes (no model)


@pytest.mark.parametrize(("a", "b"), [
    ("How do I empty bucket 1-2?", "How do I empty bucket 2-1?"),
    ("Is train 12 to 40 late?", "Is train 40 to 12 late?"),
    ("Does lane 3-5 close at night?", "Does lane 5-3 close at night?"),
    ("Why is 7 bigger than 9 here?", "Why is 9 bigger than 7 here?"),
    ("Can I go from level 2 to level 6?", "Can I go from level 6 to level 2?"),
])
def test_number_guard_refuses_numbers_in_another_order(a, b):
    assert NumberGuard().check(a, b) is not None
    assert NumberGuard().check(a, a) is None


@pytest.mark.parametrize(("a", "b"), [
    ("I have 2 cats and 3 dogs, what food?", "I have 3 dogs and 2 cats, what food?"),
    ("Ship 4 boxes and 9 letters today?", "Ship 9 letters and 4 boxes today?"),
    ("Buy 2 tickets", "buy two tickets"),
])
def test_number_guard_allows_numbers_that_keep_their_words(a, b):
    assert NumberGuard().check(a, b) is None


@pytest.mark.parametrize(("a", "b"), [
    ("How do I set up a printer on my laptop?", "How do I configure a printer on my laptop?"),
    ("How can I find out my tax number?", "How can I discover my tax number?"),
    ("How do I turn off the alarm?", "How do I disable the alarm?"),
    ("How do I sign up for the gym?", "How do I register for the gym?"),
    ("How do I get rid of old files?", "How do I remove old files?"),
])
def test_substitution_guard_accepts_a_phrasal_verb_for_its_one_word_synonym(a, b):
    assert SubstitutionGuard().check(a, b) is None
    assert SubstitutionGuard().check(b, a) is None


@pytest.mark.parametrize(("a", "b"), [
    ("How do I set up a printer?", "How do I remove a printer?"),
    ("How do I turn off the alarm?", "How do I enable the alarm?"),
    ("How do I clear the disk cache?", "How do I clear the memory cache?"),
])
def test_substitution_guard_runs_at_high_similarity_and_refuses_replacements(a, b):
    assert GuardSet.default().check(a, b, 0.99).reason is not None


@pytest.mark.parametrize(("a", "b", "fa"), [
    ("What does a lunch box contain?", "What is a lunch box?", "do_contain"),
    ("What is in the toolkit?", "What is the toolkit?", "be_in"),
    ("What is cheese made of?", "What is cheese?", "be_of"),
    ("What does the bundle include?", "What is the bundle?", "do_include"),
])
def test_focus_guard_refuses_another_question_about_the_same_thing(a, b, fa):
    assert question_focus(a) == fa
    assert question_focus(b) == "be"
    assert QuestionFocusGuard().check(a, b) is not None


@pytest.mark.parametrize(("a", "b"), [
    ("What does GPU mean?", "What is a GPU?"),
    ("What is the capital of Peru?", "Which city is the capital of Peru?"),
    ("How do I reset it?", "What is the toolkit?"),
])
def test_focus_guard_passes_the_same_focus_or_no_focus(a, b):
    assert QuestionFocusGuard().check(a, b) is None


# ------------------------------------------------------------------ head file and fitting (no model)


def test_fit_logistic_separates_a_noisy_linear_rule():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 3))
    y = (x[:, 0] - 2 * x[:, 1] + 0.3 * rng.normal(size=2000) > 0).astype(float)
    mean, scale, w, b = fit_logistic(x, y, l2=0.1)
    pred = (b + ((x - mean) / scale) @ w) > 0
    assert (pred == (y > 0.5)).mean() > 0.95
    assert w[0] > 0 > w[1] and abs(w[2]) < abs(w[0]) / 5
    with pytest.raises(ValueError, match="both labels"):
        fit_logistic(x, np.ones(2000))


def test_shipped_head_is_small_reproducible_record_and_round_trips():
    head = load_head()
    d = head.to_json()
    assert len(json.dumps(d)) < 16_000
    assert d["card"]["command"].startswith("python -m ragcache.app.fit_verifier")
    assert "Quora" in d["card"]["licence"]
    again = VerifierHead.from_json(json.loads(json.dumps(d)))
    x = np.linspace(0, 1, len(head.names))[None, :]
    assert np.allclose(again.score(x), head.score(x))
    with pytest.raises(ValueError, match="refit"):
        VerifierHead.from_json({**d, "names": d["names"][:-1]})


# ------------------------------------------------------------------ the verifier on labelled pairs (MiniLM)

REFUSE = {  # own text, not the pairs the head was fitted on (tests/data/verifier_fit_pairs.jsonl)
    "number": [("How do I archive shelf 3-8?", "How do I archive shelf 8-3?"),
               ("Is a 30 minute parking limit enforced?", "Is a 60 minute parking limit enforced?"),
               ("Can I swap seat 14 for seat 22?", "Can I swap seat 22 for seat 14?")],
    "negation": [("Why does the heater not turn on?", "Why does the heater turn on?"),
                 ("Which rooms have no windows?", "Which rooms have windows?"),
                 ("Can I return shoes that were never worn?", "Can I return shoes that were worn?")],
    "question_type": [("Who repaired the old bridge?", "When was the old bridge repaired?"),
                      ("Where do I pay the parking fine?", "When do I pay the parking fine?"),
                      ("How many seats does the hall have?", "How much do the seats in the hall cost?")],
    "focus": [("What does the camping set contain?", "What is the camping set?"),
              ("What is inside the gift basket?", "What is the gift basket?"),
              ("What is the bench made of?", "What is the bench?")],
    "antonym": [("How do I enable the screen reader?", "How do I disable the screen reader?"),
                ("How do I import bookmarks?", "How do I export bookmarks?"),
                ("How do I pin a note?", "How do I unpin a note?")],
    "scope": [("How do I view the weekly schedule?", "How do I view the monthly schedule?"),
              ("Who won the first round?", "Who won the last round?"),
              ("Can I pause all downloads?", "Can I pause one download?")],
    "entity": [("How do I sync my iPhone calendar?", "How do I sync my Android calendar?"),
               ("Is the Vienna branch open today?", "Is the Prague branch open today?"),
               ("How do I install Node on Windows?", "How do I install Node on macOS?")],
    "direction": [("How do I send money from savings to checking?", "How do I send money from checking to savings?"),
                  ("How do I translate Spanish to German?", "How do I translate German to Spanish?"),
                  ("Can I rebase my branch onto develop?", "Can I rebase develop onto my branch?")],
    "substitution": [("How do I clean the oven filter?", "How do I clean the fridge filter?"),
                     ("Why is the upstairs radiator cold?", "Why is the downstairs radiator cold?"),
                     ("Can I pay rent by transfer?", "Can I pay rent by cash?")],
}
SERVE = [
    ("How do I set up my email on a new phone?", "How do I configure my email on a new phone?"),
    ("How can I find out which plan I am on?", "How can I discover which plan I am on?"),
    ("How do I turn off location tracking?", "How do I disable location tracking?"),
    ("How do I reset my router?", "How can I reset my router?"),
    ("How do I change the language of the app?", "How can I change the app language?"),
]


@pytest.fixture(scope="module")
def embedder():
    from ragcache.semantic.embedding import resolve_embedder

    return resolve_embedder(None)


@pytest.fixture(scope="module")
def verifier(embedder):
    from ragcache.semantic.decision.verifier import default_verifier

    v = default_verifier(embedder)
    assert v is not None, "the packaged embedder must get the learned verifier"
    return v


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(REFUSE))
def test_verifier_refuses_each_guard_kind(verifier, embedder, kind):
    for a, b in REFUSE[kind]:
        va, vb = embedder.encode([a, b])
        verdict = verifier.check(a, b, float(va @ vb))
        assert not verdict.ok, (kind, a, b, verifier.score(a, b))


@pytest.mark.slow
def test_verifier_serves_true_paraphrases(verifier, embedder):
    for a, b in SERVE:
        va, vb = embedder.encode([a, b])
        assert verifier.check(a, b, float(va @ vb)).ok, (a, b, verifier.score(a, b))


@pytest.mark.slow
@pytest.mark.parametrize("guards,decider", [(True, "PairDecider"), ("rules", "GuardSet"),
                                            ("verifier", "LearnedVerifier")])
def test_swapped_numbers_never_hit_through_the_default_cache(embedder, guards, decider):
    from ragcache.semantic import SemanticCache

    cache = SemanticCache(embedder=embedder, guards=guards)
    assert cache.guards.__class__.__name__ == decider
    templates = ["How do I empty bucket {}-{}?", "Is gate {} to {} open?", "Why does shelf {}-{} tilt?",
                 "Can I move from row {} to row {}?", "What is the fee from zone {} to zone {}?"]
    pairs = [(x, y) for x in range(1, 6) for y in range(x + 1, 7)][:9]
    wrong = 0
    for t in templates:
        for x, y in pairs:
            cache.store(t.format(x, y), f"answer {x}-{y}")
        for x, y in pairs:
            hit = cache.lookup(t.format(y, x))
            wrong += hit is not None
    assert wrong == 0
    assert cache.lookup(templates[0].format(1, 2)).answer == "answer 1-2"


@pytest.mark.slow
@pytest.mark.parametrize("guards,decider,threshold", [(True, "PairDecider", None), ("rules", "GuardSet", 0.94),
                                                      ("verifier", "LearnedVerifier", None)])
def test_postgres_cache_uses_the_decider_and_refuses_swapped_numbers(pg_server, embedder, guards, decider, threshold):
    pytest.importorskip("psycopg", reason="pip install 'ragcache[shared]'")
    from ragcache.semantic.pg_cache import PgSemanticCache

    cache = PgSemanticCache(pg_server.url, schema=f"t_verifier_swaps_{decider.lower()}", embedder=embedder, guards=guards)
    try:
        assert type(cache.guards).__name__ == decider
        assert cache.threshold == (threshold if threshold is not None else cache.guards.floor)
        for x, y in [(1, 2), (3, 7), (4, 9)]:
            cache.store(f"How do I empty bucket {x}-{y}?", f"answer {x}-{y}")
        assert all(cache.lookup(f"How do I empty bucket {y}-{x}?") is None for x, y in [(1, 2), (3, 7), (4, 9)])
        assert cache.lookup("How do I empty bucket 3-7?").answer == "answer 3-7"
    finally:
        cache.clear()
        cache.close()


@pytest.mark.parametrize("guards", ["Verifier", "learned", "yes"])
def test_unknown_guard_names_are_refused(guards):
    from ragcache.semantic import SemanticCache

    with pytest.raises(ValueError, match="guards must be True, False, 'rules', 'pair', 'verifier' or a GuardSet"):
        SemanticCache(None, guards=guards)


def test_the_verifier_needs_the_packaged_embedder():
    from ragcache.semantic import SemanticCache
    from ragcache.testing import HashingEmbedder

    with pytest.raises(ValueError, match="needs the packaged all-MiniLM-L6-v2 embedder"):
        SemanticCache(None, embedder=HashingEmbedder(), guards="verifier")
    assert type(SemanticCache(None, embedder=HashingEmbedder()).guards).__name__ == "GuardSet"
