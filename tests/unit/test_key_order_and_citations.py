"""The key holds the documents in the order the model reads them, and a block's ``citations`` setting.

- the proxy forwards a body's blocks in the order given, so [D2, D1, q] and [D1, D2, q] are two keys
  (and an image's caption moved to another image is another key);
- ``RagCache(doc_order="given")`` renders the caller's order: reversed documents miss; the default
  canonical layout sorts them first, so reversed retrieval still hits;
- a document / search result with citations enabled and one with them disabled are two keys (and an
  earlier assistant text block's citations are in the key); ``cache_control`` stays out.
"""

from __future__ import annotations

import pytest

from ragcache import RagCache, SemanticCache
from ragcache.server.proxy import body_request
from ragcache.testing import HashingEmbedder
from ragcache.testing.answer_contract import ScriptedBackend

D1 = "Monday: the north gate opens at 06:00 and closes at 20:00."
D2 = "Friday: the south gate stays closed all day for repairs."
Q = "Which day is in the last document?"
IMG_A = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
IMG_B = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "BBBB"}}


def _body(*blocks, messages_before=()):
    return {"model": "claude-x", "max_tokens": 64,
            "messages": [*messages_before, {"role": "user", "content": [
                {"type": "text", "text": b} if isinstance(b, str) else b for b in blocks]}]}


def _digest(body):
    pk = body_request(body).partition
    assert pk is not None, "the body must be cacheable for this test to mean anything"
    return pk.digest


@pytest.mark.parametrize("first, second", [
    ((D2, D1, Q), (D1, D2, Q)),
    ((D1, D2, "a third passage", Q), (D1, "a third passage", D2, Q)),
    ((IMG_A, "this one is the dog", IMG_B, "this one is the cat", Q),
     (IMG_A, "this one is the cat", IMG_B, "this one is the dog", Q)),
    ((IMG_A, "this one is the dog", IMG_B, Q), ("this one is the dog", IMG_A, IMG_B, Q)),
])
def test_proxy_bodies_in_another_order_have_another_key(first, second):
    assert _digest(_body(*first)) != _digest(_body(*second))


@pytest.mark.parametrize("blocks", [(D2, D1, Q), (IMG_A, "this one is the dog", IMG_B, "the cat", Q)])
def test_the_same_body_twice_has_one_key(blocks):
    assert _digest(_body(*blocks)) == _digest(_body(*blocks))


def _doc_block(citations):
    block = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": D1},
             "title": "Gates"}
    if citations is not None:
        block["citations"] = citations
    return block


def _search_block(citations):
    return {"type": "search_result", "source": "https://example.org/gates", "title": "Gates",
            "content": [{"type": "text", "text": D1}], "citations": citations}


@pytest.mark.parametrize("make", [_doc_block, _search_block])
def test_citations_enabled_and_disabled_have_two_keys(make):
    on, off = make({"enabled": True}), make({"enabled": False})
    assert _digest(_body(on, Q)) != _digest(_body(off, Q))
    assert _digest(_body(on, Q)) == _digest(_body(make({"enabled": True}), Q))


def test_cache_control_stays_out_of_the_key():
    marked = {**_doc_block({"enabled": True}), "cache_control": {"type": "ephemeral"}}
    assert _digest(_body(marked, Q)) == _digest(_body(_doc_block({"enabled": True}), Q))


def test_an_earlier_assistant_blocks_citations_are_in_the_key():
    def turns(cited_text):
        cite = {"type": "char_location", "cited_text": cited_text, "document_index": 0, "document_title": "Gates",
                "start_char_index": 0, "end_char_index": len(cited_text)}
        return [{"role": "user", "content": [_doc_block({"enabled": True}), {"type": "text", "text": "When?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "At six.", "citations": [cite]}]}]

    a = _digest(_body("And the south gate?", messages_before=turns("opens at 06:00")))
    b = _digest(_body("And the south gate?", messages_before=turns("closes at 20:00")))
    assert a != b
    plain = [{"role": "user", "content": "When?"},
             {"role": "assistant", "content": [{"type": "text", "text": "At six.", "citations": None}]}]
    plain_str = [plain[0], {"role": "assistant", "content": "At six."}]
    # no citations: the same key as the same text sent as a string
    assert _digest(_body("And?", messages_before=plain)) == _digest(_body("And?", messages_before=plain_str))


def _rag(doc_order):
    sem = SemanticCache(None, embedder=HashingEmbedder())
    return RagCache(ScriptedBackend(text="Friday.", approximate=False), semantic=sem, doc_order=doc_order,
                    max_new_tokens=16)


def test_given_order_reversed_documents_miss():
    rag = _rag("given")
    assert rag.answer(Q, [D1, D2]).layer != "semantic"
    assert rag.answer(Q, [D1, D2]).layer == "semantic"
    assert rag.answer(Q, [D2, D1]).layer != "semantic"
    assert rag.prepare(Q, [D1, D2]).partition.digest != rag.prepare(Q, [D2, D1]).partition.digest


def test_canonical_order_reversed_documents_still_hit():
    rag = _rag("canonical")
    assert rag.answer(Q, [D1, D2]).layer != "semantic"
    assert rag.answer(Q, [D2, D1]).layer == "semantic"
    assert rag.prepare(Q, [D1, D2]).partition.digest == rag.prepare(Q, [D2, D1]).partition.digest
