"""The answer-path contract's entry points over a notes folder (RagCache, ``ragcache ask`` in-process),
shared by the unit contract and the ``ragcache ask`` process contract; at their defaults, a LangChain
chain and the LlamaIndex query engine too (the defaults case); and RagCache's entries of the tenant
case (:class:`~ragcache.testing.answer_contract.TenantKVContract`) over a local engine.
``ragcache ask`` has no tenant case: it is one user's command, its requests are the default tenant's.
Also the LlamaIndex and proxy doubles of every contract test (fixed nodes and retriever, a scripted
backend, a scripted Anthropic upstream) and :class:`Text`, a prompt as the scripted model reads it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from ragcache.answering import Answer
from ragcache.backend import CacheUsage
from ragcache.provenance import Provenance
from ragcache.testing.answer_contract import TENANT_DOCS, TENANT_SYSTEM, ScriptedBackend


def _notes(folder: Path) -> Path:
    folder.mkdir()
    (folder / "backups.md").write_text("# Backups\n\nBackups run nightly at 02:30 UTC and are kept for 30 days.\n")
    (folder / "deploy.txt").write_text("Deploys go out on Tuesdays after the change review meeting.\n")
    return folder


def notes_folder(tmp_path, monkeypatch) -> Path:
    """A notes folder and a fresh $RAGCACHE_HOME whose default answer store every entry point uses."""
    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAGCACHE_THREADS", "1")
    for var in ("RAGCACHE_ANSWERS_DIR", "RAGCACHE_INDEX_DIR", "RAGCACHE_KV_DIR", "RAGCACHE_SEMANTIC_URL"):
        monkeypatch.delenv(var, raising=False)
    return _notes(tmp_path / "notes")


class RagCacheEntry:
    """``RagCache(backend)`` at its defaults (the default answer store) over the folder's chunks,
    with the CLI's system text and budget."""

    name = "RagCache"
    stores_length = True  # the one rule (ragcache.answering.CACHE_TRUNCATED): served to the same budget only

    def __init__(self, backend: ScriptedBackend, folder: Path) -> None:
        from ragcache import RagCache
        from ragcache.app.corpus import scan_folder
        from ragcache.config import Config
        from ragcache.pipeline import DEFAULT_SYSTEM

        self.docs = [{"id": c.id, "text": c.text} for c in scan_folder(folder).chunks()]
        self.rag = RagCache(backend, system=DEFAULT_SYSTEM, max_new_tokens=Config.from_env().max_new_tokens)

    def ask(self, question: str) -> Answer:
        return self.rag.answer(question, self.docs)


