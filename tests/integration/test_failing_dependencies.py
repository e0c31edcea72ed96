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
import threading
from typing import Any

import pytest
import torch

from ragcache.semantic import SemanticCache
from ragcache.testing import HashingEmbedder
from ragcache.testing.answer_contract import ScriptedBackend

DOCS = ["Backups run nightly at 02:30 UTC and are kept for 30 days.",
        "Deploys go out on Tuesdays after the change review meeting."]
Q = "When do the backups run?"
Q2 = "How long are the backups kept?"  # not an exact repeat of Q: its lookup needs the embedder
DEADLINE_S = 0.5


class FlakyEmbedder(HashingEmbedder):
    """The hashing embedder, switched to raise (``"raise"``) or hang until released (``"hang"``)."""

    def __init__(self) -> None:
        super().__init__()
        self.mode = "ok"
        self.release = threading.Event()

    def encode(self, texts: list[str]) -> Any:
        if self.mode == "raise":
            raise ConnectionError("embedding server unreachable")
        if self.mode == "hang":
            self.release.wait(30)
        return super().encode(texts)


@pytest.fixture()
def embedder(monkeypatch):
    from ragcache import boundary

    monkeypatch.setattr(boundary, "RETRY_S", 0.0)  # no back-off: every request tries the embedder again
    e = FlakyEmbedder()
    yield e
    e.release.set()


def _store(embedder: FlakyEmbedder) -> SemanticCache:
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
    embedder.mode = mode
    for call, question in ((2, Q2), (3, Q2), (4, "When are backups made?")):
        with caplog.at_level(logging.WARNING, logger="ragcache.answering"):
            a = rag.answer(question, DOCS)
        assert a.text == backend.text and not a.hit and backend.calls == call
    assert _warned(caplog, "lookup")
    assert len(store) == 1  # a miss without the embedder stores nothing
    embedder.mode = "ok"
    embedder.release.set()
    assert rag.answer(Q, DOCS).hit and backend.calls == 4  # back: served again


def test_async_ragcache_answers_without_a_failing_embedder(embedder):
    import asyncio

    from ragcache import RagCache

    backend = ScriptedBackend()
    rag = RagCache(backend, semantic=_store(embedder), lookup_timeout_s=DEADLINE_S)
    rag.answer(Q, DOCS)
    embedder.mode = "raise"
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
        embedder.mode = "ok"
        entry.ask(Q)  # stored while the embedder works
        stored = len(store)
        embedder.mode = mode
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
                embedder.mode = "ok" if call == 1 else mode  # the first is stored while the embedder works
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
    from ragcache.testing.local_servers import LocalValkey, ServerUnavailable

    try:
        server = LocalValkey()
    except ServerUnavailable as e:
        pytest.skip(str(e))
    yield server
    if server._proc is not None and server._proc.poll() is None:
        os.kill(server._proc.pid, signal.SIGCONT)
    server.close()


def test_answers_while_valkey_is_killed_or_frozen(tiny_seed1, valkey, monkeypatch, caplog):
    from ragcache import RagCache
    from ragcache.engine.backend import LocalBackend
    from ragcache import boundary
    from ragcache.engine.chunk.cache import ChunkCache
    from ragcache.engine.chunk.stores.redis_store import RedisChunkStore
    from ragcache.engine.engine import LocalEngine

    monkeypatch.setattr(boundary, "RETRY_S", 0.0)  # try the store again on every request
    docs = [d * 3 for d in DOCS]
    exact = RagCache(LocalBackend(LocalEngine(tiny_seed1, calibration=False)), semantic=None, max_new_tokens=6)
    want = exact.answer(Q, docs).text

    chunks = ChunkCache(RedisChunkStore(valkey.url, timeout_s=DEADLINE_S), dtype=torch.float32)
    engine = LocalEngine(tiny_seed1, chunk_cache=chunks, calibration=False, min_reuse_tokens=0, recompute_ratio=0.15,
                         chunk_admission=1, chunk_queue=0)
    rag = RagCache(LocalBackend(engine), semantic=None, max_new_tokens=6)

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
