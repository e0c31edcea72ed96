"""Breakpoint placement, the server's caching rules and cost accounting (no network, no model)."""

import copy

import pytest

from ragcache.prompt.layout import PromptLayout
from ragcache.providers.anthropic.blocks import LOOKBACK_BLOCKS, RequestError, check_breakpoints, flatten_request, prefix_hashes
from ragcache.providers.anthropic.breakpoints import add_breakpoints, layout_request
from ragcache.server.cache_rules import ProviderPromptCache
from ragcache.providers.anthropic.pricing import min_cacheable_tokens, price_for, request_cost
from ragcache.providers.anthropic.usage import CacheMonitor, PromptCacheWarning, UsageRecord

CHARS = len  # 1 token per character: deterministic and easy to reason about
TOOLS = [{"name": "lookup", "description": "Look a term up. " * 80, "input_schema": {"type": "object", "properties": {}}}]


def docs(n, size=120):
    return [{"id": f"d{i:02d}", "text": f"document {i} " + "x" * size} for i in range(n)]


def markers(kwargs):
    return [b for b in flatten_request(kwargs) if b.cache_control is not None]


def test_layout_request_places_markers_on_tools_system_and_last_document():
    lay = PromptLayout.build(question="Q?", system="S" * 2000, tools=TOOLS, documents=docs(3), lint="off")
    req = layout_request(lay, model="claude-sonnet-4-5", max_tokens=16, token_counter=CHARS)
    marks = markers(req.kwargs)
    assert [m.where for m in marks] == ["tools[0]", "system[0]", "messages[0].content[2]"]
    content = req.kwargs["messages"][-1]["content"]
    assert content[-1] == {"type": "text", "text": "Q?"} and "cache_control" in content[2]
    assert {p.role for p in req.placed} == {"tools", "system", "last-stable"}


def test_never_more_than_four_with_caller_markers_and_25_documents():
    lay = PromptLayout.build(question="Q?", system="S" * 2000, tools=TOOLS, documents=docs(25), lint="off")
    req = layout_request(lay, model="claude-sonnet-4-5", max_tokens=16, token_counter=CHARS)
    assert len(markers(req.kwargs)) == 4
    check_breakpoints(flatten_request(req.kwargs))  # the API would accept it
    # caller already marked 2 history blocks and a tool: one marker left, spent on the last document
    history = []
    for i in range(2):
        history += [{"role": "user", "content": [{"type": "text", "text": f"turn {i} " + "h" * 50,
                                                  "cache_control": {"type": "ephemeral"}}]},
                    {"role": "assistant", "content": f"answer {i}"}]
    tools = copy.deepcopy(TOOLS)
    tools[0]["cache_control"] = {"type": "ephemeral"}
    lay = PromptLayout.build(question="Q?", system="S" * 2000, tools=tools, documents=docs(25), history=history,
                             lint="off")
    with pytest.warns(PromptCacheWarning, match="2 caller breakpoint"):
        req = layout_request(lay, model="claude-sonnet-4-5", max_tokens=16, token_counter=CHARS)
    marks = markers(req.kwargs)
    assert len(marks) == 4
    assert marks[-1].where == "messages[4].content[24]"  # last document
    # one marker per kind first: the caller's tool, system, the last history turn, the last document;
    # the caller's two older history markers cache less than the last history turn and are dropped
    assert [d.where for d in req.dropped] == ["messages[0].content[0]", "messages[2].content[0]"]
    assert any(s.reason == "budget" for s in req.skipped)


def test_caller_markers_beyond_four_are_trimmed_on_a_copy():
    body = {"model": "claude-sonnet-4-5", "max_tokens": 8,
            "messages": [{"role": "user", "content": [{"type": "text", "text": f"b{i}" * 600,
                                                       "cache_control": {"type": "ephemeral"}} for i in range(6)]
                          + [{"type": "text", "text": "question"}]}]}
    before = copy.deepcopy(body)
    with pytest.warns(PromptCacheWarning, match="2 caller breakpoint"):
        req = add_breakpoints(body, token_counter=CHARS)
    assert body == before
    assert [m.where for m in markers(req.kwargs)] == [f"messages[0].content[{j}]" for j in (2, 3, 4, 5)]
    assert [d.where for d in req.dropped] == ["messages[0].content[0]", "messages[0].content[1]"]
    assert "dropped" in req.notes[0]


