"""RagCache.answer's bookkeeping: truncated answers served to their budget only, ``use_semantic=False`` replaces the
stored answer, and questions and documents of the wrong type or value are named."""

from __future__ import annotations

import pytest
from pipeline_doubles import DOCS, EchoBackend, echo_rag


@pytest.mark.parametrize("budgets", [(8, 16), (8, 8)])
def test_truncated_answers_are_stored_by_default_and_served_to_their_budget_only(budgets):
    backend = EchoBackend(finish="length")
    rag = echo_rag(backend)
    q = "How long do refunds take?"
    layers = [rag.answer(q, DOCS[:1], max_new_tokens=b).layer for b in budgets]
    assert layers == (["model", "semantic"] if budgets[0] == budgets[1] else ["model", "model"])
    off = echo_rag(EchoBackend(finish="length"), cache_truncated=False)
    assert [off.answer(q, DOCS[2:3], max_new_tokens=8).layer for _ in range(2)] == ["model", "model"]


def test_truncated_answers_stored_on_request_never_serve_a_larger_budget():
    backend = EchoBackend(finish="length")
    rag = echo_rag(backend, cache_truncated=True)
    q = "How long do refunds take?"
    first = rag.answer(q, DOCS[:1], max_new_tokens=8)
    hit = rag.answer(q, DOCS[:1], max_new_tokens=8)
    assert hit.layer == "semantic" and hit.finish_reason == "length" and hit.text == first.text
    for larger in (9, 16, 128):
        assert rag.answer(q, DOCS[:1], max_new_tokens=larger).layer == "model"


def test_refresh_skips_the_lookup_and_replaces_the_answer():
    backend = EchoBackend()
    rag = echo_rag(backend)
    q = "When do orders ship?"
    rag.answer(q, DOCS[:2])
    fresh = rag.answer(q, DOCS[:2], use_semantic=False)
    assert fresh.layer == "model" and rag.answer(q, DOCS[:2]).text == fresh.text == "answer #2"


@pytest.mark.parametrize("question, match", [(None, "must be a str, got NoneType"), (42, "must be a str, got int"),
                                             (b"bytes?", "must be a str, got bytes"), ("   ", "question is empty")])
def test_questions_that_are_not_text_are_named(question, match):
    with pytest.raises(ValueError if isinstance(question, str) else TypeError, match=match):
        echo_rag().answer(question, DOCS[:1])


@pytest.mark.parametrize("documents", ["Keys rotate every 90 days.", b"raw bytes", 42])
def test_documents_must_be_a_list(documents):
    with pytest.raises(TypeError, match="documents must be a list"):
        echo_rag().answer("How often do keys rotate?", documents)


def test_no_documents_is_none_or_empty():
    rag = echo_rag()
    assert rag.answer("Hello?", None).layer == "model"
    assert rag.answer("Hello?", ()).layer == "semantic"
