"""A cache dependency that is down or hangs costs a logged miss, never the answer (issue 39, section 2).

- Valkey (the remote chunk store) killed or frozen mid-run: ``answer()`` still answers, by exact prefill
  (the answer equals an engine's without any chunk cache), and the store is tried again later;
- an embedder that raises or hangs: RagCache, the LangChain adapter (``RagCacheSemanticCache`` as the LLM
  cache of ``ChatRagCache``, and the middleware) and the Anthropic proxy answer through the model (the
  proxy forwards), store nothing, and log it; a hanging one costs at most the lookup deadline;
- misconfiguration still fails at start-up (a bad deadline).
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

import pytest
from fault_doubles import DOCS, Q, Q2, Fault, FaultyEmbedder, engine_rag, exact_answer_of, own_valkey

from ragcache.semantic import SemanticCache
from ragcache.testing.answer_contract import ScriptedBackend

DEADLINE_S = 0.5


@pytest.fixture()
def embedder(monkeypatch):
    """An embedder switched to raise (``embedder.fault.mode = "raise"``) or hang until released (``"hang"``)."""
    from ragcache import boundary

    monkeypatch.setattr(boundary, "RETRY_S", 0.0)  # no back-off: every request tries the embedder again
    e = FaultyEmbedder(Fault(ConnectionError("embedding server unreachable")))
    yield e
    e.fault.release.set()


def _store(embedder: FaultyEmbedder) -> SemanticCache:
    return SemanticCache(None, embedder=embedder)


def _warned(caplog, word: str) -> bool:
    return any(word in r.getMessage() and r.levelno >= logging.WARNING for r in caplog.records)


# ---------------------------------------------------------------------------------------------- the embedder
@pytest.mark.parametrize("mode", ["raise", "hang"])
def test_ragcache_answers_without_a_failing_embedder(embedder, mode, caplog):
    from ragcache import RagCache

    backend = ScriptedBackend()
    store = _store(embedder)
    rag = RagCache(backend, semantic=store, lookup_timeout_s=DEADLINE_S)
    rag.answer(Q, DOCS)  # stored while the embedder works (an exact repeat then hits without it)
    embedder.fault.mode = mode
    for call, question in ((2, Q2), (3, Q2), (4, "When are backups made?")):
        with caplog.at_level(logging.WARNING, logger="ragcache.answering"):
            a = rag.answer(question, DOCS)
        assert a.text == backend.text and not a.hit and backend.calls == call
    assert _warned(caplog, "lookup")
    assert len(store) == 1  # a miss without the embedder stores nothing
    embedder.fault.mode = "ok"
    embedder.fault.release.set()
    assert rag.answer(Q, DOCS).hit and backend.calls == 4  # back: served again


def test_async_ragcache_answers_without_a_failing_embedder(embedder):
    import asyncio

    from ragcache import RagCache

    backend = ScriptedBackend()
    rag = RagCache(backend, semantic=_store(embedder), lookup_timeout_s=DEADLINE_S)
    rag.answer(Q, DOCS)
    embedder.fault.mode = "raise"
    a = asyncio.run(rag.aanswer(Q2, DOCS))
    assert a.text == backend.text and not a.hit and backend.calls == 2


def test_a_bad_deadline_fails_at_start_up():
    from ragcache import RagCache

    for bad in (0, -1.0, float("nan"), float("inf"), "5"):
        with pytest.raises(ValueError):
            RagCache(ScriptedBackend(), semantic=None, lookup_timeout_s=bad)


@pytest.mark.parametrize("mode", ["raise", "hang"])
def test_langchain_answers_without_a_failing_embedder(embedder, mode, caplog, monkeypatch):
    pytest.importorskip("langchain")
    from integration.test_answer_contract_adapters import ChatRagCacheEntry, MiddlewareEntry

    import langchain_ragcache.cache as lc_cache
    from ragcache.answering import AnswerPath

    monkeypatch.setattr(lc_cache, "AnswerPath", lambda *a, **kw: AnswerPath(*a, **{**kw, "lookup_timeout_s": DEADLINE_S}))
    for make in (lambda b, s: ChatRagCacheEntry(b, s, "invoke"), lambda b, s: ChatRagCacheEntry(b, s, "stream"),
                 lambda b, s: MiddlewareEntry(b, s, "sync")):
        backend, store = ScriptedBackend(), _store(embedder)
        entry = make(backend, store)
        embedder.fault.mode = "ok"
        entry.ask(Q)  # stored while the embedder works
        stored = len(store)
        embedder.fault.mode = mode
        with caplog.at_level(logging.WARNING, logger="ragcache.answering"):
            first, second = entry.ask(Q2), entry.ask(Q2)
        assert first.text == second.text == backend.text and backend.calls == 3, entry.name
        assert first.layer != "semantic" and second.layer != "semantic"
        assert len(store) == stored, entry.name  # nothing stored without the embedder
    assert _warned(caplog, "lookup")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("mode", ["raise", "hang"])
def test_the_proxy_forwards_without_a_failing_embedder(embedder, mode, stream):
    anthropic = pytest.importorskip("anthropic")
    from contract_entries import scripted_upstream

    from ragcache.providers.anthropic.backend import sdk_kwargs
    from ragcache.server.app import running_server
    from ragcache.server.proxy import AnthropicProxy

    backend, store = ScriptedBackend(), _store(embedder)
    with running_server(None, app=scripted_upstream(backend)) as up:
        proxy = AnthropicProxy(up, semantic=store, api_key="k", lookup_timeout_s=DEADLINE_S)
        with running_server(None, app=proxy.app) as url:
            client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
            for call in (1, 2, 3):
                embedder.fault.mode = "ok" if call == 1 else mode  # the first is stored while the embedder works
                content = [{"type": "text", "text": d} for d in DOCS] + [{"type": "text", "text": Q if call == 1 else Q2}]
                body = {"model": "claude-sonnet-4-6", "max_tokens": 64, "temperature": 0,
                        "messages": [{"role": "user", "content": content}]}
                if stream:
                    with client.messages.stream(**sdk_kwargs(client.messages.stream, body)) as s:
                        layer = s.response.headers["x-ragcache-layer"]
                        text = "".join(s.text_stream)
                else:
                    raw = client.messages.with_raw_response.create(**sdk_kwargs(client.messages.create, body))
                    layer, text = raw.headers["x-ragcache-layer"], raw.parse().content[0].text
                assert layer == "provider" and text == backend.text and backend.calls == call
    assert len(store) == 1


# ---------------------------------------------------------------------------------------------- Valkey
@pytest.fixture()
def valkey():
    yield from own_valkey()


def test_answers_while_valkey_is_killed_or_frozen(tiny_seed1, valkey, monkeypatch, caplog):
    from ragcache import boundary
    from ragcache.engine.chunk.stores.redis_store import RedisChunkStore

    monkeypatch.setattr(boundary, "RETRY_S", 0.0)  # try the store again on every request
    docs = [d * 3 for d in DOCS]
    want = exact_answer_of(tiny_seed1, docs)
    engine, rag = engine_rag(tiny_seed1, RedisChunkStore(valkey.url, timeout_s=DEADLINE_S))

    def ask() -> Any:
        engine.prefix_cache.clear()  # every request reads its documents from the chunk store
        return rag.answer(Q, docs)

    assert ask().text == want  # a miss: exact; stores both documents' KV in Valkey
    assert ask().usage.chunk_reused > 0  # read back from Valkey (blended: approximate)

    valkey.stop()  # killed mid-run
    with caplog.at_level(logging.WARNING, logger="ragcache.engine.chunk.bound"):  # the chunk store's boundary logs here
        down = ask()
    assert down.text == want and down.usage.chunk_reused == 0 and not down.approximate
    assert _warned(caplog, "chunk store failed")

    valkey.start()  # back (empty: no persistence): stored again, then reused
    assert ask().text == want and ask().usage.chunk_reused > 0

    os.kill(valkey._proc.pid, signal.SIGSTOP)  # frozen: every call runs into the store's timeout
    try:
        frozen = ask()
        assert frozen.text == want and frozen.usage.chunk_reused == 0
    finally:
        os.kill(valkey._proc.pid, signal.SIGCONT)