def test_twenty_block_rule_markers_within_lookback():
    lay = PromptLayout.build(question="Q?", system="S" * 2000, documents=docs(25), lint="off")
    req = layout_request(lay, model="claude-sonnet-4-5", max_tokens=16, token_counter=CHARS)
    idx = [p.index for p in req.placed]
    assert len(idx) <= 4
    gaps = [b - a for a, b in zip([-1, *idx], idx, strict=False)]
    assert max(gaps) <= LOOKBACK_BLOCKS, (idx, gaps)
    assert any(p.role == "lookback" for p in req.placed)


def test_below_minimum_prefix_gets_no_marker_and_says_so():
    lay = PromptLayout.build(question="Q?", system="short system", documents=docs(2, 20), lint="off")
    req = layout_request(lay, model="claude-sonnet-4-5", max_tokens=16, token_counter=CHARS)
    assert req.placed == [] and markers(req.kwargs) == []
    assert {s.reason for s in req.skipped} == {"below-minimum"}
    assert any("below the minimum 1024" in n for n in req.notes)
    # Haiku 4.5 needs 4096: a 3000-token prefix is enough for Sonnet 4.5 but not for it
    lay = PromptLayout.build(question="Q?", system="S" * 3000, lint="off")
    assert layout_request(lay, model="claude-sonnet-4-5-20250929", max_tokens=8, token_counter=CHARS).placed
    assert not layout_request(lay, model="claude-haiku-4-5", max_tokens=8, token_counter=CHARS).placed


def test_ttl_order_one_hour_before_five_minutes():
    lay = PromptLayout.build(question="Q?", system="S" * 2000, tools=TOOLS, documents=docs(2), lint="off")
    req = layout_request(lay, model="claude-sonnet-4-5", max_tokens=8, prefix_ttl="1h", token_counter=CHARS)
    assert [m.ttl for m in markers(req.kwargs)] == ["1h", "1h", "5m"]
    check_breakpoints(flatten_request(req.kwargs))
    body = {"model": "claude-sonnet-4-5", "max_tokens": 8, "system": "S" * 2000,
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "d" * 500, "cache_control": {"type": "ephemeral", "ttl": "1h"}},
                {"type": "text", "text": "q"}]}]}
    req = add_breakpoints(body, token_counter=CHARS, stable_end=1)
    assert [m.ttl for m in markers(req.kwargs)] == ["1h", "1h"] and "raised to '1h'" in req.notes[0]


def test_layout_request_does_not_mutate_inputs():
    tools, history, documents = copy.deepcopy(TOOLS), [{"role": "user", "content": "hi"},
                                                       {"role": "assistant", "content": "yo"}], docs(3)
    snapshot = copy.deepcopy((tools, history, documents))
    lay = PromptLayout.build(question="Q?", system="S" * 2000, tools=tools, history=history, documents=documents,
                             lint="off")
    req = layout_request(lay, model="claude-sonnet-4-5", max_tokens=8, token_counter=CHARS)
    req.kwargs["tools"][0]["name"] = "mutated"
    assert (tools, history, documents) == snapshot
    assert lay.tools[0]["name"] == "lookup"


