"""Breakpoints on requests as callers write them (issue 11, items 11 and 12): empty text blocks
never carry a marker, and over the 4-marker limit the markers that pay are kept and the
dropped ones are named. Checked against the local server's caching rules too."""

import copy
import warnings
from types import SimpleNamespace

import pytest

from ragcache.providers.anthropic import AnthropicCaching, PromptCacheWarning, add_breakpoints
from ragcache.providers.anthropic.blocks import check_breakpoints, flatten_request, prefix_hashes
from ragcache.prompt.layout import PromptLayout
from ragcache.providers.anthropic.breakpoints import layout_request
from ragcache.server.cache_rules import ProviderPromptCache

CHARS = len
MODEL = "claude-sonnet-4-5"
SYSTEM = "You answer from the manual. " * 80
TOOLS = [{"name": "lookup", "description": "Look a term up. " * 40, "input_schema": {"type": "object"}},
         {"name": "convert", "description": "Convert units. " * 40, "input_schema": {"type": "object"}}]


def text(t, mark=False, ttl=None):
    b = {"type": "text", "text": t}
    if mark:
        b["cache_control"] = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return b


def doc(i, size=400):
    return text(f"Manual section {i}: " + "torque the bolt " * (size // 16))


def marked(kwargs):
    return [b.where for b in flatten_request(kwargs) if b.cache_control is not None]


def caching():
    """Warnings are asserted where they are the subject; elsewhere they are expected noise."""
    return AnthropicCaching(MODEL, token_counter=CHARS, min_tokens=1024)


pytestmark = pytest.mark.filterwarnings("ignore::ragcache.providers.anthropic.blocks.PromptCacheWarning")


def valid(req):
    """The request the API would accept: at most 4 markers, TTL order, none on an empty block."""
    blocks = flatten_request(req.kwargs)
    check_breakpoints(blocks)
    assert not [b.where for b in blocks if b.cache_control is not None and not b.text.strip()]
    return blocks


# -- empty blocks ---------------------------------------------------------------------------

@pytest.mark.parametrize("empty", ["", " ", "\n\n", "\t "])
def test_empty_block_between_document_and_question(empty):
    body = {"system": SYSTEM, "messages": [{"role": "user", "content": [doc(0), doc(1), text(empty), text("Q?")]}]}
    req = caching().prepare(body)
    valid(req)
    assert marked(req.kwargs) == ["system[0]", "messages[0].content[1]"]  # the last document, not the empty block
    assert req.kwargs["messages"][0]["content"][2] == text(empty)  # left in place, unmarked
    assert body["messages"][0]["content"][2] == text(empty)  # caller's request untouched


@pytest.mark.parametrize("assistant", ["", [text("")], [text("  ")], [{"type": "thinking", "thinking": "hm",
                                                                       "signature": "sig"}, text("")]])
def test_history_with_an_empty_assistant_turn(assistant):
    body = {"system": SYSTEM, "messages": [
        {"role": "user", "content": [doc(0), text("first question?")]},
        {"role": "assistant", "content": assistant},
        {"role": "user", "content": [doc(1), text("second question?")]}]}
    if assistant == "":
        body["messages"][1]["content"] = [text("")]
    req = caching().prepare(body)
    blocks = valid(req)
    marks = marked(req.kwargs)
    # the history marker walked back past the empty turn (and the thinking block) to the last user block
    assert "messages[0].content[1]" in marks
    assert not any(m.startswith("messages[1]") for m in marks)
    assert {b.type for b in blocks if b.cache_control is not None} == {"text"}


def test_empty_last_stable_block_in_a_layout_history():
    history = [{"role": "user", "content": "What is torque?"}, {"role": "assistant", "content": [text("")]}]
    lay = PromptLayout.build(question="Q?", system=SYSTEM, history=history, lint="off")
    req = layout_request(lay, model=MODEL, max_tokens=8, token_counter=CHARS)
    valid(req)
    assert "messages[0].content[0]" in marked(req.kwargs)


def test_empty_system_block_is_skipped():
    body = {"system": [text(SYSTEM), text("")], "messages": [{"role": "user", "content": [doc(0), text("Q?")]}]}
    req = caching().prepare(body)
    valid(req)
    assert marked(req.kwargs)[0] == "system[0]"


def test_caller_marker_on_an_empty_block_moves_to_the_nearest_block_before_it():
    body = {"system": SYSTEM, "messages": [{"role": "user", "content": [doc(0), doc(1), text("", mark=True),
                                                                         text("Q?")]}]}
    req = caching().prepare(body)
    valid(req)
    assert "messages[0].content[1]" in marked(req.kwargs)
    assert any("moved to messages[0].content[1]" in n for n in req.notes)
    assert [p.origin for p in req.placed if p.where == "messages[0].content[1]"] == ["caller"]


def test_only_empty_blocks_before_a_caller_marker():
    body = {"messages": [{"role": "user", "content": [text(" ", mark=True), text("Q?")]}]}
    req = caching().prepare(body)
    valid(req)
    assert marked(req.kwargs) == [] and "removed" in req.notes[0]


# -- the 4-marker limit ----------------------------------------------------------------------

def issue_body(question, docs_from=0):
    """The issue's case: the caller marked system, two documents and the question; ragcache
    adds its own history, last-document and tools markers."""
    content = [doc(docs_from), doc(docs_from + 1), doc(docs_from + 2), text(question)]
    for j in (0, 1, 3):
        content[j]["cache_control"] = {"type": "ephemeral"}
    return {"tools": copy.deepcopy(TOOLS), "system": [text(SYSTEM, mark=True)], "messages": [
        {"role": "user", "content": [text("What does the manual cover?")]},
        {"role": "assistant", "content": [text("Brakes, gears and bolts.")]},
        {"role": "user", "content": content}]}


def test_system_and_history_kept_question_and_extra_documents_dropped():
    with pytest.warns(PromptCacheWarning, match="3 caller breakpoint"):
        req = AnthropicCaching(MODEL, token_counter=CHARS, min_tokens=1024).prepare(issue_body("Q1?"))
    valid(req)
    assert [(p.where, p.role) for p in req.placed] == [
        ("tools[1]", "tools"), ("system[0]", "caller"), ("messages[1].content[0]", "history"),
        ("messages[2].content[2]", "last-stable")]
    assert [d.where for d in req.dropped] == ["messages[2].content[0]", "messages[2].content[1]",
                                              "messages[2].content[3]"]  # two documents and the question
    assert all(d.origin == "caller" and d.reason == "budget" for d in req.dropped)
    assert any("dropped" in n and "messages[2].content[0]" in n for n in req.notes)


def _apply(rules, kwargs):
    blocks = flatten_request(kwargs)
    return rules.apply(MODEL, blocks, [CHARS(b.text) for b in blocks], prefix_hashes(MODEL, blocks))


def test_next_request_with_other_documents_reads_the_system_and_history():
    rules = ProviderPromptCache(min_tokens=1024, clock=lambda: 0.0)
    c = caching()
    _apply(rules, c.prepare(issue_body("Q1?")).kwargs)
    second = _apply(rules, c.prepare(issue_body("Q2?", docs_from=10)).kwargs)  # other documents and question
    stable = sum(CHARS(b.text) for b in flatten_request(issue_body("x"))[:5])  # 2 tools, system, 2 history turns
    assert second.read_tokens == stable

    def last_four_only(body):  # 0.1 kept the caller's last markers: documents and question, no system
        body["system"][0].pop("cache_control")
        body["messages"][2]["content"][2]["cache_control"] = {"type": "ephemeral"}
        return body

    rules_01 = ProviderPromptCache(min_tokens=1024, clock=lambda: 0.0)
    _apply(rules_01, last_four_only(issue_body("Q1?")))
    assert _apply(rules_01, last_four_only(issue_body("Q2?", docs_from=10))).read_tokens == 0


def test_caller_markers_on_tools_and_system_beat_a_second_tools_marker():
    body = {"tools": copy.deepcopy(TOOLS), "system": [text(SYSTEM, mark=True), text(SYSTEM + " more", mark=True)],
            "messages": [{"role": "user", "content": [doc(0), doc(1), text("Q?")]}]}
    body["tools"][0]["cache_control"] = {"type": "ephemeral"}
    body["tools"][1]["cache_control"] = {"type": "ephemeral"}
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        req = add_breakpoints({"model": MODEL, **body}, token_counter=CHARS)
    valid(req)
    assert marked(req.kwargs) == ["tools[1]", "system[0]", "system[1]", "messages[0].content[1]"]
    assert [d.where for d in req.dropped] == ["tools[0]"]
    assert len([x for x in w if issubclass(x.category, PromptCacheWarning)]) == 1


def test_within_the_limit_nothing_is_dropped_or_warned():
    body = {"system": [text(SYSTEM, mark=True)], "messages": [{"role": "user", "content": [doc(0), text("Q?")]}]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        req = caching().prepare(body)
    assert req.dropped == [] and marked(req.kwargs) == ["system[0]", "messages[0].content[0]"]


def test_one_hour_caller_markers_keep_ttl_order_after_dropping():
    body = issue_body("Q?")
    body["system"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    body["messages"][2]["content"][3]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    req = AnthropicCaching(MODEL, token_counter=CHARS, min_tokens=1024, warn=False).prepare(body)
    valid(req)  # a 1h marker never follows a 5m one
    assert req.kwargs["system"][0]["cache_control"]["ttl"] == "1h"


def test_result_reports_dropped_markers():
    c = caching()
    req = c.prepare(issue_body("Q?"))
    usage = SimpleNamespace(input_tokens=10, cache_creation_input_tokens=0, cache_read_input_tokens=0,
                            output_tokens=1, cache_creation=None)
    msg = SimpleNamespace(content=[SimpleNamespace(type="text", text="ok")], usage=usage, stop_reason="end_turn")
    res = c.result(req, msg, 0.1)
    assert res.details["dropped_breakpoints"] == ["messages[2].content[0]", "messages[2].content[1]",
                                                "messages[2].content[3]"]
