"""Answers that did not finish are never stored as finished (issue 32, section 2; issue 29, item 2).

Through ``RagCache`` with the real ``openai`` / ``anthropic`` SDK backends, whose HTTP is answered by
``httpx.MockTransport`` (the SDKs' own transport seam): the local servers only ever end an answer
with a normal stop or the token budget, so a content filter, a null finish reason, a tool call, a
pause, a refusal, a context-window stop and a stream cut before its end event are sent from here.
Each is asked twice: the first answer keeps its real finish reason, nothing is stored, and the
second ask calls the provider again. A normal stop is stored and served with its provenance."""

from __future__ import annotations

import asyncio
import json

import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

from ragcache import RagCache, SemanticCache  # noqa: E402
from ragcache.answering import PROVENANCE_KEY, Provenance  # noqa: E402
from ragcache.backend import CacheUsage  # noqa: E402
from ragcache.providers.anthropic import AnthropicBackend  # noqa: E402
from ragcache.providers.anthropic.usage import FINISH_REASONS as ANTHROPIC  # noqa: E402
from ragcache.providers.openai import OpenAIBackend  # noqa: E402
from ragcache.providers.openai.backend import FINISH_REASONS as OPENAI  # noqa: E402
from ragcache.testing import HashingEmbedder  # noqa: E402
from ragcache.request import CacheRequest  # noqa: E402

DOCS = [{"id": "refunds", "text": "Refunds reach the original card within 14 days of the inspection."}]
Q = "How long do refunds take?"


class Upstream:
    """Counts requests and answers each with ``respond(body) -> httpx.Response``."""

    def __init__(self, respond) -> None:
        self.respond, self.requests = respond, 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        return self.respond(json.loads(request.content))


def _sse(events: list[tuple[str | None, dict | str]]) -> httpx.Response:
    lines = []
    for name, data in events:
        if name:
            lines.append(f"event: {name}")
        lines.append(f"data: {data if isinstance(data, str) else json.dumps(data)}")
        lines.append("")
    return httpx.Response(200, content=("\n".join(lines) + "\n").encode(), headers={"content-type": "text/event-stream"})