def test_check_breakpoints_rejects_five_and_bad_ttl_order():
    five = {"messages": [{"role": "user", "content": [{"type": "text", "text": f"t{i}",
                                                       "cache_control": {"type": "ephemeral"}} for i in range(5)]}]}
    with pytest.raises(RequestError, match="maximum of 4"):
        check_breakpoints(flatten_request(five))
    order = {"system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
             "messages": [{"role": "user", "content": [{"type": "text", "text": "t",
                                                        "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]}
    with pytest.raises(RequestError, match="must not come after"):
        check_breakpoints(flatten_request(order))
    with pytest.raises(RequestError, match="ephemeral"):
        flatten_request({"messages": [{"role": "user", "content": [{"type": "text", "text": "t",
                                                                    "cache_control": {"type": "persistent"}}]}]})
    with pytest.raises(RequestError, match="messages"):
        flatten_request({"messages": []})


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _apply(cache, body, model="claude-sonnet-4-5"):
    blocks = flatten_request(body)
    return cache.apply(model, blocks, [len(b.text) for b in blocks], prefix_hashes(model, blocks))


def _body(n_docs, question="q", marks=(), system="S" * 1500, ttl=None):
    content = [{"type": "text", "text": f"doc{i} " + "y" * 100} for i in range(n_docs)] + [{"type": "text", "text": question}]
    for m in marks:
        content[m]["cache_control"] = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return {"system": system, "messages": [{"role": "user", "content": content}]}


def test_rules_write_then_read_ttl_refresh_and_expiry():
    clock = FakeClock()
    cache = ProviderPromptCache(clock=clock)
    first = _apply(cache, _body(3, marks=(2,)))
    assert first.read_tokens == 0 and first.write_5m == first.total_tokens - 1 and first.input_tokens == 1
    clock.t += 200
    second = _apply(cache, _body(3, "other question", marks=(2,)))
    assert second.read_tokens == first.write_tokens and second.write_tokens == 0
    clock.t += 200  # 400 s after the write, 200 s after the refreshing hit: still live
    assert _apply(cache, _body(3, marks=(2,))).read_tokens == first.write_tokens
    clock.t += 301
    expired = _apply(cache, _body(3, marks=(2,)))
    assert expired.read_tokens == 0 and expired.write_tokens == first.write_tokens


def test_rules_one_hour_ttl_and_split():
    clock = FakeClock()
    cache = ProviderPromptCache(clock=clock)
    out = _apply(cache, _body(3, marks=(2,), ttl="1h"))
    assert out.write_1h == out.total_tokens - 1 and out.write_5m == 0
    clock.t += 1800
    assert _apply(cache, _body(3, marks=(2,), ttl="1h")).read_tokens == out.write_1h


def test_rules_lookback_twenty_blocks():
    cache = ProviderPromptCache(clock=FakeClock())
    _apply(cache, _body(30, marks=(4,)))  # entry at block 5 (system is block 0)
    near = _apply(cache, _body(30, "other", marks=(24,)))  # breakpoint at block 25: 20 blocks later, within reach
    assert near.read_at == 5
    cache2 = ProviderPromptCache(clock=FakeClock())
    _apply(cache2, _body(30, marks=(4,)))
    far = _apply(cache2, _body(30, "other", marks=(25,)))  # block 26: 21 blocks later, out of reach
    assert far.read_tokens == 0 and far.read_at is None


def test_rules_minimum_changed_prefix_and_models():
    cache = ProviderPromptCache(clock=FakeClock())
    small = _apply(cache, _body(1, marks=(0,), system="tiny"))
    assert small.read_tokens == small.write_tokens == 0 and small.input_tokens == small.total_tokens
    _apply(cache, _body(3, marks=(2,)))
    changed = _apply(cache, _body(3, marks=(2,), system="T" * 1500))
    assert changed.read_tokens == 0 and changed.write_tokens > 0
    other_model = _apply(cache, _body(3, marks=(2,)), model="claude-opus-4-1")
    assert other_model.read_tokens == 0
    assert ProviderPromptCache(min_tokens=10).minimum("claude-haiku-4-5") == 10


def test_usage_cost_and_monitor_diagnosis():
    price, exact = price_for("claude-sonnet-4-5-20250929")
    assert exact and price.input_per_mtok == 3.0
    cost, uncached = request_cost(price, input_tokens=100, write_5m=1000, write_1h=0, read=0, output_tokens=10)
    assert cost == pytest.approx((100 + 1250) * 3e-6 + 10 * 15e-6)
    assert uncached == pytest.approx(1100 * 3e-6 + 10 * 15e-6)
    assert min_cacheable_tokens("anthropic/claude-3-haiku-20240307") == 2048
    clock = FakeClock()
    mon = CacheMonitor("claude-sonnet-4-5", clock=clock)
    lay = PromptLayout.build(question="Q?", system="S" * 2000, documents=docs(3), lint="off")
    req = layout_request(lay, model="claude-sonnet-4-5", max_tokens=8, token_counter=CHARS)
    total = sum(req.block_tokens)
    first = mon.record(req, {"input_tokens": 2, "cache_creation_input_tokens": total - 2,
                             "cache_read_input_tokens": 0, "output_tokens": 5})
    assert first.diagnosis == []
    clock.t += 400
    with pytest.warns(PromptCacheWarning, match="TTL expired"):
        mon.record(req, {"input_tokens": 2, "cache_creation_input_tokens": total - 2,
                         "cache_read_input_tokens": 0, "output_tokens": 5})
    changed = layout_request(PromptLayout.build(question="Q?", system="Z" * 2000, documents=docs(3), lint="off"),
                             model="claude-sonnet-4-5", max_tokens=8, token_counter=CHARS)
    with pytest.warns(PromptCacheWarning, match="prefix changed at block 0"):
        mon.record(changed, {"input_tokens": 2, "cache_creation_input_tokens": total - 2,
                             "cache_read_input_tokens": 0, "output_tokens": 5})
    assert mon.stats.requests == 3 and mon.stats.warnings == 2
    assert UsageRecord.from_usage({"input_tokens": 1, "output_tokens": 0}, price).prompt_tokens == 1
