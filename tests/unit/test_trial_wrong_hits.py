"""Wrong hits a new user found through the default SemanticCache (packaged MiniLM, default decider):
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
]
SERVE = [
    ("How do I set up a Python virtual environment?", "How do I configure a Python virtual environment?"),
    ("How do I read a CSV file with a header row?", "how do i read a csv file with a header row"),
    ("Can I return a bike within 30 days?", "Can I return a bike within 30 days ?"),
]


@pytest.fixture(scope="module")
def cache():
    with SemanticCache(None) as c:
        yield c


@pytest.mark.parametrize("stored,asked", REFUSE)
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