# ------------------------------------------------------------------------------------------ OpenAI
def _openai_response(finish, *, text="Refunds take 14 days.", stream=False, refusal=None, cut=False,
                     tool=False) -> httpx.Response:
    usage = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
    calls = [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}] if tool else None
    if not stream:
        msg = {"role": "assistant", "content": text, "refusal": refusal, "tool_calls": calls}
        return httpx.Response(200, json={"id": "c1", "object": "chat.completion", "created": 0, "model": "gpt-x",
                                         "choices": [{"index": 0, "message": msg, "finish_reason": finish,
                                                      "logprobs": None}], "usage": usage})
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "gpt-x"}
    words = text.split(" ")
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    if refusal:
        chunks.append({**base, "choices": [{"index": 0, "delta": {"refusal": refusal}, "finish_reason": None}]})
    for i, w in enumerate(words):
        piece = w if i == 0 else " " + w
        chunks.append({**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]})
    if cut:  # the connection ends mid-answer: no finish chunk, no usage, no [DONE]
        return _sse([(None, c) for c in chunks[: 1 + len(words) // 2]])
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    chunks.append({**base, "choices": [], "usage": usage})
    return _sse([(None, c) for c in chunks] + [(None, "[DONE]")])


def _openai_rag(upstream: Upstream, *, stream: bool, **kw) -> RagCache:
    client = openai.OpenAI(base_url="http://upstream.test/v1", api_key="k", max_retries=0,
                           http_client=httpx.Client(transport=httpx.MockTransport(upstream)))
    return RagCache(OpenAIBackend(client, model="gpt-x", stream=stream),
                    semantic=SemanticCache(None, embedder=HashingEmbedder()), **kw)


OPENAI_UNFINISHED = [
    ("content_filter", {}, "content_filter"),
    (None, {}, "incomplete"),
    ("tool_calls", {"tool": True}, "tool_calls"),
    ("function_call", {}, "tool_calls"),
    ("stop", {"refusal": "I can't help with that."}, "refusal"),
    ("length", {}, "length"),
    ("something_new", {}, "incomplete"),
    ("stop", {"cut": True}, "incomplete"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
@pytest.mark.parametrize(("native", "extra", "finish"), OPENAI_UNFINISHED,
                         ids=[f"{n}-{f}" + ("-cut" if e.get("cut") else "") for n, e, f in OPENAI_UNFINISHED])
def test_openai_unfinished_answers_are_not_stored(native, extra, finish, stream):
    if extra.get("cut") and not stream:
        pytest.skip("a cut body of a plain completion is an HTTP error, not an answer")
    upstream = Upstream(lambda body: _openai_response(native, stream=body.get("stream", False), **extra))
    # A cut at the budget is stored by default (the one rule, ragcache.answering.CACHE_TRUNCATED: with the
    # budget in the key, served to the same budget only); here the opt-out must keep it unstored.
    rag = _openai_rag(upstream, stream=stream, **({"cache_truncated": False} if finish == "length" else {}))
    first = rag.answer(Q, DOCS)
    assert first.finish_reason == finish and first.layer == "provider"
    assert first.provenance is not None and first.provenance.finish_reason == finish
    second = rag.answer(Q, DOCS)
    assert second.layer == "provider" and second.finish_reason == finish
    assert upstream.requests == 2 and len(rag.semantic) == 0


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_openai_normal_stop_is_stored_and_a_hit_replays_no_usage(stream):
    upstream = Upstream(lambda body: _openai_response("stop", stream=body.get("stream", False)))
    rag = _openai_rag(upstream, stream=stream)
    first = rag.answer(Q, DOCS)
    assert first.finish_reason == "stop" and first.usage.prompt_tokens == 20 and first.usage.completion_tokens == 5
    hit = rag.answer(Q, DOCS)
    assert upstream.requests == 1 and hit.layer == "semantic" and hit.text == first.text
    assert hit.usage == CacheUsage() and hit.ttft_s > 0 and hit.finish_reason == "stop"
    assert hit.provenance == Provenance("provider", "stop", model="openai:gpt-x", stop_reason="stop",
                                        snapshot="gpt-x")  # the model the response named


def test_openai_cut_at_the_budget_is_stored_by_default_for_its_own_budget():
    upstream = Upstream(lambda body: _openai_response("length", stream=False))
    rag = _openai_rag(upstream, stream=False)  # the default: ragcache.answering.CACHE_TRUNCATED
    assert rag.answer(Q, DOCS).finish_reason == "length"
    hit = rag.answer(Q, DOCS)
    assert hit.layer == "semantic" and hit.finish_reason == "length" and upstream.requests == 1
    assert rag.answer(Q, DOCS, max_new_tokens=200).layer == "provider"  # another budget: not served


# --------------------------------------------------------------------------------------- Anthropic
def _anthropic_response(stop_reason, *, text="Refunds take 14 days.", stream=False, cut=False, tool=False,
                        stop_sequence=None) -> httpx.Response:
    usage = {"input_tokens": 20, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    blocks = [{"type": "text", "text": text}]
    if tool:
        blocks.append({"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}})
    msg = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6", "content": blocks,
           "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": usage}
    if not stream:
        return httpx.Response(200, json=msg)
    start = {**msg, "content": [], "stop_reason": None, "stop_sequence": None, "usage": {**usage, "output_tokens": 1}}
    events: list[tuple[str | None, dict | str]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}})]
    words = text.split(" ")
    for i, w in enumerate(words):
        piece = w if i == 0 else " " + w
        events.append(("content_block_delta", {"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": piece}}))
        if cut and i == len(words) // 2:  # the stream ends before content_block_stop / message_delta
            return _sse(events)
    events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason,
                                                                        "stop_sequence": stop_sequence},
                                     "usage": {"output_tokens": 5}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return _sse(events)


def _anthropic_rag(upstream: Upstream, *, stream: bool, aio: bool = False, **kw) -> RagCache:
    transport = httpx.MockTransport(upstream)
    clients = ({"async_client": anthropic.AsyncAnthropic(base_url="http://upstream.test", api_key="k", max_retries=0,
                                                         http_client=httpx.AsyncClient(transport=transport))}
               if aio else
               {"client": anthropic.Anthropic(base_url="http://upstream.test", api_key="k", max_retries=0,
                                              http_client=httpx.Client(transport=transport))})
    return RagCache(AnthropicBackend(model="claude-sonnet-4-6", stream=stream, warn=False, **clients),
                    semantic=SemanticCache(None, embedder=HashingEmbedder()), **kw)


ANTHROPIC_UNFINISHED = [
    ("tool_use", {"tool": True}, "tool_calls"),
    ("pause_turn", {}, "pause_turn"),
    ("refusal", {}, "refusal"),
    ("model_context_window_exceeded", {}, "context_window"),
    ("max_tokens", {}, "length"),
    (None, {}, "incomplete"),
    ("end_turn", {"cut": True}, "incomplete"),
]


@pytest.mark.parametrize("mode", ["create", "stream", "async-stream"])
@pytest.mark.parametrize(("native", "extra", "finish"), ANTHROPIC_UNFINISHED,
                         ids=[f"{n}-{f}" + ("-cut" if e.get("cut") else "") for n, e, f in ANTHROPIC_UNFINISHED])
def test_anthropic_unfinished_answers_are_not_stored(native, extra, finish, mode):
    if extra.get("cut") and mode == "create":
        pytest.skip("a cut body of a plain message is an HTTP error, not an answer")
    upstream = Upstream(lambda body: _anthropic_response(native, stream=body.get("stream", False), **extra))
    # max_tokens is stored by default under the one rule (CACHE_TRUNCATED); the opt-out keeps it unstored.
    rag = _anthropic_rag(upstream, stream=mode != "create", aio=mode.startswith("async"),
                         **({"cache_truncated": False} if finish == "length" else {}))

    def ask():
        return asyncio.run(rag.aanswer(Q, DOCS)) if mode.startswith("async") else rag.answer(Q, DOCS)

    first = ask()
    assert first.finish_reason == finish and first.layer == "provider"
    assert first.provenance.stop_reason == (None if extra.get("cut") else native)  # a cut stream never said
    assert ask().layer == "provider" and upstream.requests == 2 and len(rag.semantic) == 0


SNAPSHOT = "claude-sonnet-4-6"  # the model _anthropic_response names


@pytest.mark.parametrize("mode", ["create", "stream", "async-stream"])
@pytest.mark.parametrize(("native", "seq"), [("end_turn", None), ("stop_sequence", "###")])
def test_anthropic_normal_stop_is_stored_with_its_native_reason(native, seq, mode):
    upstream = Upstream(lambda body: _anthropic_response(native, stream=body.get("stream", False), stop_sequence=seq))
    rag = _anthropic_rag(upstream, stream=mode != "create", aio=mode.startswith("async"))

    def ask():
        return asyncio.run(rag.aanswer(Q, DOCS)) if mode.startswith("async") else rag.answer(Q, DOCS)

    first = ask()
    assert first.finish_reason == "stop" and first.usage.prompt_tokens == 20
    hit = ask()
    assert upstream.requests == 1 and hit.layer == "semantic" and hit.usage == CacheUsage()
    assert hit.provenance == Provenance("provider", "stop", model="anthropic:claude-sonnet-4-6", stop_reason=native,
                                        stop_sequence=seq, snapshot=SNAPSHOT)  # the model the response named
    row = rag.semantic.lookup(Q, partition=rag.prepare(Q, DOCS).partition)
    assert row.metadata[PROVENANCE_KEY]["v"] == 1


# ------------------------------------------------------------------------------ the mapping tables
def test_every_native_value_maps_to_a_finish_reason_and_only_a_normal_end_is_stop():
    from ragcache.backend import FINISH_REASONS
    from ragcache.providers.anthropic.usage import finish_reason as anthropic_finish
    from ragcache.providers.openai.backend import finish_reason as openai_finish

    assert set(OPENAI.values()) <= set(FINISH_REASONS) and set(ANTHROPIC.values()) <= set(FINISH_REASONS)
    assert {k for k, v in OPENAI.items() if v == "stop"} == {"stop"}
    assert {k for k, v in ANTHROPIC.items() if v == "stop"} == {"end_turn", "stop_sequence"}
    for bad in (None, "", "STOP", 3, "end"):
        assert openai_finish(bad) == "incomplete" and anthropic_finish(bad) == "incomplete"


@pytest.mark.parametrize("echo", [
    "Hi team, could you tell me on which days production deploys happen this week? Thanks!",
    "hi team could you tell me on which days production deploys happen this week thanks",
    "  HI TEAM, COULD YOU TELL ME ON WHICH DAYS PRODUCTION DEPLOYS HAPPEN THIS WEEK? THANKS!  ",
])
def test_an_answer_that_only_repeats_the_question_is_not_stored(echo):
    """A small model sometimes answers with the question itself; stored, that echo would be served to
    every repeat. Every entry point stores through AnswerPath.record, which passes the question."""
    from ragcache.answering import AnswerPath, cacheable
    from ragcache.backend import BackendResult, CacheUsage
    from ragcache.semantic import SemanticCache, partition_key
    from ragcache.testing import HashingEmbedder

    q = "Hi team, could you tell me on which days production deploys happen this week? Thanks!"
    r = BackendResult(echo, "model", CacheUsage.local(prompt_tokens=5), finish_reason="stop")
    assert not cacheable(r, question=q) and cacheable(r)  # without the question, nothing to compare
    real = BackendResult("Production deploys happen on Wednesdays.", "model", CacheUsage.local(prompt_tokens=5),
                         finish_reason="stop")
    assert cacheable(real, question=q)
    pk = partition_key(namespace="n", model="m")
    with SemanticCache(embedder=HashingEmbedder()) as c:
        path = AnswerPath(c)
        assert path.run(CacheRequest(q, None, pk), lambda: r).text == echo  # the caller still gets what the model said
        assert len(c) == 0 and path.run(CacheRequest(q, None, pk), lambda: real).text == real.text and len(c) == 1