class AskEntry:
    """``ragcache ask`` in-process (:func:`ragcache.app.ask.ask`), its model replaced by the backend."""

    name = "ragcache ask"
    stores_length = True  # the one rule (ragcache.answering.CACHE_TRUNCATED): served to the same budget only

    def __init__(self, backend: ScriptedBackend, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr("ragcache.app.ask.LazyLocalBackend", lambda *a, **k: backend)
        self.folder = folder

    def ask(self, question: str) -> Answer:
        from ragcache.app.ask import ask
        from ragcache.config import Config

        return ask(question, self.folder, cfg=Config.from_env(), quiet=True).answer


class RagCacheTenantEntry:
    """``RagCache(LocalBackend(engine))`` without an answer cache, its requests ``tenant``'s: the facade's
    ``namespace=`` (``sync`` / ``async``) or each call's (``per-call``)."""

    stores_length = False

    def __init__(self, engine: Any, tenant: str, mode: str) -> None:
        from ragcache import RagCache
        from ragcache.engine.backend import LocalBackend

        self.name, self.mode, self.tenant = f"RagCache {mode}", mode, tenant
        ns = "default" if mode == "per-call" else tenant
        self.rag = RagCache(LocalBackend(engine), semantic=None, system=TENANT_SYSTEM, namespace=ns, max_new_tokens=2)

    def ask(self, question: str) -> Answer:
        if self.mode == "async":
            return asyncio.run(self.rag.aanswer(question, list(TENANT_DOCS)))
        if self.mode == "per-call":
            return self.rag.answer(question, list(TENANT_DOCS), namespace=self.tenant)
        return self.rag.answer(question, list(TENANT_DOCS))


def _chunks(folder: Path) -> list:
    from ragcache.app.corpus import scan_folder

    return list(scan_folder(folder).chunks())


class Text:
    """What :class:`ScriptedBackend` reads of a prompt (``render()``)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def render(self) -> str:
        return self.text


def fixed_nodes(texts: list[str]) -> list:
    """``texts`` as LlamaIndex nodes (ids ``n0``, ``n1``, ...), each scored 1.0."""
    from llama_index.core.schema import NodeWithScore, TextNode

    return [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=1.0) for i, t in enumerate(texts)]


def fixed_retriever(nodes: list) -> Any:
    """A LlamaIndex retriever that returns ``nodes`` for every query."""
    from llama_index.core.retrievers import BaseRetriever

    class Fixed(BaseRetriever):
        def _retrieve(self, query_bundle: Any) -> list:
            return list(nodes)

    return Fixed()


def scripted_llamaindex_backend(backend: ScriptedBackend, llm: Any, *, declares_blend: bool = False) -> Any:
    """A LlamaIndex backend on ``llm`` whose answers (``generate``, ``agenerate``, and ``stream`` /
    ``astream``: the text in two pieces, then the result) come from the scripted ``backend``, under its
    name and model id. ``declares_blend``: it declares the scripted model's blend setting (as a
    RagCacheLLM declares its engine's); else the LLM's (none for MockLLM)."""
    from llama_index.query_engine.ragcache.backend import LlamaIndexBackend

    class Scripted(LlamaIndexBackend):
        name = property(lambda self: backend.name)  # type: ignore[assignment]
        model_id = property(lambda self: backend.model_id)  # type: ignore[assignment]
        if declares_blend:
            blend_setting = property(lambda self: backend.blend_setting)  # type: ignore[assignment]

        def generate(self, layout: Any, *, max_new_tokens: int, temperature: float, tenant: Any = None) -> Any:
            return backend.generate(layout, max_new_tokens=max_new_tokens, temperature=temperature, tenant=tenant)

        async def agenerate(self, layout: Any, *, max_new_tokens: int, temperature: float,
                            tenant: Any = None) -> Any:
            return await backend.agenerate(layout, max_new_tokens=max_new_tokens, temperature=temperature,
                                           tenant=tenant)

        def stream(self, layout: Any, *, tenant: Any = None) -> Any:
            r = backend.generate(layout, max_new_tokens=0, temperature=0.0, tenant=tenant)
            yield r.text[:7]
            yield r.text[7:]
            yield r

        async def astream(self, layout: Any, *, tenant: Any = None) -> Any:
            for item in self.stream(layout, tenant=tenant):
                yield item

    return Scripted(llm)


ANTHROPIC_STOP = {"stop": "end_turn", "length": "max_tokens", "refusal": "refusal", "incomplete": None}


def scripted_upstream(backend: ScriptedBackend) -> Any:
    """An Anthropic Messages server (JSON and SSE) answering with the scripted model: ``incomplete`` is a
    null stop reason (JSON) or a stream cut before its ``message_delta``."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    async def messages(request: Request) -> Any:
        body = await request.json()
        text = json.dumps(body["messages"])
        r = await backend.agenerate(Text(text), max_new_tokens=body["max_tokens"], temperature=0.0)
        stop = ANTHROPIC_STOP[r.finish_reason]
        usage = {"input_tokens": r.usage.prompt_tokens, "output_tokens": r.usage.completion_tokens,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        msg = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
               "content": [{"type": "text", "text": r.text}], "stop_reason": stop, "stop_sequence": None,
               "usage": usage}
        if not body.get("stream"):
            return JSONResponse(msg)

        def ev(kind: str, data: dict) -> bytes:
            return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

        async def events() -> Any:
            yield ev("message_start", {"type": "message_start", "message": {**msg, "content": [], "stop_reason": None}})
            yield ev("content_block_start", {"type": "content_block_start", "index": 0,
                                             "content_block": {"type": "text", "text": ""}})
            yield ev("content_block_delta", {"type": "content_block_delta", "index": 0,
                                             "delta": {"type": "text_delta", "text": r.text}})
            yield ev("content_block_stop", {"type": "content_block_stop", "index": 0})
            if stop is not None:  # else: cut before the end
                yield ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop,
                                                                              "stop_sequence": None},
                                           "usage": {"output_tokens": r.usage.completion_tokens}})
                yield ev("message_stop", {"type": "message_stop"})

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])


