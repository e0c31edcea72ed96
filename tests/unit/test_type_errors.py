"""Wrong argument types raise TypeError, wrong values ValueError, with the same clear messages
(issue 32, section 3), across the public constructors and checkers: RagCache, SemanticCache,
PromptLayout, partition_key, LocalEngine / LocalBackend, the provider backends, the text checks."""

from __future__ import annotations

import math

import pytest
from pipeline_doubles import EchoBackend

from ragcache import (
    LocalBackend,
    LocalEngine,
    PromptLayout,
    RagCache,
    SemanticCache,
    partition_key,
)
from ragcache.providers.openai import OpenAIBackend
from ragcache.semantic.decision.checks import (
    check_count,
    check_path,
    check_threshold,
    check_ttl,
    checked_partition,
)
from ragcache.semantic.flight import check_timeout
from ragcache.testing import HashingEmbedder
from ragcache.text_checks import checked_question

CASES = [
    # (callable, wrong type, wrong value, words of the message)
    (check_threshold, "0.9", 1.5, "threshold must be a cosine similarity"),
    (check_threshold, True, math.nan, "threshold must be a cosine similarity"),
    (lambda v: check_count("max_entries", v), 2.5, 0, "max_entries must be"),
    (lambda v: check_count("max_entries", v), "10", -3, "max_entries must be"),
    (check_ttl, "60", -1.0, "ttl_s must be > 0 seconds"),
    (check_ttl, True, math.inf, "ttl_s must be > 0 seconds"),
    (check_timeout, "5", -0.5, "flight timeout must be"),
    (check_timeout, None, math.nan, "flight timeout must be"),
    (lambda v: check_path("path", v), 123, "   ", "path must be a folder path"),
    (lambda v: check_path("path", v), b"answers", "", "path must be a folder path"),
    (checked_question, 42, "  \u200b ", "question"),
    (checked_question, b"How?", "\0\0", "question"),
    (lambda v: PromptLayout.build(question=v), ["q"], "   ", "question must be a"),
    (lambda v: partition_key(model=v), 5, "", "model must be"),
    (lambda v: partition_key(model="m", namespace=v), None, "", "namespace must be"),
    (lambda v: OpenAIBackend(client=object(), model=v), 5, "", "model"),
]


@pytest.mark.parametrize(("fn", "wrong_type", "wrong_value", "words"), CASES)
def test_type_error_for_a_type_value_error_for_a_value(fn, wrong_type, wrong_value, words):
    with pytest.raises(TypeError, match=words) as e:
        fn(wrong_type)
    assert not isinstance(e.value, ValueError)
    with pytest.raises(ValueError, match=words):
        fn(wrong_value)


def test_partition_must_be_a_partition_key_type():
    with pytest.raises(TypeError, match="partition must be a PartitionKey"):
        checked_partition("tenant-a")


@pytest.mark.parametrize("bad", [None, "engine", 3])
def test_engine_wrappers_want_an_engine(bad):
    with pytest.raises(TypeError, match="LocalBackend needs a LocalEngine"):
        LocalBackend(bad)
    with pytest.raises(TypeError, match="LocalEngine takes a LoadedModel"):
        LocalEngine(bad)


def test_ragcache_and_semantic_cache():
    with pytest.raises(TypeError, match="backend must be a ragcache Backend"):
        RagCache("local")
    with pytest.raises(TypeError, match="semantic must be a SemanticCache"):
        RagCache(EchoBackend(), semantic="answers")
    with pytest.raises(TypeError, match="threshold"):
        SemanticCache(None, embedder=HashingEmbedder(), threshold="high")
    with pytest.raises(ValueError, match="threshold"):
        SemanticCache(None, embedder=HashingEmbedder(), threshold=2.0)
    with pytest.raises(TypeError, match="embedder must be None"):
        SemanticCache(None, embedder=42)
    with SemanticCache(None, embedder=HashingEmbedder()) as c:
        with pytest.raises(TypeError, match="answer must be a str"):
            c.store("How do I rotate keys?", 42)
        with pytest.raises(TypeError, match="metadata must be a dict"):
            c.store("How do I rotate keys?", "Use the console.", metadata=[("k", 1)])
        with pytest.raises(ValueError, match="metadata must be JSON-like"):
            c.store("How do I rotate keys?", "Use the console.", metadata={"x": math.nan})
        assert len(c) == 0  # nothing stored by a refused call


def test_langchain_adapters():
    pytest.importorskip("langchain_ragcache")
    from langchain_ragcache import RagCacheGraphCache, RagCacheSemanticCache, RagPrompt

    for cls, kw in ((RagCacheSemanticCache, {"path": None}), (RagCacheGraphCache, {})):
        with pytest.raises(TypeError, match="namespace must be a non-empty str"):
            cls(namespace=5, **kw)
        with pytest.raises(ValueError, match="namespace must be a non-empty str"):
            cls(namespace="", **kw)
    with pytest.raises(TypeError, match="RagPrompt takes a dict"):
        RagPrompt(system="s").invoke("How?")
    with pytest.raises(TypeError, match="non-empty string under 'question'"):
        RagPrompt(system="s").invoke({"question": 5, "context": []})
    with pytest.raises(ValueError, match="non-empty string under 'question'"):
        RagPrompt(system="s").invoke({"question": "  ", "context": []})
    with pytest.raises(TypeError, match=r"context\[0\]"):
        RagPrompt(system="s").invoke({"question": "How?", "context": [42]})
