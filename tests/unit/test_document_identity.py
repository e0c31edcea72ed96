"""One document identity (issue 10): every document shape reads the same through ``as_document``, and an answer is
invalidated by the document's text (whatever its whitespace), its id or its content hash."""

from __future__ import annotations

import pytest
from pipeline_doubles import DOCS, EchoBackend, echo_rag

from ragcache import as_document
from ragcache.hashing import content_hash


@pytest.mark.parametrize("variant", [
    lambda t: t,                      # as stored
    lambda t: "  " + t + "\n",        # outer whitespace
    lambda t: t.replace(". ", ".\r\n"),  # Windows newlines
])
def test_invalidate_by_document_text_removes_the_stale_answer(variant):
    backend = EchoBackend()
    rag = echo_rag(backend)
    docs = [d["text"].replace(". ", ".\n") for d in DOCS[:2]]
    q = "How long do refunds take?"
    assert rag.answer(q, docs).layer == "model"
    assert rag.answer(q, docs).layer == "semantic"
    assert rag.semantic.invalidate(variant(docs[0])) == 1
    again = rag.answer(q, docs)
    assert again.layer == "model" and backend.calls == 2


def test_invalidate_by_id_and_by_content_hash():
    rag = echo_rag()
    q = "When do orders ship?"
    rag.answer(q, DOCS[:2])
    assert rag.semantic.invalidate("shipping") == 1
    assert rag.answer(q, DOCS[:2]).layer == "model"
    assert rag.answer(q, DOCS[:2]).layer == "semantic"
    assert rag.semantic.invalidate(content_hash(DOCS[0]["text"])) == 1
    assert rag.answer(q, DOCS[:2]).layer == "model"


def test_as_document_reads_every_shape_the_same():
    from langchain_core.documents import Document
    from llama_index.core.schema import NodeWithScore, TextNode

    text, meta = "Bikes carry a warranty.", {"source": "faq", "lang": "en"}
    shapes = [
        {"id": "w", "text": text, "metadata": meta},
        {"doc_id": "w", "page_content": text, "source": "faq", "lang": "en"},
        Document(page_content=text, metadata=meta, id="w"),
        TextNode(text=text, id_="w", metadata=meta),
        NodeWithScore(node=TextNode(text=text, id_="w", metadata=meta), score=0.3),
        as_document({"id": "w", "text": text, "metadata": meta}),
    ]
    segs = [as_document(s) for s in shapes]
    assert len({(s.id, s.text, tuple(sorted(s.metadata.items())), s.content_hash, s.render_hash) for s in segs}) == 1
    assert segs[0].content_hash == content_hash(text)
    for bad in (42, {"text": 3}, object()):  # a wrong type
        with pytest.raises(TypeError, match="document"):
            as_document(bad)
    with pytest.raises(ValueError, match="document"):  # a dict without its text: a wrong value
        as_document({"id": "x"})
