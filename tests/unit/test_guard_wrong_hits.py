"""Wrong hits the guards refuse through the default SemanticCache (packaged MiniLM, default decider, and the
opt-in learned verifier):
a different time relation, a negation by another word, a content word swapped in a shared frame. Each
kind on several inputs; the true paraphrases beside them must still hit."""

import pytest

from ragcache.semantic import SemanticCache

REFUSE = [
    ("Can I return a bike after 30 days?", "Can I return a bike within 30 days?"),
    ("Can I return a bike after 30 days?", "Can I return a bike before 30 days?"),
    ("Is the refund paid within 5 days?", "Is the refund paid after 5 days?"),
    ("How do I read a CSV file with a header row?", "How do I read a CSV file lacking a header row?"),
    ("How do I read a CSV file with a header row?", "How do I read a CSV file without a header row?"),
    ("How do I read a CSV file with a header row?", "How do I read a CSV file missing a header row?"),
    ("How do I read a CSV file with a header row?", "How do I read a CSV file with a header column?"),
    ("How do I free up disk space on Linux?", "How do I free up memory on Linux?"),
    ("How do I sort a list in pandas?", "How do I sort a list in polars?"),
    # a second trial (the opt-in verifier served these: a replaced word at cosine >= 0.94 is now its veto)
    ("Can I cancel within 24 hours?", "Can I cancel after 24 hours?"),
    ("Is there parking at the hotel?", "Is there parking near the hotel?"),
    ("Is the pool open until 10pm?", "Is the pool open from 10pm?"),
    ("Has it rained since Monday?", "Has it rained until Monday?"),
    ("Can I use my phone during the exam?", "Can I use my phone after the exam?"),
    ("Could you tell me if I can use my phone during the exam?", "Could you tell me if I can use my phone after the exam?"),
    ("Can I drink coffee during pregnancy?", "Can I drink coffee after pregnancy?"),
    ("Is the pool always open?", "Is the pool sometimes open?"),
    ("Does the plan include dental?", "Does the plan include only dental?"),
    ("Is the app also available on Android?", "Is the app only available on Android?"),
]
SERVE = [
    ("How do I set up a Python virtual environment?", "How do I configure a Python virtual environment?"),
    ("How do I read a CSV file with a header row?", "how do i read a csv file with a header row"),
    ("Can I return a bike within 30 days?", "Can I return a bike within 30 days ?"),
]


@pytest.fixture(scope="module", params=[True, "verifier"], ids=["guards", "verifier"])
def cache(request):
    # the opt-in verifier (and `ragcache calibrate semantic`, which switches caches to it) too: at cosine
    # >= 0.94 a replaced word is a veto ("after 30 days" / "within 30 days", "header row" / "header column")
    with SemanticCache(None, guards=request.param) as c:
        yield c


@pytest.mark.parametrize("stored,asked", [*REFUSE, *((b, a) for a, b in REFUSE)])
def test_default_cache_refuses(cache, stored, asked):
    cache.clear()
    cache.store(stored, "the stored answer")
    assert cache.lookup(asked) is None, [(c.similarity, c.verdict) for c in cache.candidates_for(asked)]
    assert cache.lookup(stored).answer == "the stored answer"


@pytest.mark.parametrize("stored,asked", SERVE)
def test_default_cache_serves_paraphrases(cache, stored, asked):
    cache.clear()
    cache.store(stored, "the stored answer")
    assert cache.lookup(asked) is not None, [(c.similarity, c.verdict) for c in cache.candidates_for(asked)]
