"""The Anthropic adapter end to end: the official SDK (sync, async, streaming or not) against the
local server running a tiny random model. Usage numbers come from the server's caching rules."""

import copy
import os

import pytest

anthropic = pytest.importorskip("anthropic")
pytest.importorskip("starlette")

from ragcache.prompt.layout import PromptLayout  # noqa: E402
from ragcache.providers.anthropic.backend import AnthropicBackend  # noqa: E402
from ragcache.server.app import running_server  # noqa: E402
from ragcache.providers.anthropic.usage import PromptCacheWarning  # noqa: E402

MODEL = "claude-sonnet-4-6"  # minimum cacheable prefix: 1024 tokens
SYSTEM = ("You answer questions about the field notes below. Cite the note id you used. "
          "If the notes do not contain the answer, say that you do not know. ") * 3
TOOLS = [{"name": "search_notes", "description": "Full-text search over the field notes.",
          "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}]


def note(i: int) -> dict:
    animals = ["heron", "otter", "beaver", "kingfisher", "trout", "dragonfly", "newt", "vole"]
    text = " ".join(f"Observation {i}.{k}: the {animals[(i + k) % 8]} was seen near marker {i * 7 + k} "
                    f"on the east bank, feeding for about {3 + k} minutes." for k in range(3))
    return {"id": f"note-{i:02d}", "text": text, "metadata": {"site": f"river-{i % 3}"}}


NOTES = [note(i) for i in range(12)]


pytestmark = pytest.mark.engine("tiny")


@pytest.fixture(scope="module")
def base_url(engine):
    with running_server(engine) as url:
        yield url


@pytest.fixture()
def client(base_url):
    with anthropic.Anthropic(base_url=base_url, api_key="local", max_retries=0) as c:
        yield c


def layout(question, docs=NOTES, tools=(), system=SYSTEM):
    return PromptLayout.build(question=question, system=system, documents=docs, tools=tools, lint="off")


def backend(client, engine, **kw):
    return AnthropicBackend(client, MODEL, token_counter=engine.count_tokens, **kw)


def test_prefix_is_above_minimum(engine):
    lay = layout("q")
    prefix = engine.count_tokens(lay.system_text) + sum(engine.count_tokens(lay.render_document(d))
                                                        for d in lay.documents)
    assert 1100 < prefix < 1900  # above 1024, and fits the tiny model's 2048 positions


@pytest.mark.parametrize("stream", [False, True])
def test_second_request_reads_what_the_first_wrote(client, engine, stream):
    docs = [dict(n, metadata={"site": n["metadata"]["site"], "run": f"sync-{stream}"}) for n in NOTES]
    be = backend(client, engine, stream=stream)
    r1 = be.generate(layout("Where was the heron seen?", docs), max_new_tokens=3, temperature=0.0)
    r2 = be.generate(layout("How long did the otter feed?", list(reversed(docs))), max_new_tokens=3, temperature=0.0)
    assert r1.usage.cache_write > 1024 and r1.usage.cache_read == 0 and r1.layer == "provider"
    assert r2.usage.cache_read == r1.usage.cache_write
    assert r2.usage.cache_write == 0 and r2.layer == "provider-cache"
    assert r2.details["input_tokens"] < 20  # only the question is uncached
    assert r2.usage.cost_usd < 0.2 * r2.usage.uncached_cost_usd
    assert r1.ttft_s is not None and r2.details["diagnosis"] == []
    assert be.stats.requests == 2 and be.stats.cache_read_tokens == r2.usage.cache_read


@pytest.mark.parametrize("stream", [False, True])
async def test_async_client_reads_cache(base_url, engine, stream):
    async with anthropic.AsyncAnthropic(base_url=base_url, api_key="local", max_retries=0) as ac:
        be = AnthropicBackend(model=MODEL, async_client=ac, stream=stream, token_counter=engine.count_tokens)
        docs = [dict(n, metadata={"site": "async", "stream": str(stream)}) for n in NOTES]
        r1 = await be.agenerate(layout("Which animal fed longest?", docs), max_new_tokens=2)
        r2 = await be.agenerate(layout("Which marker had the newt?", docs), max_new_tokens=2)
    assert r1.usage.cache_write > 0
    assert r2.usage.cache_read == r1.usage.cache_write and r2.usage.cache_write == 0


def test_changed_tool_list_is_a_full_miss(client, engine):
    docs = [dict(n, metadata={"site": "tools"}) for n in NOTES]
    be = backend(client, engine, warn=False)
    r1 = be.generate(layout("q1", docs, tools=TOOLS), max_new_tokens=2)
    r2 = be.generate(layout("q2", docs, tools=TOOLS), max_new_tokens=2)
    assert r2.usage.cache_read == r1.usage.cache_write > 0
    tools2 = copy.deepcopy(TOOLS)
    tools2[0]["description"] = "Full-text search over the field notes, newest first."
    r3 = be.generate(layout("q3", docs, tools=tools2), max_new_tokens=2)
    assert r3.usage.cache_read == 0 and r3.usage.cache_write > 0
    assert any("prefix changed at block 0" in d for d in r3.details["diagnosis"])


def test_below_minimum_gives_no_write_no_read_and_is_reported(client, engine):
    small = layout("What was seen?", NOTES[:2], system="Answer from the notes.")
    be = backend(client, engine)
    with pytest.warns(PromptCacheWarning, match="no breakpoint placed"):
        r = be.generate(small, max_new_tokens=2)
    assert r.usage.cache_write == r.usage.cache_read == 0
    assert r.details["breakpoints"] == [] and "below the minimum 1024" in r.details["skipped_breakpoints"][-1]
    # the same small prefix with a caller-forced marker: the server caches nothing either
    msg = client.messages.create(model=MODEL, max_tokens=2, system=[
        {"type": "text", "text": "Answer from the notes.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "What was seen?"}])
    assert msg.usage.cache_creation_input_tokens == msg.usage.cache_read_input_tokens == 0
    be2 = backend(client, engine)
    req = be2.caching.prepare({"max_tokens": 2, "system": [{"type": "text", "text": "Answer from the notes.",
                                                             "cache_control": {"type": "ephemeral"}}],
                               "messages": [{"role": "user", "content": "What was seen?"}]})
    with pytest.warns(PromptCacheWarning, match="below the minimum"):
        be2.caching.record(req, client.messages.create(**req.kwargs).usage)


def test_25_documents_never_more_than_4_breakpoints(client, engine):
    docs = [{"id": f"s{i:02d}", "text": f"Short note {i} about the weir and its fish ladder. " * 3} for i in range(25)]
    be = backend(client, engine)
    lay = PromptLayout.build(question="What about the weir?", system=SYSTEM * 3, tools=TOOLS, documents=docs)
    r1 = be.generate(lay, max_new_tokens=2)
    assert 1 <= len(r1.details["breakpoints"]) <= 4
    r2 = be.generate(PromptLayout.build(question="Anything else?", system=SYSTEM * 3, tools=TOOLS, documents=docs),
                     max_new_tokens=2)
    assert r2.usage.cache_read == r1.usage.cache_write > 0


def test_ttl_expiry_is_diagnosed(engine):
    class Clock:
        t = 0.0

        def __call__(self):
            return self.t

    clock = Clock()
    with running_server(engine, clock=clock) as url, anthropic.Anthropic(base_url=url, api_key="x") as c:
        be = backend(c, engine, clock=clock)
        docs = [dict(n, metadata={"site": "ttl"}) for n in NOTES]
        r1 = be.generate(layout("q1", docs), max_new_tokens=2)
        clock.t += 299
        assert be.generate(layout("q2", docs), max_new_tokens=2).usage.cache_read == r1.usage.cache_write
        clock.t += 299  # refreshed by the hit: still live
        assert be.generate(layout("q3", docs), max_new_tokens=2).usage.cache_read > 0
        clock.t += 301
        with pytest.warns(PromptCacheWarning, match="TTL expired"):
            r4 = be.generate(layout("q4", docs), max_new_tokens=2)
        assert r4.usage.cache_read == 0 and r4.usage.cache_write == r1.usage.cache_write


def test_adapter_does_not_mutate_caller_objects(client, engine):
    docs = copy.deepcopy(NOTES)
    tools = copy.deepcopy(TOOLS)
    history = [{"role": "user", "content": [{"type": "text", "text": "Earlier question",
                                             "cache_control": {"type": "ephemeral"}}]},
               {"role": "assistant", "content": "Earlier answer"}]
    snap = copy.deepcopy((docs, tools, history))
    lay = PromptLayout.build(question="q", system=SYSTEM, tools=tools, documents=docs, history=history, lint="off")
    backend(client, engine).generate(lay, max_new_tokens=2)
    assert (docs, tools, history) == snap


@pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"), reason="ANTHROPIC_API_KEY is not set: live API test skipped")
def test_live_api_reads_cache():  # pragma: no cover - needs network and a key
    model = os.environ.get("RAGCACHE_LIVE_MODEL", "claude-haiku-4-5")
    client = anthropic.Anthropic()
    be = AnthropicBackend(client, model, stream=False)
    docs = [note(i) for i in range(60)]  # well above every model's minimum
    r1 = be.generate(layout("Where was the heron seen?", docs), max_new_tokens=8)
    r2 = be.generate(layout("Where was the otter seen?", docs), max_new_tokens=8)
    assert r1.usage.cache_write + r1.usage.cache_read > 0
    assert r2.usage.cache_read > 0
