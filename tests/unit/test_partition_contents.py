"""What is in an answer's partition (issue 11 items 4 and 5): volatile text, rendered document metadata (not ids, not
the order), and the chat template's date."""

from __future__ import annotations

import pytest
from pipeline_doubles import DOCS, EchoBackend, echo_rag

from ragcache import LocalBackend, LocalEngine, RagCache, SemanticCache
from ragcache.testing import HashingEmbedder


@pytest.mark.parametrize("first, second", [
    ({"volatile": "User: user-a"}, {"volatile": "User: user-b"}),
    ({"volatile": "Today is 2026-11-29."}, {"volatile": "Today is 2026-11-30."}),
    ({"system": "Answer briefly. Today is 2026-11-29."}, {"system": "Answer briefly. Today is 2026-11-30."}),
    ({"system": "Answer briefly. The time is 09:14."}, {"system": "Answer briefly. The time is 17:02."}),
])
def test_volatile_text_is_in_the_partition(first, second):
    backend = EchoBackend()
    rag = echo_rag(backend)  # lint="move": the date leaves the stable prefix but stays in the key
    q = "How long do refunds take?"
    a = rag.answer(q, DOCS[:1], **first)
    b = rag.answer(q, DOCS[:1], **second)
    assert (a.layer, b.layer) == ("model", "model") and a.text != b.text
    assert rag.answer(q, DOCS[:1], **first).text == a.text  # each user / day still gets its own hit
    assert rag.prepare(q, DOCS[:1], **first).partition != rag.prepare(q, DOCS[:1], **second).partition


def test_document_metadata_and_ids_are_in_the_partition():
    rag = echo_rag()
    q = "How long do refunds take?"
    base = rag.prepare(q, [DOCS[0]]).partition
    renamed = rag.prepare(q, [{**DOCS[0], "id": "refunds-v2"}]).partition
    tagged = rag.prepare(q, [{**DOCS[0], "metadata": {"region": "uk"}}]).partition
    reordered = rag.prepare(q, list(reversed(DOCS[:2]))).partition
    assert renamed.digest == base.digest and renamed.document_ids != base.document_ids  # an id is metadata
    assert tagged.digest != base.digest  # rendered metadata is content
    assert reordered == rag.prepare(q, DOCS[:2]).partition  # canonical order: same key


def test_template_date_is_in_the_partition(tiny_wide3):
    from datetime import date

    def key(**kw):
        rag = RagCache(LocalBackend(LocalEngine(tiny_wide3, **kw)), semantic=SemanticCache(None, embedder=HashingEmbedder()))
        return rag.prepare("When do orders ship?", DOCS[:1]).partition.digest

    default = key()
    assert default == key()
    pinned = {key(template_date=date(2025, 1, d)) for d in (1, 2)}
    assert len(pinned | {default}) == 3
    assert key(template_date="live") == key(template_date=date.today())