class LangChainEntry:
    """The LangChain guide's chain at its defaults: ``RagPrompt(system=...) | ChatRagCache(cache=
    RagCacheSemanticCache())`` (the default answer store, the default budget) over LangChain
    ``Document``s with random ids, as ``InMemoryVectorStore`` gives them: each entry (each "process")
    draws new ids. ChatRagCache's identity is the tiny random engine's; its answer is the scripted
    model's."""

    name = "LangChain"
    stores_length = True

    def __init__(self, backend: ScriptedBackend, folder: Path) -> None:
        import uuid

        from langchain_core.documents import Document
        from langchain_core.outputs import ChatGeneration, ChatResult
        from langchain_ragcache import ChatRagCache, RagCacheSemanticCache, RagPrompt
        from langchain_ragcache.chat_models import TINY_RANDOM_MODEL, shared_engine

        class Scripted(ChatRagCache):
            def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
                r = backend.generate(Text(" ".join(m.text for m in messages)), max_new_tokens=self.max_tokens,
                                     temperature=0.0)
                return ChatResult(generations=[ChatGeneration(message=self._message(r, []))])

        self.docs = [Document(page_content=c.text, id=str(uuid.uuid4())) for c in _chunks(folder)]
        llm = Scripted(engine=shared_engine(TINY_RANDOM_MODEL, chunk_cache=False), cache=RagCacheSemanticCache())
        self.chain = RagPrompt(system="Answer the question from the documents in one sentence.") | llm

    def ask(self, question: str) -> Answer:
        from langchain_ragcache.results import finish_reason_of

        msg = self.chain.invoke({"question": question, "context": list(reversed(self.docs))})
        rec = msg.response_metadata["ragcache"]
        return Answer(question, msg.text, rec["layer"], CacheUsage(), provenance=Provenance.from_metadata(
            {"layer": rec["layer"], "finish_reason": rec.get("finish_reason") or finish_reason_of(msg)}))


class LlamaIndexEntry:
    """``RagCacheQueryEngine`` at its defaults (the default answer store, the LLM's default budget) over
    nodes with random ids, as a fresh index gives them; its LLM backend calls the scripted model."""

    name = "LlamaIndex"
    stores_length = True

    def __init__(self, backend: ScriptedBackend, folder: Path) -> None:
        from llama_index.core.llms import MockLLM
        from llama_index.core.schema import NodeWithScore, TextNode
        from llama_index.query_engine.ragcache import RagCacheQueryEngine

        nodes = [NodeWithScore(node=TextNode(text=c.text), score=1.0 - i / 10) for i, c in enumerate(_chunks(folder))]
        self.engine = RagCacheQueryEngine(fixed_retriever(nodes), MockLLM(), system_prompt="Answer from the documents.")
        self.engine._backend = scripted_llamaindex_backend(backend, MockLLM())

    def ask(self, question: str) -> Answer:
        resp = self.engine.query(question)
        m = resp.metadata
        return Answer(question, str(resp), m["layer"], CacheUsage(),
                      provenance=Provenance.from_metadata({"layer": m["layer"], "finish_reason": m["finish_reason"]}))


def restart_in_process() -> None:
    """What a process restart does to the default answer store: every open default cache is flushed
    and closed, so the next entry point reopens it from disk (its FAISS snapshots and SQLite rows)."""
    from ragcache.semantic import defaults

    defaults._close_all()
