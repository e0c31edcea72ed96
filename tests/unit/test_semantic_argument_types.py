"""SemanticCache's remaining constructor and call arguments: a wrong type is a TypeError naming the
argument and what it takes (not Python's own comparison error, and not silently read as true), a
wrong value a ValueError; good values still open a cache and answer."""

import pytest

from ragcache import SemanticCache
from ragcache.semantic.budget import AnswerBudget, servable
from ragcache.testing import HashingEmbedder

EMB = HashingEmbedder()


@pytest.mark.parametrize("name,value", [
    ("hnsw_threshold", "a"), ("hnsw_threshold", 2.5), ("hnsw_threshold", True),
    ("autosave_every", "x"), ("autosave_every", None),
    ("search_threads", "2"), ("search_threads", 1.5),
    ("typo_correction", "yes"), ("typo_correction", 1), ("typo_correction", None),
    ("store_truncated", "no"), ("store_truncated", 0),
    ("reembed", "true"),
    ("guards", 1), ("guards", 0), ("guards", None), ("guards", 0.5),
])
def test_wrong_type_is_a_type_error_naming_the_argument(name, value):
    with pytest.raises(TypeError, match=name):
        SemanticCache(None, embedder=EMB, **{name: value})


@pytest.mark.parametrize("name,value", [
    ("hnsw_threshold", -3), ("hnsw_threshold", 0), ("autosave_every", 0), ("autosave_every", -1),
    ("search_threads", 0),
])
def test_wrong_value_is_a_value_error_naming_the_argument(name, value):
    with pytest.raises(ValueError, match=name):
        SemanticCache(None, embedder=EMB, **{name: value})


@pytest.mark.parametrize("kwargs", [
    {"hnsw_threshold": 1, "autosave_every": 1, "search_threads": None, "typo_correction": False,
     "store_truncated": True, "guards": False},
    {"search_threads": 2, "guards": True, "typo_correction": True, "reembed": False},
])
def test_good_values_still_open_and_answer(kwargs):
    with SemanticCache(None, embedder=EMB, threshold=0.99, **kwargs) as c:
        c.store("How do I rotate the API keys?", "Settings > Keys.")
        hit = c.lookup("How do I rotate the API keys?")
        assert hit is not None and hit.answer == "Settings > Keys."


@pytest.mark.parametrize("max_tokens", ["3", 2.5, True, [3]])
def test_max_tokens_of_the_wrong_type_is_a_type_error(max_tokens):
    with SemanticCache(None, embedder=EMB, threshold=0.99) as c:
        with pytest.raises(TypeError, match="max_tokens must be a non-negative int or None"):
            c.lookup("How do I rotate the API keys?", max_tokens=max_tokens)
    with pytest.raises(TypeError, match="max_tokens"):
        servable(AnswerBudget(), max_tokens)


def test_negative_max_tokens_stays_a_value_error():
    with pytest.raises(ValueError, match="max_tokens"):
        servable(AnswerBudget(), -1)


@pytest.mark.parametrize("namespace", [5, b"default", ["default"]])
def test_clear_with_a_non_str_namespace_removes_nothing(namespace):
    with SemanticCache(None, embedder=EMB, threshold=0.99) as c:
        c.store("How do I rotate the API keys?", "Settings > Keys.")
        with pytest.raises(TypeError, match="namespace must be a str"):
            c.clear(namespace)
        assert c.lookup("How do I rotate the API keys?") is not None
        assert c.clear("default") == 1 and c.lookup("How do I rotate the API keys?") is None
