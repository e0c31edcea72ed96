"""Cached tokens in every OpenAI-compatible dialect (issue 39, section 2): OpenAI's
``prompt_tokens_details.cached_tokens``, DeepSeek's ``prompt_cache_hit_tokens`` /
``prompt_cache_miss_tokens``, Kimi's top-level ``cached_tokens``, OpenRouter's ``cache_write_tokens``
(top level and in ``prompt_tokens_details``), read once by the one mapping
(the OpenAI-compatible row's usage dialect, :func:`ragcache.providers.openai.provider.read_usage`), streamed and not, through the real ``openai`` SDK
against a local server that answers in each provider's usage shape (the providers cannot run here)."""

from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai")

from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from ragcache import PromptLayout  # noqa: E402
from ragcache.backend import CacheUsage  # noqa: E402
from ragcache.providers.table import usage_of  # noqa: E402
from ragcache.providers.openai import OpenAIBackend  # noqa: E402
from ragcache.server.app import running_server  # noqa: E402

PROMPT, COMPLETION = 1200, 7
DIALECTS = {  # name -> (usage beside prompt/completion counts, expected (read, write))
    "openai": ({"prompt_tokens_details": {"cached_tokens": 1024}}, (1024, 0)),
    "deepseek": ({"prompt_cache_hit_tokens": 1024, "prompt_cache_miss_tokens": 176}, (1024, 0)),
    "kimi": ({"cached_tokens": 1024}, (1024, 0)),
    "openrouter-write": ({"prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 1100}}, (0, 1100)),
    "openrouter-write-top": ({"cache_write_tokens": 1100}, (0, 1100)),
    "openrouter-read-and-write": ({"prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 100}},
                                  (1024, 100)),
    "litellm": ({"cache_read_input_tokens": 900, "cache_creation_input_tokens": 200}, (900, 200)),
    # two shapes of one count: read once, never added
    "deepseek-both-shapes": ({"prompt_cache_hit_tokens": 1024, "prompt_cache_miss_tokens": 176,
                              "prompt_tokens_details": {"cached_tokens": 1024}}, (1024, 0)),
    "kimi-and-openai-shapes": ({"cached_tokens": 1024, "prompt_tokens_details": {"cached_tokens": 1024}}, (1024, 0)),
    "openrouter-write-both-shapes": ({"cache_write_tokens": 1100,
                                      "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 1100}},
                                     (0, 1100)),
    "placeholder-zero-beside-real": ({"prompt_tokens_details": {"cached_tokens": 0}, "prompt_cache_hit_tokens": 512},
                                     (512, 0)),
    "none": ({}, (0, 0)),
}


def _usage(name: str) -> dict:
    extra, _ = DIALECTS[name]
    return {"prompt_tokens": PROMPT, "completion_tokens": COMPLETION, "total_tokens": PROMPT + COMPLETION,
            **json.loads(json.dumps(extra))}


async def _chat(request: Request):
    """A chat-completions endpoint answering in the usage dialect named by the model id."""
    body = json.loads(await request.body())
    name = body["model"]
    base = {"id": "chatcmpl-1", "created": 1, "model": name}
    if not body.get("stream"):
        return JSONResponse({**base, "object": "chat.completion", "usage": _usage(name), "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Fourteen days."}, "finish_reason": "stop"}]})

    def chunk(choices, usage=None):
        return "data: " + json.dumps({**base, "object": "chat.completion.chunk", "choices": choices,
                                      "usage": usage}) + "\n\n"

    async def events():
        yield chunk([{"index": 0, "delta": {"role": "assistant", "content": "Fourteen "}, "finish_reason": None}])
        yield chunk([{"index": 0, "delta": {"content": "days."}, "finish_reason": "stop"}])
        yield chunk([], _usage(name))  # stream_options.include_usage: the last chunk carries the usage
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def base_url():
    with running_server(None, app=Starlette(routes=[Route("/v1/chat/completions", _chat, methods=["POST"])])) as url:
        yield url + "/v1"


LAYOUT = PromptLayout.build(question="How long do refunds take?", system="Be brief.",
                            documents=[{"id": "refunds", "text": "Refunds take 14 days."}], lint="off")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "streamed"])
@pytest.mark.parametrize("name", list(DIALECTS))
def test_every_dialect_is_read_once(base_url, name, stream):
    read, write = DIALECTS[name][1]
    with openai.OpenAI(base_url=base_url, api_key="local", max_retries=0) as client:
        backend = OpenAIBackend(client, model=name, stream=stream, price=(3.0, 0.3, 15.0, 3.75))
        r = backend.generate(LAYOUT, max_new_tokens=16)
    u = r.usage
    assert (u.cache_read, u.cache_write) == (read, write)
    assert u.prompt_tokens == PROMPT and u.reused + u.computed == PROMPT and u.completion_tokens == COMPLETION
    assert r.layer == ("provider-cache" if read else "provider") and r.text == "Fourteen days."
    expected = ((PROMPT - read - write) * 3.0 + read * 0.3 + write * 3.75 + COMPLETION * 15.0) / 1e6
    assert u.cost_usd == pytest.approx(expected) and u.uncached_cost_usd == pytest.approx(
        (PROMPT * 3.0 + COMPLETION * 15.0) / 1e6)
    assert backend.stats.cached_tokens == read and backend.stats.cache_write_tokens == write


async def test_every_dialect_is_read_once_async(base_url):
    async with openai.AsyncOpenAI(base_url=base_url, api_key="local", max_retries=0) as client:
        for stream in (False, True):
            backend = OpenAIBackend(async_client=client, model="deepseek-both-shapes", stream=stream)
            r = await backend.agenerate(LAYOUT, max_new_tokens=16)
            assert (r.usage.cache_read, r.usage.cache_write, r.layer) == (1024, 0, "provider-cache")


def test_the_mapping_reads_dicts_and_clips_nonsense():
    assert usage_of("openai", {"prompt_cache_hit_tokens": 30, "prompt_cache_miss_tokens": 70}).prompt_tokens == 100
    u = usage_of("openai", {"prompt_tokens": 100, "cached_tokens": 80, "cache_write_tokens": 90})
    assert (u.cache_read, u.cache_write, u.computed) == (80, 20, 20)  # reads first, writes clipped to the rest
    u = usage_of("openai", {"input_tokens": 50, "input_tokens_details": {"cached_tokens": 40}, "output_tokens": 3})
    assert (u.cache_read, u.prompt_tokens, u.completion_tokens) == (40, 50, 3)  # the Responses API
    assert usage_of("openai", None) == CacheUsage()


def test_a_bad_price_is_refused():
    with pytest.raises(ValueError, match="cache_write"):
        OpenAIBackend(object(), model="m", price=(1.0, 2.0))
