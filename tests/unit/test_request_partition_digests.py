"""A request's partition is byte-identical after its derivation moved to :mod:`ragcache.request` (issue 49).

The digests below were computed on main before the move (``ragcache.semantic.partition.request_partition``
and ``shaping_fields`` there). A stored answer is found by its partition digest, so a changed digest would
orphan every answer a deployment has stored: change these values only with a deliberate new key version.
"""

from __future__ import annotations

import warnings

import pytest

from ragcache.prompt.layout import PromptLayout
from ragcache.request import cache_request

_DOCS = [{"text": "Refunds take 5 days.", "id": "d1", "metadata": {"src": "faq"}}, "Keys rotate monthly.",
         {"text": "Plan B costs 9 EUR.", "id": "d3"}]
_HIST = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]
_TOOLS = [{"name": "lookup", "input_schema": {"type": "object"}}]
_H1, _H2, _H3 = ("558c378376e08651c32a4a94a86a337cf82352e6cbb09b56e0f2cc9136f35d38",
                 "d1e971a40817c3aff2752f5e919c8c6b405917f648ab1cb83456a1d61a587574",
                 "d88aa1d77407e342f361f69cded7e995572455f17e770543d90b0aeba27fa47c")


def _bare():
    return cache_request("How do refunds work?", PromptLayout.build(question="How do refunds work?"), model="local:ab12")


def _docs_canonical():
    return cache_request("How do refunds work?", PromptLayout.build(question="How do refunds work?", documents=_DOCS),
                         tenant="acme", model="anthropic:claude-sonnet-4-6",
                         params={"temperature": 0.0, "max_tokens": 64})


def _docs_given():
    layout = PromptLayout.build(question="How do refunds work?", documents=_DOCS, doc_order="given")
    return cache_request("How do refunds work?", layout, model="openai:gpt-4o",
                         params={"temperature": 0.7, "top_p": 0.9, "stop": ["\n\n"]})


def _full():
    layout = PromptLayout.build(question="What next?", system="Be brief.", tools=_TOOLS, documents=_DOCS[:2],
                                history=_HIST, volatile="Current date: 2026-12-06")
    return cache_request("What next?", layout, tenant="t2", model="local:x", partition_model="local:fp99",
                         params={"max_tokens": 16}, extra={"template": "qa-v1"}, document_ids=["src-7", "src-8"])


def _moved():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layout = PromptLayout.build(question="Who am I?", system="Be brief. Today is 2026-12-06.", lint="move")
    return cache_request("Who am I?", layout, model="local:y", params={"temperature": 1.0},
                         extra={"k": [1, 2, {"a": None}]})


CASES = [  # (request, digest on main before the move, content hashes, document ids)
    (_bare, "949034870b2a748ea7d7e7145860a84a3523cf9a84b6cdadad96513b94090fe8", (), ()),
    (_docs_canonical, "27c8e134031d361d33308c718b7727aee50a2ef040ef7e3d3b3912fac3897e4b", (_H1, _H2, _H3),
     ("d1", "d3")),
    (_docs_given, "a9025d61d750e132d37d4ce66cb03f47c665d8088702b0d28ed597077f21f1b9", (_H1, _H2, _H3), ("d1", "d3")),
    (_full, "340a9351e9f036232abf303e107b8c59847e979801fc652d3080f18a01032b7c", (_H1, _H3), ("d1", "src-7", "src-8")),
    (_moved, "b15e5df7cf495095610433329545a7584707b273d736bc2f9ca03d76e3bff9ba", (), ()),
]


@pytest.mark.parametrize(("build", "digest", "documents", "ids"), CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_cache_request_partition_is_the_one_computed_before_the_move(build, digest, documents, ids):
    pk = build().partition
    assert (pk.digest, pk.documents, pk.document_ids) == (digest, documents, ids)


def test_the_cases_differ():
    """Each case keys a different request: a derivation that dropped a field would merge two of them."""
    assert len({build().partition.digest for build, *_ in CASES}) == len(CASES)


_USER = [{"role": "user", "content": [{"type": "text", "text": "Refunds take 5 days."},
                                      {"type": "text", "text": "How do refunds work?"}]}]
PROXY_CASES = [  # (Messages API body, headers, digest on main before the move; None: not cached)
    ({"model": "claude-sonnet-4-6", "max_tokens": 64, "temperature": 0, "messages": _USER}, {},
     "098c4bd1caa3e2751667ebfc30f7c557a4fa55c6e8e0f6a72d55bf8964cf87e9"),
    ({"model": "claude-sonnet-4-6", "max_tokens": 32, "temperature": 0, "top_k": 5, "stop_sequences": ["END"],
      "system": [{"type": "text", "text": "Be brief."}], "metadata": {"user_id": "u1"}, "stream": True,
      "service_tier": "auto", "messages": _HIST + _USER},
     {"anthropic-version": "2023-06-01", "anthropic-beta": "tools-2024"},
     "e3592d99c078c9b9f420ab70e259f24ac44e0550c2bb6b444a5fe3ff159dc409"),
    ({"model": "claude-haiku-4-5", "max_tokens": 16, "temperature": 0.0, "tools": [{"name": "t", "input_schema": {"type": "object"}}],
      "tool_choice": {"type": "auto"},
      "messages": [{"role": "user", "content": "What is 2+2?"}]}, {},
     "7d542c15558f01fd3fd087cdc93bcc920f50a0c0ebefbc810f9dd6a2a20119b9"),
    ({"model": "claude-haiku-4-5", "max_tokens": 16, "temperature": 0.0, "brand_new_option": True,
      "messages": [{"role": "user", "content": "What is 2+2?"}]}, {}, None),
]


@pytest.mark.parametrize(("body", "headers", "digest"), PROXY_CASES, ids=["plain", "shaped", "tools", "unknown"])
def test_the_proxy_partition_is_the_one_computed_before_the_move(body, headers, digest):
    from ragcache.server.proxy import body_request

    pk = body_request(body, headers, tenant="acme").partition
    assert (pk.digest if pk is not None else None) == digest
