"""Only what can be served is stored (issue 47, item 2): through ``RagCacheSemanticCache``, a
generation that does not survive LangChain's serialisation (structured output's pydantic ``parsed``,
``with_structured_output(method="json_schema")``, values LangChain cannot write) is stored in a form
that reads back or not at all; an entry that cannot be read back (written by a newer langchain-core,
or damaged) is a logged miss, and the new answer replaces it."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_ragcache import RagCacheSemanticCache
from langchain_ragcache.cache import storable_generations
from pydantic import BaseModel

from ragcache.backend import BackendResult, CacheUsage

Q = "How many days do returns stay open?"


class Refund(BaseModel):
    days: int
    note: str = ""


class Policy(BaseModel):
    refund: Refund
    regions: list[str]


class Structured(BaseChatModel):
    """Answers with a message carrying ``additional_kwargs`` / ``generation_info`` as given (what a
    provider's structured output leaves there), ending normally."""

    extra: dict = {}
    info: dict | None = None
    meta: dict = {}
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "structured"

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
        self.calls += 1
        msg = AIMessage('{"days": 30}', additional_kwargs=dict(self.extra),
                        response_metadata={"finish_reason": "stop", **self.meta})
        return ChatResult(generations=[ChatGeneration(message=msg, generation_info=self.info)])


@pytest.fixture
def cache(embedder):
    return RagCacheSemanticCache(path=None, embedder=embedder)


PARSED = [Refund(days=30), Policy(refund=Refund(days=30, note="cards"), regions=["eu", "us"]),
          [Refund(days=1), Refund(days=2)], {"outer": Refund(days=7)}]


@pytest.mark.parametrize("parsed", PARSED, ids=lambda p: type(p).__name__)
def test_structured_output_is_stored_in_a_form_that_reads_back(cache, parsed):
    model = Structured(extra={"parsed": parsed, "refusal": None}, cache=cache)
    model.invoke([HumanMessage(Q)])
    hit = model.invoke([HumanMessage(Q)])  # was NotImplementedError: a pydantic object cannot be loaded
    assert model.calls == 1 and hit.response_metadata["ragcache"]["layer"] == "semantic"
    want = json.loads(json.dumps(parsed, default=lambda m: m.model_dump(mode="json")))
    assert hit.additional_kwargs["parsed"] == want and hit.additional_kwargs["refusal"] is None


def test_the_stored_form_is_what_the_structured_output_parser_reads():
    base = pytest.importorskip("langchain_openai.chat_models.base")
    g = ChatGeneration(message=AIMessage('{"refund": {"days": 30, "note": ""}, "regions": ["eu"]}',
                                         additional_kwargs={"parsed": Policy(refund=Refund(days=30), regions=["eu"])}))
    from langchain_core.load import loads

    back = loads(storable_generations([g]), allowed_objects="core")[0].message
    assert base._oai_structured_outputs_parser(back, Policy) == Policy(refund=Refund(days=30), regions=["eu"])


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


@pytest.mark.parametrize("where", ["info", "extra", "meta"])
@pytest.mark.parametrize("value", [_Opaque(), {1, 2}, b"raw bytes"], ids=["object", "set", "bytes"])
def test_a_generation_that_does_not_round_trip_is_not_stored(cache, where, value):
    model = Structured(cache=cache, **{where: {"value": value}})
    first = model.invoke([HumanMessage(Q)])
    second = model.invoke([HumanMessage(Q)])
    assert first.content == second.content and model.calls == 2 and len(cache.semantic_cache) == 0


def test_with_structured_output_json_schema_round_trips_through_the_cache(cache):
    """The real ``ChatOpenAI.with_structured_output(method="json_schema")`` against a local OpenAI-shaped
    upstream: the repeat is a hit that parses to the same object (langchain #29003)."""
    pytest.importorskip("langchain_openai")
    from langchain_openai import ChatOpenAI
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from ragcache.server.app import running_server

    calls = []

    async def completions(request):
        calls.append(await request.json())
        content = json.dumps({"refund": {"days": 30, "note": "cards"}, "regions": ["eu", "us"]})
        return JSONResponse({"id": f"chatcmpl-{len(calls)}", "object": "chat.completion", "created": 0,
                             "model": "gpt-4o-2024-08-06", "system_fingerprint": "fp_1",
                             "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                          "message": {"role": "assistant", "content": content, "refusal": None}}],
                             "usage": {"prompt_tokens": 20, "completion_tokens": 12, "total_tokens": 32}})

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    with running_server(None, app=app) as url:
        llm = ChatOpenAI(model="gpt-4o", base_url=url + "/v1", api_key="k", temperature=0, max_retries=0, cache=cache)
        structured = llm.with_structured_output(Policy, method="json_schema")
        first = structured.invoke(Q)
        second = structured.invoke(Q)
    assert first == second == Policy(refund=Refund(days=30, note="cards"), regions=["eu", "us"])
    assert len(calls) == 1 and calls[0]["response_format"]["type"] == "json_schema"


# ---------------------------------------------------------------- entries that cannot be read back
UNREADABLE = [
    json.dumps([{"lc": 1, "type": "not_implemented", "id": ["pkg", "Thing"], "repr": "Thing()"}]),
    json.dumps([{"lc": 1, "type": "constructor", "id": ["langchain", "schema", "output", "FutureGeneration"],
                 "kwargs": {"text": "hi"}}]),  # a class this langchain-core does not have
    json.dumps([{"lc": 2, "type": "constructor", "id": ["langchain", "schema", "output", "ChatGeneration"],
                 "kwargs": {"message": {"lc": 2, "type": "ai-v2"}}}]),  # a newer format
    "[{not json",
    json.dumps({"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "AIMessage"],
                "kwargs": {"content": "not a list of generations"}}),
]


def _plant(cache, question, raw):
    """An entry for ``question`` whose stored generations are ``raw``."""
    model = Structured()
    req = cache.request(_prompt(model, question), _llm_string(model))
    cache.path.record(req, BackendResult("old answer", "provider", CacheUsage(), finish_reason="stop"),
                      metadata={"langchain_generations": raw})


def _prompt(model, question):
    from langchain_core.load import dumps

    return dumps([HumanMessage(question)])


def _llm_string(model):
    return model._get_llm_string()


@pytest.mark.parametrize("raw", UNREADABLE)
def test_an_unreadable_entry_is_a_logged_miss_and_is_replaced(cache, raw, caplog):
    _plant(cache, Q, raw)
    model = Structured(cache=cache)
    with caplog.at_level(logging.WARNING, logger="langchain_ragcache.cache"):
        first = model.invoke([HumanMessage(Q)])  # was ValueError / NotImplementedError out of invoke
    assert model.calls == 1 and first.content == '{"days": 30}'
    assert "could not be read back" in caplog.text
    again = model.invoke([HumanMessage(Q)])
    assert model.calls == 1 and again.response_metadata["ragcache"]["layer"] == "semantic"
    assert len(cache.semantic_cache) == 1  # replaced, not added beside it


async def test_an_unreadable_entry_found_by_a_paraphrase_is_replaced_too(cache):
    paraphrase = "For how many days do returns stay open?"
    model = Structured(cache=cache)
    _plant(cache, Q, json.dumps([{"lc": 1, "type": "constructor", "id": ["langchain", "schema", "output", "ChatGeneration"],
                                  "kwargs": {"message": {"lc": 1, "type": "constructor",
                                                         "id": ["langchain", "schema", "messages", "AIMessage"],
                                                         "kwargs": {"content": "readable"}}}}]))
    assert (await cache.alookup(_prompt(model, paraphrase), _llm_string(model)))[0].message.content == "readable"
    _plant(cache, Q, UNREADABLE[0])
    assert await cache.alookup(_prompt(model, paraphrase), _llm_string(model)) is None
    await model.ainvoke([HumanMessage(paraphrase)])  # answered, and stored under both questions
    assert model.calls == 1
    assert (await cache.alookup(_prompt(model, Q), _llm_string(model)))[0].message.content == '{"days": 30}'
    assert len(cache.semantic_cache) == 2
