"""LangChain's ChatOpenAI and LlamaIndex's OpenAILike pointed at the local OpenAI-compatible endpoint
(tiny random model, chunk cache): requests succeed, the second of a session reports cached tokens
(the engine's own reuse count), and LangChain's document parts in another order reuse their KV."""

from __future__ import annotations

import functools
import operator

import pytest

pytest.importorskip("openai")

from engine_doubles import RecordingEngine  # noqa: E402
from ragcache.server.app import running_server  # noqa: E402

DOCS = [
    ("Chains: replace the chain every 3,000 km or when the checker gauge drops into the 0.75 slot; a worn chain "
    "wears the cassette and the chainrings with it."),
    ("Tyres: road tyres run at 5 to 7 bar and gravel tyres at 2 to 3.5 bar; check the pressure every week because "
    "tyres lose about one bar a week."),
    ("Lights: the front light must be white and the rear light red; both must be on from sunset to sunrise and in "
    "poor visibility."),
]


pytestmark = pytest.mark.engine({"seed": 4}, cls=RecordingEngine, blending=True)


@pytest.fixture(scope="module")
def base_url(engine):
    with running_server(engine) as url:
        yield url + "/v1"


def reuse(gen):
    return gen.stats.prefix_tokens_reused + gen.stats.chunk_tokens_reused


# -- LangChain ----------------------------------------------------------------------------------
@pytest.fixture()
def chat(base_url):
    langchain_openai = pytest.importorskip("langchain_openai")
    return langchain_openai.ChatOpenAI(base_url=base_url, api_key="local", model="tiny-llama", max_tokens=3,
                                       temperature=0, max_retries=0, stream_usage=True)


def lc_messages(question, docs=DOCS, system="You are the workshop assistant. Answer from the notes."):
    from langchain_core.messages import HumanMessage, SystemMessage

    parts = [{"type": "text", "text": d} for d in docs] + [{"type": "text", "text": question}]
    return [SystemMessage(system), HumanMessage(content=parts)]


def test_chatopenai_second_request_reads_the_cache(chat, engine):
    first = chat.invoke(lc_messages("How often should I replace the chain?"))
    assert first.content == engine.generations[-1].text
    assert first.usage_metadata["input_token_details"]["cache_read"] == reuse(engine.generations[-1])
    second = chat.invoke(lc_messages("What pressure for gravel tyres?"))
    g = engine.generations[-1]
    read = second.usage_metadata["input_token_details"]["cache_read"]
    assert read == reuse(g) > 0.8 * second.usage_metadata["input_tokens"]
    assert second.usage_metadata["input_tokens"] == g.stats.prompt_tokens
    assert second.response_metadata["finish_reason"] == g.stats.finish_reason


def test_chatopenai_stream_and_async_report_cache_reads(chat, engine):
    system = "Streaming workshop assistant. Answer from the notes."
    chat.invoke(lc_messages("When are lights required?", system=system))
    full = functools.reduce(operator.add, chat.stream(lc_messages("How often should I check tyres?", system=system)))
    g = engine.generations[-1]
    assert full.content == g.text
    assert full.usage_metadata["input_token_details"]["cache_read"] == reuse(g) > 0
    import asyncio

    later = asyncio.run(chat.ainvoke(lc_messages("Which colour is the rear light?", system=system)))
    assert later.usage_metadata["input_token_details"]["cache_read"] == reuse(engine.generations[-1]) > 0


def test_chatopenai_documents_in_another_order_reuse_their_kv(chat, engine):
    system = "Reordering workshop assistant. Answer from the notes."
    chat.invoke(lc_messages("When are lights required?", system=system))
    r = chat.invoke(lc_messages("When are lights required?", DOCS[::-1], system=system))
    g = engine.generations[-1]
    assert g.stats.docs_hit == 3 and g.stats.chunk_tokens_reused > 0
    assert r.usage_metadata["input_token_details"]["cache_read"] == reuse(g) > g.stats.prefix_tokens_reused


# -- LlamaIndex -----------------------------------------------------------------------------------
@pytest.fixture()
def openai_like(base_url):
    mod = pytest.importorskip("llama_index.llms.openai_like")
    return mod.OpenAILike(model="tiny-llama", api_base=base_url, api_key="local", is_chat_model=True, max_tokens=3,
                          temperature=0, context_window=2048, max_retries=0)


def li_messages(question, system="LlamaIndex workshop assistant. Answer from the notes."):
    from llama_index.core.llms import ChatMessage, TextBlock

    # LlamaIndex's OpenAI message conversion joins text blocks into one string, so the endpoint
    # sees one user turn (no per-document split): the prefix cache does the reuse.
    notes = "\n\n".join(DOCS)
    return [ChatMessage(role="system", content=system),
            ChatMessage(role="user", blocks=[TextBlock(text=notes + "\n\n"), TextBlock(text=question)])]


def test_openai_like_second_request_reads_the_cache(openai_like, engine):
    first = openai_like.chat(li_messages("How often should I replace the chain?"))
    assert first.message.content == engine.generations[-1].text
    second = openai_like.chat(li_messages("What pressure for gravel tyres?"))
    g = engine.generations[-1]
    usage = second.raw.usage
    assert usage.prompt_tokens_details.cached_tokens == reuse(g) > 0.8 * usage.prompt_tokens
    assert usage.prompt_tokens == g.stats.prompt_tokens


async def test_openai_like_async(openai_like, engine):
    system = "Async LlamaIndex workshop assistant. Answer from the notes."
    await openai_like.achat(li_messages("When are lights required?", system=system))
    r = await openai_like.achat(li_messages("Which colour is the rear light?", system=system))
    assert r.raw.usage.prompt_tokens_details.cached_tokens == reuse(engine.generations[-1]) > 0
