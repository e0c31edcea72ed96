"""The one keyer (issue 41 item 1): every door turns its messages into the same CacheRequest."""

from __future__ import annotations

import dataclasses

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from ragcache.request import EXACT_QUESTION, CacheRequest, key_messages
from ragcache.server.proxy import body_request

QUESTION = "How long do refunds take?"
CONTEXT = "\n\n".join(f"Policy section {i}: refunds are issued to the original card after inspection."
                      for i in range(12))
SYSTEM = "Answer from the documents only."


def _body(text: str) -> dict:
    return {"model": "claude-x", "max_tokens": 32, "temperature": 0, "system": SYSTEM,
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}


def test_a_question_sized_turn_is_embedded_a_long_one_matched_exactly():
    short = key_messages([{"role": "user", "content": QUESTION}])
    assert short.question == QUESTION and not short.exact
    long = key_messages([{"role": "user", "content": CONTEXT + "\n\n" + QUESTION}])
    assert long.exact and long.question == EXACT_QUESTION and "whole_prompt" in long.extra
    req = long.request(model="m", tenant="t", params={"max_tokens": 8}, max_tokens=8, threshold=0.8)
    assert req.threshold == 1.0 and req.partition is not None  # an exact match, never an embedding of context


def test_a_labelled_question_is_cut_out_and_its_template_is_in_the_partition():
    keyed = key_messages([{"role": "user", "content": f"Context:\n{CONTEXT}\n\nQuestion: {QUESTION}"}])
    assert keyed.question == QUESTION and not keyed.exact
    assert CONTEXT.splitlines()[0] in keyed.extra["template"]
    other = key_messages([{"role": "user", "content": f"Context:\nsomething else\n\nQuestion: {QUESTION}"}])
    a = keyed.request(model="m", params={})
    b = other.request(model="m", params={})
    assert a.question == b.question and a.partition != b.partition  # same question, other context: no crossing


@pytest.mark.parametrize("text", [QUESTION, f"Context:\n{CONTEXT}\n\nQuestion: {QUESTION}",
                                  CONTEXT + "\n\n" + QUESTION])
def test_the_proxy_and_langchain_key_one_turn_by_the_same_rule(text):
    from langchain_ragcache._keys import key_messages as lc_key

    proxy = body_request(_body(text), tenant="t")
    lc = lc_key([SystemMessage(SYSTEM), HumanMessage(text)])
    assert proxy.question == lc.question and proxy.layout.system_text == lc.layout.system_text
    assert (proxy.threshold == 1.0) == lc.exact


def test_a_proxy_body_it_cannot_key_has_no_partition():
    bad = body_request({**_body(QUESTION), "temperature": "hot"}, tenant="t")
    assert bad.partition is None and bad.layout is None and bad.tenant == "proxy-t" and bad.max_tokens == 32
    assert body_request(_body(QUESTION), tenant="t", cached=False).partition is None


def test_the_request_is_one_frozen_record():
    req = key_messages([{"role": "user", "content": QUESTION}]).request(model="m", tenant="acme", params={"t": 0},
                                                                        max_tokens=16)
    assert isinstance(req, CacheRequest) and req.tenant == "acme" == req.partition.namespace and req.max_tokens == 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.question = "other"  # type: ignore[misc]
    from ragcache import Request

    assert Request is CacheRequest
